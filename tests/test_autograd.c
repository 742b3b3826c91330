/* The graph engine: accumulation into leaves, broadcasting and views in
 * backward, freeing the graph, grad mode, scopes, and the error rules. */
#include "testutil.h"

START_TEST(backward_fills_leaf_gradients)
{
    tg_tensor *a = T64(SHAPE(3), 1, 1.0, 2.0, 3.0);
    tg_tensor *b = T64(SHAPE(3), 1, 4.0, 5.0, 6.0);
    tg_set_requires_grad(a, true);
    tg_set_requires_grad(b, true);
    tg_scope_begin();
    tg_tensor *loss = tg_sum(tg_mul(a, b), NULL, 0, false);
    ck_assert_values(loss, 1e-12, 32.0);
    ck_assert_int_eq(tg_backward(loss, NULL), 0);
    ck_assert_values(tg_grad(a), 1e-12, 4.0, 5.0, 6.0);
    ck_assert_values(tg_grad(b), 1e-12, 1.0, 2.0, 3.0);
    tg_scope_end();
    tg_release(a);
    tg_release(b);
}
END_TEST

START_TEST(gradients_accumulate_until_zeroed)
{
    tg_tensor *a = T64(SHAPE(2), 1, 1.0, 2.0);
    tg_set_requires_grad(a, true);
    tg_scope_begin();
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(tg_backward(tg_sum(tg_mul_scalar(a, 2.0), NULL, 0, false), NULL), 0);
    ck_assert_values(tg_grad(a), 1e-12, 6.0, 6.0);
    tg_zero_grad(a);
    ck_assert_ptr_null(tg_grad(a));
    ck_assert_int_eq(tg_error_code(), TG_OK);
    tg_scope_end();
    tg_release(a);
}
END_TEST

START_TEST(a_tensor_used_twice_gets_both_gradients)
{
    tg_tensor *a = T64(SHAPE(2), 1, 3.0, -1.0);
    tg_set_requires_grad(a, true);
    tg_scope_begin();
    tg_tensor *y = tg_add(tg_mul(a, a), a); /* dy/da = 2a + 1 */
    tg_backward(tg_sum(y, NULL, 0, false), NULL);
    ck_assert_values(tg_grad(a), 1e-12, 7.0, -1.0);
    tg_scope_end();
    tg_release(a);
}
END_TEST

START_TEST(broadcast_gradient_is_summed_to_the_operand_shape)
{
    tg_tensor *a = T64(SHAPE(2, 1), 2, 1.0, 2.0);
    tg_tensor *b = T64(SHAPE(3), 1, 1.0, 2.0, 3.0);
    tg_set_requires_grad(a, true);
    tg_set_requires_grad(b, true);
    tg_scope_begin();
    tg_tensor *y = tg_mul(a, b); /* [2,3] */
    ck_assert_shape(y, 2, 3);
    tg_backward(tg_sum(y, NULL, 0, false), NULL);
    ck_assert_shape(tg_grad(a), 2, 1);
    ck_assert_values(tg_grad(a), 1e-12, 6.0, 6.0);
    ck_assert_values(tg_grad(b), 1e-12, 3.0, 3.0, 3.0);
    tg_scope_end();
    tg_release(a);
    tg_release(b);
}
END_TEST

START_TEST(transposed_view_gradient_lands_in_the_base)
{
    tg_tensor *a = T64(SHAPE(2, 3), 2, 1, 2, 3, 4, 5, 6);
    tg_tensor *w = T64(SHAPE(3, 2), 2, 1, 10, 100, 1000, 1e4, 1e5);
    tg_set_requires_grad(a, true);
    tg_scope_begin();
    tg_backward(tg_sum(tg_mul(tg_transpose(a, 0, 1), w), NULL, 0, false), NULL);
    /* grad a[i][j] = w[j][i] */
    ck_assert_values(tg_grad(a), 1e-12, 1, 100, 1e4, 10, 1000, 1e5);
    tg_scope_end();
    tg_release(a);
    tg_release(w);
}
END_TEST

