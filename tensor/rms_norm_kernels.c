/* The arithmetic of RMS normalisation over rows of d contiguous elements:
 * the forward that keeps each row's 1/rms, and the backward's dx rows and
 * the weight gradient's column sums. Row statistics are summed in double. */
#include "fastmath.h"
#include "rms_norm_kernels.h"

#include <math.h>
#include <string.h>

/* Lanes of the float32 row sums: four vectors of double, so the adds run
 * as four independent chains, in an order that does not depend on the
 * vector width. */
#define RMS_LANES (4 * TG_DLANES)

/* sum of x[i] * y[i] over a float32 row, in double. */
static inline double dot_f32(const float *x, const float *y, int64_t d)
{
    double acc[RMS_LANES] = {0}, s = 0;
    int64_t i = 0;
    for (; i + RMS_LANES <= d; i += RMS_LANES)
        for (int l = 0; l < RMS_LANES; l++)
            acc[l] += (double)x[i + l] * y[i + l];
    for (int l = 0; l < RMS_LANES; l++)
        s += acc[l];
    for (; i < d; i++)
        s += (double)x[i] * y[i];
    return s;
}

/* One float32 row: x, out [d]; w [d] or NULL. */
TG_VECTOR_CLONES
static void rms_forward_row_f32(float *out, double *rstd, const float *x, const float *w, int64_t d,
                            double eps)
{
    double r = 1.0 / sqrt(dot_f32(x, x, d) / (double)d + eps);
    *rstd = r;
    float rf = (float)r;
    for (int64_t i = 0; i < d; i++)
        out[i] = w ? x[i] * rf * w[i] : x[i] * rf;
}

static void forward_row_f64(double *out, double *rstd, const double *x, const double *w,
                            int64_t d, double eps)
{
    double ss = 0;
    for (int64_t i = 0; i < d; i++)
        ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / (double)d + eps);
    *rstd = r;
    for (int64_t i = 0; i < d; i++)
        out[i] = w ? x[i] * r * w[i] : x[i] * r;
}

static void forward_any(void *out, double *rstd, const void *x, const void *w, int64_t r,
                        int64_t d, double eps, tg_dtype dt)
{
    if (dt == TG_FLOAT32)
        rms_forward_row_f32((float *)out + r * d, rstd + r, (const float *)x + r * d, w, d, eps);
    else
        forward_row_f64((double *)out + r * d, rstd + r, (const double *)x + r * d, w, d, eps);
}

void tg__rms_norm_rows(void *out, double *rstd, const void *x, const void *w, int64_t rows,
                       int64_t d, double eps, tg_dtype dt)
{
    if (rows > 1 && rows * d > TG_PAR_MIN) {
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < rows; r++)
            forward_any(out, rstd, x, w, r, d, eps, dt);
    } else {
        for (int64_t r = 0; r < rows; r++)
            forward_any(out, rstd, x, w, r, d, eps, dt);
    }
}

/* dx of one float32 row: c = mean(dxhat * xhat) = rstd * sum(g w x) / d,
 * summed in double; then dx = rstd * (g w - x * rstd * c) in float. */
TG_VECTOR_CLONES
static void rms_dx_row_f32(float *dx, const float *g, const float *x, const float *w, double r,
                       int64_t d)
{
    double acc[RMS_LANES] = {0}, s = 0;
    int64_t i = 0;
    for (; i + RMS_LANES <= d; i += RMS_LANES)
        for (int l = 0; l < RMS_LANES; l++)
            acc[l] += (double)g[i + l] * (w ? w[i + l] : 1.0f) * x[i + l];
    for (int l = 0; l < RMS_LANES; l++)
        s += acc[l];
    for (; i < d; i++)
        s += (double)g[i] * (w ? w[i] : 1.0f) * x[i];
    float rf = (float)r, k = (float)(r * r * s / (double)d); /* rstd * c */
    for (i = 0; i < d; i++)
        dx[i] = rf * ((w ? g[i] * w[i] : g[i]) - x[i] * k);
}

