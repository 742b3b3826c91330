/* Parity with PyTorch: each test loads a fixture written by
 * tests/fixtures/gen_fixtures.py or transformer_reference.py (torch's
 * parameters, inputs, outputs and gradients), runs the same module here in
 * float32 and compares. */
#include <limits.h>
#include <stdio.h>
#include <unistd.h>

#include "testutil.h"

#define RTOL 1e-4
#define ATOL 1e-5

/* ---- finding and loading fixtures ------------------------------------------------ */

static void load_fixture(const char *name, tg_params *fx)
{
    char file[128], path[PATH_MAX + 64];
    snprintf(file, sizeof file, "%s.safetensors", name);
    fixture_path(path, sizeof path, file);
    ck_assert_msg(tg_safetensors_load(path, fx) == 0, "loading %s: %s", path,
                  tg_error_message());
}

static bool starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* fx's tensor called prefix + name (borrowed), or NULL. */
static tg_tensor *entry(const tg_params *fx, const char *prefix, const char *name)
{
    char full[256];
    snprintf(full, sizeof full, "%s%s", prefix, name);
    return tg_params_find(fx, full);
}

static tg_tensor *need(const tg_params *fx, const char *prefix, const char *name)
{
    tg_tensor *t = entry(fx, prefix, name);
    ck_assert_msg(t != NULL, "fixture has no %s%s", prefix, name);
    return t;
}

/* ---- comparing ------------------------------------------------------------------- */

static void assert_same_shape(const tg_tensor *got, const tg_tensor *want, const char *what)
{
    ck_assert_msg(got != NULL, "%s: NULL (%s)", what, tg_error_message());
    bool same = tg_ndim(got) == tg_ndim(want);
    for (int d = 0; same && d < tg_ndim(got); d++)
        same = tg_shape(got)[d] == tg_shape(want)[d];
    ck_assert_msg(same, "%s: shape differs from the fixture's (ndim %d vs %d)", what,
                  tg_ndim(got), tg_ndim(want));
}

/* |got - want| <= ATOL + RTOL |want| elementwise. */
static void assert_close(const tg_tensor *got, const tg_tensor *want, const char *what)
{
    assert_same_shape(got, want, what);
    int64_t n = tg_numel(want);
    double *g = malloc((size_t)(n ? n : 1) * sizeof *g);
    double *w = malloc((size_t)(n ? n : 1) * sizeof *w);
    ck_assert_int_eq(tg_copy_to(got, TG_FLOAT64, g, n), 0);
    ck_assert_int_eq(tg_copy_to(want, TG_FLOAT64, w, n), 0);
    int64_t bad = -1;
    for (int64_t i = 0; i < n && bad < 0; i++)
        if (!(fabs(g[i] - w[i]) <= ATOL + RTOL * fabs(w[i])))
            bad = i;
    double gb = bad >= 0 ? g[bad] : 0, wb = bad >= 0 ? w[bad] : 0;
    free(g);
    free(w);
    ck_assert_msg(bad < 0, "%s: element %lld is %.9g, torch has %.9g", what, (long long)bad, gb,
                  wb);
}

/* Copies every param.<name> of the fixture into the module's parameter of
 * that name; asserts the two name sets are equal, which pins the names. */
static void copy_params(const tg_params *fx, const tg_params *ps)
{
    int in_fixture = 0;
    for (int i = 0; i < fx->count; i++)
        if (starts_with(fx->names[i], "param.")) {
            in_fixture++;
            ck_assert_msg(tg_params_find(ps, fx->names[i] + 6) != NULL,
                          "fixture parameter %s is not a module parameter", fx->names[i]);
        }
    for (int i = 0; i < ps->count; i++) {
        tg_tensor *src = entry(fx, "param.", ps->names[i]);
        ck_assert_msg(src != NULL, "module parameter %s is not in the fixture", ps->names[i]);
        tg_tensor *dst = ps->tensors[i];
        assert_same_shape(dst, src, ps->names[i]);
        ck_assert_int_eq(tg_dtype_of(dst), TG_FLOAT32);
        ck_assert(tg_is_contiguous(dst));
        ck_assert_int_eq(tg_copy_to(src, TG_FLOAT32, tg_data(dst), tg_numel(dst)), 0);
    }
    ck_assert_int_eq(in_fixture, ps->count);
}

/* Makes every float input (except the loss weights) require grad, as the
 * script's leaves did. */
