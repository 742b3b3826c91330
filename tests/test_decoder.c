/* nn.TransformerDecoderLayer / TransformerDecoder: names, init order, float64
 * gradchecks of both norm orders with every mask kind, train/eval, unbatched
 * input, a fully padded source, bad input (PyTorch parity: test_parity.c). */
#include "transformer_testutil.h"

/* d_model 4, 2 heads, feed-forward 6; tgt [B, T, 4], memory [B, S, 4]. */

static const char *const layer_names[] = {
    "self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
    "self_attn.out_proj.bias", "multihead_attn.in_proj_weight", "multihead_attn.in_proj_bias",
    "multihead_attn.out_proj.weight", "multihead_attn.out_proj.bias", "linear1.weight",
    "linear1.bias", "linear2.weight", "linear2.bias", "norm1.weight", "norm1.bias",
    "norm2.weight", "norm2.bias", "norm3.weight", "norm3.bias",
};
enum { N_LAYER_PARAMS = 18 };

static tg_decoder_config config(tg_activation act, bool norm_first, double dropout)
{
    return (tg_decoder_config){.d_model = D, .nhead = NH, .dim_feedforward = DFF,
                               .dropout = dropout, .layer_norm_eps = 1e-5,
                               .activation = act, .norm_first = norm_first};
}

/* ---- names and init --------------------------------------------------------- */

START_TEST(layer_param_names_match_pytorch_state_dict)
{
    tg_rng *rng = tg_rng_new(1);
    tg_decoder_config c = config(TG_ACT_RELU, false, 0.1);
    tg_decoder_layer *m = tg_decoder_layer_new(&c, TG_FLOAT32, rng);
    ck_assert_ptr_nonnull(m);
    tg_params ps = {0};
    ck_assert_int_eq(tg_decoder_layer_params(m, "layers.1", &ps), 0);
    ck_assert_int_eq(ps.count, N_LAYER_PARAMS);
    char want[96];
    for (int i = 0; i < N_LAYER_PARAMS; i++) {
        snprintf(want, sizeof want, "layers.1.%s", layer_names[i]);
        ck_assert_str_eq(ps.names[i], want);
    }
    ck_assert_shape(tg_params_find(&ps, "layers.1.multihead_attn.in_proj_weight"), 3 * D, D);
    ck_assert_shape(tg_params_find(&ps, "layers.1.linear1.weight"), DFF, D);
    ck_assert_shape(tg_params_find(&ps, "layers.1.norm3.bias"), D);
    /* A clash part way through adds nothing. */
    tg_params_clear(&ps);
    ck_assert_int_eq(tg_params_add(&ps, NULL, "norm2.weight", m->norm1->weight), 0);
    ck_assert_int_eq(tg_decoder_layer_params(m, NULL, &ps), -1);
    ck_assert_error(TG_ERR_VALUE, "duplicate", "norm2.weight");
    ck_assert_int_eq(ps.count, 1);
    tg_params_clear(&ps);
    tg_decoder_layer_free(m);
    tg_rng_free(rng);
}
END_TEST

START_TEST(decoder_names_layers_then_the_final_norm)
{
    tg_rng *rng = tg_rng_new(2);
    tg_decoder_config c = config(TG_ACT_GELU, true, 0.0);
    tg_decoder *m = tg_decoder_new(&c, 2, true, TG_FLOAT32, rng);
    ck_assert_ptr_nonnull(m);
    tg_params ps = {0};
    ck_assert_int_eq(tg_decoder_params(m, "decoder", &ps), 0);
    ck_assert_int_eq(ps.count, 2 * N_LAYER_PARAMS + 2);
    ck_assert_str_eq(ps.names[N_LAYER_PARAMS + 4], "decoder.layers.1.multihead_attn.in_proj_weight");
    ck_assert_str_eq(ps.names[2 * N_LAYER_PARAMS], "decoder.norm.weight");
    ck_assert_str_eq(ps.names[2 * N_LAYER_PARAMS + 1], "decoder.norm.bias");
    tg_params_clear(&ps);
    tg_decoder_free(m);
    m = tg_decoder_new(&c, 3, false, TG_FLOAT32, rng);
    ck_assert_ptr_null(m->norm);
    ck_assert_int_eq(tg_decoder_params(m, NULL, &ps), 0);
    ck_assert_int_eq(ps.count, 3 * N_LAYER_PARAMS);
    ck_assert_str_eq(ps.names[3 * N_LAYER_PARAMS - 1], "layers.2.norm3.bias");
    tg_params_clear(&ps);
    tg_decoder_free(m);
    tg_rng_free(rng);
}
END_TEST

