/* AVX-512 and AVX2+FMA micro-kernels for the packed GEMM, each compiled for
 * its ISA with a target attribute on just that function, so the library
 * still runs on any x86-64; the CPU is asked at run time which one to use. */
#include "gemm_x86.h"

#if defined(__GNUC__) && defined(__x86_64__)
#define TG_GEMM_X86 1
#include <immintrin.h>
#else
#define TG_GEMM_X86 0
#endif

#if TG_GEMM_X86

/* AVX-512: 32 zmm registers. float: 14 rows x 2 vectors (32 columns) = 28
 * accumulators + 2 B vectors + 1 broadcast; double: the same with 16 columns.
 * The float kernel comes with three for short last tiles: the first 4, 7 or
 * 10 rows of a 14-row panel, so that 2048 rows (146 tiles and 4 rows) do
 * not pay for a whole tile of zeros. */
#define MK_TARGET __attribute__((target("avx512f,avx2,fma")))
#define MK_NV 2
#define MK_KEEP_TYPE
#define MK_ZERO _mm512_setzero_ps
#define MK_T float
#define MK_V __m512
#define MK_W 16
#define MK_LOAD _mm512_loadu_ps
#define MK_STORE _mm512_storeu_ps
#define MK_SET1 _mm512_set1_ps
#define MK_FMA _mm512_fmadd_ps
#define MK_MUL _mm512_mul_ps
#define MK_MR 14
#define MK_NAME ukr_avx512_f32
#include "gemm_micro.h"
#undef MK_MR
#define MK_MR 4
#define MK_STRIDE 14
#define MK_NAME ukr_avx512_f32_rows4
#include "gemm_micro.h"
#undef MK_MR
#define MK_MR 7
#define MK_STRIDE 14
#define MK_NAME ukr_avx512_f32_rows7
#include "gemm_micro.h"
#undef MK_KEEP_TYPE /* the last float one */
#undef MK_MR
#define MK_MR 10
#define MK_STRIDE 14
#define MK_NAME ukr_avx512_f32_rows10
#include "gemm_micro.h"

#undef MK_MR
#define MK_MR 14
#define MK_ZERO _mm512_setzero_pd
#define MK_NAME ukr_avx512_f64
#define MK_T double
#define MK_V __m512d
#define MK_W 8
#define MK_LOAD _mm512_loadu_pd
#define MK_STORE _mm512_storeu_pd
#define MK_SET1 _mm512_set1_pd
#define MK_FMA _mm512_fmadd_pd
#define MK_MUL _mm512_mul_pd
#include "gemm_micro.h"
#undef MK_TARGET
#undef MK_MR
#undef MK_NV

/* AVX2: 16 ymm registers. 6 rows x 2 vectors = 12 accumulators + 2 B + 1. */
#define MK_TARGET __attribute__((target("avx2,fma")))
#define MK_MR 6
#define MK_NV 2
#define MK_ZERO _mm256_setzero_ps
#define MK_NAME ukr_avx2_f32
#define MK_T float
#define MK_V __m256
#define MK_W 8
#define MK_LOAD _mm256_loadu_ps
#define MK_STORE _mm256_storeu_ps
#define MK_SET1 _mm256_set1_ps
#define MK_FMA _mm256_fmadd_ps
#define MK_MUL _mm256_mul_ps
#include "gemm_micro.h"

#define MK_ZERO _mm256_setzero_pd
#define MK_NAME ukr_avx2_f64
#define MK_T double
#define MK_V __m256d
#define MK_W 4
#define MK_LOAD _mm256_loadu_pd
#define MK_STORE _mm256_storeu_pd
#define MK_SET1 _mm256_set1_pd
#define MK_FMA _mm256_fmadd_pd
#define MK_MUL _mm256_mul_pd
#include "gemm_micro.h"
#undef MK_TARGET
#undef MK_MR
#undef MK_NV

