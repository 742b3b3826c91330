/* AVX-512 and AVX2+FMA micro-kernels for the packed GEMM, each compiled for
 * its ISA with a target attribute on just that function, so the library
 * still runs on any x86-64; the CPU is asked at run time which one to use. */
#include "gemm_x86.h"

#include <stdatomic.h>
#include <string.h>
#include <time.h>

#if defined(__GNUC__) && defined(__x86_64__)
#define TG_GEMM_X86 1
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
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
#include "gemm_micro_tmpl.h"
#undef MK_MR
#define MK_MR 4
#define MK_STRIDE 14
#define MK_NAME ukr_avx512_f32_rows4
#include "gemm_micro_tmpl.h"
#undef MK_MR
#define MK_MR 7
#define MK_STRIDE 14
#define MK_NAME ukr_avx512_f32_rows7
#include "gemm_micro_tmpl.h"
#undef MK_KEEP_TYPE /* the last float one */
#undef MK_MR
#define MK_MR 10
#define MK_STRIDE 14
#define MK_NAME ukr_avx512_f32_rows10
#include "gemm_micro_tmpl.h"

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
#include "gemm_micro_tmpl.h"
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
#include "gemm_micro_tmpl.h"

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
#include "gemm_micro_tmpl.h"
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

/* ---- bfloat16 products ---- */

/* op(X)'s rows [i0, i0+h) x cols [p0, p0+kc) as float32 [kc][width], by
 * the packings above, then map (or NULL) on the whole panel. */
__attribute__((target("avx2"))) static void pack_f32_panel(bool trans, const float *x,
                                                           int64_t ld, int64_t i0, int h,
                                                           int64_t p0, int64_t kc, int width,
                                                           void (*map)(float *, int64_t),
                                                           float *dst)
{
    if (trans)
        pack_cols_avx2_f32(x + p0 * ld + i0, ld, h, kc, width, (int64_t)width * kc, dst);
    else
        pack_rows_avx2_f32(x + i0 * ld + p0, ld, h, kc, width, dst);
    if (map)
        map(dst, (int64_t)width * kc);
}

/* A float's bits rounded to bfloat16 (bf16.h's nearest-even, NaN kept and
 * made quiet), in the upper half of the word. */
static inline uint32_t bf16_round_bits(uint32_t u)
{
    uint32_t nan = (u & 0x7fffffffu) > 0x7f800000u;
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    return nan ? (u | 0x00400000u) & 0xffff0000u : rounded;
}

/* tg__pack_bf16_fn, converting: float32 values rounded to bfloat16. */
__attribute__((target("avx2"))) static void pack_rounded(bool trans, const float *x, int64_t ld,
                                                         int64_t i0, int h, int64_t p0,
                                                         int64_t kc, int width,
                                                         void (*map)(float *, int64_t),
                                                         float *dst)
{
    pack_f32_panel(trans, x, ld, i0, h, p0, kc, width, map, dst);
    for (int64_t i = 0; i < (int64_t)width * kc; i++) {
        uint32_t u;
        memcpy(&u, dst + i, sizeof u);
        u = bf16_round_bits(u);
        memcpy(dst + i, &u, sizeof u);
    }
}

#define BF16_TARGET __attribute__((target("avx512bf16,avx512bw,avx512vl,avx512f,avx2,fma")))

/* 16 floats rounded to bfloat16 as bf16_round_bits does, in the upper
 * halves. */
BF16_TARGET static inline __m512i bf16_round16(__m512 v)
{
    __m512i u = _mm512_castps_si512(v);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
    __mmask16 nan = _mm512_cmpgt_epu32_mask(
        _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(u, _mm512_set1_epi32(0x00400000)));
    return _mm512_and_si512(r, _mm512_set1_epi32((int)0xffff0000u));
}

/* tg__pack_bf16_fn, vdpbf16ps pairs: the float32 panel first, then each
 * pair of its rows (2q, 2q + 1) rounded into row q, in place (row q is
 * written after rows 2q and 2q + 1 are read, and no later row is). */
