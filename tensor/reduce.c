/* Summing over chosen dims: the kernel behind sum, mean and the engine's
 * reduction of broadcast gradients. Accumulates in double for both dtypes. */
#include "kernels.h"

#include <stdlib.h>
#include <string.h>

tg_tensor *tg__sum_dims(const tg_tensor *x, const bool *reduce)
{
    int64_t shape[TG_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++)
        shape[d] = reduce[d] ? 1 : x->shape[d];
    tg_tensor *out = tg__empty(x->dtype, x->ndim, shape);
    if (!out)
        return NULL;
    int64_t n_out = tg__numel(x->ndim, shape);
    double *acc = calloc((size_t)(n_out ? n_out : 1), sizeof *acc);
    if (!acc) {
        tg_release(out);
        return tg__fail(TG_ERR_NOMEM, "tg_sum: out of memory");
    }
    int64_t strides[2][TG_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++)
        strides[0][d] = reduce[d] ? 0 : out->stride[d];
    memcpy(strides[1], x->stride, sizeof strides[1]);
    tg__iter it;
    tg__iter_init(&it, x->ndim, x->shape, 2, (const int64_t(*)[TG_MAX_DIMS])strides);
    if (it.len) {
        do {
            double *a = acc + it.off[0];
            if (x->dtype == TG_FLOAT32) {
                const float *p = (const float *)tg__ptr(x) + it.off[1];
                for (int64_t j = 0; j < it.len; j++)
                    a[j * it.inner[0]] += p[j * it.inner[1]];
            } else {
                const double *p = (const double *)tg__ptr(x) + it.off[1];
                for (int64_t j = 0; j < it.len; j++)
                    a[j * it.inner[0]] += p[j * it.inner[1]];
            }
        } while (tg__iter_next(&it));
    }
    if (x->dtype == TG_FLOAT32) {
        float *o = tg__ptr(out);
        for (int64_t i = 0; i < n_out; i++)
            o[i] = (float)acc[i];
    } else {
        memcpy(tg__ptr(out), acc, (size_t)n_out * sizeof *acc);
    }
    free(acc);
    return out;
}
