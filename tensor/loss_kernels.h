/* The row kernels of the losses (tensor/loss_kernels.c): cross-entropy's
 * logsumexp, loss and gradient rows, and the squared error's sum, for the
 * ops in autograd/op_loss.c. Never installed. */
#ifndef TG_LOSS_KERNELS_H
#define TG_LOSS_KERNELS_H

#include "internal.h"

/* Logits seen as [rows, classes] through strides (a 1-D logits is one row),
 * and targets as rows values through a stride: no copies of either. */
typedef struct {
    int64_t rows, classes;
    int64_t row_stride, class_stride, target_stride;
} tg__ce_geometry;

static inline tg__ce_geometry tg__ce_geometry_of(const tg_tensor *logits,
                                                 const tg_tensor *targets)
{
    tg__ce_geometry g;
    bool batched = logits->ndim == 2;
    g.rows = batched ? logits->shape[0] : 1;
    g.classes = logits->shape[logits->ndim - 1];
    g.row_stride = batched ? logits->stride[0] : 0;
    g.class_stride = logits->stride[logits->ndim - 1];
    g.target_stride = batched ? targets->stride[0] : 0;
    return g;
}

static inline int64_t tg__ce_target(const tg_tensor *targets, const tg__ce_geometry *g,
                                    int64_t r)
{
    return ((const int64_t *)tg__ptr(targets))[r * g->target_stride];
}

/* lse[r] = log(sum_c exp(logits[r, c])) for every row of g (lse: [rows]),
 * shifted by the row's max; a row whose max is infinite gets the max. The
 * rows are shared out to the threads. 0, or -1 when out of memory. */
int tg__ce_logsumexp(const tg_tensor *logits, const tg__ce_geometry *g, double *lse);

/* The sum over rows whose target is not ignore of lse[r] - logits[r,
 * target], in row order; *count: how many rows were summed. */
double tg__ce_nll_total(const tg_tensor *logits, const tg_tensor *targets,
                        const tg__ce_geometry *g, const double *lse, int64_t ignore,
                        int64_t *count);

/* d (logits' shape and dtype, contiguous) = (softmax(logits) - onehot(target))
 * * scale on every row, from the rows' lse, and 0 on rows whose target is
 * ignore. */
void tg__ce_grad(const tg_tensor *logits, const tg_tensor *targets, const tg__ce_geometry *g,
                 const double *lse, double scale, int64_t ignore, tg_tensor *d);

/* sum((a - b)^2) in double over a and b of one shape and float dtype, any
 * layouts. */
double tg__sum_squared_diff(const tg_tensor *a, const tg_tensor *b);

#endif
