/* Broadcasting by NumPy rules, and the row iterator that lets one kernel
 * loop serve contiguous, strided and broadcast operands alike. */
#include "internal.h"

#include <string.h>

int tg__broadcast_shape(const char *fn, const tg_tensor *a, const tg_tensor *b,
                        int *ndim, int64_t *shape)
{
    if (a->ndim == b->ndim && !memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof a->shape[0])) {
        memcpy(shape, a->shape, (size_t)a->ndim * sizeof a->shape[0]); /* the common case */
        *ndim = a->ndim;
        return 0;
    }
    int n = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (int i = 0; i < n; i++) {
        int ia = a->ndim - n + i, ib = b->ndim - n + i;
        int64_t sa = ia >= 0 ? a->shape[ia] : 1;
        int64_t sb = ib >= 0 ? b->shape[ib] : 1;
        if (sa != sb && sa != 1 && sb != 1) {
            tg__fail(TG_ERR_SHAPE, "%s: shapes %s and %s do not broadcast (dim %d: %lld vs %lld)",
                     fn, TG_SHAPE_STR(a), TG_SHAPE_STR(b), i, (long long)sa, (long long)sb);
            return -1;
        }
        shape[i] = sa == 1 ? sb : sa;
    }
    *ndim = n;
    return 0;
}

void tg__broadcast_strides(const tg_tensor *t, int ndim, const int64_t *shape,
                           int64_t *stride)
{
    for (int i = 0; i < ndim; i++) {
        int it = t->ndim - ndim + i;
        stride[i] = (it >= 0 && t->shape[it] == shape[i] && shape[i] != 1) ? t->stride[it] : 0;
    }
}

void tg__iter_init(tg__iter *it, int ndim, const int64_t *shape, int nops,
                   const int64_t (*strides)[TG_MAX_DIMS])
{
    memset(it, 0, sizeof *it);
    it->nops = nops;
    it->len = ndim ? shape[ndim - 1] : 1;
    it->ndim = ndim ? ndim - 1 : 0;
    for (int d = 0; d < ndim; d++)
        if (shape[d] == 0)
            it->len = 0;
    memcpy(it->shape, shape, (size_t)it->ndim * sizeof *shape);
    for (int k = 0; k < nops; k++) {
        memcpy(it->stride[k], strides[k], (size_t)it->ndim * sizeof strides[k][0]);
        it->inner[k] = ndim ? strides[k][ndim - 1] : 0;
    }
}

bool tg__iter_next(tg__iter *it)
{
    for (int d = it->ndim - 1; d >= 0; d--) {
        if (++it->index[d] < it->shape[d]) {
            for (int k = 0; k < it->nops; k++)
                it->off[k] += it->stride[k][d];
            return true;
        }
        it->index[d] = 0;
        for (int k = 0; k < it->nops; k++)
            it->off[k] -= it->stride[k][d] * (it->shape[d] - 1);
    }
    return false;
}
