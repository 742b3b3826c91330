/* The fused scaled-dot-product attention ops, dropout(softmax(q k^T * scale
 * + mask)) v without the [L, S] scores: their checks, the plan of shapes,
 * strides and dropout that the tiled passes of tensor/attention_tiles.c read, and
 * what the graph keeps for the backward. tg_attention takes q, k and v (k
 * and v may hold fewer heads, each shared by a group of q's);
 * tg_attention_qkvpacked takes the one [B, T, 3 H E] projection they come
 * from, and its backward writes the three gradients into one.
 *
 * kernels: tensor/attention_tiles.c, tensor/attention_rows.c,
 * tensor/dropout_mask.h; fused: tg_attention_qkvpacked here, the unfused
 * form (matmul, masked_fill, softmax, dropout) in nn/sdpa.c; gradcheck:
 * tests/cases_sdpa_fused.c attention_*; module: nn/sdpa.c
 * tg_scaled_dot_product_attention, nn/attention.c tg_mha, nn/gpt.c,
 * nn/llama.c, nn/decoder_cache.c; tests: tests/test_attention_*.c. */
#include "attention_tiles.h"
#include "dropout_mask.h"
#include "graph.h"
#include "saved_bf16.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- shapes and the op ----------------------------------------------------- */

/* Batch strides of a contiguous t ([..., rows, cols]) over p's bshape: 0
 * where t lacks the dim or has size 1 there. */
static void batch_strides(const attn_plan *p, const tg_tensor *t, int64_t *out)
{
    int lead = p->nbd - (t->ndim - 2);
    for (int d = 0; d < p->nbd; d++)
        out[d] = d < lead || t->shape[d - lead] == 1 ? 0 : t->stride[d - lead];
}

/* p->group for q, k and v (p->nbd set): with two batch dims or more, q's
 * H heads (the last batch dim, dim -3) may come with k and v of Hkv < H
 * heads, Hkv dividing H: grouped-query attention, each kv head read in
 * place by H / Hkv query heads (MQA: Hkv = 1). Else 1, and the heads
 * broadcast as any batch dim does. -1, recorded, when k and v have fewer
 * heads than q but not a grouped form. */
