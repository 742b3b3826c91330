/* Thin products on bfloat16 weights (gemm_bf16_thin.h): a generated token's
 * row against a weight matrix is bound by the bytes of the weight it reads,
 * so the weight is read as the bfloat16 it is cached in rather than
 * rounded from float32 on every call. A's few rows are rounded once into a
 * zero-padded scratch that stays in L1.
 *   B stored N x K (a Linear's weight): C[i, j] is the dot of A's row i
 *       with B's row j; a block of B's rows is read front to back, each
 *       load serving every row of A.
 *   B stored K x N: C's row i accumulates A(i, p) times B's row p, a
 *       block of columns at a time. */
#include "bf16.h"
#include "gemm.h"
#include "gemm_bf16_thin.h"
#include "internal.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) && defined(__x86_64__)
#define THIN_X86 1
#include <immintrin.h>
#else
#define THIN_X86 0
#endif

/* A's rows are padded to this many elements: one vdpbf16ps load. */
#define PAD 32
/* Columns of C per unit shared out to the threads. */
#define COL_UNIT 16
/* Below this many multiply-adds a product runs on one thread (as the
 * float32 thin kernel). */
#define THIN_PARALLEL_MIN (1 << 16)

/* C[i, j] = alpha * s + beta * C[i, j], C not read when beta is 0. */
static inline void put(float *c, float alpha, float s, float beta)
{
    *c = beta == 0 ? alpha * s : alpha * s + beta * *c;
}

/* ---- portable ----------------------------------------------------------- */

typedef float f32x16 __attribute__((vector_size(64)));
typedef uint32_t u32x16 __attribute__((vector_size(64)));
typedef uint16_t u16x16 __attribute__((vector_size(32)));

/* *f = the 16 bfloat16 at p as float32, each shifted into the upper half
 * (through a pointer: a vector returned by value changes the ABI). */
static inline __attribute__((always_inline)) void widen16(f32x16 *f, const uint16_t *p)
{
    u16x16 h;
    memcpy(&h, p, sizeof h);
    u32x16 u = __builtin_convertvector(h, u32x16) << 16;
    memcpy(f, &u, sizeof *f);
}

static float dot_portable(const float *x, const uint16_t *w, int64_t k)
{
    f32x16 acc = {0};
    int64_t p = 0;
    for (; p + 16 <= k; p += 16) {
        f32x16 xv, wv;
        memcpy(&xv, x + p, sizeof xv);
        widen16(&wv, w + p);
        acc += xv * wv;
    }
    float s = 0;
    for (int l = 0; l < 16; l++)
        s += acc[l];
    for (; p < k; p++)
        s += x[p] * tg__f32_from_bf16(w[p]);
    return s;
}

/* Columns [j0, j1) of C for the rows of x (rounded, ldx apart). */
static void cols_portable(bool trans_b, int64_t m, int64_t j0, int64_t j1, int64_t k,
                          float alpha, const float *x, int64_t ldx, const uint16_t *b,
                          int64_t ldb, float beta, float *c, int64_t ldc)
{
    if (trans_b) {
        for (int64_t j = j0; j < j1; j++)
            for (int64_t i = 0; i < m; i++)
                put(c + i * ldc + j, alpha, dot_portable(x + i * ldx, b + j * ldb, k), beta);
        return;
    }
    float acc[COL_UNIT];
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = j0; j < j1; j += COL_UNIT) {
            int64_t w = j1 - j < COL_UNIT ? j1 - j : COL_UNIT;
            memset(acc, 0, sizeof acc);
            for (int64_t p = 0; p < k; p++) {
                float s = x[i * ldx + p];
                for (int64_t q = 0; q < w; q++)
                    acc[q] += s * tg__f32_from_bf16(b[p * ldb + j + q]);
            }
            for (int64_t q = 0; q < w; q++)
                put(c + i * ldc + j + q, alpha, acc[q], beta);
        }
}

/* ---- AVX-512 ------------------------------------------------------------ */

#if THIN_X86
#define WIDE_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma")))
#define DP_TARGET __attribute__((target("avx512bf16,avx512f,avx512bw,avx512vl,avx2,fma")))
#define INLINE static inline __attribute__((always_inline))

