/* The attention ops: softmax and log_softmax (values, masked rows, large
 * logits), masked_fill (values, gradient, errors) and dropout (identity
 * modes, mask statistics and reproducibility, errors). */
#include "testutil.h"

#include <stdlib.h>

/* Naive reference: softmax of each row of a rows x cols row-major matrix,
 * in long double, max subtracted. */
static void reference_softmax(const double *x, double *y, int rows, int cols)
{
    for (int r = 0; r < rows; r++) {
        long double m = x[r * cols], s = 0;
        for (int c = 1; c < cols; c++)
            m = x[r * cols + c] > m ? x[r * cols + c] : m;
        for (int c = 0; c < cols; c++)
            s += expl(x[r * cols + c] - m);
        for (int c = 0; c < cols; c++)
            y[r * cols + c] = (double)(expl(x[r * cols + c] - m) / s);
    }
}

/* ---- softmax and log_softmax --------------------------------------------- */

START_TEST(softmax_rows_sum_to_one_and_match_exp_over_sum)
{
    tg_dtype dtypes[2] = {TG_FLOAT64, TG_FLOAT32};
    for (int k = 0; k < 2; k++) {
        tg_scope_begin();
        tg_rng *rng = tg_rng_new(3);
        tg_tensor *x = tg_randn(rng, dtypes[k], 2, SHAPE(5, 7));
        tg_rng_free(rng);
        tg_tensor *y = tg_softmax(x, -1);
        ck_assert_shape(y, 5, 7);
        ck_assert_int_eq(tg_dtype_of(y), dtypes[k]);
        double *xv = values_of(x), *yv = values_of(y), want[35];
        for (int r = 0; r < 5; r++) { /* exp / sum without the max: small inputs */
            double s = 0;
            for (int c = 0; c < 7; c++)
                s += exp(xv[r * 7 + c]);
            double row = 0;
            for (int c = 0; c < 7; c++) {
                want[r * 7 + c] = exp(xv[r * 7 + c]) / s;
                row += yv[r * 7 + c];
            }
            ck_assert_double_eq_tol(row, 1.0, k ? 1e-6 : 1e-12);
        }
        assert_values(y, want, 35, k ? 1e-6 : 1e-12);
        free(xv);
        free(yv);
        tg_scope_end();
    }
}
END_TEST

START_TEST(softmax_over_dim0_of_transposed_input_matches_reference)
{
    tg_scope_begin();
    /* x [2,3]; x^T is [3,2] non-contiguous; softmax over dim 0 of x^T
     * normalises each row of x. */
    tg_tensor *x = T64(SHAPE(2, 3), 2, 1.0, 2.0, 3.0, -1.0, 0.5, 4.0);
    tg_tensor *xt = tg_transpose(x, 0, 1);
    ck_assert(!tg_is_contiguous(xt));
    tg_tensor *y = tg_softmax(xt, 0);
    ck_assert_shape(y, 3, 2);
    double want[6], xs[6] = {1.0, 2.0, 3.0, -1.0, 0.5, 4.0};
    reference_softmax(xs, want, 2, 3);
    /* y[i][j] = softmax of row j of x at i */
    ck_assert_values(y, 1e-12, want[0], want[3], want[1], want[4], want[2], want[5]);
    /* And dim -2 is the same dim. */
    assert_values(tg_softmax(xt, -2), (double[]){want[0], want[3], want[1], want[4], want[2],
                                                 want[5]}, 6, 1e-12);
    tg_scope_end();
}
END_TEST

START_TEST(softmax_of_middle_dim_matches_reference)
{
    tg_scope_begin();
    tg_rng *rng = tg_rng_new(11);
    tg_tensor *x = tg_randn(rng, TG_FLOAT64, 3, SHAPE(2, 3, 4));
    tg_rng_free(rng);
    double *xv = values_of(x), want[24];
    for (int a = 0; a < 2; a++)
        for (int c = 0; c < 4; c++) {
            double col[3], out[3];
            for (int b = 0; b < 3; b++)
                col[b] = xv[a * 12 + b * 4 + c];
            reference_softmax(col, out, 1, 3);
            for (int b = 0; b < 3; b++)
                want[a * 12 + b * 4 + c] = out[b];
        }
    assert_values(tg_softmax(x, 1), want, 24, 1e-12);
    free(xv);
    tg_scope_end();
}
END_TEST

