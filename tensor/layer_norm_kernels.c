/* The arithmetic of layer normalisation over rows of d contiguous elements:
 * the forward that writes each row's mean and 1/std beside it, and the
 * backward's dx rows and column sums for the weight and bias gradients. */
#include "fastmath.h"
#include "layer_norm_kernels.h"

#include <string.h>

/* Element i of a contiguous float tensor's data, as a double. */
static inline double ld(const void *p, tg_dtype dt, int64_t i)
{
    return dt == TG_FLOAT32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}

static inline void st(void *p, tg_dtype dt, int64_t i, double v)
{
    if (dt == TG_FLOAT32)
        ((float *)p)[i] = (float)v;
    else
        ((double *)p)[i] = v;
}

/* out, mean, rstd = layer_norm(x) for row r of d elements.
 * x, out: [rows, d] contiguous, x's dtype; w, b: [d] or NULL;
 * mean, rstd: [rows] float64, kept for backward. */
static void forward_row(void *out, double *mean, double *rstd, const void *x, const void *w,
                        const void *b, int64_t r, int64_t d, double eps, tg_dtype dt)
{
    int64_t base = r * d;
    /* Welford: one pass, and no cancellation when |mean| >> std */
    double m = 0, m2 = 0;
    for (int64_t i = 0; i < d; i++) {
        double v = ld(x, dt, base + i), delta = v - m;
        m += delta / (double)(i + 1);
        m2 += delta * (v - m);
    }
    double s = 1.0 / sqrt(m2 / (double)d + eps); /* biased variance, as PyTorch */
    mean[r] = m;
    rstd[r] = s;
    for (int64_t i = 0; i < d; i++) {
        double y = (ld(x, dt, base + i) - m) * s;
        if (w)
            y *= ld(w, dt, i);
        if (b)
            y += ld(b, dt, i);
        st(out, dt, base + i, y);
    }
}

/* float32 rows: two passes (mean, then the mean square deviation), each
 * summed in double over LN_ROW_LANES lanes in a fixed order, so the loops
 * vectorise without Welford's division per element and the result does not
 * depend on the vector width. Four vectors of lanes give the adds four
 * independent chains; one waited on its own latency at every step. */
#define LN_LANES TG_DLANES
#define LN_ROW_LANES (4 * TG_DLANES)
static inline double sum_f32(const float *x, int64_t d, double shift, bool squares)
{
    double acc[LN_ROW_LANES] = {0};
    int64_t i = 0;
    for (; i + LN_ROW_LANES <= d; i += LN_ROW_LANES)
        for (int l = 0; l < LN_ROW_LANES; l++) {
            double v = (double)x[i + l] - shift;
            acc[l] += squares ? v * v : v;
        }
    double s = 0;
    for (int l = 0; l < LN_ROW_LANES; l++)
        s += acc[l];
    for (; i < d; i++) {
        double v = (double)x[i] - shift;
        s += squares ? v * v : v;
    }
    return s;
}

/* The mean as two floats, hi + lo: x - hi is exact for x near the mean
 * (within a factor of two of it), so (x - hi) - lo keeps the digits of the
 * deviation that float alone would lose when |mean| >> std. */
typedef struct {
    float hi, lo;
} split_mean;

static inline split_mean split(double m)
{
    float hi = (float)m;
    return (split_mean){hi, (float)(m - hi)};
}

/* The per-element passes over a row work in float, 16 lanes to a vector
 * where double gives 8 and a conversion each way; the row's statistics stay
 * in double. */
TG_VECTOR_CLONES
static void forward_row_f32(float *out, double *mean, double *rstd, const float *x,
                            const float *w, const float *b, int64_t d, double eps)
{
    double m = sum_f32(x, d, 0, false) / (double)d;
    double s = 1.0 / sqrt(sum_f32(x, d, m, true) / (double)d + eps);
    *mean = m;
    *rstd = s;
    split_mean sm = split(m);
    float sf = (float)s;
    for (int64_t i = 0; i < d; i++) {
        float y = ((x[i] - sm.hi) - sm.lo) * sf;
        y = w ? y * w[i] : y;
        out[i] = b ? y + b[i] : y;
    }
}

static void forward_any(void *out, double *mean, double *rstd, const void *x, const void *w,
                        const void *b, int64_t r, int64_t d, double eps, tg_dtype dt)
{
    if (dt == TG_FLOAT32)
        forward_row_f32((float *)out + r * d, mean + r, rstd + r, (const float *)x + r * d, w, b,
                        d, eps);
    else
        forward_row(out, mean, rstd, x, w, b, r, d, eps, dt);
}

