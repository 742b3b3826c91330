/* Kernels that know nothing of gradients: each writes a freshly allocated,
 * contiguous output from inputs of any layout. The ops in autograd/ check
 * shapes, call these, and record their backward. Never installed. */
#ifndef TG_KERNELS_H
#define TG_KERNELS_H

#include "internal.h"

/* Elementwise functions of two operands (tensor/pointwise.c). The *_GRAD
 * kinds are the fused backward formulas: a is the upstream gradient, b the
 * saved input or output named in the comment. */
typedef enum {
    TG_BIN_ADD,
    TG_BIN_SUB,
    TG_BIN_MUL,
    TG_BIN_DIV,
    TG_BIN_TANH_GRAD,      /* b = tanh output: a * (1 - b^2) */
    TG_BIN_SIGMOID_GRAD,   /* b = sigmoid output: a * b * (1 - b) */
    TG_BIN_RELU_GRAD,      /* b = relu input: b > 0 ? a : 0 */
    TG_BIN_GELU_ERF_GRAD,  /* b = gelu input */
    TG_BIN_GELU_TANH_GRAD, /* b = gelu input */
    TG_BIN_SILU_GRAD,      /* b = silu input: a * s (1 + b (1 - s)), s = sigmoid(b) */
} tg__binary_kind;

/* Elementwise functions of one operand and a scalar argument. */
typedef enum {
    TG_UN_NEG,
    TG_UN_EXP,
    TG_UN_LOG,
    TG_UN_SQRT,
    TG_UN_TANH,
    TG_UN_SIGMOID,
    TG_UN_RELU,
    TG_UN_GELU_ERF,
    TG_UN_GELU_TANH,
    TG_UN_SILU,       /* x * sigmoid(x) */
    TG_UN_ADD_SCALAR, /* x + arg */
    TG_UN_MUL_SCALAR, /* x * arg */
    TG_UN_POW_SCALAR, /* x ^ arg */
} tg__unary_kind;

/* out = a (kind) b, broadcast; a and b share a float dtype. New tensor. */
tg_tensor *tg__binary(const tg_tensor *a, const tg_tensor *b, tg__binary_kind kind);
/* The same into out: contiguous, of the broadcast shape and a's dtype, and
 * overlapping neither a nor b. 0, or -1 (recorded). */
int tg__binary_into(tg_tensor *out, const tg_tensor *a, const tg_tensor *b,
                    tg__binary_kind kind);
/* out = kind(x, arg); x a float tensor. New tensor. */
tg_tensor *tg__unary(const tg_tensor *x, tg__unary_kind kind, double arg);

/* a = GELU(h) and d = d * GELU'(h), elementwise over n contiguous elements
 * of a float dtype (a, d and h distinct), the tanh or the erf form: the
 * backward of a GELU whose output is also needed again, in one pass. */
void tg__gelu_with_grad(tg_dtype dtype, bool tanh_form, const void *h, void *a, void *d,
                        int64_t n);

/* x[i] = GELU(x[i]), the tanh form, on n float32 elements on the calling
 * thread, in tg__unary's arithmetic: for a GEMM that applies it to the
 * panels of A it packs (tg__sgemm_bias). */
void tg__gelu_tanh_f32_inplace(float *x, int64_t n);

/* Sums x over the dims flagged in reduce[] (keepdim shape). New tensor.
 * (tensor/reduce.c) */
tg_tensor *tg__sum_dims(const tg_tensor *x, const bool *reduce);

#endif
