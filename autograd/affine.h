/* The product and gradients of tg_affine (autograd/op_affine.c), shared
 * with the ops that apply a function to x and then an affine map in one op
 * (op_rms_norm.c, op_swiglu.c). Never installed. */
#ifndef TG_AFFINE_H
#define TG_AFFINE_H

#include "bf16_weights.h"
#include "gemm.h"
#include "graph.h"

/* tg__gemm (not forced built-in) at the thread's matmul precision: in a
 * backward, the engine has set it to the forward's. Every product of the
 * affine ops goes through it or a bf16-aware fused entry. */
static inline int tg__gemm_op(tg_dtype dt, bool trans_a, bool trans_b, int64_t m, int64_t n,
                              int64_t k, double alpha, const void *a, int64_t lda, const void *b,
                              int64_t ldb, double beta, void *c, int64_t ldc)
{
    return tg__gemm_p(dt, tg_matmul_precision(), false, trans_a, trans_b, m, n, k, alpha, a, lda,
                      b, ldb, beta, c, ldc);
}

/* y [m, n] = a [m, k] @ w^T + beta * y for a weight w [n, k], contiguous,
 * at the thread's matmul precision: a thin bf16 product reads w's cached
 * bfloat16 copy (tensor/bf16_weights.h). */
static inline int tg__gemm_weight_op(tg_dtype dt, int64_t m, int64_t n, int64_t k, const void *a,
                                     const tg_tensor *w, double beta, void *y)
{
    return tg__gemm_weight(dt, tg_matmul_precision(), m, n, k, a, k, w, beta, y, n);
}

/* True when a float32 product runs on bfloat16 operands now: the fused
 * float32-only entries (weight and bias gradients in one pass, a small
 * layer's two gradients in one region) then step aside. */
static inline bool tg__bf16_products(tg_dtype dt)
{
    return dt == TG_FLOAT32 && tg_matmul_precision() == TG_PRECISION_BF16;
}

/* The checks of tg_affine (x [..., in], weight [out, in], bias [out] or
 * NULL, one float dtype), with errors naming fn. 0, or -1 (recorded). */
int tg__affine_check(const char *fn, const tg_tensor *x, const tg_tensor *w,
                     const tg_tensor *b);

/* y [..., out] = xc @ weight^T + bias for xc contiguous [..., in]: a new
 * tensor, or NULL when out of memory. */
tg_tensor *tg__affine_product(const tg_tensor *xc, const tg_tensor *weight,
                              const tg_tensor *bias);

/* dw = gc^T @ xv unless dw is NULL (into dw, [out, in]), and *db = gc
 * summed over its rows unless db is NULL (gc contiguous [rows, out], xv
 * contiguous [rows, in]; xv may be NULL when dw is). 0, or -1 when out of
 * memory. */
int tg__affine_param_grads(const tg_tensor *gc, const tg_tensor *xv, int64_t rows, int64_t out,
                           int64_t in, tg_tensor *dw, tg_tensor **db);

/* Rows per block for a backward that makes a [rows, in] temporary a block
 * of rows at a time (es bytes an element): at most about 4 MiB of them,
 * the rows shared evenly between the blocks. */
int64_t tg__affine_block_rows(int64_t rows, int64_t in, size_t es);

/* Rows [r0, r0 + nr) of the contiguous [rows, in] data behind t, a view
 * (NULL when out of memory). */
static inline tg_tensor *tg__affine_rows(const tg_tensor *t, int64_t r0, int64_t nr, int64_t in)
{
    return tg__view(t, 2, (int64_t[]){nr, in}, (int64_t[]){in, 1}, t->offset + r0 * in);
}

/* *db = gc summed over every dim but its last (a new tensor); 0, or -1
 * when out of memory. */
int tg__affine_bias_grad(const tg_tensor *gc, tg_tensor **db);

/* The gradients of y = xv @ w^T + b given gy, with xv the values the
 * product read (contiguous), w = n->inputs[wi] and b = n->inputs[wi + 1]:
 * dxv [..., in] when want_dxv, added into into when given, else a new *dxv
 * owned by the caller; dw and db into grads[wi] and grads[wi + 1] as
 * n->needs asks. 0, or -1 when out of memory. */
int tg__affine_grads(tg_node *n, int wi, const tg_tensor *gy, const tg_tensor *xv, bool want_dxv,
                     tg_tensor *into, tg_tensor **dxv, tg_tensor **grads);

#endif
