/* Part of the misuse suite (test_misuse.c): what the library does when
 * values or memory go wrong rather than arguments. Anomaly mode (the first
 * op to make a NaN or Inf is named), out-of-memory as an error through the
 * allocator hook, and numerical stability at extreme logits, constant rows
 * and fully masked rows. */
#include "testutil.h"
#include "suite_parts.h"

/* The absurd-shape tests ask for petabytes: under AddressSanitizer that must
 * be a NULL from calloc, as it is in a normal build, not a report. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

static bool all_finite(const tg_tensor *t)
{
    double *v = values_of(t);
    bool ok = true;
    for (int64_t i = 0; i < tg_numel(t); i++)
        ok = ok && isfinite(v[i]);
    free(v);
    return ok;
}

/* ---- anomaly mode ------------------------------------------------------------------ */

START_TEST(anomaly_mode_is_off_by_default)
{
    ck_assert(!tg_anomaly_mode());
    tg_scope_begin();
    tg_tensor *y = tg_log(tg_zeros(TG_FLOAT32, 2, SHAPE(2, 3)));
    ck_assert_ptr_nonnull(y);
    ck_assert(isinf(tg_get(y, SHAPE(0, 0))));
    ck_assert_int_eq(tg_error_code(), TG_OK);
    tg_scope_end();
}
END_TEST

START_TEST(anomaly_mode_names_op_and_input_shapes)
{
    ck_assert(!tg_set_anomaly_mode(true));
    tg_scope_begin();
    tg_tensor *y = tg_log(tg_zeros(TG_FLOAT32, 2, SHAPE(2, 3)));
    ck_assert_ptr_null(y);
    ck_assert_error(TG_ERR_VALUE, "tg_log: anomaly: output holds NaN or Inf (inputs [2,3]", "-inf");
    tg_scope_end();
    ck_assert(tg_set_anomaly_mode(false));
}
END_TEST

START_TEST(anomaly_mode_stops_chain_at_first_offender)
{
    tg_set_anomaly_mode(true);
    tg_scope_begin();
    tg_tensor *x = T64(SHAPE(3), 1, 1.0, 800.0, 2.0);
    tg_tensor *a = tg_mul_scalar(x, 2);      /* finite: no anomaly */
    tg_tensor *b = tg_exp(a);                /* exp(1600) overflows */
    tg_tensor *c = tg_sum(tg_log(b), NULL, 0, false);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_null(b);
    ck_assert_ptr_null(c);
    ck_assert_error(TG_ERR_VALUE, "tg_exp: anomaly", "(inputs [3]", "inf at element 1");
    tg_scope_end();
    tg_set_anomaly_mode(false);
}
END_TEST

START_TEST(anomaly_mode_flags_nan_even_from_nan_inputs)
{
    tg_set_anomaly_mode(true);
    tg_scope_begin();
    tg_tensor *y = tg_add(T64(SHAPE(2, 2), 2, 1.0, NAN, 3.0, 4.0), T64(SHAPE(2), 1, 1.0, 1.0));
    ck_assert_ptr_null(y);
    ck_assert_error(TG_ERR_VALUE, "tg_add: anomaly", "inputs [2,2], [2]", "nan at element 1");
    tg_scope_end();
    tg_set_anomaly_mode(false);
}
END_TEST

/* -inf written by masks and passed on by the ops that consume it is the
 * masking design, not an anomaly: a fully masked attention runs clean. */
