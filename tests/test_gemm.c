/* The GEMM kernels directly (gemm.h): the built-in and the dispatched
 * products against a naive loop on odd shapes; the thin, narrow, tiny,
 * banded and two-halves kernels; and, on the ISA path named by the
 * program's argument (one meson test a path, SKIP where the CPU lacks it),
 * the packed kernel and what it fuses (a bias row, a map on A, the column
 * sums of a weight gradient). */
#include "testutil.h"

#include "gemm.h"
#include "tg_config.h"

#if TG_HAVE_OPENMP
#include <omp.h>
#endif

#include <stdlib.h>

typedef int (*dgemm_fn)(bool, bool, int64_t, int64_t, int64_t, double, const double *, int64_t,
                        const double *, int64_t, double, double *, int64_t);
typedef int (*sgemm_fn)(bool, bool, int64_t, int64_t, int64_t, float, const float *, int64_t,
                        const float *, int64_t, float, float *, int64_t);

/* C = alpha op(A) op(B) + beta C with padded leading dims (ld = cols + 3),
 * against the naive loop, in both dtypes and every transpose combination. */
static void check_gemm(dgemm_fn dgemm, sgemm_fn sgemm, int64_t m, int64_t n, int64_t k)
{
    const double alpha = 1.5, beta = -0.5;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
            int64_t lda = ac + 3, ldb = bc + 3, ldc = n + 3;
            size_t na = (size_t)(ar * lda + 1), nb = (size_t)(br * ldb + 1);
            size_t nc = (size_t)(m * ldc + 1);
            double *a = malloc(na * sizeof *a), *b = malloc(nb * sizeof *b);
            double *c = malloc(nc * sizeof *c), *c0 = malloc(nc * sizeof *c0);
            float *af = malloc(na * sizeof *af), *bf = malloc(nb * sizeof *bf);
            float *cf = malloc(nc * sizeof *cf);
            for (size_t i = 0; i < na; i++)
                af[i] = (float)(a[i] = (double)((i * 7919) % 23) / 11.0 - 1.0);
            for (size_t i = 0; i < nb; i++)
                bf[i] = (float)(b[i] = (double)((i * 104729) % 19) / 9.0 - 1.0);
            for (size_t i = 0; i < nc; i++)
                cf[i] = (float)(c[i] = c0[i] = (double)(i % 5) - 2.0);
            ck_assert_int_eq(dgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), 0);
            ck_assert_int_eq(sgemm(ta, tb, m, n, k, (float)alpha, af, lda, bf, ldb, (float)beta,
                                   cf, ldc), 0);
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++) {
                    double s = 0;
                    for (int64_t p = 0; p < k; p++)
                        s += (ta ? a[p * lda + i] : a[i * lda + p]) *
                             (tb ? b[j * ldb + p] : b[p * ldb + j]);
                    double want = alpha * s + beta * c0[i * ldc + j];
                    ck_assert_msg(fabs(c[i * ldc + j] - want) <= 1e-10 * (1 + fabs(want)),
                                  "f64 %lldx%lldx%lld ta=%d tb=%d (%lld,%lld): %g vs %g",
                                  (long long)m, (long long)k, (long long)n, ta, tb,
                                  (long long)i, (long long)j, c[i * ldc + j], want);
                    double tol32 = 1e-5 * (1 + sqrt((double)k)) * (1 + fabs(want));
                    ck_assert_msg(fabs(cf[i * ldc + j] - want) <= tol32,
                                  "f32 %lldx%lldx%lld ta=%d tb=%d (%lld,%lld): %g vs %g",
                                  (long long)m, (long long)k, (long long)n, ta, tb,
                                  (long long)i, (long long)j, cf[i * ldc + j], want);
                }
            /* the padding between rows is never written */
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = n; j < ldc && i * ldc + j < (int64_t)nc; j++)
                    ck_assert(c[i * ldc + j] == c0[i * ldc + j]);
            free(a); free(b); free(c); free(c0); free(af); free(bf); free(cf);
        }
}

/* gemm_small.c takes the first two rows. Thin products (op(A) of 1 to 4
 * rows): many column chunks, a k that is not a multiple of 16, and one below
 * 16. Tiny ones (at most 64^3 multiply-adds before the built-in kernel, a
 * quarter of that before OpenBLAS): n past one 64-column block, n below one
 * vector, k of 1, whole 16-column vectors read in place, row counts that
 * leave 1 to 3 rows after the blocks of 4, and 64^3 itself. Narrow ones
 * (n <= 32, k <= 64, past the tiny limit) go to the tiny kernel in blocks of
 * rows split over the threads: 700 x 30 x 50 in every build, 333 x 7 x 64
 * in front of OpenBLAS. Small results from a long reduction (m, n <= 64,
 * k >= 64 and >= 4 m, 4 n) go to the tiny kernel in two halves of k: 32 x 32 x 700 and
 * 7 x 32 x 300 read B in place (n a multiple of 16), 48 x 40 x 200 copies
 * it. The packed kernel takes the rest. */
