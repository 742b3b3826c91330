/* Row-major GEMM on raw buffers (see gemm.h): the small kernels
 * (gemm_small.c), packed SIMD panels (gemm_packed_tmpl.h, gemm_x86.c) where the
 * CPU allows, the portable blocked kernel of gemm_kernel_tmpl.h elsewhere, and
 * cblas_sgemm/cblas_dgemm for what the build's OpenBLAS is ahead on. */
#include "gemm.h"
#include "gemm_x86.h"
#include "internal.h"

#include "tg_config.h"

#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#if TG_HAVE_OPENMP
#include <omp.h>
#define GEMM_THREAD_NUM() omp_get_thread_num()
#define GEMM_NUM_THREADS() omp_get_num_threads()
#define GEMM_IN_PARALLEL() omp_in_parallel()
#else
#define GEMM_IN_PARALLEL() 0
#define GEMM_THREAD_NUM() 0
#define GEMM_NUM_THREADS() 1
#endif

#if TG_HAVE_BLAS
#include <cblas.h>
#endif

/* Valgrind runs FMA instructions through a helper call per element, which
 * makes the SIMD kernels slower there than the portable one by far: under
 * valgrind the run-time choice is the portable kernel. */
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif
#ifdef RUNNING_ON_VALGRIND
#define UNDER_VALGRIND() (RUNNING_ON_VALGRIND != 0)
#else
#define UNDER_VALGRIND() 0
#endif

/* Blocking of the portable kernel (gemm_kernel_tmpl.h), in elements; the SIMD
 * kernels carry their own (gemm_x86.c). A KC x NR panel of B
 * (8 KiB in float) sits in L1 while an MC x KC block of A (about 100-200
 * KiB) streams from L2; NC bounds the packed B slice. NT is the width of
 * one thread's tile of C. */
#define GEMM_KC 256
#define GEMM_MC 96
#define GEMM_NC 2048
/* The vector width the micro-kernel is written for (gemm_kernel_tmpl.h). */
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
#include "gemm_kernel_tmpl.h"
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
#include "gemm_kernel_tmpl.h"
#undef GEMM_T
#undef GEMM_FN
#undef GEMM_MR
#undef GEMM_NR
#undef GEMM_NT

#define GEMM_T float
#define GEMM_FN(name) name##_f32
#define GEMM_UKR struct tg__ukr_f32
#include "gemm_packed_tmpl.h"
#undef GEMM_T
#undef GEMM_FN
#undef GEMM_UKR

#define GEMM_T double
#define GEMM_FN(name) name##_f64
#define GEMM_UKR struct tg__ukr_f64
#include "gemm_packed_tmpl.h"
#undef GEMM_T
#undef GEMM_FN
#undef GEMM_UKR

/* Threads for the packed kernel: one per GEMM_THREAD_WORK multiply-adds up
 * to the OpenMP limit, and one inside a parallel region (a stack of small
 * products already split over threads) so regions never nest. */
#define GEMM_THREAD_WORK (96.0 * 96.0 * 96.0)
static int packed_threads(int64_t m, int64_t n, int64_t k)
{
#if TG_HAVE_OPENMP
    double work = (double)m * (double)n * (double)k;
    if (omp_in_parallel() || work < 2 * GEMM_THREAD_WORK)
        return 1;
    int nt = omp_get_max_threads();
    return work / GEMM_THREAD_WORK < nt ? (int)(work / GEMM_THREAD_WORK) : nt;
#else
    (void)m, (void)n, (void)k;
    return 1;
#endif
}

/* The ISA in use: -2 until first asked, then the best one the CPU has, or
 * whatever tg__gemm_force_isa set. Atomic because the first calls may come
 * from several threads at once; they all store the same answer. */
static _Atomic int gemm_isa = -2;