BF16_TARGET static void pack_pairs(bool trans, const float *x, int64_t ld, int64_t i0, int h,
                                   int64_t p0, int64_t kc, int width,
                                   void (*map)(float *, int64_t), float *dst)
{
    pack_f32_panel(trans, x, ld, i0, h, p0, kc, width, map, dst);
    for (int64_t q = 0; 2 * q < kc; q++) {
        const float *even = dst + 2 * q * width, *odd = even + width;
        bool has_odd = 2 * q + 1 < kc;
        for (int r = 0; r < width; r += 16) {
            __mmask16 in = width - r >= 16 ? 0xffff : (__mmask16)((1u << (width - r)) - 1);
            __m512i lo = _mm512_srli_epi32(bf16_round16(_mm512_maskz_loadu_ps(in, even + r)), 16);
            __m512i hi = has_odd ? bf16_round16(_mm512_maskz_loadu_ps(in, odd + r))
                                 : _mm512_setzero_si512();
            _mm512_mask_storeu_epi32(dst + q * width + r, in, _mm512_or_si512(lo, hi));
        }
    }
}

/* tg__pack_pair_rows_fn for 16-column multiples of width: two source rows
 * at a time, 16 columns per step, rounded and paired in registers. */
BF16_TARGET static void pack_pair_rows(const float *src, int64_t ld, int64_t cols, int64_t rows,
                                       int64_t r0, int64_t kc, int64_t kpad, int width,
                                       int64_t panel_stride, float *dst)
{
    int64_t span = (cols + width - 1) / width * width;
    for (int64_t p = 0; p < rows; p += 2) {
        const float *even = src + p * ld, *odd = even + ld;
        bool has_odd = p + 1 < rows;
        float *row = dst + (r0 + p) / 2 * width;
        for (int64_t j = 0; j < span; j += 16) {
            int64_t have = cols - j;
            __mmask16 in = have >= 16 ? 0xffff : have <= 0 ? 0 : (__mmask16)((1u << have) - 1);
            __m512i lo = _mm512_srli_epi32(bf16_round16(_mm512_maskz_loadu_ps(in, even + j)), 16);
            __m512i hi = has_odd ? bf16_round16(_mm512_maskz_loadu_ps(in, odd + j))
                                 : _mm512_setzero_si512();
            _mm512_storeu_si512(row + j / width * panel_stride + j % width,
                                _mm512_or_si512(lo, hi));
        }
    }
    if (r0 + rows < kc)
        return;
    for (int64_t j = 0; j < span; j += width)
        for (int64_t q = (kc + 1) / 2; q < kpad / 2; q++)
            memset(dst + j / width * panel_stride + q * width, 0, sizeof(float) * (size_t)width);
}

/* C[MR][32] = alpha * pa @ pb + beta * C (bias as gemm_micro_tmpl.h) on pairs
 * packed by pack_pairs: pa [kc/2][14] (only its first MR rows read), pb
 * [kc/2][32]. Per pair of k, 2 loads of B, MR broadcasts of a pair of A,
 * 2 MR vdpbf16ps, each 16 lanes x 2 products summed in float32. */
BF16_TARGET static inline __attribute__((always_inline)) void
ukr_dpbf16(const int MR, int64_t kc, const float *restrict pa, const float *restrict pb,
           float *restrict c, int64_t ldc, float alpha, float beta, const float *restrict bias)
{
    __m512 acc[14][2];
#pragma GCC unroll 14
    for (int r = 0; r < MR; r++)
        acc[r][0] = acc[r][1] = _mm512_setzero_ps();
#pragma GCC unroll 14
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < 2; v++)
            _mm_prefetch((const char *)(c + r * ldc + 16 * v), _MM_HINT_T0);
#pragma GCC unroll 2
    for (int64_t q = 0; q < (kc + 1) / 2; q++) {
        __m512bh b0 = (__m512bh)_mm512_loadu_si512(pb), b1 = (__m512bh)_mm512_loadu_si512(pb + 16);
#pragma GCC unroll 14
        for (int r = 0; r < MR; r++) {
            uint32_t pair;
            memcpy(&pair, pa + r, sizeof pair);
            __m512bh a = (__m512bh)_mm512_set1_epi32((int)pair);
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], a, b0);
            acc[r][1] = _mm512_dpbf16_ps(acc[r][1], a, b1);
        }
        pa += 14;
        pb += 32;
    }
    __m512 va = _mm512_set1_ps(alpha);
