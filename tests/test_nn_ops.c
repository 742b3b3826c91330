/* layer_norm, embedding, cross_entropy and mse_loss: forward values against
 * references computed here, the numerically hard inputs (constant rows,
 * logits of +-1e4), gradients checked by hand, and every error case. */
#include "testutil.h"

#define LN_EPS 1e-5

static tg_tensor *I64(int ndim, const int64_t *shape, const int64_t *values)
{
    return tg_from_data(TG_INT64, ndim, shape, values);
}

/* Layer norm of rows of d values by the textbook two-pass formula. */
static void ref_layer_norm(const double *x, const double *w, const double *b, int rows, int d,
                           double eps, double *out)
{
    for (int r = 0; r < rows; r++) {
        const double *xr = x + r * d;
        double m = 0, v = 0;
        for (int i = 0; i < d; i++)
            m += xr[i];
        m /= d;
        for (int i = 0; i < d; i++)
            v += (xr[i] - m) * (xr[i] - m);
        v /= d;
        for (int i = 0; i < d; i++)
            out[r * d + i] = (xr[i] - m) / sqrt(v + eps) * (w ? w[i] : 1) + (b ? b[i] : 0);
    }
}

/* ---- layer_norm -------------------------------------------------------------- */

static const double ln_x[8] = {1.0, 2.0, 4.0, -3.0, 0.5, 0.25, -1.0, 7.0};
static const double ln_w[4] = {1.5, -0.5, 2.0, 1.0};
static const double ln_b[4] = {0.1, 0.2, -0.3, 0.0};

START_TEST(layer_norm_matches_hand_formula_in_both_dtypes)
{
    double want[8];
    ref_layer_norm(ln_x, ln_w, ln_b, 2, 4, LN_EPS, want);
    tg_dtype dts[2] = {TG_FLOAT64, TG_FLOAT32};
    for (int k = 0; k < 2; k++) {
        tg_scope_begin();
        tg_tensor *x = tg_to_dtype(tg_from_data(TG_FLOAT64, 2, SHAPE(2, 4), ln_x), dts[k]);
        tg_tensor *w = tg_to_dtype(tg_from_data(TG_FLOAT64, 1, SHAPE(4), ln_w), dts[k]);
        tg_tensor *b = tg_to_dtype(tg_from_data(TG_FLOAT64, 1, SHAPE(4), ln_b), dts[k]);
        tg_tensor *y = tg_layer_norm(x, 1, w, b, LN_EPS);
        ck_assert_shape(y, 2, 4);
        ck_assert_int_eq(tg_dtype_of(y), dts[k]);
        assert_values(y, want, 8, k == 0 ? 1e-12 : 1e-5);
        tg_scope_end();
    }
}
END_TEST

START_TEST(layer_norm_over_two_dims_normalises_each_slab)
{
    tg_scope_begin();
    /* [2,2,2]: each [2,2] slab is one row of 4 */
    tg_tensor *x = tg_from_data(TG_FLOAT64, 3, SHAPE(2, 2, 2), ln_x);
    tg_tensor *y = tg_layer_norm(x, 2, NULL, NULL, LN_EPS);
    double want[8];
    ref_layer_norm(ln_x, NULL, NULL, 2, 4, LN_EPS, want);
    ck_assert_shape(y, 2, 2, 2);
    assert_values(y, want, 8, 1e-12);
    tg_scope_end();
}
END_TEST

START_TEST(layer_norm_of_transposed_input_normalises_its_rows)
{
    tg_scope_begin();
    /* xt [4,2] holds ln_x transposed; its transpose is ln_x as [2,4] */
    double xt[8];
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < 4; i++)
            xt[i * 2 + r] = ln_x[r * 4 + i];
    tg_tensor *x = tg_transpose(tg_from_data(TG_FLOAT64, 2, SHAPE(4, 2), xt), 0, 1);
    ck_assert(!tg_is_contiguous(x));
    tg_tensor *w = tg_from_data(TG_FLOAT64, 1, SHAPE(4), ln_w);
    tg_tensor *y = tg_layer_norm(x, 1, w, NULL, LN_EPS);
    double want[8];
    ref_layer_norm(ln_x, ln_w, NULL, 2, 4, LN_EPS, want);
    assert_values(y, want, 8, 1e-12);
    tg_scope_end();
}
END_TEST

START_TEST(layer_norm_constant_row_gives_the_bias)
{
    tg_scope_begin();
    tg_tensor *x = T32(SHAPE(2, 3), 2, 5.0f, 5.0f, 5.0f, 1.0f, 2.0f, 3.0f);
    tg_tensor *w = T32(SHAPE(3), 1, 2.0f, 3.0f, 4.0f);
    tg_tensor *b = T32(SHAPE(3), 1, 0.5f, -1.0f, 7.0f);
    tg_tensor *y = tg_layer_norm(x, 1, w, b, LN_EPS);
    double got[6];
    tg_copy_to(y, TG_FLOAT64, got, 6);
    for (int i = 0; i < 6; i++)
        ck_assert(isfinite(got[i]));
    ck_assert_double_eq(got[0], 0.5);
    ck_assert_double_eq(got[1], -1.0);
    ck_assert_double_eq(got[2], 7.0);
    tg_scope_end();
}
END_TEST

/* A row around 1e8 with spread 1: sum-of-squares variance would cancel. */
START_TEST(layer_norm_is_accurate_far_from_zero)
{
    tg_scope_begin();
    tg_tensor *x = T64(SHAPE(4), 1, 1e8 + 1, 1e8 - 1, 1e8 + 1, 1e8 - 1);
    tg_tensor *y = tg_layer_norm(x, 1, NULL, NULL, 1e-12);
    ck_assert_values(y, 1e-9, 1.0, -1.0, 1.0, -1.0);
    tg_scope_end();
}
END_TEST