void tg__layer_norm_rows(void *out, double *mean, double *rstd, const void *x, const void *w,
                         const void *b, int64_t rows, int64_t d, double eps, tg_dtype dt)
{
    if (rows > 1 && rows * d > TG_PAR_MIN) {
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < rows; r++)
            forward_any(out, mean, rstd, x, w, b, r, d, eps, dt);
    } else {
        for (int64_t r = 0; r < rows; r++)
            forward_any(out, mean, rstd, x, w, b, r, d, eps, dt);
    }
}

/* Backward, with xhat = (x - mean) * rstd and dxhat = g * w:
 *   dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
 *   dw = sum_rows g * xhat,  db = sum_rows g
 * All [rows, d] or [d] as in the forward. dx of row r: */
static void dx_row(void *dx, const void *g, const void *x, const void *w, const double *mean,
                   const double *rstd, int64_t r, int64_t d, tg_dtype dt)
{
    int64_t base = r * d;
    double m = mean[r], s = rstd[r], sum_dxhat = 0, sum_dxhat_xhat = 0;
    for (int64_t i = 0; i < d; i++) {
        double gi = ld(g, dt, base + i), xhat = (ld(x, dt, base + i) - m) * s;
        double dxhat = w ? gi * ld(w, dt, i) : gi;
        sum_dxhat += dxhat;
        sum_dxhat_xhat += dxhat * xhat;
    }
    double a = sum_dxhat / (double)d, c = sum_dxhat_xhat / (double)d;
    for (int64_t i = 0; i < d; i++) {
        double gi = ld(g, dt, base + i), xhat = (ld(x, dt, base + i) - m) * s;
        double dxhat = w ? gi * ld(w, dt, i) : gi;
        st(dx, dt, base + i, s * (dxhat - a - xhat * c));
    }
}

/* dx_row for float32, its two sums over LN_ROW_LANES lanes in double as in
 * the forward, dx itself in float. */
TG_VECTOR_CLONES
static void dx_row_f32(float *dx, const float *g, const float *x, const float *w, double m,
                       double s, int64_t d)
{
    double acc_a[LN_ROW_LANES] = {0}, acc_c[LN_ROW_LANES] = {0}, sum_a = 0, sum_c = 0;
    int64_t i = 0;
    for (; i + LN_ROW_LANES <= d; i += LN_ROW_LANES)
        for (int l = 0; l < LN_ROW_LANES; l++) {
            double xhat = ((double)x[i + l] - m) * s;
            double dxhat = w ? (double)g[i + l] * w[i + l] : (double)g[i + l];
            acc_a[l] += dxhat;
            acc_c[l] += dxhat * xhat;
        }
    for (int l = 0; l < LN_ROW_LANES; l++)
        sum_a += acc_a[l], sum_c += acc_c[l];
    for (; i < d; i++) {
        double xhat = ((double)x[i] - m) * s, dxhat = w ? (double)g[i] * w[i] : (double)g[i];
        sum_a += dxhat;
        sum_c += dxhat * xhat;
    }
    float a = (float)(sum_a / (double)d), c = (float)(sum_c / (double)d), sf = (float)s;
    split_mean sm = split(m);
    for (i = 0; i < d; i++) {
        float xhat = ((x[i] - sm.hi) - sm.lo) * sf, dxhat = w ? g[i] * w[i] : g[i];
        dx[i] = sf * (dxhat - a - xhat * c);
    }
}

static void dx_any(void *dx, const void *g, const void *x, const void *w, const double *mean,
                   const double *rstd, int64_t r, int64_t d, tg_dtype dt)
{
    if (dt == TG_FLOAT32)
        dx_row_f32((float *)dx + r * d, (const float *)g + r * d, (const float *)x + r * d, w,
                   mean[r], rstd[r], d);
    else
        dx_row(dx, g, x, w, mean, rstd, r, d, dt);
}

/* dw_acc, db_acc ([d] float64, zeroed by the caller, either NULL) over the
 * columns [i0, i1), summing rows in order: each column has one owner, so the
 * sums need no locks and come out the same on any thread count. */
static void param_cols(double *dw_acc, double *db_acc, const void *g, const void *x,
                       const double *mean, const double *rstd, int64_t rows, int64_t d,
                       int64_t i0, int64_t i1, tg_dtype dt)
{
    for (int64_t r = 0; r < rows; r++) {
        int64_t base = r * d;
        double m = mean[r], s = rstd[r];
        for (int64_t i = i0; i < i1; i++) {
            double gi = ld(g, dt, base + i);
            if (dw_acc)
                dw_acc[i] += gi * (ld(x, dt, base + i) - m) * s;
            if (db_acc)
                db_acc[i] += gi;
        }
    }
}