START_TEST(anomaly_mode_accepts_masking_with_infinities)
{
    tg_set_anomaly_mode(true);
    tg_rng *rng = tg_rng_new(3);
    tg_mha *m = tg_mha_new(8, 2, 0, true, TG_FLOAT64, rng);
    tg_scope_begin();
    tg_tensor *x = tg_randn(rng, TG_FLOAT64, 3, SHAPE(2, 3, 8));
    tg_tensor *pad = make(TG_BOOL, 2, SHAPE(2, 3), (const double[]){1, 1, 1, 0, 0, 1});
    tg_mha_options o = {.key_padding_mask = pad, .need_weights = true, .average_attn_weights = true};
    tg_tensor *w = NULL;
    tg_tensor *y = tg_mha_forward(m, x, x, x, &o, &w);
    ck_assert_msg(y != NULL, "%s", tg_error_message());
    tg_tensor *s = tg_matmul(x, tg_transpose(x, 1, 2)); /* [2,3,3] */
    tg_tensor *ls = tg_log_softmax(tg_masked_fill(s, tg_causal_mask(3), -INFINITY), -1);
    ck_assert_msg(ls != NULL, "%s", tg_error_message());
    ck_assert(tg_backward(tg_sum(y, NULL, 0, false), NULL) == 0);
    ck_assert_int_eq(tg_error_code(), TG_OK);
    tg_scope_end();
    tg_mha_free(m);
    tg_rng_free(rng);
    tg_set_anomaly_mode(false);
}
END_TEST

/* sqrt is finite at 0 but its gradient 0.5/sqrt(0) is not. */
START_TEST(anomaly_mode_checks_gradients_in_backward)
{
    tg_tensor *x = T64(SHAPE(3), 1, 4.0, 0.0, 1.0);
    tg_set_requires_grad(x, true);
    tg_set_anomaly_mode(true);
    tg_scope_begin();
    tg_tensor *loss = tg_sum(tg_sqrt(x), NULL, 0, false);
    ck_assert_ptr_nonnull(loss);
    ck_assert_int_eq(tg_backward(loss, NULL), -1);
    ck_assert_error(TG_ERR_VALUE, "tg_backward: anomaly: the gradient sqrt gave for input 0",
                    "inputs [3]", "inf at element 1");
    tg_scope_end();
    tg_set_anomaly_mode(false);
    /* Without anomaly mode the same backward runs and gives IEEE results. */
    tg_zero_grad(x);
    tg_scope_begin();
    ck_assert_int_eq(tg_backward(tg_sum(tg_sqrt(x), NULL, 0, false), NULL), 0);
    ck_assert_values(tg_grad(x), 1e-12, 0.25, INFINITY, 0.5);
    tg_scope_end();
    tg_release(x);
}
END_TEST

/* ---- out of memory ----------------------------------------------------------------- */

/* An allocator that fails every allocation after the first `budget`. */
typedef struct {
    int64_t budget, calls, live;
} failing_alloc;

static void *fail_alloc(size_t size, void *user)
{
    failing_alloc *a = user;
    if (a->calls++ >= a->budget)
        return NULL;
    a->live++;
    return malloc(size);
}

static void fail_free(void *p, void *user)
{
    failing_alloc *a = user;
    a->live--;
    free(p);
}

/* Runs f with an allocator that refuses everything: f must fail with
 * TG_ERR_NOMEM naming the function and the shape. */
#define ASSERT_NOMEM(call, ...)                                                  \
    do {                                                                         \
        failing_alloc a_ = {0};                                                  \
        tg_set_allocator(fail_alloc, fail_free, &a_);                            \
        bool failed_ = (call);                                                   \
        tg_set_allocator(NULL, NULL, NULL);                                      \
        ck_assert_msg(failed_, "the call succeeded without memory");             \
        ck_assert_error(TG_ERR_NOMEM, __VA_ARGS__);                              \
        ck_assert_int_eq(a_.live, 0);                                            \
    } while (0)

