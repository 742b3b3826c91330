/* nn.TransformerEncoderLayer / TransformerEncoder: outputs against PyTorch
 * 1.13 (tests/fixtures/encoder_reference.py prints the expected values),
 * state-dict names, init order, gradients, train/eval dropout and errors. */
#include "testutil.h"

/* The reference configuration: d_model 8, 2 heads, feed-forward 16, B 2, T 3. */
enum { D = 8, NH = 2, DFF = 16, B = 2, T = 3 };

/* Expected outputs [B, T, D] from encoder_reference.py (PyTorch, float64). */
static const double want_post_relu_masked[] = {
    0.73556981453322257, 0.60500317887155919, -0.50883141564011913,
    -0.67352577814266756, -0.52963815777680578, -0.94928211725182332,
    -0.23943518070671166, 0.71620643344515744, 0.76604865619915119,
    0.50514384851935235, -0.58545899499310783, -0.62012844005606771,
    -0.56062456381101466, -0.93777929169896446, -0.10609140726386589,
    0.71329258805520568, 0.73667536646408371, 0.60553556938298592,
    -0.5098572001324071, -0.67516124501732522, -0.52861782626135723,
    -0.94773170635059989, -0.2448459796062305, 0.71346689687486531,
    0.77196268326718265, 0.50449555297228099, -0.58442082873416779,
    -0.61516865845172486, -0.56208135871688025, -0.9312945345993644,
    -0.088188752608422905, 0.71602756655540456, 0.68865635312044837,
    0.64754772683029738, -0.45551855398831631, -0.70875676250141639,
    -0.50678584034848395, -0.96170411970648184, -0.37288686522216413,
    0.69153929389414792, 0.77223684761188793, 0.50659230139744316,
    -0.58220247787917301, -0.61517049776146615, -0.56184657620859546,
    -0.93085301212626803, -0.086780377928981814, 0.71747232222805413,
};
static const double want_pre_gelu_masked[] = {
    -3.5891497826869019, -1.8813857346539953, 1.118162650747615,
    2.6374020657077009, 2.7026632127705548, 3.0999821393007485,
    3.6857183456435165, 2.3091130246882772, -3.901019380770089,
    -3.4079695270364758, -1.2854646901423912, -0.34669731631680506,
    -0.51827377292592192, 0.18328494807014906, 1.6449169556353165,
    1.400968835265505, -3.952878857522907, -2.4998828269676938,
    0.41422064371114009, 2.1370795939200846, 2.5480485654916585,
    3.2478273946869387, 4.0884940732321491, 2.9789775358378137,
    -3.4685640593804252, -3.1838168429172615, -1.147361717594428,
    -0.33380007709078502, -0.6422866266051801, 0.09755671401074606,
    1.7526539544795354, 1.5529819358140218, -4.3150489238964855,
    -2.9417508763036611, -0.063469049605678229, 1.7450429863864687,
    2.3056956501293357, 3.1327391978122625, 4.1064603809149034,
    3.218278111786411, -3.1251045235205357, -2.3470469727983985,
    -0.12151859045310376, 0.37673307101222492, -0.41305363038287002,
    0.055362656618725747, 1.5754051575285886, 1.1157690193011742,
};
static const double want_post_relu_plain[] = {
    0.73688384953280495, 0.60327432367747935, -0.5102318183236455,
    -0.67256939133851834, -0.5301236836260832, -0.94876340947511195,
    -0.23668702937412714, 0.71646805095565946, 0.76588695162764742,
    0.50540698548352103, -0.58529181262169927, -0.62007157023847848,
    -0.56068258787723657, -0.93782737653494985, -0.10566599528478657,
    0.71344050644653423, 0.73028598934859656, 0.61291944362357909,
    -0.5019898742488782, -0.6804735801577344, -0.52544815617261897,
    -0.95028555655242075, -0.26279771701976684, 0.71150392858695122,
    0.77399335214597664, 0.50464315442666063, -0.584470701434325,
    -0.61403341253160815, -0.56236269303254705, -0.92898810012902222,
    -0.083588591409812382, 0.71628203482194608, 0.6910241998823814,
    0.6461988084932706, -0.45788428209776488, -0.70774385792990224,
    -0.50749968707438309, -0.96097639409517421, -0.36835842284960008,
    0.69233038634454203, 0.77223684761188793, 0.50659230139744316,
    -0.58220247787917301, -0.61517049776146615, -0.56184657620859546,
    -0.93085301212626803, -0.086780377928981814, 0.71747232222805413,
};
static const double want_encoder2_final_norm[] = {
    0.49967805534949616, 0.062161282137270318, -0.42018400743294432,
    0.2981162535678934, -0.17761167279258686, -0.54358641473507241,
    -0.9196374533396473, -0.19781549685585326, 0.49976790498731083,
    0.061806406406356568, -0.42083065491825022, 0.29976517327690244,
    -0.17718953446440847, -0.54401997416303838, -0.91604470235129942,
    -0.19978400334107008, 0.49964287547026059, 0.061889713497707124,
    -0.42037400189984475, 0.29830969396046442, -0.17697351349827764,
    -0.54339500695908738, -0.91824847980301738, -0.19905681573732442,
    0.49971711025857324, 0.061473079700463534, -0.42136691694295442,
    0.30019931474430173, -0.17639201687030359, -0.54388304516925068,
    -0.91381309210741735, -0.20155303860823515, 0.49961720285157507,
    0.062260361050328832, -0.4194937195898758, 0.29742811441045341,
    -0.17752947244488759, -0.54318411450025261, -0.92147003537082706,
    -0.19636936560113519, 0.49975792166767152, 0.061770987302017195,
    -0.42103890453260157, 0.29984985913409062, -0.17712709624342216,
    -0.54405264315778901, -0.91562533540166069, -0.20012664018083459,
};

