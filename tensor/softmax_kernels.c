/* The row arithmetic of softmax and log_softmax along one dim, for any
 * layout: each slice along the dim (a "row") is normalised on its own, max
 * first so exp never overflows, and the backward from the saved output. */
#include "fastmath.h"
#include "softmax_kernels.h"

/* How x is cut into rows along dim: rows of len elements, step apart. A
 * 0-dim tensor is one row of one element. */
typedef struct {
    int dim;       /* -1 for a 0-dim tensor */
    int64_t rows;  /* product of the other dims */
    int64_t len;   /* size of dim */
} row_plan;

static row_plan plan_rows(const tg_tensor *x, int dim)
{
    row_plan p = {x->ndim ? dim : -1, 1, x->ndim ? x->shape[dim] : 1};
    for (int d = 0; d < x->ndim; d++)
        if (d != dim)
            p.rows *= x->shape[d];
    return p;
}

/* Offset (in elements, from tg__ptr(t)) of the first element of row r: r
 * counts rows in row-major order of the dims other than p->dim. */
static int64_t row_offset(const tg_tensor *t, const row_plan *p, int64_t r)
{
    int64_t off = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (d == p->dim)
            continue;
        off += (r % t->shape[d]) * t->stride[d];
        r /= t->shape[d];
    }
    return off;
}

static int64_t row_step(const tg_tensor *t, const row_plan *p)
{
    return p->dim < 0 ? 0 : t->stride[p->dim];
}

/* ---- kernels, one per dtype --------------------------------------------- */
/* Forward: y = exp(x - m) / s or x - m - log(s), with m the row max and
 * s = sum exp(x - m) accumulated in double. Backward, with y the output:
 *   softmax:     dx = y * (g - sum(g * y))
 *   log_softmax: dx = g - exp(y) * sum(g)
 * An all -inf row has m = -inf: softmax gives zeros, log_softmax -inf. Such
 * a row is the only one whose outputs are all 0 (all -inf): any other row's
 * max element gets exp(0) / s >= 1/n. Backward writes exact zeros there, so
 * even a NaN or inf upstream gradient stops at a fully masked row. */
#define DEFINE_SOFTMAX_KERNELS(T, SUFFIX)                                            \
    static void forward_##SUFFIX(const T *x, T *y, int64_t n, int64_t xs, int64_t ys, \
                                 bool log_space)                                    \
    {                                                                               \
        double m = -INFINITY;                                                       \
        for (int64_t k = 0; k < n; k++)                                             \
            if (x[k * xs] > m || isnan(x[k * xs]))                                  \
                m = x[k * xs];                                                      \
        if (m == -INFINITY) {                                                       \
            for (int64_t k = 0; k < n; k++)                                         \
                y[k * ys] = log_space ? (T)-INFINITY : (T)0;                        \
            return;                                                                 \
        }                                                                           \
        double s = 0;                                                               \
        for (int64_t k = 0; k < n; k++)                                             \
            s += exp((double)x[k * xs] - m);                                        \
        double log_s = log(s), inv_s = 1.0 / s;                                     \
        for (int64_t k = 0; k < n; k++) {                                           \
            double z = (double)x[k * xs] - m;                                       \
            y[k * ys] = (T)(log_space ? z - log_s : exp(z) * inv_s);                \
        }                                                                           \
    }                                                                               \
    static void backward_##SUFFIX(const T *y, const T *g, T *dx, int64_t n,          \
                                  int64_t ys, int64_t gs, int64_t ds, bool log_space) \
    {                                                                               \
        double acc = 0, masked = log_space ? -INFINITY : 0;                         \
        bool all_masked = true;                                                     \
        for (int64_t k = 0; k < n; k++) {                                           \
            double yk = y[k * ys], gk = g[k * gs];                                  \
            if (yk != masked)                                                       \
                all_masked = false;                                                 \
            acc += log_space ? gk : gk * yk;                                        \
        }                                                                           \
        if (all_masked) {                                                           \
            for (int64_t k = 0; k < n; k++)                                         \
                dx[k * ds] = 0;                                                     \
            return;                                                                 \
        }                                                                           \
        for (int64_t k = 0; k < n; k++) {                                           \
            double yk = y[k * ys], gk = g[k * gs];                                  \
            dx[k * ds] = (T)(log_space ? gk - exp(yk) * acc : yk * (gk - acc));      \
        }                                                                           \
    }

