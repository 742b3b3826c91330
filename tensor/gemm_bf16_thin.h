/* The thin bfloat16 products of bf16 precision (gemm_bf16_thin.c): a few
 * rows of float32 A against a weight already held as bfloat16, which is
 * read in place, half the bytes of float32. Internal to tensor/. */
#ifndef TG_GEMM_BF16_THIN_H
#define TG_GEMM_BF16_THIN_H

#include <stdbool.h>
#include <stdint.h>

/* The rows of A up to which a bf16 product with a cached weight runs here
 * (bf16_weights.c): the float32 thin kernel's bound, TG_GEMM_THIN_M. */
#define TG_GEMM_BF16_THIN_M 4

/* C = alpha * A @ op(B) + beta * C, row-major: A m x k (row stride lda)
 * float32, each element rounded to bfloat16 (nearest-even) as it is read;
 * B bfloat16, stored N x K with trans_b, else K x N (row stride ldb); C m
 * x n (row stride ldc), written without being read when beta is 0. The
 * products are summed in float32 (vdpbf16ps reads denormals as zero, as
 * tg__sgemm_bf16's kernels do). Any m works; the kernels take A's rows
 * four at a time. Threads split the columns of C when the product is
 * large enough. 0, or -1 when scratch memory runs out. */
int tg__sgemm_bf16_thin(bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                        const float *a, int64_t lda, const uint16_t *b, int64_t ldb, float beta,
                        float *c, int64_t ldc);

/* How they run: portable C vectors (any CPU, and under valgrind), AVX-512
 * widening each bfloat16 to float32 for FMAs, or vdpbf16ps on pairs along
 * K (B stored N x K only; K x N takes the widening kernel). */
enum tg__bf16_thin_path {
    TG_BF16_THIN_AUTO = -1,
    TG_BF16_THIN_PORTABLE = 0,
    TG_BF16_THIN_WIDEN = 1,
    TG_BF16_THIN_DPBF16 = 2,
};
/* TEST-ONLY: makes the thin products take path from now on (AUTO restores
 * the run-time choice); false, changing nothing, when the CPU lacks it.
 * Not thread-safe: call it while no product runs. */
bool tg__bf16_thin_force(enum tg__bf16_thin_path path);
/* The path in use now (never AUTO). */
enum tg__bf16_thin_path tg__bf16_thin_in_use(void);

#endif