static const char *const layer_names[] = {
    "self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
    "self_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight",
    "linear2.bias", "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias",
};
enum { N_LAYER_PARAMS = 12 };

static tg_encoder_config config(tg_activation act, bool norm_first, double dropout)
{
    return (tg_encoder_config){.d_model = D, .nhead = NH, .dim_feedforward = DFF,
                               .dropout = dropout, .layer_norm_eps = 1e-5,
                               .activation = act, .norm_first = norm_first};
}

/* Sets the k-th parameter of ps, flat index i, to 0.5 sin(0.7 i + 1.3 k + 0.1),
 * as encoder_reference.py does by state_dict position. */
static void fill_params(const tg_params *ps)
{
    for (int k = 0; k < ps->count; k++) {
        tg_tensor *p = ps->tensors[k];
        ck_assert(tg_is_contiguous(p));
        for (int64_t i = 0; i < tg_numel(p); i++) {
            double v = 0.5 * sin(0.7 * (double)i + 1.3 * k + 0.1);
            if (tg_dtype_of(p) == TG_FLOAT32)
                ((float *)tg_data(p))[i] = (float)v;
            else
                ((double *)tg_data(p))[i] = v;
        }
    }
}

/* The reference input [B, T, D]: 1.5 sin(0.37 i + 0.2). */
static tg_tensor *make_src(tg_dtype dtype)
{
    double v[B * T * D];
    for (int i = 0; i < B * T * D; i++)
        v[i] = 1.5 * sin(0.37 * i + 0.2);
    return make(dtype, 3, SHAPE(B, T, D), v);
}

/* Causal [T, T] (true above the diagonal) and padding [B, T] (batch 0's last key). */
static tg_tensor *causal_mask(void)
{
    return make(TG_BOOL, 2, SHAPE(T, T), (const double[]){0, 1, 1, 0, 0, 1, 0, 0, 0});
}
static tg_tensor *padding_mask(void)
{
    return make(TG_BOOL, 2, SHAPE(B, T), (const double[]){0, 0, 1, 0, 0, 0});
}

/* Builds a layer with the reference parameters, runs it on the reference
 * input (with both masks when masked) and compares with want. */
static void check_layer_parity(tg_activation act, bool norm_first, bool masked,
                               const double *want)
{
    tg_dtype dtypes[] = {TG_FLOAT64, TG_FLOAT32};
    for (int k = 0; k < 2; k++) {
        tg_rng *rng = tg_rng_new(5);
        tg_encoder_config c = config(act, norm_first, 0.0);
        tg_encoder_layer *m = tg_encoder_layer_new(&c, dtypes[k], rng);
        ck_assert_ptr_nonnull(m);
        tg_params ps = {0};
        ck_assert_int_eq(tg_encoder_layer_params(m, NULL, &ps), 0);
        fill_params(&ps);
        tg_tensor *src = make_src(dtypes[k]);
        tg_tensor *mask = masked ? causal_mask() : NULL, *pad = masked ? padding_mask() : NULL;
        tg_tensor *y = tg_encoder_layer_forward(m, src, mask, pad);
        ck_assert_msg(y != NULL, "%s", tg_error_message());
        ck_assert_shape(y, B, T, D);
        assert_values(y, want, B * T * D, dtypes[k] == TG_FLOAT64 ? 1e-10 : 1e-5);
        tg_release(y);
        tg_release(src);
        tg_release(mask);
        tg_release(pad);
        tg_params_clear(&ps);
        tg_encoder_layer_free(m);
        tg_rng_free(rng);
    }
}

/* ---- parity with PyTorch -------------------------------------------------- */

