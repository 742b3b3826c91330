/* Tests of the Llama block's pointwise and norm ops: silu, swiglu and
 * rms_norm against values PyTorch computed, the fused affine forms against
 * the composition they stand for, the RMSNorm module, and bad input. */
#include <tensorgrad/nn.h>
#include <tensorgrad/tensorgrad.h>

#include "testutil.h"

#include <math.h>

/* ---- values ------------------------------------------------------------------ */

/* The references below were printed by torch 1.13 in float64
 * (torch.nn.functional.silu, and x * rsqrt(mean(x^2) + eps) * w). */

START_TEST(silu_matches_torch_and_stays_finite_at_extremes)
{
    for (int f32 = 0; f32 < 2; f32++) {
        tg_tensor *x = make(f32 ? TG_FLOAT32 : TG_FLOAT64, 1, SHAPE(7),
                            (const double[]){-1e4, -20, -1, 0, 0.5, 3, 1e4});
        tg_set_requires_grad(x, true);
        tg_tensor *y = tg_silu(x), *loss = tg_sum(y, NULL, 0, false);
        ck_assert_int_eq(tg_backward(loss, NULL), 0);
        double tol = f32 ? 2e-6 : 1e-14;
        ck_assert_values(y, tol, -0.0, -4.1223072363804073e-08, -0.2689414213699951, 0,
                         0.3112296656009273, 2.8577223804672998, 10000);
        tg_tensor *g = tg_grad(x);
        ck_assert_values(g, tol, -0.0, -3.9161918660646786e-08, 0.072329488128513253, 0.5,
                         0.73996118730265192, 1.0881041060151693, 1);
        tg_release(g), tg_release(loss), tg_release(y), tg_release(x);
    }
}
END_TEST

START_TEST(swiglu_matches_torch_values_and_grads)
{
    tg_tensor *gate = T64(SHAPE(5), 1, -3., -0.5, 0., 1.5, 4.);
    tg_tensor *up = T64(SHAPE(5), 1, 2., -1., 5., 0.5, -2.);
    tg_set_requires_grad(gate, true);
    tg_set_requires_grad(up, true);
    tg_tensor *a = tg_swiglu(gate, up), *gy = T64(SHAPE(5), 1, 1., 2., -1., 0.5, 3.);
    ck_assert_int_eq(tg_backward(a, gy), 0);
    ck_assert_values(a, 1e-14, -0.2845552390654007, 0.1887703343990727, 0, 0.61318085714523274,
                     -7.8561103203032676);
    tg_tensor *dg = tg_grad(gate), *du = tg_grad(up);
    ck_assert_values(dg, 1e-14, -0.17620821203033923, -0.52007762539469637, -2.5,
                     0.26032353857478574, -6.3159876893464375);
    ck_assert_values(du, 1e-14, -0.14227761953270035, -0.37754066879814541, -0.0,
                     0.61318085714523274, 11.784165480454902);
    tg_release(dg), tg_release(du), tg_release(gy), tg_release(a), tg_release(up);
    tg_release(gate);
}
END_TEST

