/* The matmul precision switch: under TG_PRECISION_BF16 each routed op's
 * products take bfloat16 operands with float32 sums, forward and backward,
 * as the graph recorded them; float64 and the models' gradients checked
 * against float32. */
#include <pthread.h>

#include "testutil.h"

/* Every test here but the first runs in a scope that owns what the ops
 * return: BEGIN and END open and close it. */
#define BEGIN tg_scope_begin()
#define END                                                                   \
    do {                                                                      \
        tg_set_matmul_precision(TG_PRECISION_FLOAT32);                        \
        ck_assert_int_eq(tg_scope_end(), 0);                                  \
    } while (0)

static tg_tensor *randn(tg_rng *rng, int ndim, const int64_t *shape)
{
    tg_tensor *t = tg_randn(rng, TG_FLOAT32, ndim, shape);
    ck_assert_ptr_nonnull(t);
    return t;
}

/* t with each element rounded to bfloat16 (nearest even), as float32. */
static tg_tensor *bf(const tg_tensor *t)
{
    return tg_to_dtype(tg_to_dtype(t, TG_BFLOAT16), TG_FLOAT32);
}

static double max_diff(const tg_tensor *a, const tg_tensor *b)
{
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(tg_numel(a), tg_numel(b));
    double *x = values_of(a), *y = values_of(b), m = 0;
    for (int64_t i = 0; i < tg_numel(a); i++)
        m = fmax(m, fabs(x[i] - y[i]));
    free(x);
    free(y);
    return m;
}

static double max_abs(const tg_tensor *a)
{
    double *x = values_of(a), m = 0;
    for (int64_t i = 0; i < tg_numel(a); i++)
        m = fmax(m, fabs(x[i]));
    free(x);
    return m;
}

/* got, made with bf16 products, against ref (float32 products of the
 * bf16-rounded operands) and f32 (plain float32): much nearer ref than f32,
 * and within bfloat16's precision (2^-8 relative, grown over the sums) of
 * f32. */
static void assert_bf16_result(const char *what, const tg_tensor *got, const tg_tensor *ref,
                               const tg_tensor *f32)
{
    double to_ref = max_diff(got, ref), to_f32 = max_diff(got, f32), scale = max_abs(f32);
    ck_assert_msg(to_f32 > 0, "%s: bf16 result equals float32's (not rounded)", what);
    ck_assert_msg(to_ref <= to_f32 / 8, "%s: %g from the rounded-operand product, %g from "
                                        "float32's", what, to_ref, to_f32);
    ck_assert_msg(to_f32 <= 3e-2 * scale, "%s: %g from float32's (scale %g)", what, to_f32,
                  scale);
}

/* ---- the switch -------------------------------------------------------------- */

static void *read_precision(void *out)
{
    *(tg_precision *)out = tg_matmul_precision();
    return NULL;
}

START_TEST(set_matmul_precision_returns_the_previous_and_is_per_thread)
{
    ck_assert_int_eq(tg_matmul_precision(), TG_PRECISION_FLOAT32);
    ck_assert_int_eq(tg_set_matmul_precision(TG_PRECISION_BF16), TG_PRECISION_FLOAT32);
    ck_assert_int_eq(tg_matmul_precision(), TG_PRECISION_BF16);
    tg_precision other = TG_PRECISION_BF16;
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, read_precision, &other), 0);
    pthread_join(th, NULL);
    ck_assert_int_eq(other, TG_PRECISION_FLOAT32);
    ck_assert_int_eq(tg_set_matmul_precision((tg_precision)7), TG_PRECISION_BF16);
    ck_assert_int_eq(tg_error_code(), TG_ERR_VALUE);
    ck_assert_ptr_nonnull(strstr(tg_error_message(), "tg_set_matmul_precision"));
    tg_error_clear();
    ck_assert_int_eq(tg_matmul_precision(), TG_PRECISION_BF16);
    ck_assert_str_eq(tg_precision_name(TG_PRECISION_BF16), "bf16");
    ck_assert_str_eq(tg_precision_name(TG_PRECISION_FLOAT32), "fp32");
    /* without fork (valgrind's runs) the tests after this share its thread */
    tg_set_matmul_precision(TG_PRECISION_FLOAT32);
}
END_TEST

/* ---- forward, op by op --------------------------------------------------------- */

