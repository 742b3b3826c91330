/* The row kernels of softmax and log_softmax (tensor/softmax_kernels.c), for
 * the ops in autograd/op_softmax.c. Never installed. */
#ifndef TG_SOFTMAX_KERNELS_H
#define TG_SOFTMAX_KERNELS_H

#include "internal.h"

/* out (contiguous, x's shape and float dtype) = softmax, or log_softmax
 * when log_space, of x (any layout) along dim (wrapped; any value for a
 * 0-dim x). A row that is entirely -inf gives zeros (softmax) or -inf
 * (log_softmax). Rows go to the OpenMP team above TG_PAR_MIN elements. */
void tg__softmax_rows(const tg_tensor *x, tg_tensor *out, int dim, bool log_space);

/* dx (contiguous, y's shape) from the saved output y and the upstream g
 * (any layout, possibly expanded with stride 0) along dim:
 *   softmax:     dx = y * (g - sum(g * y))
 *   log_softmax: dx = g - exp(y) * sum(g)
 * with exact zeros on a fully masked row, whatever g holds there. */
void tg__softmax_backward_rows(const tg_tensor *y, const tg_tensor *g, tg_tensor *dx, int dim,
                               bool log_space);

#endif
