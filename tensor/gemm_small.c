/* float32 products too thin or too small for the packed kernel.
 *
 * Thin: at most TG_GEMM_THIN_M rows in op(A), as in one token's step
 * through a Linear while generating text. Packing B for such a product
 * reads B twice and writes it once for almost no arithmetic; here B streams
 * through once.
 *   trans_b (B stored N x K, a Linear's weight): each C[i, j] is the dot of
 *       row i of op(A) with row j of B; the A rows stay in L1 and B is read
 *       front to back. Dots sum in a fixed order, whatever vector width
 *       runs them.
 *   otherwise (B stored K x N): row i of C accumulates A(i, p) * row p of B.
 *
 * Tiny: at most TG_GEMM_TINY_WORK multiply-adds, as in one tile of a short
 * sequence's attention. op(B) is copied to a zero-padded K x 16j block on
 * the stack and each row of C is built in registers from it, without the
 * packed kernel's buffers, panels and edge tiles. */
#include "gemm.h"

#include "fastmath.h"
#include "tg_config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if TG_HAVE_OPENMP
#include <omp.h>
#define IN_PARALLEL() omp_in_parallel()
#else
#define IN_PARALLEL() 0
#endif

#define LANES 16
/* Below this many multiply-adds a product runs on one thread. */
#define THIN_PARALLEL_MIN (1 << 16)
/* Independent vector accumulators in each of the thin kernel's dots. */
#define DOT_CHAINS 4
/* Vectors in one row of the tiny kernel's C block. */
#define TINY_MAX_NV (TG_GEMM_TINY_MAX_N / LANES)
/* Columns of C per chunk shared out to the threads. */
#define COLS_PER_CHUNK 64

/* 16 floats as one value: a zmm register under AVX-512, two ymm under
 * AVX2, four xmm otherwise. */
typedef float lanes __attribute__((vector_size(LANES * sizeof(float))));

static inline void load_lanes(lanes *v, const float *p)
{
    memcpy(v, p, sizeof *v);
}

typedef float lanes8 __attribute__((vector_size(8 * sizeof(float))));
typedef float lanes4 __attribute__((vector_size(4 * sizeof(float))));

/* The sum of the 16 lanes, halving (lane l plus lane l + half) down to one:
 * the same order on every vector width, in shuffles rather than scalars. */
static inline __attribute__((always_inline)) float lane_sum(const lanes *v)
{
    lanes8 h8 = __builtin_shufflevector(*v, *v, 0, 1, 2, 3, 4, 5, 6, 7) +
                __builtin_shufflevector(*v, *v, 8, 9, 10, 11, 12, 13, 14, 15);
    lanes4 h4 = __builtin_shufflevector(h8, h8, 0, 1, 2, 3) +
                __builtin_shufflevector(h8, h8, 4, 5, 6, 7);
    return (h4[0] + h4[2]) + (h4[1] + h4[3]);
}

/* C[0:M, j0:j1] for M rows of x (k long, ldx apart), B stored N x K. One
 * row of B at a time, read front to back: B streams through memory in
 * order, which the prefetchers follow at full speed (walking four rows of B
 * side by side ran at half the speed). Each dot keeps DOT_CHAINS vector
 * accumulators, the chains the FMA latency needs, and sums them as
 * ((a0 + a1) + (a2 + a3)) before its lanes; vectors left after the last
 * whole group go to a0 and the k % 16 tail comes last, in order. Each C[i, j]
 * is summed the same way whatever M is. M is a constant where this is
 * inlined; acc has a fixed size (sized by M it would be a variable-length
 * array, which stays on the stack, and each FMA would wait on a store and a
 * load). */
