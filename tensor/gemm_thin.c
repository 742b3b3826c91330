/* float32 products with at most TG_GEMM_THIN_M rows in op(A): one token's
 * step through a Linear while generating text, one query against a KV cache.
 * Packing B for such a product, as a general GEMM does, reads B twice and
 * writes it once for almost no arithmetic; here B streams through once.
 *
 *   trans_b (B stored N x K, a Linear's weight): each C[i, j] is the dot of
 *       row i of op(A) with row j of B; the A rows stay in L1.
 *   otherwise (B stored K x N): row i of C accumulates A(i, p) * row p of B.
 *
 * Dots sum 16 lanes in a fixed order, whatever vector width runs them. */
#include "gemm.h"

#include "fastmath.h"
#include "tg_config.h"

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
/* Columns of C per chunk shared out to the threads. */
#define COLS_PER_CHUNK 64

/* 16 floats as one value: a zmm register under AVX-512, two ymm under
 * AVX2, four xmm otherwise. */
typedef float lanes __attribute__((vector_size(LANES * sizeof(float))));

static inline void load_lanes(lanes *v, const float *p)
{
    memcpy(v, p, sizeof *v);
}

/* The sum of the 16 lanes, halving: the same order on every vector width. */
static inline float lane_sum(const lanes *v)
{
    float f[LANES];
    memcpy(f, v, sizeof f);
    for (int w = LANES / 2; w >= 1; w /= 2)
        for (int l = 0; l < w; l++)
            f[l] += f[l + w];
    return f[0];
}

/* C[0:M, j0:j1] for M rows of x (M x k, contiguous), B stored N x K, JB
 * columns at a time. M and JB are constants where this is inlined, so the
 * M * JB accumulators live in registers. The k % 16 tail is added in
 * order after the lanes are summed. */
static inline __attribute__((always_inline)) void dots_mj(
    const int M, const int JB, int64_t j0, int64_t j1, int64_t k, float alpha, const float *x,
    const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    int64_t k16 = k - k % LANES;
    for (int64_t j = j0; j < j1; j += JB) {
        int jb = j1 - j < JB ? (int)(j1 - j) : JB;
        const float *w[JB];
        for (int q = 0; q < JB; q++)
            w[q] = b + (j + (q < jb ? q : 0)) * ldb; /* a short last block repeats a column */
        lanes acc[M][JB];
        for (int i = 0; i < M; i++)
            for (int q = 0; q < JB; q++)
                acc[i][q] = (lanes){0};
        for (int64_t p = 0; p < k16; p += LANES) {
            lanes wv[JB];
            for (int q = 0; q < JB; q++)
                load_lanes(&wv[q], w[q] + p);
            for (int i = 0; i < M; i++) {
                lanes xv;
                load_lanes(&xv, x + i * k + p);
                for (int q = 0; q < JB; q++)
                    acc[i][q] += xv * wv[q];
            }
        }
        for (int i = 0; i < M; i++)
            for (int q = 0; q < jb; q++) {
                float sum = lane_sum(&acc[i][q]);
                for (int64_t r = k16; r < k; r++)
                    sum += x[i * k + r] * w[q][r];
                float *out = c + i * ldc + j + q;
                *out = beta == 0 ? alpha * sum : alpha * sum + beta * *out;
            }
    }
}

/* C[0:m, j0:j1] for the rows of x (m x k, contiguous), B stored N x K. */
TG_VECTOR_CLONES
static void dots(int64_t m, int64_t j0, int64_t j1, int64_t k, float alpha, const float *x,
                 const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    switch (m) {
    case 1: dots_mj(1, 4, j0, j1, k, alpha, x, b, ldb, beta, c, ldc); break;
    case 2: dots_mj(2, 2, j0, j1, k, alpha, x, b, ldb, beta, c, ldc); break;
    case 3: dots_mj(3, 1, j0, j1, k, alpha, x, b, ldb, beta, c, ldc); break;
    default: dots_mj(4, 1, j0, j1, k, alpha, x, b, ldb, beta, c, ldc); break;
    }
}

/* C[i, j0:j1] += alpha * sum_p x[i, p] * B[p, j0:j1], B stored K x N. */
TG_VECTOR_CLONES
static void axpys(int64_t m, int64_t j0, int64_t j1, int64_t k, float alpha, const float *x,
                  const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    for (int64_t i = 0; i < m; i++) {
        float *restrict out = c + i * ldc;
        for (int64_t j = j0; j < j1; j++)
            out[j] = beta == 0 ? 0 : beta * out[j];
        for (int64_t p = 0; p < k; p++) {
            float s = alpha * x[i * k + p];
            const float *restrict row = b + p * ldb;
            for (int64_t j = j0; j < j1; j++)
                out[j] += s * row[j];
        }
    }
}

int tg__sgemm_thin(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                   float *c, int64_t ldc)
{
    /* op(A) copied to m contiguous rows: a transposed A is read once. */
    float *x = malloc(sizeof(float) * (size_t)(m * k));
    if (!x)
        return -1;
    for (int64_t i = 0; i < m; i++)
        for (int64_t p = 0; p < k; p++)
            x[i * k + p] = trans_a ? a[p * lda + i] : a[i * lda + p];
    int64_t chunks = (n + COLS_PER_CHUNK - 1) / COLS_PER_CHUNK;
    bool parallel = (double)m * (double)n * (double)k >= THIN_PARALLEL_MIN && chunks > 1 &&
                    !IN_PARALLEL();
    (void)parallel;
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t ch = 0; ch < chunks; ch++) {
        int64_t j0 = ch * COLS_PER_CHUNK, j1 = j0 + COLS_PER_CHUNK < n ? j0 + COLS_PER_CHUNK : n;
        if (trans_b)
            dots(m, j0, j1, k, alpha, x, b, ldb, beta, c, ldc);
        else
            axpys(m, j0, j1, k, alpha, x, b, ldb, beta, c, ldc);
    }
    free(x);
    return 0;
}
