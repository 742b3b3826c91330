/* The optimizers' element updates (SGD, Adam, AdamW in PyTorch 1.13's
 * rounding order) and the gradient-norm loops of tg_clip_grad_norm: loops
 * that know nothing of gradients beyond the numbers they are given. Called
 * by nn/optim.c; speaks only of opaque tensors. Never installed. */
#ifndef TG_OPTIM_KERNELS_H
#define TG_OPTIM_KERNELS_H

#include <tensorgrad/tensor.h>

/* The numbers one parameter's update needs, in double; the kernels round
 * each to the parameter's dtype, as PyTorch does with Python scalars. */
typedef struct {
    double l2;        /* weight decay added to the gradient (SGD, Adam) */
    double decay;     /* AdamW's 1 - lr * wd, multiplied into the parameter */
    double lr, momentum;
    bool first;       /* SGD: the momentum buffer starts as the gradient */
    double beta1, beta2, bc2_sqrt, eps, step_size;
} tg__optim_coefs;

/* One parameter's update: param is float32 or float64, any layout; grad has
 * its shape and dtype, any layout; m and v are contiguous, of its shape and
 * dtype: m is exp_avg (Adam) or the momentum buffer (SGD; NULL without
 * momentum), v is exp_avg_sq (NULL for SGD). All borrowed. */
typedef struct {
    tg_tensor *param;
    const tg_tensor *grad;
    tg_tensor *m, *v;
    bool adam; /* Adam or AdamW (c tells them apart), else SGD */
    tg__optim_coefs c;
} tg__optim_job;

/* Updates every job's parameter and state in place: contiguous float32
 * Adam(W) parameters all in one parallel loop, then the others one by one;
 * then bumps each parameter's version, so a graph that read it cannot
 * backpropagate. Any thread count gives the same bits. */
void tg__optim_update(const tg__optim_job *jobs, int n);

/* The sum of squares of a float gradient (any layout), accumulated in
 * double. */
double tg__grad_sq_sum(const tg_tensor *g);
/* g *= coef in place (any layout), rounding coef to g's dtype like
 * PyTorch's mul_; bumps g's version. */
void tg__grad_scale(tg_tensor *g, double coef);

#endif