static const int64_t gemm_shapes[][3] = {/* m, n, k */
    {1, 1153, 385}, {4, 70, 17}, {3, 65, 7}, {2, 200, 1000}, {1, 1, 1},
    {5, 130, 20}, {7, 5, 13}, {65, 17, 33}, {6, 8, 1}, {200, 3, 70},
    {97, 130, 257}, {13, 2050, 3}, {64, 64, 64}, {63, 64, 65}, {66, 50, 64},
    {61, 96, 40}, {62, 32, 33}, {700, 30, 50}, {333, 7, 64}, {32, 32, 700}, {48, 40, 200},
    {7, 32, 300}};
#define N_GEMM (int)(sizeof gemm_shapes / sizeof gemm_shapes[0])

START_TEST(builtin_gemm_matches_naive_loop)
{
    const int64_t *s = gemm_shapes[_i];
    check_gemm(tg__dgemm_builtin, tg__sgemm_builtin, s[0], s[1], s[2]);
}
END_TEST

START_TEST(dispatched_gemm_matches_naive_loop)
{
    const int64_t *s = gemm_shapes[_i];
    check_gemm(tg__dgemm, tg__sgemm, s[0], s[1], s[2]);
}
END_TEST

START_TEST(gemm_with_empty_dims)
{
    double c[6] = {1, 2, 3, 4, 5, 6}, a[1] = {0}, b[1] = {0};
    float cf[6] = {1, 2, 3, 4, 5, 6};
    /* K = 0 with beta 0: zeros, whatever C held */
    c[0] = NAN;
    ck_assert_int_eq(tg__dgemm_builtin(false, false, 2, 3, 0, 1.0, a, 1, b, 3, 0.0, c, 3), 0);
    for (int i = 0; i < 6; i++)
        ck_assert(c[i] == 0);
    ck_assert_int_eq(tg__gemm(TG_FLOAT32, false, false, false, 2, 3, 0, 1.0, a, 1, b, 3, 2.0, cf, 3), 0);
    for (int i = 0; i < 6; i++)
        ck_assert(cf[i] == 2.0f * (float)(i + 1));
    /* M = 0 or N = 0: nothing is touched */
    double d[2] = {7, 8};
    ck_assert_int_eq(tg__dgemm(false, false, 0, 2, 3, 1.0, a, 3, b, 2, 0.0, d, 2), 0);
    ck_assert_int_eq(tg__dgemm(false, false, 2, 0, 3, 1.0, a, 3, b, 1, 0.0, d, 1), 0);
    ck_assert(d[0] == 7 && d[1] == 8);
    /* beta 0 never reads C: NaN there does not leak into the result */
    double one[1] = {2}, nan_c[1] = {NAN};
    ck_assert_int_eq(tg__dgemm_builtin(false, false, 1, 1, 1, 1.0, one, 1, one, 1, 0.0, nan_c, 1),
                     0);
    ck_assert(nan_c[0] == 4);
    ck_assert_int_eq(tg__gemm(TG_INT64, false, false, false, 1, 1, 1, 1.0, one, 1, one, 1, 0.0, nan_c, 1),
                     -1);
}
END_TEST

/* Shapes that cross every blocking boundary of every ISA path (tiles of
 * 14x32, 14x16, 6x16, 6x8; mc up to 168, kc 256 or 512, slices of B about
 * 2048 deep, nc 2048/3072), leave edge tiles in both directions, are long
 * enough to be split over threads (by rows, and by columns when M is one
 * tile), or have M or N equal to 1. */
static const int64_t isa_shapes[][3] = {/* m, n, k */
    {1, 1, 1},      {1, 70, 300},  {70, 1, 300},  {15, 33, 5},    {170, 40, 260},
    {29, 3100, 3},  {5, 2100, 300}, {300, 67, 100}, {40, 50, 1100}, {20, 40, 2200}};
#define N_ISA_SHAPES (int)(sizeof isa_shapes / sizeof isa_shapes[0])
/* The ISA paths, one meson test each (tests/meson.build); the path cases
 * force the one the program was started for, which main has seen the CPU
 * has, and put the run-time choice back at their end. */
#define N_ISAS 3
static const char *const isa_names[N_ISAS] = {"portable", "avx2", "avx512"};
static const enum tg__gemm_isa isas[N_ISAS] = {TG_GEMM_ISA_GENERIC, TG_GEMM_ISA_AVX2,
                                               TG_GEMM_ISA_AVX512};
static int the_isa;

static enum tg__gemm_isa use_isa(void)
{
    ck_assert(tg__gemm_force_isa(isas[the_isa]));
    return isas[the_isa];
}

