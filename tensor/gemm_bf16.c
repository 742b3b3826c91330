/* The bfloat16 products (gemm.h): float32 operands rounded to bfloat16 as
 * they are packed, products summed in float32, on the packed driver of
 * gemm_packed.h with gemm_x86.c's bf16 kernels; and tg__gemm_p, which
 * picks them or the float32 ones by precision. */
#include "bf16.h"
#include "gemm.h"
#include "gemm_x86.h"

#include "tg_config.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if TG_HAVE_OPENMP
#include <omp.h>
#define GEMM_THREAD_NUM() omp_get_thread_num()
#else
#define GEMM_THREAD_NUM() 0
#endif

#define GEMM_PACK_BF16
#define GEMM_T float
#define GEMM_FN(name) name##_bf16
#define GEMM_UKR struct tg__ukr_bf16
#include "gemm_packed.h"
#undef GEMM_T
#undef GEMM_FN
#undef GEMM_UKR
#undef GEMM_PACK_BF16

/* A rows x cols matrix (row stride ld) rounded to bfloat16 into a new
 * compact float32 copy; NULL when out of memory. */
static float *rounded_copy(const float *x, int64_t rows, int64_t cols, int64_t ld)
{
    float *out = malloc((size_t)(rows * cols > 0 ? rows * cols : 1) * sizeof *out);
    if (!out)
        return NULL;
    for (int64_t i = 0; i < rows; i++) {
        memcpy(out + i * cols, x + i * ld, (size_t)cols * sizeof *out);
    }
    tg__bf16_round_f32(out, rows * cols);
    return out;
}

/* The packed bf16 kernel of the path in use, or NULL where there is none
 * (the portable ISA: no SIMD code, or valgrind). */
static const struct tg__ukr_bf16 *bf16_kernel(void)
{
    return tg__gemm_ukr_bf16(tg__gemm_bf16_in_use(), tg__gemm_isa_in_use());
}

/* The small products, and any without a packed bf16 kernel: operands
 * rounded into scratch, then tg__sgemm. */
static int sgemm_rounded(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                         const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                         float *c, int64_t ldc)
{
    if (m <= 0 || n <= 0 || k <= 0 || alpha == 0)
        return tg__sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    int64_t ar = trans_a ? k : m, ac = trans_a ? m : k;
    int64_t br = trans_b ? n : k, bc = trans_b ? k : n;
    float *ra = rounded_copy(a, ar, ac, lda), *rb = rounded_copy(b, br, bc, ldb);
    int rc = ra && rb ? tg__sgemm(trans_a, trans_b, m, n, k, alpha, ra, ac, rb, bc, beta, c, ldc)
                      : -1;
    free(ra);
    free(rb);
    return rc;
}

int tg__sgemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                   float *c, int64_t ldc)
{
    const struct tg__ukr_bf16 *u = bf16_kernel();
    if (!u || alpha == 0 || tg__gemm_small_shape(trans_b, m, n, k))
        return sgemm_rounded(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return packed_bf16(u, tg__gemm_packed_threads(m, n, k), trans_a, trans_b, m, n, k, alpha, a,
                       lda, b, ldb, beta, NULL, NULL, NULL, c, ldc);
}

int tg__sgemm_bias_bf16(bool trans_b, int64_t m, int64_t n, int64_t k, const float *a,
                        int64_t lda, const float *b, int64_t ldb, const float *bias,
                        void (*amap)(float *, int64_t), float *c, int64_t ldc)
{
    const struct tg__ukr_bf16 *u = bf16_kernel();
    if (!u || tg__gemm_small_shape(trans_b, m, n, k))
        return 1;
    return packed_bf16(u, tg__gemm_packed_threads(m, n, k), false, trans_b, m, n, k, 1.0f, a, lda,
                       b, ldb, 0.0f, bias, amap, NULL, c, ldc);
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
    return path == TG_BF16_CONVERTING || (path == TG_BF16_DPBF16 && tg__gemm_has_dpbf16());
}

/* Whether vdpbf16ps outruns the float32 FMAs that the converting path
 * runs by enough to pay for its packing: the best of three short register
 * loops each (about 0.1 ms in all), once per process. On AMD Zen 4 and 5 a
 * vdpbf16ps does twice an FMA's work at the same rate; on this Intel Xeon
 * (KVM, model 167, with AMX) it ran at half the FMA's 240 GFLOP/s per
 * core, where the float32 kernel on rounded panels is faster. */
#define PEAK_ITERS 1000
static bool dpbf16_pays(void)
{
    double fma = 0, dp = 0;
    for (int i = 0; i < 3; i++) {
        double f = tg__gemm_peak_gflops(false, PEAK_ITERS), d = tg__gemm_peak_gflops(true, PEAK_ITERS);
        fma = f > fma ? f : fma;
        dp = d > dp ? d : dp;
    }
    return dp > 1.25 * fma;
}

/* vdpbf16ps where the CPU has it and it pays, the float32 kernels run
 * AVX-512 (not the portable ones, as under valgrind) and
 * TG_BF16_GEMM=converting does not say otherwise. */
static enum tg__bf16_path best_path(void)
{
    const char *env = getenv("TG_BF16_GEMM");
    if (env && strcmp(env, "converting") == 0)
        return TG_BF16_CONVERTING;
    return tg__gemm_isa_in_use() == TG_GEMM_ISA_AVX512 && path_available(TG_BF16_DPBF16) &&
                   dpbf16_pays()
               ? TG_BF16_DPBF16
               : TG_BF16_CONVERTING;
}

enum tg__bf16_path tg__gemm_bf16_in_use(void)
{
    int path = bf16_path;
    if (path == -2)
        bf16_path = path = best_path();
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