/* float32 around 4096, where a float's step is 2^-11: the values 4096 +
 * {0, 1, 1} 2^-10 have a mean float cannot hold (4096 + 2^-10 2/3), and the
 * deviations from it rounded to a float would be off by a quarter. The
 * normalised row is (-2, 1, 1) / sqrt(2); the gradient of sum(y * (1, 2,
 * 4)) is the double op's, of size 1 / std (about 2172). */
START_TEST(layer_norm_float32_is_accurate_far_from_zero)
{
    tg_scope_begin();
    const double step = 1.0 / 1024;
    tg_tensor *x32 = T32(SHAPE(3), 1, 4096.0f, (float)(4096 + step), (float)(4096 + step));
    tg_tensor *x64 = T64(SHAPE(3), 1, 4096.0, 4096 + step, 4096 + step);
    tg_set_requires_grad(x32, true);
    tg_set_requires_grad(x64, true);
    tg_tensor *y32 = tg_layer_norm(x32, 1, NULL, NULL, 1e-20);
    tg_tensor *y64 = tg_layer_norm(x64, 1, NULL, NULL, 1e-20);
    ck_assert_values(y32, 1e-5, -sqrt(2.0), sqrt(0.5), sqrt(0.5));
    tg_tensor *p32 = T32(SHAPE(3), 1, 1.0f, 2.0f, 4.0f), *p64 = T64(SHAPE(3), 1, 1.0, 2.0, 4.0);
    ck_assert_int_eq(tg_backward(tg_sum(tg_mul(y32, p32), NULL, 0, false), NULL), 0);
    ck_assert_int_eq(tg_backward(tg_sum(tg_mul(y64, p64), NULL, 0, false), NULL), 0);
    const double *want = tg_data(tg_grad(x64));
    ck_assert(fabs(want[1]) > 1000);
    ck_assert_values(tg_grad(x32), 1e-4 * fabs(want[1]), want[0], want[1], want[2]);
    tg_scope_end();
}
END_TEST

/* loss = sum(layer_norm(x) * 1): g = 1, so db = rows, dw = sum_rows xhat and
 * dx = rstd * (w - mean(w) - xhat * mean(w * xhat)). */
START_TEST(layer_norm_gradients_match_the_closed_form)
{
    tg_tensor *x = tg_from_data(TG_FLOAT64, 2, SHAPE(2, 4), ln_x);
    tg_tensor *w = tg_from_data(TG_FLOAT64, 1, SHAPE(4), ln_w);
    tg_tensor *b = tg_from_data(TG_FLOAT64, 1, SHAPE(4), ln_b);
    tg_set_requires_grad(x, true);
    tg_set_requires_grad(w, true);
    tg_set_requires_grad(b, true);
    tg_scope_begin();
    ck_assert_int_eq(tg_backward(tg_sum(tg_layer_norm(x, 1, w, b, LN_EPS), NULL, 0, false),
                                 NULL), 0);
    double xhat[8], dx[8], dw[4] = {0};
    ref_layer_norm(ln_x, NULL, NULL, 2, 4, LN_EPS, xhat);
    for (int r = 0; r < 2; r++) {
        double m = 0, v = 0, mw = 0, mwx = 0;
        for (int i = 0; i < 4; i++)
            m += ln_x[r * 4 + i] / 4;
        for (int i = 0; i < 4; i++)
            v += (ln_x[r * 4 + i] - m) * (ln_x[r * 4 + i] - m) / 4;
        for (int i = 0; i < 4; i++) {
            mw += ln_w[i] / 4;
            mwx += ln_w[i] * xhat[r * 4 + i] / 4;
            dw[i] += xhat[r * 4 + i];
        }
        for (int i = 0; i < 4; i++)
            dx[r * 4 + i] = (ln_w[i] - mw - xhat[r * 4 + i] * mwx) / sqrt(v + LN_EPS);
    }
    assert_values(tg_grad(x), dx, 8, 1e-10);
    assert_values(tg_grad(w), dw, 4, 1e-10);
    ck_assert_values(tg_grad(b), 1e-12, 2.0, 2.0, 2.0, 2.0);
    tg_scope_end();
    tg_release(x);
    tg_release(w);
    tg_release(b);
}
END_TEST

/* a holds b's values within tol (relative to 1 + |b|); both on the heap,
 * as they may be large, and checked with one assertion. */
static void assert_same(const tg_tensor *a, const tg_tensor *b, double tol)
{
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(tg_numel(a), tg_numel(b));
    double *got = values_of(a), *want = values_of(b);
    int64_t bad = -1; /* one assertion, not one per element: each costs Check a write */
    for (int64_t i = 0; i < tg_numel(b) && bad < 0; i++)
        if (!(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i]))))
            bad = i;
    ck_assert_msg(bad < 0, "element %lld: %.10g, expected %.10g", (long long)bad,
                  bad < 0 ? 0 : got[bad], bad < 0 ? 0 : want[bad]);
    free(got);
    free(want);
}

/* A fused op and the ops it replaces, on the same inputs: f(in, fused). */
typedef tg_tensor *(*two_ways_fn)(tg_tensor *const *in, bool fused, int variant);

/* Runs f both ways on copies of n normal inputs of dtype dt, and asserts the
 * same output (within tol_out) and the same gradient of sum(y^2) for every
 * input (within tol_grad). */
static void check_fused_against_split_for(tg_rng *rng, tg_dtype dt, int n, const int *ndims,
                                          const int64_t *const *shapes, two_ways_fn f,
                                          int variant, double tol_out, double tol_grad,
                                          unsigned trained);

static void check_fused_against_split(tg_rng *rng, tg_dtype dt, int n, const int *ndims,
                                      const int64_t *const *shapes, two_ways_fn f, int variant,
                                      double tol_out, double tol_grad)
{
    check_fused_against_split_for(rng, dt, n, ndims, shapes, f, variant, tol_out, tol_grad, ~0u);
}

/* The same with gradients wanted only for the inputs whose bit is set in
 * trained (bit i: input i); the others must get none. */
