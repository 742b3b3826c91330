/* nn.Transformer: names, PyTorch's xavier re-initialisation, float64
 * gradchecks with padded source and target, square_subsequent_mask, bad input,
 * and docs/attention.md's three uses of attention as code that runs. */
#include "transformer_testutil.h"

static tg_transformer_config config(int enc, int dec, bool norm_first, double dropout)
{
    return (tg_transformer_config){.d_model = D, .nhead = NH, .dim_feedforward = DFF,
                                   .num_encoder_layers = enc, .num_decoder_layers = dec,
                                   .dropout = dropout, .layer_norm_eps = 1e-5,
                                   .activation = TG_ACT_RELU, .norm_first = norm_first};
}

/* ---- names and init ----------------------------------------------------------- */

START_TEST(param_names_follow_pytorch_encoder_then_decoder)
{
    tg_rng *rng = tg_rng_new(1);
    tg_transformer_config c = config(2, 3, false, 0.1);
    tg_transformer *m = tg_transformer_new(&c, TG_FLOAT32, rng);
    ck_assert_ptr_nonnull(m);
    ck_assert_ptr_nonnull(m->encoder->norm);
    ck_assert_ptr_nonnull(m->decoder->norm);
    tg_params ps = {0};
    ck_assert_int_eq(tg_transformer_params(m, NULL, &ps), 0);
    ck_assert_int_eq(ps.count, 2 * 12 + 2 + 3 * 18 + 2);
    ck_assert_str_eq(ps.names[0], "encoder.layers.0.self_attn.in_proj_weight");
    ck_assert_str_eq(ps.names[24], "encoder.norm.weight");
    ck_assert_str_eq(ps.names[26], "decoder.layers.0.self_attn.in_proj_weight");
    ck_assert_str_eq(ps.names[26 + 18 + 4], "decoder.layers.1.multihead_attn.in_proj_weight");
    ck_assert_str_eq(ps.names[ps.count - 1], "decoder.norm.bias");
    tg_params_clear(&ps);
    ck_assert_int_eq(tg_transformer_params(m, "model", &ps), 0);
    ck_assert_str_eq(ps.names[25], "model.encoder.norm.bias");
    tg_params_clear(&ps);
    tg_transformer_free(m);
    tg_rng_free(rng);
}
END_TEST

/* As PyTorch's _reset_parameters: the modules are built (encoder, then
 * decoder), then every parameter of two dims is redrawn from xavier_uniform
 * in state_dict order; vectors keep their init. */
START_TEST(new_redraws_every_matrix_from_xavier_uniform_in_order)
{
    tg_rng *rng = tg_rng_new(42);
    tg_transformer_config c = config(1, 2, true, 0.0);
    tg_transformer *m = tg_transformer_new(&c, TG_FLOAT64, rng);
    ck_assert_ptr_nonnull(m);
    tg_rng_seed(rng, 42);
    tg_encoder_config lc = {.d_model = D, .nhead = NH, .dim_feedforward = DFF,
                            .layer_norm_eps = 1e-5, .activation = TG_ACT_RELU, .norm_first = true};
    tg_encoder *e = tg_encoder_new(&lc, 1, true, TG_FLOAT64, rng);
    tg_decoder *d = tg_decoder_new(&lc, 2, true, TG_FLOAT64, rng);
    tg_params got = {0}, want = {0};
    ck_assert_int_eq(tg_transformer_params(m, NULL, &got), 0);
    ck_assert_int_eq(tg_encoder_params(e, "encoder", &want), 0);
    ck_assert_int_eq(tg_decoder_params(d, "decoder", &want), 0);
    ck_assert_int_eq(got.count, want.count);
    int matrices = 0;
    for (int i = 0; i < got.count; i++) {
        ck_assert_str_eq(got.names[i], want.names[i]);
        tg_tensor *w = want.tensors[i];
        if (tg_ndim(w) < 2) {
            assert_same(got.tensors[i], w);
            continue;
        }
        double a = sqrt(6.0 / (double)(tg_shape(w)[0] + tg_shape(w)[1]));
        tg_tensor *u = tg_uniform(rng, TG_FLOAT64, 2, tg_shape(w), -a, a);
        assert_same(got.tensors[i], u);
        tg_release(u);
        matrices++;
    }
    ck_assert_int_eq(matrices, 1 * 4 + 2 * 6);
    ck_assert(tg_requires_grad(got.tensors[0]));
    tg_params_clear(&got);
    tg_params_clear(&want);
    tg_encoder_free(e);
    tg_decoder_free(d);
    tg_transformer_free(m);
    tg_rng_free(rng);
}
END_TEST

