/* The ops that hide elements: masked_fill (attention masks, -inf before a
 * softmax) and inverted dropout. Both pass the gradient through where an
 * element is kept and stop it where it is hidden. */
#include "dropout_mask.h"
#include "fastmath.h"
#include "graph.h"
#include "kernels.h"

#include <string.h>

/* ---- masked_fill ------------------------------------------------------------- */

/* A contiguous copy of src with value wherever mask (bool, broadcast to
 * src's shape) is true. New tensor. */
static tg_tensor *fill_where(const tg_tensor *src, const tg_tensor *mask, double value)
{
    tg_tensor *out = tg__empty_uninit_like(src); /* every element is written */
    if (!out)
        return NULL;
    int64_t strides[3][TG_MAX_DIMS];
    memcpy(strides[0], out->stride, sizeof strides[0]);
    memcpy(strides[1], src->stride, sizeof strides[1]);
    tg__broadcast_strides(mask, src->ndim, src->shape, strides[2]);
    tg__iter it;
    tg__iter_init(&it, src->ndim, src->shape, 3, (const int64_t(*)[TG_MAX_DIMS])strides);
    if (!it.len)
        return out;
    const bool *m = tg__ptr(mask);
    do {
        const bool *mr = m + it.off[2];
        if (src->dtype == TG_FLOAT32) {
            float *o = (float *)tg__ptr(out) + it.off[0];
            const float *s = (const float *)tg__ptr(src) + it.off[1];
            for (int64_t j = 0; j < it.len; j++)
                o[j * it.inner[0]] = mr[j * it.inner[2]] ? (float)value : s[j * it.inner[1]];
        } else {
            double *o = (double *)tg__ptr(out) + it.off[0];
            const double *s = (const double *)tg__ptr(src) + it.off[1];
            for (int64_t j = 0; j < it.len; j++)
                o[j * it.inner[0]] = mr[j * it.inner[2]] ? value : s[j * it.inner[1]];
        }
    } while (tg__iter_next(&it));
    return out;
}

/* g with the masked positions set to exactly 0 (saved[0]: the mask). */
static int masked_fill_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    tg_tensor *dx = fill_where(g, n->saved[0], 0.0);
    if (!dx)
        return -1;
    grads[0] = tg__ret(dx);
    return 0;
}

tg_tensor *tg_masked_fill(const tg_tensor *x, const tg_tensor *mask, double value)
{
    TG_CHECK_NULL(x);
    TG_CHECK_NULL(mask);
    if (tg__check_float(__func__, x) < 0)
        return NULL;
    if (mask->dtype != TG_BOOL)
        return tg__fail(TG_ERR_DTYPE, "tg_masked_fill: mask must be bool, got %s",
                        tg_dtype_name(mask->dtype));
    int ndim;
    int64_t shape[TG_MAX_DIMS];
    if (tg__broadcast_shape(__func__, x, mask, &ndim, shape) < 0)
        return NULL;
    if (ndim != x->ndim || memcmp(shape, x->shape, (size_t)ndim * sizeof *shape))
        return tg__fail(TG_ERR_SHAPE,
                        "tg_masked_fill: mask %s does not broadcast to x's shape %s "
                        "(it would make %s)",
                        TG_SHAPE_STR(mask), TG_SHAPE_STR(x),
                        tg__shape_str((char[96]){0}, 96, ndim, shape));
    tg_node *node;
    tg_tensor *out = tg__finish(fill_where(x, mask, value), TG_OP_MASKED_FILL,
                                masked_fill_backward, 1, (const tg_tensor *[]){x}, &node);
    /* The mask is kept as it is (a view, if it was one): backward reads it
     * through the same broadcast strides. */
    tg__save(node, 0, (tg_tensor *)mask);
    return out;
}

/* ---- dropout ----------------------------------------------------------------- */

TG_VECTOR_CLONES_EXTERN(tg__drop_span)
void tg__drop_span(tg_dtype dtype, uint64_t key, uint64_t drop_below, double keep,
                   int64_t first, int64_t n, const void *x, void *out)
{
    if (dtype == TG_FLOAT32) {
        const float *xs = x;
        float *o = out, kf = (float)keep;
        for (int64_t c = 0; c < n; c++)
            o[c] = tg__dropped(key, first + c, drop_below) ? 0.0f : xs[c] * kf;
    } else {
        const double *xs = x;
        double *o = out;
        for (int64_t c = 0; c < n; c++)
            o[c] = tg__dropped(key, first + c, drop_below) ? 0.0 : xs[c] * keep;
    }
}

/* x (any layout) with the mask of key and p applied, in row-major element
 * order: a new contiguous tensor, or NULL when out of memory. */
static tg_tensor *apply_mask(const tg_tensor *x, uint64_t key, double p)
{
    tg_tensor *xc = tg__contiguous(x), *out = xc ? tg__empty_uninit_like(xc) : NULL;
    if (out) {
        uint64_t below = tg__drop_below(p);
        double keep = 1.0 / (1.0 - p);
        int64_t n = tg__numel(xc->ndim, xc->shape);
        const char *xp = tg__ptr(xc);
        char *op = tg__ptr(out);
        size_t es = tg_dtype_size(xc->dtype);
        TG_FOR_BLOCKS(n, lo, len, tg__drop_span(xc->dtype, key, below, keep, lo, len,
                                                xp + (size_t)lo * es, op + (size_t)lo * es));
    }
    tg_release(xc);
    return out;
}

/* args[0]: p (0 for the identity); iargs[0]: the mask's key. The mask is
 * made again from its key rather than kept: the upstream gradient passes
 * where an element was kept, scaled as it was. */
static int dropout_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    if (n->args[0] == 0) {
        grads[0] = tg__ret(tg_retain(g));
        return 0;
    }
    grads[0] = tg__ret(apply_mask(g, (uint64_t)n->iargs[0], n->args[0]));
    return grads[0] ? 0 : -1;
}

tg_tensor *tg_dropout(const tg_tensor *x, double p, bool train, tg_rng *rng)
{
    TG_CHECK_NULL(x);
    if (tg__check_float(__func__, x) < 0)
        return NULL;
    if (!(p >= 0.0 && p < 1.0)) /* also rejects NaN */
        return tg__fail(TG_ERR_VALUE, "tg_dropout: p = %g is outside [0, 1)", p);
    tg_node *node;
    if (!train || p == 0.0) {
        /* Identity: an alias of x whose gradient passes through unchanged
         * (args[0] stays 0). */
        return tg__finish(tg__alias(x), TG_OP_DROPOUT, dropout_backward, 1,
                          (const tg_tensor *[]){x}, &node);
    }
    if (!rng)
        return tg__fail(TG_ERR_NULL, "tg_dropout: rng is NULL, but training with p = %g "
                                     "needs one to draw the mask", p);
    uint64_t key = tg_rng_next(rng);
    tg_tensor *out = tg__finish(apply_mask(x, key, p), TG_OP_DROPOUT, dropout_backward, 1,
                                (const tg_tensor *[]){x}, &node);
    if (node) {
        node->args[0] = p;
        node->iargs[0] = (int64_t)key;
    }
    return out;
}