/* Rows ahead that the parameter sums fetch: each row of a column strip is a
 * page or so from the last, where the hardware prefetchers stop. */
#define PREFETCH_ROWS 8

/* Columns per chunk of the parameter sums: a cache line or more of each row. */
#define LN_COLS 64

/* param_cols for float32 on a chunk of exactly LN_COLS columns from i0, both
 * sums wanted: the chunk's sums stay in vector accumulators over all the
 * rows, each column's rows added in order as above, in the same arithmetic. */
TG_VECTOR_CLONES
static void param_cols_f32(double *dw_acc, double *db_acc, const float *g, const float *x,
                           const double *mean, const double *rstd, int64_t rows, int64_t d,
                           int64_t i0)
{
    enum { NV = LN_COLS / LN_LANES };
    tg__dlanes aw[NV], ab[NV];
    for (int v = 0; v < NV; v++) {
        memcpy(&aw[v], dw_acc + i0 + v * LN_LANES, sizeof aw[v]);
        memcpy(&ab[v], db_acc + i0 + v * LN_LANES, sizeof ab[v]);
    }
    for (int64_t r = 0; r < rows; r++) {
        const float *gr = g + r * d + i0, *xr = x + r * d + i0;
        if (r + PREFETCH_ROWS < rows)
            for (int c = 0; c < LN_COLS; c += 16) {
                __builtin_prefetch(gr + PREFETCH_ROWS * d + c);
                __builtin_prefetch(xr + PREFETCH_ROWS * d + c);
            }
        double m = mean[r], s = rstd[r];
        for (int v = 0; v < NV; v++) {
            tg__flanes gf, xf;
            memcpy(&gf, gr + v * LN_LANES, sizeof gf);
            memcpy(&xf, xr + v * LN_LANES, sizeof xf);
            tg__dlanes gv = __builtin_convertvector(gf, tg__dlanes);
            tg__dlanes xv = __builtin_convertvector(xf, tg__dlanes);
            aw[v] += gv * (xv - m) * s;
            ab[v] += gv;
        }
    }
    for (int v = 0; v < NV; v++) {
        memcpy(dw_acc + i0 + v * LN_LANES, &aw[v], sizeof aw[v]);
        memcpy(db_acc + i0 + v * LN_LANES, &ab[v], sizeof ab[v]);
    }
}

/* One chunk [i0, i1) of the parameter sums, by the kernel that fits it. */
static void param_chunk(double *dw_acc, double *db_acc, const void *g, const void *x,
                        const double *mean, const double *rstd, int64_t rows, int64_t d,
                        int64_t i0, int64_t i1, tg_dtype dt)
{
    if (dt == TG_FLOAT32 && dw_acc && db_acc && i1 - i0 == LN_COLS)
        param_cols_f32(dw_acc, db_acc, g, x, mean, rstd, rows, d, i0);
    else
        param_cols(dw_acc, db_acc, g, x, mean, rstd, rows, d, i0, i1, dt);
}

void tg__layer_norm_backward_rows(void *dx, double *dw_acc, double *db_acc, const void *g,
                                  const void *x, const void *w, const double *mean,
                                  const double *rstd, int64_t rows, int64_t d, tg_dtype dt)
{
    bool par = rows > 1 && rows * d > TG_PAR_MIN;
    if (dx && par) {
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < rows; r++)
            dx_any(dx, g, x, w, mean, rstd, r, d, dt);
    } else if (dx) {
        for (int64_t r = 0; r < rows; r++)
            dx_any(dx, g, x, w, mean, rstd, r, d, dt);
    }
    if (!dw_acc && !db_acc)
        return;
    int64_t chunks = (d + LN_COLS - 1) / LN_COLS;
    if (par && chunks > 1) {
#pragma omp parallel for schedule(static)
        for (int64_t c = 0; c < chunks; c++)
            param_chunk(dw_acc, db_acc, g, x, mean, rstd, rows, d, c * LN_COLS,
                        c * LN_COLS + LN_COLS < d ? c * LN_COLS + LN_COLS : d, dt);
    } else {
        for (int64_t c = 0; c < chunks; c++)
            param_chunk(dw_acc, db_acc, g, x, mean, rstd, rows, d, c * LN_COLS,
                        c * LN_COLS + LN_COLS < d ? c * LN_COLS + LN_COLS : d, dt);
    }
}