START_TEST(layer_param_names_match_pytorch_state_dict)
{
    tg_rng *rng = tg_rng_new(1);
    tg_encoder_config c = config(TG_ACT_RELU, false, 0.1);
    tg_encoder_layer *m = tg_encoder_layer_new(&c, TG_FLOAT32, rng);
    ck_assert_ptr_nonnull(m);
    tg_params ps = {0};
    ck_assert_int_eq(tg_encoder_layer_params(m, NULL, &ps), 0);
    ck_assert_int_eq(ps.count, N_LAYER_PARAMS);
    for (int i = 0; i < N_LAYER_PARAMS; i++)
        ck_assert_str_eq(ps.names[i], layer_names[i]);
    ck_assert_shape(tg_params_find(&ps, "self_attn.in_proj_weight"), 3 * D, D);
    ck_assert_shape(tg_params_find(&ps, "linear1.weight"), DFF, D);
    ck_assert_shape(tg_params_find(&ps, "linear2.weight"), D, DFF);
    ck_assert_shape(tg_params_find(&ps, "norm2.bias"), D);
    ck_assert_ptr_eq(tg_params_find(&ps, "linear2.bias"), m->linear2->bias);
    /* Parameters: 3 D^2 + 3 D + D^2 + D + 2 (D DFF) + DFF + D + 4 D. */
    ck_assert_int_eq(tg_params_numel(&ps), 4 * D * D + 9 * D + 2 * D * DFF + DFF);
    tg_params_clear(&ps);
    ck_assert_int_eq(tg_encoder_layer_params(m, "enc.layers.3", &ps), 0);
    ck_assert_str_eq(ps.names[0], "enc.layers.3.self_attn.in_proj_weight");
    ck_assert_str_eq(ps.names[11], "enc.layers.3.norm2.bias");
    /* A clash part way through adds nothing. */
    tg_params_clear(&ps);
    ck_assert_int_eq(tg_params_add(&ps, NULL, "linear2.weight", m->norm1->weight), 0);
    ck_assert_int_eq(tg_encoder_layer_params(m, NULL, &ps), -1);
    ck_assert_error(TG_ERR_VALUE, "duplicate", "linear2.weight");
    ck_assert_int_eq(ps.count, 1);
    tg_params_clear(&ps);
    tg_encoder_layer_free(m);
    tg_rng_free(rng);
}
END_TEST

START_TEST(encoder_param_names_match_pytorch_state_dict)
{
    tg_rng *rng = tg_rng_new(2);
    tg_encoder_config c = config(TG_ACT_GELU, true, 0.0);
    tg_encoder *m = tg_encoder_new(&c, 2, true, TG_FLOAT32, rng);
    ck_assert_ptr_nonnull(m);
    tg_params ps = {0};
    ck_assert_int_eq(tg_encoder_params(m, NULL, &ps), 0);
    ck_assert_int_eq(ps.count, 2 * N_LAYER_PARAMS + 2);
    char want[96];
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < N_LAYER_PARAMS; i++) {
            snprintf(want, sizeof want, "layers.%d.%s", l, layer_names[i]);
            ck_assert_str_eq(ps.names[l * N_LAYER_PARAMS + i], want);
        }
    ck_assert_str_eq(ps.names[24], "norm.weight");
    ck_assert_str_eq(ps.names[25], "norm.bias");
    tg_params_clear(&ps);
    ck_assert_int_eq(tg_encoder_params(m, "encoder", &ps), 0);
    ck_assert_str_eq(ps.names[13], "encoder.layers.1.self_attn.in_proj_bias");
    ck_assert_str_eq(ps.names[25], "encoder.norm.bias");
    tg_params_clear(&ps);
    tg_encoder_free(m);
    /* Without a final norm there are no norm.* entries. */
    m = tg_encoder_new(&c, 3, false, TG_FLOAT32, rng);
    ck_assert_ptr_null(m->norm);
    ck_assert_int_eq(tg_encoder_params(m, NULL, &ps), 0);
    ck_assert_int_eq(ps.count, 3 * N_LAYER_PARAMS);
    ck_assert_str_eq(ps.names[35], "layers.2.norm2.bias");
    tg_params_clear(&ps);
    tg_encoder_free(m);
    tg_rng_free(rng);
}
END_TEST

START_TEST(post_norm_relu_layer_matches_pytorch_with_masks)
{
    check_layer_parity(TG_ACT_RELU, false, true, want_post_relu_masked);
}
END_TEST

START_TEST(pre_norm_gelu_layer_matches_pytorch_with_masks)
{
    check_layer_parity(TG_ACT_GELU, true, true, want_pre_gelu_masked);
}
END_TEST

START_TEST(post_norm_layer_matches_pytorch_without_masks)
{
    check_layer_parity(TG_ACT_RELU, false, false, want_post_relu_plain);
}
END_TEST

