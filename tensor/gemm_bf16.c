/* The bfloat16 products (gemm.h): float32 operands rounded to bfloat16 as
 * they are packed, products summed in float32, on the packed driver of
 * gemm_packed_tmpl.h with gemm_x86.c's bf16 kernels; and tg__gemm_p, which
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
#include "gemm_packed_tmpl.h"
#undef GEMM_T
#undef GEMM_FN
#undef GEMM_UKR
#undef GEMM_PACK_BF16

/* rows x cols of x (row stride ld) rounded to bfloat16 into out, compact. */
static void round_into(float *out, const float *x, int64_t rows, int64_t cols, int64_t ld)
{
    for (int64_t i = 0; i < rows; i++)
        memcpy(out + i * cols, x + i * ld, (size_t)cols * sizeof *out);
    tg__bf16_round_f32(out, rows * cols);
}

/* Floats of op(B) rounded at a time: a block of K that stays in L2, so a
 * thin product (a generated token's row against a weight matrix) reads
 * its weights from memory once, as tg__sgemm does, not three times. */
#define ROUND_BLOCK (64 * 1024)

static enum tg__bf16_path vector_path(void);

/* The packed bf16 kernel of the path in use for a k-deep product, or NULL
 * where there is none (the portable ISA: no SIMD code, or valgrind). AMX
 * pads each piece of K to 32, which its panels hold from 16 deep on: a
 * product whose last piece is shallower takes the vector kernels. */
static const struct tg__ukr_bf16 *bf16_kernel(int64_t k)
{
    enum tg__gemm_isa isa = tg__gemm_isa_in_use();
    const struct tg__ukr_bf16 *u = tg__gemm_ukr_bf16(tg__gemm_bf16_in_use(), isa);
    if (u && tg__gemm_bf16_in_use() == TG_BF16_AMX && k % u->kc != 0 && k % u->kc < 16)
        u = tg__gemm_ukr_bf16(vector_path(), isa);
    return u;
}

/* The small products, and any without a packed bf16 kernel: op(A) and
 * op(B) rounded into scratch a block of K at a time, each block's product
 * added by tg__sgemm. */
static int sgemm_rounded(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                         const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                         float *c, int64_t ldc)
{
    if (m <= 0 || n <= 0 || k <= 0 || alpha == 0)
        return tg__sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    int64_t kb = ROUND_BLOCK / n > 16 ? ROUND_BLOCK / n : 16;
    kb = kb < k ? kb : k;
    float *ra = malloc((size_t)(m * kb) * sizeof *ra), *rb = malloc((size_t)(kb * n) * sizeof *rb);
    int rc = ra && rb ? 0 : -1;
    for (int64_t p0 = 0; rc == 0 && p0 < k; p0 += kb) {
        int64_t w = k - p0 < kb ? k - p0 : kb; /* op(A) m x w, op(B) w x n, compact */
        if (trans_a)
            round_into(ra, a + p0 * lda, w, m, lda);
        else
            round_into(ra, a + p0, m, w, lda);
        if (trans_b)
            round_into(rb, b + p0, n, w, ldb);
        else
            round_into(rb, b + p0 * ldb, w, n, ldb);
        rc = tg__sgemm(trans_a, trans_b, m, n, w, alpha, ra, trans_a ? m : w, rb, trans_b ? w : n,
                       p0 == 0 ? beta : 1.0f, c, ldc);
    }
    free(ra);
    free(rb);
    return rc;
}

int tg__sgemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                   float *c, int64_t ldc)
{
    const struct tg__ukr_bf16 *u = bf16_kernel(k);
    if (!u || alpha == 0 || tg__gemm_small_shape(trans_b, m, n, k))
        return sgemm_rounded(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return packed_bf16(u, tg__gemm_packed_threads(m, n, k), trans_a, trans_b, m, n, k, alpha, a,
                       lda, b, ldb, beta, NULL, NULL, NULL, c, ldc);
}

int tg__sgemm_bias_bf16(bool trans_b, int64_t m, int64_t n, int64_t k, const float *a,
                        int64_t lda, const float *b, int64_t ldb, const float *bias,
                        void (*amap)(float *, int64_t), float *c, int64_t ldc)
{
    const struct tg__ukr_bf16 *u = bf16_kernel(k);
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
    return path == TG_BF16_CONVERTING || (path == TG_BF16_DPBF16 && tg__gemm_has_dpbf16()) ||
           (path == TG_BF16_AMX && tg__gemm_has_amx());
}

/* Whether vdpbf16ps outruns the float32 FMAs that the converting path
 * runs by enough to pay for its packing: the best of three short register
 * loops each (about 0.1 ms in all). On AMD Zen 4 and 5 a vdpbf16ps does
 * twice an FMA's work at the same rate; on an Intel Xeon with AMX (model
 * 167) it runs at half the FMAs' rate, where the float32 kernel on rounded
 * panels is faster. */
#define PEAK_ITERS 1000
static bool dpbf16_pays(void)
{
    double fma = 0, dp = 0;
    for (int i = 0; i < 3; i++) {
        double f = tg__gemm_peak_gflops(false, PEAK_ITERS);
        double d = tg__gemm_peak_gflops(true, PEAK_ITERS);
        fma = f > fma ? f : fma;
        dp = d > dp ? d : dp;
    }
    return dp > 1.25 * fma;
}

/* The best path without AMX, measured once per process: vdpbf16ps where
 * the CPU has it and it pays (with the AVX-512 float32 kernels in use, not
 * the portable ones as under valgrind), else converting. */
static enum tg__bf16_path vector_path(void)
{
    static _Atomic int path = -2;
    if (path == -2)
        path = tg__gemm_isa_in_use() == TG_GEMM_ISA_AVX512 &&
                       path_available(TG_BF16_DPBF16) && dpbf16_pays()
                   ? TG_BF16_DPBF16
                   : TG_BF16_CONVERTING;
    return (enum tg__bf16_path)path;
}

/* AMX where the CPU and the OS allow it, else vector_path's choice;
 * TG_BF16_GEMM=converting in the environment makes it converting. */
static enum tg__bf16_path best_path(void)
{
    const char *env = getenv("TG_BF16_GEMM");
    if (env && strcmp(env, "converting") == 0)
        return TG_BF16_CONVERTING;
    if (tg__gemm_isa_in_use() == TG_GEMM_ISA_AVX512 && path_available(TG_BF16_AMX))
        return TG_BF16_AMX;
    return vector_path();
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