/* Large overlapping slices of one intermediate, each weighted: their
 * gradients add into one buffer on the team, row by row (the q/k/v slices
 * of a packed projection). Checked element by element against the sum of
 * the weights placed where each slice reads. */
START_TEST(large_slices_add_their_gradients_into_one_buffer)
{
    enum { B = 4, T = 100, C = 300, W = 120 };
    tg_rng *rng = tg_rng_new(5);
    tg_tensor *x = tg_randn(rng, TG_FLOAT32, 3, SHAPE(B, T, C));
    tg_tensor *w1 = tg_randn(rng, TG_FLOAT32, 3, SHAPE(B, T, W));
    tg_tensor *w2 = tg_randn(rng, TG_FLOAT32, 3, SHAPE(B, T, W));
    tg_rng_free(rng);
    tg_set_requires_grad(x, true);
    tg_scope_begin();
    tg_tensor *h = tg_mul_scalar(x, 2.0); /* an intermediate, as a projection is */
    tg_tensor *a = tg_sum(tg_mul(tg_narrow(h, 2, 0, W), w1), NULL, 0, false);
    tg_tensor *b = tg_sum(tg_mul(tg_narrow(h, 2, 100, W), w2), NULL, 0, false);
    ck_assert_int_eq(tg_backward(tg_add(a, b), NULL), 0);
    double *g = values_of(tg_grad(x)), *v1 = values_of(w1), *v2 = values_of(w2);
    int64_t bad = -1; /* one assertion at the end: each costs Check a write */
    double want = 0;
    for (int64_t i = 0; i < B * T * C && bad < 0; i++) {
        int64_t r = i / C, c = i % C;
        want = 2.0 * ((c < W ? v1[r * W + c] : 0) +
                      (c >= 100 && c < 100 + W ? v2[r * W + c - 100] : 0));
        if (!(fabs(g[i] - want) <= 1e-5 * (1 + fabs(want))))
            bad = i;
    }
    ck_assert_msg(bad < 0, "element %lld: %g, expected %g", (long long)bad,
                  bad < 0 ? 0 : g[bad], want);
    free(g), free(v1), free(v2);
    tg_scope_end();
    tg_release(x), tg_release(w1), tg_release(w2);
}
END_TEST

START_TEST(second_backward_through_a_freed_graph_is_an_error)
{
    tg_tensor *a = T64(SHAPE(1), 1, 2.0);
    tg_set_requires_grad(a, true);
    tg_tensor *loss = tg_exp(a);
    ck_assert_int_eq(tg_backward(loss, NULL), 0);
    ck_assert_int_eq(tg_backward(loss, NULL), -1);
    ck_assert_error(TG_ERR_STATE, "tg_backward", "freed", "exp");
    tg_release(loss);
    tg_release(a);
}
END_TEST

START_TEST(backward_on_a_non_scalar_needs_an_upstream_gradient)
{
    tg_tensor *a = T64(SHAPE(2), 1, 1.0, 2.0);
    tg_set_requires_grad(a, true);
    tg_scope_begin();
    tg_tensor *y = tg_mul_scalar(a, 3.0);
    ck_assert_int_eq(tg_backward(y, NULL), -1);
    ck_assert_error(TG_ERR_SHAPE, "tg_backward", "[2]");
    tg_tensor *bad = T64(SHAPE(3), 1, 1.0, 1.0, 1.0);
    ck_assert_int_eq(tg_backward(y, bad), -1);
    ck_assert_error(TG_ERR_SHAPE, "tg_backward", "[3]", "[2]");
    ck_assert_int_eq(tg_backward(y, T64(SHAPE(2), 1, 1.0, -1.0)), 0);
    ck_assert_values(tg_grad(a), 1e-12, 3.0, -3.0);
    tg_scope_end();
    tg_release(a);
}
END_TEST