START_TEST(out_of_memory_is_an_error_in_forward_ops)
{
    tg_scope_begin();
    tg_tensor *a = tg_ones(TG_FLOAT32, 2, SHAPE(2, 3)), *b = tg_ones(TG_FLOAT32, 2, SHAPE(3, 4));
    tg_set_requires_grad(a, true);
    ASSERT_NOMEM(tg_matmul(a, b) == NULL, "tg_matmul: out of memory", "float32 [2,4]");
    ASSERT_NOMEM(tg_softmax(b, -1) == NULL, "tg_softmax: out of memory", "[3,4]");
    ASSERT_NOMEM(tg_log_softmax(b, 0) == NULL, "tg_log_softmax: out of memory", "[3,4]");
    ASSERT_NOMEM(tg_layer_norm(a, 1, NULL, NULL, 1e-5) == NULL, "tg_layer_norm: out of memory");
    ASSERT_NOMEM(tg_exp(a) == NULL, "tg_exp: out of memory", "[2,3]");
    ASSERT_NOMEM(tg_contiguous(tg_transpose(a, 0, 1)) == NULL, "out of memory", "[3,2]");
    tg_scope_end();
}
END_TEST

START_TEST(out_of_memory_is_an_error_in_backward)
{
    tg_tensor *w = tg_ones(TG_FLOAT64, 2, SHAPE(3, 4));
    tg_set_requires_grad(w, true);
    tg_scope_begin();
    tg_tensor *x = tg_ones(TG_FLOAT64, 2, SHAPE(2, 3));
    tg_tensor *loss = tg_mean(tg_softmax(tg_matmul(x, w), -1), NULL, 0, false);
    ck_assert_ptr_nonnull(loss);
    ASSERT_NOMEM(tg_backward(loss, NULL) < 0, "tg_backward");
    ck_assert_ptr_null(tg_grad(w));
    tg_scope_end();
    tg_release(w);
}
END_TEST

/* Fails the Nth allocation of a whole training step, for every N until the
 * step needs no more: each run either succeeds or fails with TG_ERR_NOMEM,
 * never crashes, and leaks neither tensors nor storage. */
static int train_step(tg_linear *lin, tg_layer_norm_module *ln, const tg_tensor *x,
                      const tg_tensor *y)
{
    tg_scope_begin();
    tg_tensor *h =
        tg_layer_norm_module_forward(ln, tg_gelu(tg_linear_forward(lin, x), TG_GELU_TANH));
    tg_tensor *loss = tg_cross_entropy(h, y, -100);
    int rc = loss ? tg_backward(loss, NULL) : -1;
    tg_scope_end();
    return rc;
}

START_TEST(every_allocation_of_a_training_step_may_fail)
{
    tg_rng *rng = tg_rng_new(9);
    tg_linear *lin = tg_linear_new(4, 5, true, TG_FLOAT32, rng);
    tg_layer_norm_module *ln = tg_layer_norm_module_new(1, SHAPE(5), 1e-5, true, TG_FLOAT32);
    tg_tensor *x = tg_randn(rng, TG_FLOAT32, 2, SHAPE(3, 4));
    tg_tensor *y = tg_from_data(TG_INT64, 1, SHAPE(3), (const int64_t[]){0, 4, 2});
    int64_t live = tg_live_tensors();
    int failures = 0;
    for (int64_t n = 0; n < 10000; n++) {
        failing_alloc a = {.budget = n};
        tg_set_allocator(fail_alloc, fail_free, &a);
        int rc = train_step(lin, ln, x, y);
        tg_set_allocator(NULL, NULL, NULL);
        tg_zero_grad(lin->weight);
        tg_zero_grad(lin->bias);
        tg_zero_grad(ln->weight);
        tg_zero_grad(ln->bias);
        ck_assert_msg(a.live == 0, "budget %lld: %lld storages leaked", (long long)n,
                      (long long)a.live);
        ck_assert_msg(tg_live_tensors() == live, "budget %lld: tensors leaked", (long long)n);
        if (rc == 0) {
            ck_assert_int_eq(tg_error_code(), TG_OK);
            break;
        }
        ck_assert_msg(tg_error_code() == TG_ERR_NOMEM, "budget %lld: %s", (long long)n,
                      tg_error_message());
        ck_assert_msg(strstr(tg_error_message(), "tg_") == tg_error_message(),
                      "budget %lld: message \"%s\" does not name a function", (long long)n,
                      tg_error_message());
        tg_error_clear();
        failures++;
    }
    ck_assert_int_gt(failures, 10);
    tg_release(x);
    tg_release(y);
    tg_linear_free(lin);
    tg_layer_norm_module_free(ln);
    tg_rng_free(rng);
}
END_TEST