START_TEST(layer_draws_self_attn_then_multihead_attn_then_linears)
{
    tg_rng *rng = tg_rng_new(77);
    tg_decoder_config c = config(TG_ACT_RELU, false, 0.1);
    tg_decoder_layer *m = tg_decoder_layer_new(&c, TG_FLOAT64, rng);
    ck_assert_ptr_nonnull(m);
    tg_rng_seed(rng, 77);
    tg_mha *sa = tg_mha_new(D, NH, 0.1, true, TG_FLOAT64, rng);
    tg_mha *ca = tg_mha_new(D, NH, 0.1, true, TG_FLOAT64, rng);
    tg_linear *l1 = tg_linear_new(D, DFF, true, TG_FLOAT64, rng);
    tg_linear *l2 = tg_linear_new(DFF, D, true, TG_FLOAT64, rng);
    assert_same(m->self_attn->in_proj_weight, sa->in_proj_weight);
    assert_same(m->multihead_attn->in_proj_weight, ca->in_proj_weight);
    assert_same(m->multihead_attn->out_proj->weight, ca->out_proj->weight);
    assert_same(m->linear1->weight, l1->weight);
    assert_same(m->linear2->bias, l2->bias);
    ck_assert(m->norm3->eps == 1e-5 && tg_requires_grad(m->norm3->weight));
    ck_assert(m->train && m->self_attn->train && m->multihead_attn->train);
    tg_mha_free(sa);
    tg_mha_free(ca);
    tg_linear_free(l1);
    tg_linear_free(l2);
    tg_decoder_layer_free(m);
    tg_rng_free(rng);
}
END_TEST

/* ---- gradients ------------------------------------------------------------- */

typedef struct {
    tg_decoder_layer *m;
    slots s;
    tg_decoder_masks masks;
} layer_ctx;

/* inputs: tgt, memory, then the layer's 18 parameters in state_dict order. */
static tg_tensor *layer_fn(tg_tensor *const *in, int n, void *ctx)
{
    (void)n;
    layer_ctx *c = ctx;
    tg_tensor *saved[MAX_SLOTS];
    bind(&c->s, in + 2, saved);
    tg_tensor *y = tg_decoder_layer_forward(c->m, in[0], in[1], &c->masks);
    unbind(&c->s, saved);
    return y;
}

/* Gradcheck (float64, then the float32 paths) of a layer on tgt [2, 3, 4] and
 * memory [2, 4, 4] with the given masks, over tgt, memory and every parameter. */
static void check_layer_gradients(tg_activation act, bool norm_first, tg_decoder_masks masks)
{
    tg_rng *rng = tg_rng_new(123);
    tg_decoder_config cfg = config(act, norm_first, 0.0);
    layer_ctx c = {.m = tg_decoder_layer_new(&cfg, TG_FLOAT64, rng), .masks = masks};
    ck_assert_ptr_nonnull(c.m);
    tg_params ps = {0};
    ck_assert_int_eq(tg_decoder_layer_params(c.m, NULL, &ps), 0);
    perturb_params(&ps);
    decoder_layer_slots(&c.s, c.m);
    ck_assert_int_eq(c.s.count, ps.count);
    tg_tensor *in[2 + N_LAYER_PARAMS];
    in[0] = tg_randn(rng, TG_FLOAT64, 3, SHAPE(B, T, D));
    in[1] = tg_randn(rng, TG_FLOAT64, 3, SHAPE(B, S, D));
    for (int k = 0; k < ps.count; k++) {
        ck_assert_ptr_eq(*c.s.at[k], ps.tensors[k]);
        in[k + 2] = ps.tensors[k];
    }
    tg_gradcheck_result r;
    ck_assert_msg(tg_gradcheck(layer_fn, &c, in, 2 + N_LAYER_PARAMS, NULL, &r) == 1, "%s",
                  r.message);
    ck_assert_int_eq(r.checked, B * T * D + B * S * D + (int)tg_params_numel(&ps));
    ck_assert_msg(tg_gradcheck_float32(layer_fn, &c, in, 2 + N_LAYER_PARAMS, NULL, &r) == 1, "%s",
                  r.message);
    tg_release(in[0]);
    tg_release(in[1]);
    tg_params_clear(&ps);
    tg_decoder_layer_free(c.m);
    tg_rng_free(rng);
}