START_TEST(rms_norm_matches_torch_values_and_grads)
{
    for (int f32 = 0; f32 < 2; f32++) {
        tg_dtype dt = f32 ? TG_FLOAT32 : TG_FLOAT64;
        tg_tensor *x = make(dt, 2, SHAPE(2, 5),
                            (const double[]){1, 2, 3, 4, -5, -2, 0, 2, 1, 0.5});
        tg_tensor *w = make(dt, 1, SHAPE(5), (const double[]){1, 0.5, 2, -1, 3});
        tg_tensor *gy = make(dt, 2, SHAPE(2, 5),
                             (const double[]){0.3, -1, 2, 0.5, 1, 1, 1, -0.5, 2, 0.25});
        tg_set_requires_grad(x, true);
        tg_set_requires_grad(w, true);
        tg_tensor *y = tg_rms_norm(x, w, 1e-6);
        ck_assert_int_eq(tg_backward(y, gy), 0);
        double tol = f32 ? 3e-6 : 1e-14;
        ck_assert_values(y, tol, 0.30151133087270343, 0.30151133087270343, 1.8090679852362206,
                         -1.2060453234908137, -4.5226699630905518, -1.4704288467744673, 0,
                         2.9408576935489346, -0.73521442338723364, 1.1028216350808504);
        tg_tensor *dx = tg_grad(x), *dw = tg_grad(w);
        ck_assert_values(dx, tol, 0.12170093434793344, -0.088260595264106859, 1.2997879287491809,
                         -0.025765525091862002, 0.74829631718749812, -0.15896479739225522,
                         0.36760721169361682, 0.15896479739225522, -1.0233392363847229,
                         0.77495562273529739);
        ck_assert_values(dw, tol, -1.3799754475126562, -0.60302266174540686, 1.0738535618489871,
                         2.0734515085198741, -1.415654851440113);
        tg_release(dx), tg_release(dw), tg_release(y), tg_release(gy), tg_release(w);
        tg_release(x);
    }
}
END_TEST

/* Without a weight every row comes out with a mean square of 1 (eps aside). */
START_TEST(rms_norm_without_weight_gives_rows_of_unit_mean_square)
{
    tg_tensor *x = T64(SHAPE(2, 3), 2, 3., 4., 0., -1e3, 2e3, 2e3);
    tg_tensor *y = tg_rms_norm(x, NULL, 1e-12);
    double s = sqrt(25.0 / 3), t = sqrt(9e6 / 3);
    ck_assert_values(y, 1e-12, 3 / s, 4 / s, 0, -1e3 / t, 2e3 / t, 2e3 / t);
    tg_release(y), tg_release(x);
}
END_TEST

/* ---- the fused forms against their compositions ------------------------------- */

/* Asserts that a and b hold the same values within tol. */
static void assert_close(const tg_tensor *a, const tg_tensor *b, double tol, const char *what)
{
    ck_assert_msg(a && b, "%s: missing (%s)", what, tg_error_message());
    ck_assert_int_eq(tg_numel(a), tg_numel(b));
    double *va = values_of(a), *vb = values_of(b);
    for (int64_t i = 0; i < tg_numel(a); i++)
        ck_assert_msg(fabs(va[i] - vb[i]) <= tol * (1 + fabs(vb[i])), "%s[%lld]: %.17g vs %.17g",
                      what, (long long)i, va[i], vb[i]);
    free(va), free(vb);
}

typedef tg_tensor *(*four_fn)(tg_tensor *const *in, bool fused);

static tg_tensor *rms_affine(tg_tensor *const *in, bool fused)
{
    if (fused)
        return tg_rms_norm_affine(in[0], in[1], 1e-5, in[2], in[3]);
    return tg_affine(tg_rms_norm(in[0], in[1], 1e-5), in[2], in[3]);
}

static tg_tensor *swiglu_affine(tg_tensor *const *in, bool fused)
{
    if (fused)
        return tg_swiglu_affine(in[0], in[1], in[2], in[3]);
    return tg_affine(tg_swiglu(in[0], in[1]), in[2], in[3]);
}

/* Runs f fused and composed on the same four inputs (the second of shape
 * s1) with the same upstream gradient; compares outputs and every input's
 * gradient within tol. n_grads: how many inputs require grad. */
