/* The library's version, its thread count and its report of what it was
 * built with and picked at run time, checked against the build's own
 * configuration (tg_config.h) and against the CPU. */
#include "testutil.h"

#include "gemm.h"
#include "tg_config.h"

#if TG_HAVE_OPENMP
#include <omp.h>
#endif
#if TG_HAVE_BLAS
#include <cblas.h>
#endif
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#ifndef RUNNING_ON_VALGRIND
#define RUNNING_ON_VALGRIND 0
#endif

START_TEST(version_macros_match_the_library_and_the_project)
{
    ck_assert_str_eq(tg_version(), TG_VERSION_STRING);
    char joined[64];
    snprintf(joined, sizeof joined, "%d.%d.%d", TG_VERSION_MAJOR, TG_VERSION_MINOR,
             TG_VERSION_PATCH);
    ck_assert_str_eq(joined, TG_VERSION_STRING);
    ck_assert_int_eq(TG_VERSION_NUMBER,
                     TG_VERSION_MAJOR * 10000 + TG_VERSION_MINOR * 100 + TG_VERSION_PATCH);
    const char *project = getenv("TG_PROJECT_VERSION"); /* meson.project_version() */
    ck_assert_ptr_nonnull(project);
    ck_assert_str_eq(tg_version(), project);
}
END_TEST

START_TEST(set_num_threads_rejects_counts_outside_1_to_1024)
{
    int before = tg_num_threads();
    static const int bad[] = {0, -1, -1000, 1025};
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(tg_set_num_threads(bad[i]), -1);
        ck_assert_int_eq(tg_error_code(), TG_ERR_VALUE);
        char expected[96];
        snprintf(expected, sizeof expected, "tg_set_num_threads: %d threads, expected 1 to 1024",
                 bad[i]);
        ck_assert_str_eq(tg_error_message(), expected);
        tg_error_clear();
    }
    ck_assert_int_eq(tg_num_threads(), before);
}
END_TEST

START_TEST(set_num_threads_sets_openmp_and_openblas)
{
    int before = tg_num_threads();
    for (int n = 1; n <= 3; n++) {
        ck_assert_int_eq(tg_set_num_threads(n), 0);
#if TG_HAVE_OPENMP
        ck_assert_int_eq(tg_num_threads(), n);
        ck_assert_int_eq(omp_get_max_threads(), n);
#else
        ck_assert_int_eq(tg_num_threads(), 1);
#endif
#if TG_HAVE_BLAS
        ck_assert_int_eq(openblas_get_num_threads(), n);
#endif
    }
    ck_assert_int_eq(tg_set_num_threads(before), 0);
    ck_assert_int_eq(tg_error_code(), TG_OK);
}
END_TEST

START_TEST(build_info_matches_the_build)
{
    tg_build_info info;
    ck_assert_int_eq(tg_build_info_get(&info), 0);
    ck_assert_str_eq(info.version, tg_version());
#if defined(__clang__)
    ck_assert_msg(strncmp(info.compiler, "clang ", 6) == 0, "compiler %s", info.compiler);
#elif defined(__GNUC__)
    ck_assert_msg(strncmp(info.compiler, "gcc ", 4) == 0, "compiler %s", info.compiler);
#endif
    ck_assert_int_eq(info.openmp, TG_HAVE_OPENMP);
    ck_assert_int_eq(info.mpi, TG_HAVE_MPI);
    ck_assert_int_eq(info.threads, tg_num_threads());
#if TG_HAVE_BLAS
    ck_assert_str_eq(info.blas, "OpenBLAS");
    ck_assert_msg(strncmp(info.blas_config, "OpenBLAS", 8) == 0, "config %s", info.blas_config);
    ck_assert_msg(info.blas_core[0] != '\0', "OpenBLAS names no core");
#else
    ck_assert_str_eq(info.blas, "none");
    ck_assert_str_eq(info.blas_config, "");
    ck_assert_str_eq(info.blas_core, "");
#endif
}
END_TEST

START_TEST(build_info_matches_the_cpu)
{
    tg_build_info info;
    ck_assert_int_eq(tg_build_info_get(&info), 0);
    const char *isa = "portable";
    bool bf16 = false;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (RUNNING_ON_VALGRIND) /* the library picks the portable kernel there */
        isa = "portable";
    else if (avx2 && __builtin_cpu_supports("avx512f"))
        isa = "avx512";
    else if (avx2)
        isa = "avx2";
    bf16 = __builtin_cpu_supports("avx512bf16");
#endif
    ck_assert_str_eq(info.gemm_isa, isa);
    ck_assert_int_eq(info.avx512_bf16, bf16);
    /* vdpbf16ps and AMX need the AVX-512 kernels (not valgrind's portable
     * ones); anything else converts */
    ck_assert_msg(strcmp(info.bf16_gemm, "converting") == 0 ||
                      (strcmp(isa, "avx512") == 0 &&
                       (strcmp(info.bf16_gemm, "amx") == 0 ||
                        (bf16 && strcmp(info.bf16_gemm, "avx512_bf16") == 0))),
                  "bf16_gemm %s with gemm %s, avx512_bf16 %d", info.bf16_gemm, isa, bf16);
}
END_TEST

