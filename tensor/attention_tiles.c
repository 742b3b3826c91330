/* The tiled passes of the fused attention (attention_tiles.h): the forward
 * block by block with an online softmax (FlashAttention style), so that
 * neither pass holds more than a [BR, BC] tile of scores, and the backward,
 * which recomputes the tiles from q, k and the per-row logsumexp saved by
 * the forward, and the dropout mask from its key. A short problem, one tile
 * per batch, keeps its weights instead. The row arithmetic on a tile is
 * attention_rows.c's; the ops that plan the passes are autograd/op_attention.c's. */
#include "attention_tiles.h"
#include "attention_rows.h"
#include "dropout_mask.h"
#include "fastmath.h"
#include "gemm.h"
#include "internal.h"

#include <stdlib.h>
#include <string.h>

/* Tile sizes: BR query rows by BC keys. A [BR, BC] float tile is 16 KiB. */
#define BR TG_ATTN_TILE
#define BC TG_ATTN_TILE
/* Multiply-adds below which one thread does everything: about a
 * microsecond of work, on the order of what starting a team costs. */
#define PAR_MIN (32.0 * 32.0 * 64.0)

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

/* batch_off for k, v and their gradients, which hold one head where the
 * group of query heads of batch b reads them (grouped-query attention). */
static int64_t kv_off(const attn_plan *p, const int64_t *stride, int64_t b)
{
    if (p->group == 1)
        return batch_off(p, stride, b);
    int64_t h = b % p->bshape[p->nbd - 1];
    return batch_off(p, stride, b - h) + h / p->group * stride[p->nbd - 1];
}

/* The rows of a block: row r is query i + r di of batch b + r db. A query
 * block of one batch is {b, 0, r0, 1}; query 0 of a group's heads, which
 * share their K and V, is {b0, 1, 0, 0}. */
typedef struct {
    int64_t b, db, i, di;
} block_rows;

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
 * dtype (the rows at, keys j0..): masked entries become -inf, a float mask
 * is added. */