START_TEST(backward_without_requires_grad_is_an_error)
{
    tg_scope_begin();
    tg_tensor *y = tg_sum(T64(SHAPE(2), 1, 1.0, 2.0), NULL, 0, false);
    ck_assert(!tg_requires_grad(y));
    ck_assert_int_eq(tg_backward(y, NULL), -1);
    ck_assert_error(TG_ERR_STATE, "tg_backward", "does not require grad");
    ck_assert_int_eq(tg_backward(NULL, NULL), -1);
    ck_assert_error(TG_ERR_NULL, "tg_backward");
    tg_scope_end();
}
END_TEST

START_TEST(no_grad_mode_records_nothing)
{
    tg_tensor *a = T64(SHAPE(2), 1, 1.0, 2.0);
    tg_set_requires_grad(a, true);
    ck_assert(tg_set_grad_enabled(false));
    tg_tensor *y = tg_mul(a, a);
    ck_assert(!tg_requires_grad(y));
    ck_assert(tg_is_leaf(y));
    ck_assert(!tg_set_grad_enabled(true));
    tg_tensor *z = tg_mul(a, a);
    ck_assert(tg_requires_grad(z));
    ck_assert(!tg_is_leaf(z));
    tg_release(y);
    tg_release(z);
    tg_release(a);
}
END_TEST

START_TEST(detach_shares_storage_without_the_graph)
{
    tg_tensor *a = T64(SHAPE(2), 1, 1.0, 2.0);
    tg_set_requires_grad(a, true);
    tg_scope_begin();
    tg_tensor *y = tg_exp(a);
    tg_tensor *d = tg_detach(y);
    ck_assert(tg_shares_storage(d, y));
    ck_assert(tg_is_leaf(d));
    ck_assert(!tg_requires_grad(d));
    tg_scope_end();
    tg_release(a);
}
END_TEST

START_TEST(requires_grad_only_on_float_leaves)
{
    tg_tensor *i = tg_zeros(TG_INT64, 1, SHAPE(2));
    ck_assert_int_eq(tg_set_requires_grad(i, true), -1);
    ck_assert_error(TG_ERR_DTYPE, "tg_set_requires_grad", "int64");
    tg_tensor *a = T64(SHAPE(2), 1, 1.0, 2.0);
    tg_set_requires_grad(a, true);
    tg_tensor *y = tg_exp(a);
    ck_assert_int_eq(tg_set_requires_grad(y, false), -1);
    ck_assert_error(TG_ERR_STATE, "only leaves", "exp");
    tg_release(y);
    tg_release(a);
    tg_release(i);
}
END_TEST

START_TEST(a_null_input_fails_the_chain_once)
{
    tg_tensor *a = T64(SHAPE(2, 3), 2, 1, 2, 3, 4, 5, 6);
    tg_tensor *b = T64(SHAPE(4), 1, 1, 2, 3, 4);
    tg_scope_begin();
    tg_tensor *y = tg_exp(tg_relu(tg_add(a, b)));
    ck_assert_ptr_null(y);
    /* The first error, from tg_add, survives the NULLs that follow it. */
    ck_assert_error(TG_ERR_SHAPE, "tg_add", "[2,3]", "[4]");
    tg_scope_end();
    tg_release(a);
    tg_release(b);
}
END_TEST

static int handler_calls;
static void count_errors(tg_error code, const char *message, void *user)
{
    (void)code;
    (void)message;
    *(int *)user += 1;
}

START_TEST(error_handler_sees_every_error)
{
    handler_calls = 0;
    tg_set_error_handler(count_errors, &handler_calls);
    ck_assert_ptr_null(tg_exp(NULL));
    ck_assert_ptr_null(tg_zeros(TG_FLOAT32, 1, SHAPE(-1)));
    tg_set_error_handler(NULL, NULL);
    ck_assert_int_eq(handler_calls, 2);
    ck_assert_error(TG_ERR_NULL, "tg_exp");
}
END_TEST

