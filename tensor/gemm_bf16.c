/* The bfloat16 products (gemm.h): float32 operands rounded to bfloat16 as
 * they are packed, products summed in float32, and tg__gemm_p, which picks
 * them or the float32 ones by precision. */
#include "bf16.h"
#include "gemm.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* A rows x cols matrix (row stride ld) rounded to bfloat16 into a new
 * compact float32 copy, amap (or NULL) applied first; NULL when out of
 * memory. */
static float *rounded_copy(const float *x, int64_t rows, int64_t cols, int64_t ld,
                           void (*amap)(float *, int64_t))
{
    float *out = malloc((size_t)(rows * cols > 0 ? rows * cols : 1) * sizeof *out);
    if (!out)
        return NULL;
    for (int64_t i = 0; i < rows; i++) {
        memcpy(out + i * cols, x + i * ld, (size_t)cols * sizeof *out);
        if (amap)
            amap(out + i * cols, cols);
    }
    tg__bf16_round_f32(out, rows * cols);
    return out;
}

int tg__sgemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                   float *c, int64_t ldc)
{
    if (m <= 0 || n <= 0 || k <= 0 || alpha == 0)
        return tg__sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    int64_t ar = trans_a ? k : m, ac = trans_a ? m : k;
    int64_t br = trans_b ? n : k, bc = trans_b ? k : n;
    float *ra = rounded_copy(a, ar, ac, lda, NULL), *rb = rounded_copy(b, br, bc, ldb, NULL);
    int rc = ra && rb ? tg__sgemm(trans_a, trans_b, m, n, k, alpha, ra, ac, rb, bc, beta, c, ldc)
                      : -1;
    free(ra);
    free(rb);
    return rc;
}

int tg__sgemm_bias_bf16(bool trans_b, int64_t m, int64_t n, int64_t k, const float *a,
                        int64_t lda, const float *b, int64_t ldb, const float *bias,
                        void (*amap)(float *, int64_t), float *c, int64_t ldc)
{
    if (m <= 0 || n <= 0 || k <= 0)
        return 1;
    int64_t br = trans_b ? n : k, bc = trans_b ? k : n;
    float *ra = rounded_copy(a, m, k, lda, amap), *rb = rounded_copy(b, br, bc, ldb, NULL);
    int rc = ra && rb ? tg__sgemm_bias(trans_b, m, n, k, ra, k, rb, bc, bias, NULL, c, ldc) : -1;
    free(ra);
    free(rb);
    return rc;
}

int tg__gemm_p(tg_dtype dtype, tg_precision prec, bool builtin, bool trans_a, bool trans_b,
               int64_t m, int64_t n, int64_t k, double alpha, const void *a, int64_t lda,
               const void *b, int64_t ldb, double beta, void *c, int64_t ldc)
{
    if (dtype == TG_FLOAT32 && prec == TG_PRECISION_BF16)
        return tg__sgemm_bf16(trans_a, trans_b, m, n, k, (float)alpha, a, lda, b, ldb,
                              (float)beta, c, ldc);
    return tg__gemm(dtype, builtin, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c,
                    ldc);
}

/* -2 until first asked, then the run-time choice or the forced path. */
static _Atomic int bf16_path = -2;

static bool path_available(enum tg__bf16_path path)
{
    return path == TG_BF16_CONVERTING;
}

enum tg__bf16_path tg__gemm_bf16_in_use(void)
{
    int path = bf16_path;
    if (path == -2)
        bf16_path = path = TG_BF16_CONVERTING;
    return (enum tg__bf16_path)path;
}

bool tg__gemm_bf16_force(enum tg__bf16_path path)
{
    if (path == TG_BF16_AUTO) {
        bf16_path = -2;
        return true;
    }
    if (!path_available(path))
        return false;
    bf16_path = path;
    return true;
}