static enum tg__gemm_isa current_isa(void)
{
    int isa = gemm_isa;
    if (isa == -2)
        gemm_isa = isa = UNDER_VALGRIND()                             ? TG_GEMM_ISA_GENERIC
                         : tg__gemm_isa_available(TG_GEMM_ISA_AVX512) ? TG_GEMM_ISA_AVX512
                         : tg__gemm_isa_available(TG_GEMM_ISA_AVX2) ? TG_GEMM_ISA_AVX2
                                                                     : TG_GEMM_ISA_GENERIC;
    return (enum tg__gemm_isa)isa;
}

bool tg__gemm_force_isa(enum tg__gemm_isa isa)
{
    if (isa == TG_GEMM_ISA_AUTO) {
        gemm_isa = -2;
        return true;
    }
    if (!tg__gemm_isa_available(isa))
        return false;
    gemm_isa = isa;
    return true;
}

enum tg__gemm_isa tg__gemm_isa_in_use(void)
{
    return current_isa();
}

/* Narrow products: at most NARROW_MAX_N columns from a reduction of at most
 * NARROW_MAX_K, as in the projections of a small model ([rows, 32] by
 * [32, 32]), up to NARROW_MAX_WORK multiply-adds. The tiny kernel takes
 * them in blocks of rows, one per thread of the team: for such shapes a
 * threaded BLAS spends longer sharing the work out than doing it. Every
 * element is summed the same way however the rows are split, so any thread
 * count gives the same bits. */
#define NARROW_MAX_N 32
#define NARROW_MAX_K 64
#define NARROW_MAX_WORK (16.0 * 64 * 64 * 64)
/* Multiply-adds below which a narrow product stays on one thread. */
#define NARROW_PARALLEL_MIN (64.0 * 1024)

static int sgemm_narrow(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                        const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                        float *c, int64_t ldc)
{
    int64_t parts = (double)m * (double)n * (double)k >= NARROW_PARALLEL_MIN ? tg__threads_free() : 1;
    if (parts > m / 16)
        parts = m / 16 > 1 ? m / 16 : 1;
    if (parts == 1)
        return tg__sgemm_tiny(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
#pragma omp parallel for num_threads(parts) schedule(static)
    for (int64_t q = 0; q < parts; q++) {
        int64_t i0 = m * q / parts, i1 = m * (q + 1) / parts;
        tg__sgemm_tiny(trans_a, trans_b, i1 - i0, n, k, alpha, trans_a ? a + i0 : a + i0 * lda,
                       lda, b, ldb, beta, c + i0 * ldc, ldc);
    }
    return 0;
}

/* Small results from a long reduction: a small model's weight gradient,
 * [32, rows] by [rows, 32], with k at least LONG_K_RATIO times m and n (an
 * attention tile, k <= 64 by 64 x 64 or a head dim of 128 by 64 x 64, is
 * not one). The tiny kernel reads B in place when B's rows are whole
 * vectors (else it copies op(B), which must then fit its K limit); see
 * sgemm_halves. */
#define LONG_MAX_MN (TG_GEMM_TINY_MAX_N)
#define LONG_MIN_K 64
#define LONG_K_RATIO 4
#define LONG_MAX_WORK (64.0 * 64 * 4096)

static bool long_reduction(bool trans_b, int64_t m, int64_t n, int64_t k)
{
    bool b_in_place = !trans_b && n % 16 == 0;
    return m <= LONG_MAX_MN && n <= LONG_MAX_MN && k >= LONG_MIN_K &&
           k >= LONG_K_RATIO * (m > n ? m : n) &&
           (b_in_place || k <= TG_GEMM_TINY_MAX_K) &&
           (double)m * (double)n * (double)k <= LONG_MAX_WORK;
}

/* Half h (0 or 1) of a long reduction's k: op(A)[:, half] op(B)[half, :]
 * into part [m, n]. */
static void long_half(int h, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                      const float *a, int64_t lda, const float *b, int64_t ldb, float *part)
{
    int64_t p0 = k * h / 2, p1 = k * (h + 1) / 2;
    const float *ah = trans_a ? a + p0 * lda : a + p0;
    const float *bh = trans_b ? b + p0 : b + p0 * ldb;
    tg__sgemm_tiny(trans_a, trans_b, m, n, p1 - p0, 1.0f, ah, lda, bh, ldb, 0.0f, part, n);
}

/* A long reduction as two halves of its k, each into its own block on its
 * own thread when there are two, then C = alpha (first + second) + beta C.
 * Each thread reads only its half of op(A)'s columns and op(B)'s rows,
 * which the ops before it, splitting their rows the same way, left in that
 * thread's cache: splitting C's rows instead made each thread read all of
 * both, half of it from the other core. The halves are added in one order
 * on any number of threads, so the bits do not depend on it. */
/* C = alpha (part[0] + part[1]) + beta C, the halves added in one order. */
static void add_halves(float part[2][LONG_MAX_MN * LONG_MAX_MN], int64_t m, int64_t n,
                       float alpha, float beta, float *c, int64_t ldc)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float s = part[0][i * n + j] + part[1][i * n + j];
            c[i * ldc + j] = beta == 0 ? alpha * s : alpha * s + beta * c[i * ldc + j];
        }
}