START_TEST(two_layer_encoder_with_final_norm_matches_pytorch)
{
    tg_dtype dtypes[] = {TG_FLOAT64, TG_FLOAT32};
    for (int k = 0; k < 2; k++) {
        tg_rng *rng = tg_rng_new(6);
        tg_encoder_config c = config(TG_ACT_RELU, false, 0.0);
        tg_encoder *m = tg_encoder_new(&c, 2, true, dtypes[k], rng);
        ck_assert_ptr_nonnull(m);
        tg_params ps = {0};
        ck_assert_int_eq(tg_encoder_params(m, NULL, &ps), 0);
        fill_params(&ps);
        tg_tensor *src = make_src(dtypes[k]), *mask = causal_mask(), *pad = padding_mask();
        tg_tensor *y = tg_encoder_forward(m, src, mask, pad);
        ck_assert_msg(y != NULL, "%s", tg_error_message());
        ck_assert_shape(y, B, T, D);
        assert_values(y, want_encoder2_final_norm, B * T * D,
                      dtypes[k] == TG_FLOAT64 ? 1e-10 : 1e-5);
        tg_release(y);
        tg_release(src);
        tg_release(mask);
        tg_release(pad);
        tg_params_clear(&ps);
        tg_encoder_free(m);
        tg_rng_free(rng);
    }
}
END_TEST

/* ---- init ------------------------------------------------------------------ */

/* a and b hold bit-for-bit the same values. */
static void assert_same(const tg_tensor *a, const tg_tensor *b)
{
    int64_t n = tg_numel(a);
    ck_assert_int_eq(n, tg_numel(b));
    double *va = malloc((size_t)n * sizeof *va), *vb = malloc((size_t)n * sizeof *vb);
    tg_copy_to(a, TG_FLOAT64, va, n);
    tg_copy_to(b, TG_FLOAT64, vb, n);
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(va[i] == vb[i], "element %lld: %.17g vs %.17g", (long long)i, va[i], vb[i]);
    free(va);
    free(vb);
}

START_TEST(layer_draws_attention_then_linear1_then_linear2)
{
    tg_rng *rng = tg_rng_new(77);
    tg_encoder_config c = config(TG_ACT_RELU, false, 0.1);
    tg_encoder_layer *m = tg_encoder_layer_new(&c, TG_FLOAT32, rng);
    ck_assert_ptr_nonnull(m);
    tg_rng_seed(rng, 77);
    tg_mha *sa = tg_mha_new(D, NH, 0.1, true, TG_FLOAT32, rng);
    tg_linear *l1 = tg_linear_new(D, DFF, true, TG_FLOAT32, rng);
    tg_linear *l2 = tg_linear_new(DFF, D, true, TG_FLOAT32, rng);
    assert_same(m->self_attn->in_proj_weight, sa->in_proj_weight);
    assert_same(m->self_attn->out_proj->weight, sa->out_proj->weight);
    assert_same(m->linear1->weight, l1->weight);
    assert_same(m->linear1->bias, l1->bias);
    assert_same(m->linear2->weight, l2->weight);
    assert_same(m->linear2->bias, l2->bias);
    tg_tensor *ones = tg_ones(TG_FLOAT32, 1, SHAPE(D)), *zeros = tg_zeros(TG_FLOAT32, 1, SHAPE(D));
    assert_same(m->norm1->weight, ones);
    assert_same(m->norm2->weight, ones);
    assert_same(m->norm1->bias, zeros);
    assert_same(m->norm2->bias, zeros);
    ck_assert(m->norm1->eps == 1e-5 && m->norm2->eps == 1e-5);
    ck_assert(tg_requires_grad(m->linear1->weight) && tg_requires_grad(m->norm2->bias));
    ck_assert(m->train && m->self_attn->train); /* a new module trains, as in PyTorch */
    ck_assert_ptr_eq(m->rng, rng);
    tg_release(ones);
    tg_release(zeros);
    tg_mha_free(sa);
    tg_linear_free(l1);
    tg_linear_free(l2);
    tg_encoder_layer_free(m);
    tg_rng_free(rng);
}
END_TEST

START_TEST(encoder_layers_draw_in_turn_from_one_rng)
{
    tg_rng *rng = tg_rng_new(31);
    tg_encoder_config c = config(TG_ACT_GELU, false, 0.0);
    c.layer_norm_eps = 1e-6;
    tg_encoder *m = tg_encoder_new(&c, 2, true, TG_FLOAT64, rng);
    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(m->num_layers, 2);
    tg_rng_seed(rng, 31);
    tg_encoder_layer *a = tg_encoder_layer_new(&c, TG_FLOAT64, rng);
    tg_encoder_layer *b = tg_encoder_layer_new(&c, TG_FLOAT64, rng);
    assert_same(m->layers[0]->self_attn->in_proj_weight, a->self_attn->in_proj_weight);
    assert_same(m->layers[0]->linear2->weight, a->linear2->weight);
    assert_same(m->layers[1]->self_attn->in_proj_weight, b->self_attn->in_proj_weight);
    assert_same(m->layers[1]->linear1->bias, b->linear1->bias);
    /* Unlike PyTorch's clones, the two layers start different. */
    ck_assert(tg_get(m->layers[0]->linear1->weight, SHAPE(0, 0)) !=
              tg_get(m->layers[1]->linear1->weight, SHAPE(0, 0)));
    ck_assert(m->norm->eps == 1e-6 && m->layers[1]->norm2->eps == 1e-6);
    ck_assert_shape(m->norm->weight, D);
    tg_encoder_layer_free(a);
    tg_encoder_layer_free(b);
    tg_encoder_free(m);
    tg_rng_free(rng);
}
END_TEST