/* The portable path runs everywhere, so its test is never a SKIP. */
START_TEST(portable_path_is_never_refused)
{
    ck_assert(tg__gemm_force_isa(TG_GEMM_ISA_GENERIC));
    ck_assert_int_eq(tg__gemm_isa_in_use(), TG_GEMM_ISA_GENERIC);
    ck_assert(tg__gemm_force_isa(TG_GEMM_ISA_AUTO));
}
END_TEST

/* The path on every shape above. */
START_TEST(every_isa_path_matches_naive_loop_across_blocks)
{
    use_isa();
    const int64_t *s = isa_shapes[_i];
    check_gemm(tg__dgemm_builtin, tg__sgemm_builtin, s[0], s[1], s[2]);
    ck_assert(tg__gemm_force_isa(TG_GEMM_ISA_AUTO));
}
END_TEST

/* Last tiles short of a whole one: 5 whole 14-row tiles of the AVX-512
 * kernel plus 3 to 12 rows, which take its kernels of 4, 7 or 10 rows
 * (writing C straight when the rows fill one, else through the scratch
 * tile) or the whole one, and the other paths' own edges, with beta, and
 * with the bias row straight into C (2 whole 32-column panels). */
START_TEST(short_last_tiles_match_naive_loop)
{
    enum tg__gemm_isa isa = use_isa();
    enum { N = 64, K = 60 };
    static float a[82 * K], b[K * N], bias[N], c[82 * N];
    for (int i = 0; i < 82 * K; i++)
        a[i] = (float)((i * 7919) % 23) / 11.0f - 1.0f;
    for (int i = 0; i < K * N; i++)
        b[i] = (float)((i * 104729) % 19) / 9.0f - 1.0f;
    for (int j = 0; j < N; j++)
        bias[j] = (float)(j % 7) - 3.5f;
    static const int64_t rows[] = {73, 74, 76, 77, 79, 80, 82}; /* 70 + 3, 4, 6, 7, 9, 10, 12 */
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        int64_t m = rows[r];
        check_gemm(tg__dgemm_builtin, tg__sgemm_builtin, m, N, K);
        int rc = tg__sgemm_bias(false, m, N, K, a, K, b, N, bias, NULL, c, N);
        ck_assert_int_eq(rc, isa == TG_GEMM_ISA_GENERIC ? 1 : 0);
        for (int64_t i = 0; rc == 0 && i < m; i++)
            for (int64_t j = 0; j < N; j++) {
                double want = bias[j];
                for (int64_t p = 0; p < K; p++)
                    want += (double)a[i * K + p] * b[p * N + j];
                ck_assert_msg(fabs(c[i * N + j] - want) <= 1e-4 * (1 + fabs(want)),
                              "m=%lld (%lld,%lld): %g vs %g", (long long)m, (long long)i,
                              (long long)j, c[i * N + j], want);
            }
    }
    ck_assert(tg__gemm_force_isa(TG_GEMM_ISA_AUTO));
}
END_TEST

#if TG_HAVE_OPENMP
/* The SIMD packed kernels shared out over two threads, with each thread's
 * last chunk cut into pieces that either thread may take: the same bits as
 * on one thread, and the naive loop's values, for products of 6 row blocks
 * of one panel (3 chunks a thread): one kc piece; two in one slice; and
 * three slices of one piece each (fewer rows than k), whose tails restart
 * each slice. Only with OpenMP, which a one-thread build lacks. */
START_TEST(packed_product_on_two_threads_has_the_bits_of_one)
{
    static const int64_t shapes[3][3] = {{850, 32, 60}, {850, 32, 600}, {850, 32, 1100}};
    const int64_t *s = shapes[_i]; /* m, n, k */
    int64_t m = s[0], n = s[1], k = s[2];
    use_isa();
    size_t na = (size_t)(m * k), nb = (size_t)(k * n), nc = (size_t)(m * n);
    float *a = malloc(na * sizeof *a), *b = malloc(nb * sizeof *b);
    float *c1 = malloc(nc * sizeof *c1), *c2 = malloc(nc * sizeof *c2);
    for (int64_t i = 0; i < m * k; i++)
        a[i] = sinf(0.01f * (float)i);
    for (int64_t i = 0; i < k * n; i++)
        b[i] = cosf(0.37f * (float)i);
    for (int64_t i = 0; i < m * n; i++)
        c1[i] = c2[i] = (float)(i % 3);
    int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    ck_assert_int_eq(tg__sgemm_builtin(false, false, m, n, k, 1.0f, a, k, b, n, 0.5f, c1, n), 0);
    omp_set_num_threads(2);
    ck_assert_int_eq(tg__sgemm_builtin(false, false, m, n, k, 1.0f, a, k, b, n, 0.5f, c2, n), 0);
    omp_set_num_threads(threads);
    ck_assert(memcmp(c1, c2, nc * sizeof *c1) == 0);
    for (int64_t i = 0; i < m; i += 7)
        for (int64_t j = 0; j < n; j++) {
            double want = 0.5 * (double)((i * n + j) % 3);
            for (int64_t p = 0; p < k; p++)
                want += (double)a[i * k + p] * b[p * n + j];
            double tol = 1e-4 * (1 + sqrt((double)k)) * (1 + fabs(want));
            ck_assert_msg(fabs(c2[i * n + j] - want) <= tol,
                          "%lldx%lldx%lld (%lld,%lld): %g vs %g", (long long)m, (long long)n,
                          (long long)k, (long long)i, (long long)j, c2[i * n + j], want);
        }
    free(a), free(b), free(c1), free(c2);
    ck_assert(tg__gemm_force_isa(TG_GEMM_ISA_AUTO));
}
END_TEST
#endif