/* Big enough to be split over threads (when OpenMP is on), along both dims. */
START_TEST(softmax_of_a_large_tensor_matches_reference)
{
    enum { R = 300, C = 200 };
    tg_scope_begin();
    tg_rng *rng = tg_rng_new(8);
    tg_tensor *x = tg_randn(rng, TG_FLOAT64, 2, SHAPE(R, C));
    tg_rng_free(rng);
    double *xv = values_of(x), *want = malloc(R * C * sizeof *want);
    reference_softmax(xv, want, R, C);
    assert_values(tg_softmax(x, 1), want, R * C, 1e-12);
    /* over dim 0 of x^T: the same numbers, transposed */
    double *got = values_of(tg_softmax(tg_transpose(x, 0, 1), 0));
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++)
            ck_assert_double_eq_tol(got[c * R + r], want[r * C + c], 1e-12);
    free(xv);
    free(want);
    free(got);
    tg_scope_end();
}
END_TEST

/* sum(softmax(x)) is constant, so its gradient is zero; backward of sum hands
 * softmax an expanded (stride 0) upstream gradient. log_softmax's rows
 * give dx = 1 - n * softmax. */
START_TEST(softmax_backward_reads_an_expanded_gradient)
{
    tg_tensor *x = T64(SHAPE(2, 3), 2, 0.5, -1.0, 2.0, 3.0, 0.0, 1.0);
    tg_set_requires_grad(x, true);
    tg_scope_begin();
    ck_assert_int_eq(tg_backward(tg_sum(tg_softmax(x, 0), NULL, 0, false), NULL), 0);
    ck_assert_values(tg_grad(x), 1e-15, 0, 0, 0, 0, 0, 0);
    tg_zero_grad(x);
    ck_assert_int_eq(tg_backward(tg_sum(tg_log_softmax(x, 0), NULL, 0, false), NULL), 0);
    double want[6], xs[6] = {0.5, 3.0, -1.0, 0.0, 2.0, 1.0}, p[6]; /* x^T */
    reference_softmax(xs, p, 3, 2);
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < 3; c++)
            want[r * 3 + c] = 1 - 2 * p[c * 2 + r];
    assert_values(tg_grad(x), want, 6, 1e-12);
    tg_scope_end();
    tg_release(x);
}
END_TEST

/* Row 0 fully masked, row 1 partly: zeros (no NaN) and exactly zero gradient. */
START_TEST(softmax_fully_masked_row_gives_zeros_and_zero_gradient)
{
    tg_tensor *x = T64(SHAPE(2, 3), 2, 0.3, -1.2, 2.0, 0.1, 0.7, -0.4);
    tg_tensor *mask = tg_from_data(TG_BOOL, 2, SHAPE(2, 3),
                                   (const bool[]){1, 1, 1, 0, 1, 0});
    tg_set_requires_grad(x, true);
    tg_scope_begin();
    tg_tensor *y = tg_softmax(tg_masked_fill(x, mask, -INFINITY), -1);
    double e0 = exp(0.1), e2 = exp(-0.4);
    ck_assert_values(y, 1e-12, 0.0, 0.0, 0.0, e0 / (e0 + e2), 0.0, e2 / (e0 + e2));
    tg_tensor *w = T64(SHAPE(2, 3), 2, 1.0, -2.0, 3.0, 0.5, 4.0, -1.5);
    ck_assert_int_eq(tg_backward(tg_sum(tg_mul(y, w), NULL, 0, false), NULL), 0);
    double *g = values_of(tg_grad(x));
    for (int i = 0; i < 6; i++)
        ck_assert(!isnan(g[i]));
    ck_assert(g[0] == 0.0 && g[1] == 0.0 && g[2] == 0.0 && g[4] == 0.0);
    /* The kept pair: dx = y * (w - sum(w*y)) */
    double p0 = e0 / (e0 + e2), p2 = e2 / (e0 + e2), dot = 0.5 * p0 - 1.5 * p2;
    ck_assert_double_eq_tol(g[3], p0 * (0.5 - dot), 1e-12);
    ck_assert_double_eq_tol(g[5], p2 * (-1.5 - dot), 1e-12);
    free(g);
    tg_scope_end();
    tg_release(x);
    tg_release(mask);
}
END_TEST