static inline __attribute__((always_inline)) void dots_m(
    const int M, int64_t j0, int64_t j1, int64_t k, float alpha, const float *x, int64_t ldx,
    const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    const int64_t group = DOT_CHAINS * LANES;
    int64_t kg = k - k % group, k16 = k - k % LANES;
    for (int64_t j = j0; j < j1; j++) {
        const float *w = b + j * ldb;
        lanes acc[TG_GEMM_THIN_M][DOT_CHAINS];
        for (int i = 0; i < M; i++)
            for (int g = 0; g < DOT_CHAINS; g++)
                acc[i][g] = (lanes){0};
        for (int64_t p = 0; p < kg; p += group) {
            lanes wv[DOT_CHAINS];
            for (int g = 0; g < DOT_CHAINS; g++)
                load_lanes(&wv[g], w + p + g * LANES);
            for (int i = 0; i < M; i++)
                for (int g = 0; g < DOT_CHAINS; g++) {
                    lanes xv;
                    load_lanes(&xv, x + i * ldx + p + g * LANES);
                    acc[i][g] += xv * wv[g];
                }
        }
        for (int64_t p = kg; p < k16; p += LANES) {
            lanes wv;
            load_lanes(&wv, w + p);
            for (int i = 0; i < M; i++) {
                lanes xv;
                load_lanes(&xv, x + i * ldx + p);
                acc[i][0] += xv * wv;
            }
        }
        for (int i = 0; i < M; i++) {
            lanes all = (acc[i][0] + acc[i][1]) + (acc[i][2] + acc[i][3]);
            float sum = lane_sum(&all);
            for (int64_t r = k16; r < k; r++)
                sum += x[i * ldx + r] * w[r];
            float *out = c + i * ldc + j;
            *out = beta == 0 ? alpha * sum : alpha * sum + beta * *out;
        }
    }
}

/* C[0:m, j0:j1] for the rows of x (k long, ldx apart), B stored N x K. */
TG_VECTOR_CLONES
static void dots(int64_t m, int64_t j0, int64_t j1, int64_t k, float alpha, const float *x,
                 int64_t ldx, const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    switch (m) {
    case 1: dots_m(1, j0, j1, k, alpha, x, ldx, b, ldb, beta, c, ldc); break;
    case 2: dots_m(2, j0, j1, k, alpha, x, ldx, b, ldb, beta, c, ldc); break;
    case 3: dots_m(3, j0, j1, k, alpha, x, ldx, b, ldb, beta, c, ldc); break;
    default: dots_m(4, j0, j1, k, alpha, x, ldx, b, ldb, beta, c, ldc); break;
    }
}

/* C[i, j0:j1] += alpha * sum_p x[i, p] * B[p, j0:j1], B stored K x N. */
TG_VECTOR_CLONES
static void axpys(int64_t m, int64_t j0, int64_t j1, int64_t k, float alpha, const float *x,
                  int64_t ldx, const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    for (int64_t i = 0; i < m; i++) {
        float *restrict out = c + i * ldc;
        for (int64_t j = j0; j < j1; j++)
            out[j] = beta == 0 ? 0 : beta * out[j];
        for (int64_t p = 0; p < k; p++) {
            float s = alpha * x[i * ldx + p];
            const float *restrict row = b + p * ldb;
            for (int64_t j = j0; j < j1; j++)
                out[j] += s * row[j];
        }
    }
}

/* Columns [ch * COLS_PER_CHUNK, ...) of C; x holds op(A)'s rows ldx apart. */
static void thin_chunk(int64_t ch, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                       const float *x, int64_t ldx, const float *b, int64_t ldb, float beta,
                       float *c, int64_t ldc)
{
    int64_t j0 = ch * COLS_PER_CHUNK, j1 = j0 + COLS_PER_CHUNK < n ? j0 + COLS_PER_CHUNK : n;
    if (trans_b)
        dots(m, j0, j1, k, alpha, x, ldx, b, ldb, beta, c, ldc);
    else
        axpys(m, j0, j1, k, alpha, x, ldx, b, ldb, beta, c, ldc);
}