/* A thin product (2 rows) with beta == 0 writes C without reading the NaN
 * it held, for B stored either way. */
START_TEST(thin_gemm_with_beta_zero_ignores_what_c_held)
{
    enum { M = 2, N = 40, K = 21 };
    static float a[M * K], b[N * K], c[M * N];
    for (int i = 0; i < M * K; i++)
        a[i] = (float)(i % 7) - 3;
    for (int i = 0; i < N * K; i++)
        b[i] = (float)(i % 5) - 2;
    for (int tb = 0; tb < 2; tb++) {
        for (int i = 0; i < M * N; i++)
            c[i] = NAN;
        ck_assert_int_eq(tg__sgemm(false, tb, M, N, K, 2.0f, a, K, b, tb ? K : N, 0.0f, c, N), 0);
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double want = 0;
                for (int p = 0; p < K; p++)
                    want += a[i * K + p] * (tb ? b[j * K + p] : b[p * N + j]);
                ck_assert_double_eq_tol(c[i * N + j], 2 * want, 1e-4);
            }
    }
}
END_TEST

/* A row of a thin product with B stored N x K comes out bit for bit the
 * same whether it runs alone or among four rows: each dot is summed in one
 * order whatever M is. K = 1000 reaches the whole groups, the vectors after
 * them and the scalar tail. */
START_TEST(thin_gemm_rows_do_not_depend_on_how_many_run_together)
{
    enum { M = 4, N = 37, K = 1000 };
    static float a[M * K], b[N * K], together[M * N], alone[N];
    for (int i = 0; i < M * K; i++)
        a[i] = sinf((float)i);
    for (int i = 0; i < N * K; i++)
        b[i] = cosf(0.37f * (float)i);
    ck_assert_int_eq(tg__sgemm_thin(false, true, M, N, K, 1.0f, a, K, b, K, 0.0f, together, N), 0);
    for (int i = 0; i < M; i++) {
        ck_assert_int_eq(tg__sgemm_thin(false, true, 1, N, K, 1.0f, a + i * K, K, b, K, 0.0f,
                                        alone, N), 0);
        ck_assert(memcmp(alone, together + i * N, sizeof alone) == 0);
    }
}
END_TEST

/* A narrow product, which the dispatcher splits into blocks of rows over
 * the threads, comes out bit for bit as the tiny kernel makes it on all the
 * rows in one call: how the rows are split never changes a result. */
START_TEST(narrow_gemm_split_over_threads_matches_one_tiny_call)
{
    enum { M = 700, N = 30, K = 50 };
    static float a[M * K], b[N * K], split[M * N], whole[M * N];
    for (int i = 0; i < M * K; i++)
        a[i] = sinf(0.1f * (float)i);
    for (int i = 0; i < N * K; i++)
        b[i] = cosf(0.3f * (float)i);
    for (int tb = 0; tb < 2; tb++) {
        ck_assert_int_eq(tg__sgemm(false, tb, M, N, K, 1.0f, a, K, b, tb ? K : N, 0.0f, split, N),
                         0);
        ck_assert_int_eq(tg__sgemm_tiny(false, tb, M, N, K, 1.0f, a, K, b, tb ? K : N, 0.0f,
                                        whole, N), 0);
        ck_assert(memcmp(split, whole, sizeof split) == 0);
    }
}
END_TEST

/* A weight gradient's shape, [32, rows] by [rows, 32] with A stored
 * transposed, is summed as two halves of its rows, one per thread, each by
 * the tiny kernel, then added: the same bits as those two calls added here,
 * with B read in place (32 x 32 x 700) and copied (64 x 48 x 256, B stored
 * transposed), and with alpha and beta applied after the halves. */