#pragma GCC unroll 14
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < 2; v++) {
            float *cp = c + r * ldc + 16 * v;
            __m512 x = _mm512_mul_ps(va, acc[r][v]);
            if (beta != 0)
                x = _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_loadu_ps(cp), x);
            else if (bias)
                x = _mm512_add_ps(x, _mm512_loadu_ps(bias + 16 * v));
            _mm512_storeu_ps(cp, x);
        }
}

#define DPBF16_KERNEL(MR)                                                                     \
    BF16_TARGET static void ukr_dpbf16_##MR(int64_t kc, const float *pa, const float *pb,    \
                                            float *c, int64_t ldc, float alpha, float beta,  \
                                            const float *bias)                               \
    {                                                                                         \
        ukr_dpbf16(MR, kc, pa, pb, c, ldc, alpha, beta, bias);                                \
    }
DPBF16_KERNEL(14)
DPBF16_KERNEL(4)
DPBF16_KERNEL(7)
DPBF16_KERNEL(10)
#undef DPBF16_KERNEL

/* ---- AMX tiles ---- */

/* AMX: eight tile registers of 16 rows x 64 bytes. A 32 x 32 block of C
 * in four float tiles, two 16 x 32 bfloat16 tiles of op(A) and two of
 * op(B) (16 pairs of K x 16 columns) per 32 steps of K: four tdpbf16ps.
 * Linux hands out the tile state only to a process that asks for it
 * (arch_prctl ARCH_REQ_XCOMP_PERM), and each thread loads the tile
 * configuration before its first tile instruction. */
#define AMX_TARGET                                                                            \
    __attribute__((target("amx-tile,amx-bf16,prfchw,avx512bf16,avx512bw,avx512vl,avx512f,avx2,fma")))
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

/* CPUID's AMX-BF16 and AMX-TILE, XCR0's tile state enabled by the OS, and
 * the kernel's permission granted: asked once per process. */
static bool amx_usable(void)
{
    static _Atomic int usable = -1;
    if (usable >= 0)
        return usable;
    unsigned a, b, c, d;
    bool ok = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 22 & 1) && (d >> 24 & 1) &&
              __get_cpuid(1, &a, &b, &c, &d) && (c >> 27 & 1); /* OSXSAVE */
    if (ok) {
        unsigned lo, hi;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        ok = (lo >> 17 & 3) == 3 && syscall(SYS_arch_prctl, (unsigned long)ARCH_REQ_XCOMP_PERM,
                                            (unsigned long)XFEATURE_XTILEDATA) == 0;
    }
    usable = ok;
    return ok;
}

/* Palette 1, tiles 0-7 all 16 rows x 64 bytes (bytes per row at 16 + 2t,
 * rows at 48 + t). Static: GCC's _tile_loadconfig tells the compiler it
 * reads a pointer's worth of its argument, so the stores filling a stack
 * copy can be dropped as dead (and were, in the benchmark). */
static const _Alignas(64) unsigned char amx_config[64] = {
    [0] = 1,   [16] = 64, [18] = 64, [20] = 64, [22] = 64, [24] = 64, [26] = 64, [28] = 64,
    [30] = 64, [48] = 16, [49] = 16, [50] = 16, [51] = 16, [52] = 16, [53] = 16, [54] = 16,
    [55] = 16};

/* Each thread's part of a slice starts by loading the configuration (it
 * is per thread, and other code on the thread, oneDNN's kernels say, may
 * have released or changed it) and ends by releasing the tile state, which
 * would otherwise be saved at every context switch. Loading it took about
 * 0.4 us here: once per slice, not per micro-kernel call. */
AMX_TARGET static void amx_begin(void)
{
    _tile_loadconfig(amx_config);
}

AMX_TARGET static void amx_end(void)
{
    _tile_release();
}

/* tg__pack_bf16_fn for op(A)'s 32-row panels: kp = kc rounded up to 32,
 * as kp / 32 blocks of [32 rows][32 K] bfloat16 (2 KiB), zero past kc and
 * past h rows. Each 16-row tile of a block is 1 KiB in one piece, loaded
 * with a stride of 64 bytes: a tile load reads 16 consecutive lines, and
 * the panel is read front to back (rows kp apart put a tile's 16 lines
 * 1 KiB apart and crossed the whole panel per step). Fills 16 kp float
 * slots (at most width * kc from kc = 16 on). A transposed is packed as
 * floats into a stack block first. */