/* The 16 bfloat16 at p that mask selects as float32 (0 elsewhere). */
WIDE_TARGET INLINE __m512 widen_x86(const uint16_t *p, __mmask16 mask)
{
    __m512i u = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
}

/* s[i * NC + q] = the dot of x's row i (float32, zero-padded to PAD) with
 * w's row q, for NM rows and NC columns: NM x NC accumulators. */
WIDE_TARGET INLINE void dots_widen(const int NM, const int NC, int64_t k, const float *x,
                                   int64_t ldx, const uint16_t *w, int64_t ldw, float *s)
{
    __m512 acc[4][8];
    for (int i = 0; i < NM; i++)
        for (int q = 0; q < NC; q++)
            acc[i][q] = _mm512_setzero_ps();
    for (int64_t p = 0; p < k; p += 16) {
        __mmask16 mk = k - p >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (k - p)) - 1);
        __m512 xv[4];
        for (int i = 0; i < NM; i++)
            xv[i] = _mm512_loadu_ps(x + i * ldx + p);
        for (int q = 0; q < NC; q++) {
            __m512 wv = widen_x86(w + q * ldw + p, mk);
            for (int i = 0; i < NM; i++)
                acc[i][q] = _mm512_fmadd_ps(xv[i], wv, acc[i][q]);
        }
    }
    for (int i = 0; i < NM; i++)
        for (int q = 0; q < NC; q++)
            s[i * NC + q] = _mm512_reduce_add_ps(acc[i][q]);
}

/* The same with x as bfloat16 (zero-padded to PAD) and vdpbf16ps on pairs. */
DP_TARGET INLINE void dots_dp(const int NM, const int NC, int64_t k, const uint16_t *x,
                              int64_t ldx, const uint16_t *w, int64_t ldw, float *s)
{
    __m512 acc[4][8];
    for (int i = 0; i < NM; i++)
        for (int q = 0; q < NC; q++)
            acc[i][q] = _mm512_setzero_ps();
    for (int64_t p = 0; p < k; p += 32) {
        __mmask32 mk = k - p >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << (k - p)) - 1);
        __m512bh xv[4];
        for (int i = 0; i < NM; i++)
            xv[i] = (__m512bh)_mm512_loadu_si512(x + i * ldx + p);
        for (int q = 0; q < NC; q++) {
            __m512bh wv = (__m512bh)_mm512_maskz_loadu_epi16(mk, w + q * ldw + p);
            for (int i = 0; i < NM; i++)
                acc[i][q] = _mm512_dpbf16_ps(acc[i][q], xv[i], wv);
        }
    }
    for (int i = 0; i < NM; i++)
        for (int q = 0; q < NC; q++)
            s[i * NC + q] = _mm512_reduce_add_ps(acc[i][q]);
}

/* Columns [j0, j1) of C for NM rows: blocks of NC of B's rows, then one at
 * a time. DOTS is dots_widen or dots_dp. */
#define DOT_COLUMNS(DOTS, NM, NC)                                                            \
    do {                                                                                      \
        float s_[4 * 8];                                                                      \
        int64_t j_ = j0;                                                                      \
        for (; j_ + (NC) <= j1; j_ += (NC)) {                                                 \
            DOTS(NM, NC, k, x, ldx, b + j_ * ldb, ldb, s_);                                   \
            for (int i_ = 0; i_ < (NM); i_++)                                                 \
                for (int q_ = 0; q_ < (NC); q_++)                                             \
                    put(c + i_ * ldc + j_ + q_, alpha, s_[i_ * (NC) + q_], beta);             \
        }                                                                                     \
        for (; j_ < j1; j_++) {                                                               \
            DOTS(NM, 1, k, x, ldx, b + j_ * ldb, ldb, s_);                                    \
            for (int i_ = 0; i_ < (NM); i_++)                                                 \
                put(c + i_ * ldc + j_, alpha, s_[i_], beta);                                  \
        }                                                                                     \
    } while (0)

/* Up to four rows of x: eight columns at a time for one or two rows, four
 * for three or four (at most 16 accumulators, with room for the loads). */