typedef enum { OP_AFFINE, OP_GELU_TANH, OP_GELU_ERF, OP_LAYER_NORM, OP_RMS_NORM, OP_SWIGLU } op_kind;
static const char *const op_names[] = {"affine", "gelu_affine tanh", "gelu_affine erf",
                                       "layer_norm_affine", "rms_norm_affine", "swiglu_affine"};

static tg_tensor *run_op(op_kind op, const tg_tensor *x, const tg_tensor *x2, const tg_tensor *w,
                         const tg_tensor *b)
{
    switch (op) {
    case OP_AFFINE: return tg_affine(x, w, b);
    case OP_GELU_TANH: return tg_gelu_affine(x, TG_GELU_TANH, w, b);
    case OP_GELU_ERF: return tg_gelu_affine(x, TG_GELU_ERF, w, b);
    case OP_LAYER_NORM: return tg_layer_norm_affine(x, NULL, NULL, 1e-5, w, b);
    case OP_RMS_NORM: return tg_rms_norm_affine(x, NULL, 1e-5, w, b);
    case OP_SWIGLU: return tg_swiglu_affine(x, x2, w, b);
    }
    return NULL;
}

/* The product's left operand, as the unfused ops make it. */
static const tg_tensor *operand(op_kind op, const tg_tensor *x, const tg_tensor *x2)
{
    switch (op) {
    case OP_AFFINE: return x;
    case OP_GELU_TANH: return tg_gelu(x, TG_GELU_TANH);
    case OP_GELU_ERF: return tg_gelu(x, TG_GELU_ERF);
    case OP_LAYER_NORM: return tg_layer_norm(x, 1, NULL, NULL, 1e-5);
    case OP_RMS_NORM: return tg_rms_norm(x, NULL, 1e-5);
    case OP_SWIGLU: return tg_swiglu(x, x2);
    }
    return NULL;
}

/* rows x in @ [out, in]^T: a thin product, one the packed kernel takes with
 * short last tiles, and one with no bias. */
static const int64_t shapes[][4] = {{3, 24, 17, 1}, {130, 96, 200, 1}, {45, 70, 37, 0}};

START_TEST(each_affine_op_takes_bf16_operands_under_bf16)
{
    BEGIN;
    op_kind op = (op_kind)_i;
    tg_rng *rng = tg_rng_new(11 + (uint64_t)_i);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t rows = shapes[s][0], in = shapes[s][1], out = shapes[s][2];
        tg_tensor *x = randn(rng, 2, SHAPE(rows, in)), *x2 = randn(rng, 2, SHAPE(rows, in));
        tg_tensor *w = randn(rng, 2, SHAPE(out, in));
        tg_tensor *b = shapes[s][3] ? randn(rng, 1, SHAPE(out)) : NULL;
        tg_tensor *f32 = run_op(op, x, x2, w, b);
        tg_tensor *ref = tg_affine(bf(operand(op, x, x2)), bf(w), b);
        tg_set_matmul_precision(TG_PRECISION_BF16);
        tg_tensor *got = run_op(op, x, x2, w, b);
        tg_set_matmul_precision(TG_PRECISION_FLOAT32);
        char what[96];
        snprintf(what, sizeof what, "%s [%lld, %lld] -> %lld", op_names[op], (long long)rows,
                 (long long)in, (long long)out);
        assert_bf16_result(what, got, ref, f32);
    }
    tg_rng_free(rng);
    END;
}
END_TEST

START_TEST(matmul_takes_bf16_operands_under_bf16_with_transposed_and_batched_operands)
{
    BEGIN;
    tg_rng *rng = tg_rng_new(5);
    tg_tensor *a = randn(rng, 3, SHAPE(2, 33, 40)), *bt = randn(rng, 2, SHAPE(29, 40));
    tg_tensor *b = tg_transpose(bt, 0, 1); /* [40, 29], read transposed */
    tg_tensor *at = tg_transpose(randn(rng, 3, SHAPE(2, 40, 33)), 1, 2);
    const tg_tensor *lefts[] = {a, at};
    for (int i = 0; i < 2; i++) {
        tg_tensor *f32 = tg_matmul(lefts[i], b), *ref = tg_matmul(bf(lefts[i]), bf(b));
        tg_set_matmul_precision(TG_PRECISION_BF16);
        tg_tensor *got = tg_matmul(lefts[i], b);
        tg_set_matmul_precision(TG_PRECISION_FLOAT32);
        assert_bf16_result(i ? "matmul A^T" : "matmul", got, ref, f32);
    }
    tg_rng_free(rng);
    END;
}
END_TEST

