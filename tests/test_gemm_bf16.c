/* The bfloat16 products (gemm.h: tg__sgemm_bf16, tg__sgemm_bias_bf16,
 * tg__gemm_p) and the conversions they round with (bf16.h): every shape
 * class on the path named by the program's argument (one meson test a path,
 * SKIP where the CPU lacks it), against float64 products of the rounded
 * operands (float32 accumulation's tolerance) and of the unrounded ones
 * (bfloat16's). */
#include "testutil.h"
#include "bf16_testutil.h"

#include "bf16.h"
#include "gemm.h"

#include <stdlib.h>
#include <string.h>

static uint32_t bits_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float float_of(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

START_TEST(bf16_conversion_rounds_to_nearest_even)
{
    /* 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: to the even one, 1 */
    ck_assert_uint_eq(tg__bf16_from_f32(1.0f + 0x1p-8f), 0x3f80);
    /* 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 */
    ck_assert_uint_eq(tg__bf16_from_f32(1.0f + 0x3p-8f), 0x3f82);
    /* just past halfway rounds up, just short of it down */
    ck_assert_uint_eq(tg__bf16_from_f32(float_of(0x3f808001u)), 0x3f81);
    ck_assert_uint_eq(tg__bf16_from_f32(float_of(0x3f807fffu)), 0x3f80);
    ck_assert_uint_eq(tg__bf16_from_f32(-1.0f - 0x3p-8f), 0xbf82);
    ck_assert(tg__f32_from_bf16(0x3f82) == 1.0f + 0x1p-6f);
    ck_assert(tg__f32_from_bf16(0xc000) == -2.0f);
}
END_TEST

START_TEST(bf16_conversion_keeps_nan_inf_and_denormals)
{
    ck_assert_uint_eq(tg__bf16_from_f32(INFINITY), 0x7f80);
    ck_assert_uint_eq(tg__bf16_from_f32(-INFINITY), 0xff80);
    /* past the largest bfloat16 (0x7f7f): infinite */
    ck_assert_uint_eq(tg__bf16_from_f32(float_of(0x7f7fffffu)), 0x7f80);
    /* a NaN whose payload is all in the lower half must not become inf */
    ck_assert(isnan(tg__f32_from_bf16(tg__bf16_from_f32(float_of(0x7f800001u)))));
    ck_assert(isnan(tg__f32_from_bf16(tg__bf16_from_f32(float_of(0xffffffffu)))));
    ck_assert(isnan(tg__f32_from_bf16(tg__bf16_from_f32(NAN))));
    /* denormals round on their bits like any other value: not flushed */
    ck_assert_uint_eq(tg__bf16_from_f32(float_of(0x00018000u)), 0x0002);
    ck_assert_uint_eq(tg__bf16_from_f32(float_of(0x00010000u)), 0x0001);
    ck_assert_uint_eq(tg__bf16_from_f32(float_of(0x00000001u)), 0x0000);
    ck_assert_uint_eq(tg__bf16_from_f32(float_of(0x80010000u)), 0x8001);
    ck_assert_uint_eq(tg__bf16_from_f32(-0.0f), 0x8000);
}
END_TEST

START_TEST(bf16_round_in_place_matches_the_scalar_conversion)
{
    enum { N = 4099 }; /* not a multiple of any vector */
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    uint32_t s = 12345;
    for (int i = 0; i < N; i++) {
        s = s * 1664525u + 1013904223u;
        uint32_t u = s;
        if (i % 7 == 0) /* ties, NaNs, infinities, denormals */
            u = (u & 0xffff0000u) | 0x8000u;
        if (i % 11 == 0)
            u |= 0x7f800000u;
        if (i % 13 == 0)
            u &= 0x807fffffu;
        x[i] = y[i] = float_of(u);
    }
    tg__bf16_round_f32(y, N);
    for (int i = 0; i < N; i++) {
        uint32_t want = (uint32_t)tg__bf16_from_f32(x[i]) << 16;
        ck_assert_msg(bits_of(y[i]) == want, "%d: %08x -> %08x, want %08x", i, bits_of(x[i]),
                      bits_of(y[i]), want);
    }
    free(x);
    free(y);
}
END_TEST

/* The paths, one meson test each (tests/meson.build): the converting one,
 * vdpbf16ps, AMX. main forces none of them; each path case forces the one
 * the program was started for, which main has seen the CPU has. */
#define N_PATHS 3
static const char *const path_names[N_PATHS] = {"converting", "avx512bf16", "amx"};
static const enum tg__bf16_path paths[N_PATHS] = {TG_BF16_CONVERTING, TG_BF16_DPBF16,
                                                  TG_BF16_AMX};
static int the_path;

static void use_path(void)
{
    ck_assert(tg__gemm_bf16_force(paths[the_path]));
}

/* C = alpha op(A) op(B) + beta C through f (tg__sgemm_bf16 or tg__gemm_p
 * at bf16), padded leading dims, checked against float64 of the rounded
 * operands (float32 accumulation's tolerance, on the sum of |products|)
 * and of the unrounded ones (bfloat16's), the padding untouched. */
static void check_bf16(int64_t m, int64_t n, int64_t k, bool ta, bool tb, float alpha,
                       float beta, bool through_p)
{
    int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    int64_t lda = ac + 3, ldb = bc + 1, ldc = n + 2;
    size_t na = (size_t)(ar * lda), nb = (size_t)(br * ldb), nc = (size_t)(m * ldc);
    float *a = malloc(na * sizeof *a), *b = malloc(nb * sizeof *b);
    float *c = malloc(nc * sizeof *c), *c0 = malloc(nc * sizeof *c0);
    fill(a, na, (uint32_t)(m * 31 + k));
    fill(b, nb, (uint32_t)(n * 17 + k));
    fill(c0, nc, 99);
    memcpy(c, c0, nc * sizeof *c);
    int rc = through_p ? tg__gemm_p(TG_FLOAT32, TG_PRECISION_BF16, false, ta, tb, m, n, k, alpha,
                                    a, lda, b, ldb, beta, c, ldc)
                       : tg__sgemm_bf16(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    ck_assert_int_eq(rc, 0);
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            double sr = 0, s = 0, mag = 0;
            for (int64_t p = 0; p < k; p++) {
                float x = ta ? a[p * lda + i] : a[i * lda + p];
                float y = tb ? b[j * ldb + p] : b[p * ldb + j];
                sr += rounded(x) * rounded(y);
                s += (double)x * y;
                mag += fabs((double)x * y);
            }
            double old = beta == 0 ? 0 : beta * (double)c0[i * ldc + j];
            double want_r = alpha * sr + old, want = alpha * s + old, got = c[i * ldc + j];
            double scale = fabs(alpha) * mag + fabs(old) + 1e-30;
            ck_assert_msg(fabs(got - want_r) <= 2e-6 * (1 + sqrt((double)k)) * scale,
                          "%lldx%lldx%lld ta=%d tb=%d (%lld,%lld): %.9g vs rounded %.9g",
                          (long long)m, (long long)n, (long long)k, ta, tb, (long long)i,
                          (long long)j, got, want_r);
            ck_assert_msg(fabs(got - want) <= 1e-2 * scale,
                          "%lldx%lldx%lld ta=%d tb=%d (%lld,%lld): %.9g vs %.9g", (long long)m,
                          (long long)n, (long long)k, ta, tb, (long long)i, (long long)j, got,
                          want);
        }
        for (int64_t j = n; j < ldc; j++)
            ck_assert(bits_of(c[i * ldc + j]) == bits_of(c0[i * ldc + j]));
    }
    free(a), free(b), free(c), free(c0);
}

