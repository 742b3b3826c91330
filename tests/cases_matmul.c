/* Gradient-check cases for tg_matmul: every 1-D / 2-D / batched pairing,
 * broadcast batch dims, and operands that are transposed, sliced or
 * expanded views (read in place or copied by the forward); tg_affine with
 * and without a bias, on 1-D, 2-D, 3-D and transposed inputs;
 * tg_gelu_affine with either GELU; tg_layer_norm_affine with and
 * without its four parameters; tg_rms_norm_affine and tg_swiglu_affine with
 * and without their optional parameters, on 3-D and transposed inputs. */
#include "cases.h"

static int two_inputs(tg_tensor **in, tg_rng *rng, int na, const int64_t *sa, int nb,
                      const int64_t *sb)
{
    in[0] = gc_randn(rng, na, sa);
    in[1] = gc_randn(rng, nb, sb);
    return 2;
}

#define PAIR(name, na, sa, nb, sb)                                              \
    static int name(tg_tensor **in, tg_rng *rng)                                \
    {                                                                           \
        return two_inputs(in, rng, na, (const int64_t[])sa, nb, (const int64_t[])sb); \
    }
#define S(...) {__VA_ARGS__}

PAIR(mat_mat, 2, S(3, 4), 2, S(4, 5))
PAIR(vec_mat, 1, S(4), 2, S(4, 5))
PAIR(mat_vec, 2, S(3, 4), 1, S(4))
PAIR(vec_vec, 1, S(4), 1, S(4))
PAIR(batch_batch, 3, S(2, 3, 4), 3, S(2, 4, 5))
/* [2,1,3,4] @ [5,4,2] -> [2,5,3,2]: each operand broadcasts along the other. */
PAIR(broadcast_batches, 4, S(2, 1, 3, 4), 3, S(5, 4, 2))
/* A batched input times a weight: dB sums over the flattened batch. */
PAIR(batch_weight, 3, S(2, 3, 4), 2, S(4, 5))
PAIR(batch_vec, 3, S(2, 3, 4), 1, S(4))
PAIR(vec_batch, 1, S(4), 3, S(2, 4, 5))
PAIR(weight_batch, 2, S(3, 4), 3, S(2, 4, 5))
/* Stored transposed: [4,3] and [5,4] read as [3,4] and [4,5]. */
PAIR(stored_transposed, 2, S(4, 3), 2, S(5, 4))
PAIR(stored_transposed_batch, 3, S(2, 4, 3), 3, S(2, 5, 4))
/* Wider than used: narrowed to [3,4] (rows 6 apart) and [4,5]. */
PAIR(wide_pair, 2, S(3, 6), 2, S(6, 5))
/* A column and a row batch, expanded to [3,4] and [2,4,5] (stride 0). */
PAIR(expandable_pair, 2, S(3, 1), 3, S(1, 4, 5))

static tg_tensor *f_matmul(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    return tg_matmul(x[0], x[1]);
}

/* Both operands as tg_transpose views, which GEMM reads without a copy. */
static tg_tensor *f_matmul_transposed(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    return tg_matmul(tg_transpose(x[0], -2, -1), tg_transpose(x[1], -2, -1));
}

/* x0[:, 1:5] @ x1[1:5, :]: strided slices. */
static tg_tensor *f_matmul_sliced(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    return tg_matmul(tg_narrow(x[0], 1, 1, 4), tg_narrow(x[1], 0, 1, 4));
}

/* Stride-0 operands: no GEMM layout, so the forward copies them. */
static tg_tensor *f_matmul_expanded(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    return tg_matmul(tg_expand(x[0], 2, (const int64_t[]){3, 4}),
                     tg_expand(x[1], 3, (const int64_t[]){2, 4, 5}));
}

/* x, weight [5, 4] and bias [5]: tg_affine's inputs. */
static int affine_inputs(tg_tensor **in, tg_rng *rng, int nx, const int64_t *sx)
{
    in[0] = gc_randn(rng, nx, sx);
    in[1] = gc_randn(rng, 2, (const int64_t[]){5, 4});
    in[2] = gc_randn(rng, 1, (const int64_t[]){5});
    return 3;
}
static int affine_vec(tg_tensor **in, tg_rng *rng) { return affine_inputs(in, rng, 1, (const int64_t[]){4}); }
static int affine_mat(tg_tensor **in, tg_rng *rng) { return affine_inputs(in, rng, 2, (const int64_t[]){3, 4}); }
static int affine_batch(tg_tensor **in, tg_rng *rng)
{
    return affine_inputs(in, rng, 3, (const int64_t[]){2, 3, 4});
}
/* x stored [4, 3], read transposed as [3, 4]. */
static int affine_stored_t(tg_tensor **in, tg_rng *rng)
{
    return affine_inputs(in, rng, 2, (const int64_t[]){4, 3});
}

static tg_tensor *f_affine(tg_tensor *const *x, int n, void *c)
{
    (void)n, (void)c;
    return tg_sum(tg_affine(x[0], x[1], x[2]), NULL, 0, false);
}

