/* float32 exp, sigmoid and GELU (and GELU's derivative) use vectorised
 * approximations of their own, not libm. Swept over their whole range and
 * checked against the float64 formulas, element by element. */
#include "testutil.h"

#include <float.h>

#define N_SWEEP 400001

/* x from -100 to 100, the specials last: zero, both infinities and NaN. */
static float *sweep(int64_t *n)
{
    float *x = malloc(sizeof(float) * (N_SWEEP + 4));
    ck_assert_ptr_nonnull(x);
    for (int64_t i = 0; i < N_SWEEP; i++)
        x[i] = (float)(-100.0 + 200.0 * (double)i / (N_SWEEP - 1));
    x[N_SWEEP] = 0.0f;
    x[N_SWEEP + 1] = INFINITY;
    x[N_SWEEP + 2] = -INFINITY;
    x[N_SWEEP + 3] = NAN;
    *n = N_SWEEP + 4;
    return x;
}

/* The values of t as doubles (t is released). */
static double *take_values(tg_tensor *t, int64_t n)
{
    ck_assert_ptr_nonnull(t);
    double *v = malloc(sizeof(double) * (size_t)n);
    ck_assert_int_eq(tg_copy_to(t, TG_FLOAT64, v, n), 0);
    tg_release(t);
    return v;
}

static void check_close(const char *what, float x, double got, double want, double tol)
{
    if (isnan(want)) {
        ck_assert_msg(isnan(got), "%s(%.9g) = %.9g, expected NaN", what, x, got);
        return;
    }
    if (isinf(want)) {
        ck_assert_msg(got == want, "%s(%.9g) = %.9g, expected %g", what, x, got, want);
        return;
    }
    ck_assert_msg(fabs(got - want) <= tol, "%s(%.9g) = %.9g, expected %.9g (error %.3g > %.3g)",
                  what, x, got, want, fabs(got - want), tol);
}

START_TEST(exp_is_within_two_ulp_where_the_result_is_normal)
{
    int64_t n;
    float *x = sweep(&n);
    tg_tensor *in = tg_from_data(TG_FLOAT32, 1, (int64_t[]){n}, x);
    double *got = take_values(tg_exp(in), n);
    for (int64_t i = 0; i < n; i++) {
        double want = exp((double)x[i]);
        if (want < FLT_MIN)
            check_close("exp", x[i], got[i], want, FLT_MIN); /* 0 or subnormal */
        else if (want > 2.2e38)
            ck_assert_msg(got[i] >= 0.99 * want, "exp(%.9g) = %g", x[i], got[i]);
        else
            check_close("exp", x[i], got[i], want, 2 * FLT_EPSILON * want);
    }
    tg_release(in);
    free(got);
    free(x);
}
END_TEST

START_TEST(sigmoid_is_within_three_ulp)
{
    int64_t n;
    float *x = sweep(&n);
    tg_tensor *in = tg_from_data(TG_FLOAT32, 1, (int64_t[]){n}, x);
    double *got = take_values(tg_sigmoid(in), n);
    for (int64_t i = 0; i < n; i++) {
        double want = 1.0 / (1.0 + exp(-(double)x[i]));
        double tol = want < FLT_MIN ? FLT_MIN : 3 * FLT_EPSILON * want;
        check_close("sigmoid", x[i], got[i], want, tol);
    }
    tg_release(in);
    free(got);
    free(x);
}
END_TEST

static double gelu_tanh64(double x)
{
    return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

static double gelu_tanh_grad64(double x)
{
    double t = tanh(0.7978845608028654 * (x + 0.044715 * x * x * x));
    double du = 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x);
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du;
}

/* Relative to the size of x: GELU(x) is x times a factor in [0, 1], and
 * float's own rounding of x is already that large. */
START_TEST(gelu_tanh_and_its_derivative_match_the_float64_formula)
{
    int64_t n;
    float *x = sweep(&n);
    n -= 3; /* finite inputs only: GELU's derivative at infinity is NaN in float64 too */
    tg_tensor *in = tg_from_data(TG_FLOAT32, 1, (int64_t[]){n}, x);
    tg_set_requires_grad(in, true);
    tg_tensor *y = tg_gelu(in, TG_GELU_TANH);
    tg_tensor *s = tg_sum(y, NULL, 0, false);
    ck_assert_int_eq(tg_backward(s, NULL), 0);
    double *got = take_values(y, n), *grad = take_values(tg_grad(in), n);
    for (int64_t i = 0; i < n; i++) {
        double ax = fabs((double)x[i]);
        check_close("gelu", x[i], got[i], gelu_tanh64(x[i]), 2e-7 * (ax > 1 ? ax : 1));
        check_close("gelu'", x[i], grad[i], gelu_tanh_grad64(x[i]), 1e-6 * (ax > 1 ? ax : 1));
    }
    tg_release(s);
    tg_release(in);
    free(got);
    free(grad);
    free(x);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("float_math");
    TCase *tc = tcase_checked("float32");
    tcase_add_test(tc, exp_is_within_two_ulp_where_the_result_is_normal);
    tcase_add_test(tc, sigmoid_is_within_three_ulp);
    tcase_add_test(tc, gelu_tanh_and_its_derivative_match_the_float64_formula);
    /* a second or two alone; Check's default of 4 s is short beside a full
     * run under ASan or on a loaded machine */
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