BF16_TARGET static void pack_amx_a(bool trans, const float *x, int64_t ld, int64_t i0, int h,
                                   int64_t p0, int64_t kc, int width,
                                   void (*map)(float *, int64_t), float *dst)
{
    /* word i of a block's row: the upper half of float i, from the first
     * 16 (words 0-31 of the pair of vectors) or the next 16 (32-63) */
    static const uint16_t upper_words[32] = {1,  3,  5,  7,  9,  11, 13, 15, 17, 19, 21,
                                             23, 25, 27, 29, 31, 33, 35, 37, 39, 41, 43,
                                             45, 47, 49, 51, 53, 55, 57, 59, 61, 63};
    const __m512i upper = _mm512_loadu_si512(upper_words);
    const __m512i down = _mm512_mullo_epi32(
        _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
        _mm512_set1_epi32(width));
    uint16_t *out = (uint16_t *)(void *)dst;
    _Alignas(64) float row[64], block[64 * 32];
    for (int64_t p = 0; p < kc; p += 64) {
        int64_t n = kc - p < 64 ? kc - p : 64;
        if (trans) /* rows [p, p + n) of op(A)^T as [n][width] floats */
            pack_f32_panel(true, x, ld, i0, h, p0 + p, n, width, map, block);
        for (int r = 0; r < width; r++) {
            const float *src = trans || r >= h ? row : x + (i0 + r) * ld + p0 + p;
            if (!trans && r < h && map) {
                memcpy(row, src, sizeof(float) * (size_t)n);
                map(row, n);
                src = row;
            }
            /* 32 of K at a time, a whole row of a block: the lanes past n
             * load as zero, which is the padding on to kp */
            uint16_t *to = out + p / 32 * 1024 + r * 32;
            for (int64_t q = 0; q < n; q += 32, to += 1024) {
                int64_t left = n - q;
                __mmask16 lo = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);
                __mmask16 hi = left >= 32   ? 0xffff
                               : left > 16 ? (__mmask16)((1u << (left - 16)) - 1)
                                           : 0;
                __m512 v0 = _mm512_setzero_ps(), v1 = _mm512_setzero_ps();
                if (r < h && trans) { /* column r of the block */
                    __m512i at = _mm512_add_epi32(down, _mm512_set1_epi32((int)(q * width)));
                    v0 = _mm512_mask_i32gather_ps(v0, lo, at, block + r, 4);
                    at = _mm512_add_epi32(at, _mm512_set1_epi32(16 * width));
                    v1 = _mm512_mask_i32gather_ps(v1, hi, at, block + r, 4);
                } else if (r < h) {
                    v0 = _mm512_maskz_loadu_ps(lo, src + q);
                    v1 = _mm512_maskz_loadu_ps(hi, src + q + 16);
                }
                _mm512_storeu_si512(to, _mm512_permutex2var_epi16(bf16_round16(v0), upper,
                                                                  bf16_round16(v1)));
            }
        }
    }
}

/* tg__pack_bf16_fn for op(B)'s 32-column panels: pack_pairs' [kc/2][32]
 * pairs, zero rows on to kp / 2: tile j (16 columns) is 64 bytes into
 * every 128-byte row. */
BF16_TARGET static void pack_amx_b(bool trans, const float *x, int64_t ld, int64_t j0, int w,
                                   int64_t p0, int64_t kc, int width,
                                   void (*map)(float *, int64_t), float *dst)
{
    int64_t kp = (kc + 31) / 32 * 32, have = (kc + 1) / 2;
    pack_pairs(trans, x, ld, j0, w, p0, kc, width, map, dst);
    memset(dst + have * width, 0, sizeof(float) * (size_t)((kp / 2 - have) * width));
}