/* Built inside a scope, the model owns its parameters and the scope only
 * what the construction drew and threw away: ending it leaves exactly the
 * parameters alive, and the model usable. */
START_TEST(new_inside_a_scope_leaves_the_parameters_alone)
{
    tg_rng *rng = tg_rng_new(12);
    tg_transformer_config c = config(1, 1, false, 0.0);
    int64_t before = tg_live_tensors();
    tg_scope_begin();
    tg_transformer *m = tg_transformer_new(&c, TG_FLOAT32, rng);
    tg_scope_end();
    ck_assert_ptr_nonnull(m);
    /* (run in checked mode: a tensor released twice would be TG_ERR_STATE) */
    ck_assert_msg(tg_error_code() == TG_OK, "%s", tg_error_message());
    tg_params ps = {0};
    ck_assert_int_eq(tg_transformer_params(m, NULL, &ps), 0);
    ck_assert_int_eq(tg_live_tensors() - before, ps.count);
    tg_tensor *src = input(TG_FLOAT32, S, 0.2), *tgt = input(TG_FLOAT32, T, 1.1);
    tg_tensor *y = tg_transformer_forward(m, src, tgt, NULL);
    ck_assert_msg(y != NULL, "%s", tg_error_message());
    tg_release(y);
    tg_release(src);
    tg_release(tgt);
    tg_params_clear(&ps);
    tg_transformer_free(m);
    tg_rng_free(rng);
}
END_TEST

/* ---- gradients ------------------------------------------------------------------- */

typedef struct {
    tg_transformer *m;
    slots s;
    tg_transformer_masks masks;
} model_ctx;

/* inputs: src, tgt, then every parameter in state_dict order. */
static tg_tensor *model_fn(tg_tensor *const *in, int n, void *ctx)
{
    (void)n;
    model_ctx *c = ctx;
    tg_tensor *saved[MAX_SLOTS];
    bind(&c->s, in + 2, saved);
    tg_tensor *y = tg_transformer_forward(c->m, in[0], in[1], &c->masks);
    unbind(&c->s, saved);
    return y;
}