int tg__sgemm_thin(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                   float *c, int64_t ldc)
{
    /* A's rows are read in place; a transposed A is first copied to m
     * contiguous rows, so that it too is read along rows. */
    float *copy = NULL;
    const float *x = a;
    int64_t ldx = lda;
    if (trans_a) {
        if (!(copy = malloc(sizeof(float) * (size_t)(m * k))))
            return -1;
        for (int64_t i = 0; i < m; i++)
            for (int64_t p = 0; p < k; p++)
                copy[i * k + p] = a[p * lda + i];
        x = copy, ldx = k;
    }
    int64_t chunks = (n + COLS_PER_CHUNK - 1) / COLS_PER_CHUNK;
    /* a C branch, not an if() clause: a team of one still costs system calls */
    if ((double)m * (double)n * (double)k >= THIN_PARALLEL_MIN && chunks > 1 && !IN_PARALLEL()) {
#pragma omp parallel for schedule(static)
        for (int64_t ch = 0; ch < chunks; ch++)
            thin_chunk(ch, trans_b, m, n, k, alpha, x, ldx, b, ldb, beta, c, ldc);
    } else {
        for (int64_t ch = 0; ch < chunks; ch++)
            thin_chunk(ch, trans_b, m, n, k, alpha, x, ldx, b, ldb, beta, c, ldc);
    }
    free(copy);
    return 0;
}

/* One step of the 16 x 16 transpose below: rows x (top) and y (bottom)
 * trade the b x b blocks off their diagonal, lane indices as shufflevector
 * takes them (y's lanes numbered from 16). */
#define SWAP_BLOCKS(x, y, top, bottom)                                        \
    do {                                                                      \
        lanes t_ = __builtin_shufflevector(x, y, top), u_ = __builtin_shufflevector(x, y, bottom); \
        x = t_;                                                               \
        y = u_;                                                               \
    } while (0)
#define TOP8 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23
#define BOT8 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31
#define TOP4 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27
#define BOT4 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31
#define TOP2 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29
#define BOT2 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31
#define TOP1 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30
#define BOT1 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31

/* dst[q * ldd + r] = src[r * lds + q] for r, q < 16: a 16 x 16 block
 * transposed in registers, by swapping the off-diagonal blocks of size 8,
 * then 4, 2 and 1. It packs B for the tiny kernel's trans_b products, where
 * an element at a time cost a third of an attention score tile. */
static inline __attribute__((always_inline)) void transpose16(const float *src, int64_t lds,
                                                              float *dst, int64_t ldd)
{
    lanes r[LANES];
    for (int i = 0; i < LANES; i++)
        load_lanes(&r[i], src + i * lds);
    for (int i = 0; i < 8; i++)
        SWAP_BLOCKS(r[i], r[i + 8], TOP8, BOT8);
    for (int i = 0; i < LANES; i += 8)
        for (int j = i; j < i + 4; j++)
            SWAP_BLOCKS(r[j], r[j + 4], TOP4, BOT4);
    for (int i = 0; i < LANES; i += 4)
        for (int j = i; j < i + 2; j++)
            SWAP_BLOCKS(r[j], r[j + 2], TOP2, BOT2);
    for (int i = 0; i < LANES; i += 2)
        SWAP_BLOCKS(r[i], r[i + 1], TOP1, BOT1);
    for (int i = 0; i < LANES; i++)
        memcpy(dst + i * ldd, &r[i], sizeof r[i]);
}

/* Stores one row of C from its accumulators: alpha * acc (+ beta * C). */
static inline __attribute__((always_inline)) void tiny_store(const int NV, const lanes *acc,
                                                             int64_t n, float alpha, float beta,
                                                             float *out)
{
    if (n == NV * LANES && beta == 0) { /* whole vectors */
        for (int v = 0; v < NV; v++) {
            lanes o = alpha * acc[v];
            memcpy(out + v * LANES, &o, sizeof o);
        }
        return;
    }
    float row[TG_GEMM_TINY_MAX_N];
    memcpy(row, acc, sizeof row);
    if (beta == 0)
        for (int64_t j = 0; j < n; j++)
            out[j] = alpha * row[j];
    else
        for (int64_t j = 0; j < n; j++)
            out[j] = alpha * row[j] + beta * out[j];
}

/* Which p each row of op(A) is read at: p in [i + lo, i + hi] for row i,
 * within [0, k). The rest of the row is zero and skipped (a causal
 * attention tile's weights); NO_BAND reads every p. */
typedef struct {
    int64_t lo, hi;
} band;
#define NO_BAND ((band){INT64_MIN / 4, INT64_MAX / 4})

/* The p a block of R rows from row i reads: those the band allows any of
 * its rows, within [0, k). */