static void compare_fused(four_fn f, tg_dtype dt, int64_t rows, int64_t in, int64_t out,
                          const int64_t *s1, int n1, bool bias, double tol)
{
    tg_rng *rng = tg_rng_new(7);
    tg_tensor *x[4] = {tg_randn(rng, dt, 2, SHAPE(rows, in)), tg_randn(rng, dt, n1, s1),
                       tg_randn(rng, dt, 2, SHAPE(out, in)),
                       bias ? tg_randn(rng, dt, 1, SHAPE(out)) : NULL};
    tg_tensor *gy = tg_randn(rng, dt, 2, SHAPE(rows, out)), *y[2], *grads[2][4];
    for (int i = 0; i < 4; i++)
        if (x[i])
            tg_set_requires_grad(x[i], true);
    for (int k = 0; k < 2; k++) {
        tg_scope_begin();
        y[k] = tg_retain(f(x, k == 1));
        ck_assert_msg(y[k] && tg_backward(y[k], gy) == 0, "%s", tg_error_message());
        tg_scope_end();
        for (int i = 0; i < 4; i++) {
            grads[k][i] = x[i] ? tg_grad(x[i]) : NULL;
            if (x[i])
                tg_zero_grad(x[i]);
        }
    }
    assert_close(y[1], y[0], tol, "output");
    for (int i = 0; i < 4; i++)
        if (x[i])
            assert_close(grads[1][i], grads[0][i], tol, "gradient");
    for (int k = 0; k < 2; k++) {
        tg_release(y[k]);
        for (int i = 0; i < 4; i++)
            tg_release(grads[k][i]);
    }
    for (int i = 0; i < 4; i++)
        tg_release(x[i]);
    tg_release(gy);
    tg_rng_free(rng);
}

START_TEST(rms_norm_affine_equals_the_composition)
{
    compare_fused(rms_affine, TG_FLOAT64, 37, 24, 19, SHAPE(24), 1, true, 1e-13);
    compare_fused(rms_affine, TG_FLOAT64, 5, 7, 3, SHAPE(7), 1, false, 1e-13);
    /* float32 at a size the packed kernel takes (bias and weight gradients
     * from one pass over dy) */
    compare_fused(rms_affine, TG_FLOAT32, 130, 96, 80, SHAPE(96), 1, true, 1e-5);
}
END_TEST

START_TEST(swiglu_affine_equals_the_composition)
{
    compare_fused(swiglu_affine, TG_FLOAT64, 37, 24, 19, SHAPE(37, 24), 2, true, 1e-13);
    compare_fused(swiglu_affine, TG_FLOAT64, 5, 7, 3, SHAPE(5, 7), 2, false, 1e-13);
    compare_fused(swiglu_affine, TG_FLOAT32, 130, 96, 80, SHAPE(130, 96), 2, true, 1e-5);
}
END_TEST

/* ---- the module ---------------------------------------------------------------- */

START_TEST(rms_norm_module_has_a_weight_of_ones_named_weight)
{
    tg_rms_norm_module *m = tg_rms_norm_module_new(4, 1e-6, TG_FLOAT32);
    ck_assert_ptr_nonnull(m);
    tg_params ps = {0};
    ck_assert_int_eq(tg_rms_norm_module_params(m, "norm", &ps), 0);
    ck_assert_int_eq(ps.count, 1);
    ck_assert_str_eq(ps.names[0], "norm.weight");
    ck_assert_values(ps.tensors[0], 0, 1, 1, 1, 1);
    ck_assert(tg_requires_grad(ps.tensors[0]));
    tg_tensor *x = T32(SHAPE(1, 4), 2, 1.f, -1.f, 1.f, -1.f);
    tg_tensor *y = tg_rms_norm_module_forward(m, x);
    ck_assert_values(y, 1e-6, 1 / sqrt(1 + 1e-6), -1 / sqrt(1 + 1e-6), 1 / sqrt(1 + 1e-6),
                     -1 / sqrt(1 + 1e-6));
    tg_tensor *bad = T32(SHAPE(2), 1, 1.f, 2.f);
    ck_assert_ptr_null(tg_rms_norm_module_forward(m, bad));
    ck_assert_error(TG_ERR_SHAPE, "tg_rms_norm_module_forward", "[2]", "[4]");
    tg_release(bad), tg_release(y), tg_release(x);
    tg_params_clear(&ps);
    tg_rms_norm_module_free(m);
    tg_rms_norm_module_free(NULL);
    ck_assert_ptr_null(tg_rms_norm_module_new(0, 1e-6, TG_FLOAT32));
    ck_assert_error(TG_ERR_VALUE, "tg_rms_norm_module_new", "dim 0");
    ck_assert_ptr_null(tg_rms_norm_module_new(4, NAN, TG_FLOAT32));
    ck_assert_error(TG_ERR_VALUE, "tg_rms_norm_module_new", "eps nan");
    ck_assert_ptr_null(tg_rms_norm_module_new(4, 1e-6, TG_INT64));
    ck_assert_error(TG_ERR_DTYPE, "tg_rms_norm_module_new", "int64");
}
END_TEST