/* The masks of the checks: causal [T, T] as bool or as a float additive mask
 * (-inf above the diagonal, finite values below), padding of tgt [B, T] and
 * memory [B, S] (both rows, keys at either end), memory mask [T, S]. */
static tg_tensor *bool_causal(void)
{
    return tg_square_subsequent_mask(T, TG_BOOL);
}
static tg_tensor *float_causal(void)
{
    const double I = INFINITY;
    return make(TG_FLOAT64, 2, SHAPE(T, T), (const double[]){0.3, -I, -I, -0.5, 0.1, -I, 0.2,
                                                              -0.7, 0.4});
}
static tg_tensor *tgt_padding(tg_dtype dt)
{
    double v[] = {0, 0, 1, 0, 1, 0};
    if (dt != TG_BOOL)
        for (int i = 0; i < 6; i++)
            v[i] = v[i] ? -INFINITY : 0;
    return make(dt, 2, SHAPE(B, T), v);
}
static tg_tensor *memory_padding(tg_dtype dt)
{
    double v[] = {1, 0, 0, 0, 0, 0, 1, 1};
    if (dt != TG_BOOL)
        for (int i = 0; i < 8; i++)
            v[i] = v[i] ? -INFINITY : 0;
    return make(dt, 2, SHAPE(B, S), v);
}
static tg_tensor *memory_mask(tg_dtype dt)
{
    if (dt == TG_BOOL)
        return make(TG_BOOL, 2, SHAPE(T, S), (const double[]){0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1});
    return make(dt, 2, SHAPE(T, S), (const double[]){0.2, -0.4, 0, 0.5, -0.3, 0.1, 0.6, 0,
                                                      0, -0.2, 0.3, -0.1});
}

START_TEST(post_norm_relu_layer_passes_gradcheck_with_float_tgt_mask_and_padding)
{
    tg_tensor *tm = float_causal(), *tp = tgt_padding(TG_BOOL), *mp = memory_padding(TG_BOOL);
    tg_tensor *mm = memory_mask(TG_BOOL);
    check_layer_gradients(TG_ACT_RELU, false,
                          (tg_decoder_masks){.tgt_mask = tm, .memory_mask = mm,
                                             .tgt_key_padding_mask = tp,
                                             .memory_key_padding_mask = mp});
    tg_release(tm);
    tg_release(tp);
    tg_release(mp);
    tg_release(mm);
}
END_TEST

START_TEST(pre_norm_gelu_layer_passes_gradcheck_with_bool_tgt_mask_and_float_masks)
{
    tg_tensor *tm = bool_causal(), *tp = tgt_padding(TG_FLOAT64);
    tg_tensor *mp = memory_padding(TG_FLOAT64), *mm = memory_mask(TG_FLOAT64);
    check_layer_gradients(TG_ACT_GELU, true,
                          (tg_decoder_masks){.tgt_mask = tm, .memory_mask = mm,
                                             .tgt_key_padding_mask = tp,
                                             .memory_key_padding_mask = mp});
    tg_release(tm);
    tg_release(tp);
    tg_release(mp);
    tg_release(mm);
}
END_TEST

START_TEST(post_norm_gelu_layer_passes_gradcheck_when_causal_without_masks)
{
    check_layer_gradients(TG_ACT_GELU, false, (tg_decoder_masks){.tgt_is_causal = true});
}
END_TEST