START_TEST(dtypes_of_a_binary_op_must_match)
{
    tg_tensor *a = tg_ones(TG_FLOAT32, 1, SHAPE(2));
    tg_tensor *b = tg_ones(TG_FLOAT64, 1, SHAPE(2));
    ck_assert_ptr_null(tg_add(a, b));
    ck_assert_error(TG_ERR_DTYPE, "tg_add", "float32", "float64");
    tg_tensor *i = tg_ones(TG_INT64, 1, SHAPE(2));
    ck_assert_ptr_null(tg_exp(i));
    ck_assert_error(TG_ERR_DTYPE, "tg_exp", "int64");
    tg_release(a);
    tg_release(b);
    tg_release(i);
}
END_TEST

START_TEST(scope_end_keep_hands_the_result_out)
{
    int64_t before = tg_live_tensors();
    tg_tensor *x = T64(SHAPE(2), 1, 1.0, 2.0);
    tg_scope_begin();
    tg_tensor *y = tg_exp(tg_mul_scalar(tg_add_scalar(x, 1.0), 2.0));
    tg_tensor *kept = tg_scope_end_keep(y);
    ck_assert_int_eq(tg_live_tensors(), before + 2);
    ck_assert_values(kept, 1e-12, exp(4.0), exp(6.0));
    tg_release(kept);
    tg_release(x);
    ck_assert_int_eq(tg_scope_end(), -1);
    ck_assert_error(TG_ERR_STATE, "tg_scope_end", "no scope");
}
END_TEST

START_TEST(graph_is_freed_when_the_loss_is_released)
{
    int64_t before = tg_live_tensors();
    tg_tensor *a = T64(SHAPE(2), 1, 1.0, 2.0);
    tg_set_requires_grad(a, true);
    tg_tensor *h = tg_exp(a);
    tg_tensor *loss = tg_sum(h, NULL, 0, false);
    tg_release(h); /* the graph keeps what backward needs of h */
    ck_assert_int_eq(tg_backward(loss, NULL), 0);
    tg_tensor *g = tg_grad(a);
    ck_assert_values(g, 1e-12, exp(1.0), exp(2.0));
    tg_release(g);
    tg_release(loss);
    tg_zero_grad(a);
    ck_assert_int_eq(tg_live_tensors(), before + 1);
    tg_release(a);
}
END_TEST

START_TEST(max_returns_values_and_first_index)
{
    tg_tensor *x = T64(SHAPE(2, 3), 2, 1, 5, 5, -1, -3, -2);
    tg_tensor *v = NULL, *i = NULL;
    ck_assert_int_eq(tg_max(x, 1, false, &v, &i), 0);
    ck_assert_values(v, 0, 5, -1);
    ck_assert_values(i, 0, 1, 0);
    ck_assert_int_eq(tg_dtype_of(i), TG_INT64);
    tg_release(v);
    tg_release(i);
    ck_assert_int_eq(tg_max(x, 2, false, &v, &i), -1);
    ck_assert_error(TG_ERR_DIM, "tg_max", "dim 2");
    tg_release(x);
}
END_TEST

START_TEST(sum_and_mean_over_dims)
{
    tg_tensor *x = T64(SHAPE(2, 3), 2, 1, 2, 3, 4, 5, 6);
    tg_scope_begin();
    ck_assert_values(tg_sum(x, (int[]){0}, 1, false), 0, 5, 7, 9);
    ck_assert_shape(tg_sum(x, (int[]){1}, 1, true), 2, 1);
    ck_assert_values(tg_mean(x, (int[]){-1}, 1, false), 1e-12, 2, 5);
    ck_assert_values(tg_mean(x, NULL, 0, false), 1e-12, 3.5);
    ck_assert_ptr_null(tg_sum(x, (int[]){0, 0}, 2, false));
    ck_assert_error(TG_ERR_DIM, "tg_sum", "twice");
    ck_assert_ptr_null(tg_sum(x, (int[]){3}, 1, false));
    ck_assert_error(TG_ERR_DIM, "tg_sum", "dim 3");
    tg_scope_end();
    tg_release(x);
}
END_TEST

/* float32 sums over the leading dims (a bias gradient) are summed in double,
 * each column's rows in order, then rounded: bit for bit the naive loop's,
 * on whole 64-column blocks and on the 22 columns after them, in a tensor
 * big enough to be split across threads. */