static void check_fused_against_split_for(tg_rng *rng, tg_dtype dt, int n, const int *ndims,
                                          const int64_t *const *shapes, two_ways_fn f,
                                          int variant, double tol_out, double tol_grad,
                                          unsigned trained)
{
    tg_tensor *in[2][5];
    ck_assert_int_le(n, 5);
    for (int i = 0; i < n; i++) {
        in[0][i] = tg_randn(rng, dt, ndims[i], shapes[i]);
        in[1][i] = tg_to_dtype(in[0][i], dt); /* a copy */
        tg_set_requires_grad(in[0][i], trained >> i & 1);
        tg_set_requires_grad(in[1][i], trained >> i & 1);
    }
    tg_scope_begin();
    tg_tensor *y[2];
    for (int w = 0; w < 2; w++) {
        y[w] = f(in[w], w == 0, variant);
        ck_assert_ptr_nonnull(y[w]);
    }
    assert_same(y[0], y[1], tol_out);
    for (int w = 0; w < 2; w++)
        ck_assert_int_eq(tg_backward(tg_sum(tg_mul(y[w], y[w]), NULL, 0, false), NULL), 0);
    for (int i = 0; i < n; i++) {
        if (trained >> i & 1)
            assert_same(tg_grad(in[0][i]), tg_grad(in[1][i]), tol_grad);
        else
            ck_assert_ptr_null(tg_grad(in[0][i]));
    }
    tg_scope_end();
    for (int i = 0; i < n; i++) {
        tg_release(in[0][i]);
        tg_release(in[1][i]);
    }
}

static tg_tensor *ln_affine_two_ways(tg_tensor *const *in, bool fused, int variant)
{
    (void)variant;
    return fused ? tg_layer_norm_affine(in[0], in[1], in[2], LN_EPS, in[3], in[4])
                 : tg_affine(tg_layer_norm(in[0], 1, in[1], in[2], LN_EPS), in[3], in[4]);
}

/* tg_layer_norm_affine against tg_affine(tg_layer_norm(...)) in float32 at
 * a GPT-like shape: the same output and the same five gradients. */
START_TEST(layer_norm_affine_matches_the_two_ops_it_fuses)
{
    tg_rng *rng = tg_rng_new(7);
    const int64_t *shapes[5] = {SHAPE(3, 17, 40), SHAPE(40), SHAPE(40), SHAPE(24, 40), SHAPE(24)};
    check_fused_against_split(rng, TG_FLOAT32, 5, (const int[]){3, 1, 1, 2, 1}, shapes,
                              ln_affine_two_ways, 0, 1e-5, 1e-4);
    tg_rng_free(rng);
}
END_TEST

static tg_tensor *gelu_affine_two_ways(tg_tensor *const *in, bool fused, int variant)
{
    tg_gelu_kind gk = variant ? TG_GELU_TANH : TG_GELU_ERF;
    return fused ? tg_gelu_affine(in[0], gk, in[1], in[2])
                 : tg_affine(tg_gelu(in[0], gk), in[1], in[2]);
}

/* tg_gelu_affine against tg_affine(tg_gelu(...)) in float64 with h
 * [3, 700, 256]: 2100 rows, more than one of backward's blocks of rows
 * (at most about 4 MiB each) holds, so two blocks of 1050. Same output and
 * gradients, both GELUs. */
START_TEST(gelu_affine_matches_the_two_ops_it_fuses_over_several_blocks)
{
    tg_rng *rng = tg_rng_new(9);
    const int64_t *shapes[3] = {SHAPE(3, 700, 256), SHAPE(8, 256), SHAPE(8)};
    for (int kind = 0; kind < 2; kind++)
        check_fused_against_split(rng, TG_FLOAT64, 3, (const int[]){3, 2, 1}, shapes,
                                  gelu_affine_two_ways, kind, 1e-12, 1e-10);
    tg_rng_free(rng);
}
END_TEST

/* In float32 (the vectorised GELU-with-gradient pass for the tanh form),
 * and with only h or only the weights trained (backward's other two
 * branches), for both GELUs: the same as tg_affine(tg_gelu(...)). With all
 * three trained, float32 goes all rows at once: the small shape has the
 * weight and bias gradients made apart, the large one [600 rows, 80 out,
 * 96 in] from the packed kernel's one pass. */
START_TEST(gelu_affine_matches_the_two_ops_in_float32_and_with_part_trained)
{
    tg_rng *rng = tg_rng_new(11);
    const int64_t *small[3] = {SHAPE(2, 37, 48), SHAPE(20, 48), SHAPE(20)};
    const int64_t *large[3] = {SHAPE(2, 300, 96), SHAPE(80, 96), SHAPE(80)};
    const int64_t *const *shapes[2] = {small, large};
    const unsigned trained[3] = {7u, 1u, 6u}; /* all; h alone; weight and bias */
    for (int size = 0; size < 2; size++)
        for (int kind = 0; kind < 2; kind++)
            for (int t = 0; t < 3; t++)
                check_fused_against_split_for(rng, TG_FLOAT32, 3, (const int[]){3, 2, 1},
                                              shapes[size], gelu_affine_two_ways, kind, 1e-5,
                                              1e-4, trained[t]);
    tg_rng_free(rng);
}
END_TEST

/* The node records NULL weight and bias entries; backward must skip them. */
START_TEST(layer_norm_without_affine_params_backpropagates)
{
    tg_tensor *x = tg_from_data(TG_FLOAT64, 2, SHAPE(2, 4), ln_x);
    tg_set_requires_grad(x, true);
    tg_scope_begin();
    /* the sum of a normalised row is 0 whatever x: its gradient is 0 */
    ck_assert_int_eq(tg_backward(tg_sum(tg_layer_norm(x, 1, NULL, NULL, LN_EPS), NULL, 0,
                                        false), NULL), 0);
    ck_assert_values(tg_grad(x), 1e-10, 0, 0, 0, 0, 0, 0, 0, 0);
    tg_scope_end();
    tg_release(x);
}
END_TEST