DEFINE_SOFTMAX_KERNELS(float, f32)
DEFINE_SOFTMAX_KERNELS(double, f64)

/* float32 softmax of a contiguous row through the vectorised exp: the shift
 * and the sum in double as above, the exps in float. */
TG_VECTOR_CLONES
static void forward_f32_contiguous(const float *x, float *y, int64_t n)
{
    double m = -INFINITY;
    for (int64_t k = 0; k < n; k++)
        if (x[k] > m || isnan(x[k]))
            m = x[k];
    if (m == -INFINITY) {
        for (int64_t k = 0; k < n; k++)
            y[k] = 0;
        return;
    }
    for (int64_t k = 0; k < n; k++)
        y[k] = tg__expf((float)((double)x[k] - m));
    double s = 0;
    for (int64_t k = 0; k < n; k++)
        s += y[k];
    float inv_s = (float)(1.0 / s);
    for (int64_t k = 0; k < n; k++)
        y[k] *= inv_s;
}

static void forward_row(const tg_tensor *x, tg_tensor *out, const row_plan *p, int64_t xs,
                        int64_t os, bool log_space, int64_t r)
{
    int64_t xo = row_offset(x, p, r), oo = row_offset(out, p, r);
    if (x->dtype == TG_FLOAT32 && !log_space && xs == 1 && os == 1)
        forward_f32_contiguous((const float *)tg__ptr(x) + xo, (float *)tg__ptr(out) + oo,
                               p->len);
    else if (x->dtype == TG_FLOAT32)
        forward_f32((const float *)tg__ptr(x) + xo, (float *)tg__ptr(out) + oo, p->len, xs, os,
                    log_space);
    else
        forward_f64((const double *)tg__ptr(x) + xo, (double *)tg__ptr(out) + oo, p->len, xs,
                    os, log_space);
}

/* out (contiguous, x's shape) = softmax or log_softmax of x along p's dim.
 * A C branch, not an if() clause, keeps small ones out of OpenMP entirely. */
static void forward_rows(const tg_tensor *x, tg_tensor *out, const row_plan *p, bool log_space)
{
    int64_t xs = row_step(x, p), os = row_step(out, p);
    if (p->rows > 1 && p->rows * p->len > TG_PAR_MIN) {
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < p->rows; r++)
            forward_row(x, out, p, xs, os, log_space, r);
    } else {
        for (int64_t r = 0; r < p->rows; r++)
            forward_row(x, out, p, xs, os, log_space, r);
    }
}

static void backward_row(const tg_tensor *y, const tg_tensor *g, tg_tensor *dx,
                         const row_plan *p, const int64_t *steps, bool log_space, int64_t r)
{
    int64_t yo = row_offset(y, p, r), go = row_offset(g, p, r), dof = row_offset(dx, p, r);
    if (y->dtype == TG_FLOAT32)
        backward_f32((const float *)tg__ptr(y) + yo, (const float *)tg__ptr(g) + go,
                     (float *)tg__ptr(dx) + dof, p->len, steps[0], steps[1], steps[2],
                     log_space);
    else
        backward_f64((const double *)tg__ptr(y) + yo, (const double *)tg__ptr(g) + go,
                     (double *)tg__ptr(dx) + dof, p->len, steps[0], steps[1], steps[2],
                     log_space);
}

/* dx (contiguous) from the saved output y and the upstream g (any layout,
 * possibly expanded with stride 0: it is only read). */
static void backward_rows(const tg_tensor *y, const tg_tensor *g, tg_tensor *dx,
                          const row_plan *p, bool log_space)
{
    const int64_t steps[3] = {row_step(y, p), row_step(g, p), row_step(dx, p)};
    if (p->rows > 1 && p->rows * p->len > TG_PAR_MIN) {
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < p->rows; r++)
            backward_row(y, g, dx, p, steps, log_space, r);
    } else {
        for (int64_t r = 0; r < p->rows; r++)
            backward_row(y, g, dx, p, steps, log_space, r);
    }
}

void tg__softmax_rows(const tg_tensor *x, tg_tensor *out, int dim, bool log_space)
{
    row_plan p = plan_rows(x, dim);
    forward_rows(x, out, &p, log_space);
}

void tg__softmax_backward_rows(const tg_tensor *y, const tg_tensor *g, tg_tensor *dx, int dim,
                               bool log_space)
{
    row_plan p = plan_rows(y, dim);
    backward_rows(y, g, dx, &p, log_space);
}