START_TEST(pre_norm_relu_layer_passes_gradcheck_with_memory_padding_only)
{
    tg_tensor *mp = memory_padding(TG_BOOL);
    check_layer_gradients(TG_ACT_RELU, true, (tg_decoder_masks){.memory_key_padding_mask = mp});
    tg_release(mp);
}
END_TEST

typedef struct {
    tg_decoder *m;
    slots s;
    tg_decoder_masks masks;
} stack_ctx;

static tg_tensor *stack_fn(tg_tensor *const *in, int n, void *ctx)
{
    (void)n;
    stack_ctx *c = ctx;
    tg_tensor *saved[MAX_SLOTS];
    bind(&c->s, in + 2, saved);
    tg_tensor *y = tg_decoder_forward(c->m, in[0], in[1], &c->masks);
    unbind(&c->s, saved);
    return y;
}

START_TEST(two_layer_decoder_with_final_norm_passes_gradcheck)
{
    tg_rng *rng = tg_rng_new(5);
    tg_decoder_config cfg = config(TG_ACT_RELU, false, 0.0);
    tg_tensor *mp = memory_padding(TG_BOOL);
    stack_ctx c = {.m = tg_decoder_new(&cfg, 2, true, TG_FLOAT64, rng),
                   .masks = {.tgt_is_causal = true, .memory_key_padding_mask = mp}};
    tg_params ps = {0};
    ck_assert_int_eq(tg_decoder_params(c.m, NULL, &ps), 0);
    perturb_params(&ps);
    for (int l = 0; l < 2; l++)
        decoder_layer_slots(&c.s, c.m->layers[l]);
    norm_slots(&c.s, c.m->norm);
    ck_assert_int_eq(c.s.count, ps.count);
    tg_tensor *in[2 + 2 * N_LAYER_PARAMS + 2];
    in[0] = tg_randn(rng, TG_FLOAT64, 3, SHAPE(B, T, D));
    in[1] = tg_randn(rng, TG_FLOAT64, 3, SHAPE(B, S, D));
    for (int k = 0; k < ps.count; k++) {
        ck_assert_ptr_eq(*c.s.at[k], ps.tensors[k]);
        in[k + 2] = ps.tensors[k];
    }
    tg_gradcheck_result r;
    ck_assert_msg(tg_gradcheck(stack_fn, &c, in, 2 + ps.count, NULL, &r) == 1, "%s", r.message);
    tg_release(in[0]);
    tg_release(in[1]);
    tg_release(mp);
    tg_params_clear(&ps);
    tg_decoder_free(c.m);
    tg_rng_free(rng);
}
END_TEST

/* ---- behaviour --------------------------------------------------------------- */

START_TEST(tgt_is_causal_equals_the_square_subsequent_mask)
{
    tg_rng *rng = tg_rng_new(6);
    tg_decoder_config c = config(TG_ACT_RELU, true, 0.0);
    tg_decoder_layer *m = tg_decoder_layer_new(&c, TG_FLOAT64, rng);
    tg_tensor *tgt = input(TG_FLOAT64, T, 0.1), *mem = input(TG_FLOAT64, S, 0.9);
    tg_tensor *mask = tg_square_subsequent_mask(T, TG_FLOAT64);
    tg_tensor *a = tg_decoder_layer_forward(m, tgt, mem, &(tg_decoder_masks){.tgt_is_causal = true});
    tg_tensor *b = tg_decoder_layer_forward(m, tgt, mem, &(tg_decoder_masks){.tgt_mask = mask});
    tg_tensor *none = tg_decoder_layer_forward(m, tgt, mem, NULL);
    double *va = values_of(a), *vn = values_of(none);
    double *vb = values_of(b);
    assert_values(a, vb, B * T * D, 1e-12);
    /* the last position sees everything either way; the first does not */
    ck_assert(fabs(va[0] - vn[0]) > 1e-6);
    ck_assert(fabs(va[(T - 1) * D] - vn[(T - 1) * D]) < 1e-12);
    free(va);
    free(vb);
    free(vn);
    tg_release(a);
    tg_release(b);
    tg_release(none);
    tg_release(mask);
    tg_release(tgt);
    tg_release(mem);
    tg_decoder_layer_free(m);
    tg_rng_free(rng);
}
END_TEST