START_TEST(build_info_format_is_one_line_measured_like_snprintf)
{
    int need = tg_build_info_format(NULL, 0);
    ck_assert_int_gt(need, 0);
    char line[1024];
    ck_assert_int_lt(need, (int)sizeof line);
    ck_assert_int_eq(tg_build_info_format(line, sizeof line), need);
    ck_assert_int_eq((int)strlen(line), need);
    ck_assert_ptr_null(strchr(line, '\n'));
    tg_build_info info;
    tg_build_info_get(&info);
    char head[128];
    snprintf(head, sizeof head, "tensorgrad %s (%s); gemm: %s;", info.version, info.compiler,
             info.gemm_isa);
    ck_assert_msg(strncmp(line, head, strlen(head)) == 0, "line: %s", line);
    ck_assert_ptr_nonnull(strstr(line, info.openmp ? "openmp: yes" : "openmp: no"));
    const char *mpi = strstr(line, "; mpi: ");
    ck_assert_msg(mpi && strcmp(mpi, info.mpi ? "; mpi: yes" : "; mpi: no") == 0, "line: %s", line);
    char bf16[64];
    snprintf(bf16, sizeof bf16, "; bf16 gemm: %s; blas: ", info.bf16_gemm);
    ck_assert_msg(strstr(line, bf16) != NULL, "line: %s", line);

    char small[12];
    ck_assert_int_eq(tg_build_info_format(small, sizeof small), need);
    ck_assert_int_eq((int)strlen(small), (int)sizeof small - 1);
    ck_assert(strncmp(small, line, sizeof small - 1) == 0);
}
END_TEST

#if TG_HAVE_BLAS
/* OpenBLAS's cores whose kernels predate AVX2 (what 0.3.21 falls back to
 * on a CPU it does not know): the built-in SIMD kernels are ahead of them
 * by several times, so they keep no float32 product. */
static bool blas_core_predates_avx2(const char *core)
{
    static const char *const narrow[] = {"Prescott", "Core2",     "Penryn",   "Dunnington",
                                         "Nehalem",  "Atom",      "Katmai",   "Coppermine",
                                         "Northwood", "Banias",   "Opteron",  "Barcelona",
                                         "Bobcat",   "Sandybridge", "Bulldozer", "Piledriver"};
    for (size_t i = 0; i < sizeof narrow / sizeof *narrow; i++)
        if (strcmp(core, narrow[i]) == 0)
            return true;
    return false;
}
#endif

START_TEST(transposed_a_products_run_where_the_line_says)
{
    tg_build_info info;
    ck_assert_int_eq(tg_build_info_get(&info), 0);
    char line[1024];
    tg_build_info_format(line, sizeof line);
    bool blas_takes = tg__gemm_blas_takes_transposed_a();
#if TG_HAVE_BLAS
    ck_assert_msg(strstr(line, blas_takes ? "; A^T products: OpenBLAS)" : "; A^T products: built-in)"),
                  "line: %s", line);
    if (strcmp(info.gemm_isa, "portable") != 0 && blas_core_predates_avx2(info.blas_core))
        ck_assert_msg(!blas_takes, "OpenBLAS core %s keeps A^T products beside %s kernels",
                      info.blas_core, info.gemm_isa);
    if (strcmp(info.gemm_isa, "portable") == 0)
        ck_assert(blas_takes);
#else
    ck_assert(!blas_takes);
    ck_assert_ptr_null(strstr(line, "A^T"));
#endif
    /* where the built-in kernels take them, tg__sgemm gives their bits */
    if (!blas_takes) {
        enum { M = 96, N = 80, K = 300 };
        static float a[K * M], b[K * N], via_entry[M * N], via_builtin[M * N];
        for (int i = 0; i < K * M; i++)
            a[i] = (float)((i * 37 % 101) - 50) / 64.0f;
        for (int i = 0; i < K * N; i++)
            b[i] = (float)((i * 53 % 97) - 48) / 32.0f;
        ck_assert_int_eq(tg__sgemm(true, false, M, N, K, 1.0f, a, M, b, N, 0.0f, via_entry, N), 0);
        ck_assert_int_eq(
            tg__sgemm_builtin(true, false, M, N, K, 1.0f, a, M, b, N, 0.0f, via_builtin, N), 0);
        ck_assert_mem_eq(via_entry, via_builtin, sizeof via_entry);
    }
}
END_TEST

START_TEST(build_info_rejects_null_buffers)
{
    ck_assert_int_eq(tg_build_info_get(NULL), -1);
    ck_assert_int_eq(tg_error_code(), TG_ERR_NULL);
    ck_assert_str_eq(tg_error_message(), "tg_build_info_get: info is NULL");
    tg_error_clear();
    ck_assert_int_eq(tg_build_info_format(NULL, 16), -1);
    ck_assert_int_eq(tg_error_code(), TG_ERR_NULL);
    ck_assert_str_eq(tg_error_message(), "tg_build_info_format: buf is NULL with size 16");
    tg_error_clear();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("build_info");
    TCase *tc = tcase_checked("build_info");
    tcase_add_test(tc, version_macros_match_the_library_and_the_project);
    tcase_add_test(tc, set_num_threads_rejects_counts_outside_1_to_1024);
    tcase_add_test(tc, set_num_threads_sets_openmp_and_openblas);
    tcase_add_test(tc, build_info_matches_the_build);
    tcase_add_test(tc, build_info_matches_the_cpu);
    tcase_add_test(tc, build_info_format_is_one_line_measured_like_snprintf);
    tcase_add_test(tc, transposed_a_products_run_where_the_line_says);
    tcase_add_test(tc, build_info_rejects_null_buffers);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
