/* The batched matrix product of tg_matmul (tensor/matmul_kernels.c), over
 * the shape its checks work out. Never installed. */
#ifndef TG_MATMUL_KERNELS_H
#define TG_MATMUL_KERNELS_H

#include "internal.h"

/* The product's geometry: [batch..., m, k] @ [batch..., k, n], with the
 * output [batch..., m, n] less m when a is 1-D and less n when b is. */
typedef struct {
    int nb; /* broadcast batch dims */
    int64_t batch[TG_MAX_DIMS];
    int64_t m, k, n;
    int out_ndim;
    int64_t out_shape[TG_MAX_DIMS];
} tg__mm_shape;

/* out (contiguous, s->out_shape) = a @ b with the broadcast batch dims of
 * s, for m, n, k > 0; a and b of out's float dtype, any layout. Operands
 * with no GEMM layout are copied to contiguous first. 0, or -1 with the
 * error recorded. */
int tg__matmul_forward(const tg_tensor *a, const tg_tensor *b, const tg__mm_shape *s,
                       tg_tensor *out);

#endif