START_TEST(dropout_acts_only_in_training)
{
    tg_rng *rng = tg_rng_new(4);
    tg_decoder_config c = config(TG_ACT_RELU, false, 0.5);
    tg_decoder *m = tg_decoder_new(&c, 2, true, TG_FLOAT64, rng);
    c.dropout = 0.0;
    tg_rng_seed(rng, 4);
    tg_decoder *plain = tg_decoder_new(&c, 2, true, TG_FLOAT64, rng);
    tg_tensor *tgt = input(TG_FLOAT64, T, 0.1), *mem = input(TG_FLOAT64, S, 0.9);
    tg_decoder_set_train(m, false);
    for (int l = 0; l < 2; l++)
        ck_assert(!m->layers[l]->train && !m->layers[l]->self_attn->train &&
                  !m->layers[l]->multihead_attn->train);
    tg_tensor *want = tg_decoder_forward(plain, tgt, mem, NULL);
    tg_tensor *e = tg_decoder_forward(m, tgt, mem, NULL);
    assert_same(e, want);
    tg_decoder_set_train(m, true);
    ck_assert(m->layers[1]->train && m->layers[1]->multihead_attn->train);
    tg_rng_seed(rng, 100);
    tg_tensor *t1 = tg_decoder_forward(m, tgt, mem, NULL);
    tg_rng_seed(rng, 100);
    tg_tensor *t2 = tg_decoder_forward(m, tgt, mem, NULL);
    assert_same(t1, t2);
    double *a = values_of(t1), *b = values_of(want), diff = 0;
    for (int i = 0; i < B * T * D; i++)
        diff += fabs(a[i] - b[i]);
    ck_assert_double_gt(diff, 1e-3);
    free(a);
    free(b);
    tg_decoder_set_train(NULL, true);
    tg_decoder_layer_set_train(NULL, true);
    tg_release(want);
    tg_release(e);
    tg_release(t1);
    tg_release(t2);
    tg_release(tgt);
    tg_release(mem);
    tg_decoder_free(m);
    tg_decoder_free(plain);
    tg_rng_free(rng);
}
END_TEST

START_TEST(unbatched_input_matches_one_batch_row)
{
    tg_rng *rng = tg_rng_new(8);
    tg_decoder_config c = config(TG_ACT_GELU, true, 0.0);
    tg_decoder_layer *m = tg_decoder_layer_new(&c, TG_FLOAT64, rng);
    tg_tensor *tgt = input(TG_FLOAT64, T, 0.1), *mem = input(TG_FLOAT64, S, 0.9);
    tg_tensor *mp = memory_padding(TG_BOOL);
    tg_scope_begin();
    tg_tensor *t1 = tg_squeeze(tg_narrow(tgt, 0, 1, 1), 0), *m1 = tg_squeeze(tg_narrow(mem, 0, 1, 1), 0);
    tg_tensor *p1 = tg_squeeze(tg_narrow(mp, 0, 1, 1), 0); /* [S] */
    tg_decoder_masks k1 = {.tgt_is_causal = true, .memory_key_padding_mask = p1};
    tg_decoder_masks k = {.tgt_is_causal = true, .memory_key_padding_mask = mp};
    tg_tensor *y1 = tg_decoder_layer_forward(m, t1, m1, &k1);
    tg_tensor *y = tg_narrow(tg_decoder_layer_forward(m, tgt, mem, &k), 0, 1, 1);
    ck_assert_shape(y1, T, D);
    double *want = values_of(y);
    assert_values(y1, want, T * D, 1e-12);
    free(want);
    tg_scope_end();
    tg_release(tgt);
    tg_release(mem);
    tg_release(mp);
    tg_decoder_layer_free(m);
    tg_rng_free(rng);
}
END_TEST

/* A source row that is all padding: every target position of that row has
 * every memory key masked, so its cross-attention weights are zero and that
 * sublayer gives multihead_attn.out_proj.bias: finite, whatever memory holds,
 * with finite gradients; the other row is as if it were alone. */