static inline void band_span(band bd, int64_t i, int64_t R, int64_t k, int64_t *p0, int64_t *p1)
{
    *p0 = i + bd.lo > 0 ? i + bd.lo : 0;
    *p1 = i + R - 1 + bd.hi + 1 < k ? i + R + bd.hi : k;
}

/* R rows of C from row i of op(A) on (R <= 3 and NV constants where this
 * is inlined, so that the accumulators, fixed-size arrays as in dots_m,
 * live in registers): R rows give the FMA units R independent chains where
 * one row's dependent FMAs would each wait on the last. Each element sums
 * over p in order, over the p the band allows any of the R rows. */
static inline __attribute__((always_inline)) void tiny_block(
    const int NV, const int R, int64_t i, int64_t n, int64_t k, band bd, float alpha,
    const float *a, int64_t sa_i, int64_t sa_p, const float *bt, int64_t ldbt, float beta,
    float *c, int64_t ldc)
{
    int64_t p0, p1;
    band_span(bd, i, R, k, &p0, &p1);
    lanes acc[3][TINY_MAX_NV];
    for (int r = 0; r < R; r++)
        for (int v = 0; v < NV; v++)
            acc[r][v] = (lanes){0};
    const float *ai = a + i * sa_i;
    for (int64_t p = p0; p < p1; p++) {
        float s[3];
        for (int r = 0; r < R; r++)
            s[r] = ai[r * sa_i + p * sa_p];
        for (int v = 0; v < NV; v++) {
            lanes bv;
            load_lanes(&bv, bt + p * ldbt + v * LANES);
            for (int r = 0; r < R; r++)
                acc[r][v] += s[r] * bv;
        }
    }
    for (int r = 0; r < R; r++)
        tiny_store(NV, acc[r], n, alpha, beta, c + (i + r) * ldc);
}

/* R rows (at most 8, a constant where inlined) of C at most 8 columns wide (the 7
 * classes of a small model's head) from row i of op(A) and bt (K rows of 8,
 * ldbt apart), in vectors of 8: a 16-lane FMA costs as much as two of 8,
 * so half of every one was waste. Each element sums over p in order, over
 * the p the band allows any of the R rows. */
static inline __attribute__((always_inline)) void tiny_block8(
    const int R, int64_t i, int64_t n, int64_t k, band bd, float alpha, const float *a,
    int64_t sa_i, int64_t sa_p, const float *bt, int64_t ldbt, float beta, float *c, int64_t ldc)
{
    int64_t p0, p1;
    band_span(bd, i, R, k, &p0, &p1);
    lanes8 acc[8];
    for (int r = 0; r < R; r++)
        acc[r] = (lanes8){0};
    for (int64_t p = p0; p < p1; p++) {
        lanes8 bv;
        memcpy(&bv, bt + p * ldbt, sizeof bv);
        for (int r = 0; r < R; r++)
            acc[r] += a[(i + r) * sa_i + p * sa_p] * bv;
    }
    for (int r = 0; r < R; r++) {
        float row[8];
        memcpy(row, &acc[r], sizeof row);
        float *out = c + (i + r) * ldc;
        for (int64_t j = 0; j < n; j++)
            out[j] = beta == 0 ? alpha * row[j] : alpha * row[j] + beta * out[j];
    }
}

static inline __attribute__((always_inline)) void tiny_rows8(
    int64_t m, int64_t n, int64_t k, band bd, float alpha, const float *a, int64_t sa_i,
    int64_t sa_p, const float *bt, int64_t ldbt, float beta, float *c, int64_t ldc)
{
    int64_t i = 0;
    for (; i + 8 <= m; i += 8) /* eight chains: two FMAs a cycle, each 4 cycles long */
        tiny_block8(8, i, n, k, bd, alpha, a, sa_i, sa_p, bt, ldbt, beta, c, ldc);
    for (; i + 4 <= m; i += 4)
        tiny_block8(4, i, n, k, bd, alpha, a, sa_i, sa_p, bt, ldbt, beta, c, ldc);
    for (; i < m; i++)
        tiny_block8(1, i, n, k, bd, alpha, a, sa_i, sa_p, bt, ldbt, beta, c, ldc);
}

/* Rows of C from op(A)'s rows and bt (K rows of NV*16, ldbt apart): four
 * rows at a time, then the one to three left as one block. */