START_TEST(absurd_shapes_are_out_of_memory_not_crashes)
{
    const int64_t huge = INT64_C(1) << 40;
    ck_assert_ptr_null(tg_zeros(TG_FLOAT32, 2, SHAPE(huge, huge)));
    ck_assert_error(TG_ERR_NOMEM, "tg_zeros", "[1099511627776,1099511627776]");
    /* 2^50 elements pass the size check but no machine has 4 PiB. */
    ck_assert_ptr_null(tg_zeros(TG_FLOAT32, 2, SHAPE(INT64_C(1) << 25, INT64_C(1) << 25)));
    ck_assert_error(TG_ERR_NOMEM, "out of memory", "[33554432,33554432]");
    tg_scope_begin();
    /* Expanded views cost nothing until an op materialises them. */
    tg_tensor *col = tg_expand(tg_ones(TG_FLOAT32, 2, SHAPE(1, 1)), 2, SHAPE(INT64_C(1) << 30, 1));
    tg_tensor *row = tg_expand(tg_ones(TG_FLOAT32, 2, SHAPE(1, 1)), 2, SHAPE(1, INT64_C(1) << 30));
    ck_assert_ptr_nonnull(col);
    ck_assert_ptr_null(tg_matmul(col, row));
    ck_assert_error(TG_ERR_NOMEM, "tg_matmul:", "[1073741824,1073741824]");
    ck_assert_ptr_null(tg_add(col, row));
    ck_assert_error(TG_ERR_NOMEM, "tg_add:", "[1073741824,1073741824]");
    tg_scope_end();
}
END_TEST

/* ---- numerical robustness ---------------------------------------------------------- */

/* Logits [1e4, 1e4-1, -1e4, 0]: softmax [s, s/e, 0, 0] with s = 1/(1+1/e);
 * logits [-1e4, -1e4, -1e4+1, -1e4]: [r, r, e r, r] with r = 1/(3+e). */
static void check_extreme_softmax(tg_dtype dtype)
{
    tg_scope_begin();
    const double big = 1e4;
    tg_tensor *x = make(dtype, 2, SHAPE(2, 4),
                        (const double[]){big, big - 1, -big, 0, -big, -big, -big + 1, -big});
    double l1 = log1p(exp(-1.0));
    double l2 = log(3 + exp(1.0));
    double s = 1 / (1 + exp(-1.0)), r = 1 / (3 + exp(1.0)), e = exp(1.0) / (3 + exp(1.0));
    double tol = dtype == TG_FLOAT32 ? 1e-6 : 1e-12;
    tg_tensor *sm = tg_softmax(x, -1), *ls = tg_log_softmax(x, -1);
    ck_assert(all_finite(sm) && all_finite(ls));
    ck_assert_values(sm, tol, s, s * exp(-1.0), 0, 0, r, r, e, r);
    ck_assert_values(ls, tol, -l1, -1 - l1, -2 * big - l1, -big - l1, -l2, -l2, 1 - l2, -l2);
    tg_scope_end();
}

START_TEST(softmax_and_log_softmax_are_exact_at_logits_of_1e4)
{
    check_extreme_softmax(TG_FLOAT64);
    check_extreme_softmax(TG_FLOAT32);
}
END_TEST