/* ---- gradients ------------------------------------------------------------- */

typedef struct {
    tg_encoder_config config;
    const tg_tensor *mask, *pad;
} layer_ctx;

/* inputs: src, then the layer's 12 parameters in state_dict order; the layer
 * is a stack copy whose parameters are the checker's tensors. */
static tg_tensor *layer_fn(tg_tensor *const *in, int n, void *ctx)
{
    (void)n;
    const layer_ctx *c = ctx;
    int64_t d = c->config.d_model, dff = c->config.dim_feedforward;
    tg_linear out = {d, d, in[3], in[4]}, l1 = {d, dff, in[5], in[6]}, l2 = {dff, d, in[7], in[8]};
    tg_mha sa = {.embed_dim = d, .num_heads = c->config.nhead, .head_dim = d / c->config.nhead,
                 .in_proj_weight = in[1], .in_proj_bias = in[2], .out_proj = &out};
    tg_layer_norm_module n1 = {.ndim = 1, .shape = {d}, .eps = c->config.layer_norm_eps,
                               .weight = in[9], .bias = in[10]};
    tg_layer_norm_module n2 = n1;
    n2.weight = in[11];
    n2.bias = in[12];
    tg_encoder_layer m = {.config = c->config, .self_attn = &sa, .linear1 = &l1,
                          .linear2 = &l2, .norm1 = &n1, .norm2 = &n2};
    return tg_encoder_layer_forward(&m, in[0], c->mask, c->pad);
}

/* Gradcheck of a d 4, 2-head, feed-forward 6 layer on [2, 3, 4] with both masks. */
static void check_layer_gradients(tg_activation act, bool norm_first)
{
    tg_rng *rng = tg_rng_new(123);
    layer_ctx c = {.config = {.d_model = 4, .nhead = 2, .dim_feedforward = 6, .dropout = 0.0,
                              .layer_norm_eps = 1e-5, .activation = act,
                              .norm_first = norm_first}};
    tg_encoder_layer *m = tg_encoder_layer_new(&c.config, TG_FLOAT64, rng);
    ck_assert_ptr_nonnull(m);
    tg_params ps = {0};
    ck_assert_int_eq(tg_encoder_layer_params(m, NULL, &ps), 0);
    /* Norm parameters away from ones and zeros, biases away from zero. */
    for (int k = 0; k < ps.count; k++) {
        double *p = tg_data(ps.tensors[k]);
        for (int64_t i = 0; i < tg_numel(ps.tensors[k]); i++)
            p[i] += 0.2 * sin(1.1 * (double)i + k);
    }
    tg_tensor *in[13];
    in[0] = tg_randn(rng, TG_FLOAT64, 3, SHAPE(2, 3, 4));
    for (int k = 0; k < 12; k++)
        in[k + 1] = ps.tensors[k];
    tg_tensor *mask = causal_mask(), *pad = padding_mask();
    c.mask = mask;
    c.pad = pad;
    tg_gradcheck_result r;
    ck_assert_msg(tg_gradcheck(layer_fn, &c, in, 13, NULL, &r) == 1, "%s", r.message);
    ck_assert_int_eq(r.checked, 24 + 48 + 12 + 16 + 4 + 24 + 6 + 24 + 4 + 16);
    ck_assert_msg(tg_gradcheck_float32(layer_fn, &c, in, 13, NULL, &r) == 1, "%s", r.message);
    tg_release(in[0]);
    tg_release(mask);
    tg_release(pad);
    tg_params_clear(&ps);
    tg_encoder_layer_free(m);
    tg_rng_free(rng);
}

START_TEST(post_norm_relu_layer_passes_gradcheck_with_masks)
{
    check_layer_gradients(TG_ACT_RELU, false);
}
END_TEST

START_TEST(pre_norm_gelu_layer_passes_gradcheck_with_masks)
{
    check_layer_gradients(TG_ACT_GELU, true);
}
END_TEST