static tg_tensor *f_affine_no_bias(tg_tensor *const *x, int n, void *c)
{
    (void)n, (void)c;
    return tg_sum(tg_mul(tg_affine(x[0], x[1], NULL), tg_affine(x[0], x[1], NULL)), NULL, 0,
                  false);
}

/* One computed input read by three layers: its gradient gathers the three
 * products, the later ones added in place into the first. */
static tg_tensor *f_affine_shared_input(tg_tensor *const *x, int n, void *c)
{
    (void)n, (void)c;
    tg_tensor *h = tg_tanh(x[0]);
    tg_tensor *a = tg_affine(h, x[1], x[2]), *b = tg_affine(h, x[1], NULL);
    tg_tensor *d = tg_affine(h, x[1], x[2]);
    return tg_sum(tg_add(tg_mul(a, b), d), NULL, 0, false);
}

static tg_tensor *f_affine_transposed(tg_tensor *const *x, int n, void *c)
{
    (void)n, (void)c;
    tg_tensor *y = tg_affine(tg_transpose(x[0], 0, 1), tg_transpose(tg_transpose(x[1], 0, 1), 0, 1),
                             x[2]);
    return tg_sum(tg_mul(y, y), NULL, 0, false);
}

static tg_tensor *f_gelu_affine_tanh(tg_tensor *const *x, int n, void *c)
{
    (void)n, (void)c;
    tg_tensor *y = tg_gelu_affine(x[0], TG_GELU_TANH, x[1], x[2]);
    return tg_sum(tg_mul(y, y), NULL, 0, false);
}

static tg_tensor *f_gelu_affine_erf_no_bias(tg_tensor *const *x, int n, void *c)
{
    (void)n, (void)c;
    tg_tensor *y = tg_gelu_affine(tg_transpose(x[0], 0, 1), TG_GELU_ERF, x[1], NULL);
    return tg_sum(tg_mul(y, y), NULL, 0, false);
}

/* x, norm weight [4], norm bias [4], weight [5, 4], bias [5]. */
static int ln_affine_inputs(tg_tensor **in, tg_rng *rng, int nx, const int64_t *sx)
{
    in[0] = gc_randn(rng, nx, sx);
    in[1] = gc_randn(rng, 1, (const int64_t[]){4});
    in[2] = gc_randn(rng, 1, (const int64_t[]){4});
    in[3] = gc_randn(rng, 2, (const int64_t[]){5, 4});
    in[4] = gc_randn(rng, 1, (const int64_t[]){5});
    return 5;
}
static int ln_affine_batch(tg_tensor **in, tg_rng *rng)
{
    return ln_affine_inputs(in, rng, 3, (const int64_t[]){2, 3, 4});
}
/* x stored [4, 3], read transposed as [3, 4]. */
static int ln_affine_stored_t(tg_tensor **in, tg_rng *rng)
{
    return ln_affine_inputs(in, rng, 2, (const int64_t[]){4, 3});
}

#define LN_EPS 1e-5

static tg_tensor *f_ln_affine(tg_tensor *const *x, int n, void *c)
{
    (void)n, (void)c;
    tg_tensor *y = tg_layer_norm_affine(x[0], x[1], x[2], LN_EPS, x[3], x[4]);
    return tg_sum(tg_mul(y, y), NULL, 0, false);
}

/* Without the norm's parameters or the bias: those inputs get no gradient. */
static tg_tensor *f_ln_affine_bare(tg_tensor *const *x, int n, void *c)
{
    (void)n, (void)c;
    tg_tensor *y = tg_layer_norm_affine(tg_transpose(x[0], 0, 1), NULL, NULL, LN_EPS, x[3], NULL);
    return tg_sum(tg_mul(y, tg_tanh(y)), NULL, 0, false);
}

/* x, norm weight [4], weight [5, 4], bias [5]. */
static int rms_affine_inputs(tg_tensor **in, tg_rng *rng, int nx, const int64_t *sx)
{
    in[0] = gc_randn(rng, nx, sx);
    in[1] = gc_randn(rng, 1, (const int64_t[]){4});
    in[2] = gc_randn(rng, 2, (const int64_t[]){5, 4});
    in[3] = gc_randn(rng, 1, (const int64_t[]){5});
    return 4;
}
static int rms_affine_batch(tg_tensor **in, tg_rng *rng)
{
    return rms_affine_inputs(in, rng, 3, (const int64_t[]){2, 3, 4});
}
/* x stored [4, 3], read transposed as [3, 4]. */
static int rms_affine_stored_t(tg_tensor **in, tg_rng *rng)
{
    return rms_affine_inputs(in, rng, 2, (const int64_t[]){4, 3});
}

static tg_tensor *f_rms_affine(tg_tensor *const *x, int n, void *c)
{
    (void)n, (void)c;
    tg_tensor *y = tg_rms_norm_affine(x[0], x[1], LN_EPS, x[2], x[3]);
    return tg_sum(tg_mul(y, y), NULL, 0, false);
}