static void mask_rows(const attn_plan *p, block_rows at, int64_t nr, int64_t j0, int64_t nc,
                      void *t, int64_t ldt)
{
    bool f32 = p->dtype == TG_FLOAT32;
    if (p->mask) {
        const tg_tensor *m = p->mask;
        int64_t si = p->mst[p->nbd], sj = p->mst[p->nbd + 1];
        for (int64_t r = 0; r < nr; r++) {
            int64_t o = batch_off(p, p->mst, at.b + r * at.db) + (at.i + r * at.di) * si + j0 * sj;
            if (f32)
                MASK_ROW(float, (float *)t + r * ldt, m, o, sj, nc);
            else
                MASK_ROW(double, (double *)t + r * ldt, m, o, sj, nc);
        }
    }
    if (p->causal)
        for (int64_t r = 0; r < nr; r++) {
            int64_t c0 = at.i + r * at.di + 1 - j0; /* the first key after the query */
            for (int64_t c = c0 < 0 ? 0 : c0; c < nc; c++) {
                if (f32)
                    ((float *)t)[r * ldt + c] = -INFINITY;
                else
                    ((double *)t)[r * ldt + c] = -INFINITY;
            }
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

/* t [nr, nc] = alpha A B^T, A's nr rows and B's nc rows k long: a tile's
 * scores, or the gradient of its weights. On a float32 tile across the
 * causal diagonal only the part below it is made (row r up to key r + d,
 * with d = r0 - j0), the rest being masked: a third of the work of a
 * diagonal tile is spared. */
static int scores_product(const attn_plan *p, bool diag, int64_t d, int64_t nr, int64_t nc,
                          int64_t k, double alpha, const void *a, int64_t lda, const void *b,
                          int64_t ldb, void *t, int64_t ldt)
{
    if (diag && p->dtype == TG_FLOAT32 && nr > 0 && nc > 0 && k > 0 &&
        k <= TG_GEMM_TINY_MAX_K)
        return tg__sgemm_tiny_lower(false, true, nr, nc, k, (float)alpha, a, lda, b, ldb, 0.0f,
                                    t, ldt, d);
    return tg__gemm(p->dtype, true, false, true, nr, nc, k, alpha, a, lda, b, ldb, 0.0, t, ldt);
}

/* The tile of scaled scores for rows r0.. and keys j0.. of batch b, with
 * the mask applied, in the dtype's buffer t [nr, ldt]. */
static int score_rows(const attn_plan *p, int64_t b, int64_t r0, int64_t nr, int64_t j0,
                      int64_t nc, void *t, int64_t ldt)
{
    const char *q = p->q + (size_t)(batch_off(p, p->qb, b) + r0 * p->qrs) * esize(p);
    const char *k = p->k + (size_t)(kv_off(p, p->kb, b) + j0 * p->krs) * esize(p);
    if (scores_product(p, on_diagonal(p, r0, j0, nc), r0 - j0, nr, nc, p->E, p->scale, q,
                       p->qrs, k, p->krs, t, ldt) < 0)
        return -1;
    mask_rows(p, (block_rows){b, 0, r0, 1}, nr, j0, nc, t, ldt);
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

/* Online softmax over one score tile (the rows at, keys j0..): for each
 * row, the new running max, the rescaling of what was accumulated, and p =
 * exp(s - max) in place of the scores in w->t, dropped out after its sum is
 * taken (the sum normalises the weights before dropout). */
static void online_softmax(const attn_plan *p, scratch *w, block_rows at, int64_t j0,
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
            drop_weights(p, at.b + r * at.db, at.i + r * at.di, j0, t, nc);
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

/* The output rows and logsumexps of the rows at (nr of them) from the
 * accumulator and running sums an online softmax left in w. */
static void finish_rows(const attn_plan *p, const scratch *w, block_rows at, int64_t nr,
                        char *out, double *lse)
{
    size_t es = esize(p);
    for (int64_t r = 0; r < nr; r++) {
        int64_t b = at.b + r * at.db, i = at.i + r * at.di;
        /* A row with every key masked has l = 0: zeros, as the softmax op gives. */
        double inv = w->l[r] > 0 ? 1.0 / w->l[r] : 0;
        tg__attn_scaled_copy(p->dtype, out + (size_t)out_row(p, b, i) * es,
                             (const char *)w->acc + (size_t)(r * p->Ev) * es, p->Ev, inv);
        lse[b * p->L + i] = w->l[r] > 0 ? w->m[r] + log(w->l[r]) : -INFINITY;
    }
}

bool tg__attn_keeps_weights(const attn_plan *p)
{
    return p->dtype == TG_FLOAT32 && !p->dropout && p->L > 0 && p->L <= BR && p->Ev > 0 &&
           key_end(p, p->L) > 0 && key_end(p, p->L) <= BC;
}

int64_t tg__attn_weights_ld(const attn_plan *p)
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
    const float *v = (const float *)p->v + kv_off(p, p->vb, b);
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
    const char *v = p->v + (size_t)kv_off(p, p->vb, b) * es;
    for (int64_t j0 = 0, jend = key_end(p, r0 + nr); j0 < jend; j0 += BC) {
        int64_t nc = jend - j0 < BC ? jend - j0 : BC;
        if (score_tile(p, b, r0, nr, j0, nc, w->t) < 0)
            return -1;
        if (p->dtype == TG_FLOAT32 && !p->dropout)
            tg__attn_online_softmax_f32(w->t, BC, w->acc, w->m, w->l, nr, nc, p->Ev);
        else
            online_softmax(p, w, (block_rows){b, 0, r0, 1}, j0, nr, nc);
        if (tile_product(p, on_diagonal(p, r0, j0, nc), false, nr, p->Ev, nc, 1.0, w->t, BC,
                         v + (size_t)(j0 * p->vrs) * es, p->vrs, 1.0, w->acc, p->Ev, INT64_MIN,
                         r0 - j0) < 0)
            return -1;
    }
    finish_rows(p, w, (block_rows){b, 0, r0, 1}, nr, out, lse);
    return 0;
}

/* C = alpha A op(B) + beta C for forward_group: float32 products through
 * the tiny kernel, which a group's few rows keep busy where the thin one,
 * made for a row or two of a long product, lags. */
static int group_product(const attn_plan *p, bool trans_b, int64_t m, int64_t n, int64_t k,
                         double alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
                         double beta, void *c, int64_t ldc)
{
    if (p->dtype == TG_FLOAT32 && m > 0 && n > 0 && k > 0 && k <= TG_GEMM_TINY_MAX_K)
        return tg__sgemm_tiny(false, trans_b, m, n, k, (float)alpha, a, lda, b, ldb,
                              (float)beta, c, ldc);
    return tg__gemm(p->dtype, true, false, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* Query row 0 of the nr heads from batch b0 on, of one group, as the rows
 * of one block: each tile of their kv head's K and V is read once for all
 * of them, not once per head (decoding one token with grouped heads). The
 * heads' q rows are a head stride apart (the caller has checked that it is
 * at least E). On one query the causal rule is the same on every row, so
 * the products see no diagonal. */
static int forward_group(const attn_plan *p, scratch *w, int64_t b0, int64_t nr, char *out,
                         double *lse)
{
    size_t es = esize(p);
    block_rows at = {b0, 1, 0, 0};
    const char *q = p->q + (size_t)batch_off(p, p->qb, b0) * es;
    const char *k = p->k + (size_t)kv_off(p, p->kb, b0) * es;
    const char *v = p->v + (size_t)kv_off(p, p->vb, b0) * es;
    memset(w->acc, 0, (size_t)(nr * p->Ev) * es);
    for (int64_t r = 0; r < nr; r++)
        w->m[r] = -INFINITY, w->l[r] = 0;
    for (int64_t j0 = 0, jend = key_end(p, 1); j0 < jend; j0 += BC) {
        int64_t nc = jend - j0 < BC ? jend - j0 : BC;
        if (group_product(p, true, nr, nc, p->E, p->scale, q, p->qb[p->nbd - 1],
                          k + (size_t)(j0 * p->krs) * es, p->krs, 0.0, w->t, BC) < 0)
            return -1;
        mask_rows(p, at, nr, j0, nc, w->t, BC);
        if (p->dtype == TG_FLOAT32 && !p->dropout)
            tg__attn_online_softmax_f32(w->t, BC, w->acc, w->m, w->l, nr, nc, p->Ev);
        else
            online_softmax(p, w, at, j0, nr, nc);
        if (group_product(p, false, nr, p->Ev, nc, 1.0, w->t, BC,
                          v + (size_t)(j0 * p->vrs) * es, p->vrs, 1.0, w->acc, p->Ev) < 0)
            return -1;
    }
    finish_rows(p, w, at, nr, out, lse);
    return 0;
}

/* Whether the forward takes one query row of a group's heads as one block
 * (forward_group): grouped heads, L = 1, no weights kept, and q's heads
 * rows of a GEMM. */
static bool by_groups(const attn_plan *p)
{
    return p->group > 1 && p->L == 1 && !p->weights &&
           p->qb[p->nbd - 1] >= (p->E > 1 ? p->E : 1);
}

int tg__attn_forward_all(const attn_plan *p, char *out, double *lse)
{
    /* blocks per batch, of query rows or (by groups) of a group's heads */
    bool groups = by_groups(p);
    int64_t nblk = ((groups ? p->group : p->L) + BR - 1) / BR;
    int64_t tasks = (groups ? p->nb / p->group : p->nb) * nblk;
    int64_t per = groups && nblk ? (p->group + nblk - 1) / nblk : BR; /* rows per block */
    bool par = tasks > 1 && (double)p->nb * p->L * p->S * (p->E + p->Ev) > PAR_MIN;
    int failed = 0;
    (void)par;
#pragma omp parallel if (par)
    {
        scratch w;
        int bad = scratch_new(&w, p);
#pragma omp for schedule(static)
        for (int64_t t = 0; t < tasks; t++) {
            int64_t b = t / nblk, r0 = (t % nblk) * per;
            if (bad)
                continue;
            if (groups) /* t's heads of kv batch b */
                bad = forward_group(p, &w, b * p->group + r0,
                                    p->group - r0 < per ? p->group - r0 : per, out, lse);
            else
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
 * Pd) = rowsum(dO * O) holds with dropout too. Past the causal diagonal,
 * where dPd may not have been made, both are 0 outright. */
TG_VECTOR_CLONES
static void grad_tile(const attn_plan *p, scratch *w, const double *lse, const double *dsum,
                      int64_t b, int64_t r0, int64_t j0, int64_t nr, int64_t nc)
{
    bool diag = on_diagonal(p, r0, j0, nc);
    for (int64_t r = 0; r < nr; r++) {
        /* lse = -inf only on a row with every key masked: P = 0 there. */
        double shift = lse[r], keep_all = shift == -INFINITY ? 0 : 1;
        if (shift == -INFINITY)
            shift = 0;
        int64_t upto = r0 + r + 1 - j0; /* the keys this row sees on the diagonal */
        int64_t seen = !diag ? nc : upto < 0 ? 0 : upto < nc ? upto : nc;
        double z[BC];
        if (p->dropout)
            keep_row(p, b, r0 + r, j0, z, seen);
        if (p->dtype == TG_FLOAT32 && p->dropout) {
            float *ds = (float *)w->t + r * BC, *pd = (float *)w->t2 + r * BC, d = (float)dsum[r];
            for (int64_t c = 0; c < seen; c++) {
                float pr = tg__expf((float)((double)ds[c] - shift)) * (float)keep_all;
                float zc = (float)z[c];
                ds[c] = pr * (pd[c] * zc - d);
                pd[c] = pr * zc;
            }
        } else if (p->dtype == TG_FLOAT32) {
            float *ds = (float *)w->t + r * BC, *pd = (float *)w->t2 + r * BC, d = (float)dsum[r];
            for (int64_t c = 0; c < seen; c++) {
                float pr = tg__expf((float)((double)ds[c] - shift)) * (float)keep_all;
                ds[c] = pr * (pd[c] - d);
                pd[c] = pr;
            }
        } else if (p->dropout) {
            double *ds = (double *)w->t + r * BC, *pd = (double *)w->t2 + r * BC;
            for (int64_t c = 0; c < seen; c++) {
                double pr = exp(ds[c] - shift) * keep_all;
                ds[c] = pr * (pd[c] * z[c] - dsum[r]);
                pd[c] = pr * z[c];
            }
        } else {
            double *ds = (double *)w->t + r * BC, *pd = (double *)w->t2 + r * BC;
            for (int64_t c = 0; c < seen; c++) {
                double pr = exp(ds[c] - shift) * keep_all;
                ds[c] = pr * (pd[c] - dsum[r]);
                pd[c] = pr;
            }
        }
        size_t es = esize(p), rest = (size_t)(nc - seen) * es;
        memset((char *)w->t + (size_t)(r * BC + seen) * es, 0, rest);
        memset((char *)w->t2 + (size_t)(r * BC + seen) * es, 0, rest);
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
 * gradients from P and dS, with nothing recomputed and no need of O. dk
 * and dv are added to when add is true. */
static int backward_kept(const attn_plan *p, scratch *w, int64_t b, const grad_slices *g,
                         const float *q, const float *k, const float *v, bool add)
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
    /* one tile: each product writes its gradient's rows outright (or adds
     * to a group's) */
    double key_beta = add ? 1.0 : 0.0;
    if (g->dv)
        rc |= tile_product(p, diag, true, nc, p->Ev, nr, 1.0, P, S, g->go, g->go_rs, key_beta,
                           g->dv, g->dv_rs, 0, INT64_MAX);
    if (g->dk)
        rc |= tile_product(p, diag, true, nc, p->E, nr, p->scale, ds, BC, q, p->qrs, key_beta,
                           g->dk, g->dk_rs, 0, INT64_MAX);
    if (g->dq)
        rc |= tile_product(p, diag, false, nr, p->E, nc, p->scale, ds, BC, k, p->krs, 0.0, g->dq,
                           g->dq_rs, INT64_MIN, 0);
    zero_unseen_keys(p, g, nc);
    return rc < 0 ? -1 : 0;
}

/* The gradients of batch b into g's slices; dk and dv are added to when
 * add is true (the later query heads of a group), else written. */
static int backward_batch(const attn_plan *p, scratch *w, int64_t b, const grad_slices *g,
                          double *dsum, bool add)
{
    tg_dtype dt = p->dtype;
    size_t es = esize(p);
    const char *q = p->q + (size_t)batch_off(p, p->qb, b) * es;
    const char *k = p->k + (size_t)kv_off(p, p->kb, b) * es;
    const char *v = p->v + (size_t)kv_off(p, p->vb, b) * es;
    if (p->weights)
        return backward_kept(p, w, b, g, (const float *)q, (const float *)k, (const float *)v,
                             add);
    /* D[i] = sum_e dO[i,e] O[i,e]: the rowsum(dP * P) of the softmax backward. */
    tg__attn_row_dots(dt, g->go, g->go_rs, g->o, g->o_rs, p->L, p->Ev, dsum);
    /* Each gradient row is written by the first tile that reaches it and
     * added to by the rest, so nothing is zeroed first: a query block's
     * first tile is key block 0; key blocks are reached in order, and those
     * below seen had been reached by an earlier query block (the blocks line
     * up, BR being BC, and only the last query block can end short). A
     * group's later heads add to dk and dv throughout. */
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
            rc |= scores_product(p, on_diagonal(p, r0, j0, nc), r0 - j0, nr, nc, p->Ev, 1.0, goi,
                                 g->go_rs, vj, p->vrs, w->t2, BC);
            if (rc < 0)
                return -1;
            grad_tile(p, w, g->lse + r0, dsum + r0, b, r0, j0, nr, nc); /* t = dS, t2 = Pd */
            /* dV_j += Pd^T dO_i; dK_j += scale dS^T Q_i; dQ_i += scale dS K_j. On
             * the diagonal, key j sees queries from j - d on, and query i keys
             * up to i + d. */
            bool diag = on_diagonal(p, r0, j0, nc);
            int64_t d = r0 - j0;
            double key_beta = add || j0 < seen ? 1.0 : 0.0, query_beta = j0 > 0 ? 1.0 : 0.0;
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
        s.dk += (size_t)kv_off(p, g->dkb, b) * es;
    if (s.dv)
        s.dv += (size_t)kv_off(p, g->dvb, b) * es;
    return s;
}

int tg__attn_backward_all(const attn_plan *p, const grad_layout *g)
{
    /* one task per kv batch: its group's heads in order, so that no two
     * threads write one row of dk or dv and the sums' order is fixed */
    int64_t group = p->group, tasks = p->nb / group;
    bool par = tasks > 1 && (double)p->nb * p->L * p->S * (p->E + p->Ev) > PAR_MIN;
    int failed = 0;
    (void)par;
#pragma omp parallel if (par)
    {
        scratch w;
        double *dsum = malloc((size_t)(p->L > 0 ? p->L : 1) * sizeof(double)); /* [L] */
        int bad = scratch_new(&w, p) < 0 || !dsum;
#pragma omp for schedule(static)
        for (int64_t t = 0; t < tasks; t++)
            for (int64_t m = 0; m < group && !bad; m++) {
                grad_slices gb = batch_slices(p, g, t * group + m);
                bad = backward_batch(p, &w, t * group + m, &gb, dsum, m > 0);
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