START_TEST(encoder_backward_reaches_every_parameter)
{
    tg_rng *rng = tg_rng_new(9);
    tg_encoder_config c = config(TG_ACT_GELU, true, 0.0);
    tg_encoder *m = tg_encoder_new(&c, 2, true, TG_FLOAT32, rng);
    tg_params ps = {0};
    ck_assert_int_eq(tg_encoder_params(m, NULL, &ps), 0);
    tg_tensor *src = make_src(TG_FLOAT32), *pad = padding_mask();
    tg_scope_begin();
    tg_tensor *loss = tg_sum(tg_mul(tg_encoder_forward(m, src, NULL, pad), src), NULL, 0, false);
    ck_assert_int_eq(tg_backward(loss, NULL), 0);
    tg_scope_end();
    for (int k = 0; k < ps.count; k++) {
        tg_tensor *g = tg_grad(ps.tensors[k]);
        ck_assert_msg(g != NULL, "no gradient for %s", ps.names[k]);
        ck_assert_int_eq(tg_numel(g), tg_numel(ps.tensors[k]));
        tg_release(g);
    }
    tg_release(src);
    tg_release(pad);
    tg_params_clear(&ps);
    tg_encoder_free(m);
    tg_rng_free(rng);
}
END_TEST

/* ---- train / eval ------------------------------------------------------------ */

START_TEST(dropout_acts_only_in_training)
{
    tg_rng *rng = tg_rng_new(4);
    tg_encoder_config c = config(TG_ACT_RELU, false, 0.5);
    tg_encoder_layer *m = tg_encoder_layer_new(&c, TG_FLOAT64, rng);
    c.dropout = 0.0;
    tg_rng_seed(rng, 4);
    tg_encoder_layer *plain = tg_encoder_layer_new(&c, TG_FLOAT64, rng);
    tg_tensor *src = make_src(TG_FLOAT64);
    /* Evaluating, p = 0.5 is the same function as p = 0. */
    tg_encoder_layer_set_train(m, false);
    ck_assert(!m->train && !m->self_attn->train);
    tg_tensor *want = tg_encoder_layer_forward(plain, src, NULL, NULL);
    tg_tensor *e1 = tg_encoder_layer_forward(m, src, NULL, NULL);
    tg_tensor *e2 = tg_encoder_layer_forward(m, src, NULL, NULL);
    assert_same(e1, want);
    assert_same(e2, want);
    /* Training draws masks: different from eval, reproducible by reseeding. */
    tg_encoder_layer_set_train(m, true);
    ck_assert(m->train && m->self_attn->train);
    tg_rng_seed(rng, 100);
    tg_tensor *t1 = tg_encoder_layer_forward(m, src, NULL, NULL);
    tg_rng_seed(rng, 100);
    tg_tensor *t2 = tg_encoder_layer_forward(m, src, NULL, NULL);
    assert_same(t1, t2);
    double a[B * T * D], b[B * T * D], diff = 0;
    tg_copy_to(t1, TG_FLOAT64, a, B * T * D);
    tg_copy_to(want, TG_FLOAT64, b, B * T * D);
    for (int i = 0; i < B * T * D; i++)
        diff += fabs(a[i] - b[i]);
    ck_assert_double_gt(diff, 1e-3);
    tg_release(want);
    tg_release(e1);
    tg_release(e2);
    tg_release(t1);
    tg_release(t2);
    tg_release(src);
    tg_encoder_layer_free(m);
    tg_encoder_layer_free(plain);
    tg_rng_free(rng);
}
END_TEST

START_TEST(encoder_set_train_reaches_every_layer)
{
    tg_rng *rng = tg_rng_new(3);
    tg_encoder_config c = config(TG_ACT_RELU, false, 0.2);
    tg_encoder *m = tg_encoder_new(&c, 3, false, TG_FLOAT32, rng);
    for (int i = 0; i < 3; i++)
        ck_assert(m->layers[i]->train && m->layers[i]->self_attn->train);
    tg_encoder_set_train(m, false);
    for (int i = 0; i < 3; i++)
        ck_assert(!m->layers[i]->train && !m->layers[i]->self_attn->train);
    tg_tensor *src = make_src(TG_FLOAT32);
    tg_tensor *a = tg_encoder_forward(m, src, NULL, NULL);
    tg_tensor *b = tg_encoder_forward(m, src, NULL, NULL);
    assert_same(a, b);
    tg_encoder_set_train(m, true);
    ck_assert(m->layers[2]->train && m->layers[2]->self_attn->train);
    tg_encoder_set_train(NULL, true);
    tg_encoder_layer_set_train(NULL, true);
    tg_release(a);
    tg_release(b);
    tg_release(src);
    tg_encoder_free(m);
    tg_rng_free(rng);
}
END_TEST