/* A leaf that is itself all -inf, in both dtypes, even with a NaN upstream. */
START_TEST(softmax_of_all_minus_inf_passes_exactly_zero_gradient)
{
    tg_dtype dtypes[2] = {TG_FLOAT64, TG_FLOAT32};
    for (int k = 0; k < 2; k++) {
        tg_tensor *x = tg_full(dtypes[k], 2, SHAPE(2, 4), -INFINITY);
        tg_set_requires_grad(x, true);
        tg_scope_begin();
        tg_tensor *y = tg_softmax(x, 1);
        ck_assert_values(y, 0, 0, 0, 0, 0, 0, 0, 0, 0);
        tg_tensor *go = tg_full(dtypes[k], 2, SHAPE(2, 4), NAN);
        ck_assert_int_eq(tg_backward(y, go), 0);
        double *g = values_of(tg_grad(x));
        for (int i = 0; i < 8; i++)
            ck_assert_msg(g[i] == 0.0, "grad %d is %g", i, g[i]);
        free(g);
        tg_scope_end();
        tg_release(x);
    }
}
END_TEST

START_TEST(log_softmax_fully_masked_row_is_minus_inf_with_zero_gradient)
{
    tg_tensor *x = T64(SHAPE(2, 2), 2, -INFINITY, -INFINITY, 1.0, 1.0);
    tg_set_requires_grad(x, true);
    tg_scope_begin();
    tg_tensor *y = tg_log_softmax(x, -1);
    ck_assert_values(y, 1e-12, -INFINITY, -INFINITY, -log(2.0), -log(2.0));
    tg_tensor *go = T64(SHAPE(2, 2), 2, 1.0, 2.0, 3.0, -1.0);
    ck_assert_int_eq(tg_backward(y, go), 0);
    /* row 1: dx = g - 0.5 * sum(g) = (3 - 1, -1 - 1) */
    ck_assert_values(tg_grad(x), 0, 0.0, 0.0, 2.0, -2.0);
    tg_scope_end();
    tg_release(x);
}
END_TEST

START_TEST(softmax_of_huge_logits_is_finite_and_matches_float64_reference)
{
    const double xs[8] = {1e4, -1e4, 0.0, 1e4 - 1.0, -1e4, -1e4 + 2.0, -1e4 + 0.5, 1e4};
    double want[8], want_log[8];
    reference_softmax(xs, want, 2, 4);
    /* log_softmax reference: x - max - log(sum exp(x - max)) */
    for (int r = 0; r < 2; r++) {
        double m = -INFINITY, s = 0;
        for (int c = 0; c < 4; c++)
            m = fmax(m, xs[r * 4 + c]);
        for (int c = 0; c < 4; c++)
            s += exp(xs[r * 4 + c] - m);
        for (int c = 0; c < 4; c++)
            want_log[r * 4 + c] = xs[r * 4 + c] - m - log(s);
    }
    tg_dtype dtypes[2] = {TG_FLOAT64, TG_FLOAT32};
    for (int k = 0; k < 2; k++) {
        tg_scope_begin();
        tg_tensor *x = tg_to_dtype(tg_from_data(TG_FLOAT64, 2, SHAPE(2, 4), xs), dtypes[k]);
        tg_tensor *y = tg_softmax(x, -1), *ly = tg_log_softmax(x, -1);
        double *yv = values_of(y), *lv = values_of(ly);
        for (int i = 0; i < 8; i++)
            ck_assert_msg(isfinite(yv[i]) && isfinite(lv[i]), "element %d: %g, %g", i, yv[i],
                          lv[i]);
        free(yv);
        free(lv);
        assert_values(y, want, 8, k ? 1e-6 : 1e-12);
        /* float32 holds 1e4 - 1 exactly, so the differences are exact too */
        assert_values(ly, want_log, 8, k ? 1e-6 : 1e-12);
        tg_scope_end();
    }
}
END_TEST