/* Eight rows of eight floats in v[] become eight columns: v[i][r] = the old
 * v[r][i]. */
__attribute__((target("avx2"))) static inline void transpose8_f32(__m256 v[8])
{
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(v[i], v[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(v[i], v[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    for (int i = 0; i < 4; i++) {
        v[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
        v[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
    }
}

/* The packings below store whole 8-lane vectors: a row of a panel whose
 * width is not a multiple of 8 spills into the next row, which is written
 * afterwards; the last row, with nothing after it, is written element by
 * element. (AMD's masked vector stores cost tens of cycles each.) */

/* tg__pack_rows_f32_fn in 8 x 8 blocks transposed in registers: the packing
 * of A's rows (A not transposed) and of B's columns (B transposed). The
 * portable loop reads one element per row per step. Within a block of 8
 * panel rows the groups of 8 columns go from the last to the first, so a
 * group's spill is overwritten by the next one. */
__attribute__((target("avx2"))) static void pack_rows_avx2_f32(const float *src, int64_t ld,
                                                               int rows, int64_t kc, int width,
                                                               float *restrict dst)
{
    int64_t p = 0;
    for (; p + 8 < kc; p += 8)
        for (int r0 = (width - 1) / 8 * 8; r0 >= 0; r0 -= 8) {
            int have = rows - r0 < 0 ? 0 : rows - r0 < 8 ? rows - r0 : 8; /* rows with data */
            const float *s = src + (int64_t)r0 * ld + p;
            __m256 v[8];
            for (int i = 0; i < 8; i++)
                v[i] = i < have ? _mm256_loadu_ps(s + i * ld) : _mm256_setzero_ps();
            transpose8_f32(v);
            for (int i = 0; i < 8; i++)
                _mm256_storeu_ps(dst + (p + i) * width + r0, v[i]);
        }
    for (; p < kc; p++)
        for (int r = 0; r < width; r++)
            dst[p * width + r] = r < rows ? src[r * ld + p] : 0;
}

/* tg__pack_cols_f32_fn in 8-lane loads and whole-vector stores: the
 * packing of A transposed and of B not transposed, where the portable loop
 * copies one element at a time or calls memcpy for every row of a panel.
 * The panels whose vectors stay inside the row load them whole; the last
 * ones load masked (masked-off lanes load as 0). A width that is not a
 * multiple of 8 spills into the panel's next row, and the last row, with
 * none after it, is copied element by element. */
/* Rows ahead that pack_cols fetches: each row is a page or more from the
 * last, where the hardware prefetchers stop. */
#define PACK_AHEAD 2

/* GCC would otherwise turn each panel's row of whole-vector copies into a
 * call to memmove, which cost 15% of a product whose A is transposed.
 * clang has no optimize attribute; no_builtin keeps its loop idioms out. */
#ifdef __clang__
#define NO_COPY_CALLS __attribute__((no_builtin("memmove", "memcpy")))
#else
#define NO_COPY_CALLS __attribute__((optimize("no-tree-loop-distribute-patterns")))
#endif
__attribute__((target("avx2"))) NO_COPY_CALLS static void
pack_cols_avx2_f32(const float *src, int64_t ld, int64_t cols, int64_t rows, int width,
                   int64_t panel_stride, float *restrict dst)
{
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    int vecs = (width + 7) / 8;
    int64_t panels = (cols + width - 1) / width;
    int64_t whole = cols >= vecs * 8 ? (cols - vecs * 8) / width + 1 : 0; /* plain loads */
    whole = whole < panels ? whole : panels;
    int64_t vector_rows = width % 8 == 0 ? rows : rows - 1;
    for (int64_t p = 0; p < vector_rows; p++) {
        const float *s = src + p * ld;
        float *d = dst + p * width;
        if (p + PACK_AHEAD < rows)
            for (int64_t c = 0; c < cols; c += 16)
                _mm_prefetch((const char *)(s + PACK_AHEAD * ld + c), _MM_HINT_T0);
        int64_t q = 0;
        for (; q < whole; q++)
            for (int v = 0; v < vecs; v++)
                _mm256_storeu_ps(d + q * panel_stride + 8 * v,
                                 _mm256_loadu_ps(s + q * width + 8 * v));
        for (; q < panels; q++) {
            int64_t have = cols - q * width < width ? cols - q * width : width;
            for (int v = 0; v < vecs; v++) {
                __m256i in = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)have - 8 * v), lane);
                _mm256_storeu_ps(d + q * panel_stride + 8 * v,
                                 _mm256_maskload_ps(s + q * width + 8 * v, in));
            }
        }
    }
    for (int64_t p = vector_rows; p < rows; p++)
        for (int64_t q = 0; q < panels; q++)
            for (int j = 0; j < width; j++)
                dst[q * panel_stride + p * width + j] =
                    q * width + j < cols ? src[p * ld + q * width + j] : 0;
}

/* {mr, nr, mc, kc, nc, kernel, packings, short tiles}. A kc x nr panel of B is reused
 * across a whole mc-row block of A (mc x kc, kept in the 1 MiB L2); nc
 * bounds the packed slice of B the threads share. Float AVX-512 goes 512
 * deep: its B panel (64 KiB) then streams from L2 rather than sitting in
 * L1, but the 384- and 512-deep products of a Transformer write C once
 * instead of twice, 1-2% faster on Zen 4. There (512-bit FMAs issued as
 * two 256-bit halves) the AVX2 kernel is nearly as fast as the AVX-512 one. */
static const struct tg__ukr_f32 avx512_f32 = {
    14, 32, 168, 512, 3072, ukr_avx512_f32, pack_rows_avx2_f32, pack_cols_avx2_f32,
    {4, 7, 10}, {ukr_avx512_f32_rows4, ukr_avx512_f32_rows7, ukr_avx512_f32_rows10}};
static const struct tg__ukr_f64 avx512_f64 = {
    14, 16, 112, 256, 2048, ukr_avx512_f64, NULL, NULL, {0}, {NULL}};
static const struct tg__ukr_f32 avx2_f32 = {
    6, 16, 144, 256, 3072, ukr_avx2_f32, pack_rows_avx2_f32, pack_cols_avx2_f32, {0}, {NULL}};
static const struct tg__ukr_f64 avx2_f64 = {
    6, 8, 96, 256, 2048, ukr_avx2_f64, NULL, NULL, {0}, {NULL}};

bool tg__gemm_isa_available(enum tg__gemm_isa isa)
{
    switch (isa) {
    case TG_GEMM_ISA_GENERIC:
        return true;
    case TG_GEMM_ISA_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case TG_GEMM_ISA_AVX512:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
               __builtin_cpu_supports("fma");
    default:
        return false;
    }
}

const struct tg__ukr_f32 *tg__gemm_ukr_f32(enum tg__gemm_isa isa)
{
    return isa == TG_GEMM_ISA_AVX512 ? &avx512_f32 : isa == TG_GEMM_ISA_AVX2 ? &avx2_f32 : NULL;
}

const struct tg__ukr_f64 *tg__gemm_ukr_f64(enum tg__gemm_isa isa)
{
    return isa == TG_GEMM_ISA_AVX512 ? &avx512_f64 : isa == TG_GEMM_ISA_AVX2 ? &avx2_f64 : NULL;
}

#else /* not x86-64 with GCC or Clang: only the portable kernel */

bool tg__gemm_isa_available(enum tg__gemm_isa isa)
{
    return isa == TG_GEMM_ISA_GENERIC;
}

const struct tg__ukr_f32 *tg__gemm_ukr_f32(enum tg__gemm_isa isa)
{
    (void)isa;
    return NULL;
}

const struct tg__ukr_f64 *tg__gemm_ukr_f64(enum tg__gemm_isa isa)
{
    (void)isa;
    return NULL;
}

#endif
