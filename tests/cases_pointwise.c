/* Gradient-check cases for the pointwise ops: broadcasting both ways,
 * non-contiguous operands, and every activation. */
#include "cases.h"

static int two_3x4(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 2, (int64_t[]){3, 4});
    in[1] = gc_randn(rng, 2, (int64_t[]){3, 4});
    return 2;
}

/* [2,3,1] against [4]: each operand broadcasts along the other's dims. */
static int broadcast_pair(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 3, (int64_t[]){2, 3, 1});
    in[1] = gc_randn(rng, 1, (int64_t[]){4});
    return 2;
}

/* A divisor kept away from zero. */
static int numerator_denominator(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 2, (int64_t[]){2, 3});
    in[1] = gc_uniform(rng, 1, (int64_t[]){3}, 0.5, 2.0);
    return 2;
}

static int one_3x4(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 2, (int64_t[]){3, 4});
    return 1;
}

static int positive_3x4(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_uniform(rng, 2, (int64_t[]){3, 4}, 0.5, 2.0);
    return 1;
}

/* Values away from relu's kink at 0, where the derivative is undefined. */
static int away_from_zero(tg_tensor **in, tg_rng *rng)
{
    tg_tensor *u = gc_uniform(rng, 2, (int64_t[]){3, 4}, 0.1, 2.0);
    tg_tensor *sign = gc_uniform(rng, 2, (int64_t[]){3, 4}, -1.0, 1.0);
    double *pu = tg_data(u);
    const double *ps = tg_data(sign);
    for (int i = 0; i < 12; i++)
        pu[i] = ps[i] < 0 ? -pu[i] : pu[i];
    tg_release(sign);
    in[0] = u;
    return 1;
}

static tg_tensor *f_add(tg_tensor *const *x, int n, void *c) { (void)n; (void)c; return tg_add(x[0], x[1]); }
static tg_tensor *f_sub(tg_tensor *const *x, int n, void *c) { (void)n; (void)c; return tg_sub(x[0], x[1]); }
static tg_tensor *f_mul(tg_tensor *const *x, int n, void *c) { (void)n; (void)c; return tg_mul(x[0], x[1]); }
static tg_tensor *f_div(tg_tensor *const *x, int n, void *c) { (void)n; (void)c; return tg_div(x[0], x[1]); }
/* The transposed view of a: a non-contiguous operand. */
static tg_tensor *f_mul_transposed(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    return tg_mul(tg_transpose(x[0], 0, 1), x[1]);
}
static tg_tensor *f_neg(tg_tensor *const *x, int n, void *c) { (void)n; (void)c; return tg_neg(x[0]); }
static tg_tensor *f_add_scalar(tg_tensor *const *x, int n, void *c) { (void)n; (void)c; return tg_add_scalar(x[0], 2.5); }
static tg_tensor *f_mul_scalar(tg_tensor *const *x, int n, void *c) { (void)n; (void)c; return tg_mul_scalar(x[0], -1.5); }
static tg_tensor *f_exp(tg_tensor *const *x, int n, void *c) { (void)n; (void)c; return tg_exp(x[0]); }
static tg_tensor *f_log(tg_tensor *const *x, int n, void *c) { (void)n; (void)c; return tg_log(x[0]); }
static tg_tensor *f_sqrt(tg_tensor *const *x, int n, void *c) { (void)n; (void)c; return tg_sqrt(x[0]); }
static tg_tensor *f_pow(tg_tensor *const *x, int n, void *c) { (void)n; (void)c; return tg_pow_scalar(x[0], 2.5); }
static tg_tensor *f_tanh(tg_tensor *const *x, int n, void *c) { (void)n; (void)c; return tg_tanh(x[0]); }
static tg_tensor *f_sigmoid(tg_tensor *const *x, int n, void *c) { (void)n; (void)c; return tg_sigmoid(x[0]); }
static tg_tensor *f_relu(tg_tensor *const *x, int n, void *c) { (void)n; (void)c; return tg_relu(x[0]); }
static tg_tensor *f_gelu_erf(tg_tensor *const *x, int n, void *c) { (void)n; (void)c; return tg_gelu(x[0], TG_GELU_ERF); }
static tg_tensor *f_silu(tg_tensor *const *x, int n, void *c) { (void)n; (void)c; return tg_silu(x[0]); }
static tg_tensor *f_silu_transposed(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    return tg_silu(tg_transpose(x[0], 0, 1));
}
static tg_tensor *f_gelu_tanh(tg_tensor *const *x, int n, void *c) { (void)n; (void)c; return tg_gelu(x[0], TG_GELU_TANH); }
/* Through float64 and back: exact both ways, so finite differences hold;
 * in the float32 check it converts float32 -> float64 -> float32. */
static tg_tensor *f_to_dtype(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    return tg_mul(tg_to_dtype(tg_to_dtype(x[0], TG_FLOAT64), tg_dtype_of(x[0])), x[0]);
}

static int transposed_pair(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 2, (int64_t[]){4, 3});
    in[1] = gc_randn(rng, 2, (int64_t[]){3, 4});
    return 2;
}

const gc_case cases_pointwise[] = {
    {"add", f_add, two_3x4, 0, 0},
    {"add_broadcast_both_ways", f_add, broadcast_pair, 0, 0},
    {"sub_broadcast_both_ways", f_sub, broadcast_pair, 0, 0},
    {"mul_broadcast_both_ways", f_mul, broadcast_pair, 0, 0},
    {"mul_transposed_operand", f_mul_transposed, transposed_pair, 0, 0},
    {"div_broadcast_divisor", f_div, numerator_denominator, 0, 0},
    {"neg", f_neg, one_3x4, 0, 0},
    {"add_scalar", f_add_scalar, one_3x4, 0, 0},
    {"mul_scalar", f_mul_scalar, one_3x4, 0, 0},
    {"exp", f_exp, one_3x4, 0, 0},
    {"log", f_log, positive_3x4, 0, 0},
    {"sqrt", f_sqrt, positive_3x4, 0, 0},
    {"pow_scalar", f_pow, positive_3x4, 0, 0},
    {"tanh", f_tanh, one_3x4, 0, 0},
    {"sigmoid", f_sigmoid, one_3x4, 0, 0},
    {"relu", f_relu, away_from_zero, 0, 0},
    {"gelu_erf", f_gelu_erf, one_3x4, 0, 0},
    {"gelu_tanh", f_gelu_tanh, one_3x4, 0, 0},
    {"silu", f_silu, one_3x4, 0, 0},
    {"silu_transposed_input", f_silu_transposed, one_3x4, 0, 0},
    {"to_dtype_round_trip", f_to_dtype, one_3x4, 0, 0},
};
const int n_cases_pointwise = sizeof cases_pointwise / sizeof cases_pointwise[0];