static void inputs_require_grad(const tg_params *fx)
{
    for (int i = 0; i < fx->count; i++)
        if (starts_with(fx->names[i], "input.") && !starts_with(fx->names[i], "input.loss_weight") &&
            tg_dtype_of(fx->tensors[i]) == TG_FLOAT32)
            ck_assert_int_eq(tg_set_requires_grad(fx->tensors[i], true), 0);
}

/* Compares the tensors of ps with the fixture's grad.<name> entries, and the
 * float inputs' gradients with grad.<input name>; every grad.* entry must be
 * one of the two. Returns how many gradients were compared. */
static int compare_grads(const tg_params *fx, const tg_params *ps)
{
    int compared = 0;
    for (int i = 0; i < fx->count; i++) {
        const char *name = fx->names[i];
        if (!starts_with(name, "grad."))
            continue;
        tg_tensor *owner = tg_params_find(ps, name + 5);
        if (!owner)
            owner = entry(fx, "input.", name + 5);
        ck_assert_msg(owner != NULL, "%s names neither a parameter nor an input", name);
        tg_tensor *g = tg_grad(owner);
        ck_assert_msg(g != NULL, "%s: backward left no gradient", name);
        assert_close(g, fx->tensors[i], name);
        tg_release(g);
        compared++;
    }
    for (int i = 0; i < ps->count; i++)
        ck_assert_msg(entry(fx, "grad.", ps->names[i]) != NULL, "fixture lacks grad.%s",
                      ps->names[i]);
    return compared;
}

/* Compares outputs[i] with output.<names[i]> (every output.* entry must be
 * listed), then backpropagates loss = sum_i sum(outputs[i] * loss_weight_i)
 * as the script did and compares the gradients. */
static void check_outputs_and_grads(const tg_params *fx, const tg_params *ps, int n,
                                    const char *const *names, tg_tensor *const *outputs)
{
    int in_fixture = 0;
    for (int i = 0; i < fx->count; i++)
        in_fixture += starts_with(fx->names[i], "output.");
    ck_assert_int_eq(in_fixture, n);
    for (int i = 0; i < n; i++)
        assert_close(outputs[i], need(fx, "output.", names[i]), names[i]);

    tg_scope_begin();
    tg_tensor *loss = NULL;
    for (int i = 0; i < n; i++) {
        char wname[64];
        snprintf(wname, sizeof wname, i == 0 ? "loss_weight" : "loss_weight.%s", names[i]);
        tg_tensor *term = tg_sum(tg_mul(outputs[i], need(fx, "input.", wname)), NULL, 0, false);
        loss = loss ? tg_add(loss, term) : term;
    }
    ck_assert_msg(tg_backward(loss, NULL) == 0, "backward: %s", tg_error_message());
    tg_scope_end();
    ck_assert_int_gt(compare_grads(fx, ps), 0);
}

/* ---- MultiheadAttention -------------------------------------------------------------- */

/* Self-attention when the fixture has input.x, else query/key[/value];
 * weights are requested when the fixture has output.weights (averaged when
 * they are [B, L, S]). */
static void run_mha(const char *fixture)
{
    tg_params fx = {0}, ps = {0};
    load_fixture(fixture, &fx);
    inputs_require_grad(&fx);
    tg_rng *rng = tg_rng_new(1);
    tg_mha *m = tg_mha_new(8, 2, 0.0, true, TG_FLOAT32, rng);
    ck_assert_msg(m != NULL, "tg_mha_new: %s", tg_error_message());
    ck_assert_int_eq(tg_mha_params(m, NULL, &ps), 0);
    copy_params(&fx, &ps);

    tg_tensor *x = entry(&fx, "input.", "x");
    tg_tensor *q = x ? x : need(&fx, "input.", "query");
    tg_tensor *k = x ? x : need(&fx, "input.", "key");
    tg_tensor *v = x ? x : entry(&fx, "input.", "value");
    if (!v)
        v = k;
    tg_tensor *want_w = entry(&fx, "output.", "weights");
    tg_mha_options o = {
        .attn_mask = entry(&fx, "input.", "attn_mask"),
        .key_padding_mask = entry(&fx, "input.", "key_padding_mask"),
        .need_weights = want_w != NULL,
        .average_attn_weights = want_w && tg_ndim(want_w) == 3,
    };
    tg_tensor *w = NULL;
    tg_tensor *out = tg_mha_forward(m, q, k, v, &o, want_w ? &w : NULL);
    ck_assert_msg(out != NULL, "tg_mha_forward: %s", tg_error_message());
    const char *names[] = {"out", "weights"};
    tg_tensor *outs[] = {out, w};
    check_outputs_and_grads(&fx, &ps, want_w ? 2 : 1, names, outs);

    tg_release(out);
    tg_release(w);
    tg_params_clear(&ps);
    tg_mha_free(m);
    tg_rng_free(rng);
    tg_params_clear(&fx);
}

