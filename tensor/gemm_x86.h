/* The SIMD micro-kernels of the packed GEMM and the table that picks one for
 * the running CPU: AVX-512 and AVX2+FMA on x86-64, none elsewhere (the
 * portable kernel of gemm_kernel_tmpl.h then runs). Internal to tensor/gemm*.c. */
#ifndef TG_GEMM_X86_H
#define TG_GEMM_X86_H

#include "gemm.h"

/* C[mr][nr] = alpha * pa @ pb + beta * C for packed panels pa = [kc][mr],
 * pb = [kc][nr]; beta == 0 never reads C, and then adds bias[0..nr) to
 * every row unless bias is NULL. */
typedef void (*tg__ukr_f32_fn)(int64_t kc, const float *pa, const float *pb, float *c,
                               int64_t ldc, float alpha, float beta, const float *bias);
typedef void (*tg__ukr_f64_fn)(int64_t kc, const double *pa, const double *pb, double *c,
                               int64_t ldc, double alpha, double beta, const double *bias);

/* Packs the first kc elements of rows rows of src (ld apart) as the
 * columns of a panel: dst[p * width + r] = src[r * ld + p] for r < rows,
 * and 0 for rows <= r < width. */
typedef void (*tg__pack_rows_f32_fn)(const float *src, int64_t ld, int rows, int64_t kc,
                                     int width, float *dst);
typedef void (*tg__pack_rows_f64_fn)(const double *src, int64_t ld, int rows, int64_t kc,
                                     int width, double *dst);
/* Packs rows rows of cols elements of src (ld apart) as the rows of the
 * panels they cut into, width columns each (width <= 32): row p of panel q
 * goes to dst + q * panel_stride + p * width, dst[q * panel_stride + p *
 * width + j] = src[p * ld + q * width + j] where q * width + j < cols, 0
 * past cols. Each source row is read once, front to back: going panel by
 * panel instead, every row of a panel was a page apart from the last. */
typedef void (*tg__pack_cols_f32_fn)(const float *src, int64_t ld, int64_t cols, int64_t rows,
                                     int width, int64_t panel_stride, float *dst);
typedef void (*tg__pack_cols_f64_fn)(const double *src, int64_t ld, int64_t cols, int64_t rows,
                                     int width, int64_t panel_stride, double *dst);

/* A micro-kernel with its tile (mr x nr) and the cache blocking that suits
 * it, in elements: an mc x kc block of A for L2, a kc x nc slice of B; and
 * the packings for its ISA, each NULL when the portable loop serves; and
 * kernels for a last tile of fewer than mr rows, each reading the first
 * short_rows[s] rows of an mr-row panel (ascending, 0 past the last). */
#define TG_UKR_SHORT 3
struct tg__ukr_f32 {
    int mr, nr, mc, kc, nc;
    tg__ukr_f32_fn fn;
    tg__pack_rows_f32_fn pack_rows;
    tg__pack_cols_f32_fn pack_cols;
    int short_rows[TG_UKR_SHORT];
    tg__ukr_f32_fn short_fn[TG_UKR_SHORT];
};
struct tg__ukr_f64 {
    int mr, nr, mc, kc, nc;
    tg__ukr_f64_fn fn;
    tg__pack_rows_f64_fn pack_rows;
    tg__pack_cols_f64_fn pack_cols;
    int short_rows[TG_UKR_SHORT];
    tg__ukr_f64_fn short_fn[TG_UKR_SHORT];
};

/* Packs rows [i0, i0+h) x cols [p0, p0+kc) of op(X) (op(X)(i, p) = x[p *
 * ld + i] with trans, else x[i * ld + p]) as one panel width wide for the
 * bfloat16 products, map (or NULL) applied in float32 first; rows past h
 * are zero. The converting packing stores float32 rounded to bfloat16,
 * dst[p * width + r]; the vdpbf16ps one pairs of bfloat16 along K, one
 * pair per float slot: slot q * width + r holds rows (r, 2q) in its low
 * half and (r, 2q + 1), or 0 past kc, in its high half. Either fills at
 * most width * kc slots. */
