/* Kernels that move elements by index: embedding's row gather and its
 * scatter-add, and the maximum along a dim with its indices and the scatter
 * of its gradient back to them. */
#include "index_kernels.h"

#include <string.h>

/* out[i, :] = weight[idx[i], :] for i in [i0, i1); out: [n, dim]
 * contiguous, weight any layout. */
static void gather_rows(tg_tensor *out, const tg_tensor *weight, const int64_t *idx, int64_t i0,
                        int64_t i1)
{
    int64_t dim = weight->shape[1], s0 = weight->stride[0], s1 = weight->stride[1];
    for (int64_t i = i0; i < i1; i++) {
        int64_t src = idx[i] * s0;
        if (weight->dtype == TG_FLOAT32) {
            const float *w = (const float *)tg__ptr(weight) + src;
            float *o = (float *)tg__ptr(out) + i * dim;
            for (int64_t j = 0; j < dim; j++)
                o[j] = w[j * s1];
        } else {
            const double *w = (const double *)tg__ptr(weight) + src;
            double *o = (double *)tg__ptr(out) + i * dim;
            for (int64_t j = 0; j < dim; j++)
                o[j] = w[j * s1];
        }
    }
}

void tg__gather_rows(tg_tensor *out, const tg_tensor *weight, const int64_t *idx, int64_t n)
{
    TG_FOR_ROWS(n, weight->shape[1], i0, i1, gather_rows(out, weight, idx, i0, i1));
}

/* dweight[idx[i], :] += g[i, :]; dweight [num, dim] and g [n, dim] contiguous. */
void tg__scatter_add_rows(tg_tensor *dweight, const tg_tensor *g, const int64_t *idx,
                          int64_t n)
{
    int64_t dim = dweight->shape[1];
    for (int64_t i = 0; i < n; i++) {
        if (g->dtype == TG_FLOAT32) {
            float *d = (float *)tg__ptr(dweight) + idx[i] * dim;
            const float *s = (const float *)tg__ptr(g) + i * dim;
            for (int64_t j = 0; j < dim; j++)
                d[j] += s[j];
        } else {
            double *d = (double *)tg__ptr(dweight) + idx[i] * dim;
            const double *s = (const double *)tg__ptr(g) + i * dim;
            for (int64_t j = 0; j < dim; j++)
                d[j] += s[j];
        }
    }
}

/* values and indices of the maximum of x along dim, keepdim shape. NaN
 * counts as the largest value, as in PyTorch. */
int tg__max_dim(const tg_tensor *x, int dim, tg_tensor **values, tg_tensor **indices)
{
    int64_t shape[TG_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[dim] = 1;
    *values = tg__empty_uninit(x->dtype, x->ndim, shape); /* each written below */
    *indices = tg__empty_uninit(TG_INT64, x->ndim, shape);
    if (!*values || !*indices)
        return -1;
    int64_t strides[3][TG_MAX_DIMS];
    memcpy(strides[0], (*values)->stride, sizeof strides[0]);
    memcpy(strides[1], (*indices)->stride, sizeof strides[1]);
    memcpy(strides[2], x->stride, sizeof strides[2]);
    tg__iter it;
    tg__iter_init(&it, x->ndim, shape, 3, (const int64_t(*)[TG_MAX_DIMS])strides);
    int64_t len = x->shape[dim], step = x->stride[dim];
    if (!it.len)
        return 0;
    do {
        for (int64_t j = 0; j < it.len; j++) {
            int64_t base = it.off[2] + j * it.inner[2], best = 0;
            double best_v = -INFINITY;
            for (int64_t k = 0; k < len; k++) {
                double v = x->dtype == TG_FLOAT32
                               ? ((const float *)x->storage->data)[x->offset + base + k * step]
                               : ((const double *)x->storage->data)[x->offset + base + k * step];
                if (k == 0 || (!isnan(best_v) && (v > best_v || isnan(v)))) {
                    best_v = v;
                    best = k;
                }
            }
            int64_t oi = it.off[0] + j * it.inner[0];
            if (x->dtype == TG_FLOAT32)
                ((float *)tg__ptr(*values))[oi] = (float)best_v;
            else
                ((double *)tg__ptr(*values))[oi] = best_v;
            ((int64_t *)tg__ptr(*indices))[it.off[1] + j * it.inner[1]] = best;
        }
    } while (tg__iter_next(&it));
    return 0;
}

void tg__scatter_add_dim(tg_tensor *out, const tg_tensor *g, const tg_tensor *idx, int dim)
{
    const tg_tensor *x = out, *gc = g;
    /* gc and idx hold the same elements in the same row-major order (keepdim
     * or not), so walk them flat and rebuild the position in x. */
    int64_t count = tg__numel(idx->ndim, idx->shape);
    int64_t inner = 1;
    for (int d = dim + 1; d < x->ndim; d++)
        inner *= x->shape[d];
    const int64_t *ip = tg__ptr(idx);
    for (int64_t i = 0; i < count; i++) {
        int64_t outer_i = i / inner, inner_i = i % inner;
        int64_t pos = (outer_i * x->shape[dim] + ip[i]) * inner + inner_i;
        if (x->dtype == TG_FLOAT32)
            ((float *)tg__ptr(out))[pos] += ((const float *)tg__ptr(gc))[i];
        else
            ((double *)tg__ptr(out))[pos] += ((const double *)tg__ptr(gc))[i];
    }
}