static void check_model_gradients(bool norm_first)
{
    tg_rng *rng = tg_rng_new(7);
    tg_transformer_config cfg = config(1, 1, norm_first, 0.0);
    tg_tensor *src_pad = make(TG_BOOL, 2, SHAPE(B, S), (const double[]){1, 0, 0, 0, 0, 0, 1, 1});
    tg_tensor *tgt_pad = make(TG_BOOL, 2, SHAPE(B, T), (const double[]){0, 0, 1, 0, 1, 0});
    tg_tensor *tgt_mask = tg_square_subsequent_mask(T, TG_FLOAT64);
    model_ctx c = {.m = tg_transformer_new(&cfg, TG_FLOAT64, rng),
                   .masks = {.src_key_padding_mask = src_pad,
                             .tgt = {.tgt_mask = tgt_mask, .tgt_key_padding_mask = tgt_pad,
                                     .memory_key_padding_mask = src_pad}}};
    ck_assert_ptr_nonnull(c.m);
    tg_params ps = {0};
    ck_assert_int_eq(tg_transformer_params(c.m, NULL, &ps), 0);
    perturb_params(&ps);
    encoder_layer_slots(&c.s, c.m->encoder->layers[0]);
    norm_slots(&c.s, c.m->encoder->norm);
    decoder_layer_slots(&c.s, c.m->decoder->layers[0]);
    norm_slots(&c.s, c.m->decoder->norm);
    ck_assert_int_eq(c.s.count, ps.count);
    tg_tensor *in[2 + MAX_SLOTS];
    in[0] = tg_randn(rng, TG_FLOAT64, 3, SHAPE(B, S, D));
    in[1] = tg_randn(rng, TG_FLOAT64, 3, SHAPE(B, T, D));
    for (int k = 0; k < ps.count; k++) {
        ck_assert_ptr_eq(*c.s.at[k], ps.tensors[k]);
        in[k + 2] = ps.tensors[k];
    }
    tg_gradcheck_result r;
    ck_assert_msg(tg_gradcheck(model_fn, &c, in, 2 + ps.count, NULL, &r) == 1, "%s", r.message);
    ck_assert_int_eq(r.checked, B * S * D + B * T * D + (int)tg_params_numel(&ps));
    ck_assert_msg(tg_gradcheck_float32(model_fn, &c, in, 2 + ps.count, NULL, &r) == 1, "%s",
                  r.message);
    tg_release(in[0]);
    tg_release(in[1]);
    tg_release(src_pad);
    tg_release(tgt_pad);
    tg_release(tgt_mask);
    tg_params_clear(&ps);
    tg_transformer_free(c.m);
    tg_rng_free(rng);
}

START_TEST(post_norm_transformer_passes_gradcheck_with_padded_source_and_target)
{
    check_model_gradients(false);
}
END_TEST

START_TEST(pre_norm_transformer_passes_gradcheck_with_padded_source_and_target)
{
    check_model_gradients(true);
}
END_TEST

/* ---- behaviour ---------------------------------------------------------------------- */

START_TEST(forward_is_the_decoder_over_the_encoder_memory)
{
    tg_rng *rng = tg_rng_new(3);
    tg_transformer_config c = config(2, 2, false, 0.0);
    tg_transformer *m = tg_transformer_new(&c, TG_FLOAT64, rng);
    tg_tensor *src = input(TG_FLOAT64, S, 0.2), *tgt = input(TG_FLOAT64, T, 1.1);
    tg_tensor *pad = make(TG_BOOL, 2, SHAPE(B, S), (const double[]){0, 0, 0, 1, 1, 0, 0, 0});
    tg_transformer_masks k = {.src_key_padding_mask = pad,
                              .tgt = {.tgt_is_causal = true, .memory_key_padding_mask = pad}};
    tg_scope_begin();
    tg_tensor *y = tg_transformer_forward(m, src, tgt, &k);
    ck_assert_shape(y, B, T, D);
    tg_tensor *memory = tg_encoder_forward(m->encoder, src, NULL, pad);
    tg_tensor *want = tg_decoder_forward(m->decoder, tgt, memory, &k.tgt);
    assert_same(y, want);
    tg_scope_end();
    tg_release(src);
    tg_release(tgt);
    tg_release(pad);
    tg_transformer_free(m);
    tg_rng_free(rng);
}
END_TEST

