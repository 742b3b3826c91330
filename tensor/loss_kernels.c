/* The arithmetic of the losses: cross-entropy's rows (logsumexp with the
 * exps vectorised in float32, the summed loss, softmax minus one-hot) and
 * the squared error's sum, each accumulated in double whatever the dtype. */
#include "fastmath.h"
#include "loss_kernels.h"

#include <string.h>

/* A row's work for TG_FOR_ROWS: an exp per class, and a log. */
#define CE_ROW_COST(g) (8 * ((g)->classes + 1))

static inline double logit_at(const tg_tensor *logits, const tg__ce_geometry *g, int64_t r,
                              int64_t c)
{
    int64_t i = r * g->row_stride + c * g->class_stride;
    return logits->dtype == TG_FLOAT32 ? (double)((const float *)tg__ptr(logits))[i]
                                       : ((const double *)tg__ptr(logits))[i];
}

/* float32 rows whose classes are adjacent: the exps in float through the
 * vectorised exp (into buf), everything else in double as for other rows. */
static bool fast_rows(const tg_tensor *logits, const tg__ce_geometry *g)
{
    return logits->dtype == TG_FLOAT32 && g->class_stride == 1;
}

/* out[r, c] = exp(x[r, c] - shift[r]) over rows of n adjacent floats (x's
 * rows row_stride apart, out's n apart). The differences are taken in
 * double (logits of 1e4 lose nothing to the shift) row by row, then the
 * exps run over all rows as one flat array, so that a handful of classes
 * per row still fills the vectors. */
TG_VECTOR_CLONES
static void exp_shifted(const float *x, int64_t rows, int64_t n, int64_t row_stride,
                        const double *shift, float *out)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < n; c++)
            out[r * n + c] = (float)((double)x[r * row_stride + c] - shift[r]);
    for (int64_t i = 0; i < rows * n; i++)
        out[i] = tg__expf(out[i]);
}

/* The row's largest logit (-inf for a row of -inf; +inf when one is). A
 * NaN is passed over, as fmax does, by a comparison the compiler keeps
 * inline: fmax itself is a library call per element. */
static double row_max(const tg_tensor *logits, const tg__ce_geometry *g, int64_t r)
{
    double m = -INFINITY;
    if (fast_rows(logits, g)) {
        const float *x = (const float *)tg__ptr(logits) + r * g->row_stride;
        for (int64_t c = 0; c < g->classes; c++)
            m = x[c] > m ? x[c] : m;
        return m;
    }
    for (int64_t c = 0; c < g->classes; c++) {
        double x = logit_at(logits, g, r, c);
        m = x > m ? x : m;
    }
    return m;
}

/* lse[r] = log(sum_c exp(logits[r, c])) for rows [r0, r1), shifted by the
 * row's max so that logits of +-1e4 neither overflow nor underflow; a row
 * whose max is infinite has nothing finite to shift by and gets the max.
 * ep: scratch of rows * classes floats for the fast rows, else NULL. */
static void rows_logsumexp(const tg_tensor *logits, const tg__ce_geometry *g, int64_t r0,
                           int64_t r1, float *ep, double *lse)
{
    for (int64_t r = r0; r < r1; r++)
        lse[r] = row_max(logits, g, r);
    if (ep) {
        float *e = ep + r0 * g->classes;
        exp_shifted((const float *)tg__ptr(logits) + r0 * g->row_stride, r1 - r0, g->classes,
                    g->row_stride, lse + r0, e);
        for (int64_t r = r0; r < r1; r++) {
            double s = 0;
            for (int64_t c = 0; c < g->classes; c++)
                s += e[(r - r0) * g->classes + c];
            lse[r] = isinf(lse[r]) ? lse[r] : lse[r] + log(s);
        }
        return;
    }
    for (int64_t r = r0; r < r1; r++) {
        double m = lse[r], s = 0;
        if (isinf(m))
            continue;
        for (int64_t c = 0; c < g->classes; c++)
            s += exp(logit_at(logits, g, r, c) - m);
        lse[r] = m + log(s);
    }
}

/* Every row's logsumexp, the rows shared out to the threads: 0, or -1 when
 * out of memory. */
