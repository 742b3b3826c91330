/* The losses: cross-entropy as one fused log-softmax + NLL over class logits,
 * and mean squared error. Both reduce to a 0-dim mean and accumulate in
 * double whatever the dtype. */
#include "fastmath.h"
#include "graph.h"

#include <stdlib.h>
#include <string.h>

/* ---- cross-entropy ----------------------------------------------------------- */

/* A row's work for TG_FOR_ROWS: an exp per class, and a log. */
#define CE_ROW_COST(g) (8 * ((g)->classes + 1))

/* Logits seen as [rows, classes] through strides (a 1-D logits is one row),
 * and targets as rows values through a stride: no copies of either. */
typedef struct {
    int64_t rows, classes;
    int64_t row_stride, class_stride, target_stride;
} ce_geometry;

static ce_geometry ce_geometry_of(const tg_tensor *logits, const tg_tensor *targets)
{
    ce_geometry g;
    bool batched = logits->ndim == 2;
    g.rows = batched ? logits->shape[0] : 1;
    g.classes = logits->shape[logits->ndim - 1];
    g.row_stride = batched ? logits->stride[0] : 0;
    g.class_stride = logits->stride[logits->ndim - 1];
    g.target_stride = batched ? targets->stride[0] : 0;
    return g;
}

static inline double logit_at(const tg_tensor *logits, const ce_geometry *g, int64_t r,
                              int64_t c)
{
    int64_t i = r * g->row_stride + c * g->class_stride;
    return logits->dtype == TG_FLOAT32 ? (double)((const float *)tg__ptr(logits))[i]
                                       : ((const double *)tg__ptr(logits))[i];
}

static inline int64_t target_at(const tg_tensor *targets, const ce_geometry *g, int64_t r)
{
    return ((const int64_t *)tg__ptr(targets))[r * g->target_stride];
}

static int ce_check(const tg_tensor *logits, const tg_tensor *targets, int64_t ignore_index)
{
    if (tg__check_float("tg_cross_entropy", logits) < 0)
        return -1;
    if (targets->dtype != TG_INT64) {
        tg__fail(TG_ERR_DTYPE, "tg_cross_entropy: targets must be int64 class indices, got %s",
                 tg_dtype_name(targets->dtype));
        return -1;
    }
    bool fits = (logits->ndim == 2 && targets->ndim == 1 &&
                 targets->shape[0] == logits->shape[0]) ||
                (logits->ndim == 1 && targets->ndim == 0);
    if (!fits) {
        tg__fail(TG_ERR_SHAPE, "tg_cross_entropy: logits %s and targets %s do not fit "
                               "(expected logits [N,C] with targets [N], or [C] with a 0-dim "
                               "target)", TG_SHAPE_STR(logits), TG_SHAPE_STR(targets));
        return -1;
    }
    ce_geometry g = ce_geometry_of(logits, targets);
    for (int64_t r = 0; r < g.rows; r++) {
        int64_t t = target_at(targets, &g, r);
        if (t != ignore_index && (t < 0 || t >= g.classes)) {
            tg__fail(TG_ERR_INDEX, "tg_cross_entropy: target %lld (row %lld) is out of range "
                                   "for %lld classes", (long long)t, (long long)r,
                     (long long)g.classes);
            return -1;
        }
    }
    return 0;
}

/* float32 rows whose classes are adjacent: the exps in float through the
 * vectorised exp (into buf), everything else in double as for other rows. */