START_TEST(mha_self_attention_matches_torch) { run_mha("mha_self"); }
END_TEST
START_TEST(mha_cross_attention_with_distinct_key_value_matches_torch) { run_mha("mha_cross"); }
END_TEST
START_TEST(mha_causal_bool_attn_mask_matches_torch) { run_mha("mha_causal"); }
END_TEST
START_TEST(mha_key_padding_mask_matches_torch) { run_mha("mha_padding"); }
END_TEST
START_TEST(mha_averaged_weights_match_torch) { run_mha("mha_weights_avg"); }
END_TEST
START_TEST(mha_per_head_weights_with_padding_match_torch) { run_mha("mha_weights_heads"); }
END_TEST

/* ---- Transformer encoder ------------------------------------------------------------- */

static const tg_encoder_config *encoder_config(tg_activation act, bool norm_first)
{
    static tg_encoder_config c;
    c = (tg_encoder_config){.d_model = 8, .nhead = 2, .dim_feedforward = 16, .dropout = 0.0,
                            .layer_norm_eps = 1e-5, .activation = act, .norm_first = norm_first};
    return &c;
}

static void run_encoder_layer(const char *fixture, tg_activation act, bool norm_first)
{
    tg_params fx = {0}, ps = {0};
    load_fixture(fixture, &fx);
    inputs_require_grad(&fx);
    tg_rng *rng = tg_rng_new(2);
    tg_encoder_layer *m = tg_encoder_layer_new(encoder_config(act, norm_first), TG_FLOAT32, rng);
    ck_assert_msg(m != NULL, "tg_encoder_layer_new: %s", tg_error_message());
    ck_assert_int_eq(tg_encoder_layer_params(m, NULL, &ps), 0);
    copy_params(&fx, &ps);

    tg_tensor *out = tg_encoder_layer_forward(m, need(&fx, "input.", "src"),
                                              entry(&fx, "input.", "src_mask"),
                                              entry(&fx, "input.", "src_key_padding_mask"));
    ck_assert_msg(out != NULL, "tg_encoder_layer_forward: %s", tg_error_message());
    check_outputs_and_grads(&fx, &ps, 1, (const char *[]){"out"}, &out);

    tg_release(out);
    tg_params_clear(&ps);
    tg_encoder_layer_free(m);
    tg_rng_free(rng);
    tg_params_clear(&fx);
}

START_TEST(encoder_layer_post_norm_relu_with_padding_matches_torch)
{
    run_encoder_layer("encoder_post_relu", TG_ACT_RELU, false);
}
END_TEST

START_TEST(encoder_layer_pre_norm_gelu_with_causal_mask_matches_torch)
{
    run_encoder_layer("encoder_pre_gelu", TG_ACT_GELU, true);
}
END_TEST

START_TEST(encoder_two_layers_with_final_norm_matches_torch)
{
    tg_params fx = {0}, ps = {0};
    load_fixture("encoder_stack", &fx);
    inputs_require_grad(&fx);
    tg_rng *rng = tg_rng_new(3);
    tg_encoder *m = tg_encoder_new(encoder_config(TG_ACT_RELU, false), 2, true, TG_FLOAT32, rng);
    ck_assert_msg(m != NULL, "tg_encoder_new: %s", tg_error_message());
    ck_assert_int_eq(tg_encoder_params(m, NULL, &ps), 0);
    copy_params(&fx, &ps);

    tg_tensor *out = tg_encoder_forward(m, need(&fx, "input.", "src"), need(&fx, "input.", "mask"),
                                        need(&fx, "input.", "src_key_padding_mask"));
    ck_assert_msg(out != NULL, "tg_encoder_forward: %s", tg_error_message());
    check_outputs_and_grads(&fx, &ps, 1, (const char *[]){"out"}, &out);

    tg_release(out);
    tg_params_clear(&ps);
    tg_encoder_free(m);
    tg_rng_free(rng);
    tg_params_clear(&fx);
}
END_TEST

/* ---- the encoder-decoder (tests/fixtures/transformer_reference.py) ---------------------- */