static inline __attribute__((always_inline)) void tiny_rows(
    const int NV, int64_t m, int64_t n, int64_t k, band bd, float alpha, const float *a,
    int64_t sa_i, int64_t sa_p, const float *bt, int64_t ldbt, float beta, float *c, int64_t ldc)
{
    int64_t i = 0;
    for (; i + 4 <= m; i += 4) { /* as tiny_block(NV, 4, ...), in four named arrays */
        int64_t p0, p1;
        band_span(bd, i, 4, k, &p0, &p1);
        lanes c0[TINY_MAX_NV], c1[TINY_MAX_NV], c2[TINY_MAX_NV], c3[TINY_MAX_NV];
        for (int v = 0; v < NV; v++)
            c0[v] = c1[v] = c2[v] = c3[v] = (lanes){0};
        const float *a0 = a + i * sa_i, *a1 = a0 + sa_i, *a2 = a1 + sa_i, *a3 = a2 + sa_i;
        for (int64_t p = p0; p < p1; p++) {
            float s0 = a0[p * sa_p], s1 = a1[p * sa_p], s2 = a2[p * sa_p], s3 = a3[p * sa_p];
            for (int v = 0; v < NV; v++) {
                lanes bv;
                load_lanes(&bv, bt + p * ldbt + v * LANES);
                c0[v] += s0 * bv;
                c1[v] += s1 * bv;
                c2[v] += s2 * bv;
                c3[v] += s3 * bv;
            }
        }
        tiny_store(NV, c0, n, alpha, beta, c + i * ldc);
        tiny_store(NV, c1, n, alpha, beta, c + (i + 1) * ldc);
        tiny_store(NV, c2, n, alpha, beta, c + (i + 2) * ldc);
        tiny_store(NV, c3, n, alpha, beta, c + (i + 3) * ldc);
    }
    switch (m - i) {
    case 3: tiny_block(NV, 3, i, n, k, bd, alpha, a, sa_i, sa_p, bt, ldbt, beta, c, ldc); break;
    case 2: tiny_block(NV, 2, i, n, k, bd, alpha, a, sa_i, sa_p, bt, ldbt, beta, c, ldc); break;
    case 1: tiny_block(NV, 1, i, n, k, bd, alpha, a, sa_i, sa_p, bt, ldbt, beta, c, ldc); break;
    default: break;
    }
}

/* Rows per strip of a product whose C is wanted only below a diagonal:
 * each strip computes the vectors of columns its last row wants. */
#define LOWER_STRIP 16
/* cols_hi of a product that wants all of C. */
#define ALL_COLS (INT64_MAX / 4)

/* The rows of tiny_rows in strips when C is wanted only at j <= i +
 * cols_hi: each strip stops after the vector holding its last row's last
 * wanted column; strips with none are skipped. The band is shifted to each
 * strip's first row. */
static inline __attribute__((always_inline)) void tiny_lower_rows(
    int64_t m, int64_t j0, int64_t nb, int64_t k, band bd, int64_t cols_hi, float alpha,
    const float *a, int64_t sa_i, int64_t sa_p, const float *bt, int64_t ldbt, float beta,
    float *c, int64_t ldc)
{
    int64_t strip = cols_hi >= ALL_COLS ? m : LOWER_STRIP;
    for (int64_t i0 = 0; i0 < m; i0 += strip) {
        int64_t rows = m - i0 < strip ? m - i0 : strip;
        int64_t want = cols_hi >= ALL_COLS ? nb : i0 + rows + cols_hi - j0;
        if (want <= 0)
            continue;
        int nv = (int)(((want < nb ? want : nb) + LANES - 1) / LANES);
        int64_t cols = nv * LANES < nb ? nv * LANES : nb;
        band bs = {bd.lo + i0, bd.hi + i0};
        const float *ai = a + i0 * sa_i;
        float *ci = c + i0 * ldc;
        switch (nv) {
        case 1:
            tiny_rows(1, rows, cols, k, bs, alpha, ai, sa_i, sa_p, bt, ldbt, beta, ci, ldc);
            break;
        case 2:
            tiny_rows(2, rows, cols, k, bs, alpha, ai, sa_i, sa_p, bt, ldbt, beta, ci, ldc);
            break;
        case 3:
            tiny_rows(3, rows, cols, k, bs, alpha, ai, sa_i, sa_p, bt, ldbt, beta, ci, ldc);
            break;
        default:
            tiny_rows(4, rows, cols, k, bs, alpha, ai, sa_i, sa_p, bt, ldbt, beta, ci, ldc);
            break;
        }
    }
}

