/* The kernels of the affine ops that are not products
 * (tensor/affine_kernels.c), for autograd/op_affine.c. Never installed. */
#ifndef TG_AFFINE_KERNELS_H
#define TG_AFFINE_KERNELS_H

#include "internal.h"

/* The rows of y ([rows, out] contiguous, elements of es bytes) set to
 * copies of the row b ([out]), a block of rows per thread when there are
 * enough: the start of a product that adds onto its bias. */
void tg__fill_rows(void *y, const void *b, size_t es, int64_t out, int64_t rows);

/* dst[j] = (float)src[j] for j in [0, n). */
void tg__f64_to_f32(float *dst, const double *src, int64_t n);

#endif