START_TEST(float_sum_over_leading_dims_is_the_in_order_double_sum)
{
    enum { R = 4, S = 75, C = 150 };
    static float v[R * S * C];
    for (int i = 0; i < R * S * C; i++)
        v[i] = sinf(0.37f * (float)i) * (float)(1 + i % 5);
    tg_tensor *x = tg_from_data(TG_FLOAT32, 3, (int64_t[]){R, S, C}, v);
    tg_scope_begin();
    tg_tensor *sum = tg_sum(x, (int[]){0, 1}, 2, false);
    ck_assert_ptr_nonnull(sum);
    const float *got = tg_data(sum);
    int bad = 0;
    for (int j = 0; j < C; j++) {
        double want = 0;
        for (int r = 0; r < R * S; r++)
            want += v[r * C + j];
        bad += got[j] != (float)want;
    }
    ck_assert_int_eq(bad, 0);
    tg_scope_end();
    tg_release(x);
}
END_TEST

/* float32 a [300, 7, 13] with b repeated along a's leading dims (b [7, 13]
 * or [13]), and the other way round: each element is the float rounding of
 * the exact result (double holds it for +, -, *, /), in a tensor big enough
 * to be split across threads. */
START_TEST(float_broadcast_along_leading_dims_rounds_each_element_once)
{
    enum { R = 300, S = 7, C = 13 };
    static float av[R * S * C], bv[S * C];
    for (int i = 0; i < R * S * C; i++)
        av[i] = sinf(0.31f * (float)i) * (float)(1 + i % 7);
    for (int i = 0; i < S * C; i++)
        bv[i] = 0.5f + cosf(0.9f * (float)i) * (float)(1 + i % 3);
    tg_tensor *(*const ops[4])(const tg_tensor *, const tg_tensor *) = {tg_add, tg_sub, tg_mul,
                                                                        tg_div};
    tg_scope_begin();
    tg_tensor *a = tg_from_data(TG_FLOAT32, 3, (int64_t[]){R, S, C}, av);
    tg_tensor *bs[2] = {tg_from_data(TG_FLOAT32, 2, (int64_t[]){S, C}, bv),
                        tg_from_data(TG_FLOAT32, 1, (int64_t[]){C}, bv)};
    int bad = 0;
    for (int op = 0; op < 4; op++)
        for (int w = 0; w < 2; w++)
            for (int flip = 0; flip < 2; flip++) {
                tg_tensor *out = flip ? ops[op](bs[w], a) : ops[op](a, bs[w]);
                ck_assert_ptr_nonnull(out);
                const float *o = tg_data(out);
                int64_t period = w == 0 ? S * C : C;
                for (int64_t i = 0; i < R * S * C; i++) {
                    double x = av[i], y = bv[i % period];
                    if (flip)
                        x = y, y = av[i];
                    double want = op == 0 ? x + y : op == 1 ? x - y : op == 2 ? x * y : x / y;
                    bad += o[i] != (float)want;
                }
            }
    /* same shapes, contiguous: the flat loop, split the same way */
    tg_tensor *twice = tg_add(a, a), *none = tg_sub(a, a);
    const float *tw = tg_data(twice), *no = tg_data(none);
    for (int64_t i = 0; i < R * S * C; i++)
        bad += tw[i] != 2 * av[i] || no[i] != 0;
    ck_assert_int_eq(bad, 0);
    tg_scope_end();
}
END_TEST

/* ---- grad-ready hooks ------------------------------------------------------------ */

/* What a grad-ready hook saw: its calls, when (a clock shared by all
 * hooks), and the leaf's gradient at the time. */
typedef struct {
    int calls, when;
    double grad[4];
} ready_log;
static int ready_clock;

static void log_ready(tg_tensor *leaf, void *user)
{
    ready_log *r = user;
    r->calls++;
    r->when = ++ready_clock;
    tg_scope_begin();
    ck_assert_int_eq(tg_copy_to(tg_grad(leaf), TG_FLOAT64, r->grad, tg_numel(leaf)), 0);
    tg_scope_end();
}