WIDE_TARGET static void dots_widen_rows(int64_t m, int64_t j0, int64_t j1, int64_t k,
                                        float alpha, const float *x, int64_t ldx,
                                        const uint16_t *b, int64_t ldb, float beta, float *c,
                                        int64_t ldc)
{
    switch (m) {
    case 1: DOT_COLUMNS(dots_widen, 1, 8); break;
    case 2: DOT_COLUMNS(dots_widen, 2, 8); break;
    case 3: DOT_COLUMNS(dots_widen, 3, 4); break;
    default: DOT_COLUMNS(dots_widen, 4, 4); break;
    }
}

DP_TARGET static void dots_dp_rows(int64_t m, int64_t j0, int64_t j1, int64_t k, float alpha,
                                   const uint16_t *x, int64_t ldx, const uint16_t *b,
                                   int64_t ldb, float beta, float *c, int64_t ldc)
{
    switch (m) {
    case 1: DOT_COLUMNS(dots_dp, 1, 8); break;
    case 2: DOT_COLUMNS(dots_dp, 2, 8); break;
    case 3: DOT_COLUMNS(dots_dp, 3, 4); break;
    default: DOT_COLUMNS(dots_dp, 4, 4); break;
    }
}

/* C[0:NM, j0:j1] for B stored K x N: 32 columns at a time, each row p of
 * B widened once for all NM rows of x. */
WIDE_TARGET INLINE void axpys_widen(const int NM, int64_t j0, int64_t j1, int64_t k,
                                    float alpha, const float *x, int64_t ldx,
                                    const uint16_t *b, int64_t ldb, float beta, float *c,
                                    int64_t ldc)
{
    for (int64_t j = j0; j < j1; j += 32) {
        int64_t w = j1 - j < 32 ? j1 - j : 32;
        __mmask16 m0 = w >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << w) - 1);
        __mmask16 m1 = w >= 32 ? (__mmask16)0xffff : w > 16 ? (__mmask16)((1u << (w - 16)) - 1) : 0;
        __m512 acc[4][2];
        for (int i = 0; i < NM; i++)
            acc[i][0] = acc[i][1] = _mm512_setzero_ps();
        for (int64_t p = 0; p < k; p++) {
            __m512 w0 = widen_x86(b + p * ldb + j, m0), w1 = widen_x86(b + p * ldb + j + 16, m1);
            for (int i = 0; i < NM; i++) {
                __m512 xi = _mm512_set1_ps(x[i * ldx + p]);
                acc[i][0] = _mm512_fmadd_ps(xi, w0, acc[i][0]);
                acc[i][1] = _mm512_fmadd_ps(xi, w1, acc[i][1]);
            }
        }
        __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
        for (int i = 0; i < NM; i++)
            for (int v = 0; v < 2; v++) {
                __mmask16 mv = v ? m1 : m0;
                float *out = c + i * ldc + j + 16 * v;
                __m512 r = _mm512_mul_ps(va, acc[i][v]);
                if (beta != 0)
                    r = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mv, out), r);
                _mm512_mask_storeu_ps(out, mv, r);
            }
    }
}

WIDE_TARGET static void axpys_widen_rows(int64_t m, int64_t j0, int64_t j1, int64_t k,
                                         float alpha, const float *x, int64_t ldx,
                                         const uint16_t *b, int64_t ldb, float beta, float *c,
                                         int64_t ldc)
{
    switch (m) {
    case 1: axpys_widen(1, j0, j1, k, alpha, x, ldx, b, ldb, beta, c, ldc); break;
    case 2: axpys_widen(2, j0, j1, k, alpha, x, ldx, b, ldb, beta, c, ldc); break;
    case 3: axpys_widen(3, j0, j1, k, alpha, x, ldx, b, ldb, beta, c, ldc); break;
    default: axpys_widen(4, j0, j1, k, alpha, x, ldx, b, ldb, beta, c, ldc); break;
    }
}
#endif

/* ---- the path and the driver -------------------------------------------- */