START_TEST(log_softmax_equals_log_of_softmax)
{
    tg_scope_begin();
    tg_rng *rng = tg_rng_new(5);
    tg_tensor *x = tg_mul_scalar(tg_randn(rng, TG_FLOAT64, 3, SHAPE(2, 3, 5)), 3.0);
    tg_rng_free(rng);
    for (int dim = -3; dim < 3; dim++) {
        double *want = values_of(tg_log(tg_softmax(x, dim)));
        assert_values(tg_log_softmax(x, dim), want, 30, 1e-12);
        free(want);
    }
    tg_scope_end();
}
END_TEST

START_TEST(softmax_of_a_scalar_is_one)
{
    tg_scope_begin();
    tg_tensor *x = tg_scalar(TG_FLOAT64, -7.5);
    ck_assert_values(tg_softmax(x, 0), 0, 1.0);
    ck_assert_values(tg_log_softmax(x, -1), 0, 0.0);
    tg_scope_end();
}
END_TEST

START_TEST(softmax_rejects_bad_arguments)
{
    tg_scope_begin();
    ck_assert_ptr_null(tg_softmax(NULL, 0));
    ck_assert_error(TG_ERR_NULL, "tg_softmax");
    ck_assert_ptr_null(tg_log_softmax(tg_arange(TG_INT64, 0, 3, 1), 0));
    ck_assert_error(TG_ERR_DTYPE, "tg_log_softmax", "int64");
    ck_assert_ptr_null(tg_softmax(tg_zeros(TG_FLOAT32, 2, SHAPE(2, 3)), 2));
    ck_assert_error(TG_ERR_DIM, "tg_softmax", "2");
    ck_assert_ptr_null(tg_log_softmax(tg_zeros(TG_FLOAT32, 2, SHAPE(2, 3)), -3));
    ck_assert_error(TG_ERR_DIM, "tg_log_softmax", "-3");
    tg_scope_end();
}
END_TEST

/* ---- masked_fill --------------------------------------------------------- */

START_TEST(masked_fill_replaces_masked_values)
{
    tg_scope_begin();
    tg_tensor *x = T64(SHAPE(2, 3), 2, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0);
    tg_tensor *m = tg_from_data(TG_BOOL, 2, SHAPE(2, 3), (const bool[]){0, 1, 0, 1, 0, 1});
    ck_assert_values(tg_masked_fill(x, m, -9.0), 0, 1.0, -9.0, 3.0, -9.0, 5.0, -9.0);
    ck_assert_values(tg_masked_fill(x, m, INFINITY), 0, 1.0, INFINITY, 3.0, INFINITY, 5.0,
                     INFINITY);
    ck_assert_values(tg_masked_fill(x, m, -INFINITY), 0, 1.0, -INFINITY, 3.0, -INFINITY, 5.0,
                     -INFINITY);
    /* a [3] mask and a [2,1] mask broadcast over the rows and the columns */
    tg_tensor *row = tg_from_data(TG_BOOL, 1, SHAPE(3), (const bool[]){1, 0, 0});
    ck_assert_values(tg_masked_fill(x, row, 0.5), 0, 0.5, 2.0, 3.0, 0.5, 5.0, 6.0);
    tg_tensor *col = tg_from_data(TG_BOOL, 2, SHAPE(2, 1), (const bool[]){0, 1});
    tg_tensor *y = tg_masked_fill(tg_to_dtype(x, TG_FLOAT32), col, 7.0);
    ck_assert_int_eq(tg_dtype_of(y), TG_FLOAT32);
    ck_assert_shape(y, 2, 3);
    ck_assert_values(y, 0, 1.0, 2.0, 3.0, 7.0, 7.0, 7.0);
    /* a transposed x: the result has x^T's shape and order */
    tg_tensor *mt = tg_from_data(TG_BOOL, 2, SHAPE(1, 2), (const bool[]){1, 0});
    ck_assert_values(tg_masked_fill(tg_transpose(x, 0, 1), mt, 0.0), 0, 0.0, 4.0, 0.0, 5.0,
                     0.0, 6.0);
    /* the causal mask hides the keys after each query */
    ck_assert_values(tg_masked_fill(tg_ones(TG_FLOAT64, 2, SHAPE(3, 3)), tg_causal_mask(3), 0),
                     0, 1, 0, 0, 1, 1, 0, 1, 1, 1);
    tg_scope_end();
}
END_TEST