/* The module's parameter names come in the order of torch's state_dict (the
 * fixture's param.* entries), so each side's file loads into the other. */
static void assert_state_dict_order(const tg_params *fx, const tg_params *ps)
{
    int k = 0;
    for (int i = 0; i < fx->count; i++)
        if (starts_with(fx->names[i], "param.")) {
            ck_assert_int_lt(k, ps->count);
            ck_assert_str_eq(ps->names[k], fx->names[i] + 6);
            k++;
        }
    ck_assert_int_eq(k, ps->count);
}

START_TEST(mha_with_kdim_and_vdim_matches_torch)
{
    tg_params fx = {0}, ps = {0};
    load_fixture("mha_kv", &fx);
    inputs_require_grad(&fx);
    tg_rng *rng = tg_rng_new(1);
    tg_mha *m = tg_mha_new_kv(8, 2, 5, 3, 0.0, true, TG_FLOAT32, rng);
    ck_assert_msg(m != NULL, "tg_mha_new_kv: %s", tg_error_message());
    ck_assert_int_eq(tg_mha_params(m, NULL, &ps), 0);
    assert_state_dict_order(&fx, &ps);
    copy_params(&fx, &ps);
    tg_mha_options o = {.key_padding_mask = need(&fx, "input.", "key_padding_mask")};
    tg_tensor *out = tg_mha_forward(m, need(&fx, "input.", "query"), need(&fx, "input.", "key"),
                                    need(&fx, "input.", "value"), &o, NULL);
    ck_assert_msg(out != NULL, "tg_mha_forward: %s", tg_error_message());
    check_outputs_and_grads(&fx, &ps, 1, (const char *const[]){"out"}, &out);
    tg_release(out);
    tg_params_clear(&ps);
    tg_mha_free(m);
    tg_rng_free(rng);
    tg_params_clear(&fx);
}
END_TEST

static const tg_decoder_config *decoder_config(tg_activation act, bool norm_first)
{
    static tg_decoder_config c;
    c = (tg_decoder_config){.d_model = 8, .nhead = 2, .dim_feedforward = 16, .dropout = 0.0,
                            .layer_norm_eps = 1e-5, .activation = act, .norm_first = norm_first};
    return &c;
}

/* The decoder's masks as the fixture has them (absent ones NULL). */
static tg_decoder_masks fixture_masks(const tg_params *fx)
{
    return (tg_decoder_masks){
        .tgt_mask = entry(fx, "input.", "tgt_mask"),
        .memory_mask = entry(fx, "input.", "memory_mask"),
        .tgt_key_padding_mask = entry(fx, "input.", "tgt_key_padding_mask"),
        .memory_key_padding_mask = entry(fx, "input.", "memory_key_padding_mask"),
    };
}

/* A decoder layer (layers 0) or a decoder of that many layers with its final norm. */
static void run_decoder(const char *fixture, tg_activation act, bool norm_first, int layers)
{
    tg_params fx = {0}, ps = {0};
    load_fixture(fixture, &fx);
    inputs_require_grad(&fx);
    tg_rng *rng = tg_rng_new(2);
    tg_decoder_layer *l = NULL;
    tg_decoder *d = NULL;
    if (layers == 0) {
        l = tg_decoder_layer_new(decoder_config(act, norm_first), TG_FLOAT32, rng);
        ck_assert_msg(l != NULL, "tg_decoder_layer_new: %s", tg_error_message());
        ck_assert_int_eq(tg_decoder_layer_params(l, NULL, &ps), 0);
    } else {
        d = tg_decoder_new(decoder_config(act, norm_first), layers, true, TG_FLOAT32, rng);
        ck_assert_msg(d != NULL, "tg_decoder_new: %s", tg_error_message());
        ck_assert_int_eq(tg_decoder_params(d, NULL, &ps), 0);
    }
    assert_state_dict_order(&fx, &ps);
    copy_params(&fx, &ps);
    tg_decoder_masks k = fixture_masks(&fx);
    tg_tensor *tgt = need(&fx, "input.", "tgt"), *mem = need(&fx, "input.", "memory");
    tg_tensor *out = l ? tg_decoder_layer_forward(l, tgt, mem, &k) : tg_decoder_forward(d, tgt, mem, &k);
    ck_assert_msg(out != NULL, "decoder forward: %s", tg_error_message());
    check_outputs_and_grads(&fx, &ps, 1, (const char *const[]){"out"}, &out);
    tg_release(out);
    tg_params_clear(&ps);
    tg_decoder_layer_free(l);
    tg_decoder_free(d);
    tg_rng_free(rng);
    tg_params_clear(&fx);
}