/* C[32][32] = alpha * pa @ pb + beta * C (bias as gemm_micro_tmpl.h) on panels
 * packed by pack_amx_a and pack_amx_b. C goes straight from the tiles to
 * memory when alpha is 1 and beta 0 without a bias (the usual case), and
 * when alpha and beta are 1 (every piece of K after the first), which
 * starts from C's tiles; else through a block on the stack. The driver
 * calls it along the rows of C (rows_outer), so the next call's C is the
 * 32 columns to the right: its 64 lines are fetched for writing a few per
 * step of K (the tile stores of a C far out in L3 or memory had stalled
 * the tiles for 30-60% of the time). */
AMX_TARGET static void ukr_amx(int64_t kc, const float *pa, const float *pb, float *c,
                               int64_t ldc, float alpha, float beta, const float *bias)
{
    int64_t kp = (kc + 31) / 32 * 32;
    const char *a = (const char *)pa, *b = (const char *)pb;
    /* C += ... (a later piece of K) starts from C itself */
    bool add = alpha == 1 && beta == 1;
    if (add) {
        _tile_loadd(0, c, 4 * ldc);
        _tile_loadd(1, c + 16, 4 * ldc);
        _tile_loadd(2, c + 16 * ldc, 4 * ldc);
        _tile_loadd(3, c + 16 * ldc + 16, 4 * ldc);
    } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    }
    const char *next_c = (const char *)(c + 32);
    int64_t per_step = (64 + kp / 32 - 1) / (kp / 32); /* of the next C's 64 lines */
    for (int64_t p = 0, line = 0; p < kp; p += 32) {
        for (int64_t end = line + per_step; line < end && line < 64; line++)
            _mm_prefetch(next_c + line / 2 * 4 * ldc + line % 2 * 64, _MM_HINT_ET0);
        _tile_loadd(4, a + 64 * p, 64);
        _tile_loadd(5, a + 64 * p + 1024, 64);
        _tile_loadd(6, b + 64 * p, 128);
        _tile_loadd(7, b + 64 * p + 64, 128);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    float *to = c;
    int64_t ld = ldc;
    _Alignas(64) float blk[32 * 32];
    bool direct = add || (alpha == 1 && beta == 0 && !bias);
    if (!direct)
        to = blk, ld = 32;
    _tile_stored(0, to, 4 * ld);
    _tile_stored(1, to + 16, 4 * ld);
    _tile_stored(2, to + 16 * ld, 4 * ld);
    _tile_stored(3, to + 16 * ld + 16, 4 * ld);
    if (direct)
        return;
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    for (int r = 0; r < 32; r++)
        for (int v = 0; v < 2; v++) {
            float *cp = c + r * ldc + 16 * v;
            __m512 x = _mm512_mul_ps(va, _mm512_load_ps(blk + 32 * r + 16 * v));
            if (beta != 0)
                x = _mm512_fmadd_ps(vb, _mm512_loadu_ps(cp), x);
            else if (bias)
                x = _mm512_add_ps(x, _mm512_loadu_ps(bias + 16 * v));
            _mm512_storeu_ps(cp, x);
        }
}

/* The micro-kernels' tables. A kc x nr panel of B is reused across a
 * whole mc-row block of A (mc x kc, kept in the 1 MiB L2); nc bounds the
 * packed slice of B the threads share. Float AVX-512 goes 512 deep: its B
 * panel (64 KiB) then streams from L2 rather than sitting in L1, but the
 * 384- and 512-deep products of a Transformer write C once instead of
 * twice, 1-2% faster on Zen 4. There (512-bit FMAs issued as two 256-bit
 * halves) the AVX2 kernel is nearly as fast as the AVX-512 one. */
static const struct tg__ukr_f32 avx512_f32 = {
    .mr = 14, .nr = 32, .mc = 168, .kc = 512, .nc = 3072, .fn = ukr_avx512_f32,
    .pack_rows = pack_rows_avx2_f32, .pack_cols = pack_cols_avx2_f32,
    .short_rows = {4, 7, 10},
    .short_fn = {ukr_avx512_f32_rows4, ukr_avx512_f32_rows7, ukr_avx512_f32_rows10}};
static const struct tg__ukr_f64 avx512_f64 = {
    .mr = 14, .nr = 16, .mc = 112, .kc = 256, .nc = 2048, .fn = ukr_avx512_f64};