START_TEST(masked_fill_gradient_is_exactly_zero_where_masked)
{
    tg_tensor *x = T64(SHAPE(2, 3), 2, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0);
    tg_tensor *m = tg_from_data(TG_BOOL, 1, SHAPE(3), (const bool[]){0, 1, 0});
    tg_set_requires_grad(x, true);
    tg_scope_begin();
    tg_tensor *y = tg_masked_fill(x, m, -INFINITY);
    /* an upstream gradient with NaN and inf at the masked positions */
    tg_tensor *go = T64(SHAPE(2, 3), 2, 1.5, NAN, -2.0, 3.0, INFINITY, 0.25);
    ck_assert_int_eq(tg_backward(y, go), 0);
    double *g = values_of(tg_grad(x));
    double want[6] = {1.5, 0.0, -2.0, 3.0, 0.0, 0.25};
    for (int i = 0; i < 6; i++)
        ck_assert_msg(g[i] == want[i], "grad %d: %g, expected %g", i, g[i], want[i]);
    free(g);
    tg_scope_end();
    tg_release(x);
    tg_release(m);
}
END_TEST

START_TEST(masked_fill_rejects_bad_masks)
{
    tg_scope_begin();
    tg_tensor *x = tg_zeros(TG_FLOAT64, 2, SHAPE(2, 3));
    tg_tensor *ok = tg_from_data(TG_BOOL, 1, SHAPE(3), (const bool[]){0, 1, 0});
    ck_assert_ptr_null(tg_masked_fill(x, tg_zeros(TG_FLOAT64, 2, SHAPE(2, 3)), 0));
    ck_assert_error(TG_ERR_DTYPE, "tg_masked_fill", "bool", "float64");
    ck_assert_ptr_null(tg_masked_fill(x, tg_zeros(TG_INT64, 1, SHAPE(3)), 0));
    ck_assert_error(TG_ERR_DTYPE, "tg_masked_fill", "int64");
    ck_assert_ptr_null(tg_masked_fill(x, tg_zeros(TG_BOOL, 1, SHAPE(4)), 0));
    ck_assert_error(TG_ERR_SHAPE, "tg_masked_fill", "[2,3]", "[4]");
    /* a mask that would broadcast x to a bigger shape */
    ck_assert_ptr_null(tg_masked_fill(x, tg_zeros(TG_BOOL, 3, SHAPE(4, 2, 3)), 0));
    ck_assert_error(TG_ERR_SHAPE, "tg_masked_fill", "[4,2,3]", "[2,3]");
    ck_assert_ptr_null(tg_masked_fill(tg_zeros(TG_FLOAT64, 2, SHAPE(1, 3)),
                                      tg_zeros(TG_BOOL, 2, SHAPE(2, 3)), 0));
    ck_assert_error(TG_ERR_SHAPE, "tg_masked_fill", "[2,3]", "[1,3]");
    ck_assert_ptr_null(tg_masked_fill(NULL, ok, 0));
    ck_assert_error(TG_ERR_NULL, "tg_masked_fill", "x");
    ck_assert_ptr_null(tg_masked_fill(x, NULL, 0));
    ck_assert_error(TG_ERR_NULL, "tg_masked_fill", "mask");
    ck_assert_ptr_null(tg_masked_fill(tg_zeros(TG_INT64, 1, SHAPE(3)), ok, 0));
    ck_assert_error(TG_ERR_DTYPE, "tg_masked_fill");
    tg_scope_end();
}
END_TEST