START_TEST(unbatched_input_matches_one_batch_row)
{
    tg_rng *rng = tg_rng_new(8);
    tg_encoder_config c = config(TG_ACT_GELU, true, 0.0);
    tg_encoder_layer *m = tg_encoder_layer_new(&c, TG_FLOAT64, rng);
    tg_tensor *src = make_src(TG_FLOAT64), *mask = causal_mask();
    tg_scope_begin();
    tg_tensor *row = tg_squeeze(tg_narrow(src, 0, 1, 1), 0); /* batch 1: [T, D] */
    tg_tensor *y1 = tg_encoder_layer_forward(m, row, mask, NULL);
    tg_tensor *y = tg_narrow(tg_encoder_layer_forward(m, src, mask, NULL), 0, 1, 1);
    ck_assert_shape(y1, T, D);
    double want[T * D];
    tg_copy_to(y, TG_FLOAT64, want, T * D);
    assert_values(y1, want, T * D, 1e-12);
    tg_scope_end();
    tg_release(src);
    tg_release(mask);
    tg_encoder_layer_free(m);
    tg_rng_free(rng);
}
END_TEST

/* ---- errors ------------------------------------------------------------------ */

START_TEST(layer_new_rejects_bad_configs)
{
    tg_rng *rng = tg_rng_new(1);
    tg_encoder_config c = config(TG_ACT_RELU, false, 0.1);
    c.nhead = 3;
    ck_assert_ptr_null(tg_encoder_layer_new(&c, TG_FLOAT32, rng));
    ck_assert_error(TG_ERR_VALUE, "tg_encoder_layer_new", "d_model 8", "nhead 3");
    c = config(TG_ACT_RELU, false, 0.1);
    c.dim_feedforward = 0;
    ck_assert_ptr_null(tg_encoder_layer_new(&c, TG_FLOAT32, rng));
    ck_assert_error(TG_ERR_VALUE, "tg_encoder_layer_new", "dim_feedforward 0");
    c = config(TG_ACT_RELU, false, 0.1);
    c.d_model = -8;
    ck_assert_ptr_null(tg_encoder_layer_new(&c, TG_FLOAT32, rng));
    ck_assert_error(TG_ERR_VALUE, "tg_encoder_layer_new", "d_model -8");
    c = config(TG_ACT_RELU, false, 1.0);
    ck_assert_ptr_null(tg_encoder_layer_new(&c, TG_FLOAT32, rng));
    ck_assert_error(TG_ERR_VALUE, "tg_encoder_layer_new", "dropout 1");
    c = config(TG_ACT_RELU, false, -0.1);
    ck_assert_ptr_null(tg_encoder_layer_new(&c, TG_FLOAT32, rng));
    ck_assert_error(TG_ERR_VALUE, "tg_encoder_layer_new", "dropout -0.1");
    c = config(TG_ACT_RELU, false, 0.1);
    c.layer_norm_eps = 0;
    ck_assert_ptr_null(tg_encoder_layer_new(&c, TG_FLOAT32, rng));
    ck_assert_error(TG_ERR_VALUE, "tg_encoder_layer_new", "layer_norm_eps 0");
    c = config((tg_activation)7, false, 0.1);
    ck_assert_ptr_null(tg_encoder_layer_new(&c, TG_FLOAT32, rng));
    ck_assert_error(TG_ERR_VALUE, "tg_encoder_layer_new", "activation 7");
    c = config(TG_ACT_RELU, false, 0.1);
    ck_assert_ptr_null(tg_encoder_layer_new(&c, TG_INT64, rng));
    ck_assert_error(TG_ERR_DTYPE, "tg_encoder_layer_new", "int64");
    ck_assert_ptr_null(tg_encoder_layer_new(NULL, TG_FLOAT32, rng));
    ck_assert_error(TG_ERR_NULL, "tg_encoder_layer_new");
    ck_assert_ptr_null(tg_encoder_layer_new(&c, TG_FLOAT32, NULL));
    ck_assert_error(TG_ERR_NULL, "tg_encoder_layer_new");
    tg_rng_free(rng);
}
END_TEST

START_TEST(encoder_new_rejects_bad_configs)
{
    tg_rng *rng = tg_rng_new(1);
    tg_encoder_config c = config(TG_ACT_GELU, true, 0.1);
    ck_assert_ptr_null(tg_encoder_new(&c, 0, true, TG_FLOAT32, rng));
    ck_assert_error(TG_ERR_VALUE, "tg_encoder_new", "num_layers 0");
    c.nhead = 5;
    ck_assert_ptr_null(tg_encoder_new(&c, 2, true, TG_FLOAT32, rng));
    ck_assert_error(TG_ERR_VALUE, "tg_encoder_new", "nhead 5");
    c = config(TG_ACT_GELU, true, 0.1);
    c.layer_norm_eps = -1e-5;
    ck_assert_ptr_null(tg_encoder_new(&c, 2, true, TG_FLOAT32, rng));
    ck_assert_error(TG_ERR_VALUE, "tg_encoder_new", "layer_norm_eps");
    ck_assert_ptr_null(tg_encoder_new(NULL, 2, true, TG_FLOAT32, rng));
    ck_assert_error(TG_ERR_NULL, "tg_encoder_new");
    tg_rng_free(rng);
}
END_TEST