START_TEST(layer_norm_gives_bias_gradient_when_only_bias_requires_grad)
{
    tg_tensor *x = tg_from_data(TG_FLOAT64, 2, SHAPE(2, 4), ln_x);
    tg_tensor *b = tg_from_data(TG_FLOAT64, 1, SHAPE(4), ln_b);
    tg_set_requires_grad(b, true);
    tg_scope_begin();
    ck_assert_int_eq(tg_backward(tg_sum(tg_layer_norm(x, 1, NULL, b, LN_EPS), NULL, 0, false),
                                 NULL), 0);
    ck_assert_values(tg_grad(b), 1e-12, 2.0, 2.0, 2.0, 2.0);
    ck_assert_ptr_null(tg_grad(x));
    tg_scope_end();
    tg_release(x);
    tg_release(b);
}
END_TEST

/* float32 layer_norm over d = 192 (three whole 64-column chunks of the
 * weight and bias sums, the vectorised path) on 300 rows: the same
 * gradients as in float64, to float32 accuracy. */
START_TEST(layer_norm_float32_parameter_gradients_match_float64)
{
    tg_rng *rng = tg_rng_new(13);
    tg_tensor *in[2][4];
    in[1][0] = tg_randn(rng, TG_FLOAT64, 2, SHAPE(300, 192));
    in[1][1] = tg_randn(rng, TG_FLOAT64, 1, SHAPE(192));
    in[1][2] = tg_randn(rng, TG_FLOAT64, 1, SHAPE(192));
    in[1][3] = tg_randn(rng, TG_FLOAT64, 2, SHAPE(300, 192)); /* weights of the loss */
    for (int i = 0; i < 4; i++)
        in[0][i] = tg_to_dtype(in[1][i], TG_FLOAT32);
    tg_scope_begin();
    for (int w = 0; w < 2; w++) {
        tg_set_requires_grad(in[w][1], true);
        tg_set_requires_grad(in[w][2], true);
        tg_tensor *y = tg_layer_norm(in[w][0], 1, in[w][1], in[w][2], LN_EPS);
        ck_assert_int_eq(tg_backward(tg_sum(tg_mul(y, in[w][3]), NULL, 0, false), NULL), 0);
    }
    assert_same(tg_grad(in[0][1]), tg_grad(in[1][1]), 1e-4);
    assert_same(tg_grad(in[0][2]), tg_grad(in[1][2]), 1e-4);
    tg_scope_end();
    for (int w = 0; w < 2; w++)
        for (int i = 0; i < 4; i++)
            tg_release(in[w][i]);
    tg_rng_free(rng);
}
END_TEST

START_TEST(layer_norm_rejects_bad_arguments)
{
    tg_scope_begin();
    tg_tensor *x = tg_zeros(TG_FLOAT64, 2, SHAPE(2, 3));
    tg_tensor *w3 = tg_ones(TG_FLOAT64, 1, SHAPE(3));
    ck_assert_ptr_null(tg_layer_norm(NULL, 1, NULL, NULL, LN_EPS));
    ck_assert_error(TG_ERR_NULL, "tg_layer_norm");
    ck_assert_ptr_null(tg_layer_norm(x, 0, NULL, NULL, LN_EPS));
    ck_assert_error(TG_ERR_DIM, "tg_layer_norm", "norm_ndim 0", "[2,3]");
    ck_assert_ptr_null(tg_layer_norm(x, 3, NULL, NULL, LN_EPS));
    ck_assert_error(TG_ERR_DIM, "tg_layer_norm", "norm_ndim 3");
    ck_assert_ptr_null(tg_layer_norm(x, 1, NULL, NULL, 0.0));
    ck_assert_error(TG_ERR_VALUE, "tg_layer_norm", "eps");
    ck_assert_ptr_null(tg_layer_norm(x, 1, NULL, NULL, -1e-5));
    ck_assert_error(TG_ERR_VALUE, "tg_layer_norm", "eps");
    ck_assert_ptr_null(tg_layer_norm(x, 1, NULL, NULL, NAN));
    ck_assert_error(TG_ERR_VALUE, "tg_layer_norm", "eps");
    ck_assert_ptr_null(tg_layer_norm(x, 1, NULL, NULL, INFINITY));
    ck_assert_error(TG_ERR_VALUE, "tg_layer_norm", "eps");
    /* weight [3] but normalising [2,3] */
    ck_assert_ptr_null(tg_layer_norm(x, 2, w3, NULL, LN_EPS));
    ck_assert_error(TG_ERR_SHAPE, "tg_layer_norm", "weight", "[3]", "[2,3]");
    tg_tensor *b2 = tg_ones(TG_FLOAT64, 1, SHAPE(2));
    ck_assert_ptr_null(tg_layer_norm(x, 1, w3, b2, LN_EPS));
    ck_assert_error(TG_ERR_SHAPE, "tg_layer_norm", "bias", "[2]", "[3]");
    tg_tensor *w32 = tg_ones(TG_FLOAT32, 1, SHAPE(3));
    ck_assert_ptr_null(tg_layer_norm(x, 1, w32, NULL, LN_EPS));
    ck_assert_error(TG_ERR_DTYPE, "tg_layer_norm", "weight", "float32", "float64");
    tg_tensor *xi = tg_zeros(TG_INT64, 2, SHAPE(2, 3));
    ck_assert_ptr_null(tg_layer_norm(xi, 1, NULL, NULL, LN_EPS));
    ck_assert_error(TG_ERR_DTYPE, "tg_layer_norm", "int64");
    tg_scope_end();
}
END_TEST

/* ---- embedding ------------------------------------------------------------------ */