START_TEST(set_train_reaches_encoder_and_decoder)
{
    tg_rng *rng = tg_rng_new(4);
    tg_transformer_config c = config(1, 2, false, 0.3);
    tg_transformer *m = tg_transformer_new(&c, TG_FLOAT32, rng);
    ck_assert(m->encoder->layers[0]->train && m->decoder->layers[1]->multihead_attn->train);
    tg_transformer_set_train(m, false);
    ck_assert(!m->encoder->layers[0]->train && !m->encoder->layers[0]->self_attn->train);
    ck_assert(!m->decoder->layers[1]->train && !m->decoder->layers[1]->multihead_attn->train);
    tg_tensor *src = input(TG_FLOAT32, S, 0.2), *tgt = input(TG_FLOAT32, T, 1.1);
    tg_tensor *a = tg_transformer_forward(m, src, tgt, NULL);
    tg_tensor *b = tg_transformer_forward(m, src, tgt, NULL);
    assert_same(a, b);
    tg_transformer_set_train(m, true);
    ck_assert(m->decoder->layers[0]->self_attn->train);
    tg_transformer_set_train(NULL, false);
    tg_release(a);
    tg_release(b);
    tg_release(src);
    tg_release(tgt);
    tg_transformer_free(m);
    tg_transformer_free(NULL);
    tg_rng_free(rng);
}
END_TEST

START_TEST(square_subsequent_mask_is_zero_below_and_minus_inf_above)
{
    const double I = INFINITY;
    tg_tensor *f = tg_square_subsequent_mask(3, TG_FLOAT32);
    ck_assert_int_eq(tg_dtype_of(f), TG_FLOAT32);
    ck_assert_shape(f, 3, 3);
    ck_assert_values(f, 0, 0, -I, -I, 0, 0, -I, 0, 0, 0);
    tg_tensor *d = tg_square_subsequent_mask(2, TG_FLOAT64);
    ck_assert_int_eq(tg_dtype_of(d), TG_FLOAT64);
    ck_assert_values(d, 0, 0, -I, 0, 0);
    tg_tensor *b = tg_square_subsequent_mask(3, TG_BOOL);
    ck_assert_int_eq(tg_dtype_of(b), TG_BOOL);
    ck_assert_values(b, 0, 0, 1, 1, 0, 0, 1, 0, 0, 0);
    ck_assert_ptr_null(tg_square_subsequent_mask(0, TG_FLOAT32));
    ck_assert_error(TG_ERR_VALUE, "tg_square_subsequent_mask", "n 0");
    ck_assert_ptr_null(tg_square_subsequent_mask(3, TG_INT64));
    ck_assert_error(TG_ERR_DTYPE, "tg_square_subsequent_mask", "int64");
    tg_release(f);
    tg_release(d);
    tg_release(b);
}
END_TEST

/* ---- errors ---------------------------------------------------------------------------- */

START_TEST(new_rejects_bad_configs)
{
    tg_rng *rng = tg_rng_new(1);
    tg_transformer_config c = config(0, 1, false, 0.1);
    ck_assert_ptr_null(tg_transformer_new(&c, TG_FLOAT32, rng));
    ck_assert_error(TG_ERR_VALUE, "tg_transformer_new", "num_encoder_layers 0");
    c = config(1, -2, false, 0.1);
    ck_assert_ptr_null(tg_transformer_new(&c, TG_FLOAT32, rng));
    ck_assert_error(TG_ERR_VALUE, "tg_transformer_new", "num_decoder_layers -2");
    c = config(1, 1, false, 0.1);
    c.nhead = 3;
    ck_assert_ptr_null(tg_transformer_new(&c, TG_FLOAT32, rng));
    ck_assert_error(TG_ERR_VALUE, "tg_transformer_new", "nhead 3");
    c = config(1, 1, false, 0.1);
    ck_assert_ptr_null(tg_transformer_new(&c, TG_INT64, rng));
    ck_assert_error(TG_ERR_DTYPE, "tg_transformer_new", "int64");
    ck_assert_ptr_null(tg_transformer_new(NULL, TG_FLOAT32, rng));
    ck_assert_error(TG_ERR_NULL, "tg_transformer_new");
    tg_rng_free(rng);
}
END_TEST

