/* The fused attention's row arithmetic (attention_rows.h). */
#include "attention_rows.h"

#include "fastmath.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

/* The lanes' sum halved down to one in a fixed order. Static and inlined,
 * so its 512-bit argument never crosses an ABI; clang warns of the ABI of
 * such arguments in the baseline clones all the same (-Wpsabi). */
#ifdef __clang__
#pragma clang diagnostic ignored "-Wpsabi"
#endif
static inline double dlanes_sum(tg__dlanes v)
{
    return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}

/* The largest of init and s[0..n) for one element type T: TG_DLANES lanes
 * of T (vector type L, same-width integer mask type B) keep the running
 * maxima, selected by `>` so that NaNs are passed over; then the lanes and
 * the tail in order. One macro for both types, as two loops: a single
 * double-lane loop over both sent GCC 12 into an internal error. */
#define ROW_MAX_OF(name, T, L, B)                                             \
    static inline __attribute__((always_inline)) double name(const T *s, int64_t n, T init) \
    {                                                                         \
        L m;                                                                  \
        for (int l = 0; l < TG_DLANES; l++)                                   \
            m[l] = init;                                                      \
        int64_t c = 0;                                                        \
        for (; c + TG_DLANES <= n; c += TG_DLANES) {                          \
            L v;                                                              \
            memcpy(&v, s + c, sizeof v);                                      \
            B gt = v > m;                                                     \
            m = (L)(((B)v & gt) | ((B)m & ~gt));                              \
        }                                                                     \
        T mx = init;                                                          \
        for (int l = 0; l < TG_DLANES; l++)                                   \
            mx = m[l] > mx ? m[l] : mx;                                       \
        for (; c < n; c++)                                                    \
            mx = s[c] > mx ? s[c] : mx;                                       \
        return mx;                                                            \
    }
typedef int32_t flanes_bits __attribute__((vector_size(TG_DLANES * sizeof(int32_t))));
typedef int64_t dlanes_bits __attribute__((vector_size(TG_DLANES * sizeof(int64_t))));
ROW_MAX_OF(row_max_f32, float, tg__flanes, flanes_bits)
ROW_MAX_OF(row_max_f64, double, tg__dlanes, dlanes_bits)

TG_VECTOR_CLONES_EXTERN(tg__attn_row_max)
double tg__attn_row_max(tg_dtype dtype, const void *s, int64_t n, double init)
{
    /* init is -inf or an earlier float32 max, so (float)init is exact */
    return dtype == TG_FLOAT32 ? row_max_f32(s, n, (float)init) : row_max_f64(s, n, init);
}

/* sum_c a[c] * (b ? b[c] : 1) over c < n in double, for one element type
 * T (TG_DLANES of them are the vector type L, widened to double by WIDEN):
 * the lanes' sums halved down in order, then the tail. Inlined into its
 * callers, which are compiled per vector width: a call per row of 16 keys
 * cost more than the row. */
#define ROW_DOT_OF(name, T, L, WIDEN)                                         \
    static inline __attribute__((always_inline)) double name(const T *a, const T *b, int64_t n) \
    {                                                                         \
        tg__dlanes acc = {0};                                                 \
        double tail = 0;                                                      \
        int64_t c = 0;                                                        \
        for (; c + TG_DLANES <= n; c += TG_DLANES) {                          \
            L va, vb = {1, 1, 1, 1, 1, 1, 1, 1};                              \
            memcpy(&va, a + c, sizeof va);                                    \
            if (b)                                                            \
                memcpy(&vb, b + c, sizeof vb);                                \
            acc += WIDEN(va) * WIDEN(vb);                                     \
        }                                                                     \
        for (; c < n; c++)                                                    \
            tail += (double)a[c] * (b ? b[c] : 1);                            \
        return dlanes_sum(acc) + tail;                                        \
    }
#define WIDEN_FLOAT(v) __builtin_convertvector(v, tg__dlanes)
#define WIDEN_NONE(v) (v)
ROW_DOT_OF(row_dot_f32, float, tg__flanes, WIDEN_FLOAT)
ROW_DOT_OF(row_dot_f64, double, tg__dlanes, WIDEN_NONE)

/* row_dot_f32 or row_dot_f64 on x and y (or NULL) of dtype. */
static inline __attribute__((always_inline)) double row_dot(tg_dtype dtype, const void *x,
                                                            const void *y, int64_t n)
{
    return dtype == TG_FLOAT32 ? row_dot_f32(x, y, n) : row_dot_f64(x, y, n);
}