/* ---- dropout ----------------------------------------------------------------- */

START_TEST(dropout_is_identity_in_eval_mode_and_at_p_zero)
{
    tg_tensor *x = T64(SHAPE(2, 2), 2, 1.0, -2.0, 3.0, 4.0);
    tg_set_requires_grad(x, true);
    tg_scope_begin();
    tg_rng *rng = tg_rng_new(1);
    uint64_t before[4], after[4];
    tg_rng_get_state(rng, before);
    tg_tensor *ys[3] = {tg_dropout(x, 0.5, false, rng), tg_dropout(x, 0.0, true, rng),
                        tg_dropout(x, 0.9, false, NULL)};
    tg_rng_get_state(rng, after);
    ck_assert_msg(memcmp(before, after, sizeof before) == 0, "identity dropout drew numbers");
    tg_rng_free(rng);
    for (int k = 0; k < 3; k++) {
        ck_assert_shape(ys[k], 2, 2);
        ck_assert_values(ys[k], 0, 1.0, -2.0, 3.0, 4.0);
        tg_tensor *go = T64(SHAPE(2, 2), 2, 0.5, 1.5, -1.0, 2.0);
        ck_assert_int_eq(tg_backward(ys[k], go), 0);
    }
    /* three backward passes of the gradient unchanged */
    ck_assert_values(tg_grad(x), 0, 1.5, 4.5, -3.0, 6.0);
    tg_scope_end();
    tg_release(x);
}
END_TEST

START_TEST(dropout_zeroes_about_p_and_scales_the_rest)
{
    const double p = 0.3;
    const int64_t n = 200000;
    tg_dtype dtypes[2] = {TG_FLOAT64, TG_FLOAT32};
    for (int k = 0; k < 2; k++) {
        tg_scope_begin();
        tg_rng *rng = tg_rng_new(42);
        tg_tensor *x = tg_uniform(rng, dtypes[k], 2, SHAPE(400, 500), 1.0, 2.0);
        tg_tensor *y = tg_dropout(x, p, true, rng);
        tg_rng_free(rng);
        ck_assert_int_eq(tg_dtype_of(y), dtypes[k]);
        double *xv = values_of(x), *yv = values_of(y);
        int64_t zeros = 0;
        for (int64_t i = 0; i < n; i++) {
            if (yv[i] == 0.0) {
                zeros++;
                continue;
            }
            double want = xv[i] / (1 - p);
            ck_assert_msg(fabs(yv[i] - want) <= (k ? 1e-6 : 1e-14) * want,
                          "element %lld: %g, expected %g", (long long)i, yv[i], want);
        }
        double frac = (double)zeros / (double)n;
        /* the standard deviation of frac is about 0.001 */
        ck_assert_msg(fabs(frac - p) < 0.01, "dropped fraction %g, p %g", frac, p);
        free(xv);
        free(yv);
        tg_scope_end();
    }
}
END_TEST

/* SplitMix64 as its authors define it: the state steps by the golden-ratio
 * constant and each output is the mixed state. */
static uint64_t splitmix64_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

/* The mask is SplitMix64's stream from one draw of the generator given, one
 * output per element in row-major order (autograd.h): the test redraws it.
 * Also for a transposed input; and the generator moved on by one draw. */