START_TEST(forward_rejects_source_and_target_that_do_not_fit)
{
    tg_rng *rng = tg_rng_new(1);
    tg_transformer_config c = config(1, 1, false, 0.0);
    tg_transformer *m = tg_transformer_new(&c, TG_FLOAT32, rng);
    tg_tensor *src = input(TG_FLOAT32, S, 0.2), *tgt = input(TG_FLOAT32, T, 1.1);
    tg_tensor *tgt3 = tg_zeros(TG_FLOAT32, 3, SHAPE(3, T, D));
    tg_tensor *wide = tg_zeros(TG_FLOAT32, 3, SHAPE(B, S, D + 4));
    tg_tensor *badpad = tg_zeros(TG_BOOL, 2, SHAPE(B, S + 1));
    ck_assert_ptr_null(tg_transformer_forward(m, src, tgt3, NULL));
    ck_assert_error(TG_ERR_SHAPE, "tg_transformer_forward", "src [2,4,4]", "tgt [3,3,4]");
    ck_assert_ptr_null(tg_transformer_forward(m, wide, tgt, NULL));
    ck_assert_error(TG_ERR_SHAPE, "tg_transformer_forward", "src [2,4,8]", "d_model 4");
    tg_transformer_masks k = {.tgt = {.memory_key_padding_mask = badpad}};
    ck_assert_ptr_null(tg_transformer_forward(m, src, tgt, &k));
    ck_assert_error(TG_ERR_SHAPE, "memory_key_padding_mask [2,5]", "[2,4]");
    ck_assert_ptr_null(tg_transformer_forward(m, NULL, tgt, NULL));
    ck_assert_error(TG_ERR_NULL, "tg_transformer_forward");
    ck_assert_int_eq(tg_transformer_params(NULL, NULL, &(tg_params){0}), -1);
    ck_assert_error(TG_ERR_NULL, "tg_transformer_params");
    tg_release(src);
    tg_release(tgt);
    tg_release(tgt3);
    tg_release(wide);
    tg_release(badpad);
    tg_transformer_free(m);
    tg_rng_free(rng);
}
END_TEST

/* ---- docs/attention.md's three uses of attention ------------------------------------- */

/* The snippets of docs/attention.md's "The three uses of attention", as they are
 * there (between the markers), on random inputs: they compile and run. */