START_TEST(long_reduction_is_two_tiny_halves_added)
{
    static const int64_t shapes[2][3] = {{32, 32, 700}, {64, 48, 256}};
    static float a[700 * 64], b[700 * 48], c[64 * 48], half[2][64 * 48];
    for (int i = 0; i < 700 * 64; i++)
        a[i] = sinf(0.7f * (float)i);
    for (int i = 0; i < 700 * 48; i++)
        b[i] = cosf(0.2f * (float)i);
    for (int tb = 0; tb < 2; tb++) {
        int64_t m = shapes[tb][0], n = shapes[tb][1], k = shapes[tb][2], h = k / 2;
        int64_t ldb = tb ? k : n;
        for (int i = 0; i < m * n; i++)
            c[i] = (float)(i % 3);
        ck_assert_int_eq(tg__sgemm(true, tb, m, n, k, 2.0f, a, m, b, ldb, 0.5f, c, n), 0);
        ck_assert_int_eq(tg__sgemm_tiny(true, tb, m, n, h, 1.0f, a, m, b, ldb, 0.0f, half[0], n),
                         0);
        ck_assert_int_eq(tg__sgemm_tiny(true, tb, m, n, k - h, 1.0f, a + h * m, m,
                                        tb ? b + h : b + h * n, ldb, 0.0f, half[1], n), 0);
        int bad = 0;
        for (int i = 0; i < m * n; i++)
            bad += c[i] != 2.0f * (half[0][i] + half[1][i]) + 0.5f * (float)(i % 3);
        ck_assert_int_eq(bad, 0);
    }
}
END_TEST

/* A product that reads only a band of op(A) gives the bits of the full
 * product when op(A) is zero outside the band: lower bands (row i up to
 * p = i + hi, as a causal tile's weights) and upper ones (from p = i + lo,
 * as their transpose), A stored either way, more rows than p and fewer,
 * row counts that leave 1 to 3 rows after the blocks of 4, and B of whole
 * and partial vectors, and of at most 8 columns (vectors of 8). */
START_TEST(banded_tiny_product_skips_only_zeros)
{
    static const int64_t shapes[][3] = {{42, 11, 31}, {16, 32, 16}, {13, 40, 64}, {7, 16, 9},
                                        {29, 5, 20}};
    static float a[64 * 64], b[64 * 64], full[64 * 64], band[64 * 64];
    for (int sh = 0; sh < 5; sh++)
        for (int ta = 0; ta < 2; ta++)
            for (int upper = 0; upper < 2; upper++) {
                int64_t m = shapes[sh][0], n = shapes[sh][1], k = shapes[sh][2];
                int64_t d = sh - 1, lda = ta ? m : k; /* diagonal offsets -1 to 2 */
                for (int64_t i = 0; i < m; i++)
                    for (int64_t p = 0; p < k; p++) {
                        bool in = upper ? p >= i - d : p <= i + d;
                        a[ta ? p * lda + i : i * lda + p] = in ? sinf((float)(i * 13 + p)) : 0;
                    }
                for (int64_t i = 0; i < k * n; i++)
                    b[i] = cosf(0.37f * (float)i);
                ck_assert_int_eq(tg__sgemm_tiny(ta, false, m, n, k, 1.5f, a, lda, b, n, 0.0f,
                                                full, n), 0);
                ck_assert_int_eq(tg__sgemm_tiny_band(ta, false, m, n, k, 1.5f, a, lda, b, n,
                                                     0.0f, band, n, upper ? -d : INT64_MIN,
                                                     upper ? INT64_MAX : d), 0);
                ck_assert_msg(memcmp(full, band, sizeof(float) * (size_t)(m * n)) == 0,
                              "%lldx%lldx%lld ta=%d upper=%d", (long long)m, (long long)n,
                              (long long)k, ta, upper);
            }
}
END_TEST

/* The lower product writes every element on or below its diagonal (j <=
 * i + hi) with the bits tg__sgemm_tiny gives it, and any other element it
 * writes too; the rest keep the NaN they held. Attention's shapes (B
 * stored by rows, as keys are), with beta, and diagonals from above the
 * first row to past the last column. */
START_TEST(lower_tiny_product_writes_the_lower_part_as_tiny_does)
{
    static const int64_t shapes[][4] = {/* m, n, k, hi */
        {64, 64, 64, 0}, {64, 64, 40, -16}, {37, 50, 20, 5}, {16, 64, 8, -70},
        {64, 48, 33, 100}, {20, 64, 64, -3}};
    static float a[64 * 64], b[64 * 64], full[64 * 64], lower[64 * 64];
    for (int sh = 0; sh < 6; sh++)
        for (int tb = 0; tb < 2; tb++) {
            int64_t m = shapes[sh][0], n = shapes[sh][1], k = shapes[sh][2], hi = shapes[sh][3];
            int64_t ldb = tb ? k : n;
            float beta = tb ? 0.5f : 0.0f;
            for (int64_t i = 0; i < m * k; i++)
                a[i] = sinf(0.11f * (float)i);
            for (int64_t i = 0; i < n * k; i++)
                b[i] = cosf(0.37f * (float)i);
            for (int64_t i = 0; i < m * n; i++)
                full[i] = lower[i] = tb ? (float)(i % 5) : NAN;
            ck_assert_int_eq(tg__sgemm_tiny(false, tb, m, n, k, 1.5f, a, k, b, ldb, beta, full,
                                            n), 0);
            ck_assert_int_eq(tg__sgemm_tiny_lower(false, tb, m, n, k, 1.5f, a, k, b, ldb, beta,
                                                  lower, n, hi), 0);
            int64_t skipped = 0;
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++) {
                    float got = lower[i * n + j], want = full[i * n + j];
                    bool kept = tb ? got == (float)((i * n + j) % 5) && got != want : isnan(got);
                    ck_assert_msg(memcmp(&got, &want, sizeof got) == 0 || (j > i + hi && kept),
                                  "%lldx%lldx%lld hi=%lld tb=%d (%lld,%lld): %g vs %g",
                                  (long long)m, (long long)n, (long long)k, (long long)hi, tb,
                                  (long long)i, (long long)j, got, want);
                    skipped += memcmp(&got, &want, sizeof got) != 0;
                }
            /* the upper part is spared where a whole strip's vector is above it */
            if (hi <= 0 && m == 64 && n == 64)
                ck_assert_int_gt(skipped, 0);
        }
}
END_TEST