static void check_extreme_cross_entropy(tg_dtype dtype)
{
    tg_scope_begin();
    const double big = 1e4;
    tg_tensor *logits = make(dtype, 2, SHAPE(2, 3),
                             (const double[]){big, -big, 0, -big, -big, -big + 2});
    tg_set_requires_grad(logits, true);
    tg_tensor *targets = tg_from_data(TG_INT64, 1, SHAPE(2), (const int64_t[]){1, 2});
    tg_tensor *loss = tg_cross_entropy(logits, targets, -100);
    /* row 0: lse = 1e4, loss 2e4; row 1: loss log(1 + 2 e^-2). */
    double want = (2 * big + log1p(2 * exp(-2.0))) / 2;
    ck_assert_values(loss, dtype == TG_FLOAT32 ? 1e-6 : 1e-12, want);
    ck_assert_int_eq(tg_backward(loss, NULL), 0);
    tg_tensor *g = tg_grad(logits);
    ck_assert(all_finite(g));
    double q = exp(-2.0) / (1 + 2 * exp(-2.0)), p = 1 / (1 + 2 * exp(-2.0));
    ck_assert_values(g, 1e-6, 0.5, -0.5, 0, q / 2, q / 2, (p - 1) / 2);
    tg_scope_end();
}

START_TEST(cross_entropy_is_finite_and_exact_at_logits_of_1e4)
{
    check_extreme_cross_entropy(TG_FLOAT64);
    check_extreme_cross_entropy(TG_FLOAT32);
}
END_TEST

START_TEST(layer_norm_of_constant_row_is_finite)
{
    for (int k = 0; k < 2; k++) {
        tg_dtype dtype = k ? TG_FLOAT32 : TG_FLOAT64;
        tg_scope_begin();
        tg_tensor *x = make(dtype, 2, SHAPE(2, 4), (const double[]){5, 5, 5, 5, 1e4, 1e4, 1e4, 1e4});
        tg_tensor *w = tg_full(dtype, 1, SHAPE(4), 2.0), *b = tg_full(dtype, 1, SHAPE(4), 0.5);
        tg_set_requires_grad(x, true);
        tg_set_requires_grad(w, true);
        tg_tensor *y = tg_layer_norm(x, 1, w, b, 1e-5);
        ck_assert_values(y, 1e-6, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5);
        tg_tensor *up = make(dtype, 2, SHAPE(2, 4), (const double[]){1, -2, 3, 0.5, 1, 1, -1, 2});
        ck_assert_int_eq(tg_backward(y, up), 0);
        ck_assert(all_finite(tg_grad(x)));
        ck_assert(all_finite(tg_grad(w)));
        tg_scope_end();
    }
}
END_TEST

/* As documented in autograd.h: an all -inf slice gives softmax zeros,
 * log_softmax -inf, and both pass zero gradient. */
START_TEST(fully_masked_rows_give_zeros_and_zero_gradient)
{
    tg_scope_begin();
    tg_tensor *x = T64(SHAPE(2, 3), 2, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0);
    tg_set_requires_grad(x, true);
    tg_tensor *mask = make(TG_BOOL, 2, SHAPE(2, 3), (const double[]){1, 1, 1, 0, 1, 0});
    tg_tensor *masked = tg_masked_fill(x, mask, -INFINITY);
    tg_tensor *sm = tg_softmax(masked, -1);
    double e = exp(-2.0);
    ck_assert_values(sm, 1e-12, 0, 0, 0, e / (1 + e), 0, 1 / (1 + e));
    tg_tensor *ls = tg_log_softmax(masked, -1);
    ck_assert(isinf(tg_get(ls, SHAPE(0, 1))) && tg_get(ls, SHAPE(0, 1)) < 0);
    tg_tensor *up = T64(SHAPE(2, 3), 2, 1.0, -1.0, 2.0, 0.5, 3.0, -0.5);
    ck_assert_int_eq(tg_backward(sm, up), 0);
    tg_tensor *g = tg_grad(x);
    ck_assert(all_finite(g));
    ck_assert_values(tg_narrow(g, 0, 0, 1), 0, 0, 0, 0);
    tg_zero_grad(x);
    tg_tensor *up2 = T64(SHAPE(2, 3), 2, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0);
    ck_assert_int_eq(tg_backward(tg_log_softmax(tg_masked_fill(x, mask, -INFINITY), -1), up2), 0);
    ck_assert_values(tg_grad(x), 0, 0, 0, 0, 0, 0, 0);
    tg_scope_end();
}
END_TEST