static int sgemm_halves(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                        const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                        float *c, int64_t ldc)
{
    float part[2][LONG_MAX_MN * LONG_MAX_MN];
    if (tg__threads_free() > 1) {
#pragma omp parallel for num_threads(2) schedule(static)
        for (int h = 0; h < 2; h++)
            long_half(h, trans_a, trans_b, m, n, k, a, lda, b, ldb, part[h]);
    } else {
        for (int h = 0; h < 2; h++)
            long_half(h, trans_a, trans_b, m, n, k, a, lda, b, ldb, part[h]);
    }
    add_halves(part, m, n, alpha, beta, c, ldc);
    return 0;
}

/* Whether sgemm_small would send op(A) @ op(B) (no transposes) of this
 * shape to the narrow path. */
static bool narrow_shape(int64_t m, int64_t n, int64_t k)
{
    return n <= NARROW_MAX_N && k <= NARROW_MAX_K &&
           (double)m * (double)n * (double)k <= NARROW_MAX_WORK;
}

int tg__sgemm_linear_grads(int64_t rows, int64_t in, int64_t out, const float *gy,
                           const float *w, const float *x, float beta_dx, float *dx, float *dw)
{
    double work = (double)rows * (double)in * (double)out;
    if (rows < 2 * 16 || !narrow_shape(rows, in, out) || !long_reduction(false, out, in, rows) ||
        work < NARROW_PARALLEL_MIN || tg__threads_free() < 2)
        return 1;
    float part[2][LONG_MAX_MN * LONG_MAX_MN];
#pragma omp parallel for num_threads(2) schedule(static)
    for (int h = 0; h < 2; h++) {
        int64_t r0 = rows * h / 2, r1 = rows * (h + 1) / 2;
        tg__sgemm_tiny(false, false, r1 - r0, in, out, 1.0f, gy + r0 * out, out, w, in, beta_dx,
                       dx + r0 * in, in);
        long_half(h, true, false, out, in, rows, gy, out, x, in, part[h]);
    }
    add_halves(part, out, in, 1.0f, 0.0f, dw, in);
    return 0;
}

/* Thin and tiny float32 products go to gemm_small.c, with or without BLAS:
 * its result (0 or -1), or 1 when the product is neither. Tiny means at most
 * tiny_work multiply-adds: TG_GEMM_TINY_WORK in front of the built-in packed
 * kernel, which tiny beats up to 64^3 (an attention tile), and a quarter of
 * that in front of OpenBLAS, which is ahead from 64^3 on. */