/* Shape classes: tiny, thin (1-4 rows), narrow, a long reduction, odd k,
 * short last tiles in M, N and K past the packed kernels' blocks (14 x 32
 * and AMX's 32 x 32 tiles; the vector kernels' 512-deep pieces, AMX's
 * 2048-deep ones: a last piece of 1 or 7, which AMX leaves to the vector
 * kernels, of 20 or 76, which it pads to 32 or 96, and the 32 x 32 blocks
 * of K its panels of A are made of, short in K: 1031, 1100), more columns
 * than one packed slice, C summed over pieces, and a thin product whose
 * operands are rounded in three blocks of K. */
static const int64_t shapes[][3] = {
    {1, 1, 1},      {3, 5, 7},       {2, 100, 37},   {4, 33, 65},     {17, 9, 3},
    {64, 64, 64},   {700, 30, 50},   {32, 32, 700},  {47, 71, 513},   {129, 65, 1031},
    {15, 33, 2},    {200, 96, 257},  {30, 3100, 20}, {300, 200, 128}, {100, 80, 1100},
    {65, 97, 2080}, {3, 700, 200},   {40, 33, 2055}, {70, 40, 2068},  {33, 66, 4172},
};
#define N_SHAPES ((int)(sizeof shapes / sizeof shapes[0]))

START_TEST(bf16_gemm_matches_float64_of_rounded_operands)
{
    const int64_t *s = shapes[_i];
    use_path();
    for (int t = 0; t < 4; t++)
        check_bf16(s[0], s[1], s[2], t & 1, t & 2, 1.0f, 0.0f, false);
    ck_assert(tg__gemm_bf16_force(TG_BF16_AUTO));
}
END_TEST