static void check_fully_padded_source(bool norm_first)
{
    tg_rng *rng = tg_rng_new(10);
    tg_decoder_config c = config(TG_ACT_RELU, norm_first, 0.0);
    tg_decoder *m = tg_decoder_new(&c, 2, true, TG_FLOAT64, rng);
    tg_params ps = {0};
    ck_assert_int_eq(tg_decoder_params(m, NULL, &ps), 0);
    tg_tensor *tgt = input(TG_FLOAT64, T, 0.1), *mem = input(TG_FLOAT64, S, 0.9);
    tg_tensor *other = input(TG_FLOAT64, S, 2.5);
    tg_tensor *pad = make(TG_BOOL, 2, SHAPE(B, S), (const double[]){1, 1, 1, 1, 0, 0, 1, 0});
    tg_decoder_masks k = {.tgt_is_causal = true, .memory_key_padding_mask = pad};
    tg_scope_begin();
    tg_tensor *y = tg_decoder_forward(m, tgt, mem, &k);
    tg_tensor *y2 = tg_decoder_forward(m, tgt, other, &k);
    ck_assert_msg(y && y2, "%s", tg_error_message());
    double *a = values_of(y), *b = values_of(y2);
    for (int i = 0; i < B * T * D; i++)
        ck_assert_msg(isfinite(a[i]), "element %d is %g", i, a[i]);
    for (int i = 0; i < T * D; i++) /* row 0 does not depend on memory */
        ck_assert_msg(a[i] == b[i], "element %d: %.17g vs %.17g", i, a[i], b[i]);
    free(a);
    free(b);
    /* row 1 alone, unbatched, gives the same */
    tg_tensor *alone = tg_decoder_forward(m, tg_squeeze(tg_narrow(tgt, 0, 1, 1), 0),
                                          tg_squeeze(tg_narrow(mem, 0, 1, 1), 0),
                                          &(tg_decoder_masks){.tgt_is_causal = true,
                                                              .memory_key_padding_mask =
                                                                  tg_squeeze(tg_narrow(pad, 0, 1, 1), 0)});
    double *want = values_of(alone);
    assert_values(tg_narrow(y, 0, 1, 1), want, T * D, 1e-12);
    free(want);
    ck_assert_int_eq(tg_backward(tg_sum(tg_mul(y, y), NULL, 0, false), NULL), 0);
    tg_scope_end();
    for (int i = 0; i < ps.count; i++) {
        tg_tensor *g = tg_grad(ps.tensors[i]);
        ck_assert_ptr_nonnull(g);
        double *v = values_of(g);
        for (int64_t j = 0; j < tg_numel(g); j++)
            ck_assert_msg(isfinite(v[j]), "%s[%lld] is %g", ps.names[i], (long long)j, v[j]);
        free(v);
        tg_release(g);
    }
    tg_release(tgt);
    tg_release(mem);
    tg_release(other);
    tg_release(pad);
    tg_params_clear(&ps);
    tg_decoder_free(m);
    tg_rng_free(rng);
}

START_TEST(fully_padded_source_row_gives_finite_output_that_ignores_memory)
{
    check_fully_padded_source(false);
    check_fully_padded_source(true);
}
END_TEST

/* ---- errors -------------------------------------------------------------------- */

