/* The elementwise passes of the ops that hide elements: a copy with the
 * masked positions filled, and inverted dropout by the mask that a key
 * names (dropout_mask.h), made again rather than kept. */
#include "dropout_mask.h"
#include "fastmath.h"
#include "mask_kernels.h"

#include <string.h>

/* A contiguous copy of src with value wherever mask (bool, broadcast to
 * src's shape) is true. New tensor. */
tg_tensor *tg__masked_fill(const tg_tensor *src, const tg_tensor *mask, double value)
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
tg_tensor *tg__dropout_apply(const tg_tensor *x, uint64_t key, double p)
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