START_TEST(dropout_mask_follows_the_rng_draws_in_row_major_order)
{
    tg_tensor *x = T64(SHAPE(3, 4), 2, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12);
    tg_set_requires_grad(x, true);
    tg_scope_begin();
    tg_tensor *xt = tg_transpose(x, 0, 1); /* [4,3] */
    tg_rng *rng = tg_rng_new(9);
    tg_tensor *y = tg_dropout(xt, 0.5, true, rng);
    uint64_t after = tg_rng_next(rng);
    tg_rng_seed(rng, 9);
    uint64_t key = tg_rng_next(rng);
    ck_assert(tg_rng_next(rng) == after);
    double *xv = values_of(xt), want[12], scale[12];
    for (int i = 0; i < 12; i++) {
        scale[i] = (double)(splitmix64_next(&key) >> 11) * 0x1.0p-53 < 0.5 ? 0.0 : 2.0;
        want[i] = xv[i] * scale[i];
    }
    tg_rng_free(rng);
    assert_values(y, want, 12, 0);
    /* dx = g * mask: with g = 1 the gradient is the scale, put back into x's layout */
    ck_assert_int_eq(tg_backward(tg_sum(y, NULL, 0, false), NULL), 0);
    double *g = values_of(tg_grad(x));
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 3; c++)
            ck_assert(g[c * 4 + r] == scale[r * 3 + c]);
    free(xv);
    free(g);
    tg_scope_end();
    tg_release(x);
}
END_TEST

/* Over a tensor of many parallel blocks, the kept fraction is 1 - p within
 * five standard deviations, and the kept elements hold exactly 1/(1-p). */
START_TEST(dropout_keeps_one_minus_p_of_a_large_tensor)
{
    enum { N = 300001 };
    tg_scope_begin();
    tg_tensor *x = tg_ones(TG_FLOAT32, 1, SHAPE(N));
    tg_rng *rng = tg_rng_new(5);
    double *y = values_of(tg_dropout(x, 0.3, true, rng));
    int64_t kept = 0;
    for (int i = 0; i < N; i++) {
        ck_assert(y[i] == 0 || y[i] == (double)(float)(1 / 0.7));
        kept += y[i] != 0;
    }
    double sd = sqrt(N * 0.3 * 0.7);
    ck_assert_msg(fabs((double)kept - 0.7 * N) < 5 * sd, "kept %lld of %d", (long long)kept, N);
    tg_rng_free(rng);
    free(y);
    tg_scope_end();
}
END_TEST

START_TEST(dropout_with_the_same_seed_gives_the_same_mask)
{
    tg_scope_begin();
    tg_tensor *x = tg_ones(TG_FLOAT32, 2, SHAPE(16, 16));
    tg_rng *a = tg_rng_new(123), *b = tg_rng_new(123), *c = tg_rng_new(124);
    double *ya = values_of(tg_dropout(x, 0.5, true, a));
    double *yb = values_of(tg_dropout(x, 0.5, true, b));
    double *yc = values_of(tg_dropout(x, 0.5, true, c));
    /* and the generator moves on: a second draw from a differs */
    double *ya2 = values_of(tg_dropout(x, 0.5, true, a));
    ck_assert(memcmp(ya, yb, 256 * sizeof *ya) == 0);
    ck_assert(memcmp(ya, yc, 256 * sizeof *ya) != 0);
    ck_assert(memcmp(ya, ya2, 256 * sizeof *ya) != 0);
    tg_rng_free(a);
    tg_rng_free(b);
    tg_rng_free(c);
    free(ya);
    free(yb);
    free(yc);
    free(ya2);
    tg_scope_end();
}
END_TEST