/* Few enough multiply-adds, none too long a reduction, for the tiny kernel. */
static bool tiny_shape(double tiny_work, int64_t m, int64_t n, int64_t k)
{
    return k <= TG_GEMM_TINY_MAX_K && (double)m * (double)n * (double)k <= tiny_work;
}

/* Whether sgemm_small takes an m x n x k product (m, n, k > 0). */
static bool small_shape(double tiny_work, bool trans_b, int64_t m, int64_t n, int64_t k)
{
    return m <= TG_GEMM_THIN_M || long_reduction(trans_b, m, n, k) ||
           tiny_shape(tiny_work, m, n, k) || narrow_shape(m, n, k);
}

bool tg__gemm_small_shape(bool trans_b, int64_t m, int64_t n, int64_t k)
{
    return m <= 0 || n <= 0 || k <= 0 || small_shape(TG_GEMM_TINY_WORK, trans_b, m, n, k);
}

int tg__gemm_packed_threads(int64_t m, int64_t n, int64_t k)
{
    return packed_threads(m, n, k);
}

static int sgemm_small(double tiny_work, bool trans_a, bool trans_b, int64_t m, int64_t n,
                       int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                       int64_t ldb, float beta, float *c, int64_t ldc)
{
    if (m <= 0 || n <= 0 || k <= 0 || alpha == 0)
        return 1;
    if (m <= TG_GEMM_THIN_M)
        return tg__sgemm_thin(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (long_reduction(trans_b, m, n, k)) /* first: the same halves with or without BLAS */
        return sgemm_halves(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (tiny_shape(tiny_work, m, n, k))
        return tg__sgemm_tiny(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (narrow_shape(m, n, k))
        return sgemm_narrow(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return 1;
}

int tg__sgemm_builtin(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                      const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                      float *c, int64_t ldc)
{
    int small = sgemm_small(TG_GEMM_TINY_WORK, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb,
                            beta, c, ldc);
    if (small != 1)
        return small;
    const struct tg__ukr_f32 *u = tg__gemm_ukr_f32(current_isa());
    if (!u || m <= 0 || n <= 0 || k <= 0 || alpha == 0)
        return blocked_f32(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return packed_f32(u, packed_threads(m, n, k), trans_a, trans_b, m, n, k, alpha, a, lda, b,
                      ldb, beta, NULL, NULL, NULL, c, ldc);
}

int tg__dgemm_builtin(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                      double alpha, const double *a, int64_t lda, const double *b, int64_t ldb,
                      double beta, double *c, int64_t ldc)
{
    const struct tg__ukr_f64 *u = tg__gemm_ukr_f64(current_isa());
    if (!u || m <= 0 || n <= 0 || k <= 0 || alpha == 0)
        return blocked_f64(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return packed_f64(u, packed_threads(m, n, k), trans_a, trans_b, m, n, k, alpha, a, lda, b,
                      ldb, beta, NULL, NULL, NULL, c, ldc);
}

#if TG_HAVE_BLAS
/* BLAS takes int sizes and wants no empty dims (the kernel handles those). */
static bool blas_fits(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc)
{
    return m > 0 && n > 0 && k > 0 && m <= INT_MAX && n <= INT_MAX && k <= INT_MAX &&
           lda <= INT_MAX && ldb <= INT_MAX && ldc <= INT_MAX;
}
#endif

/* The packed kernel with SIMD code for this CPU, or NULL (portable code
 * only, or under valgrind). */
static const struct tg__ukr_f32 *simd_kernel_f32(void)
{
    return tg__gemm_ukr_f32(current_isa());
}

#if TG_HAVE_BLAS
/* Whether OpenBLAS's kernels for this CPU are as wide as the built-in
 * ones: OpenBLAS picks them by CPU model, and on a CPU it does not know it
 * falls back to narrower ones (0.3.21 runs its SSE3 "Prescott" kernels on
 * an Intel Xeon of model 207, where its A^T products fall several times
 * behind the packed kernel, and its AVX2 ones on AMD Zen 5). Core names as
 * openblas_get_corename() gives them. */
static bool blas_as_wide_as_builtin(void)
{
    static const char *const avx512_cores[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
    static const char *const avx2_cores[] = {"Haswell", "Zen", "SkylakeX", "Cooperlake",
                                             "SapphireRapids"};
    const char *core = openblas_get_corename();
    enum tg__gemm_isa isa = current_isa();
    const char *const *names = isa == TG_GEMM_ISA_AVX512 ? avx512_cores : avx2_cores;
    size_t count = isa == TG_GEMM_ISA_AVX512 ? sizeof avx512_cores / sizeof *avx512_cores
                                             : sizeof avx2_cores / sizeof *avx2_cores;
    for (size_t i = 0; core && i < count; i++)
        if (strcasecmp(core, names[i]) == 0)
            return true;
    return false;
}
#endif

bool tg__gemm_blas_takes_transposed_a(void)
{
#if TG_HAVE_BLAS
    return simd_kernel_f32() == NULL || blas_as_wide_as_builtin();
#else
    return false;
#endif
}

int tg__sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
              int64_t ldc)
{
#if TG_HAVE_BLAS
    double tiny_work = TG_GEMM_TINY_WORK / 4;
#else
    double tiny_work = TG_GEMM_TINY_WORK;
#endif
    int small = sgemm_small(tiny_work, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c,
                            ldc);
    if (small != 1)
        return small;
#if TG_HAVE_BLAS
    /* With SIMD code the built-in kernels are ahead of OpenBLAS on products
     * whose A is not transposed: tiny up to 64^3, packed from 128^3 (by
     * 1-5% at 2048 x 1152 x 384, and it writes a C of beta 0 in one pass
     * where OpenBLAS zeroes it first). OpenBLAS keeps the A^T B products
     * that tg__sgemm_weight_grads does not take when its kernels for this
     * CPU are as wide as the built-in ones: there the packed kernel is
     * level with it from 384 rows of A^T and behind it on a tied head's
     * 65 x 384 x 2048 (bench/results). Where OpenBLAS runs
     * narrower kernels than the CPU has, the built-in ones take them too. */
    if (simd_kernel_f32() && (!trans_a || !tg__gemm_blas_takes_transposed_a()))
        return tg__sgemm_builtin(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (blas_fits(m, n, k, lda, ldb, ldc)) {
        cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                    trans_b ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k, alpha, a,
                    (int)lda, b, (int)ldb, beta, c, (int)ldc);
        return 0;
    }
#endif
    return tg__sgemm_builtin(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

int tg__sgemm_bias(bool trans_b, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                   const float *b, int64_t ldb, const float *bias, void (*amap)(float *, int64_t),
                   float *c, int64_t ldc)
{
    const struct tg__ukr_f32 *u = simd_kernel_f32();
    if (!u || m <= 0 || n <= 0 || k <= 0 || small_shape(TG_GEMM_TINY_WORK, trans_b, m, n, k))
        return 1;
    return packed_f32(u, packed_threads(m, n, k), false, trans_b, m, n, k, 1.0f, a, lda, b, ldb,
                      0.0f, bias, amap, NULL, c, ldc);
}

int tg__sgemm_weight_grads(int64_t rows, int64_t out, int64_t in, const float *gy,
                           const float *x, float *dw, double *gy_sums)
{
    const struct tg__ukr_f32 *u = simd_kernel_f32();
    if (!u || rows <= 0 || out <= 0 || in <= 0 ||
        small_shape(TG_GEMM_TINY_WORK, false, out, in, rows))
        return 1;
    memset(gy_sums, 0, (size_t)out * sizeof *gy_sums);
    return packed_f32(u, packed_threads(out, in, rows), true, false, out, in, rows, 1.0f, gy, out,
                      x, in, 0.0f, NULL, NULL, gy_sums, dw, in);
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
    return tg__dgemm_builtin(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
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
