/* The row arithmetic of the fused attention's softmax on one tile of
 * scores (attention_rows.c): maxima, exps and their sums, the rescaling of
 * an online softmax, the weights of a whole one, and the rows of its
 * gradient. Sums are taken in double lanes in a fixed order, so the bits
 * are the same on every vector width and thread count. Never installed. */
#ifndef TG_ATTENTION_ROWS_H
#define TG_ATTENTION_ROWS_H

#include <tensorgrad/tensor.h>

#include <stdint.h>

/* Rows and keys of one tile of scores. */
#define TG_ATTN_TILE 64
/* float32 rows are padded with -inf to whole vectors of this many. */
#define TG_ATTN_ROW_PAD 16

/* The largest of init and s[0..n) (s of dtype); NaNs are passed over, as
 * `>` does. float32 rows compare in float, which is exact. */
double tg__attn_row_max(tg_dtype dtype, const void *s, int64_t n, double init);

/* t[c] = exp(t[c] - shift) for c < nc, in place in the dtype; returns their
 * sum. The difference is taken in double; float32 tiles then use the
 * vectorised float exp: the tile feeds a float32 GEMM anyway. */
double tg__attn_exp_row(tg_dtype dtype, void *t, double shift, int64_t nc);

/* dst[0..n) = f * src[0..n), both in dtype (they may be the same span). */
void tg__attn_scaled_copy(tg_dtype dtype, void *dst, const void *src, int64_t n, double f);

/* dsum[i] = sum_e x[i, e] y[i, e] over rows of n, in double; x's rows are
 * ldx elements apart, y's ldy. */
void tg__attn_row_dots(tg_dtype dtype, const void *x, int64_t ldx, const void *y, int64_t ldy,
                       int64_t rows, int64_t n, double *dsum);

/* One float32 tile without dropout in an online softmax: scores t [nr, ldt]
 * (nr <= TG_ATTN_TILE, ldt >= nc rounded up to TG_ATTN_ROW_PAD) become exp(s - m) for each
 * row's new running max m[r]; the running sum l[r] and the accumulated
 * rows acc [nr, ev] are rescaled to that max. m[r] is -inf before a row's
 * first key, and a row with no key yet gets zeros. */
void tg__attn_online_softmax_f32(void *t, int64_t ldt, void *acc, double *m, double *l,
                                 int64_t nr, int64_t nc, int64_t ev);

/* The whole softmax of a float32 tile t [nr, ldt] (nr <= TG_ATTN_TILE, ldt
 * >= nc rounded up to TG_ATTN_ROW_PAD) that holds every key its rows see:
 * each row becomes its weights (exps over their sum, sum[r]; zeros where
 * every key is masked, and in the padding) and lse[r] its logsumexp
 * (unless lse is NULL). */
void tg__attn_softmax_f32(float *t, int64_t ldt, int64_t nr, int64_t nc, double *sum,
                          double *lse);

/* dS = P (dPd - D) on nr rows of nc keys, P ldp apart, dPd ldd apart, dS ldo
 * apart, with D[i] = sum_j P[i, j] dPd[i, j]: the rowsum(dP * P) of the
 * softmax backward, taken over the row's keys. */
void tg__attn_kept_ds(const float *P, int64_t ldp, const float *dpd, int64_t ldd, float *ds,
                      int64_t ldo, int64_t nr, int64_t nc);

#endif