/* float additive tgt mask, both padding masks, a bool memory mask */
START_TEST(decoder_layer_post_norm_relu_with_every_mask_matches_torch)
{
    run_decoder("decoder_post_relu", TG_ACT_RELU, false, 0);
}
END_TEST

/* bool causal tgt mask, padded memory */
START_TEST(decoder_layer_pre_norm_gelu_with_causal_mask_matches_torch)
{
    run_decoder("decoder_pre_gelu", TG_ACT_GELU, true, 0);
}
END_TEST

START_TEST(decoder_two_layers_with_final_norm_matches_torch)
{
    run_decoder("decoder_stack", TG_ACT_RELU, false, 2);
}
END_TEST

START_TEST(transformer_with_padded_source_and_target_matches_torch)
{
    tg_params fx = {0}, ps = {0};
    load_fixture("transformer", &fx);
    inputs_require_grad(&fx);
    tg_rng *rng = tg_rng_new(3);
    tg_transformer_config c = {.d_model = 8, .nhead = 2, .dim_feedforward = 16,
                               .num_encoder_layers = 2, .num_decoder_layers = 2,
                               .dropout = 0.0, .layer_norm_eps = 1e-5,
                               .activation = TG_ACT_RELU};
    tg_transformer *m = tg_transformer_new(&c, TG_FLOAT32, rng);
    ck_assert_msg(m != NULL, "tg_transformer_new: %s", tg_error_message());
    ck_assert_int_eq(tg_transformer_params(m, NULL, &ps), 0);
    assert_state_dict_order(&fx, &ps);
    copy_params(&fx, &ps);
    tg_tensor *pad = need(&fx, "input.", "src_key_padding_mask");
    tg_transformer_masks k = {
        .src_key_padding_mask = pad,
        .tgt = {.tgt_mask = need(&fx, "input.", "tgt_mask"),
                .tgt_key_padding_mask = need(&fx, "input.", "tgt_key_padding_mask"),
                .memory_key_padding_mask = pad},
    };
    tg_tensor *out = tg_transformer_forward(m, need(&fx, "input.", "src"),
                                            need(&fx, "input.", "tgt"), &k);
    ck_assert_msg(out != NULL, "tg_transformer_forward: %s", tg_error_message());
    check_outputs_and_grads(&fx, &ps, 1, (const char *const[]){"out"}, &out);
    tg_release(out);
    tg_params_clear(&ps);
    tg_transformer_free(m);
    tg_rng_free(rng);
    tg_params_clear(&fx);
}
END_TEST

/* ---- GPT ------------------------------------------------------------------------------ */

/* Loads a GPT fixture into the tiny GPT here and compares logits and loss,
 * and, with grads, every parameter's gradient. */
static void run_gpt(const char *fixture, bool grads)
{
    tg_params fx = {0}, ps = {0};
    load_fixture(fixture, &fx);
    tg_rng *rng = tg_rng_new(4);
    tg_gpt_config cfg = {.vocab_size = 11, .block_size = 8, .n_layer = 2, .n_head = 2,
                         .n_embd = 8, .dropout = 0.0};
    tg_gpt *m = tg_gpt_new(&cfg, TG_FLOAT32, rng);
    ck_assert_msg(m != NULL, "tg_gpt_new: %s", tg_error_message());
    ck_assert_int_eq(tg_gpt_params(m, &ps), 0);
    copy_params(&fx, &ps);

    tg_tensor *loss = NULL;
    tg_tensor *logits = tg_gpt_forward(m, need(&fx, "input.", "idx"),
                                       need(&fx, "input.", "targets"), &loss);
    ck_assert_msg(logits != NULL && loss != NULL, "tg_gpt_forward: %s", tg_error_message());
    assert_close(logits, need(&fx, "output.", "logits"), "logits");
    assert_close(loss, need(&fx, "output.", "loss"), "loss");
    if (grads) {
        ck_assert_int_eq(tg_backward(loss, NULL), 0);
        /* every parameter, the tied wte (embedding + LM head) among them */
        ck_assert_int_eq(compare_grads(&fx, &ps), ps.count);
    }
    tg_release(logits);
    tg_release(loss);
    tg_params_clear(&ps);
    tg_gpt_free(m);
    tg_rng_free(rng);
    tg_params_clear(&fx);
}

