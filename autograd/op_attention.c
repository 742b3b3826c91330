/* Fused scaled-dot-product attention: dropout(softmax(q k^T * scale + mask)) v
 * computed block by block with an online softmax (FlashAttention style), so
 * neither pass holds more than a [BR, BC] tile of scores; backward recomputes
 * the tiles from q, k and the per-row logsumexp saved by the forward, and the
 * dropout mask from its key. A short problem, one tile per batch, keeps its
 * weights instead. The row arithmetic on a tile is attention_rows.c's. Two
 * ops share the passes: tg_attention on q, k and v, and
 * tg_attention_qkvpacked on the one [B, T, 3 H E] projection they come
 * from, whose backward writes the three gradients into one. */
#include "attention_rows.h"
#include "dropout_mask.h"
#include "fastmath.h"
#include "gemm.h"
#include "graph.h"

#include <stdlib.h>
#include <string.h>

/* Tile sizes: BR query rows by BC keys. A [BR, BC] float tile is 16 KiB. */
#define BR TG_ATTN_TILE
#define BC TG_ATTN_TILE
/* Multiply-adds below which one thread does everything: about a
 * microsecond of work, on the order of what starting a team costs. */
#define PAR_MIN (32.0 * 32.0 * 64.0)

/* Everything the kernels read, on contiguous q [nb, L, E], k [nb', S, E] and
 * v [nb', S, Ev] whose batch dims broadcast to bshape. */
typedef struct {
    tg_dtype dtype;
    int nbd;                        /* batch dims */
    int64_t bshape[TG_MAX_DIMS];    /* broadcast batch shape */
    int64_t nb;                     /* its product */
    int64_t L, S, E, Ev;
    double scale;
    bool causal;                    /* key j > query i is masked */
    const char *q, *k, *v;          /* element pointers (bytes) */
    int64_t qb[TG_MAX_DIMS], kb[TG_MAX_DIMS], vb[TG_MAX_DIMS]; /* batch strides */
    int64_t qrs, krs, vrs;          /* row strides (elements; >= the row's length) */
    const tg_tensor *mask;          /* NULL, or bool / float broadcast to [bshape, L, S] */
    int64_t mst[TG_MAX_DIMS];       /* mask strides over [bshape, L, S] */
    /* Dropout of the weights: element (b, i, j) is zeroed when
     * tg__dropped(key, (b L + i) S + j, drop_below), else scaled by keep. */
    bool dropout;
    uint64_t key, drop_below;
    double keep;
    /* [nb, L, wld] float32: the weights of a short problem (keeps_weights),
     * written by the forward and read back by the backward; else NULL. */
    float *weights;
    int64_t wld; /* its row stride: the keys rounded up to whole vectors */
} attn_plan;

/* Element offset of batch b (row-major over bshape) for the given strides. */
static int64_t batch_off(const attn_plan *p, const int64_t *stride, int64_t b)
{
    int64_t off = 0;
    for (int d = p->nbd - 1; d >= 0; d--) {
        off += (b % p->bshape[d]) * stride[d];
        b /= p->bshape[d];
    }
    return off;
}

static size_t esize(const attn_plan *p)
{
    return tg_dtype_size(p->dtype);
}

/* The last key block a query block [r0, r1) looks at ends here. */
static int64_t key_end(const attn_plan *p, int64_t r1)
{
    return p->causal && r1 < p->S ? r1 : p->S;
}

/* One row of a score tile in T: the mask row mp (elements sj apart; bool:
 * true masks, float: added in double, the sum rounded to T). */
#define MASK_ROW(T, row, m, mp_off, sj, nc)                                   \
    do {                                                                      \
        if ((m)->dtype == TG_BOOL) {                                          \
            const bool *mp = (const bool *)tg__ptr(m) + (mp_off);             \
            for (int64_t c = 0; c < (nc); c++)                                \
                if (mp[c * (sj)])                                             \
                    (row)[c] = -INFINITY;                                     \
        } else if ((m)->dtype == TG_FLOAT32) {                                \
            const float *mp = (const float *)tg__ptr(m) + (mp_off);           \
            for (int64_t c = 0; c < (nc); c++)                                \
                (row)[c] = (T)((double)(row)[c] + mp[c * (sj)]);              \
        } else {                                                              \
            const double *mp = (const double *)tg__ptr(m) + (mp_off);         \
            for (int64_t c = 0; c < (nc); c++)                                \
                (row)[c] = (T)((double)(row)[c] + mp[c * (sj)]);              \
        }                                                                     \
    } while (0)

/* Adds the mask and the causal rule to a tile of scores t [nr, ldt] in the
 * dtype (rows r0.., keys j0..): masked entries become -inf, a float mask is
 * added. */
static void mask_tile(const attn_plan *p, int64_t b, int64_t r0, int64_t nr, int64_t j0,
                      int64_t nc, void *t, int64_t ldt)
{
    bool f32 = p->dtype == TG_FLOAT32;
    if (p->mask) {
        const tg_tensor *m = p->mask;
        int64_t base = batch_off(p, p->mst, b), si = p->mst[p->nbd], sj = p->mst[p->nbd + 1];
        for (int64_t r = 0; r < nr; r++) {
            int64_t o = base + (r0 + r) * si + j0 * sj;
            if (f32)
                MASK_ROW(float, (float *)t + r * ldt, m, o, sj, nc);
            else
                MASK_ROW(double, (double *)t + r * ldt, m, o, sj, nc);
        }
    }
    if (p->causal && j0 + nc - 1 > r0)
        for (int64_t r = 0; r < nr; r++)
            for (int64_t c = r0 + r + 1 - j0 < 0 ? 0 : r0 + r + 1 - j0; c < nc; c++) {
                if (f32)
                    ((float *)t)[r * ldt + c] = -INFINITY;
                else
                    ((double *)t)[r * ldt + c] = -INFINITY;
            }
}

/* Whether the tile of rows r0.. and keys j0.. (nc of them) crosses the
 * causal diagonal: some of its keys come after some of its rows. */
static bool on_diagonal(const attn_plan *p, int64_t r0, int64_t j0, int64_t nc)
{
    return p->causal && j0 + nc - 1 > r0;
}

/* C = alpha op(A) B + beta C for one of a tile's products (B stored K x
 * N). On a float32 tile across the causal diagonal, op(A) (the weights or
 * their gradient, or its transpose) is zero outside the band [i + lo, i +
 * hi] of each row i, and the product reads only that band. */
