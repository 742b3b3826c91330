/* The checks and gradients of layer_norm (autograd/op_layer_norm.c), shared
 * with the ops that recompute a layer norm in their own backward; its row
 * kernels are in tensor/layer_norm_kernels.h. Never installed. */
#ifndef TG_LAYER_NORM_H
#define TG_LAYER_NORM_H

#include "graph.h"

/* The checks of tg_layer_norm, with errors naming fn. 0, or -1 (recorded). */
int tg__layer_norm_check(const char *fn, const tg_tensor *x, int norm_ndim,
                         const tg_tensor *weight, const tg_tensor *bias, double eps);

/* The gradients of layer_norm(x, norm_ndim, w, b) given g, from the rows'
 * mean and rstd (float64 [rows]): dx, dw, db into grads[0..2] for each
 * needs[i], as a backward function hands them to the engine. 0, or -1 when
 * out of memory. */
int tg__layer_norm_grads(const tg_tensor *g, const tg_tensor *x, int norm_ndim,
                         const tg_tensor *w, const tg_tensor *b, const tg_tensor *mean,
                         const tg_tensor *rstd, const bool *needs, tg_tensor **grads);

#endif