/* MHA documents zero weights for a query whose every key is masked, so its
 * output is out_proj.bias; the gradient stays finite. */
START_TEST(mha_fully_masked_query_gets_zero_weights)
{
    tg_rng *rng = tg_rng_new(5);
    tg_mha *m = tg_mha_new(8, 2, 0, true, TG_FLOAT64, rng);
    tg_scope_begin();
    tg_tensor *bias = tg_uniform(rng, TG_FLOAT64, 1, SHAPE(8), -1, 1);
    tg_tensor *ob = m->out_proj->bias;
    memcpy(tg_data(ob), tg_data(bias), 8 * sizeof(double));
    tg_tensor *x = tg_randn(rng, TG_FLOAT64, 3, SHAPE(2, 3, 8));
    tg_set_requires_grad(x, true);
    tg_tensor *pad = make(TG_BOOL, 2, SHAPE(2, 3), (const double[]){1, 1, 1, 0, 1, 0});
    tg_mha_options o = {.key_padding_mask = pad, .need_weights = true, .average_attn_weights = false};
    tg_tensor *w = NULL;
    tg_tensor *y = tg_mha_forward(m, x, x, x, &o, &w);
    ck_assert_shape(w, 2, 2, 3, 3);
    double zeros[18] = {0};
    assert_values(tg_narrow(w, 0, 0, 1), zeros, 18, 0);
    double *b = values_of(bias);
    for (int64_t t = 0; t < 3; t++)
        for (int64_t j = 0; j < 8; j++)
            ck_assert_double_eq_tol(tg_get(y, SHAPE(0, t, j)), b[j], 1e-12);
    free(b);
    ck_assert(all_finite(y));
    ck_assert_int_eq(tg_backward(tg_sum(y, NULL, 0, false), NULL), 0);
    ck_assert(all_finite(tg_grad(x)));
    ck_assert(all_finite(tg_grad(m->in_proj_weight)));
    tg_scope_end();
    tg_mha_free(m);
    tg_rng_free(rng);
}
END_TEST

void misuse_robustness_cases(Suite *s)
{
    TCase *anomaly = tcase_checked("anomaly");
    tcase_add_test(anomaly, anomaly_mode_is_off_by_default);
    tcase_add_test(anomaly, anomaly_mode_names_op_and_input_shapes);
    tcase_add_test(anomaly, anomaly_mode_stops_chain_at_first_offender);
    tcase_add_test(anomaly, anomaly_mode_flags_nan_even_from_nan_inputs);
    tcase_add_test(anomaly, anomaly_mode_accepts_masking_with_infinities);
    tcase_add_test(anomaly, anomaly_mode_checks_gradients_in_backward);
    suite_add_tcase(s, anomaly);
    TCase *oom = tcase_checked("out_of_memory");
    tcase_add_test(oom, out_of_memory_is_an_error_in_forward_ops);
    tcase_add_test(oom, out_of_memory_is_an_error_in_backward);
    tcase_add_test(oom, every_allocation_of_a_training_step_may_fail);
    tcase_add_test(oom, absurd_shapes_are_out_of_memory_not_crashes);
    suite_add_tcase(s, oom);
    TCase *num = tcase_checked("numerics");
    tcase_add_test(num, softmax_and_log_softmax_are_exact_at_logits_of_1e4);
    tcase_add_test(num, cross_entropy_is_finite_and_exact_at_logits_of_1e4);
    tcase_add_test(num, layer_norm_of_constant_row_is_finite);
    tcase_add_test(num, fully_masked_rows_give_zeros_and_zero_gradient);
    tcase_add_test(num, mha_fully_masked_query_gets_zero_weights);
    suite_add_tcase(s, num);
}