TG_VECTOR_CLONES_EXTERN(tg__attn_exp_row)
double tg__attn_exp_row(tg_dtype dtype, void *t, double shift, int64_t nc)
{
    if (dtype == TG_FLOAT32) {
        float *d = t;
        for (int64_t c = 0; c < nc; c++)
            d[c] = tg__expf((float)((double)d[c] - shift));
        return row_dot(dtype, d, NULL, nc);
    }
    double *d = t;
    for (int64_t c = 0; c < nc; c++)
        d[c] = exp(d[c] - shift);
    return row_dot(dtype, d, NULL, nc);
}

void tg__attn_scaled_copy(tg_dtype dtype, void *dst, const void *src, int64_t n, double f)
{
    if (dtype == TG_FLOAT32) {
        float *d = dst, ff = (float)f;
        const float *x = src;
        for (int64_t i = 0; i < n; i++)
            d[i] = ff * x[i];
    } else {
        double *d = dst;
        const double *x = src;
        for (int64_t i = 0; i < n; i++)
            d[i] = f * x[i];
    }
}

/* Rows ahead that tg__attn_row_dots fetches. */
#define DOTS_AHEAD 4

TG_VECTOR_CLONES_EXTERN(tg__attn_row_dots)
void tg__attn_row_dots(tg_dtype dtype, const void *x, int64_t ldx, const void *y, int64_t ldy,
                       int64_t rows, int64_t n, double *dsum)
{
    size_t es = tg_dtype_size(dtype), bytes = (size_t)n * es;
    for (int64_t i = 0; i < rows; i++) {
        const char *xi = (const char *)x + (size_t)(i * ldx) * es;
        const char *yi = (const char *)y + (size_t)(i * ldy) * es;
        /* rows a page or so apart, as in a head's slice of [B, T, H E]:
         * fetched a few rows ahead, past where the hardware prefetchers stop */
        if (i + DOTS_AHEAD < rows)
            for (size_t c = 0; c < bytes; c += 64) {
                __builtin_prefetch(xi + (size_t)(DOTS_AHEAD * ldx) * es + c);
                __builtin_prefetch(yi + (size_t)(DOTS_AHEAD * ldy) * es + c);
            }
        dsum[i] = row_dot(dtype, xi, yi, n);
    }
}

/* ---- float32 tiles without dropout ------------------------------------------ */

/* Each row is padded with -inf to whole vectors of TG_ATTN_ROW_PAD, so that
 * its max, its exps and their sum run on whole vectors. The max is exact in
 * float, and so is s - max as float rounds it: the same bits as the
 * general path's difference taken in double. */

typedef float pad_lanes __attribute__((vector_size(TG_ATTN_ROW_PAD * sizeof(float))));
typedef int32_t pad_bits __attribute__((vector_size(TG_ATTN_ROW_PAD * sizeof(int32_t))));

/* The larger of a and b lane by lane, as `>` picks (no NaN reaches here);
 * a macro, since a function returning a 64-byte vector changes the ABI. */
#define LANES_MAX(a, b)                                                                 \
    ({                                                                                  \
        pad_lanes a_ = (a), b_ = (b);                                                   \
        pad_bits gt_ = a_ > b_;                                                         \
        (pad_lanes)(((pad_bits)a_ & gt_) | ((pad_bits)b_ & ~gt_));                      \
    })

/* The largest of init and the row's nc scores, after padding the row. The
 * lanes hold no NaN (`>` passes NaNs over), so the largest is one value
 * whatever the order: the lanes are folded in halves. */
static inline __attribute__((always_inline)) float padded_row_max(float *t, int64_t nc,
                                                                  float init)
{
    int64_t vecs = (nc + TG_ATTN_ROW_PAD - 1) / TG_ATTN_ROW_PAD;
    for (int64_t c = nc; c < vecs * TG_ATTN_ROW_PAD; c++)
        t[c] = -INFINITY;
    pad_lanes m;
    for (int l = 0; l < TG_ATTN_ROW_PAD; l++)
        m[l] = init;
    for (int64_t i = 0; i < vecs; i++) {
        pad_lanes v;
        memcpy(&v, t + i * TG_ATTN_ROW_PAD, sizeof v);
        m = LANES_MAX(v, m);
    }
    _Static_assert(TG_ATTN_ROW_PAD == 16, "the fold below is written for 16 lanes");
    m = LANES_MAX(m, __builtin_shufflevector(m, m, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4,
                                             5, 6, 7));
    m = LANES_MAX(m, __builtin_shufflevector(m, m, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2,
                                             3));
    m = LANES_MAX(m, __builtin_shufflevector(m, m, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0,
                                             1));
    m = LANES_MAX(m, __builtin_shufflevector(m, m, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,
                                             0));
    return m[0];
}

