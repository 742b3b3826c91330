/* The library's version and what it was built with and picked at run time:
 * compiler, matrix-multiply kernels (float32 and bfloat16), OpenBLAS and
 * OpenMP (tg_build_info). */
#include "internal.h"

#include "cpu_share.h"
#include "gemm.h"
#include "tg_config.h"

#include <stdarg.h>
#include <string.h>

#if TG_HAVE_BLAS
#include <cblas.h> /* OpenBLAS's, which declares openblas_get_config */
#endif

#if defined(__clang__)
#define TG_COMPILER "clang " __clang_version__
#elif defined(__GNUC__)
#define TG_COMPILER "gcc " __VERSION__
#else
#define TG_COMPILER "unknown compiler"
#endif

const char *tg_version(void)
{
    return TG_VERSION_STRING;
}

static const char *isa_name(enum tg__gemm_isa isa)
{
    switch (isa) {
    case TG_GEMM_ISA_AVX512:
        return "avx512";
    case TG_GEMM_ISA_AVX2:
        return "avx2";
    default:
        return "portable";
    }
}

static const char *bf16_path_name(enum tg__bf16_path path)
{
    return path == TG_BF16_AMX      ? "amx"
           : path == TG_BF16_DPBF16 ? "avx512_bf16"
                                    : "converting";
}

static bool cpu_has_avx512_bf16(void)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    return __builtin_cpu_supports("avx512bf16");
#else
    return false;
#endif
}

int tg_build_info_get(tg_build_info *info)
{
    TG_CHECK_NULL_STATUS(info);
    *info = (tg_build_info){
        .version = tg_version(),
        .compiler = TG_COMPILER,
        .gemm_isa = isa_name(tg__gemm_isa_in_use()),
        .avx512_bf16 = cpu_has_avx512_bf16(),
        .bf16_gemm = bf16_path_name(tg__gemm_bf16_in_use()),
        .blas = "none",
        .blas_config = "",
        .blas_core = "",
        .openmp = TG_HAVE_OPENMP,
        .mpi = TG_HAVE_MPI,
        .threads = tg_num_threads(),
        .threads_why = tg__threads_origin(),
    };
#if TG_HAVE_BLAS
    info->blas = "OpenBLAS";
    info->blas_config = openblas_get_config();
    info->blas_core = openblas_get_corename();
#endif
    return 0;
}

/* snprintf that keeps counting past the end of buf: *len is the length the
 * whole text needs. */
static void append(char *buf, size_t size, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t size, size_t *len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(*len < size ? buf + *len : NULL, *len < size ? size - *len : 0, fmt, ap);
    va_end(ap);
    if (n > 0)
        *len += (size_t)n;
}

int tg_build_info_format(char *buf, size_t size)
{
    if (!buf && size > 0) {
        tg__fail(TG_ERR_NULL, "tg_build_info_format: buf is NULL with size %zu", size);
        return -1;
    }
    tg_build_info info;
    tg_build_info_get(&info);
    size_t len = 0;
    append(buf, size, &len, "tensorgrad %s (%s); gemm: %s; avx512_bf16: %s; bf16 gemm: %s; blas: ",
           info.version, info.compiler, info.gemm_isa, info.avx512_bf16 ? "yes" : "no",
           info.bf16_gemm);
    if (strcmp(info.blas, "none") == 0)
        append(buf, size, &len, "none");
    else
        append(buf, size, &len, "%s (core %s; A^T products: %s)", info.blas_config,
               info.blas_core, tg__gemm_blas_takes_transposed_a() ? "OpenBLAS" : "built-in");
    append(buf, size, &len, "; openmp: %s, %d thread%s (%s); mpi: %s", info.openmp ? "yes" : "no",
           info.threads, info.threads == 1 ? "" : "s", info.threads_why, info.mpi ? "yes" : "no");
    return len > INT32_MAX ? -1 : (int)len;
}