START_TEST(float64_products_ignore_bf16)
{
    BEGIN;
    tg_rng *rng = tg_rng_new(3);
    tg_tensor *x = tg_randn(rng, TG_FLOAT64, 2, SHAPE(40, 24));
    tg_tensor *w = tg_randn(rng, TG_FLOAT64, 2, SHAPE(30, 24));
    tg_tensor *b = tg_randn(rng, TG_FLOAT64, 1, SHAPE(30));
    tg_tensor *want_mm = tg_matmul(x, tg_transpose(w, 0, 1)), *want = tg_affine(x, w, b);
    tg_set_matmul_precision(TG_PRECISION_BF16);
    ck_assert_double_eq(max_diff(tg_matmul(x, tg_transpose(w, 0, 1)), want_mm), 0);
    ck_assert_double_eq(max_diff(tg_affine(x, w, b), want), 0);
    ck_assert_double_eq(max_diff(tg_gelu_affine(x, TG_GELU_TANH, w, b),
                                 tg_affine(tg_gelu(x, TG_GELU_TANH), w, b)), 0);
    tg_rng_free(rng);
    END;
}
END_TEST

/* ---- backward ----------------------------------------------------------------------- */

/* The gradients of sum(op(x, x2, w, b) * g) for x, w (and x2) into out. */
static void grads_of(op_kind op, tg_tensor *x, tg_tensor *x2, tg_tensor *w, const tg_tensor *b,
                     const tg_tensor *g, tg_tensor *out[3])
{
    tg_tensor *leaves[3] = {x, w, x2};
    for (int i = 0; i < 3; i++)
        tg_zero_grad(leaves[i]);
    tg_tensor *loss = tg_sum(tg_mul(run_op(op, x, x2, w, b), g), NULL, 0, false);
    ck_assert_int_eq(tg_backward(loss, NULL), 0);
    for (int i = 0; i < 3; i++)
        out[i] = tg_grad(leaves[i]);
}

static tg_tensor *leaf(tg_rng *rng, int ndim, const int64_t *shape)
{
    tg_tensor *t = randn(rng, ndim, shape);
    ck_assert_int_eq(tg_set_requires_grad(t, true), 0);
    return t;
}

START_TEST(affine_backward_takes_bf16_operands_under_bf16)
{
    BEGIN;
    tg_rng *rng = tg_rng_new(21);
    tg_tensor *x = leaf(rng, 2, SHAPE(70, 48)), *w = leaf(rng, 2, SHAPE(90, 48));
    tg_tensor *b = randn(rng, 1, SHAPE(90)), *g = randn(rng, 2, SHAPE(70, 90));
    tg_tensor *f32[3], *got[3];
    grads_of(OP_AFFINE, x, NULL, w, b, g, f32);
    tg_set_matmul_precision(TG_PRECISION_BF16);
    grads_of(OP_AFFINE, x, NULL, w, b, g, got);
    tg_set_matmul_precision(TG_PRECISION_FLOAT32);
    /* dx = g @ w and dw = g^T @ x on rounded operands */
    assert_bf16_result("affine dx", got[0], tg_matmul(bf(g), bf(w)), f32[0]);
    assert_bf16_result("affine dw", got[1], tg_matmul(tg_transpose(bf(g), 0, 1), bf(x)), f32[1]);
    tg_rng_free(rng);
    END;
}
END_TEST

/* The fused ops' backward: every gradient moved off float32's by the
 * rounding, and within bfloat16's precision of it. */