/* late feeds the first op of the forward pass, w is used four times (twice
 * through views), early only by the last op, so its gradient is the first
 * backward completes. */
static tg_tensor *hooked_loss(tg_tensor *late, tg_tensor *w, tg_tensor *early)
{
    tg_tensor *h = tg_matmul(late, w);                                   /* [2,2] */
    h = tg_add(h, tg_mul(w, w));
    h = tg_add(h, tg_transpose(w, 0, 1));
    tg_tensor *row = tg_narrow(w, 0, 1, 1);                              /* [1,2] */
    return tg_mul(tg_sum(tg_add(h, row), NULL, 0, false), early);
}

START_TEST(grad_ready_hook_fires_once_after_the_last_contribution)
{
    tg_tensor *late = T64(SHAPE(2, 2), 2, 0.5, -1.0, 2.0, 0.25);
    tg_tensor *w = T64(SHAPE(2, 2), 2, 1.0, 2.0, 3.0, 4.0);
    tg_tensor *early = T64(SHAPE(1), 1, 3.0);
    tg_tensor *leaves[3] = {late, w, early};
    ready_log logs[3] = {{0}};
    for (int i = 0; i < 3; i++) {
        tg_set_requires_grad(leaves[i], true);
        ck_assert_int_eq(tg_set_grad_ready_hook(leaves[i], log_ready, &logs[i]), 0);
    }
    ready_clock = 0;
    tg_scope_begin();
    ck_assert_int_eq(tg_backward(hooked_loss(late, w, early), NULL), 0);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(logs[i].calls, 1);
        /* what the hook saw is the whole gradient backward leaves */
        assert_values(tg_grad(leaves[i]), logs[i].grad, tg_numel(leaves[i]), 0);
    }
    tg_scope_end();
    /* each as soon as it was complete, not all at the end: early first */
    ck_assert_int_eq(logs[2].when, 1);
    for (int i = 0; i < 3; i++)
        tg_release(leaves[i]);
}
END_TEST

START_TEST(grad_ready_hook_sees_the_accumulated_gradient_each_backward)
{
    tg_tensor *w = T64(SHAPE(2), 1, 1.0, 2.0);
    tg_set_requires_grad(w, true);
    ready_log log = {0};
    tg_set_grad_ready_hook(w, log_ready, &log);
    for (int pass = 1; pass <= 2; pass++) {
        tg_scope_begin();
        ck_assert_int_eq(tg_backward(tg_sum(tg_mul(w, w), NULL, 0, false), NULL), 0);
        tg_scope_end();
        ck_assert_int_eq(log.calls, pass);
        ck_assert_double_eq(log.grad[0], 2.0 * pass);
        ck_assert_double_eq(log.grad[1], 4.0 * pass);
    }
    /* a leaf that is the root itself */
    tg_scope_begin();
    tg_tensor *s = T64(SHAPE(1), 1, 5.0);
    tg_set_requires_grad(s, true);
    ready_log root_log = {0};
    tg_set_grad_ready_hook(s, log_ready, &root_log);
    ck_assert_int_eq(tg_backward(s, NULL), 0);
    ck_assert_int_eq(root_log.calls, 1);
    ck_assert_double_eq(root_log.grad[0], 1.0);
    tg_scope_end();
    tg_release(w);
}
END_TEST

START_TEST(grad_ready_hook_is_not_called_when_removed_or_not_reached)
{
    tg_tensor *w = T64(SHAPE(2), 1, 1.0, 2.0), *other = T64(SHAPE(2), 1, 1.0, 1.0);
    tg_set_requires_grad(w, true);
    tg_set_requires_grad(other, true);
    ready_log wl = {0}, ol = {0};
    tg_set_grad_ready_hook(w, log_ready, &wl);
    tg_set_grad_ready_hook(other, log_ready, &ol);
    ck_assert_int_eq(tg_set_grad_ready_hook(w, NULL, NULL), 0);
    tg_scope_begin();
    ck_assert_int_eq(tg_backward(tg_sum(w, NULL, 0, false), NULL), 0);
    tg_scope_end();
    ck_assert_int_eq(wl.calls, 0);
    ck_assert_int_eq(ol.calls, 0); /* other is not in this graph */
    /* a failing backward calls no hook it did not reach */
    tg_scope_begin();
    ck_assert_int_eq(tg_backward(tg_mul(other, other), NULL), -1);
    tg_error_clear();
    tg_scope_end();
    ck_assert_int_eq(ol.calls, 0);
    /* released with its hook set: nothing to undo */
    tg_release(w);
    tg_release(other);
}
END_TEST