/* A small linear layer's two gradient products in one region come out bit
 * for bit as two tg__sgemm calls make them, dx added to what it held:
 * [rows, 32] layers of 32 and of 7 outputs. A layer too wide for the narrow path is left to the caller,
 * and so is every layer in a build without OpenMP. */
START_TEST(linear_grads_in_one_region_match_two_products)
{
    enum { ROWS = 500, IN = 32 };
    static float gy[ROWS * 32], w[32 * IN], x[ROWS * IN];
    static float dx[ROWS * IN], dw[32 * IN], dx2[ROWS * IN], dw2[32 * IN];
    for (int i = 0; i < ROWS * 32; i++)
        gy[i] = sinf(0.3f * (float)i);
    for (int i = 0; i < 32 * IN; i++)
        w[i] = cosf(0.7f * (float)i);
    for (int i = 0; i < ROWS * IN; i++)
        x[i] = sinf(1.1f * (float)i + 0.5f);
#if TG_HAVE_OPENMP
    int threads = omp_get_max_threads();
    omp_set_num_threads(2); /* two threads even on a one-core machine */
#endif
    const int64_t outs[2] = {32, 7};
    for (int o = 0; o < 2; o++) {
        int64_t out = outs[o];
        for (int i = 0; i < ROWS * IN; i++)
            dx[i] = dx2[i] = (float)(i % 7); /* what dx gathered before: added to */
        int rc = tg__sgemm_linear_grads(ROWS, IN, out, gy, w, x, 1.0f, dx, dw);
#if TG_HAVE_OPENMP
        ck_assert_int_eq(rc, 0);
#else
        ck_assert_int_eq(rc, 1); /* no second thread: left to the caller */
        continue;
#endif
        ck_assert_int_eq(tg__sgemm(false, false, ROWS, IN, out, 1.0f, gy, out, w, IN, 1.0f, dx2, IN), 0);
        ck_assert_int_eq(tg__sgemm(true, false, out, IN, ROWS, 1.0f, gy, out, x, IN, 0.0f, dw2, IN), 0);
        ck_assert(memcmp(dx, dx2, sizeof(float) * ROWS * IN) == 0);
        ck_assert(memcmp(dw, dw2, sizeof(float) * (size_t)(out * IN)) == 0);
    }
    ck_assert_int_eq(tg__sgemm_linear_grads(ROWS, 128, 128, gy, w, x, 0.0f, dx, dw), 1);
#if TG_HAVE_OPENMP
    omp_set_num_threads(threads);
#endif
}
END_TEST

/* beta == 0 never reads C (NaN there stays out), K == 0 gives beta * C,
 * and alpha scales: on every ISA path, with edge tiles and padded rows. */
START_TEST(every_isa_path_handles_beta_zero_and_empty_k)
{
    use_isa();
    enum { M = 17, N = 35, K = 9, LD = 40 };
    static float af[M * LD], bf[K * LD], cf[M * LD];
    static double a[M * LD], b[K * LD], c[M * LD];
    for (int i = 0; i < M * LD; i++)
        af[i] = (float)(a[i] = (i % 7) - 3);
    for (int i = 0; i < K * LD; i++)
        bf[i] = (float)(b[i] = (i % 5) - 2);
    for (int i = 0; i < M * LD; i++)
        cf[i] = (float)(c[i] = NAN);
    ck_assert_int_eq(tg__dgemm_builtin(false, false, M, N, K, 2.0, a, LD, b, LD, 0.0, c, LD), 0);
    ck_assert_int_eq(tg__sgemm_builtin(false, false, M, N, K, 2.0f, af, LD, bf, LD, 0.0f, cf, LD),
                     0);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < LD; j++) {
            double want = 0;
            for (int p = 0; p < K; p++)
                want += a[i * LD + p] * b[p * LD + j];
            if (j >= N) { /* the padding is not touched */
                ck_assert(isnan(c[i * LD + j]) && isnan(cf[i * LD + j]));
                continue;
            }
            ck_assert_double_eq(c[i * LD + j], 2 * want);
            ck_assert_float_eq(cf[i * LD + j], (float)(2 * want));
        }
    /* K == 0: C = beta * C, here -1 * (2 * want) */
    ck_assert_int_eq(tg__dgemm_builtin(false, true, M, N, 0, 2.0, a, LD, b, LD, -1.0, c, LD), 0);
    ck_assert_int_eq(tg__sgemm_builtin(true, false, M, N, 0, 2.0f, af, LD, bf, LD, -1.0f, cf, LD),
                     0);
    for (int j = 0; j < N; j++) {
        double want = 0;
        for (int p = 0; p < K; p++)
            want += a[(M - 1) * LD + p] * b[p * LD + j];
        ck_assert_double_eq(c[(M - 1) * LD + j], -2 * want);
        ck_assert_float_eq(cf[(M - 1) * LD + j], (float)(-2 * want));
    }
    ck_assert(tg__gemm_force_isa(TG_GEMM_ISA_AUTO));
}
END_TEST