int tg__ce_logsumexp(const tg_tensor *logits, const tg__ce_geometry *g, double *lse)
{
    tg_tensor *e = NULL;
    if (fast_rows(logits, g) &&
        !(e = tg__empty_uninit(TG_FLOAT32, 1, (int64_t[]){g->rows * g->classes})))
        return -1;
    float *ep = e ? tg__ptr(e) : NULL;
    TG_FOR_ROWS(g->rows, CE_ROW_COST(g), r0, r1, rows_logsumexp(logits, g, r0, r1, ep, lse));
    tg_release(e);
    return 0;
}

/* Rows [r0, r1) of d (logits' shape, contiguous): (softmax -
 * onehot(target)) * scale, and 0 on rows whose target is ignore. */
static void softmax_minus_onehot(const tg_tensor *logits, const tg_tensor *targets,
                                 const tg__ce_geometry *g, const double *lse, double scale,
                                 int64_t ignore, int64_t r0, int64_t r1, tg_tensor *d)
{
    bool fast = fast_rows(logits, g);
    if (fast) /* these rows' softmax at once; ignored rows are zeroed below */
        exp_shifted((const float *)tg__ptr(logits) + r0 * g->row_stride, r1 - r0, g->classes,
                    g->row_stride, lse + r0, (float *)tg__ptr(d) + r0 * g->classes);
    for (int64_t r = r0; r < r1; r++) {
        int64_t t = tg__ce_target(targets, g, r);
        if (t == ignore) {
            memset((char *)tg__ptr(d) + (size_t)(r * g->classes) * tg_dtype_size(d->dtype), 0,
                   (size_t)g->classes * tg_dtype_size(d->dtype));
            continue;
        }
        if (fast) { /* d's row r: softmax, less 1 at t, scaled */
            float *dr = (float *)tg__ptr(d) + r * g->classes;
            for (int64_t c = 0; c < g->classes; c++)
                dr[c] = (float)(((double)dr[c] - (c == t)) * scale);
            continue;
        }
        for (int64_t c = 0; c < g->classes; c++) {
            double v = (exp(logit_at(logits, g, r, c) - lse[r]) - (c == t)) * scale;
            if (d->dtype == TG_FLOAT32)
                ((float *)tg__ptr(d))[r * g->classes + c] = (float)v;
            else
                ((double *)tg__ptr(d))[r * g->classes + c] = v;
        }
    }
}

double tg__ce_nll_total(const tg_tensor *logits, const tg_tensor *targets,
                        const tg__ce_geometry *g, const double *lse, int64_t ignore,
                        int64_t *count)
{
    double total = 0;
    *count = 0;
    for (int64_t r = 0; r < g->rows; r++) {
        int64_t t = tg__ce_target(targets, g, r);
        if (t == ignore)
            continue;
        total += lse[r] - logit_at(logits, g, r, t);
        (*count)++;
    }
    return total;
}

void tg__ce_grad(const tg_tensor *logits, const tg_tensor *targets, const tg__ce_geometry *g,
                 const double *lse, double scale, int64_t ignore, tg_tensor *d)
{
    TG_FOR_ROWS(g->rows, CE_ROW_COST(g), r0, r1,
                softmax_minus_onehot(logits, targets, g, lse, scale, ignore, r0, r1, d));
}

/* sum((a - b)^2) in double over a and b of one shape, any layouts. */
double tg__sum_squared_diff(const tg_tensor *a, const tg_tensor *b)
{
    int64_t strides[2][TG_MAX_DIMS];
    memcpy(strides[0], a->stride, sizeof strides[0]);
    memcpy(strides[1], b->stride, sizeof strides[1]);
    tg__iter it;
    tg__iter_init(&it, a->ndim, a->shape, 2, (const int64_t(*)[TG_MAX_DIMS])strides);
    double s = 0;
    if (!it.len)
        return 0;
    do {
        for (int64_t j = 0; j < it.len; j++) {
            int64_t ia = it.off[0] + j * it.inner[0], ib = it.off[1] + j * it.inner[1];
            double d = a->dtype == TG_FLOAT32
                           ? (double)((const float *)tg__ptr(a))[ia] -
                                 (double)((const float *)tg__ptr(b))[ib]
                           : ((const double *)tg__ptr(a))[ia] - ((const double *)tg__ptr(b))[ib];
            s += d * d;
        }
    } while (tg__iter_next(&it));
    return s;
}