/* ---- bad input ----------------------------------------------------------------- */

START_TEST(rms_norm_rejects_bad_eps_weight_and_input)
{
    tg_tensor *x = tg_zeros(TG_FLOAT32, 2, SHAPE(2, 4)), *w3 = tg_ones(TG_FLOAT32, 1, SHAPE(3));
    tg_tensor *w64 = tg_ones(TG_FLOAT64, 1, SHAPE(4)), *w2d = tg_ones(TG_FLOAT32, 2, SHAPE(1, 4));
    tg_tensor *ints = tg_zeros(TG_INT64, 1, SHAPE(4)), *scalar = tg_zeros(TG_FLOAT32, 0, NULL);
    const double bad_eps[] = {0, -1e-5, NAN, INFINITY};
    for (int i = 0; i < 4; i++) {
        ck_assert_ptr_null(tg_rms_norm(x, NULL, bad_eps[i]));
        ck_assert_error(TG_ERR_VALUE, "tg_rms_norm", "eps must be positive and finite");
    }
    ck_assert_ptr_null(tg_rms_norm(x, w3, 1e-5));
    ck_assert_error(TG_ERR_SHAPE, "tg_rms_norm", "weight [3]", "[4]", "x [2,4]");
    ck_assert_ptr_null(tg_rms_norm(x, w2d, 1e-5));
    ck_assert_error(TG_ERR_SHAPE, "tg_rms_norm", "weight [1,4]");
    ck_assert_ptr_null(tg_rms_norm(x, w64, 1e-5));
    ck_assert_error(TG_ERR_DTYPE, "tg_rms_norm", "float64", "float32");
    ck_assert_ptr_null(tg_rms_norm(ints, NULL, 1e-5));
    ck_assert_error(TG_ERR_DTYPE, "tg_rms_norm");
    ck_assert_ptr_null(tg_rms_norm(scalar, NULL, 1e-5));
    ck_assert_error(TG_ERR_SHAPE, "tg_rms_norm", "no last dim");
    ck_assert_ptr_null(tg_rms_norm(NULL, NULL, 1e-5));
    ck_assert_error(TG_ERR_NULL, "tg_rms_norm", "x is NULL");
    tg_release(x), tg_release(w3), tg_release(w64), tg_release(w2d), tg_release(ints);
    tg_release(scalar);
}
END_TEST

START_TEST(rms_norm_affine_rejects_bad_eps_and_shapes)
{
    tg_tensor *x = tg_zeros(TG_FLOAT32, 2, SHAPE(2, 4)), *nw = tg_ones(TG_FLOAT32, 1, SHAPE(4));
    tg_tensor *w = tg_zeros(TG_FLOAT32, 2, SHAPE(3, 4)), *w5 = tg_zeros(TG_FLOAT32, 2, SHAPE(3, 5));
    tg_tensor *b2 = tg_zeros(TG_FLOAT32, 1, SHAPE(2));
    ck_assert_ptr_null(tg_rms_norm_affine(x, nw, NAN, w, NULL));
    ck_assert_error(TG_ERR_VALUE, "tg_rms_norm_affine", "eps", "nan");
    ck_assert_ptr_null(tg_rms_norm_affine(x, nw, 0, w, NULL));
    ck_assert_error(TG_ERR_VALUE, "tg_rms_norm_affine", "eps");
    ck_assert_ptr_null(tg_rms_norm_affine(x, nw, 1e-5, w5, NULL));
    ck_assert_error(TG_ERR_SHAPE, "tg_rms_norm_affine", "x [2,4]", "weight [3,5]");
    ck_assert_ptr_null(tg_rms_norm_affine(x, nw, 1e-5, w, b2));
    ck_assert_error(TG_ERR_SHAPE, "tg_rms_norm_affine", "bias [2]", "out 3");
    ck_assert_ptr_null(tg_rms_norm_affine(x, nw, 1e-5, NULL, NULL));
    ck_assert_error(TG_ERR_NULL, "tg_rms_norm_affine", "weight is NULL");
    tg_release(x), tg_release(nw), tg_release(w), tg_release(w5), tg_release(b2);
}
END_TEST