START_TEST(embedding_picks_rows_for_indices_of_any_shape)
{
    tg_scope_begin();
    tg_tensor *w = T64(SHAPE(4, 2), 2, 0.0, 1.0, 10.0, 11.0, 20.0, 21.0, 30.0, 31.0);
    tg_tensor *y1 = tg_embedding(w, I64(1, SHAPE(3), (int64_t[]){3, 0, 3}));
    ck_assert_shape(y1, 3, 2);
    ck_assert_values(y1, 0, 30.0, 31.0, 0.0, 1.0, 30.0, 31.0);
    tg_tensor *y2 = tg_embedding(w, I64(2, SHAPE(2, 2), (int64_t[]){1, 2, 2, 0}));
    ck_assert_shape(y2, 2, 2, 2);
    ck_assert_values(y2, 0, 10.0, 11.0, 20.0, 21.0, 20.0, 21.0, 0.0, 1.0);
    tg_tensor *y0 = tg_embedding(w, I64(0, SHAPE(1), (int64_t[]){2}));
    ck_assert_shape(y0, 2);
    ck_assert_values(y0, 0, 20.0, 21.0);
    /* a float32 table read through its transpose */
    tg_tensor *wt = tg_transpose(T32(SHAPE(2, 3), 2, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f), 0, 1);
    tg_tensor *y3 = tg_embedding(wt, I64(1, SHAPE(2), (int64_t[]){2, 1}));
    ck_assert_int_eq(tg_dtype_of(y3), TG_FLOAT32);
    ck_assert_values(y3, 0, 3.0, 6.0, 2.0, 5.0);
    tg_scope_end();
}
END_TEST

/* Enough rows (1000 of 16) for the gather to be shared out to the threads:
 * each row of the output is its index's row of the table. */
START_TEST(embedding_picks_every_row_of_a_long_index_list)
{
    enum { N = 1000, V = 37, D = 16 };
    static float table[V * D];
    static int64_t idx[N];
    for (int i = 0; i < V * D; i++)
        table[i] = (float)i;
    for (int i = 0; i < N; i++)
        idx[i] = (i * 17) % V;
    tg_scope_begin();
    tg_tensor *y = tg_embedding(tg_from_data(TG_FLOAT32, 2, SHAPE(V, D), table),
                                I64(1, SHAPE(N), idx));
    ck_assert_shape(y, N, D);
    const float *out = tg_data(y);
    int bad = 0;
    for (int i = 0; i < N; i++)
        bad += memcmp(out + i * D, table + idx[i] * D, D * sizeof(float)) != 0;
    ck_assert_int_eq(bad, 0);
    tg_scope_end();
}
END_TEST

START_TEST(embedding_gradient_adds_up_repeated_indices)
{
    tg_tensor *w = tg_zeros(TG_FLOAT64, 2, SHAPE(3, 2));
    tg_set_requires_grad(w, true);
    tg_scope_begin();
    tg_tensor *idx = I64(2, SHAPE(2, 2), (int64_t[]){2, 0, 2, 2});
    tg_tensor *y = tg_embedding(w, idx);
    tg_tensor *g = T64(SHAPE(2, 2, 2), 3, 1.0, 2.0, 10.0, 20.0, 100.0, 200.0, 1000.0, 2000.0);
    ck_assert_int_eq(tg_backward(y, g), 0);
    /* row 0 once (10, 20), row 1 never, row 2 three times */
    ck_assert_values(tg_grad(w), 0, 10.0, 20.0, 0.0, 0.0, 1101.0, 2202.0);
    tg_scope_end();
    tg_release(w);
}
END_TEST

/* Backward scatters by the indices seen in the forward, even when the
 * caller overwrites them in between (here with an out-of-range value). */
START_TEST(embedding_backward_uses_the_indices_of_the_forward)
{
    tg_tensor *w = tg_zeros(TG_FLOAT64, 2, SHAPE(3, 1));
    tg_set_requires_grad(w, true);
    tg_scope_begin();
    tg_tensor *idx = I64(1, SHAPE(2), (int64_t[]){1, 1});
    tg_tensor *y = tg_embedding(w, idx);
    ((int64_t *)tg_data(idx))[0] = 1000;
    ck_assert_int_eq(tg_backward(y, T64(SHAPE(2, 1), 2, 1.0, 2.0)), 0);
    ck_assert_values(tg_grad(w), 0, 0.0, 3.0, 0.0);
    tg_scope_end();
    tg_release(w);
}
END_TEST

START_TEST(embedding_rejects_bad_arguments)
{
    tg_scope_begin();
    tg_tensor *w = tg_zeros(TG_FLOAT64, 2, SHAPE(4, 2));
    ck_assert_ptr_null(tg_embedding(w, I64(1, SHAPE(2), (int64_t[]){1, 4})));
    ck_assert_error(TG_ERR_INDEX, "tg_embedding", "index 4", "num 4");
    ck_assert_ptr_null(tg_embedding(w, I64(1, SHAPE(2), (int64_t[]){-1, 0})));
    ck_assert_error(TG_ERR_INDEX, "tg_embedding", "index -1", "num 4");
    ck_assert_ptr_null(tg_embedding(w, tg_zeros(TG_FLOAT64, 1, SHAPE(2))));
    ck_assert_error(TG_ERR_DTYPE, "tg_embedding", "int64", "float64");
    tg_tensor *idx = I64(1, SHAPE(1), (int64_t[]){0});
    ck_assert_ptr_null(tg_embedding(tg_zeros(TG_FLOAT64, 1, SHAPE(4)), idx));
    ck_assert_error(TG_ERR_SHAPE, "tg_embedding", "2-D", "[4]");
    ck_assert_ptr_null(tg_embedding(tg_zeros(TG_FLOAT64, 3, SHAPE(4, 2, 2)), idx));
    ck_assert_error(TG_ERR_SHAPE, "tg_embedding", "[4,2,2]");
    ck_assert_ptr_null(tg_embedding(tg_zeros(TG_INT64, 2, SHAPE(4, 2)), idx));
    ck_assert_error(TG_ERR_DTYPE, "tg_embedding");
    ck_assert_ptr_null(tg_embedding(NULL, idx));
    ck_assert_error(TG_ERR_NULL, "tg_embedding", "weight");
    ck_assert_ptr_null(tg_embedding(w, NULL));
    ck_assert_error(TG_ERR_NULL, "tg_embedding", "indices");
    tg_scope_end();
}
END_TEST