START_TEST(docs_three_uses_of_attention_run)
{
    enum { SRC = 6, TGT = 5 };
    tg_rng *rng = tg_rng_new(21);
    tg_scope_begin();
    int64_t T = TGT;
    tg_tensor *x = tg_randn(rng, TG_FLOAT32, 3, SHAPE(B, SRC, 32));
    tg_tensor *y = tg_randn(rng, TG_FLOAT32, 3, SHAPE(B, TGT, 32));
    tg_tensor *pad = make(TG_BOOL, 2, SHAPE(B, SRC), (const double[]){0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0});
    tg_tensor *tgt_pad = make(TG_BOOL, 2, SHAPE(B, TGT), (const double[]){0, 0, 0, 0, 1, 0, 0, 0, 0, 0});
    /* docs/attention.md begin */
    /* 1. Encoder (BERT): each position sees every real token of the sequence. */
    tg_encoder_config cfg = {.d_model = 32, .nhead = 4, .dim_feedforward = 64,
                             .layer_norm_eps = 1e-5, .activation = TG_ACT_GELU};
    tg_encoder *enc = tg_encoder_new(&cfg, 2, true, TG_FLOAT32, rng);
    tg_tensor *h = tg_encoder_forward(enc, x, NULL, pad);   /* x [B, S, 32], pad [B, S] true at padding */

    /* 2. Decoder only (GPT): position t sees positions 0..t. */
    tg_tensor *causal = tg_square_subsequent_mask(T, TG_BOOL);  /* [T, T], true above the diagonal */
    tg_tensor *g = tg_encoder_forward(enc, y, causal, NULL);     /* y [B, T, 32] */

    /* 3. Encoder-decoder (T5, BART, translation): causal self-attention over the
     * target, and cross-attention from each target position to the whole source. */
    tg_transformer_config tc = {.d_model = 32, .nhead = 4, .num_encoder_layers = 2,
                                .num_decoder_layers = 2, .dim_feedforward = 64,
                                .layer_norm_eps = 1e-5, .activation = TG_ACT_RELU};
    tg_transformer *model = tg_transformer_new(&tc, TG_FLOAT32, rng);
    tg_transformer_masks m = {.src_key_padding_mask = pad,
                              .tgt = {.tgt_is_causal = true, .tgt_key_padding_mask = tgt_pad,
                                      .memory_key_padding_mask = pad}};
    tg_tensor *out = tg_transformer_forward(model, x, y, &m);   /* [B, T, 32] */
    /* the same in two steps: encode the source once, then decode against it */
    tg_tensor *memory = tg_encoder_forward(model->encoder, x, NULL, pad);
    tg_tensor *out2 = tg_decoder_forward(model->decoder, y, memory, &m.tgt);
    /* docs/attention.md end */
    ck_assert_shape(h, B, SRC, 32);
    ck_assert_shape(g, B, TGT, 32);
    ck_assert_shape(out, B, TGT, 32);
    double *a = values_of(out), *b = values_of(out2);
    for (int i = 0; i < B * TGT * 32; i++)
        ck_assert_double_eq(a[i], b[i]);
    free(a);
    free(b);
    /* causal: a new last target position changes nothing before it */
    double dv[B * TGT * 32] = {0};
    for (int bi = 0; bi < B; bi++)
        for (int i = 0; i < 32; i++)
            dv[(bi * TGT + TGT - 1) * 32 + i] = 5.0; /* the last position of each row */
    tg_tensor *y2 = tg_add(y, make(TG_FLOAT32, 3, SHAPE(B, TGT, 32), dv));
    tg_tensor *g2 = tg_encoder_forward(enc, y2, causal, NULL);
    double *ga = values_of(g), *gb = values_of(g2);
    for (int bi = 0; bi < B; bi++)
        for (int i = 0; i < (TGT - 1) * 32; i++)
            ck_assert_double_eq(ga[bi * TGT * 32 + i], gb[bi * TGT * 32 + i]);
    ck_assert(ga[TGT * 32 - 1] != gb[TGT * 32 - 1]);
    free(ga);
    free(gb);
    tg_scope_end();
    tg_encoder_free(enc);
    tg_transformer_free(model);
    tg_rng_free(rng);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("transformer");
    TCase *init = tcase_checked("names_init");
    tcase_add_test(init, param_names_follow_pytorch_encoder_then_decoder);
    tcase_add_test(init, new_redraws_every_matrix_from_xavier_uniform_in_order);
    tcase_add_test(init, new_inside_a_scope_leaves_the_parameters_alone);
    suite_add_tcase(s, init);

    TCase *grad = tcase_checked("gradients");
    tcase_set_timeout(grad, 60);
    tcase_add_test(grad, post_norm_transformer_passes_gradcheck_with_padded_source_and_target);
    tcase_add_test(grad, pre_norm_transformer_passes_gradcheck_with_padded_source_and_target);
    suite_add_tcase(s, grad);

    TCase *beh = tcase_checked("behaviour");
    tcase_add_test(beh, forward_is_the_decoder_over_the_encoder_memory);
    tcase_add_test(beh, set_train_reaches_encoder_and_decoder);
    tcase_add_test(beh, square_subsequent_mask_is_zero_below_and_minus_inf_above);
    tcase_add_test(beh, docs_three_uses_of_attention_run);
    suite_add_tcase(s, beh);

    TCase *err = tcase_checked("errors");
    tcase_add_test(err, new_rejects_bad_configs);
    tcase_add_test(err, forward_rejects_source_and_target_that_do_not_fit);
    suite_add_tcase(s, err);
    return run_suite(s);
}