static void dx_row_f64(double *dx, const double *g, const double *x, const double *w, double r,
                       int64_t d)
{
    double s = 0;
    for (int64_t i = 0; i < d; i++)
        s += g[i] * (w ? w[i] : 1.0) * x[i];
    double k = r * r * s / (double)d;
    for (int64_t i = 0; i < d; i++)
        dx[i] = r * ((w ? g[i] * w[i] : g[i]) - x[i] * k);
}

static void dx_any(void *dx, const void *g, const void *x, const void *w, const double *rstd,
                   int64_t r, int64_t d, tg_dtype dt)
{
    if (dt == TG_FLOAT32)
        rms_dx_row_f32((float *)dx + r * d, (const float *)g + r * d, (const float *)x + r * d, w,
                   rstd[r], d);
    else
        dx_row_f64((double *)dx + r * d, (const double *)g + r * d, (const double *)x + r * d,
                   w, rstd[r], d);
}

/* Columns per chunk of the weight gradient: each chunk has one owner and
 * adds its rows in order, so the sums need no locks and come out the same
 * on any thread count. */
#define RMS_COLS 64

/* dw_acc[i0..i1) += sum over rows of g * x * rstd, float32, the chunk's
 * sums in double vectors when it is a whole chunk. */
TG_VECTOR_CLONES
static void dw_cols_f32(double *dw_acc, const float *g, const float *x, const double *rstd,
                        int64_t rows, int64_t d, int64_t i0, int64_t i1)
{
    enum { NV = RMS_COLS / TG_DLANES };
    if (i1 - i0 != RMS_COLS) {
        for (int64_t r = 0; r < rows; r++)
            for (int64_t i = i0; i < i1; i++)
                dw_acc[i] += (double)g[r * d + i] * x[r * d + i] * rstd[r];
        return;
    }
    tg__dlanes acc[NV];
    memcpy(acc, dw_acc + i0, sizeof acc);
    for (int64_t r = 0; r < rows; r++) {
        const float *gr = g + r * d + i0, *xr = x + r * d + i0;
        double s = rstd[r];
        for (int v = 0; v < NV; v++) {
            tg__flanes gf, xf;
            memcpy(&gf, gr + v * TG_DLANES, sizeof gf);
            memcpy(&xf, xr + v * TG_DLANES, sizeof xf);
            acc[v] += __builtin_convertvector(gf, tg__dlanes) *
                      __builtin_convertvector(xf, tg__dlanes) * s;
        }
    }
    memcpy(dw_acc + i0, acc, sizeof acc);
}

static void dw_cols(double *dw_acc, const void *g, const void *x, const double *rstd,
                    int64_t rows, int64_t d, int64_t i0, int64_t i1, tg_dtype dt)
{
    if (dt == TG_FLOAT32) {
        dw_cols_f32(dw_acc, g, x, rstd, rows, d, i0, i1);
        return;
    }
    const double *gd = g, *xd = x;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = i0; i < i1; i++)
            dw_acc[i] += gd[r * d + i] * xd[r * d + i] * rstd[r];
}

void tg__rms_norm_backward_rows(void *dx, double *dw_acc, const void *g, const void *x,
                                const void *w, const double *rstd, int64_t rows, int64_t d,
                                tg_dtype dt)
{
    bool par = rows > 1 && rows * d > TG_PAR_MIN;
    if (dx && par) {
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < rows; r++)
            dx_any(dx, g, x, w, rstd, r, d, dt);
    } else if (dx) {
        for (int64_t r = 0; r < rows; r++)
            dx_any(dx, g, x, w, rstd, r, d, dt);
    }
    if (!dw_acc)
        return;
    int64_t chunks = (d + RMS_COLS - 1) / RMS_COLS;
    if (par && chunks > 1) {
#pragma omp parallel for schedule(static)
        for (int64_t c = 0; c < chunks; c++)
            dw_cols(dw_acc, g, x, rstd, rows, d, c * RMS_COLS,
                    c * RMS_COLS + RMS_COLS < d ? c * RMS_COLS + RMS_COLS : d, dt);
    } else {
        for (int64_t c = 0; c < chunks; c++)
            dw_cols(dw_acc, g, x, rstd, rows, d, c * RMS_COLS,
                    c * RMS_COLS + RMS_COLS < d ? c * RMS_COLS + RMS_COLS : d, dt);
    }
}