START_TEST(forward_rejects_bad_inputs)
{
    tg_rng *rng = tg_rng_new(1);
    tg_encoder_config c = config(TG_ACT_RELU, false, 0.0);
    tg_encoder_layer *m = tg_encoder_layer_new(&c, TG_FLOAT32, rng);
    tg_encoder *e = tg_encoder_new(&c, 2, true, TG_FLOAT32, rng);
    tg_tensor *bad = tg_zeros(TG_FLOAT32, 3, SHAPE(2, 3, 5));
    ck_assert_ptr_null(tg_encoder_layer_forward(m, bad, NULL, NULL));
    ck_assert_error(TG_ERR_SHAPE, "tg_encoder_layer_forward", "[2,3,5]", "d_model 8");
    ck_assert_ptr_null(tg_encoder_forward(e, bad, NULL, NULL));
    ck_assert_error(TG_ERR_SHAPE, "tg_encoder_layer_forward", "[2,3,5]");
    tg_tensor *flat = tg_zeros(TG_FLOAT32, 1, SHAPE(8));
    ck_assert_ptr_null(tg_encoder_layer_forward(m, flat, NULL, NULL));
    ck_assert_error(TG_ERR_SHAPE, "tg_encoder_layer_forward");
    /* A mask of the wrong size is reported by the attention. */
    tg_tensor *src = make_src(TG_FLOAT32);
    tg_tensor *mask = tg_zeros(TG_BOOL, 2, SHAPE(4, 4));
    ck_assert_ptr_null(tg_encoder_forward(e, src, mask, NULL));
    ck_assert_int_ne(tg_error_code(), TG_OK);
    tg_error_clear();
    ck_assert_ptr_null(tg_encoder_layer_forward(NULL, src, NULL, NULL));
    ck_assert_error(TG_ERR_NULL, "tg_encoder_layer_forward");
    ck_assert_ptr_null(tg_encoder_layer_forward(m, NULL, NULL, NULL));
    ck_assert_error(TG_ERR_NULL, "tg_encoder_layer_forward");
    ck_assert_ptr_null(tg_encoder_forward(NULL, src, NULL, NULL));
    ck_assert_error(TG_ERR_NULL, "tg_encoder_forward");
    ck_assert_int_eq(tg_encoder_layer_params(m, NULL, NULL), -1);
    ck_assert_error(TG_ERR_NULL, "tg_encoder_layer_params");
    ck_assert_int_eq(tg_encoder_params(NULL, NULL, &(tg_params){0}), -1);
    ck_assert_error(TG_ERR_NULL, "tg_encoder_params");
    tg_release(bad);
    tg_release(flat);
    tg_release(src);
    tg_release(mask);
    tg_encoder_layer_free(m);
    tg_encoder_free(e);
    tg_encoder_layer_free(NULL);
    tg_encoder_free(NULL);
    tg_rng_free(rng);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("encoder");
    TCase *par = tcase_checked("parity");
    tcase_add_test(par, layer_param_names_match_pytorch_state_dict);
    tcase_add_test(par, encoder_param_names_match_pytorch_state_dict);
    tcase_add_test(par, post_norm_relu_layer_matches_pytorch_with_masks);
    tcase_add_test(par, pre_norm_gelu_layer_matches_pytorch_with_masks);
    tcase_add_test(par, post_norm_layer_matches_pytorch_without_masks);
    tcase_add_test(par, two_layer_encoder_with_final_norm_matches_pytorch);
    suite_add_tcase(s, par);

    TCase *init = tcase_checked("init");
    tcase_add_test(init, layer_draws_attention_then_linear1_then_linear2);
    tcase_add_test(init, encoder_layers_draw_in_turn_from_one_rng);
    suite_add_tcase(s, init);

    TCase *grad = tcase_checked("gradients");
    tcase_add_test(grad, post_norm_relu_layer_passes_gradcheck_with_masks);
    tcase_add_test(grad, pre_norm_gelu_layer_passes_gradcheck_with_masks);
    tcase_add_test(grad, encoder_backward_reaches_every_parameter);
    suite_add_tcase(s, grad);

    TCase *mode = tcase_checked("train_eval");
    tcase_add_test(mode, dropout_acts_only_in_training);
    tcase_add_test(mode, encoder_set_train_reaches_every_layer);
    tcase_add_test(mode, unbatched_input_matches_one_batch_row);
    suite_add_tcase(s, mode);

    TCase *err = tcase_checked("errors");
    tcase_add_test(err, layer_new_rejects_bad_configs);
    tcase_add_test(err, encoder_new_rejects_bad_configs);
    tcase_add_test(err, forward_rejects_bad_inputs);
    suite_add_tcase(s, err);
    return run_suite(s);
}
