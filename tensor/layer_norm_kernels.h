/* The row kernels of layer normalisation (tensor/layer_norm_kernels.c), for
 * tg_layer_norm and the ops that normalise again in their own backward.
 * Never installed. */
#ifndef TG_LAYER_NORM_KERNELS_H
#define TG_LAYER_NORM_KERNELS_H

#include "internal.h"

/* out = layer_norm(x) over rows of d elements, all contiguous in dt; w, b:
 * [d] or NULL; mean, rstd: [rows] float64, the values backward needs. The
 * same inputs always give the same bits, on any thread count. */
void tg__layer_norm_rows(void *out, double *mean, double *rstd, const void *x, const void *w,
                         const void *b, int64_t rows, int64_t d, double eps, tg_dtype dt);

/* The backward of tg__layer_norm_rows from its mean and rstd, with xhat =
 * (x - mean) * rstd and dxhat = g * w:
 *   dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))  [rows, d]
 *   dw_acc += sum_rows g * xhat,  db_acc += sum_rows g              [d] float64
 * g, x, dx: [rows, d] contiguous in dt; w: [d] or NULL. dw_acc and db_acc
 * are zeroed by the caller; any of dx, dw_acc, db_acc is NULL when not
 * needed. The column sums add rows in order: the same bits on any thread
 * count. */
void tg__layer_norm_backward_rows(void *dx, double *dw_acc, double *db_acc, const void *g,
                                  const void *x, const void *w, const double *mean,
                                  const double *rstd, int64_t rows, int64_t d, tg_dtype dt);

#endif