/* A map for tg__sgemm_bias to apply to A: x^2 + x, which keeps 0. */
static float square_plus(float x)
{
    return x * x + x;
}
static void map_square_plus(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = square_plus(x[i]);
}

/* tg__sgemm_bias on every ISA path: the bias row is added once to every row
 * (with several kc pieces and B slices too), the map (on the second pass)
 * reaches every element of A once, the NaN C held is never read and the
 * padding between rows is not touched. Where it declines (no SIMD kernel,
 * or a product for the thin, tiny or narrow kernels) it returns 1 and
 * leaves C as it was. */
START_TEST(packed_product_adds_the_bias_row_once)
{
    enum tg__gemm_isa isa = use_isa();
    const int64_t *s = isa_shapes[_i];
    int64_t m = s[0], n = s[1], k = s[2], ldc = n + 3;
    for (int pass = 0; pass < 4; pass++) {
        bool tb = pass % 2, mapped = pass >= 2;
        int64_t lda = k + 1, ldb = tb ? k + 2 : n + 2;
        float *a = malloc((size_t)(m * lda) * sizeof *a);
        float *b = malloc((size_t)((tb ? n : k) * ldb) * sizeof *b);
        float *bias = malloc((size_t)n * sizeof *bias), *c = malloc((size_t)(m * ldc) * sizeof *c);
        for (int64_t i = 0; i < m * lda; i++)
            a[i] = (float)((i * 7919) % 23) / 11.0f - 1.0f;
        for (int64_t i = 0; i < (tb ? n : k) * ldb; i++)
            b[i] = (float)((i * 104729) % 19) / 9.0f - 1.0f;
        for (int64_t j = 0; j < n; j++)
            bias[j] = (float)(j % 7) - 3.5f;
        for (int64_t i = 0; i < m * ldc; i++)
            c[i] = NAN;
        int rc = tg__sgemm_bias(tb, m, n, k, a, lda, b, ldb, bias,
                                mapped ? map_square_plus : NULL, c, ldc);
        ck_assert(rc == 0 || rc == 1);
        if (isa == TG_GEMM_ISA_GENERIC)
            ck_assert_int_eq(rc, 1);
        if (n * k >= 40 * 1100) /* too big for the small kernels */
            ck_assert_int_eq(rc, isa == TG_GEMM_ISA_GENERIC ? 1 : 0);
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < ldc; j++) {
                float got = c[i * ldc + j];
                if (rc == 1 || j >= n) {
                    ck_assert(isnan(got));
                    continue;
                }
                double want = bias[j];
                for (int64_t p = 0; p < k; p++)
                    want += (double)(mapped ? square_plus(a[i * lda + p]) : a[i * lda + p]) *
                            (tb ? b[j * ldb + p] : b[p * ldb + j]);
                ck_assert_msg(fabs(got - want) <= 1e-5 * (1 + sqrt((double)k)) * (1 + fabs(want)),
                              "%lldx%lldx%lld tb=%d (%lld,%lld): %g vs %g", (long long)m,
                              (long long)n, (long long)k, tb, (long long)i, (long long)j, got,
                              want);
            }
        free(a), free(b), free(bias), free(c);
    }
    ck_assert(tg__gemm_force_isa(TG_GEMM_ISA_AUTO));
}
END_TEST

/* tg__sgemm_weight_grads on every ISA path: dw matches the naive gy^T x
 * and each column sum of gy has the bits of a double loop over the rows in
 * order, across edge tiles and several kc pieces; where it declines it
 * returns 1 having written nothing. */