/* ---- cross_entropy ----------------------------------------------------------------- */

/* -log softmax(row)[t] by log-sum-exp, shifted by the row max. */
static double ref_nll(const double *row, int c, int64_t t)
{
    double m = row[0], s = 0;
    for (int i = 1; i < c; i++)
        m = row[i] > m ? row[i] : m;
    for (int i = 0; i < c; i++)
        s += exp(row[i] - m);
    return m + log(s) - row[t];
}

static const double ce_logits[6] = {1.0, 2.0, 0.5, -1.0, 0.0, 3.0};

START_TEST(cross_entropy_matches_log_sum_exp_in_both_dtypes)
{
    double want = (ref_nll(ce_logits, 3, 1) + ref_nll(ce_logits + 3, 3, 0)) / 2;
    tg_dtype dts[2] = {TG_FLOAT64, TG_FLOAT32};
    for (int k = 0; k < 2; k++) {
        tg_scope_begin();
        tg_tensor *z = tg_to_dtype(tg_from_data(TG_FLOAT64, 2, SHAPE(2, 3), ce_logits), dts[k]);
        tg_tensor *loss = tg_cross_entropy(z, I64(1, SHAPE(2), (int64_t[]){1, 0}), -100);
        ck_assert_int_eq(tg_ndim(loss), 0);
        ck_assert_int_eq(tg_dtype_of(loss), dts[k]);
        assert_values(loss, &want, 1, k == 0 ? 1e-12 : 1e-6);
        tg_scope_end();
    }
}
END_TEST

/* Enough float32 rows (1500 of 9 classes) to be shared out to the threads,
 * some targets ignored: the loss and every row's gradient match float64 on
 * the same values. */
START_TEST(cross_entropy_over_many_float32_rows_matches_float64)
{
    enum { R = 1500, C = 9 };
    static double z[R * C], gd[R * C];
    static int64_t t[R];
    static float gf[R * C];
    for (int i = 0; i < R * C; i++)
        z[i] = (double)(float)(3 * sin(0.71 * i));
    for (int r = 0; r < R; r++)
        t[r] = r % 11 == 0 ? -100 : (r * 7) % C;
    tg_dtype dts[2] = {TG_FLOAT64, TG_FLOAT32};
    double loss[2];
    for (int k = 0; k < 2; k++) {
        tg_scope_begin();
        tg_tensor *x = tg_scope_end_keep(
            tg_to_dtype(tg_from_data(TG_FLOAT64, 2, SHAPE(R, C), z), dts[k]));
        tg_set_requires_grad(x, true);
        tg_scope_begin();
        tg_tensor *l = tg_cross_entropy(x, I64(1, SHAPE(R), t), -100);
        ck_assert_int_eq(tg_backward(l, NULL), 0);
        loss[k] = tg_item(l);
        if (k == 0)
            ck_assert_int_eq(tg_copy_to(tg_grad(x), TG_FLOAT64, gd, R * C), 0);
        else
            memcpy(gf, tg_data(tg_grad(x)), sizeof gf);
        tg_scope_end();
        tg_release(x);
    }
    ck_assert_double_eq_tol(loss[1], loss[0], 1e-6 * (1 + fabs(loss[0])));
    int bad = 0;
    for (int i = 0; i < R * C; i++)
        bad += fabs(gf[i] - gd[i]) > 1e-9 + 1e-6 * fabs(gd[i]);
    ck_assert_int_eq(bad, 0);
    for (int c = 0; c < C; c++) /* ignored row 0 */
        ck_assert(gf[c] == 0);
}
END_TEST

START_TEST(cross_entropy_takes_1d_logits_with_a_0d_target)
{
    tg_scope_begin();
    tg_tensor *z = tg_from_data(TG_FLOAT64, 1, SHAPE(3), ce_logits);
    tg_tensor *loss = tg_cross_entropy(z, I64(0, SHAPE(1), (int64_t[]){2}), -100);
    double want = ref_nll(ce_logits, 3, 2);
    assert_values(loss, &want, 1, 1e-12);
    tg_scope_end();
}
END_TEST

/* Rows whose logits differ by 2e4: exp without the max shift overflows. */
START_TEST(cross_entropy_is_stable_for_huge_logits)
{
    const double big[6] = {1e4, -1e4, 0.0, -1e4, 1e4, 1e4 - 1};
    const int64_t t[2] = {1, 2};
    double want = (ref_nll(big, 3, t[0]) + ref_nll(big + 3, 3, t[1])) / 2;
    ck_assert(isfinite(want));
    tg_dtype dts[2] = {TG_FLOAT64, TG_FLOAT32};
    for (int k = 0; k < 2; k++) {
        tg_scope_begin();
        tg_tensor *z = tg_scope_end_keep(
            tg_to_dtype(tg_from_data(TG_FLOAT64, 2, SHAPE(2, 3), big), dts[k]));
        tg_set_requires_grad(z, true);
        tg_scope_begin();
        tg_tensor *loss = tg_cross_entropy(z, I64(1, SHAPE(2), t), -100);
        assert_values(loss, &want, 1, k == 0 ? 1e-12 : 1e-6);
        ck_assert_int_eq(tg_backward(loss, NULL), 0);
        double g[6];
        tg_copy_to(tg_grad(z), TG_FLOAT64, g, 6);
        for (int i = 0; i < 6; i++)
            ck_assert_msg(isfinite(g[i]), "grad %d is %g", i, g[i]);
        /* row 0: softmax is (1, 0, 0), target 1 -> (1, -1, 0) / 2 */
        ck_assert_double_eq_tol(g[0], 0.5, 1e-6);
        ck_assert_double_eq_tol(g[1], -0.5, 1e-6);
        tg_scope_end();
        tg_release(z);
    }
}
END_TEST

