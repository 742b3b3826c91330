/* The kernels that move elements by index (tensor/index_kernels.c): the
 * embedding's gather and scatter-add of rows, and tg_max's reduction and
 * gradient scatter. Never installed. */
#ifndef TG_INDEX_KERNELS_H
#define TG_INDEX_KERNELS_H

#include "internal.h"

/* out[i, :] = weight[idx[i], :] for i in [0, n); out: [n, dim] contiguous,
 * weight [num, dim] any layout, every idx[i] in [0, num). The rows go to
 * the OpenMP team in two halves when there are enough. */
void tg__gather_rows(tg_tensor *out, const tg_tensor *weight, const int64_t *idx, int64_t n);

/* dweight[idx[i], :] += g[i, :] for i in [0, n), in order; dweight [num,
 * dim] and g [n, dim] contiguous, of one dtype. */
void tg__scatter_add_rows(tg_tensor *dweight, const tg_tensor *g, const int64_t *idx,
                          int64_t n);

/* *values, *indices (new, keepdim shape; indices int64) = the maximum of the
 * float tensor x along dim and its position, NaN counting as the largest
 * value. 0, or -1 when out of memory (either may then be set or NULL). */
int tg__max_dim(const tg_tensor *x, int dim, tg_tensor **values, tg_tensor **indices);

/* out[..., idx[i], ...] += g[i] along dim: out contiguous (tg_max's input
 * shape), g contiguous and idx int64 holding one element per position of
 * the reduced shape, in the same row-major order. */
void tg__scatter_add_dim(tg_tensor *out, const tg_tensor *g, const tg_tensor *idx, int dim);

#endif