START_TEST(fused_backward_runs_bf16_under_bf16)
{
    BEGIN;
    op_kind op = (op_kind)_i;
    tg_rng *rng = tg_rng_new(31 + (uint64_t)_i);
    tg_tensor *x = leaf(rng, 2, SHAPE(66, 40)), *x2 = leaf(rng, 2, SHAPE(66, 40));
    tg_tensor *w = leaf(rng, 2, SHAPE(72, 40)), *b = randn(rng, 1, SHAPE(72));
    tg_tensor *g = randn(rng, 2, SHAPE(66, 72)), *f32[3], *got[3];
    grads_of(op, x, x2, w, b, g, f32);
    tg_set_matmul_precision(TG_PRECISION_BF16);
    grads_of(op, x, x2, w, b, g, got);
    tg_set_matmul_precision(TG_PRECISION_FLOAT32);
    for (int i = 0; i < (op == OP_SWIGLU ? 3 : 2); i++) {
        double d = max_diff(got[i], f32[i]), scale = max_abs(f32[i]);
        ck_assert_msg(d > 0 && d <= 3e-2 * scale, "%s gradient %d: %g from float32's (scale %g)",
                      op_names[op], i, d, scale);
    }
    tg_rng_free(rng);
    END;
}
END_TEST

START_TEST(backward_uses_the_precision_the_forward_ran_at)
{
    BEGIN;
    tg_rng *rng = tg_rng_new(41);
    tg_tensor *a = leaf(rng, 2, SHAPE(50, 64)), *b = leaf(rng, 2, SHAPE(64, 40));
    tg_tensor *bf_grads[2], *mixed[2], *f32[2];
    for (int run = 0; run < 3; run++) {
        tg_zero_grad(a);
        tg_zero_grad(b);
        tg_set_matmul_precision(run < 2 ? TG_PRECISION_BF16 : TG_PRECISION_FLOAT32);
        tg_tensor *loss = tg_sum(tg_pow_scalar(tg_matmul(a, b), 2), NULL, 0, false);
        /* run 1 switches back to float32 before backward */
        if (run == 1)
            tg_set_matmul_precision(TG_PRECISION_FLOAT32);
        ck_assert_int_eq(tg_backward(loss, NULL), 0);
        ck_assert_int_eq(tg_matmul_precision(), run == 0 ? TG_PRECISION_BF16
                                                         : TG_PRECISION_FLOAT32);
        tg_tensor **into = run == 0 ? bf_grads : run == 1 ? mixed : f32;
        into[0] = tg_grad(a);
        into[1] = tg_grad(b);
    }
    for (int i = 0; i < 2; i++) {
        ck_assert_double_eq(max_diff(mixed[i], bf_grads[i]), 0);
        ck_assert(max_diff(mixed[i], f32[i]) > 0);
    }
    tg_rng_free(rng);
    END;
}
END_TEST

/* ---- the models -------------------------------------------------------------------------- */

/* ||got - want|| / ||want|| for each of n gradients: at most tol. */
static void assert_grads_near(const char *model, const tg_params *ps, tg_tensor **want, double tol)
{
    for (int k = 0; k < ps->count; k++) {
        double *g = values_of(tg_grad(ps->tensors[k])), *w = values_of(want[k]), num = 0, den = 0;
        for (int64_t i = 0; i < tg_numel(want[k]); i++) {
            num += (g[i] - w[i]) * (g[i] - w[i]);
            den += w[i] * w[i];
        }
        free(g);
        free(w);
        double rel = sqrt(num) / sqrt(den);
        ck_assert_msg(num > 0 || den == 0, "%s %s: bf16 gradient equals float32's", model,
                      ps->names[k]);
        ck_assert_msg(rel <= tol, "%s %s: relative error %g over %g", model, ps->names[k], rel,
                      tol);
    }
}

/* Gradients of the mean cross-entropy on fixed tokens, float32 then bf16. */
typedef tg_tensor *(*forward_fn)(const void *m, const tg_tensor *idx, const tg_tensor *tgt,
                                 tg_tensor **loss);

