/* The elementwise kernels of masked_fill and dropout
 * (tensor/mask_kernels.c), for the ops in autograd/op_mask.c. Never
 * installed. */
#ifndef TG_MASK_KERNELS_H
#define TG_MASK_KERNELS_H

#include "internal.h"

/* A contiguous copy of src (a float tensor, any layout) with value wherever
 * mask (bool, broadcast to src's shape) is true. New tensor, or NULL when
 * out of memory. */
tg_tensor *tg__masked_fill(const tg_tensor *src, const tg_tensor *mask, double value);

/* x (a float tensor, any layout) with the dropout mask of key and p (in
 * (0, 1)) applied, in row-major element order: dropped elements 0, kept
 * ones scaled by 1 / (1 - p). A new contiguous tensor, or NULL when out of
 * memory. The same (key, p) gives the same mask, so backward applies it to
 * the upstream gradient. */
tg_tensor *tg__dropout_apply(const tg_tensor *x, uint64_t key, double p);

#endif