START_TEST(new_rejects_bad_configs)
{
    tg_rng *rng = tg_rng_new(1);
    tg_decoder_config c = config(TG_ACT_RELU, false, 0.1);
    c.nhead = 3;
    ck_assert_ptr_null(tg_decoder_layer_new(&c, TG_FLOAT32, rng));
    ck_assert_error(TG_ERR_VALUE, "tg_decoder_layer_new", "d_model 4", "nhead 3");
    c = config(TG_ACT_RELU, false, 1.0);
    ck_assert_ptr_null(tg_decoder_layer_new(&c, TG_FLOAT32, rng));
    ck_assert_error(TG_ERR_VALUE, "tg_decoder_layer_new", "dropout 1");
    c = config((tg_activation)9, false, 0.1);
    ck_assert_ptr_null(tg_decoder_new(&c, 2, true, TG_FLOAT32, rng));
    ck_assert_error(TG_ERR_VALUE, "tg_decoder_new", "activation 9");
    c = config(TG_ACT_RELU, false, 0.1);
    ck_assert_ptr_null(tg_decoder_layer_new(&c, TG_BOOL, rng));
    ck_assert_error(TG_ERR_DTYPE, "tg_decoder_layer_new", "bool");
    ck_assert_ptr_null(tg_decoder_new(&c, 0, true, TG_FLOAT32, rng));
    ck_assert_error(TG_ERR_VALUE, "tg_decoder_new", "num_layers 0");
    ck_assert_ptr_null(tg_decoder_layer_new(NULL, TG_FLOAT32, rng));
    ck_assert_error(TG_ERR_NULL, "tg_decoder_layer_new");
    ck_assert_ptr_null(tg_decoder_new(&c, 1, true, TG_FLOAT32, NULL));
    ck_assert_error(TG_ERR_NULL, "tg_decoder_new");
    tg_rng_free(rng);
}
END_TEST

START_TEST(forward_rejects_memory_of_another_width_batch_or_dtype)
{
    tg_rng *rng = tg_rng_new(1);
    tg_decoder_config c = config(TG_ACT_RELU, false, 0.0);
    tg_decoder *m = tg_decoder_new(&c, 2, true, TG_FLOAT32, rng);
    tg_tensor *tgt = input(TG_FLOAT32, T, 0.1);
    tg_tensor *wide = tg_zeros(TG_FLOAT32, 3, SHAPE(B, S, D + 1));
    tg_tensor *batch3 = tg_zeros(TG_FLOAT32, 3, SHAPE(3, S, D));
    tg_tensor *flat = tg_zeros(TG_FLOAT32, 2, SHAPE(S, D));
    tg_tensor *dbl = tg_zeros(TG_FLOAT64, 3, SHAPE(B, S, D));
    tg_tensor *badtgt = tg_zeros(TG_FLOAT32, 3, SHAPE(B, T, D + 2));
    ck_assert_ptr_null(tg_decoder_forward(m, tgt, wide, NULL));
    ck_assert_error(TG_ERR_SHAPE, "tg_decoder_layer_forward", "memory [2,4,5]", "tgt [2,3,4]");
    ck_assert_ptr_null(tg_decoder_forward(m, tgt, batch3, NULL));
    ck_assert_error(TG_ERR_SHAPE, "tg_decoder_layer_forward", "memory [3,4,4]", "batch");
    ck_assert_ptr_null(tg_decoder_forward(m, tgt, flat, NULL));
    ck_assert_error(TG_ERR_SHAPE, "tg_decoder_layer_forward", "memory [4,4]");
    ck_assert_ptr_null(tg_decoder_forward(m, tgt, dbl, NULL));
    ck_assert_error(TG_ERR_DTYPE, "tg_decoder_layer_forward", "float64", "float32");
    ck_assert_ptr_null(tg_decoder_forward(m, badtgt, wide, NULL));
    ck_assert_error(TG_ERR_SHAPE, "tg_decoder_layer_forward", "tgt [2,3,6]", "d_model 4");
    ck_assert_ptr_null(tg_decoder_forward(m, tgt, NULL, NULL));
    ck_assert_error(TG_ERR_NULL, "tg_decoder_forward");
    ck_assert_ptr_null(tg_decoder_layer_forward(NULL, tgt, wide, NULL));
    ck_assert_error(TG_ERR_NULL, "tg_decoder_layer_forward");
    ck_assert_int_eq(tg_decoder_params(m, NULL, NULL), -1);
    ck_assert_error(TG_ERR_NULL, "tg_decoder_params");
    tg_release(tgt);
    tg_release(wide);
    tg_release(batch3);
    tg_release(flat);
    tg_release(dbl);
    tg_release(badtgt);
    tg_decoder_free(m);
    tg_decoder_free(NULL);
    tg_decoder_layer_free(NULL);
    tg_rng_free(rng);
}
END_TEST