START_TEST(bf16_gemm_applies_alpha_and_beta)
{
    use_path();
    check_bf16(47, 71, 513, false, true, -0.75f, 0.5f, false);
    check_bf16(130, 40, 300, true, false, 2.0f, 1.0f, false);
    check_bf16(3, 200, 100, false, false, 1.5f, -1.0f, false);
    check_bf16(64, 96, 600, false, false, 1.0f, 1.0f, false); /* AMX starts from C's tiles */
    check_bf16(64, 64, 2100, false, true, 1.0f, 1.0f, false);  /* ... and sums two slices */
    ck_assert(tg__gemm_bf16_force(TG_BF16_AUTO));
}
END_TEST

/* The same bits from one thread and from two: each element of C is summed
 * in one order whatever the split (rows in blocks, columns in groups, the
 * pieces of a thread's last chunk shared out, two slices of K). */
START_TEST(bf16_gemm_gives_the_same_bits_on_one_and_two_threads)
{
    enum { M = 700, N = 64, K = 2100 };
    use_path();
    float *a = malloc(M * K * sizeof *a), *b = malloc(K * N * sizeof *b);
    float *c1 = malloc(M * N * sizeof *c1), *c2 = malloc(M * N * sizeof *c2);
    fill(a, M * K, 5), fill(b, K * N, 6);
    int before = tg_num_threads();
    for (int tb = 0; tb < 2; tb++) {
        ck_assert_int_eq(tg_set_num_threads(1), 0);
        ck_assert_int_eq(tg__sgemm_bf16(false, tb, M, N, K, 1.0f, a, K, b, tb ? K : N, 0.0f, c1,
                                        N), 0);
        ck_assert_int_eq(tg_set_num_threads(2), 0);
        ck_assert_int_eq(tg__sgemm_bf16(false, tb, M, N, K, 1.0f, a, K, b, tb ? K : N, 0.0f, c2,
                                        N), 0);
        for (int i = 0; i < M * N; i++)
            ck_assert_msg(bits_of(c1[i]) == bits_of(c2[i]), "tb=%d (%d,%d): %.9g vs %.9g", tb,
                          i / N, i % N, c1[i], c2[i]);
    }
    ck_assert_int_eq(tg_set_num_threads(before), 0);
    ck_assert(tg__gemm_bf16_force(TG_BF16_AUTO));
    free(a), free(b), free(c1), free(c2);
}
END_TEST

START_TEST(gemm_p_sends_bf16_float32_products_to_the_bf16_kernels)
{
    check_bf16(100, 70, 90, false, false, 1.0f, 0.0f, true);
    /* an operand exact in float32 but not in bfloat16: rounded away */
    float a[2 * 3] = {1 + 0x1p-10f, 1, 1, 1, 1, 1 + 0x1p-12f}, b[3 * 2] = {1, 1, 1, 1, 1, 1};
    float c[4];
    ck_assert_int_eq(tg__gemm_p(TG_FLOAT32, TG_PRECISION_BF16, false, false, false, 2, 2, 3, 1.0,
                                a, 3, b, 2, 0.0, c, 2), 0);
    for (int i = 0; i < 4; i++)
        ck_assert(c[i] == 3.0f);
    ck_assert_int_eq(tg__gemm_p(TG_FLOAT32, TG_PRECISION_FLOAT32, false, false, false, 2, 2, 3,
                                1.0, a, 3, b, 2, 0.0, c, 2), 0);
    ck_assert(c[0] == 3.0f + 0x1p-10f && c[3] == 3.0f + 0x1p-12f);
    /* float64 is never rounded */
    double ad[2] = {1 + 0x1p-20, 1}, bd[2] = {1, 1}, cd[1];
    ck_assert_int_eq(tg__gemm_p(TG_FLOAT64, TG_PRECISION_BF16, false, false, false, 1, 1, 2, 1.0,
                                ad, 2, bd, 1, 0.0, cd, 1), 0);
    ck_assert(cd[0] == 2 + 0x1p-20);
}
END_TEST

/* x -> 2x, sending 0 to 0 as amap must. */
static void twice(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] *= 2;
}

/* C = amap(A) @ op(B) + bias through tg__sgemm_bias_bf16 on every path:
 * done (0) or declined (1, C untouched), and when done within float32
 * accumulation of float64 of the rounded amap(A) and op(B). */
