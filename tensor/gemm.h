/* The library's one matrix-multiply entry: row-major GEMM on raw float or
 * double buffers, through the built-in kernels or OpenBLAS, whichever is
 * ahead for the product (tg__sgemm and tg__dgemm say which). Never
 * installed; tg_matmul calls it. */
#ifndef TG_GEMM_H
#define TG_GEMM_H

#include <tensorgrad/tensor.h>

#include <stdbool.h>
#include <stdint.h>

/* C = alpha * op(A) @ op(B) + beta * C, all row-major. Float32: thin, tiny
 * and narrow products to gemm_small.c, the rest to the packed kernel where
 * it has SIMD code, except those with A transposed, which go to OpenBLAS
 * when the build has it and its kernels for this CPU are as wide as the
 * built-in ones (tg__gemm_blas_takes_transposed_a). Float64: OpenBLAS when
 * the build has it. (The A^T shapes of gpt-medium's weight gradients,
 * 384-1536 x 384-1536 x 4096-8192, ran level on an Intel Xeon whose CPU
 * OpenBLAS knows, packed kernel against OpenBLAS, one thread each, within
 * the 10-20% noise of a loaded machine: they stay with BLAS there.)
 *
 *   op(A) is M x K: A itself stored M x K with row stride lda, or, with
 *         trans_a, the transpose of A stored K x M with row stride lda;
 *   op(B) is K x N: likewise, B stored K x N, or N x K with trans_b;
 *   C     is M x N with row stride ldc.
 *
 * A leading dimension must be at least the stored row length (at least 1).
 * With beta == 0, C is written without being read (it may hold NaN). Any of
 * M, N, K may be 0; K == 0 leaves beta * C. Returns 0, or -1 when scratch
 * memory could not be allocated (nothing recorded: the caller reports it). */
/* Whether tg__sgemm sends products with A transposed to OpenBLAS: the
 * build has it, and its kernels for this CPU (openblas_get_corename) are as
 * wide as the built-in SIMD kernels in use, or there are none. */
bool tg__gemm_blas_takes_transposed_a(void);

int tg__sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
              int64_t ldc);
int tg__dgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
              const double *a, int64_t lda, const double *b, int64_t ldb, double beta,
              double *c, int64_t ldc);

/* The same for a float dtype chosen at run time: a, b and c point to
 * elements of dtype (TG_FLOAT32 or TG_FLOAT64; anything else returns -1).
 * builtin forces the built-in kernel: for many small products run from
 * several threads at once, where a threaded BLAS would only contend. */
int tg__gemm(tg_dtype dtype, bool builtin, bool trans_a, bool trans_b, int64_t m, int64_t n,
             int64_t k, double alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
             double beta, void *c, int64_t ldc);

/* The bfloat16 products: tg__sgemm's and tg__sgemm_bias's contracts
 * (float32 in and out, the same return values), but each element of op(A)
 * and op(B) is rounded to bfloat16 (tg__bf16_from_f32: nearest-even) as it
 * is packed, and the products are summed in float32: within float32
 * rounding of the float64 product of the rounded operands (vdpbf16ps and
 * AMX read bfloat16 denormals as zero: below 1.2e-38 the paths differ).
 * For tg__sgemm_bias_bf16, amap runs in float32 before the rounding.
 *
 * Where they run: the shapes tg__sgemm gives its small kernels (thin,
 * tiny, narrow, long reductions) round copies of the operands and call
 * it; the rest go to the packed driver with the path of
 * tg__gemm_bf16_in_use: AMX tiles where the CPU and Linux allow them,
 * unless the last 512-deep piece of K is under 16 deep (then the vector
 * path); else vdpbf16ps where a register loop shows it at least 1.25x the
 * float32 FMAs (AMD Zen 4 and 5 do twice the work per instruction); else
 * the float32 kernels on rounded panels. An Intel Xeon with AMX (model
 * 167) runs vdpbf16ps at half its FMAs' rate, so the converting path beats
 * it there, and AMX several times the float32 kernel (the figures are in
 * bench/results). There is no BLAS for them. */