typedef void (*tg__pack_bf16_fn)(bool trans, const float *x, int64_t ld, int64_t i0, int h,
                                 int64_t p0, int64_t kc, int width,
                                 void (*map)(float *, int64_t), float *dst);
/* A micro-kernel for the bfloat16 products, with tg__ukr_f32's fields but
 * its own packings of op(A)'s panels and op(B)'s (packed as the rows of
 * op(B)^T). kc is even, so a piece of K starts on a pair. */
/* Rows [r0, r0 + rows) of a kc-deep piece of op(B), B not transposed (row
 * r0 + p at src + p * ld, cols columns), into the pair rows of the piece's
 * width-column panels (panel_stride apart), zero past cols; the band that
 * ends the piece also zeroes the pair rows from kc on up to kpad. Each
 * source row is read once, front to back, across every panel. */
typedef void (*tg__pack_pair_rows_fn)(const float *src, int64_t ld, int64_t cols, int64_t rows,
                                      int64_t r0, int64_t kc, int64_t kpad, int width,
                                      int64_t panel_stride, float *dst);
struct tg__ukr_bf16 {
    int mr, nr, mc, kc, nc;
    tg__ukr_f32_fn fn;
    tg__pack_bf16_fn pack_a, pack_b;
    /* op(B)'s pair rows a band at a time where B is not transposed (or
     * NULL), padding K to a multiple of k_align */
    tg__pack_pair_rows_fn pack_b_rows;
    int k_align;
    /* run by each thread before and after its part of a slice (or NULL):
     * AMX loads its tile configuration and releases the tile state */
    void (*begin)(void), (*end)(void);
    int short_rows[TG_UKR_SHORT];
    tg__ukr_f32_fn short_fn[TG_UKR_SHORT];
    /* the driver's order over a chunk of C: tiles along its rows, one
     * panel of A reused by every panel of B, rather than down each panel
     * of B */
    bool rows_outer;
};

/* gemm.c's choices, for gemm_bf16.c: whether the built-in float32 GEMM
 * sends an m x n x k product to the small kernels (gemm_small.c) rather
 * than the packed one, and the threads the packed kernel runs one on. */
bool tg__gemm_small_shape(bool trans_b, int64_t m, int64_t n, int64_t k);
int tg__gemm_packed_threads(int64_t m, int64_t n, int64_t k);

/* Whether this build has kernels for isa and the CPU runs them. */
bool tg__gemm_isa_available(enum tg__gemm_isa isa);
/* The kernel for isa (TG_GEMM_ISA_AVX2 or _AVX512), or NULL when there is
 * none: the caller then uses the portable kernel. */
const struct tg__ukr_f32 *tg__gemm_ukr_f32(enum tg__gemm_isa isa);
const struct tg__ukr_f64 *tg__gemm_ukr_f64(enum tg__gemm_isa isa);
/* The bfloat16 kernel for path on isa, or NULL (the portable ISA, or no
 * such kernel on this build or CPU). */
const struct tg__ukr_bf16 *tg__gemm_ukr_bf16(enum tg__bf16_path path, enum tg__gemm_isa isa);
/* Whether the CPU runs vdpbf16ps (AVX512_BF16) and this build has code for it. */
bool tg__gemm_has_dpbf16(void);
/* Whether the CPU has AMX-BF16 tiles and Linux lets this process use them
 * (asked once). */
bool tg__gemm_has_amx(void);
/* One core's 512-bit multiply-add rate in GFLOP/s over iters rounds of a
 * register-only loop (28 x 28 instructions, a few ns each): vdpbf16ps with
 * bf16, else vfmadd231ps; 0 where the CPU lacks it (or not x86-64). */
double tg__gemm_peak_gflops(bool bf16, long iters);

#endif