START_TEST(bf16_bias_gemm_adds_the_bias_row_and_maps_a_before_rounding)
{
    const int64_t *s = shapes[_i];
    int64_t m = s[0], n = s[1], k = s[2];
    use_path();
    for (int tb = 0; tb < 2; tb++)
        for (int mapped = 0; mapped < 2; mapped++) {
            int64_t lda = k + 2, ldb = tb ? k + 1 : n + 1, ldc = n + 3;
            size_t na = (size_t)(m * lda), nb = (size_t)((tb ? n : k) * ldb);
            size_t nc = (size_t)(m * ldc);
            float *a = malloc(na * sizeof *a), *b = malloc(nb * sizeof *b);
            float *bias = malloc((size_t)n * sizeof *bias), *c = malloc(nc * sizeof *c);
            fill(a, na, 7), fill(b, nb, 8), fill(bias, (size_t)n, 9);
            for (size_t i = 0; i < nc; i++)
                c[i] = NAN;
            int rc = tg__sgemm_bias_bf16(tb, m, n, k, a, lda, b, ldb, bias,
                                         mapped ? twice : NULL, c, ldc);
            ck_assert(rc == 0 || rc == 1);
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < ldc; j++) {
                    float got = c[i * ldc + j];
                    if (rc == 1 || j >= n) {
                        ck_assert(isnan(got));
                        continue;
                    }
                    double sr = 0, mag = 0;
                    for (int64_t p = 0; p < k; p++) {
                        float x = a[i * lda + p] * (mapped ? 2.0f : 1.0f);
                        double y = rounded(tb ? b[j * ldb + p] : b[p * ldb + j]);
                        sr += rounded(x) * y;
                        mag += fabs(rounded(x) * y);
                    }
                    double want = sr + bias[j];
                    ck_assert_msg(fabs(got - want) <=
                                      2e-6 * (1 + sqrt((double)k)) * (mag + fabs(bias[j])),
                                  "%lldx%lldx%lld tb=%d amap=%d (%lld,%lld): %.9g vs %.9g",
                                  (long long)m, (long long)n, (long long)k, tb, mapped,
                                  (long long)i, (long long)j, got, want);
                }
            free(a), free(b), free(bias), free(c);
        }
    ck_assert(tg__gemm_bf16_force(TG_BF16_AUTO));
}
END_TEST

/* The run-time choice: a path the machine has (AMX and vdpbf16ps only on
 * the AVX-512 kernels), and converting when the environment says so. */
START_TEST(bf16_path_choice_follows_the_cpu_and_the_environment)
{
    ck_assert(tg__gemm_bf16_force(TG_BF16_AUTO));
    enum tg__bf16_path path = tg__gemm_bf16_in_use();
    ck_assert(path == TG_BF16_CONVERTING || path == TG_BF16_DPBF16 || path == TG_BF16_AMX);
    if (path != TG_BF16_CONVERTING)
        ck_assert(tg__gemm_isa_in_use() == TG_GEMM_ISA_AVX512);
    ck_assert_int_eq(setenv("TG_BF16_GEMM", "converting", 1), 0);
    ck_assert(tg__gemm_bf16_force(TG_BF16_AUTO));
    ck_assert_int_eq(tg__gemm_bf16_in_use(), TG_BF16_CONVERTING);
    ck_assert_int_eq(unsetenv("TG_BF16_GEMM"), 0);
    ck_assert(tg__gemm_bf16_force(TG_BF16_AUTO));
    ck_assert_int_eq(tg__gemm_bf16_in_use(), path);
    /* forcing a path is refused only where the CPU lacks it */
    ck_assert(tg__gemm_bf16_force(TG_BF16_CONVERTING));
    ck_assert(tg__gemm_bf16_force(TG_BF16_AUTO));
}
END_TEST

int main(int argc, char **argv)
{
    the_path = test_path_arg(argc, argv, path_names, N_PATHS);
    if (the_path >= 0 && !tg__gemm_bf16_force(paths[the_path]))
        return skip_path("gemm_bf16", path_names[the_path]);
    tg__gemm_bf16_force(TG_BF16_AUTO);
    Suite *s = suite_create("gemm_bf16");
    if (the_path < 0) {
        TCase *conv = tcase_checked("conversion");
        tcase_add_test(conv, bf16_conversion_rounds_to_nearest_even);
        tcase_add_test(conv, bf16_conversion_keeps_nan_inf_and_denormals);
        tcase_add_test(conv, bf16_round_in_place_matches_the_scalar_conversion);
        tcase_add_test(conv, gemm_p_sends_bf16_float32_products_to_the_bf16_kernels);
        tcase_add_test(conv, bf16_path_choice_follows_the_cpu_and_the_environment);
        tcase_set_timeout(conv, 60);
        suite_add_tcase(s, conv);
        return run_suite(s);
    }
    TCase *gemm = tcase_checked(path_names[the_path]);
    tcase_add_loop_test(gemm, bf16_gemm_matches_float64_of_rounded_operands, 0, N_SHAPES);
    tcase_add_test(gemm, bf16_gemm_applies_alpha_and_beta);
    tcase_add_test(gemm, bf16_gemm_gives_the_same_bits_on_one_and_two_threads);
    tcase_add_loop_test(gemm, bf16_bias_gemm_adds_the_bias_row_and_maps_a_before_rounding, 0,
                        N_SHAPES);
    tcase_set_timeout(gemm, 120);
    suite_add_tcase(s, gemm);
    return run_suite(s);
}