static bool fast_rows(const tg_tensor *logits, const ce_geometry *g)
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
static double row_max(const tg_tensor *logits, const ce_geometry *g, int64_t r)
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
static void rows_logsumexp(const tg_tensor *logits, const ce_geometry *g, int64_t r0, int64_t r1,
                           float *ep, double *lse)
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
static int logsumexp_all(const tg_tensor *logits, const ce_geometry *g, double *lse)
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
                                 const ce_geometry *g, const double *lse, double scale,
                                 int64_t ignore, int64_t r0, int64_t r1, tg_tensor *d)
{
    bool fast = fast_rows(logits, g);
    if (fast) /* these rows' softmax at once; ignored rows are zeroed below */
        exp_shifted((const float *)tg__ptr(logits) + r0 * g->row_stride, r1 - r0, g->classes,
                    g->row_stride, lse + r0, (float *)tg__ptr(d) + r0 * g->classes);
    for (int64_t r = r0; r < r1; r++) {
        int64_t t = target_at(targets, g, r);
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

/* dlogits = (softmax - onehot) * g / count on kept rows, 0 on ignored rows.
 * saved[0]: each row's logsumexp [rows] float64; args[0]: count; iargs[0]:
 * ignore_index. */
static int cross_entropy_backward(tg_node *n, const tg_tensor *grad, tg_tensor **grads)
{
    const tg_tensor *logits = n->inputs[0], *targets = n->inputs[1];
    ce_geometry g = ce_geometry_of(logits, targets);
    const double *lse = tg__ptr(n->saved[0]);
    double scale = (grad->dtype == TG_FLOAT32 ? (double)*(const float *)tg__ptr(grad)
                                              : *(const double *)tg__ptr(grad)) / n->args[0];
    tg_tensor *d = tg__empty_uninit(logits->dtype, logits->ndim, logits->shape); /* all written */
    if (!d)
        return -1;
    TG_FOR_ROWS(g.rows, CE_ROW_COST(&g), r0, r1,
                softmax_minus_onehot(logits, targets, &g, lse, scale, n->iargs[0], r0, r1, d));
    grads[0] = tg__ret(d);
    return 0;
}

tg_tensor *tg_cross_entropy(const tg_tensor *logits, const tg_tensor *targets,
                            int64_t ignore_index)
{
    TG_CHECK_NULL(logits);
    TG_CHECK_NULL(targets);
    if (ce_check(logits, targets, ignore_index) < 0)
        return NULL;
    ce_geometry g = ce_geometry_of(logits, targets);
    tg_tensor *lse = tg__empty(TG_FLOAT64, 1, (int64_t[]){g.rows});
    tg_tensor *out = tg__empty(logits->dtype, 0, NULL);
    if (!lse || !out) { /* through tg__finish, which names the op in the error */
        tg_release(lse);
        tg_release(out);
        return tg__finish(NULL, TG_OP_CROSS_ENTROPY, cross_entropy_backward, 2,
                          (const tg_tensor *[]){logits, targets}, NULL);
    }
    double *lp = tg__ptr(lse);
    if (logsumexp_all(logits, &g, lp) < 0) {
        tg_release(lse);
        tg_release(out);
        return tg__finish(NULL, TG_OP_CROSS_ENTROPY, cross_entropy_backward, 2,
                          (const tg_tensor *[]){logits, targets}, NULL);
    }
    double total = 0;
    int64_t count = 0;
    for (int64_t r = 0; r < g.rows; r++) {
        int64_t t = target_at(targets, &g, r);
        if (t == ignore_index)
            continue;
        total += lp[r] - logit_at(logits, &g, r, t);
        count++;
    }
    double loss = count ? total / (double)count : NAN; /* all ignored: NaN, as PyTorch */
    if (out->dtype == TG_FLOAT32)
        *(float *)tg__ptr(out) = (float)loss;
    else
        *(double *)tg__ptr(out) = loss;
    tg_node *node;
    out = tg__finish(out, TG_OP_CROSS_ENTROPY, cross_entropy_backward, 2,
                     (const tg_tensor *[]){logits, targets}, &node);
    if (node) {
        tg__save(node, 0, lse);
        node->args[0] = (double)count;
        node->iargs[0] = ignore_index;
    }
    tg_release(lse);
    return out;
}

/* ---- mean squared error -------------------------------------------------------- */

/* sum((a - b)^2) in double over a and b of one shape, any layouts. */
static double sum_squared_diff(const tg_tensor *a, const tg_tensor *b)
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

/* d/dinput = 2 (input - target) g / n, d/dtarget = its negation. */
static int mse_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    const tg_tensor *a = n->inputs[0], *b = n->inputs[1];
    double count = (double)tg__numel(a->ndim, a->shape);
    tg_tensor *da = tg_mul_scalar(tg_mul(tg_sub(a, b), g), 2.0 / count);
    grads[0] = n->needs[0] ? da : NULL;
    grads[1] = n->needs[1] ? tg_neg(da) : NULL;
    return da ? 0 : -1;
}

tg_tensor *tg_mse_loss(const tg_tensor *input, const tg_tensor *target)
{
    TG_CHECK_NULL(input);
    TG_CHECK_NULL(target);
    if (tg__check_float(__func__, input) < 0 || tg__check_float(__func__, target) < 0)
        return NULL;
    if (input->dtype != target->dtype)
        return tg__fail(TG_ERR_DTYPE, "tg_mse_loss: dtypes differ: input %s, target %s",
                        tg_dtype_name(input->dtype), tg_dtype_name(target->dtype));
    if (input->ndim != target->ndim ||
        memcmp(input->shape, target->shape, (size_t)input->ndim * sizeof input->shape[0]))
        return tg__fail(TG_ERR_SHAPE, "tg_mse_loss: input %s and target %s differ in shape",
                        TG_SHAPE_STR(input), TG_SHAPE_STR(target));
    int64_t n = tg__numel(input->ndim, input->shape);
    double loss = n ? sum_squared_diff(input, target) / (double)n : NAN;
    tg_tensor *out = tg__empty(input->dtype, 0, NULL);
    if (!out) /* through tg__finish, which names the op in the error */
        return tg__finish(NULL, TG_OP_MSE_LOSS, mse_backward, 2,
                          (const tg_tensor *[]){input, target}, NULL);
    if (out->dtype == TG_FLOAT32)
        *(float *)tg__ptr(out) = (float)loss;
    else
        *(double *)tg__ptr(out) = loss;
    return tg__finish(out, TG_OP_MSE_LOSS, mse_backward, 2,
                      (const tg_tensor *[]){input, target}, NULL);
}