/* Row 1 is ignored: the loss is the mean of rows 0 and 2, row 1 gets no
 * gradient, the others (softmax - onehot) / 2. */
START_TEST(cross_entropy_leaves_ignored_targets_out_of_the_mean)
{
    const double z3[9] = {1.0, 2.0, 0.5, -1.0, 0.0, 3.0, 0.3, 0.2, 0.1};
    tg_tensor *z = tg_from_data(TG_FLOAT64, 2, SHAPE(3, 3), z3);
    tg_set_requires_grad(z, true);
    tg_scope_begin();
    tg_tensor *loss = tg_cross_entropy(z, I64(1, SHAPE(3), (int64_t[]){0, -100, 2}), -100);
    double want = (ref_nll(z3, 3, 0) + ref_nll(z3 + 6, 3, 2)) / 2;
    assert_values(loss, &want, 1, 1e-12);
    ck_assert_int_eq(tg_backward(loss, NULL), 0);
    double g[9];
    for (int r = 0; r < 3; r += 2) {
        const double *row = z3 + r * 3;
        double s = exp(row[0]) + exp(row[1]) + exp(row[2]);
        for (int c = 0; c < 3; c++)
            g[r * 3 + c] = (exp(row[c]) / s - (c == (r == 0 ? 0 : 2))) / 2;
    }
    g[3] = g[4] = g[5] = 0;
    assert_values(tg_grad(z), g, 9, 1e-12);
    tg_scope_end();
    tg_release(z);
}
END_TEST

START_TEST(cross_entropy_ignore_index_may_be_a_valid_class)
{
    tg_scope_begin();
    tg_tensor *z = tg_from_data(TG_FLOAT64, 2, SHAPE(2, 3), ce_logits);
    tg_tensor *loss = tg_cross_entropy(z, I64(1, SHAPE(2), (int64_t[]){1, 2}), 1);
    double want = ref_nll(ce_logits + 3, 3, 2);
    assert_values(loss, &want, 1, 1e-12);
    tg_scope_end();
}
END_TEST

START_TEST(cross_entropy_with_every_target_ignored_is_nan)
{
    tg_scope_begin();
    tg_tensor *z = tg_from_data(TG_FLOAT64, 2, SHAPE(2, 3), ce_logits);
    tg_tensor *loss = tg_cross_entropy(z, I64(1, SHAPE(2), (int64_t[]){-100, -100}), -100);
    ck_assert_ptr_nonnull(loss);
    ck_assert(isnan(tg_item(loss)));
    ck_assert_int_eq(tg_error_code(), TG_OK);
    tg_scope_end();
}
END_TEST

START_TEST(cross_entropy_rejects_bad_arguments)
{
    tg_scope_begin();
    tg_tensor *z = tg_zeros(TG_FLOAT64, 2, SHAPE(2, 3));
    ck_assert_ptr_null(tg_cross_entropy(z, I64(1, SHAPE(2), (int64_t[]){0, 3}), -100));
    ck_assert_error(TG_ERR_INDEX, "tg_cross_entropy", "target 3", "3 classes");
    ck_assert_ptr_null(tg_cross_entropy(z, I64(1, SHAPE(2), (int64_t[]){-1, 0}), -100));
    ck_assert_error(TG_ERR_INDEX, "tg_cross_entropy", "target -1");
    ck_assert_ptr_null(tg_cross_entropy(z, I64(1, SHAPE(3), (int64_t[]){0, 0, 0}), -100));
    ck_assert_error(TG_ERR_SHAPE, "tg_cross_entropy", "[2,3]", "[3]");
    ck_assert_ptr_null(tg_cross_entropy(z, I64(0, SHAPE(1), (int64_t[]){0}), -100));
    ck_assert_error(TG_ERR_SHAPE, "tg_cross_entropy", "[2,3]", "[]");
    tg_tensor *z1 = tg_zeros(TG_FLOAT64, 1, SHAPE(3));
    ck_assert_ptr_null(tg_cross_entropy(z1, I64(1, SHAPE(1), (int64_t[]){0}), -100));
    ck_assert_error(TG_ERR_SHAPE, "tg_cross_entropy", "[3]", "[1]");
    tg_tensor *z3 = tg_zeros(TG_FLOAT64, 3, SHAPE(2, 2, 3));
    ck_assert_ptr_null(tg_cross_entropy(z3, I64(1, SHAPE(2), (int64_t[]){0, 0}), -100));
    ck_assert_error(TG_ERR_SHAPE, "tg_cross_entropy", "[2,2,3]");
    ck_assert_ptr_null(tg_cross_entropy(z, tg_zeros(TG_FLOAT64, 1, SHAPE(2)), -100));
    ck_assert_error(TG_ERR_DTYPE, "tg_cross_entropy", "int64", "float64");
    tg_tensor *t = I64(1, SHAPE(2), (int64_t[]){0, 0});
    ck_assert_ptr_null(tg_cross_entropy(tg_zeros(TG_INT64, 2, SHAPE(2, 3)), t, -100));
    ck_assert_error(TG_ERR_DTYPE, "tg_cross_entropy");
    ck_assert_ptr_null(tg_cross_entropy(NULL, t, -100));
    ck_assert_error(TG_ERR_NULL, "tg_cross_entropy", "logits");
    ck_assert_ptr_null(tg_cross_entropy(z, NULL, -100));
    ck_assert_error(TG_ERR_NULL, "tg_cross_entropy", "targets");
    tg_scope_end();
}
END_TEST

/* ---- mse_loss ------------------------------------------------------------------------ */