static int tile_product(const attn_plan *p, bool diag, bool trans_a, int64_t m, int64_t n,
                        int64_t k, double alpha, const void *a, int64_t lda, const void *b,
                        int64_t ldb, double beta, void *c, int64_t ldc, int64_t lo, int64_t hi)
{
    if (diag && p->dtype == TG_FLOAT32 && m > 0 && n > 0 && k > 0)
        return tg__sgemm_tiny_band(trans_a, false, m, n, k, (float)alpha, a, lda, b, ldb,
                                   (float)beta, c, ldc, lo, hi);
    return tg__gemm(p->dtype, true, trans_a, false, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* The tile of scaled scores for rows r0.. and keys j0.. of batch b, with
 * the mask applied, in the dtype's buffer t [nr, ldt]. */
static int score_rows(const attn_plan *p, int64_t b, int64_t r0, int64_t nr, int64_t j0,
                      int64_t nc, void *t, int64_t ldt)
{
    const char *q = p->q + (size_t)(batch_off(p, p->qb, b) + r0 * p->qrs) * esize(p);
    const char *k = p->k + (size_t)(batch_off(p, p->kb, b) + j0 * p->krs) * esize(p);
    if (tg__gemm(p->dtype, true, false, true, nr, nc, p->E, p->scale, q, p->qrs, k, p->krs, 0.0,
                 t, ldt) < 0)
        return -1;
    mask_tile(p, b, r0, nr, j0, nc, t, ldt);
    return 0;
}

/* The same into a scratch tile [nr, BC]. */
static int score_tile(const attn_plan *p, int64_t b, int64_t r0, int64_t nr, int64_t j0,
                      int64_t nc, void *t)
{
    return score_rows(p, b, r0, nr, j0, nc, t, BC);
}

static void store(tg_dtype dtype, void *t, int64_t i, double x)
{
    if (dtype == TG_FLOAT32)
        ((float *)t)[i] = (float)x;
    else
        ((double *)t)[i] = x;
}


/* Per-thread scratch: a dtype tile t [BR, BC] (the scores, then what is
 * made of them in place), a second one t2 (backward's dP), and an
 * accumulator acc [BR, Ev]. */
typedef struct {
    void *t, *t2, *acc;
    double *m, *l; /* [BR]: running max and sum */
} scratch;

static int scratch_new(scratch *w, const attn_plan *p)
{
    size_t es = esize(p), ev = (size_t)(p->Ev > 0 ? p->Ev : 1);
    w->t = malloc(BR * BC * es);
    w->t2 = malloc(BR * BC * es);
    w->acc = malloc(BR * ev * es);
    w->m = malloc(BR * sizeof(double));
    w->l = malloc(BR * sizeof(double));
    return w->t && w->t2 && w->acc && w->m && w->l ? 0 : -1;
}

static void scratch_free(scratch *w)
{
    free(w->t), free(w->t2), free(w->acc), free(w->m), free(w->l);
}

/* ---- forward ------------------------------------------------------------- */

/* Row i of batch b's weights, keys j0.. (nc of them, at t): dropout's mask
 * applied in place. */
static void drop_weights(const attn_plan *p, int64_t b, int64_t i, int64_t j0, void *t,
                         int64_t nc)
{
    tg__drop_span(p->dtype, p->key, p->drop_below, p->keep, (b * p->L + i) * p->S + j0, nc, t, t);
}

/* Online softmax over one score tile (rows r0.., keys j0.. of batch b): for
 * each row, the new running max, the rescaling of what was accumulated, and
 * p = exp(s - max) in place of the scores in w->t, dropped out after its sum
 * is taken (the sum normalises the weights before dropout). */
static void online_softmax(const attn_plan *p, scratch *w, int64_t b, int64_t r0, int64_t j0,
                           int64_t nr, int64_t nc)
{
    for (int64_t r = 0; r < nr; r++) {
        char *t = (char *)w->t + (size_t)(r * BC) * esize(p);
        double mx = tg__attn_row_max(p->dtype, t, nc, w->m[r]);
        if (mx == -INFINITY) { /* nothing seen yet in this row: add nothing */
            for (int64_t c = 0; c < nc; c++)
                store(p->dtype, t, c, 0);
            continue;
        }
        double alpha = exp(w->m[r] - mx), sum = tg__attn_exp_row(p->dtype, t, mx, nc);
        if (p->dropout)
            drop_weights(p, b, r0 + r, j0, t, nc);
        bool first = w->m[r] == -INFINITY; /* the accumulator is still zero */
        w->l[r] = w->l[r] * alpha + sum;
        w->m[r] = mx;
        if (alpha != 1 && !first) {
            char *row = (char *)w->acc + (size_t)(r * p->Ev) * esize(p);
            tg__attn_scaled_copy(p->dtype, row, row, p->Ev, alpha);
        }
    }
}

/* Where row t of batch b starts in the output. With two batch dims
 * [B, H] (heads) the output is stored as [B, L, H, Ev], so that the caller's
 * transpose(1, 2) and reshape to [B, L, H * Ev] that merges the heads is a
 * view, not a copy; otherwise it is stored contiguously. */
static int64_t out_row(const attn_plan *p, int64_t b, int64_t t)
{
    if (p->nbd != 2)
        return (b * p->L + t) * p->Ev;
    int64_t H = p->bshape[1], b0 = b / H, b1 = b % H;
    return ((b0 * p->L + t) * H + b1) * p->Ev;
}

/* Whether the whole problem is one float32 tile without dropout per batch
 * (a short sequence): its weights, nb L wld floats, are then kept for the
 * backward, which reads them back instead of recomputing the scores and
 * their exps. */
static bool keeps_weights(const attn_plan *p)
{
    return p->dtype == TG_FLOAT32 && !p->dropout && p->L > 0 && p->L <= BR && p->Ev > 0 &&
           key_end(p, p->L) > 0 && key_end(p, p->L) <= BC;
}

/* The row stride of the kept weights: the keys rounded up to whole vectors. */
static int64_t weights_ld(const attn_plan *p)
{
    return (key_end(p, p->L) + TG_ATTN_ROW_PAD - 1) / TG_ATTN_ROW_PAD * TG_ATTN_ROW_PAD;
}

/* forward_block for float32 without dropout when one tile holds every key
 * the rows see: the weights are normalised in the tile and multiply v
 * straight into the output, with no accumulator to rescale. */
static int forward_one_tile_f32(const attn_plan *p, scratch *w, int64_t b, int64_t r0,
                                int64_t nr, int64_t nc, char *out, double *lse)
{
    /* the weights kept for the backward are made in place */
    float *t = p->weights ? p->weights + (b * p->L + r0) * p->wld : w->t;
    int64_t ldt = p->weights ? p->wld : BC;
    if (score_rows(p, b, r0, nr, 0, nc, t, ldt) < 0)
        return -1;
    /* kept weights make the backward's logsumexp unneeded */
    tg__attn_softmax_f32(t, ldt, nr, nc, w->l, p->weights ? NULL : lse + b * p->L + r0);
    const float *v = (const float *)p->v + batch_off(p, p->vb, b);
    int64_t ldo = nr > 1 ? out_row(p, b, r0 + 1) - out_row(p, b, r0) : p->Ev;
    /* row i's weights end at key r0 + i on the diagonal */
    return tile_product(p, on_diagonal(p, r0, 0, nc), false, nr, p->Ev, nc, 1.0, t, ldt, v,
                        p->vrs, 0.0, (float *)out + out_row(p, b, r0), ldo, INT64_MIN, r0);
}

/* Rows [r0, r0 + nr) of batch b: out [nb, L, Ev], lse [nb, L] (double). */
static int forward_block(const attn_plan *p, scratch *w, int64_t b, int64_t r0, int64_t nr,
                         char *out, double *lse)
{
    size_t es = esize(p);
    int64_t keys = key_end(p, r0 + nr);
    if (p->dtype == TG_FLOAT32 && !p->dropout && keys <= BC && keys > 0 && p->Ev > 0)
        return forward_one_tile_f32(p, w, b, r0, nr, keys, out, lse);
    memset(w->acc, 0, (size_t)(nr * p->Ev) * es);
    for (int64_t r = 0; r < nr; r++)
        w->m[r] = -INFINITY, w->l[r] = 0;
    const char *v = p->v + (size_t)batch_off(p, p->vb, b) * es;
    for (int64_t j0 = 0, jend = key_end(p, r0 + nr); j0 < jend; j0 += BC) {
        int64_t nc = jend - j0 < BC ? jend - j0 : BC;
        if (score_tile(p, b, r0, nr, j0, nc, w->t) < 0)
            return -1;
        if (p->dtype == TG_FLOAT32 && !p->dropout)
            tg__attn_online_softmax_f32(w->t, BC, w->acc, w->m, w->l, nr, nc, p->Ev);
        else
            online_softmax(p, w, b, r0, j0, nr, nc);
        if (tile_product(p, on_diagonal(p, r0, j0, nc), false, nr, p->Ev, nc, 1.0, w->t, BC,
                         v + (size_t)(j0 * p->vrs) * es, p->vrs, 1.0, w->acc, p->Ev, INT64_MIN,
                         r0 - j0) < 0)
            return -1;
    }
    int64_t row0 = b * p->L + r0;
    for (int64_t r = 0; r < nr; r++) {
        /* A row with every key masked has l = 0: zeros, as the softmax op gives. */
        double inv = w->l[r] > 0 ? 1.0 / w->l[r] : 0;
        tg__attn_scaled_copy(p->dtype, out + (size_t)out_row(p, b, r0 + r) * es,
                    (const char *)w->acc + (size_t)(r * p->Ev) * es, p->Ev, inv);
        lse[row0 + r] = w->l[r] > 0 ? w->m[r] + log(w->l[r]) : -INFINITY;
    }
    return 0;
}

/* Parallel over (batch, query block) pairs. Returns 0 or -1 (out of memory). */
static int forward_all(const attn_plan *p, char *out, double *lse)
{
    int64_t nblk = (p->L + BR - 1) / BR, tasks = p->nb * nblk;
    bool par = tasks > 1 && (double)p->nb * p->L * p->S * (p->E + p->Ev) > PAR_MIN;
    int failed = 0;
    (void)par;
#pragma omp parallel if (par)
    {
        scratch w;
        int bad = scratch_new(&w, p);
#pragma omp for schedule(static)
        for (int64_t t = 0; t < tasks; t++) {
            int64_t b = t / nblk, r0 = (t % nblk) * BR;
            if (!bad)
                bad = forward_block(p, &w, b, r0, p->L - r0 < BR ? p->L - r0 : BR, out, lse);
        }
        scratch_free(&w);
        if (bad) {
#pragma omp atomic write
            failed = 1;
        }
    }
    return failed ? -1 : 0;
}

/* ---- backward ------------------------------------------------------------ */

/* Gradients of one batch b: dq [L, E], dk [S, E], dv [S, Ev] (this
 * batch's slices, which backward_batch zeroes first), from go [L, Ev] and o
 * [L, Ev] (this batch's upstream gradient and output) and lse. Each has its
 * own row stride (elements): the gradients may be written straight into the
 * packed or head-interleaved layouts that their users hold. dq, dk, dv may
 * be NULL when not needed, o when the weights were kept. */
typedef struct {
    const char *go, *o;
    const double *lse;
    char *dq, *dk, *dv;
    int64_t go_rs, o_rs, dq_rs, dk_rs, dv_rs;
} grad_slices;

/* z[c] = the scale dropout gave key j0 + c of row i in batch b: 0 or keep
 * (the mask applied to ones). */
static void keep_row(const attn_plan *p, int64_t b, int64_t i, int64_t j0, double *z,
                     int64_t nc)
{
    for (int64_t c = 0; c < nc; c++)
        z[c] = 1;
    tg__drop_span(TG_FLOAT64, p->key, p->drop_below, p->keep, (b * p->L + i) * p->S + j0, nc, z,
                  z);
}

/* From the scores s in w->t (rows r0.., keys j0.. of batch b) and dPd
 * [nr, nc] in w->t2, the gradient of the weights after dropout:
 * P = exp(s - lse), Pd = P * Z (Z: dropout's 0 or keep) into w->t2 and
 * dS = P * (dPd * Z - D) into w->t, each element in place. D = rowsum(dPd *
 * Pd) = rowsum(dO * O) holds with dropout too. */
TG_VECTOR_CLONES
static void grad_tile(const attn_plan *p, scratch *w, const double *lse, const double *dsum,
                      int64_t b, int64_t r0, int64_t j0, int64_t nr, int64_t nc)
{
    for (int64_t r = 0; r < nr; r++) {
        /* lse = -inf only on a row with every key masked: P = 0 there. */
        double shift = lse[r], keep_all = shift == -INFINITY ? 0 : 1;
        if (shift == -INFINITY)
            shift = 0;
        double z[BC];
        if (p->dropout)
            keep_row(p, b, r0 + r, j0, z, nc);
        if (p->dtype == TG_FLOAT32 && p->dropout) {
            float *ds = (float *)w->t + r * BC, *pd = (float *)w->t2 + r * BC, d = (float)dsum[r];
            for (int64_t c = 0; c < nc; c++) {
                float pr = tg__expf((float)((double)ds[c] - shift)) * (float)keep_all;
                float zc = (float)z[c];
                ds[c] = pr * (pd[c] * zc - d);
                pd[c] = pr * zc;
            }
        } else if (p->dtype == TG_FLOAT32) {
            float *ds = (float *)w->t + r * BC, *pd = (float *)w->t2 + r * BC, d = (float)dsum[r];
            for (int64_t c = 0; c < nc; c++) {
                float pr = tg__expf((float)((double)ds[c] - shift)) * (float)keep_all;
                ds[c] = pr * (pd[c] - d);
                pd[c] = pr;
            }
        } else if (p->dropout) {
            double *ds = (double *)w->t + r * BC, *pd = (double *)w->t2 + r * BC;
            for (int64_t c = 0; c < nc; c++) {
                double pr = exp(ds[c] - shift) * keep_all;
                ds[c] = pr * (pd[c] * z[c] - dsum[r]);
                pd[c] = pr * z[c];
            }
        } else {
            double *ds = (double *)w->t + r * BC, *pd = (double *)w->t2 + r * BC;
            for (int64_t c = 0; c < nc; c++) {
                double pr = exp(ds[c] - shift) * keep_all;
                ds[c] = pr * (pd[c] - dsum[r]);
                pd[c] = pr;
            }
        }
    }
}

/* rows rows of cols elements (es bytes each), ld elements apart, set to 0:
 * a head's rows of 64 floats take a few vector stores each, where a call
 * to memset per row cost more than the stores. */
static void zero_rows(char *x, int64_t rows, int64_t cols, int64_t ld, size_t es)
{
    if (ld == cols) {
        memset(x, 0, (size_t)(rows * cols) * es);
        return;
    }
    typedef char block __attribute__((vector_size(64)));
    const block zero = {0};
    size_t bytes = (size_t)cols * es, whole = bytes / sizeof zero * sizeof zero;
    for (int64_t r = 0; r < rows; r++) {
        char *row = x + (size_t)(r * ld) * es;
        for (size_t c = 0; c < whole; c += sizeof zero)
            memcpy(row + c, &zero, sizeof zero);
        memset(row + whole, 0, bytes - whole);
    }
}

/* The rows of dk and dv from key seen on, which no query reaches (causal,
 * with more keys than queries): zero. */
static void zero_unseen_keys(const attn_plan *p, const grad_slices *g, int64_t seen)
{
    size_t es = esize(p);
    if (g->dk && seen < p->S)
        zero_rows(g->dk + (size_t)(seen * g->dk_rs) * es, p->S - seen, p->E, g->dk_rs, es);
    if (g->dv && seen < p->S)
        zero_rows(g->dv + (size_t)(seen * g->dv_rs) * es, p->S - seen, p->Ev, g->dv_rs, es);
}

/* backward_batch's products when the forward kept the weights P [L, wld]
 * of batch b (one tile): dPd = dO V^T, dS = P (dPd - D), and the three
 * gradients from P and dS, with nothing recomputed and no need of O. */
static int backward_kept(const attn_plan *p, scratch *w, int64_t b, const grad_slices *g,
                         const float *q, const float *k, const float *v)
{
    int64_t nr = p->L, nc = key_end(p, p->L), S = p->wld;
    const float *P = p->weights + b * p->L * S;
    float *ds = w->t, *dpd = w->t2;
    if (tg__sgemm_builtin(false, true, nr, nc, p->Ev, 1.0f, (const float *)g->go, g->go_rs, v,
                          p->vrs, 0.0f, dpd, BC) < 0)
        return -1;
    tg__attn_kept_ds(P, S, dpd, BC, ds, BC, nr, nc);
    bool diag = on_diagonal(p, 0, 0, nc);
    int rc = 0;
    /* one tile: each product writes its gradient's rows outright */
    if (g->dv)
        rc |= tile_product(p, diag, true, nc, p->Ev, nr, 1.0, P, S, g->go, g->go_rs, 0.0, g->dv,
                           g->dv_rs, 0, INT64_MAX);
    if (g->dk)
        rc |= tile_product(p, diag, true, nc, p->E, nr, p->scale, ds, BC, q, p->qrs, 0.0, g->dk,
                           g->dk_rs, 0, INT64_MAX);
    if (g->dq)
        rc |= tile_product(p, diag, false, nr, p->E, nc, p->scale, ds, BC, k, p->krs, 0.0, g->dq,
                           g->dq_rs, INT64_MIN, 0);
    zero_unseen_keys(p, g, nc);
    return rc < 0 ? -1 : 0;
}

static int backward_batch(const attn_plan *p, scratch *w, int64_t b, const grad_slices *g,
                          double *dsum)
{
    tg_dtype dt = p->dtype;
    size_t es = esize(p);
    const char *q = p->q + (size_t)batch_off(p, p->qb, b) * es;
    const char *k = p->k + (size_t)batch_off(p, p->kb, b) * es;
    const char *v = p->v + (size_t)batch_off(p, p->vb, b) * es;
    if (p->weights)
        return backward_kept(p, w, b, g, (const float *)q, (const float *)k, (const float *)v);
    /* D[i] = sum_e dO[i,e] O[i,e]: the rowsum(dP * P) of the softmax backward. */
    tg__attn_row_dots(dt, g->go, g->go_rs, g->o, g->o_rs, p->L, p->Ev, dsum);
    /* Each gradient row is written by the first tile that reaches it and
     * added to by the rest, so nothing is zeroed first: a query block's
     * first tile is key block 0; key blocks are reached in order, and those
     * below seen had been reached by an earlier query block (the blocks line
     * up, BR being BC, and only the last query block can end short). */
    int64_t seen = 0;
    if (p->S == 0 && g->dq) /* no key at all: no tile */
        zero_rows(g->dq, p->L, p->E, g->dq_rs, es);
    for (int64_t r0 = 0; r0 < p->L; r0 += BR) {
        int64_t nr = p->L - r0 < BR ? p->L - r0 : BR;
        const char *qi = q + (size_t)(r0 * p->qrs) * es;
        const char *goi = g->go + (size_t)(r0 * g->go_rs) * es;
        for (int64_t j0 = 0, jend = key_end(p, r0 + nr); j0 < jend; j0 += BC) {
            int64_t nc = jend - j0 < BC ? jend - j0 : BC;
            const char *kj = k + (size_t)(j0 * p->krs) * es, *vj = v + (size_t)(j0 * p->vrs) * es;
            int rc = score_tile(p, b, r0, nr, j0, nc, w->t);
            /* dPd = dO_i V_j^T [nr, nc] */
            rc |= tg__gemm(dt, true, false, true, nr, nc, p->Ev, 1.0, goi, g->go_rs, vj, p->vrs,
                           0.0, w->t2, BC);
            if (rc < 0)
                return -1;
            grad_tile(p, w, g->lse + r0, dsum + r0, b, r0, j0, nr, nc); /* t = dS, t2 = Pd */
            /* dV_j += Pd^T dO_i; dK_j += scale dS^T Q_i; dQ_i += scale dS K_j. On
             * the diagonal, key j sees queries from j - d on, and query i keys
             * up to i + d. */
            bool diag = on_diagonal(p, r0, j0, nc);
            int64_t d = r0 - j0;
            double key_beta = j0 < seen ? 1.0 : 0.0, query_beta = j0 > 0 ? 1.0 : 0.0;
            if (g->dv)
                rc |= tile_product(p, diag, true, nc, p->Ev, nr, 1.0, w->t2, BC, goi, g->go_rs,
                                   key_beta, g->dv + (size_t)(j0 * g->dv_rs) * es, g->dv_rs, -d,
                                   INT64_MAX);
            if (g->dk)
                rc |= tile_product(p, diag, true, nc, p->E, nr, p->scale, w->t, BC, qi, p->qrs,
                                   key_beta, g->dk + (size_t)(j0 * g->dk_rs) * es, g->dk_rs, -d,
                                   INT64_MAX);
            if (g->dq)
                rc |= tile_product(p, diag, false, nr, p->E, nc, p->scale, w->t, BC, kj, p->krs,
                                   query_beta, g->dq + (size_t)(r0 * g->dq_rs) * es, g->dq_rs,
                                   INT64_MIN, d);
            if (rc < 0)
                return -1;
        }
        int64_t jend = key_end(p, r0 + nr);
        seen = jend > seen ? jend : seen;
    }
    zero_unseen_keys(p, g, seen);
    return 0;
}

/* Where the whole backward reads and writes: at, the slices of batch 0,
 * and the batch strides over bshape of go, o, dq, dk and dv. */
typedef struct {
    grad_slices at;
    int64_t gob[TG_MAX_DIMS], ob[TG_MAX_DIMS], dqb[TG_MAX_DIMS], dkb[TG_MAX_DIMS],
        dvb[TG_MAX_DIMS];
} grad_layout;

/* g's slices of batch b. */
static grad_slices batch_slices(const attn_plan *p, const grad_layout *g, int64_t b)
{
    size_t es = esize(p);
    grad_slices s = g->at;
    s.go += (size_t)batch_off(p, g->gob, b) * es;
    s.lse += b * p->L;
    if (s.o)
        s.o += (size_t)batch_off(p, g->ob, b) * es;
    if (s.dq)
        s.dq += (size_t)batch_off(p, g->dqb, b) * es;
    if (s.dk)
        s.dk += (size_t)batch_off(p, g->dkb, b) * es;
    if (s.dv)
        s.dv += (size_t)batch_off(p, g->dvb, b) * es;
    return s;
}

/* Parallel over batches: each owns its slices of dq, dk and dv. */
static int backward_all(const attn_plan *p, const grad_layout *g)
{
    bool par = p->nb > 1 && (double)p->nb * p->L * p->S * (p->E + p->Ev) > PAR_MIN;
    int failed = 0;
    (void)par;
#pragma omp parallel if (par)
    {
        scratch w;
        double *dsum = malloc((size_t)(p->L > 0 ? p->L : 1) * sizeof(double)); /* [L] */
        int bad = scratch_new(&w, p) < 0 || !dsum;
#pragma omp for schedule(static)
        for (int64_t b = 0; b < p->nb; b++) {
            grad_slices gb = batch_slices(p, g, b);
            if (!bad)
                bad = backward_batch(p, &w, b, &gb, dsum);
        }
        scratch_free(&w);
        free(dsum);
        if (bad) {
#pragma omp atomic write
            failed = 1;
        }
    }
    return failed ? -1 : 0;
}

/* ---- shapes and the op ----------------------------------------------------- */

/* Batch strides of a contiguous t ([..., rows, cols]) over p's bshape: 0
 * where t lacks the dim or has size 1 there. */
static void batch_strides(const attn_plan *p, const tg_tensor *t, int64_t *out)
{
    int lead = p->nbd - (t->ndim - 2);
    for (int d = 0; d < p->nbd; d++)
        out[d] = d < lead || t->shape[d - lead] == 1 ? 0 : t->stride[d - lead];
}

/* Fills p's shapes from q, k, v and mask (not yet the data pointers), or
 * records why they do not fit. */
static int plan_shapes(attn_plan *p, const tg_tensor *q, const tg_tensor *k, const tg_tensor *v,
                       const tg_tensor *mask)
{
    const char *fn = "tg_attention";
    if (q->ndim < 2 || k->ndim < 2 || v->ndim < 2 || q->shape[q->ndim - 1] != k->shape[k->ndim - 1] ||
        k->shape[k->ndim - 2] != v->shape[v->ndim - 2]) {
        tg__fail(TG_ERR_SHAPE, "%s: q %s, k %s and v %s do not fit [..., L, E], [..., S, E], "
                               "[..., S, Ev]", fn, TG_SHAPE_STR(q), TG_SHAPE_STR(k), TG_SHAPE_STR(v));
        return -1;
    }
    const tg_tensor *in[3] = {q, k, v};
    p->nbd = 0;
    for (int i = 0; i < 3; i++)
        if (in[i]->ndim - 2 > p->nbd)
            p->nbd = in[i]->ndim - 2;
    p->nb = 1;
    for (int d = 0; d < p->nbd; d++) {
        int64_t size = 1;
        for (int i = 0; i < 3; i++) {
            int di = d - (p->nbd - (in[i]->ndim - 2));
            int64_t s = di >= 0 ? in[i]->shape[di] : 1;
            if (s != 1 && size != 1 && s != size) {
                tg__fail(TG_ERR_SHAPE, "%s: batch dims of q %s, k %s and v %s do not broadcast",
                         fn, TG_SHAPE_STR(q), TG_SHAPE_STR(k), TG_SHAPE_STR(v));
                return -1;
            }
            if (s != 1)
                size = s;
        }
        p->bshape[d] = size;
        p->nb *= size;
    }
    p->L = q->shape[q->ndim - 2], p->S = k->shape[k->ndim - 2];
    p->E = q->shape[q->ndim - 1], p->Ev = v->shape[v->ndim - 1];
    p->mask = mask;
    if (!mask)
        return 0;
    int64_t full[TG_MAX_DIMS];
    memcpy(full, p->bshape, sizeof full);
    full[p->nbd] = p->L, full[p->nbd + 1] = p->S;
    bool fits = mask->ndim <= p->nbd + 2;
    for (int i = 1; fits && i <= mask->ndim; i++)
        fits = mask->shape[mask->ndim - i] == 1 || mask->shape[mask->ndim - i] == full[p->nbd + 2 - i];
    if (!fits) {
        tg__fail(TG_ERR_SHAPE, "%s: mask %s does not broadcast to the scores %s", fn,
                 TG_SHAPE_STR(mask), tg__shape_str((char[96]){0}, 96, p->nbd + 2, full));
        return -1;
    }
    tg__broadcast_strides(mask, p->nbd + 2, full, p->mst);
    return 0;
}

/* The stride between t's rows (its last two dims [rows, cols]) as a GEMM
 * reads them: the row length itself when there is one row. */
static int64_t row_stride(const tg_tensor *t)
{
    int64_t rows = t->shape[t->ndim - 2], cols = t->shape[t->ndim - 1];
    return rows > 1 ? t->stride[t->ndim - 2] : cols > 0 ? cols : 1;
}

/* t itself (a new reference) when the kernels can read it in place: unit
 * steps along each row, rows that do not overlap, batch strides of any
 * size. The heads of a packed q/k/v projection are such views. Otherwise
 * a contiguous copy; NULL when out of memory. */
static tg_tensor *readable(const tg_tensor *t)
{
    int n = t->ndim;
    int64_t cols = t->shape[n - 1];
    bool ok = (cols <= 1 || t->stride[n - 1] == 1) && row_stride(t) >= cols;
    for (int d = 0; ok && d < n; d++)
        ok = t->stride[d] >= 0;
    return ok ? tg_retain((tg_tensor *)t) : tg__contiguous(t);
}

/* Points p at q, k and v as readable() gave them. */
static void plan_data(attn_plan *p, const tg_tensor *q, const tg_tensor *k, const tg_tensor *v)
{
    p->q = tg__ptr(q), p->k = tg__ptr(k), p->v = tg__ptr(v);
    batch_strides(p, q, p->qb);
    batch_strides(p, k, p->kb);
    batch_strides(p, v, p->vb);
    p->qrs = row_stride(q), p->krs = row_stride(k), p->vrs = row_stride(v);
}

/* p's dropout fields for probability dropout_p and key. */
static void plan_dropout(attn_plan *p, double dropout_p, uint64_t key)
{
    p->dropout = dropout_p > 0;
    p->key = key;
    p->drop_below = tg__drop_below(dropout_p);
    p->keep = 1.0 / (1.0 - dropout_p);
}

/* ---- running the passes ---------------------------------------------------- */

/* A new tensor [bshape, rows, cols] for the output or a gradient, left
 * unset: with two batch dims [B, H] (heads) its memory is [B, rows, H,
 * cols], out_row's layout, in which merging the heads with transpose(1, 2)
 * and reshape costs no copy; otherwise contiguous. */
static tg_tensor *new_result(const attn_plan *p, int64_t rows, int64_t cols)
{
    int64_t shape[TG_MAX_DIMS];
    memcpy(shape, p->bshape, sizeof shape);
    shape[p->nbd] = rows, shape[p->nbd + 1] = cols;
    if (p->nbd != 2)
        return tg__empty_uninit(p->dtype, p->nbd + 2, shape);
    int64_t B = shape[0], H = shape[1];
    tg_tensor *store = tg__empty_uninit(p->dtype, 4, (int64_t[]){B, rows, H, cols});
    if (!store)
        return NULL;
    tg_tensor *t = tg__view(store, 4, shape, (int64_t[]){rows * H * cols, cols, H * cols, 1}, 0);
    tg_release(store);
    return t;
}

/* The forward of p (shapes, scale, causal rule and dropout set) on q, k and
 * v into out, laid out as out_row says. *lse gets the logsumexp [nb L];
 * *weights, when keep is true and the problem is a short one, its weights
 * for the backward, else NULL. 0, or -1 when out of memory (nothing
 * recorded, nothing returned). */
static int run_forward(attn_plan *p, const tg_tensor *q, const tg_tensor *k, const tg_tensor *v,
                       bool keep, void *out, tg_tensor **lse, tg_tensor **weights)
{
    *lse = tg__empty_uninit(TG_FLOAT64, 1, (int64_t[]){p->nb * p->L});
    *weights = NULL;
    if (keep && keeps_weights(p)) {
        p->wld = weights_ld(p);
        *weights = tg__empty_uninit(TG_FLOAT32, 1, (int64_t[]){p->nb * p->L * p->wld});
        p->weights = *weights ? tg__ptr(*weights) : NULL; /* without them: recomputed */
    }
    tg_tensor *qc = readable(q), *kc = readable(k), *vc = readable(v);
    bool ok = *lse && qc && kc && vc;
    if (ok) {
        plan_data(p, qc, kc, vc);
        ok = forward_all(p, out, tg__ptr(*lse)) == 0;
    }
    tg_release(qc), tg_release(kc), tg_release(vc);
    if (ok)
        return 0;
    tg_release(*lse), tg_release(*weights);
    *lse = *weights = NULL;
    return -1;
}

/* What the backward needs, on the node of an output out: saved[0] an alias
 * of out, saved[1] the logsumexp lse [nb L] (float64; not filled in when
 * the weights are kept), saved[2] the mask or NULL, saved[3] the weights of
 * a short problem (keeps_weights) or NULL, in rows of wld; args[0] the
 * scale, args[1] the dropout probability; iargs[0] the causal rule, iargs[1]
 * the dropout key. */
static void save_for_backward(tg_node *node, const tg_tensor *out, const attn_plan *p,
                              tg_tensor *lse, const tg_tensor *mask, tg_tensor *weights,
                              double dropout_p)
{
    tg_tensor *alias = tg__alias(out);
    tg__save(node, 0, alias);
    tg_release(alias);
    tg__save(node, 1, lse);
    tg__save(node, 2, (tg_tensor *)mask);
    tg__save(node, 3, weights);
    node->args[0] = p->scale;
    node->args[1] = dropout_p;
    node->iargs[0] = p->causal;
    node->iargs[1] = (int64_t)p->key;
}

/* p's causal rule, scale and dropout as the node saved them. */
static attn_plan saved_plan(const tg_node *n)
{
    attn_plan p = {.dtype = n->inputs[0]->dtype, .scale = n->args[0], .causal = n->iargs[0] != 0};
    plan_dropout(&p, n->args[1], (uint64_t)n->iargs[1]);
    return p;
}

/* t's data, with its row stride into *rs and its batch strides over p's
 * bshape into bs. */
static char *place(const attn_plan *p, const tg_tensor *t, int64_t *rs, int64_t *bs)
{
    batch_strides(p, t, bs);
    *rs = row_stride(t);
    return tg__ptr(t);
}

/* The backward of node n (p from saved_plan, its shapes planned) on q, k, v,
 * the upstream gradient go and the output out, into those of d[0..2] that
 * are not NULL: tensors [bshape, rows, cols] with unit steps along their
 * rows, rows that do not overlap, all of them written. 0, or -1. */
static int run_backward(attn_plan *p, const tg_node *n, const tg_tensor *q, const tg_tensor *k,
                        const tg_tensor *v, const tg_tensor *go, const tg_tensor *out,
                        tg_tensor *const d[3])
{
    const tg_tensor *weights = n->saved[3];
    tg_tensor *qr = readable(q), *kr = readable(k), *vr = readable(v), *gr = readable(go);
    tg_tensor *o = weights ? NULL : readable(out); /* with the weights kept, O is not read */
    bool ok = qr && kr && vr && gr && (o || weights);
    if (ok) {
        plan_data(p, qr, kr, vr);
        p->weights = weights ? tg__ptr(weights) : NULL;
        p->wld = weights_ld(p);
        grad_layout g = {.at = {.lse = tg__ptr(n->saved[1])}};
        g.at.go = place(p, gr, &g.at.go_rs, g.gob);
        g.at.o = o ? place(p, o, &g.at.o_rs, g.ob) : NULL;
        g.at.dq = d[0] ? place(p, d[0], &g.at.dq_rs, g.dqb) : NULL;
        g.at.dk = d[1] ? place(p, d[1], &g.at.dk_rs, g.dkb) : NULL;
        g.at.dv = d[2] ? place(p, d[2], &g.at.dv_rs, g.dvb) : NULL;
        ok = backward_all(p, &g) == 0;
        if (!ok)
            tg__fail(TG_ERR_NOMEM, "tg_attention: backward is out of scratch memory");
    }
    tg_release(qr), tg_release(kr), tg_release(vr), tg_release(gr), tg_release(o);
    return ok ? 0 : -1;
}

/* Whether the node has what its backward reads; the error when not. */
static bool has_saved(const tg_node *n, const char *fn)
{
    if (n->saved[0] && n->saved[1])
        return true;
    tg__fail(TG_ERR_NOMEM, "%s: backward lacks the saved output", fn);
    return false;
}

/* ---- the op ------------------------------------------------------------------ */

/* node->inputs: q, k, v; saved, args and iargs: save_for_backward's. The
 * gradients are laid out as new_result says, over the broadcast batch
 * shape; the engine sums them back to the inputs'. */
static int attention_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    attn_plan p = saved_plan(n);
    if (!has_saved(n, "tg_attention") ||
        plan_shapes(&p, n->inputs[0], n->inputs[1], n->inputs[2], n->saved[2]) < 0)
        return -1;
    tg_tensor *d[3] = {NULL, NULL, NULL};
    int64_t rows[3] = {p.L, p.S, p.S}, cols[3] = {p.E, p.E, p.Ev};
    bool ok = true;
    for (int i = 0; i < 3 && ok; i++)
        if (n->needs[i])
            ok = (d[i] = new_result(&p, rows[i], cols[i])) != NULL; /* zeroed by batch */
    ok = ok && run_backward(&p, n, n->inputs[0], n->inputs[1], n->inputs[2], g, n->saved[0],
                            d) == 0;
    for (int i = 0; i < 3; i++) {
        if (ok)
            grads[i] = tg__ret(d[i]);
        else
            tg_release(d[i]);
    }
    return ok ? 0 : -1;
}

/* The checks shared by both ops: scale, dropout_p and rng. */
static int check_options(const char *fn, double scale, double dropout_p, const tg_rng *rng)
{
    if (!isfinite(scale)) {
        tg__fail(TG_ERR_VALUE, "%s: scale = %g is not finite (<= 0 means 1/sqrt(E))", fn, scale);
        return -1;
    }
    if (!(dropout_p >= 0 && dropout_p < 1)) { /* also rejects NaN */
        tg__fail(TG_ERR_VALUE, "%s: dropout_p = %g is outside [0, 1)", fn, dropout_p);
        return -1;
    }
    if (dropout_p > 0 && !rng) {
        tg__fail(TG_ERR_NULL, "%s: rng is NULL, but dropout_p = %g needs one to draw the mask",
                 fn, dropout_p);
        return -1;
    }
    return 0;
}

static int check_args(const tg_tensor *q, const tg_tensor *k, const tg_tensor *v,
                      const tg_tensor *mask, double scale, double dropout_p, const tg_rng *rng)
{
    const char *fn = "tg_attention";
    if (!q || !k || !v) {
        tg__fail(TG_ERR_NULL, "%s: %s is NULL", fn, !q ? "q" : !k ? "k" : "v");
        return -1;
    }
    if (tg__check_float(fn, q) < 0)
        return -1;
    if (k->dtype != q->dtype || v->dtype != q->dtype) {
        tg__fail(TG_ERR_DTYPE, "%s: q is %s, k %s and v %s; they must share one float dtype", fn,
                 tg_dtype_name(q->dtype), tg_dtype_name(k->dtype), tg_dtype_name(v->dtype));
        return -1;
    }
    if (mask && mask->dtype != TG_BOOL && !tg__is_float(mask->dtype)) {
        tg__fail(TG_ERR_DTYPE, "%s: mask is %s; it must be bool or float", fn,
                 tg_dtype_name(mask->dtype));
        return -1;
    }
    return check_options(fn, scale, dropout_p, rng);
}

/* p's scale: the one given, or 1/sqrt(E) for scale <= 0. */
static double plan_scale(const attn_plan *p, double scale)
{
    return scale > 0 ? scale : 1.0 / sqrt((double)(p->E ? p->E : 1));
}

tg_tensor *tg_attention(const tg_tensor *q, const tg_tensor *k, const tg_tensor *v,
                        const tg_tensor *mask, bool is_causal, double scale, double dropout_p,
                        tg_rng *rng)
{
    if (check_args(q, k, v, mask, scale, dropout_p, rng) < 0)
        return NULL;
    attn_plan p = {.dtype = q->dtype, .causal = is_causal};
    if (plan_shapes(&p, q, k, v, mask) < 0)
        return NULL;
    plan_dropout(&p, dropout_p, dropout_p > 0 ? tg_rng_next(rng) : 0); /* one draw, as tg_dropout */
    p.scale = plan_scale(&p, scale);
    tg_tensor *out = new_result(&p, p.L, p.Ev), *lse = NULL, *weights = NULL;
    bool keep = tg__needs_grad(3, (const tg_tensor *[]){q, k, v});
    if (!out || run_forward(&p, q, k, v, keep, tg__ptr(out), &lse, &weights) < 0) {
        tg_release(out);
        tg__take_nomem();
        return tg__fail(TG_ERR_NOMEM, "tg_attention: out of memory for q %s, k %s, v %s",
                        TG_SHAPE_STR(q), TG_SHAPE_STR(k), TG_SHAPE_STR(v));
    }
    tg_node *node;
    out = tg__finish(out, TG_OP_ATTENTION, attention_backward, 3, (const tg_tensor *[]){q, k, v},
                     &node);
    if (node)
        save_for_backward(node, out, &p, lse, mask, weights, dropout_p);
    tg_release(lse);
    tg_release(weights);
    return out;
}

/* ---- the op on a packed projection ------------------------------------------ */

/* The heads [B, H, T, E] of the columns [col0, col0 + H E) of t, a
 * contiguous [B, T, W]: a view, head h at columns col0 + h E. */
static tg_tensor *heads_of(const tg_tensor *t, int64_t H, int64_t E, int64_t col0)
{
    int64_t B = t->shape[0], T = t->shape[1], W = t->shape[2];
    return tg__view(t, 4, (int64_t[]){B, H, T, E}, (int64_t[]){T * W, E, W, 1},
                    t->offset + col0);
}

/* q, k and v [B, H, T, E] as views of qkv, a contiguous [B, T, 3 H E]
 * (new references), all NULL when out of memory. */
static int split_qkv(const tg_tensor *qkv, int64_t H, tg_tensor *x[3])
{
    int64_t E = qkv->shape[2] / (3 * H);
    for (int i = 0; i < 3; i++)
        x[i] = heads_of(qkv, H, E, i * H * E);
    if (x[0] && x[1] && x[2])
        return 0;
    for (int i = 0; i < 3; i++) {
        tg_release(x[i]);
        x[i] = NULL;
    }
    return -1;
}

/* node->inputs: qkv; saved, args and iargs: save_for_backward's, and
 * iargs[2] the heads. The three gradients are written straight into their
 * columns of one [B, T, 3 H E] gradient. */
static int qkvpacked_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    int64_t H = n->iargs[2];
    attn_plan p = saved_plan(n);
    if (!has_saved(n, "tg_attention_qkvpacked"))
        return -1;
    tg_tensor *qkv = tg__contiguous(n->inputs[0]), *gc = tg__contiguous(g);
    tg_tensor *dqkv = qkv ? tg__empty_uninit_like(qkv) : NULL; /* zeroed by batch */
    tg_tensor *x[3] = {NULL, NULL, NULL}, *d[3] = {NULL, NULL, NULL}, *go = NULL, *o = NULL;
    int rc = qkv && gc && dqkv && split_qkv(qkv, H, x) == 0 && split_qkv(dqkv, H, d) == 0 ? 0 : -1;
    if (rc == 0) {
        int64_t E = x[0]->shape[3];
        go = heads_of(gc, H, E, 0);
        o = heads_of(n->saved[0], H, E, 0);
        rc = go && o && plan_shapes(&p, x[0], x[1], x[2], NULL) == 0 ? 0 : -1;
    }
    if (rc == 0)
        rc = run_backward(&p, n, x[0], x[1], x[2], go, o, d);
    for (int i = 0; i < 3; i++)
        tg_release(x[i]), tg_release(d[i]);
    tg_release(qkv), tg_release(gc), tg_release(go), tg_release(o);
    if (rc == 0)
        grads[0] = tg__ret(dqkv);
    else
        tg_release(dqkv);
    return rc;
}