START_TEST(dropout_rejects_p_outside_zero_one)
{
    tg_scope_begin();
    tg_tensor *x = tg_ones(TG_FLOAT64, 1, SHAPE(4));
    tg_rng *rng = tg_rng_new(1);
    ck_assert_ptr_null(tg_dropout(x, 1.0, true, rng));
    ck_assert_error(TG_ERR_VALUE, "tg_dropout", "p = 1");
    ck_assert_ptr_null(tg_dropout(x, -0.1, true, rng));
    ck_assert_error(TG_ERR_VALUE, "tg_dropout", "-0.1");
    ck_assert_ptr_null(tg_dropout(x, NAN, true, rng));
    ck_assert_error(TG_ERR_VALUE, "tg_dropout", "nan");
    /* checked in eval mode too, so a bad p does not wait for training */
    ck_assert_ptr_null(tg_dropout(x, 1.5, false, NULL));
    ck_assert_error(TG_ERR_VALUE, "tg_dropout", "1.5");
    tg_rng_free(rng);
    tg_scope_end();
}
END_TEST

START_TEST(dropout_rejects_missing_rng_and_bad_inputs)
{
    tg_scope_begin();
    tg_tensor *x = tg_ones(TG_FLOAT64, 1, SHAPE(4));
    ck_assert_ptr_null(tg_dropout(x, 0.5, true, NULL));
    ck_assert_error(TG_ERR_NULL, "tg_dropout", "rng");
    tg_rng *rng = tg_rng_new(1);
    ck_assert_ptr_null(tg_dropout(NULL, 0.5, true, rng));
    ck_assert_error(TG_ERR_NULL, "tg_dropout");
    ck_assert_ptr_null(tg_dropout(tg_zeros(TG_INT64, 1, SHAPE(4)), 0.5, true, rng));
    ck_assert_error(TG_ERR_DTYPE, "tg_dropout", "int64");
    tg_rng_free(rng);
    tg_scope_end();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("attention_ops");
    TCase *sm = tcase_checked("softmax");
    tcase_add_test(sm, softmax_rows_sum_to_one_and_match_exp_over_sum);
    tcase_add_test(sm, softmax_over_dim0_of_transposed_input_matches_reference);
    tcase_add_test(sm, softmax_of_middle_dim_matches_reference);
    tcase_add_test(sm, softmax_of_a_large_tensor_matches_reference);
    tcase_add_test(sm, softmax_backward_reads_an_expanded_gradient);
    tcase_add_test(sm, softmax_fully_masked_row_gives_zeros_and_zero_gradient);
    tcase_add_test(sm, softmax_of_all_minus_inf_passes_exactly_zero_gradient);
    tcase_add_test(sm, log_softmax_fully_masked_row_is_minus_inf_with_zero_gradient);
    tcase_add_test(sm, softmax_of_huge_logits_is_finite_and_matches_float64_reference);
    tcase_add_test(sm, log_softmax_equals_log_of_softmax);
    tcase_add_test(sm, softmax_of_a_scalar_is_one);
    tcase_add_test(sm, softmax_rejects_bad_arguments);
    suite_add_tcase(s, sm);
    TCase *mf = tcase_checked("masked_fill");
    tcase_add_test(mf, masked_fill_replaces_masked_values);
    tcase_add_test(mf, masked_fill_gradient_is_exactly_zero_where_masked);
    tcase_add_test(mf, masked_fill_rejects_bad_masks);
    suite_add_tcase(s, mf);
    TCase *dr = tcase_checked("dropout");
    tcase_add_test(dr, dropout_is_identity_in_eval_mode_and_at_p_zero);
    tcase_add_test(dr, dropout_zeroes_about_p_and_scales_the_rest);
    tcase_add_test(dr, dropout_mask_follows_the_rng_draws_in_row_major_order);
    tcase_add_test(dr, dropout_with_the_same_seed_gives_the_same_mask);
    tcase_add_test(dr, dropout_keeps_one_minus_p_of_a_large_tensor);
    tcase_add_test(dr, dropout_rejects_p_outside_zero_one);
    tcase_add_test(dr, dropout_rejects_missing_rng_and_bad_inputs);
    suite_add_tcase(s, dr);
    return run_suite(s);
}