START_TEST(swiglu_rejects_mismatched_gate_and_up)
{
    tg_tensor *g = tg_zeros(TG_FLOAT32, 2, SHAPE(2, 4)), *u = tg_zeros(TG_FLOAT32, 2, SHAPE(2, 3));
    tg_tensor *u1 = tg_zeros(TG_FLOAT32, 2, SHAPE(1, 4)), *u64 = tg_zeros(TG_FLOAT64, 2, SHAPE(2, 4));
    tg_tensor *w = tg_zeros(TG_FLOAT32, 2, SHAPE(3, 5)), *ints = tg_zeros(TG_INT64, 1, SHAPE(4));
    ck_assert_ptr_null(tg_swiglu(g, u));
    ck_assert_error(TG_ERR_SHAPE, "tg_swiglu", "gate [2,4]", "up [2,3]");
    ck_assert_ptr_null(tg_swiglu(g, u1)); /* no broadcasting */
    ck_assert_error(TG_ERR_SHAPE, "tg_swiglu", "up [1,4]");
    ck_assert_ptr_null(tg_swiglu(g, u64));
    ck_assert_error(TG_ERR_DTYPE, "tg_swiglu", "float32", "float64");
    ck_assert_ptr_null(tg_swiglu(g, NULL));
    ck_assert_error(TG_ERR_NULL, "tg_swiglu", "up is NULL");
    ck_assert_ptr_null(tg_swiglu_affine(g, u, w, NULL));
    ck_assert_error(TG_ERR_SHAPE, "tg_swiglu_affine", "gate [2,4]", "up [2,3]");
    ck_assert_ptr_null(tg_swiglu_affine(g, g, w, NULL));
    ck_assert_error(TG_ERR_SHAPE, "tg_swiglu_affine", "x [2,4]", "weight [3,5]");
    ck_assert_ptr_null(tg_silu(ints));
    ck_assert_error(TG_ERR_DTYPE, "tg_silu");
    ck_assert_ptr_null(tg_silu(NULL));
    ck_assert_error(TG_ERR_NULL, "tg_silu");
    tg_release(g), tg_release(u), tg_release(u1), tg_release(u64), tg_release(w);
    tg_release(ints);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("rms_swiglu");
    TCase *values = tcase_checked("values");
    tcase_add_test(values, silu_matches_torch_and_stays_finite_at_extremes);
    tcase_add_test(values, swiglu_matches_torch_values_and_grads);
    tcase_add_test(values, rms_norm_matches_torch_values_and_grads);
    tcase_add_test(values, rms_norm_without_weight_gives_rows_of_unit_mean_square);
    suite_add_tcase(s, values);
    TCase *fused = tcase_checked("fused");
    tcase_add_test(fused, rms_norm_affine_equals_the_composition);
    tcase_add_test(fused, swiglu_affine_equals_the_composition);
    suite_add_tcase(s, fused);
    TCase *module = tcase_checked("module");
    tcase_add_test(module, rms_norm_module_has_a_weight_of_ones_named_weight);
    suite_add_tcase(s, module);
    TCase *bad = tcase_checked("bad_input");
    tcase_add_test(bad, rms_norm_rejects_bad_eps_weight_and_input);
    tcase_add_test(bad, rms_norm_affine_rejects_bad_eps_and_shapes);
    tcase_add_test(bad, swiglu_rejects_mismatched_gate_and_up);
    suite_add_tcase(s, bad);
    return run_suite(s);
}