int tg__sgemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                   float *c, int64_t ldc);
int tg__sgemm_bias_bf16(bool trans_b, int64_t m, int64_t n, int64_t k, const float *a,
                        int64_t lda, const float *b, int64_t ldb, const float *bias,
                        void (*amap)(float *, int64_t), float *c, int64_t ldc);

/* tg__gemm with a precision: TG_PRECISION_BF16 sends float32 products to
 * tg__sgemm_bf16 (builtin is then moot: there is no BLAS for them); float64
 * products, and every product under TG_PRECISION_FLOAT32, go to tg__gemm. */
int tg__gemm_p(tg_dtype dtype, tg_precision prec, bool builtin, bool trans_a, bool trans_b,
               int64_t m, int64_t n, int64_t k, double alpha, const void *a, int64_t lda,
               const void *b, int64_t ldb, double beta, void *c, int64_t ldc);

/* How the bfloat16 products run: vdpbf16ps micro-kernels on a CPU with
 * AVX512_BF16, else converting ones (operands rounded to bfloat16 while
 * packed, then the float32 kernels: the same numerics, float32 speed).
 * Under valgrind, which does not know vdpbf16ps, converting. */
enum tg__bf16_path {
    TG_BF16_AUTO = -1,      /* the best available (the default) */
    TG_BF16_CONVERTING = 0, /* rounded operands, float32 kernels: any CPU */
    TG_BF16_DPBF16 = 1,     /* AVX512_BF16 vdpbf16ps micro-kernels */
    TG_BF16_AMX = 2,        /* AMX-BF16 tiles (Intel Sapphire Rapids on) */
};
/* TEST-ONLY: makes the bfloat16 products take path from now on (AUTO
 * restores the run-time choice); false, changing nothing, when the CPU or
 * build lacks it. Not thread-safe: call it only while no GEMM runs. The
 * environment variable TG_BF16_GEMM=converting makes that the run-time
 * choice for a whole process. */
bool tg__gemm_bf16_force(enum tg__bf16_path path);
/* The path in use now (never AUTO), as tg_build_info_get reports it. */
enum tg__bf16_path tg__gemm_bf16_in_use(void);

/* The built-in kernel alone, whatever TG_HAVE_BLAS says: the tests check it
 * against a naive loop even in builds that use BLAS. Same contract. */
int tg__sgemm_builtin(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                      const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                      float *c, int64_t ldc);
int tg__dgemm_builtin(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                      double alpha, const double *a, int64_t lda, const double *b, int64_t ldb,
                      double beta, double *c, int64_t ldc);

/* C = A @ op(B) + bias, float32: the row bias[0..n) is added to every row
 * of C as the packed kernel writes it, in the one pass over C. With amap,
 * C = amap(A) @ op(B) + bias: amap(x, n) maps n floats in place (and 0 to
 * 0), applied to the panels of A as they are packed, so amap(A) is never
 * stored. A product
 * that the thin, tiny or narrow kernels take, or a CPU without the packed
 * kernel's SIMD code, returns 1 having done nothing: the caller then fills
 * C's rows with bias and calls tg__sgemm with beta 1 (on amap(A)). Else 0,
 * or -1 when out of memory. */
int tg__sgemm_bias(bool trans_b, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                   const float *b, int64_t ldb, const float *bias, void (*amap)(float *, int64_t),
                   float *c, int64_t ldc);

/* A Linear's weight and bias gradients, float32, in one pass over gy: dw
 * [out, in] = gy^T @ x for gy [rows, out] and x [rows, in] (contiguous),
 * and gy_sums[j] = the sum of gy's column j, added row by row in double
 * (the bits of tg_sum's), made as the packed kernel packs gy. Returns 1
 * having done nothing where tg__sgemm_bias would (the caller then makes
 * them apart), else 0, or -1 when out of memory. */