START_TEST(grad_ready_hook_only_on_leaves)
{
    tg_tensor *w = T64(SHAPE(2), 1, 1.0, 2.0);
    tg_set_requires_grad(w, true);
    tg_scope_begin();
    tg_tensor *y = tg_mul(w, w);
    ck_assert_int_eq(tg_set_grad_ready_hook(y, log_ready, NULL), -1);
    ck_assert_int_eq(tg_error_code(), TG_ERR_STATE);
    ck_assert_str_eq(tg_error_message(), "tg_set_grad_ready_hook: only leaves have a hook; this "
                                         "tensor was made by mul");
    tg_error_clear();
    ck_assert_int_eq(tg_set_grad_ready_hook(NULL, log_ready, NULL), -1);
    ck_assert_int_eq(tg_error_code(), TG_ERR_NULL);
    tg_error_clear();
    tg_scope_end();
    tg_release(w);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("autograd");
    TCase *tc = tcase_checked("engine");
    tcase_add_test(tc, backward_fills_leaf_gradients);
    tcase_add_test(tc, gradients_accumulate_until_zeroed);
    tcase_add_test(tc, a_tensor_used_twice_gets_both_gradients);
    tcase_add_test(tc, broadcast_gradient_is_summed_to_the_operand_shape);
    tcase_add_test(tc, transposed_view_gradient_lands_in_the_base);
    tcase_add_test(tc, large_slices_add_their_gradients_into_one_buffer);
    tcase_add_test(tc, second_backward_through_a_freed_graph_is_an_error);
    tcase_add_test(tc, backward_on_a_non_scalar_needs_an_upstream_gradient);
    tcase_add_test(tc, backward_without_requires_grad_is_an_error);
    tcase_add_test(tc, no_grad_mode_records_nothing);
    tcase_add_test(tc, detach_shares_storage_without_the_graph);
    tcase_add_test(tc, requires_grad_only_on_float_leaves);
    tcase_add_test(tc, graph_is_freed_when_the_loss_is_released);
    suite_add_tcase(s, tc);
    TCase *hooks = tcase_checked("grad_ready_hooks");
    tcase_add_test(hooks, grad_ready_hook_fires_once_after_the_last_contribution);
    tcase_add_test(hooks, grad_ready_hook_sees_the_accumulated_gradient_each_backward);
    tcase_add_test(hooks, grad_ready_hook_is_not_called_when_removed_or_not_reached);
    tcase_add_test(hooks, grad_ready_hook_only_on_leaves);
    suite_add_tcase(s, hooks);
    TCase *errors = tcase_checked("errors");
    tcase_add_test(errors, a_null_input_fails_the_chain_once);
    tcase_add_test(errors, error_handler_sees_every_error);
    tcase_add_test(errors, dtypes_of_a_binary_op_must_match);
    suite_add_tcase(s, errors);
    TCase *scopes = tcase_checked("scopes");
    tcase_add_test(scopes, scope_end_keep_hands_the_result_out);
    suite_add_tcase(s, scopes);
    TCase *reduce = tcase_checked("reductions");
    tcase_add_test(reduce, max_returns_values_and_first_index);
    tcase_add_test(reduce, sum_and_mean_over_dims);
    tcase_add_test(reduce, float_sum_over_leading_dims_is_the_in_order_double_sum);
    tcase_add_test(reduce, float_broadcast_along_leading_dims_rounds_each_element_once);
    suite_add_tcase(s, reduce);
    return run_suite(s);
}