static bool path_available(enum tg__bf16_thin_path path)
{
#if THIN_X86
    bool wide = tg__gemm_isa_in_use() == TG_GEMM_ISA_AVX512 &&
                __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    if (path == TG_BF16_THIN_WIDEN)
        return wide;
    if (path == TG_BF16_THIN_DPBF16)
        return wide && __builtin_cpu_supports("avx512bf16");
#endif
    return path == TG_BF16_THIN_PORTABLE;
}

/* -1 (AUTO) unless forced: the widening kernel where the AVX-512 GEMM
 * kernels run, asked on each product so that it follows a forced ISA
 * (bench/results has it measured against vdpbf16ps). */
static _Atomic int thin_path = TG_BF16_THIN_AUTO;

enum tg__bf16_thin_path tg__bf16_thin_in_use(void)
{
    int p = thin_path;
    if (p != TG_BF16_THIN_AUTO)
        return (enum tg__bf16_thin_path)p;
    return path_available(TG_BF16_THIN_WIDEN) ? TG_BF16_THIN_WIDEN : TG_BF16_THIN_PORTABLE;
}

bool tg__bf16_thin_force(enum tg__bf16_thin_path path)
{
    if (path != TG_BF16_THIN_AUTO && !path_available(path))
        return false;
    thin_path = path;
    return true;
}

/* A group of at most four rows of A (x: rounded float32, or bfloat16 when
 * bf16 is set, ldx apart) against columns [j0, j1) of C. */
static void cols(enum tg__bf16_thin_path path, bool trans_b, int64_t m, int64_t j0, int64_t j1,
                 int64_t k, float alpha, const void *x, int64_t ldx, const uint16_t *b,
                 int64_t ldb, float beta, float *c, int64_t ldc)
{
#if THIN_X86
    if (path == TG_BF16_THIN_DPBF16 && trans_b) {
        dots_dp_rows(m, j0, j1, k, alpha, x, ldx, b, ldb, beta, c, ldc);
        return;
    }
    if (path != TG_BF16_THIN_PORTABLE) {
        (trans_b ? dots_widen_rows : axpys_widen_rows)(m, j0, j1, k, alpha, x, ldx, b, ldb,
                                                       beta, c, ldc);
        return;
    }
#endif
    (void)path;
    cols_portable(trans_b, m, j0, j1, k, alpha, x, ldx, b, ldb, beta, c, ldc);
}

int tg__sgemm_bf16_thin(bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                        const float *a, int64_t lda, const uint16_t *b, int64_t ldb, float beta,
                        float *c, int64_t ldc)
{
    if (m <= 0 || n <= 0)
        return 0;
    enum tg__bf16_thin_path path = tg__bf16_thin_in_use();
    /* vdpbf16ps pairs K: B stored K x N goes to the widening kernel */
    bool pairs = path == TG_BF16_THIN_DPBF16 && trans_b;
    int64_t ldx = (k + PAD - 1) / PAD * PAD;
    size_t es = pairs ? sizeof(uint16_t) : sizeof(float);
    void *x = calloc((size_t)(m * ldx > 0 ? m * ldx : 1), es);
    if (!x)
        return -1;
    for (int64_t i = 0; i < m; i++) {
        if (pairs) {
            tg__bf16_from_f32_n((uint16_t *)x + i * ldx, a + i * lda, k);
        } else {
            memcpy((float *)x + i * ldx, a + i * lda, (size_t)k * sizeof(float));
            tg__bf16_round_f32((float *)x + i * ldx, k);
        }
    }
    int64_t units = (n + COL_UNIT - 1) / COL_UNIT;
    double work = (double)m * (double)n * (double)k;
    TG_FOR_SPLIT(units, work, THIN_PARALLEL_MIN, u0, u1, {
        int64_t j0 = u0 * COL_UNIT, j1 = u1 * COL_UNIT < n ? u1 * COL_UNIT : n;
        for (int64_t i = 0; i < m; i += 4)
            cols(path, trans_b, m - i < 4 ? m - i : 4, j0, j1, k, alpha,
                 (const char *)x + (size_t)(i * ldx) * es, ldx, b, ldb, beta, c + i * ldc,
                 ldc);
    });
    free(x);
    return 0;
}