int tg__sgemm_weight_grads(int64_t rows, int64_t out, int64_t in, const float *gy,
                           const float *x, float *dw, double *gy_sums);

/* float32 products whose op(A) has 1 to TG_GEMM_THIN_M rows (and n, k > 0):
 * B streams through once instead of being packed. tg__sgemm and
 * tg__sgemm_builtin send such products here. Same contract. */
#define TG_GEMM_THIN_M 4
int tg__sgemm_thin(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                   float *c, int64_t ldc);

/* float32 products of at most TG_GEMM_TINY_WORK multiply-adds whose k is at
 * most TG_GEMM_TINY_MAX_K (and m, n, k > 0): no packing, no scratch memory.
 * tg__sgemm_builtin sends such products here, and tg__sgemm those of up to a
 * quarter of that work when it has OpenBLAS behind it. Same contract. */
#define TG_GEMM_TINY_WORK (64 * 64 * 64)
#define TG_GEMM_TINY_MAX_K 256
#define TG_GEMM_TINY_MAX_N 64
int tg__sgemm_tiny(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                   float *c, int64_t ldc);

/* A small linear layer's two gradient products, dx [rows, in] = gy [rows,
 * out] @ w [out, in] + beta_dx dx and dw [out, in] = gy^T @ x [rows, in],
 * all contiguous float32, in one parallel region of two threads: each takes
 * one half of the rows for both, so it reads the halves of gy and x that a
 * row-split op before it left in its cache, and one team start serves both.
 * The bits are those of two tg__sgemm calls. Returns 0 when done, or 1,
 * having done nothing, when the shapes are not narrow ones or there is no
 * second thread: the caller then makes two tg__sgemm calls. */
int tg__sgemm_linear_grads(int64_t rows, int64_t in, int64_t out, const float *gy,
                           const float *w, const float *x, float beta_dx, float *dx, float *dw);

/* tg__sgemm_tiny where only C's lower part is wanted: row i at least at
 * the columns j <= i + hi (a causal attention tile's scores, or their
 * gradient). Columns past that are computed where they share a strip of
 * rows and a vector with wanted ones and left as they were otherwise;
 * every element written has the value and bits tg__sgemm_tiny gives it.
 * Same contract. */
int tg__sgemm_tiny_lower(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                         float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                         float beta, float *c, int64_t ldc, int64_t hi);

/* tg__sgemm_tiny for an op(A) that is zero outside a band, which it skips:
 * row i of op(A) is read only at p in [i + lo, i + hi] (within [0, k));
 * INT64_MIN and INT64_MAX leave that side open. A causal attention tile's
 * weights are such a band. The elements read are
 * summed in the order tg__sgemm_tiny sums them, so where the skipped ones
 * are zeros and B is finite the bits are the same. Same contract. */
int tg__sgemm_tiny_band(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                        const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                        float *c, int64_t ldc, int64_t lo, int64_t hi);

/* The instruction sets the built-in kernel has code for; the best one the
 * CPU supports is chosen at run time. */
enum tg__gemm_isa {
    TG_GEMM_ISA_AUTO = -1,   /* the best available (the default) */
    TG_GEMM_ISA_GENERIC = 0, /* portable C, any machine */
    TG_GEMM_ISA_AVX2 = 1,    /* AVX2 + FMA, 256-bit */
    TG_GEMM_ISA_AVX512 = 2,  /* AVX-512F, 512-bit */
};

/* TEST-ONLY: makes the built-in kernel use isa from now on (AUTO restores
 * the run-time choice), so the tests can reach every path the machine has.
 * Returns false, changing nothing, when this build or CPU lacks isa. Not
 * thread-safe: call it only while no GEMM runs. */
bool tg__gemm_force_isa(enum tg__gemm_isa isa);
/* The ISA the built-in kernel runs now (never AUTO), as tg_build_info_get
 * reports it: the best the CPU has, the portable kernel under valgrind, or
 * what tg__gemm_force_isa set. */
enum tg__gemm_isa tg__gemm_isa_in_use(void);

#endif