static const struct tg__ukr_f32 avx2_f32 = {
    .mr = 6, .nr = 16, .mc = 144, .kc = 256, .nc = 3072, .fn = ukr_avx2_f32,
    .pack_rows = pack_rows_avx2_f32, .pack_cols = pack_cols_avx2_f32};
static const struct tg__ukr_f64 avx2_f64 = {
    .mr = 6, .nr = 8, .mc = 96, .kc = 256, .nc = 2048, .fn = ukr_avx2_f64};

/* The bfloat16 tables: vdpbf16ps on pairs, 14 x 32 tiles as the float32
 * AVX-512 kernel; the converting ones are the float32 kernels on rounded
 * panels. */
static const struct tg__ukr_bf16 avx512_dpbf16 = {
    .mr = 14, .nr = 32, .mc = 168, .kc = 512, .nc = 3072, .fn = ukr_dpbf16_14,
    .pack_a = pack_pairs, .pack_b = pack_pairs, .pack_b_rows = pack_pair_rows, .k_align = 2,
    .short_rows = {4, 7, 10}, .short_fn = {ukr_dpbf16_4, ukr_dpbf16_7, ukr_dpbf16_10}};
static const struct tg__ukr_bf16 avx512_converting = {
    .mr = 14, .nr = 32, .mc = 168, .kc = 512, .nc = 3072, .fn = ukr_avx512_f32,
    .pack_a = pack_rounded, .pack_b = pack_rounded, .k_align = 1,
    .short_rows = {4, 7, 10},
    .short_fn = {ukr_avx512_f32_rows4, ukr_avx512_f32_rows7, ukr_avx512_f32_rows10}};
static const struct tg__ukr_bf16 avx2_converting = {
    .mr = 6, .nr = 16, .mc = 144, .kc = 256, .nc = 3072, .fn = ukr_avx2_f32,
    .pack_a = pack_rounded, .pack_b = pack_rounded, .k_align = 1};

/* AMX: 32 x 32 tiles of C, which stay in the tiles for up to 2048 of K
 * (the driver's slice): C then leaves the tiles once per slice. Its
 * round trips cost more than the tile loads' misses in L1 that so deep a
 * panel of A or B brings (each 128 KiB, from L2): 2048 deep outran 512 deep
 * on one core and on two, and 256 or 384 deep were slower still (the
 * figures are in bench/results). A block of 192 rows of A
 * (768 KiB) stays in L2. The tiles go along the rows of C (rows_outer):
 * C is then written as 32 streams front to back, and a panel of A up to
 * 384 deep (24 KiB) stays in L1 for the whole row; down the panels of B
 * instead, 2048x1152x384 and 2048x1536x384 ran at 0.3-0.5 of that speed. */
static const struct tg__ukr_bf16 amx_bf16 = {
    .mr = 32, .nr = 32, .mc = 192, .kc = 2048, .nc = 3072, .fn = ukr_amx,
    .pack_a = pack_amx_a, .pack_b = pack_amx_b, .pack_b_rows = pack_pair_rows, .k_align = 32,
    .begin = amx_begin, .end = amx_end, .rows_outer = true};

bool tg__gemm_has_amx(void)
{
    return tg__gemm_has_dpbf16() && amx_usable();
}

bool tg__gemm_has_dpbf16(void)
{
    return tg__gemm_isa_available(TG_GEMM_ISA_AVX512) && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512bf16");
}

/* Seconds for iters rounds of 28 independent 512-bit vdpbf16ps (bf16) or
 * vfmadd231ps, the accumulators all in registers: as many as the
 * micro-kernels keep, so the loop meets the same latency limits. bench/peak.c
 * has its own copy: it sees the public API alone and times AMX and all threads. */