START_TEST(forward_rejects_masks_of_the_wrong_shape_or_dtype)
{
    tg_rng *rng = tg_rng_new(1);
    tg_decoder_config c = config(TG_ACT_RELU, true, 0.0);
    tg_decoder_layer *m = tg_decoder_layer_new(&c, TG_FLOAT32, rng);
    tg_tensor *tgt = input(TG_FLOAT32, T, 0.1), *mem = input(TG_FLOAT32, S, 0.9);
    tg_tensor *tt = tg_zeros(TG_BOOL, 2, SHAPE(T, S)), *ts = tg_zeros(TG_BOOL, 2, SHAPE(T, T));
    tg_tensor *bt = tg_zeros(TG_BOOL, 2, SHAPE(B, T)), *bs = tg_zeros(TG_BOOL, 2, SHAPE(B, S));
    tg_tensor *ints = tg_zeros(TG_INT64, 2, SHAPE(T, T));
    struct {
        tg_decoder_masks k;
        tg_error code;
        const char *frag1, *frag2;
    } cases[] = {
        {{.tgt_mask = tt}, TG_ERR_SHAPE, "tgt_mask [3,4]", "[3,3]"},
        {{.memory_mask = ts}, TG_ERR_SHAPE, "memory_mask [3,3]", "[3,4]"},
        {{.tgt_key_padding_mask = bs}, TG_ERR_SHAPE, "tgt_key_padding_mask [2,4]", "[2,3]"},
        {{.memory_key_padding_mask = bt}, TG_ERR_SHAPE, "memory_key_padding_mask [2,3]", "[2,4]"},
        {{.memory_key_padding_mask = ts}, TG_ERR_SHAPE, "memory_key_padding_mask [3,3]", "[2,4]"},
        {{.tgt_mask = ints}, TG_ERR_DTYPE, "tgt_mask", "int64"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ck_assert_ptr_null(tg_decoder_layer_forward(m, tgt, mem, &cases[i].k));
        ck_assert_error(cases[i].code, "tg_decoder_layer_forward", cases[i].frag1, cases[i].frag2);
    }
    tg_release(tgt);
    tg_release(mem);
    tg_release(tt);
    tg_release(ts);
    tg_release(bt);
    tg_release(bs);
    tg_release(ints);
    tg_decoder_layer_free(m);
    tg_rng_free(rng);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("decoder");
    TCase *names = tcase_checked("names_init");
    tcase_add_test(names, layer_param_names_match_pytorch_state_dict);
    tcase_add_test(names, decoder_names_layers_then_the_final_norm);
    tcase_add_test(names, layer_draws_self_attn_then_multihead_attn_then_linears);
    suite_add_tcase(s, names);

    TCase *grad = tcase_checked("gradients");
    tcase_set_timeout(grad, 60);
    tcase_add_test(grad, post_norm_relu_layer_passes_gradcheck_with_float_tgt_mask_and_padding);
    tcase_add_test(grad, pre_norm_gelu_layer_passes_gradcheck_with_bool_tgt_mask_and_float_masks);
    tcase_add_test(grad, post_norm_gelu_layer_passes_gradcheck_when_causal_without_masks);
    tcase_add_test(grad, pre_norm_relu_layer_passes_gradcheck_with_memory_padding_only);
    tcase_add_test(grad, two_layer_decoder_with_final_norm_passes_gradcheck);
    suite_add_tcase(s, grad);

    TCase *beh = tcase_checked("behaviour");
    tcase_add_test(beh, tgt_is_causal_equals_the_square_subsequent_mask);
    tcase_add_test(beh, dropout_acts_only_in_training);
    tcase_add_test(beh, unbatched_input_matches_one_batch_row);
    tcase_add_test(beh, fully_padded_source_row_gives_finite_output_that_ignores_memory);
    suite_add_tcase(s, beh);

    TCase *err = tcase_checked("errors");
    tcase_add_test(err, new_rejects_bad_configs);
    tcase_add_test(err, forward_rejects_memory_of_another_width_batch_or_dtype);
    tcase_add_test(err, forward_rejects_masks_of_the_wrong_shape_or_dtype);
    suite_add_tcase(s, err);
    return run_suite(s);
}