/* t[c] = exp(t[c] - mx) over the padded row (the padding becomes 0), in
 * whole vectors; their sum in double lanes. */
static inline __attribute__((always_inline)) double padded_row_exp(float *t, int64_t nc, float mx)
{
    int64_t vecs = (nc + TG_ATTN_ROW_PAD - 1) / TG_ATTN_ROW_PAD;
    for (int64_t i = 0; i < vecs; i++) {
        float *v = t + i * TG_ATTN_ROW_PAD;
        for (int l = 0; l < TG_ATTN_ROW_PAD; l++)
            v[l] = tg__expf(v[l] - mx);
    }
    tg__dlanes acc = {0};
    for (int64_t c = 0; c < vecs * TG_ATTN_ROW_PAD; c += TG_DLANES) {
        tg__flanes v;
        memcpy(&v, t + c, sizeof v);
        acc += __builtin_convertvector(v, tg__dlanes);
    }
    return dlanes_sum(acc);
}

/* In passes over all the rows, as tg__attn_softmax_f32 below: the maxima,
 * then the exps and their sums, then the running sums and the rescaling. */
TG_VECTOR_CLONES_EXTERN(tg__attn_online_softmax_f32)
void tg__attn_online_softmax_f32(void *tile, int64_t ldt, void *acc, double *m, double *l,
                                 int64_t nr, int64_t nc, int64_t ev)
{
    float mx[TG_ATTN_TILE];
    double sum[TG_ATTN_TILE];
    for (int64_t r = 0; r < nr; r++) /* m: -inf or a float max */
        mx[r] = padded_row_max((float *)tile + r * ldt, nc, (float)m[r]);
    for (int64_t r = 0; r < nr; r++) {
        float *t = (float *)tile + r * ldt;
        if (mx[r] == -INFINITY) /* nothing seen yet in this row: add nothing */
            memset(t, 0, (size_t)nc * sizeof *t);
        else
            sum[r] = padded_row_exp(t, nc, mx[r]);
    }
    for (int64_t r = 0; r < nr; r++) {
        if (mx[r] == -INFINITY)
            continue;
        bool first = m[r] == -INFINITY; /* the accumulator is still zero */
        double alpha = first ? 1 : exp(m[r] - mx[r]);
        l[r] = l[r] * alpha + sum[r];
        m[r] = mx[r];
        if (alpha != 1) {
            float *row = (float *)acc + r * ev, fa = (float)alpha;
            for (int64_t e = 0; e < ev; e++)
                row[e] *= fa;
        }
    }
}

/* In passes over all the rows, so that one row's exps need not wait on the
 * last row's sum. */
TG_VECTOR_CLONES_EXTERN(tg__attn_softmax_f32)
void tg__attn_softmax_f32(float *t, int64_t ldt, int64_t nr, int64_t nc, double *sum,
                          double *lse)
{
    float mx[TG_ATTN_TILE];
    for (int64_t r = 0; r < nr; r++)
        mx[r] = padded_row_max(t + r * ldt, nc, -INFINITY);
    for (int64_t r = 0; r < nr; r++) {
        if (mx[r] == -INFINITY) {
            memset(t + r * ldt, 0, (size_t)nc * sizeof *t);
            if (lse)
                lse[r] = -INFINITY;
            continue;
        }
        sum[r] = padded_row_exp(t + r * ldt, nc, mx[r]);
    }
    for (int64_t r = 0; r < nr; r++) {
        if (mx[r] == -INFINITY)
            continue;
        float *row = t + r * ldt, inv = (float)(1.0 / sum[r]);
        for (int64_t c = 0; c < nc; c++)
            row[c] *= inv;
        if (lse)
            lse[r] = mx[r] + log(sum[r]);
    }
}

TG_VECTOR_CLONES_EXTERN(tg__attn_kept_ds)
void tg__attn_kept_ds(const float *P, int64_t ldp, const float *dpd, int64_t ldd, float *ds,
                      int64_t ldo, int64_t nr, int64_t nc)
{
    for (int64_t r = 0; r < nr; r++) {
        const float *pr = P + r * ldp, *dr = dpd + r * ldd;
        float d = (float)row_dot(TG_FLOAT32, pr, dr, nc);
        for (int64_t c = 0; c < nc; c++)
            ds[r * ldo + c] = pr[c] * (dr[c] - d);
    }
}