START_TEST(weight_and_bias_grads_in_one_pass_match_separate_sums)
{
    enum tg__gemm_isa isa = use_isa();
    static const int64_t shapes[3][3] = {{300, 67, 100}, {1100, 40, 50}, {37, 30, 20}};
    const int64_t *s = shapes[_i];
    int64_t rows = s[0], out = s[1], in = s[2];
    float *gy = malloc((size_t)(rows * out) * sizeof *gy);
    float *x = malloc((size_t)(rows * in) * sizeof *x), *dw = malloc((size_t)(out * in) * sizeof *dw);
    double *sums = malloc((size_t)out * sizeof *sums);
    for (int64_t i = 0; i < rows * out; i++)
        gy[i] = (float)((i * 7919) % 23) / 7.0f - 1.5f;
    for (int64_t i = 0; i < rows * in; i++)
        x[i] = (float)((i * 104729) % 19) / 9.0f - 1.0f;
    for (int64_t i = 0; i < out * in; i++)
        dw[i] = NAN;
    for (int64_t j = 0; j < out; j++)
        sums[j] = NAN;
    int rc = tg__sgemm_weight_grads(rows, out, in, gy, x, dw, sums);
    ck_assert(rc == 0 || rc == 1);
    if (isa == TG_GEMM_ISA_GENERIC || rows * out * in < 64 * 64 * 64)
        ck_assert_int_eq(rc, 1);
    else
        ck_assert_int_eq(rc, 0);
    for (int64_t j = 0; j < out; j++) {
        if (rc == 1) {
            ck_assert(isnan(sums[j]));
            continue;
        }
        double want = 0;
        for (int64_t r = 0; r < rows; r++)
            want += (double)gy[r * out + j];
        ck_assert_msg(sums[j] == want, "sum %lld: %.17g vs %.17g", (long long)j, sums[j], want);
        for (int64_t c = 0; c < in; c++) {
            double w = 0;
            for (int64_t r = 0; r < rows; r++)
                w += (double)gy[r * out + j] * x[r * in + c];
            ck_assert_msg(fabs(dw[j * in + c] - w) <= 1e-5 * (1 + sqrt((double)rows)) * (1 + fabs(w)),
                          "dw (%lld,%lld): %g vs %g", (long long)j, (long long)c, dw[j * in + c], w);
        }
    }
    free(gy), free(x), free(dw), free(sums);
    ck_assert(tg__gemm_force_isa(TG_GEMM_ISA_AUTO));
}
END_TEST

int main(int argc, char **argv)
{
    the_isa = test_path_arg(argc, argv, isa_names, N_ISAS);
    if (the_isa >= 0 && !tg__gemm_force_isa(isas[the_isa]))
        return skip_path("gemm", isa_names[the_isa]);
    tg__gemm_force_isa(TG_GEMM_ISA_AUTO);
    Suite *s = suite_create("gemm");
    if (the_isa < 0) {
        TCase *gemm = tcase_checked("gemm");
        tcase_add_loop_test(gemm, builtin_gemm_matches_naive_loop, 0, N_GEMM);
        tcase_add_loop_test(gemm, dispatched_gemm_matches_naive_loop, 0, N_GEMM);
        tcase_add_test(gemm, thin_gemm_with_beta_zero_ignores_what_c_held);
        tcase_add_test(gemm, thin_gemm_rows_do_not_depend_on_how_many_run_together);
        tcase_add_test(gemm, narrow_gemm_split_over_threads_matches_one_tiny_call);
        tcase_add_test(gemm, long_reduction_is_two_tiny_halves_added);
        tcase_add_test(gemm, linear_grads_in_one_region_match_two_products);
        tcase_add_test(gemm, banded_tiny_product_skips_only_zeros);
        tcase_add_test(gemm, lower_tiny_product_writes_the_lower_part_as_tiny_does);
        tcase_add_test(gemm, gemm_with_empty_dims);
        tcase_add_test(gemm, portable_path_is_never_refused);
        tcase_set_timeout(gemm, 60);
        suite_add_tcase(s, gemm);
        return run_suite(s);
    }
    TCase *isa = tcase_checked(isa_names[the_isa]);
    tcase_add_loop_test(isa, every_isa_path_matches_naive_loop_across_blocks, 0, N_ISA_SHAPES);
    tcase_add_test(isa, every_isa_path_handles_beta_zero_and_empty_k);
    tcase_add_test(isa, short_last_tiles_match_naive_loop);
#if TG_HAVE_OPENMP /* without it there is only one thread */
    if (isas[the_isa] != TG_GEMM_ISA_GENERIC) /* the SIMD packed kernels' split */
        tcase_add_loop_test(isa, packed_product_on_two_threads_has_the_bits_of_one, 0, 3);
#endif
    tcase_add_loop_test(isa, packed_product_adds_the_bias_row_once, 0, N_ISA_SHAPES);
    tcase_add_loop_test(isa, weight_and_bias_grads_in_one_pass_match_separate_sums, 0, 3);
    tcase_set_timeout(isa, 60);
    suite_add_tcase(s, isa);
    return run_suite(s);
}