#define PEAK_OPS(op)                                                                          \
    op " %%zmm30, %%zmm31, %%zmm0\n\t" op " %%zmm30, %%zmm31, %%zmm1\n\t"                       \
    op " %%zmm30, %%zmm31, %%zmm2\n\t" op " %%zmm30, %%zmm31, %%zmm3\n\t"                       \
    op " %%zmm30, %%zmm31, %%zmm4\n\t" op " %%zmm30, %%zmm31, %%zmm5\n\t"                       \
    op " %%zmm30, %%zmm31, %%zmm6\n\t" op " %%zmm30, %%zmm31, %%zmm7\n\t"                       \
    op " %%zmm30, %%zmm31, %%zmm8\n\t" op " %%zmm30, %%zmm31, %%zmm9\n\t"                       \
    op " %%zmm30, %%zmm31, %%zmm10\n\t" op " %%zmm30, %%zmm31, %%zmm11\n\t"                     \
    op " %%zmm30, %%zmm31, %%zmm12\n\t" op " %%zmm30, %%zmm31, %%zmm13\n\t"                     \
    op " %%zmm30, %%zmm31, %%zmm14\n\t" op " %%zmm30, %%zmm31, %%zmm15\n\t"                     \
    op " %%zmm30, %%zmm31, %%zmm16\n\t" op " %%zmm30, %%zmm31, %%zmm17\n\t"                     \
    op " %%zmm30, %%zmm31, %%zmm18\n\t" op " %%zmm30, %%zmm31, %%zmm19\n\t"                     \
    op " %%zmm30, %%zmm31, %%zmm20\n\t" op " %%zmm30, %%zmm31, %%zmm21\n\t"                     \
    op " %%zmm30, %%zmm31, %%zmm22\n\t" op " %%zmm30, %%zmm31, %%zmm23\n\t"                     \
    op " %%zmm30, %%zmm31, %%zmm24\n\t" op " %%zmm30, %%zmm31, %%zmm25\n\t"                     \
    op " %%zmm30, %%zmm31, %%zmm26\n\t" op " %%zmm30, %%zmm31, %%zmm27\n\t"
#define PEAK_LOOP(op)                                                                         \
    __asm__ volatile("mov $0x3f803f80, %%eax\n\t"                                             \
                     "vpbroadcastd %%eax, %%zmm30\n\t"                                         \
                     "vpbroadcastd %%eax, %%zmm31\n\t"                                         \
                     "1:\n\t" PEAK_OPS(op) "dec %0\n\t"                                       \
                     "jnz 1b"                                                                 \
                     : "+r"(iters)                                                            \
                     :                                                                        \
                     : "eax", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6",    \
                       "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14",    \
                       "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", \
                       "xmm23", "xmm24", "xmm25", "xmm26", "xmm27", "xmm30", "xmm31")

BF16_TARGET static void peak_loop(bool bf16, long iters)
{
    if (bf16)
        PEAK_LOOP("vdpbf16ps");
    else
        PEAK_LOOP("vfmadd231ps");
}

double tg__gemm_peak_gflops(bool bf16, long iters)
{
    if (iters < 1 || !(bf16 ? tg__gemm_has_dpbf16() : tg__gemm_isa_available(TG_GEMM_ISA_AVX512)))
        return 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    peak_loop(bf16, iters);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double dt = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    /* per instruction: 16 lanes of one (FMA) or two (dot product) multiply-adds */
    return dt > 0 ? (double)iters * 28 * (bf16 ? 64 : 32) / dt / 1e9 : 0;
}

const struct tg__ukr_bf16 *tg__gemm_ukr_bf16(enum tg__bf16_path path, enum tg__gemm_isa isa)
{
    if (path == TG_BF16_DPBF16)
        return isa == TG_GEMM_ISA_AVX512 && tg__gemm_has_dpbf16() ? &avx512_dpbf16 : NULL;
    if (path == TG_BF16_AMX)
        return isa == TG_GEMM_ISA_AVX512 && tg__gemm_has_amx() ? &amx_bf16 : NULL;
    return isa == TG_GEMM_ISA_AVX512 ? &avx512_converting
           : isa == TG_GEMM_ISA_AVX2 ? &avx2_converting
                                     : NULL;
}

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

const struct tg__ukr_bf16 *tg__gemm_ukr_bf16(enum tg__bf16_path path, enum tg__gemm_isa isa)
{
    (void)path, (void)isa;
    return NULL;
}

bool tg__gemm_has_dpbf16(void)
{
    return false;
}

bool tg__gemm_has_amx(void)
{
    return false;
}

double tg__gemm_peak_gflops(bool bf16, long iters)
{
    (void)bf16, (void)iters;
    return 0;
}

#endif
