/* The row kernels of RMS normalisation (tensor/rms_norm_kernels.c), for
 * tg_rms_norm and tg_rms_norm_affine, which normalises again in its
 * backward. Never installed. */
#ifndef TG_RMS_NORM_KERNELS_H
#define TG_RMS_NORM_KERNELS_H

#include "internal.h"

/* out = x * rstd * w over rows of d elements, rstd = 1 / sqrt(mean(x^2) +
 * eps) per row; x, out: [rows, d] contiguous in dt; w: [d] or NULL; rstd:
 * [rows] float64, the value backward needs. Sums run in double in a fixed
 * order: the same bits on any thread count. */
void tg__rms_norm_rows(void *out, double *rstd, const void *x, const void *w, int64_t rows,
                       int64_t d, double eps, tg_dtype dt);

/* The backward of tg__rms_norm_rows from its rstd, with xhat = x * rstd and
 * dxhat = g * w:
 *   dx = rstd * (dxhat - xhat * mean(dxhat * xhat))   [rows, d]
 *   dw_acc += sum_rows g * xhat                         [d] float64
 * g, x, dx: [rows, d] contiguous in dt; w: [d] or NULL; dw_acc zeroed by
 * the caller. dx or dw_acc is NULL when not needed. */
void tg__rms_norm_backward_rows(void *dx, double *dw_acc, const void *g, const void *x,
                                const void *w, const double *rstd, int64_t rows, int64_t d,
                                tg_dtype dt);

#endif
