/* bfloat16 copies of float32 weights for the thin products of bf16
 * precision (bf16_weights.c): made once per version of a storage, dropped
 * when it changes or goes, and the product entry that reads them. Internal
 * to the library. */
#ifndef TG_BF16_WEIGHTS_H
#define TG_BF16_WEIGHTS_H

#include "internal.h"

/* out [m, n] = a [m, k] (row stride lda) @ w^T + beta * out (row stride
 * ldc), for w a contiguous [n, k] tensor of a's float dtype, at precision
 * prec: tg__gemm_p's contract with trans_b. A float32 product at
 * TG_PRECISION_BF16 with 1 to TG_GEMM_BF16_THIN_M rows reads the bf16
 * copy of w's storage (made on first use, or again after a write bumped
 * its version) with tg__sgemm_bf16_thin; every other product goes to
 * tg__gemm_p. 0, or -1 when out of memory. */
int tg__gemm_weight(tg_dtype dt, tg_precision prec, int64_t m, int64_t n, int64_t k,
                    const void *a, int64_t lda, const tg_tensor *w, double beta, void *c,
                    int64_t ldc);

/* TEST-ONLY: whether tg__gemm_weight may use the copies (on by default);
 * returns the previous setting. Off, its products round on every call as
 * tg__sgemm_bf16 does. Not thread-safe: set it while no product runs. */
bool tg__bf16_weights_enable(bool on);

/* The number of storages that hold a bf16 copy now, and its bytes in all:
 * for the tests. */
int64_t tg__bf16_weights_count(size_t *bytes);

#endif
