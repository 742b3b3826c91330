/* The elementwise arithmetic of SwiGLU's product silu(gate) * up and of its
 * gradients (tensor/swiglu_kernels.c), for autograd/op_swiglu.c. Never
 * installed. */
#ifndef TG_SWIGLU_KERNELS_H
#define TG_SWIGLU_KERNELS_H

#include "internal.h"

/* out = silu(gate) * up over n contiguous elements of dt (float32 or
 * float64), on the team when n is large. */
void tg__swiglu(tg_dtype dt, void *out, const void *gate, const void *up, int64_t n);

/* The backward of tg__swiglu given d, the gradient of its output, in one
 * pass over n contiguous elements: dgate = d * up * silu'(gate), dup = d *
 * silu(gate), and a = silu(gate) * up (the forward again, for a product
 * that read it). Any of dgate, dup, a may be NULL; dgate may be d itself
 * (written in place), the others are distinct from every input. */
void tg__swiglu_grads(tg_dtype dt, const void *gate, const void *up, const void *d, void *dgate,
                      void *dup, void *a, int64_t n);

#endif