static void compare_model_grads(const char *name, const void *m, forward_fn fwd, tg_params *ps,
                                int64_t vocab)
{
    enum { B = 2, T = 16 };
    int64_t ids[B * T], tgt[B * T];
    for (int i = 0; i < B * T; i++) {
        ids[i] = (i * 7 + 3) % vocab;
        tgt[i] = (i * 5 + 1) % vocab;
    }
    tg_tensor *idx = tg_from_data(TG_INT64, 2, SHAPE(B, T), ids);
    tg_tensor *targets = tg_from_data(TG_INT64, 2, SHAPE(B, T), tgt);
    tg_tensor *want[64] = {0};
    ck_assert_int_le(ps->count, 64);
    for (int run = 0; run < 2; run++) {
        for (int k = 0; k < ps->count; k++)
            tg_zero_grad(ps->tensors[k]);
        tg_set_matmul_precision(run ? TG_PRECISION_BF16 : TG_PRECISION_FLOAT32);
        tg_tensor *loss = NULL;
        ck_assert_ptr_nonnull(fwd(m, idx, targets, &loss));
        ck_assert_int_eq(tg_backward(loss, NULL), 0);
        tg_set_matmul_precision(TG_PRECISION_FLOAT32);
        for (int k = 0; run == 0 && k < ps->count; k++)
            want[k] = tg_grad(ps->tensors[k]);
    }
    assert_grads_near(name, ps, want, 2e-2);
}

static tg_tensor *gpt_fwd(const void *m, const tg_tensor *idx, const tg_tensor *tgt,
                          tg_tensor **loss)
{
    return tg_gpt_forward(m, idx, tgt, loss);
}

static tg_tensor *llama_fwd(const void *m, const tg_tensor *idx, const tg_tensor *tgt,
                            tg_tensor **loss)
{
    return tg_llama_forward(m, idx, tgt, loss);
}

START_TEST(gpt_gradients_under_bf16_are_within_2_percent_of_float32)
{
    BEGIN;
    tg_gpt_config c = {.vocab_size = 50, .block_size = 16, .n_layer = 2, .n_head = 4,
                       .n_embd = 64};
    tg_rng *rng = tg_rng_new(7);
    tg_gpt *m = tg_gpt_new(&c, TG_FLOAT32, rng);
    ck_assert_ptr_nonnull(m);
    tg_params ps = {0};
    ck_assert_int_eq(tg_gpt_params(m, &ps), 0);
    for (int k = 0; k < ps.count; k++)
        tg_set_requires_grad(ps.tensors[k], true);
    compare_model_grads("gpt", m, gpt_fwd, &ps, c.vocab_size);
    tg_params_clear(&ps);
    tg_gpt_free(m);
    tg_rng_free(rng);
    END;
}
END_TEST

START_TEST(llama_gradients_under_bf16_are_within_2_percent_of_float32)
{
    BEGIN;
    tg_llama_config c = {.vocab_size = 50, .block_size = 16, .n_layer = 2, .n_head = 4,
                         .n_kv_head = 2, .n_embd = 64, .hidden_size = 160,
                         .rope_theta = 10000, .norm_eps = 1e-5, .tie_embeddings = false,
                         .rope_pairing = TG_ROPE_HALF};
    tg_rng *rng = tg_rng_new(8);
    tg_llama *m = tg_llama_new(&c, TG_FLOAT32, rng);
    ck_assert_ptr_nonnull(m);
    tg_params ps = {0};
    ck_assert_int_eq(tg_llama_params(m, &ps), 0);
    for (int k = 0; k < ps.count; k++)
        tg_set_requires_grad(ps.tensors[k], true);
    compare_model_grads("llama", m, llama_fwd, &ps, c.vocab_size);
    tg_params_clear(&ps);
    tg_llama_free(m);
    tg_rng_free(rng);
    END;
}
END_TEST

static Suite *precision_suite(void)
{
    Suite *s = suite_create("precision");
    TCase *tc = tcase_checked("precision");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, set_matmul_precision_returns_the_previous_and_is_per_thread);
    tcase_add_loop_test(tc, each_affine_op_takes_bf16_operands_under_bf16, OP_AFFINE,
                        OP_SWIGLU + 1);
    tcase_add_test(tc, matmul_takes_bf16_operands_under_bf16_with_transposed_and_batched_operands);
    tcase_add_test(tc, float64_products_ignore_bf16);
    tcase_add_test(tc, affine_backward_takes_bf16_operands_under_bf16);
    tcase_add_loop_test(tc, fused_backward_runs_bf16_under_bf16, OP_GELU_TANH, OP_SWIGLU + 1);
    tcase_add_test(tc, backward_uses_the_precision_the_forward_ran_at);
    tcase_add_test(tc, gpt_gradients_under_bf16_are_within_2_percent_of_float32);
    tcase_add_test(tc, llama_gradients_under_bf16_are_within_2_percent_of_float32);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return run_suite(precision_suite());
}
