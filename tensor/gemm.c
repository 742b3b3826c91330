/* Row-major GEMM on raw buffers (see gemm.h): cblas_sgemm/cblas_dgemm when
 * the build found OpenBLAS, else the built-in blocked kernel of
 * gemm_kernel.h, instantiated here for float and double. */
#include "gemm.h"

#include "tg_config.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#if TG_HAVE_BLAS
#include <cblas.h>
#endif

/* Blocking of the built-in kernel, in elements. A KC x NR panel of B
 * (8 KiB in float) sits in L1 while an MC x KC block of A (about 100-200
 * KiB) streams from L2; NC bounds the packed B slice. NT is the width of
 * one thread's tile of C. */
#define GEMM_KC 256
#define GEMM_MC 96
#define GEMM_NC 2048
/* The vector width the micro-kernel is written for (gemm_kernel.h). */
#if defined(__AVX__)
#define GEMM_VEC_BYTES 32
#else
#define GEMM_VEC_BYTES 16
#endif
/* Below this many multiply-adds a product runs on one thread. */
#define GEMM_PARALLEL_MIN (64.0 * 64.0 * 64.0)

/* float: 6 x 8 accumulators fill twelve of the sixteen SSE registers. */
#define GEMM_T float
#define GEMM_FN(name) name##_f32
#define GEMM_MR 6
#define GEMM_NR 8
#define GEMM_NT 128
#include "gemm_kernel.h"
#undef GEMM_T
#undef GEMM_FN
#undef GEMM_MR
#undef GEMM_NR
#undef GEMM_NT

/* double: 6 x 4 accumulators, the same twelve registers. */
#define GEMM_T double
#define GEMM_FN(name) name##_f64
#define GEMM_MR 6
#define GEMM_NR 4
#define GEMM_NT 64
#include "gemm_kernel.h"
#undef GEMM_T
#undef GEMM_FN
#undef GEMM_MR
#undef GEMM_NR
#undef GEMM_NT

int tg__sgemm_builtin(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                      const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                      float *c, int64_t ldc)
{
    return blocked_f32(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

int tg__dgemm_builtin(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                      double alpha, const double *a, int64_t lda, const double *b, int64_t ldb,
                      double beta, double *c, int64_t ldc)
{
    return blocked_f64(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

#if TG_HAVE_BLAS
/* BLAS takes int sizes and wants no empty dims (the kernel handles those). */
static bool blas_fits(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc)
{
    return m > 0 && n > 0 && k > 0 && m <= INT_MAX && n <= INT_MAX && k <= INT_MAX &&
           lda <= INT_MAX && ldb <= INT_MAX && ldc <= INT_MAX;
}
#endif

int tg__sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
              int64_t ldc)
{
#if TG_HAVE_BLAS
    if (blas_fits(m, n, k, lda, ldb, ldc)) {
        cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                    trans_b ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k, alpha, a,
                    (int)lda, b, (int)ldb, beta, c, (int)ldc);
        return 0;
    }
#endif
    return blocked_f32(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

int tg__dgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
              const double *a, int64_t lda, const double *b, int64_t ldb, double beta,
              double *c, int64_t ldc)
{
#if TG_HAVE_BLAS
    if (blas_fits(m, n, k, lda, ldb, ldc)) {
        cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                    trans_b ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k, alpha, a,
                    (int)lda, b, (int)ldb, beta, c, (int)ldc);
        return 0;
    }
#endif
    return blocked_f64(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

int tg__gemm(tg_dtype dtype, bool builtin, bool trans_a, bool trans_b, int64_t m, int64_t n,
             int64_t k, double alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
             double beta, void *c, int64_t ldc)
{
    if (dtype == TG_FLOAT32)
        return (builtin ? tg__sgemm_builtin : tg__sgemm)(trans_a, trans_b, m, n, k, (float)alpha,
                                                         a, lda, b, ldb, (float)beta, c, ldc);
    if (dtype == TG_FLOAT64)
        return (builtin ? tg__dgemm_builtin : tg__dgemm)(trans_a, trans_b, m, n, k, alpha, a,
                                                         lda, b, ldb, beta, c, ldc);
    return -1;
}