START_TEST(gpt_logits_loss_and_grads_match_torch) { run_gpt("gpt", true); }
END_TEST

/* The reverse of tests/interop: weights trained by AdamW in PyTorch. */
START_TEST(gpt_trained_in_torch_gives_the_same_logits_here) { run_gpt("gpt_trained", false); }
END_TEST

/* ---- AdamW ---------------------------------------------------------------------------- */

/* Gives p exactly the gradient g: backward of sum(p * g). */
static void set_grad(tg_tensor *p, const tg_tensor *g)
{
    tg_scope_begin();
    ck_assert_int_eq(tg_backward(tg_sum(tg_mul(p, g), NULL, 0, false), NULL), 0);
    tg_scope_end();
}

START_TEST(adamw_three_steps_match_torch)
{
    tg_params fx = {0}, ps = {0};
    load_fixture("adamw", &fx);
    tg_rng *rng = tg_rng_new(5);
    tg_linear *lin = tg_linear_new(4, 3, true, TG_FLOAT32, rng);
    ck_assert_int_eq(tg_linear_params(lin, NULL, &ps), 0);
    copy_params(&fx, &ps);
    tg_optim *opt = tg_adamw_new(&ps, 1e-2, 0.9, 0.99, 1e-8, 0.1);
    ck_assert_msg(opt != NULL, "tg_adamw_new: %s", tg_error_message());

    for (int step = 1; step <= 3; step++) {
        char name[64];
        for (int i = 0; i < ps.count; i++) {
            snprintf(name, sizeof name, "grad%d.%s", step, ps.names[i]);
            set_grad(ps.tensors[i], need(&fx, "input.", name));
        }
        ck_assert_int_eq(tg_optim_step(opt), 0);
        for (int i = 0; i < ps.count; i++) {
            snprintf(name, sizeof name, "step%d.%s", step, ps.names[i]);
            assert_close(ps.tensors[i], need(&fx, "output.", name), name);
        }
        tg_optim_zero_grad(opt);
    }
    ck_assert_int_eq(tg_optim_steps(opt), 3);

    tg_optim_free(opt);
    tg_params_clear(&ps);
    tg_linear_free(lin);
    tg_rng_free(rng);
    tg_params_clear(&fx);
}
END_TEST

static Suite *parity_suite(void)
{
    Suite *s = suite_create("parity");
    TCase *mha = tcase_checked("mha");
    tcase_add_test(mha, mha_self_attention_matches_torch);
    tcase_add_test(mha, mha_cross_attention_with_distinct_key_value_matches_torch);
    tcase_add_test(mha, mha_causal_bool_attn_mask_matches_torch);
    tcase_add_test(mha, mha_key_padding_mask_matches_torch);
    tcase_add_test(mha, mha_averaged_weights_match_torch);
    tcase_add_test(mha, mha_per_head_weights_with_padding_match_torch);
    suite_add_tcase(s, mha);
    TCase *enc = tcase_checked("encoder");
    tcase_add_test(enc, encoder_layer_post_norm_relu_with_padding_matches_torch);
    tcase_add_test(enc, encoder_layer_pre_norm_gelu_with_causal_mask_matches_torch);
    tcase_add_test(enc, encoder_two_layers_with_final_norm_matches_torch);
    suite_add_tcase(s, enc);
    TCase *ed = tcase_checked("encoder_decoder");
    tcase_add_test(ed, mha_with_kdim_and_vdim_matches_torch);
    tcase_add_test(ed, decoder_layer_post_norm_relu_with_every_mask_matches_torch);
    tcase_add_test(ed, decoder_layer_pre_norm_gelu_with_causal_mask_matches_torch);
    tcase_add_test(ed, decoder_two_layers_with_final_norm_matches_torch);
    tcase_add_test(ed, transformer_with_padded_source_and_target_matches_torch);
    suite_add_tcase(s, ed);
    TCase *gpt = tcase_checked("gpt");
    tcase_add_test(gpt, gpt_logits_loss_and_grads_match_torch);
    tcase_add_test(gpt, gpt_trained_in_torch_gives_the_same_logits_here);
    suite_add_tcase(s, gpt);
    TCase *optim = tcase_checked("optim");
    tcase_add_test(optim, adamw_three_steps_match_torch);
    suite_add_tcase(s, optim);
    return s;
}

int main(void)
{
    return run_suite(parity_suite());
}