/* Without the norm's weight or the bias: those inputs get no gradient. */
static tg_tensor *f_rms_affine_bare(tg_tensor *const *x, int n, void *c)
{
    (void)n, (void)c;
    tg_tensor *y = tg_rms_norm_affine(tg_transpose(x[0], 0, 1), NULL, LN_EPS, x[2], NULL);
    return tg_sum(tg_mul(y, tg_tanh(y)), NULL, 0, false);
}

/* gate and up [..., 4], weight [5, 4], bias [5]. */
static int swiglu_affine_inputs(tg_tensor **in, tg_rng *rng, int nx, const int64_t *sx)
{
    in[0] = gc_randn(rng, nx, sx);
    in[1] = gc_randn(rng, nx, sx);
    in[2] = gc_randn(rng, 2, (const int64_t[]){5, 4});
    in[3] = gc_randn(rng, 1, (const int64_t[]){5});
    return 4;
}
static int swiglu_affine_batch(tg_tensor **in, tg_rng *rng)
{
    return swiglu_affine_inputs(in, rng, 3, (const int64_t[]){2, 3, 4});
}
/* gate and up stored [4, 3]: gate read transposed, up through a copy. */
static int swiglu_affine_stored_t(tg_tensor **in, tg_rng *rng)
{
    return swiglu_affine_inputs(in, rng, 2, (const int64_t[]){4, 3});
}

static tg_tensor *f_swiglu_affine(tg_tensor *const *x, int n, void *c)
{
    (void)n, (void)c;
    tg_tensor *y = tg_swiglu_affine(x[0], x[1], x[2], x[3]);
    return tg_sum(tg_mul(y, y), NULL, 0, false);
}

static tg_tensor *f_swiglu_affine_transposed_no_bias(tg_tensor *const *x, int n, void *c)
{
    (void)n, (void)c;
    tg_tensor *y = tg_swiglu_affine(tg_transpose(x[0], 0, 1),
                                    tg_contiguous(tg_transpose(x[1], 0, 1)), x[2], NULL);
    return tg_sum(tg_mul(y, tg_tanh(y)), NULL, 0, false);
}

const gc_case cases_matmul[] = {
    {"matmul_2d", f_matmul, mat_mat, 0, 0},
    {"matmul_vec_mat", f_matmul, vec_mat, 0, 0},
    {"matmul_mat_vec", f_matmul, mat_vec, 0, 0},
    {"matmul_dot", f_matmul, vec_vec, 0, 0},
    {"matmul_batched", f_matmul, batch_batch, 0, 0},
    {"matmul_broadcast_batches", f_matmul, broadcast_batches, 0, 0},
    {"matmul_batch_times_weight", f_matmul, batch_weight, 0, 0},
    {"matmul_batch_times_vec", f_matmul, batch_vec, 0, 0},
    {"matmul_vec_times_batch", f_matmul, vec_batch, 0, 0},
    {"matmul_weight_times_batch", f_matmul, weight_batch, 0, 0},
    {"matmul_transposed_operands", f_matmul_transposed, stored_transposed, 0, 0},
    {"matmul_transposed_batched", f_matmul_transposed, stored_transposed_batch, 0, 0},
    {"matmul_sliced_operands", f_matmul_sliced, wide_pair, 0, 0},
    {"matmul_expanded_operands", f_matmul_expanded, expandable_pair, 0, 0},
    {"affine_vec", f_affine, affine_vec, 0, 0},
    {"affine_mat", f_affine, affine_mat, 0, 0},
    {"affine_batch_no_bias", f_affine_no_bias, affine_batch, 0, 0},
    {"affine_shared_input", f_affine_shared_input, affine_batch, 0, 0},
    {"affine_transposed_input", f_affine_transposed, affine_stored_t, 0, 0},
    {"gelu_affine_tanh_batch", f_gelu_affine_tanh, affine_batch, 0, 0},
    {"gelu_affine_erf_transposed_no_bias", f_gelu_affine_erf_no_bias, affine_stored_t, 0, 0},
    {"layer_norm_affine_batch", f_ln_affine, ln_affine_batch, 0, 0},
    {"layer_norm_affine_transposed_bare", f_ln_affine_bare, ln_affine_stored_t, 0, 0},
    {"rms_norm_affine_batch", f_rms_affine, rms_affine_batch, 0, 0},
    {"rms_norm_affine_transposed_bare", f_rms_affine_bare, rms_affine_stored_t, 0, 0},
    {"swiglu_affine_batch", f_swiglu_affine, swiglu_affine_batch, 0, 0},
    {"swiglu_affine_transposed_no_bias", f_swiglu_affine_transposed_no_bias,
     swiglu_affine_stored_t, 0, 0},
};
const int n_cases_matmul = sizeof cases_matmul / sizeof cases_matmul[0];