tg_tensor *tg_attention_qkvpacked(const tg_tensor *qkv, int64_t heads, bool is_causal,
                                  double scale, double dropout_p, tg_rng *rng)
{
    const char *fn = "tg_attention_qkvpacked";
    TG_CHECK_NULL(qkv);
    if (tg__check_float(fn, qkv) < 0)
        return NULL;
    if (qkv->ndim != 3)
        return tg__fail(TG_ERR_SHAPE, "%s: qkv %s is not [B, T, 3 * heads * E]", fn,
                        TG_SHAPE_STR(qkv));
    if (heads < 1)
        return tg__fail(TG_ERR_VALUE, "%s: heads = %lld; it must be at least 1", fn,
                        (long long)heads);
    if (qkv->shape[2] % 3 != 0 || qkv->shape[2] / 3 % heads != 0)
        return tg__fail(TG_ERR_SHAPE, "%s: the last dim of qkv %s is not 3 * heads (%lld) * E",
                        fn, TG_SHAPE_STR(qkv), (long long)heads);
    if (check_options(fn, scale, dropout_p, rng) < 0)
        return NULL;
    int64_t B = qkv->shape[0], T = qkv->shape[1], HE = qkv->shape[2] / 3;
    tg_tensor *qkvc = tg__contiguous(qkv), *x[3] = {NULL, NULL, NULL};
    attn_plan p = {.dtype = qkv->dtype, .causal = is_causal};
    tg_tensor *out = NULL, *lse = NULL, *weights = NULL;
    bool ok = qkvc && split_qkv(qkvc, heads, x) == 0 && plan_shapes(&p, x[0], x[1], x[2], NULL) == 0;
    if (ok) {
        plan_dropout(&p, dropout_p, dropout_p > 0 ? tg_rng_next(rng) : 0); /* as tg_attention */
        p.scale = plan_scale(&p, scale);
        /* out_row's layout of [B, H, T, E] is [B, T, H E] itself */
        out = tg__empty_uninit(p.dtype, 3, (int64_t[]){B, T, HE});
        ok = out && run_forward(&p, x[0], x[1], x[2], tg__needs_grad(1, &qkv), tg__ptr(out), &lse,
                                &weights) == 0;
    }
    for (int i = 0; i < 3; i++)
        tg_release(x[i]);
    tg_release(qkvc);
    if (!ok) {
        tg_release(out);
        tg__take_nomem();
        return tg__fail(TG_ERR_NOMEM, "%s: out of memory for qkv %s", fn, TG_SHAPE_STR(qkv));
    }
    tg_node *node;
    out = tg__finish(out, TG_OP_ATTENTION_QKVPACKED, qkvpacked_backward, 1,
                     (const tg_tensor *[]){qkv}, &node);
    if (node) {
        save_for_backward(node, out, &p, lse, NULL, weights, dropout_p);
        node->iargs[2] = heads;
    }
    tg_release(lse);
    tg_release(weights);
    return out;
}