/* The tiny product, reading op(A) only in the band bd and writing C at
 * least where j <= i + cols_hi (ALL_COLS: everywhere). */
TG_VECTOR_CLONES
static void tiny(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, band bd,
                 int64_t cols_hi, float alpha, const float *a, int64_t lda, const float *b,
                 int64_t ldb, float beta, float *c, int64_t ldc)
{
    int64_t sa_i = trans_a ? 1 : lda, sa_p = trans_a ? lda : 1;
    float bt[TG_GEMM_TINY_MAX_K * TG_GEMM_TINY_MAX_N];
    for (int64_t j0 = 0; j0 < n; j0 += TG_GEMM_TINY_MAX_N) {
        int64_t nb = n - j0 < TG_GEMM_TINY_MAX_N ? n - j0 : TG_GEMM_TINY_MAX_N;
        int nv = (int)((nb + LANES - 1) / LANES);
        int64_t w = nb <= 8 ? 8 : nv * LANES, ldbt = w; /* rows of bt: 8 or whole vectors */
        const float *bp = bt;
        if (!trans_b && nb == w) { /* whole vectors of B's rows: read in place */
            bp = b + j0, ldbt = ldb;
        } else if (trans_b) { /* B stored n x k: bt's row p is B's column p */
            int64_t j16 = w < LANES ? 0 : nb - nb % LANES, p16 = k - k % LANES;
            for (int64_t j = 0; j < j16; j += LANES)
                for (int64_t p = 0; p < p16; p += LANES)
                    transpose16(b + (j0 + j) * ldb + p, ldb, bt + p * w + j, w);
            for (int64_t p = 0; p < k; p++) {
                for (int64_t j = p < p16 ? j16 : 0; j < nb; j++)
                    bt[p * w + j] = b[(j0 + j) * ldb + p];
                for (int64_t j = nb; j < w; j++)
                    bt[p * w + j] = 0;
            }
        } else {
            for (int64_t p = 0; p < k; p++) {
                for (int64_t j = 0; j < nb; j++)
                    bt[p * w + j] = b[p * ldb + j0 + j];
                for (int64_t j = nb; j < w; j++)
                    bt[p * w + j] = 0;
            }
        }
        if (w == 8) {
            tiny_rows8(m, nb, k, bd, alpha, a, sa_i, sa_p, bp, ldbt, beta, c + j0, ldc);
            continue;
        }
        tiny_lower_rows(m, j0, nb, k, bd, cols_hi, alpha, a, sa_i, sa_p, bp, ldbt, beta, c + j0,
                        ldc);
    }
}

int tg__sgemm_tiny(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                   float *c, int64_t ldc)
{
    tiny(trans_a, trans_b, m, n, k, NO_BAND, ALL_COLS, alpha, a, lda, b, ldb, beta, c, ldc);
    return 0;
}

int tg__sgemm_tiny_lower(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                         float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                         float beta, float *c, int64_t ldc, int64_t hi)
{
    int64_t far = m + n; /* past every row and column: no overflow below */
    hi = hi < -far ? -far : hi > far ? far : hi;
    tiny(trans_a, trans_b, m, n, k, NO_BAND, hi, alpha, a, lda, b, ldb, beta, c, ldc);
    return 0;
}

int tg__sgemm_tiny_band(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                        const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                        float *c, int64_t ldc, int64_t lo, int64_t hi)
{
    int64_t far = m + k; /* past every row and p: no overflow in i + lo */
    lo = lo < -far ? -far : lo > far ? far : lo;
    hi = hi < -far ? -far : hi > far ? far : hi;
    tiny(trans_a, trans_b, m, n, k, (band){lo, hi}, ALL_COLS, alpha, a, lda, b, ldb, beta, c,
         ldc);
    return 0;
}