START_TEST(mse_loss_is_the_mean_of_squares_with_gradients_to_both)
{
    tg_tensor *a = T64(SHAPE(2, 2), 2, 1.0, 2.0, 3.0, 4.0);
    tg_tensor *b = T64(SHAPE(2, 2), 2, 0.0, 4.0, 3.0, 1.0);
    tg_set_requires_grad(a, true);
    tg_set_requires_grad(b, true);
    tg_scope_begin();
    tg_tensor *loss = tg_mse_loss(a, b);
    ck_assert_int_eq(tg_ndim(loss), 0);
    ck_assert_values(loss, 1e-12, (1.0 + 4.0 + 0.0 + 9.0) / 4);
    ck_assert_int_eq(tg_backward(loss, NULL), 0);
    /* 2 (a - b) / 4 */
    ck_assert_values(tg_grad(a), 1e-12, 0.5, -1.0, 0.0, 1.5);
    ck_assert_values(tg_grad(b), 1e-12, -0.5, 1.0, 0.0, -1.5);
    tg_scope_end();
    tg_release(a);
    tg_release(b);
}
END_TEST

START_TEST(mse_loss_works_in_float32_on_a_transposed_target)
{
    tg_scope_begin();
    tg_tensor *a = T32(SHAPE(2, 3), 2, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f);
    tg_tensor *bt = T32(SHAPE(3, 2), 2, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f);
    /* b = bt^T = [[1,3,5],[2,4,6]]: diffs 0,-1,-2,2,1,0 */
    tg_tensor *loss = tg_mse_loss(a, tg_transpose(bt, 0, 1));
    ck_assert_int_eq(tg_dtype_of(loss), TG_FLOAT32);
    ck_assert_values(loss, 1e-6, 10.0 / 6);
    tg_scope_end();
}
END_TEST

START_TEST(mse_loss_rejects_bad_arguments)
{
    tg_scope_begin();
    tg_tensor *a = tg_zeros(TG_FLOAT64, 2, SHAPE(2, 3));
    ck_assert_ptr_null(tg_mse_loss(a, tg_zeros(TG_FLOAT64, 2, SHAPE(3, 2))));
    ck_assert_error(TG_ERR_SHAPE, "tg_mse_loss", "[2,3]", "[3,2]");
    ck_assert_ptr_null(tg_mse_loss(a, tg_zeros(TG_FLOAT64, 1, SHAPE(3))));
    ck_assert_error(TG_ERR_SHAPE, "tg_mse_loss", "[2,3]", "[3]");
    ck_assert_ptr_null(tg_mse_loss(a, tg_zeros(TG_FLOAT32, 2, SHAPE(2, 3))));
    ck_assert_error(TG_ERR_DTYPE, "tg_mse_loss", "float64", "float32");
    ck_assert_ptr_null(tg_mse_loss(a, tg_zeros(TG_INT64, 2, SHAPE(2, 3))));
    ck_assert_error(TG_ERR_DTYPE, "tg_mse_loss", "int64");
    ck_assert_ptr_null(tg_mse_loss(NULL, a));
    ck_assert_error(TG_ERR_NULL, "tg_mse_loss", "input");
    ck_assert_ptr_null(tg_mse_loss(a, NULL));
    ck_assert_error(TG_ERR_NULL, "tg_mse_loss", "target");
    tg_scope_end();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("nn_ops");
    TCase *ln = tcase_checked("layer_norm");
    tcase_add_test(ln, layer_norm_matches_hand_formula_in_both_dtypes);
    tcase_add_test(ln, layer_norm_over_two_dims_normalises_each_slab);
    tcase_add_test(ln, layer_norm_of_transposed_input_normalises_its_rows);
    tcase_add_test(ln, layer_norm_constant_row_gives_the_bias);
    tcase_add_test(ln, layer_norm_is_accurate_far_from_zero);
    tcase_add_test(ln, layer_norm_float32_is_accurate_far_from_zero);
    tcase_add_test(ln, layer_norm_gradients_match_the_closed_form);
    tcase_add_test(ln, layer_norm_without_affine_params_backpropagates);
    tcase_add_test(ln, layer_norm_gives_bias_gradient_when_only_bias_requires_grad);
    tcase_add_test(ln, layer_norm_float32_parameter_gradients_match_float64);
    tcase_add_test(ln, layer_norm_rejects_bad_arguments);
    tcase_add_test(ln, layer_norm_affine_matches_the_two_ops_it_fuses);
    tcase_add_test(ln, gelu_affine_matches_the_two_ops_it_fuses_over_several_blocks);
    tcase_add_test(ln, gelu_affine_matches_the_two_ops_in_float32_and_with_part_trained);
    suite_add_tcase(s, ln);
    TCase *emb = tcase_checked("embedding");
    tcase_add_test(emb, embedding_picks_rows_for_indices_of_any_shape);
    tcase_add_test(emb, embedding_picks_every_row_of_a_long_index_list);
    tcase_add_test(emb, embedding_gradient_adds_up_repeated_indices);
    tcase_add_test(emb, embedding_backward_uses_the_indices_of_the_forward);
    tcase_add_test(emb, embedding_rejects_bad_arguments);
    suite_add_tcase(s, emb);
    TCase *ce = tcase_checked("cross_entropy");
    tcase_add_test(ce, cross_entropy_matches_log_sum_exp_in_both_dtypes);
    tcase_add_test(ce, cross_entropy_takes_1d_logits_with_a_0d_target);
    tcase_add_test(ce, cross_entropy_over_many_float32_rows_matches_float64);
    tcase_add_test(ce, cross_entropy_is_stable_for_huge_logits);
    tcase_add_test(ce, cross_entropy_leaves_ignored_targets_out_of_the_mean);
    tcase_add_test(ce, cross_entropy_ignore_index_may_be_a_valid_class);
    tcase_add_test(ce, cross_entropy_with_every_target_ignored_is_nan);
    tcase_add_test(ce, cross_entropy_rejects_bad_arguments);
    suite_add_tcase(s, ce);
    TCase *mse = tcase_checked("mse_loss");
    tcase_add_test(mse, mse_loss_is_the_mean_of_squares_with_gradients_to_both);
    tcase_add_test(mse, mse_loss_works_in_float32_on_a_transposed_target);
    tcase_add_test(mse, mse_loss_rejects_bad_arguments);
    suite_add_tcase(s, mse);
    return run_suite(s);
}