static int plan_group(attn_plan *p, const tg_tensor *q, const tg_tensor *k, const tg_tensor *v)
{
    p->group = 1;
    if (p->nbd < 2 || q->ndim < 3 || k->ndim < 3 || v->ndim < 3)
        return 0;
    int64_t H = q->shape[q->ndim - 3], Hk = k->shape[k->ndim - 3], Hv = v->shape[v->ndim - 3];
    if (H <= 1 || Hk < 1 || Hv < 1 || Hk >= H || Hv >= H)
        return 0;
    if (Hk != Hv) {
        tg__fail(TG_ERR_SHAPE, "tg_attention: k %s has %lld heads and v %s %lld; grouped-query "
                               "attention needs one count of kv heads", TG_SHAPE_STR(k),
                 (long long)Hk, TG_SHAPE_STR(v), (long long)Hv);
        return -1;
    }
    if (H % Hk != 0) {
        tg__fail(TG_ERR_SHAPE, "tg_attention: q %s has %lld heads, not a multiple of the %lld kv "
                               "heads of k %s and v %s", TG_SHAPE_STR(q), (long long)H,
                 (long long)Hk, TG_SHAPE_STR(k), TG_SHAPE_STR(v));
        return -1;
    }
    p->group = H / Hk;
    return 0;
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
    if (plan_group(p, q, k, v) < 0)
        return -1;
    p->nb = 1;
    for (int d = 0; d < p->nbd; d++) {
        int64_t size = 1;
        if (p->group > 1 && d == p->nbd - 1) { /* q's heads, checked by plan_group */
            p->bshape[d] = q->shape[q->ndim - 3];
            p->nb *= p->bshape[d];
            continue;
        }
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
 * unset, with the kv heads in place of q's for kv (the gradients of k and
 * v when grouped): with two batch dims [B, H] (heads) its memory is [B,
 * rows, H, cols], the forward's layout, in which merging the heads with
 * transpose(1, 2) and reshape costs no copy; otherwise contiguous. */
static tg_tensor *new_result(const attn_plan *p, int64_t rows, int64_t cols, bool kv)
{
    int64_t shape[TG_MAX_DIMS];
    memcpy(shape, p->bshape, sizeof shape);
    if (kv && p->group > 1)
        shape[p->nbd - 1] /= p->group;
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
 * v into out, laid out as tg__attn_forward_all says. *lse gets the logsumexp [nb L];
 * *weights, when keep is true and the problem is a short one, its weights
 * for the backward, else NULL. 0, or -1 when out of memory (nothing
 * recorded, nothing returned). */
static int run_forward(attn_plan *p, const tg_tensor *q, const tg_tensor *k, const tg_tensor *v,
                       bool keep, void *out, tg_tensor **lse, tg_tensor **weights)
{
    *lse = tg__empty_uninit(TG_FLOAT64, 1, (int64_t[]){p->nb * p->L});
    *weights = NULL;
    if (keep && tg__attn_keeps_weights(p)) {
        p->wld = tg__attn_weights_ld(p);
        *weights = tg__empty_uninit(TG_FLOAT32, 1, (int64_t[]){p->nb * p->L * p->wld});
        p->weights = *weights ? tg__ptr(*weights) : NULL; /* without them: recomputed */
    }
    tg_tensor *qc = readable(q), *kc = readable(k), *vc = readable(v);
    bool ok = *lse && qc && kc && vc;
    if (ok) {
        plan_data(p, qc, kc, vc);
        ok = tg__attn_forward_all(p, out, tg__ptr(*lse)) == 0;
    }
    tg_release(qc), tg_release(kc), tg_release(vc);
    if (ok)
        return 0;
    tg_release(*lse), tg_release(*weights);
    *lse = *weights = NULL;
    return -1;
}

/* What the backward needs, on the node of an output out: saved[0] an alias
 * of out (under bf16, rounded: a bfloat16 copy, tg__rounded_output), saved[1] the logsumexp lse [nb L] (float64; not filled in when
 * the weights are kept), saved[2] the mask or NULL, saved[3] the weights of
 * a short problem (tg__attn_keeps_weights) or NULL, in rows of wld; args[0] the
 * scale, args[1] the dropout probability; iargs[0] the causal rule, iargs[1]
 * the dropout key. Under bf16 the inputs may be kept rounded to bfloat16 in
 * saved[KEPT_INPUTS + i] (tg__save_bf16_rounded), input i then a husk. */
static void save_for_backward(tg_node *node, const tg_tensor *out, const attn_plan *p,
                              tg_tensor *lse, const tg_tensor *mask, tg_tensor *weights,
                              double dropout_p)
{
    tg_tensor *kept = tg__rounded_output(node, (tg_tensor *)out);
    if (!kept)
        kept = tg__alias(out);
    tg__save(node, 0, kept);
    tg_release(kept);
    tg__save(node, 1, lse);
    tg__save(node, 2, (tg_tensor *)mask);
    tg__save(node, 3, weights);
    node->args[0] = p->scale;
    node->args[1] = dropout_p;
    node->iargs[0] = p->causal;
    node->iargs[1] = (int64_t)p->key;
}

/* The first of the saved slots that hold inputs rounded to bfloat16. */
enum { KEPT_INPUTS = 4 };

/* Input i of n as the backward reads it: widened from its bfloat16 copy
 * when the node kept one, else the input itself (a new reference; NULL when
 * out of memory). */
static tg_tensor *input_values(const tg_node *n, int i)
{
    return tg__saved_operand(n, i, KEPT_INPUTS + i);
}

/* The output as the backward reads it: saved[0], widened when it holds a
 * bfloat16 copy (a new reference; NULL when out of memory). */
static tg_tensor *output_values(const tg_node *n)
{
    const tg_tensor *c = tg__saved_bf16(n, 0);
    return c ? tg__widened(c) : tg_retain(n->saved[0]);
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
        p->wld = tg__attn_weights_ld(p);
        grad_layout g = {.at = {.lse = tg__ptr(n->saved[1])}};
        g.at.go = place(p, gr, &g.at.go_rs, g.gob);
        g.at.o = o ? place(p, o, &g.at.o_rs, g.ob) : NULL;
        g.at.dq = d[0] ? place(p, d[0], &g.at.dq_rs, g.dqb) : NULL;
        g.at.dk = d[1] ? place(p, d[1], &g.at.dk_rs, g.dkb) : NULL;
        g.at.dv = d[2] ? place(p, d[2], &g.at.dv_rs, g.dvb) : NULL;
        ok = tg__attn_backward_all(p, &g) == 0;
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
 * shape (k's and v's over their kv heads when grouped, each the sum over
 * its group); the engine sums them back to the inputs'. */
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
            ok = (d[i] = new_result(&p, rows[i], cols[i], i > 0)) != NULL; /* zeroed by batch */
    tg_tensor *x[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3 && ok; i++)
        ok = (x[i] = input_values(n, i)) != NULL;
    tg_tensor *o = ok ? output_values(n) : NULL;
    ok = ok && o && run_backward(&p, n, x[0], x[1], x[2], g, o, d) == 0;
    tg_release(o);
    for (int i = 0; i < 3; i++) {
        tg_release(x[i]);
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
    if (TG__CHECK_ALIVE(fn, "q was", q) < 0 || TG__CHECK_ALIVE(fn, "k was", k) < 0 ||
        TG__CHECK_ALIVE(fn, "v was", v) < 0 || TG__CHECK_ALIVE(fn, "mask was", mask) < 0)
        return -1;
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
    tg_tensor *out = new_result(&p, p.L, p.Ev, false), *lse = NULL, *weights = NULL;
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
    for (int i = 0; i < 3; i++)
        tg__save_bf16_rounded(node, i, KEPT_INPUTS + i);
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
    tg_tensor *kept = input_values(n, 0), *qkv = kept ? tg__contiguous(kept) : NULL;
    tg_tensor *gc = tg__contiguous(g);
    tg_release(kept);
    tg_tensor *dqkv = qkv ? tg__empty_uninit_like(qkv) : NULL; /* zeroed by batch */
    tg_tensor *out = output_values(n); /* [B, T, H E] */
    tg_tensor *x[3] = {NULL, NULL, NULL}, *d[3] = {NULL, NULL, NULL}, *go = NULL, *o = NULL;
    int rc = qkv && gc && dqkv && out && split_qkv(qkv, H, x) == 0 && split_qkv(dqkv, H, d) == 0
                 ? 0 : -1;
    if (rc == 0) {
        int64_t E = x[0]->shape[3];
        go = heads_of(gc, H, E, 0);
        o = heads_of(out, H, E, 0);
        rc = go && o && plan_shapes(&p, x[0], x[1], x[2], NULL) == 0 ? 0 : -1;
    }
    if (rc == 0)
        rc = run_backward(&p, n, x[0], x[1], x[2], go, o, d);
    for (int i = 0; i < 3; i++)
        tg_release(x[i]), tg_release(d[i]);
    tg_release(qkv), tg_release(gc), tg_release(go), tg_release(o), tg_release(out);
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
    if (heads > 1 && qkv->shape[2] / 3 < heads) /* also keeps B heads T from overflowing */
        return tg__fail(TG_ERR_SHAPE, "%s: heads = %lld, more than the %lld columns of each of "
                                      "q, k and v in qkv %s", fn, (long long)heads,
                        (long long)(qkv->shape[2] / 3), TG_SHAPE_STR(qkv));
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
        /* the forward's layout of [B, H, T, E] is [B, T, H E] itself */
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
    tg__save_bf16_rounded(node, 0, KEPT_INPUTS);
    tg_release(lse);
    tg_release(weights);
    return out;
}
