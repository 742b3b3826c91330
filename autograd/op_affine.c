/* tg_affine: y = x @ weight^T + bias as one op (torch.nn.functional.linear);
 * tg_gelu_affine: the same of GELU(h), keeping h alone for backward;
 * tg_layer_norm_affine: the same of layer_norm(x), keeping x alone.
 * The float32 packed GEMM adds the bias as it writes the output; elsewhere
 * the output rows start as copies of the bias and the GEMM adds the product
 * onto them. Either way there is no separate bias pass and no product kept
 * apart from the output. Backward: dx = dy @ weight, dweight = dy^T @ x (summed
 * over every leading dim), dbias = dy summed over the rows.
 *
 * kernels: tensor/gemm*.c, the bias rows in tensor/affine_kernels.c;
 * fused: tg_gelu_affine and tg_layer_norm_affine here, tg_rms_norm_affine
 * (op_rms_norm.c) and tg_swiglu_affine (op_swiglu.c) through affine.h;
 * gradcheck: tests/cases_matmul.c affine_*, gelu_affine_*,
 * layer_norm_affine_*; module: nn/linear.c tg_linear, nn/gpt.c's blocks. */
#include "affine.h"
#include "affine_kernels.h"
#include "gemm.h"
#include "graph.h"
#include "kernels.h"
#include "layer_norm.h"
#include "layer_norm_kernels.h"
#include "saved_bf16.h"

#include <stdlib.h>
#include <string.h>

int tg__affine_check(const char *fn, const tg_tensor *x, const tg_tensor *w,
                     const tg_tensor *b)
{
    if (tg__check_float(fn, x) < 0 || tg__check_float(fn, w) < 0 ||
        (b && tg__check_float(fn, b) < 0))
        return -1;
    if (w->dtype != x->dtype || (b && b->dtype != x->dtype)) {
        tg__fail(TG_ERR_DTYPE, "%s: dtypes differ: x %s, weight %s, bias %s", fn,
                 tg_dtype_name(x->dtype), tg_dtype_name(w->dtype),
                 b ? tg_dtype_name(b->dtype) : "none");
        return -1;
    }
    if (x->ndim < 1 || w->ndim != 2 || x->shape[x->ndim - 1] != w->shape[1]) {
        tg__fail(TG_ERR_SHAPE, "%s: x %s and weight %s do not fit (expected x [..., in] and "
                               "weight [out, in])", fn, TG_SHAPE_STR(x), TG_SHAPE_STR(w));
        return -1;
    }
    if (b && (b->ndim != 1 || b->shape[0] != w->shape[0])) {
        tg__fail(TG_ERR_SHAPE, "%s: bias %s is not [out %lld]", fn, TG_SHAPE_STR(b),
                 (long long)w->shape[0]);
        return -1;
    }
    return 0;
}

/* dbias: gc (the upstream gradient, contiguous) summed over every leading
 * dim, into *db. 0, or -1 when out of memory. */
int tg__affine_bias_grad(const tg_tensor *gc, tg_tensor **db)
{
    int dims[TG_MAX_DIMS];
    for (int d = 0; d < gc->ndim - 1; d++)
        dims[d] = d;
    *db = gc->ndim > 1 ? tg_sum(gc, dims, gc->ndim - 1, false) : tg__ret(tg_retain(gc));
    return *db ? 0 : -1;
}

/* dw = gc^T @ xv (float32, contiguous, gc [rows, out], xv [rows, in]) and
 * *db = gc summed over its rows, from one pass of the packed kernel over
 * gc: 0, 1 when tg__sgemm_weight_grads declines (nothing done), or -1 when
 * out of memory. */
static int fused_weight_and_bias_grads(const tg_tensor *gc, const tg_tensor *xv, int64_t rows,
                                       int64_t out, int64_t in, tg_tensor *dw, tg_tensor **db)
{
    double *sums = malloc((size_t)(out > 0 ? out : 1) * sizeof *sums);
    int rc = sums ? tg__sgemm_weight_grads(rows, out, in, tg__ptr(gc), tg__ptr(xv), tg__ptr(dw),
                                           sums)
                  : -1;
    tg_tensor *b = rc == 0 ? tg__empty_uninit(TG_FLOAT32, 1, (int64_t[]){out}) : NULL;
    if (rc == 0 && !b)
        rc = -1;
    if (b) {
        tg__f64_to_f32(tg__ptr(b), sums, out);
        *db = tg__ret(b);
    }
    free(sums);
    return rc;
}

/* dw = gc^T @ xv unless dw is NULL, and *db = gc summed over its rows
 * unless db is NULL (gc contiguous [rows, out], xv [rows, in]): in float32
 * both from one pass of the packed kernel where it takes the shape, else
 * apart. 0, or -1 when out of memory. */
int tg__affine_param_grads(const tg_tensor *gc, const tg_tensor *xv, int64_t rows, int64_t out,
                           int64_t in, tg_tensor *dw, tg_tensor **db)
{
    int rc = dw && db && xv->dtype == TG_FLOAT32 && !tg__bf16_products(xv->dtype)
                 ? fused_weight_and_bias_grads(gc, xv, rows, out, in, dw, db)
                 : 1;
    if (rc != 1)
        return rc;
    if (dw && tg__gemm_op(xv->dtype, true, false, out, in, rows, 1.0, tg__ptr(gc), out,
                       tg__ptr(xv), in, 0.0, tg__ptr(dw), in) < 0)
        return -1;
    return db ? tg__affine_bias_grad(gc, db) : 0;
}

/* The gradients of y = xv @ w^T + b given gy, with xv the values the product
 * read (x itself, or a function of it), w = inputs[wi] and b = inputs[wi+1].
 * dxv [..., in] when want_dxv: added into into when that is given (a
 * gradient the engine holds), else into a new *dxv (owned by the caller);
 * dw and db into grads[wi] and grads[wi+1] as the node needs them. 0, or -1
 * when out of memory. */
int tg__affine_grads(tg_node *n, int wi, const tg_tensor *gy, const tg_tensor *xv, bool want_dxv,
                     tg_tensor *into, tg_tensor **dxv, tg_tensor **grads)
{
    const tg_tensor *w = n->inputs[wi];
    const bool *needs = n->needs + wi;
    grads += wi;
    int64_t out = w->shape[0], in = w->shape[1], rows = tg__numel(xv->ndim - 1, xv->shape);
    tg_tensor *gc = tg__contiguous(gy), *wc = want_dxv ? tg__contiguous(w) : NULL;
    tg_tensor *dx = !want_dxv ? NULL : into ? tg_retain(into) : tg__empty_uninit_like(xv);
    tg_tensor *dw = needs[0] ? tg__empty_uninit_like(w) : NULL;
    float beta_dx = into ? 1.0f : 0.0f; /* dx holds what was gathered, or nothing yet */
    int rc = gc && (!want_dxv || (wc && dx)) && (!needs[0] || dw) ? 0 : -1;
    /* a small layer's two products in one region, when they qualify */
    bool both = rc == 0 && dx && dw && xv->dtype == TG_FLOAT32 &&
                !tg__bf16_products(xv->dtype) &&
                tg__sgemm_linear_grads(rows, in, out, tg__ptr(gc), tg__ptr(wc), tg__ptr(xv),
                                       beta_dx, tg__ptr(dx), tg__ptr(dw)) == 0;
    if (rc == 0 && dx && !both && tg__gemm_op(xv->dtype, false, false, rows, in, out, 1.0,
                                           tg__ptr(gc), out, tg__ptr(wc), in, beta_dx,
                                           tg__ptr(dx), in) < 0)
        rc = -1;
    /* dw unless the region above made it, and dbias */
    if (rc == 0)
        rc = tg__affine_param_grads(gc, xv, rows, out, in, both ? NULL : dw,
                                   needs[1] ? &grads[1] : NULL);
    tg_release(gc);
    tg_release(wc);
    if (rc < 0) {
        tg_release(dx);
        tg_release(dw);
        return -1;
    }
    if (into)
        tg_release(dx);
    else
        *dxv = dx;
    grads[0] = dw ? tg__ret(dw) : NULL;
    return 0;
}

/* saved[0]: x in bfloat16 when tg__save_bf16_operand kept it so (x's one
 * use here is dw's bf16 product), else nothing and x is read from the
 * node with the weight and bias. x's gradient is added into the one the
 * engine holds for it when there is one (x feeding several layers, as q, k
 * and v read one input). */
static int affine_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    tg_tensor *x = tg__saved_operand(n, 0, 0), *xc = x ? tg__contiguous(x) : NULL, *dx = NULL;
    tg_release(x);
    tg_tensor *into = n->needs[0] ? tg__grad_owned(n, 0) : NULL;
    int rc = xc ? tg__affine_grads(n, 1, g, xc, n->needs[0], into, &dx, grads) : -1;
    tg_release(xc);
    grads[0] = into && rc == 0 ? TG_GRAD_ADDED : dx ? tg__ret(dx) : NULL;
    return rc;
}

static tg__unary_kind gelu_of(int64_t kind)
{
    return kind == TG_GELU_TANH ? TG_UN_GELU_TANH : TG_UN_GELU_ERF;
}

/* y [..., out] = a @ weight^T + bias with a = xc (contiguous [..., in]) or,
 * for gelu a tg_gelu_kind rather than -1, a = GELU(xc): in float32 with a
 * bias the packed kernel applies the tanh form to xc as it packs it, and
 * GELU(xc) is never stored; elsewhere it is made, used and let go. NULL
 * when out of memory. */
static tg_tensor *product(const tg_tensor *xc, const tg_tensor *weight, const tg_tensor *bias,
                          int gelu)
{
    int64_t out = weight->shape[0], in = weight->shape[1];
    int64_t rows = tg__numel(xc->ndim - 1, xc->shape);
    int64_t shape[TG_MAX_DIMS];
    memcpy(shape, xc->shape, sizeof shape);
    shape[xc->ndim - 1] = out;
    tg_tensor *wc = tg__contiguous(weight), *bc = bias ? tg__contiguous(bias) : NULL;
    tg_tensor *y = wc && (!bias || bc) ? tg__empty_uninit(xc->dtype, xc->ndim, shape) : NULL;
    if (y) {
        char *yp = tg__ptr(y);
        /* float32: the bias added as the GEMM writes y, where it can */
        int (*fused)(bool, int64_t, int64_t, int64_t, const float *, int64_t, const float *,
                     int64_t, const float *, void (*)(float *, int64_t), float *, int64_t) =
            tg__bf16_products(xc->dtype) ? tg__sgemm_bias_bf16 : tg__sgemm_bias;
        int rc = bc && xc->dtype == TG_FLOAT32 && (gelu < 0 || gelu == TG_GELU_TANH)
                     ? fused(true, rows, out, in, tg__ptr(xc), in, tg__ptr(wc), in, tg__ptr(bc),
                             gelu < 0 ? NULL : tg__gelu_tanh_f32_inplace, (float *)yp, out)
                     : 1;
        tg_tensor *a = rc == 1 && gelu >= 0 ? tg__unary(xc, gelu_of(gelu), 0) : NULL;
        if (rc == 1 && gelu >= 0 && !a)
            rc = -1;
        if (rc == 1 && bc)
            tg__fill_rows(yp, tg__ptr(bc), tg_dtype_size(xc->dtype), out, rows);
        if (rc == 1)
            rc = tg__gemm_weight_op(xc->dtype, rows, out, in, tg__ptr(a ? a : xc), wc,
                                    bc ? 1.0 : 0.0, yp);
        tg_release(a);
        if (rc < 0) {
            tg_release(y);
            y = NULL;
        }
    }
    tg_release(wc);
    tg_release(bc);
    return y;
}

tg_tensor *tg__affine_product(const tg_tensor *xc, const tg_tensor *weight, const tg_tensor *bias)
{
    return product(xc, weight, bias, -1);
}

tg_tensor *tg_affine(const tg_tensor *x, const tg_tensor *weight, const tg_tensor *bias)
{
    TG_CHECK_NULL(x);
    TG_CHECK_NULL(weight);
    if (tg__affine_check("tg_affine", x, weight, bias) < 0)
        return NULL;
    tg_tensor *xc = tg__contiguous(x);
    tg_tensor *y = xc ? product(xc, weight, bias, -1) : NULL;
    tg_release(xc);
    tg_node *node;
    y = tg__finish(y, TG_OP_AFFINE, affine_backward, 3, (const tg_tensor *[]){x, weight, bias},
                   &node);
    tg__save_bf16_operand(node, 0, 0);
    return y;
}

/* ---- the affine map of a GELU ------------------------------------------- */

/* 2048 rows of 1536 floats go as 4 x 512, not 3 x 682 and a block of 2
 * whose products are thin. */
int64_t tg__affine_block_rows(int64_t rows, int64_t in, size_t es)
{
    int64_t r = (int64_t)((4u << 20) / ((size_t)(in > 0 ? in : 1) * es));
    r = r > 0 ? r : 1;
    int64_t blocks = rows > 0 ? (rows + r - 1) / r : 1;
    return (rows + blocks - 1) / blocks > 0 ? (rows + blocks - 1) / blocks : 1;
}

/* One block of rows of the backward below: with hb = h's rows and gb the
 * upstream gradient's, dh (those rows of h's gradient) = (gb w) * GELU'(hb)
 * and dw (+)= gb^T GELU(hb) (accumulating when first is false). When both
 * are wanted, gb w goes straight into dh and one pass over hb makes GELU(hb)
 * and scales dh by GELU'(hb) in place. 0, or -1 when out of memory. */
static int gelu_affine_block(tg_node *n, const tg_tensor *hb, const char *gb,
                             const tg_tensor *wc, void *dw, tg_tensor *dh, bool first)
{
    tg_dtype dt = hb->dtype;
    int64_t nr = hb->shape[0], in = hb->shape[1], out = n->inputs[1]->shape[0];
    bool tanh_form = n->iargs[0] == TG_GELU_TANH;
    int rc = 0;
    tg_tensor *a = NULL; /* GELU(hb), for dw */
    if (dh) {
        /* gb w: into dh itself when the fused pass follows, else beside it */
        tg_tensor *da = dw ? tg_retain(dh) : tg__empty_uninit(dt, 2, (int64_t[]){nr, in});
        rc = da ? tg__gemm_op(dt, false, false, nr, in, out, 1.0, gb, out, tg__ptr(wc), in,
                           0.0, tg__ptr(da), in)
                : -1;
        if (rc == 0 && dw) {
            a = tg__empty_uninit(dt, 2, (int64_t[]){nr, in});
            if (a)
                tg__gelu_with_grad(dt, tanh_form, tg__ptr(hb), tg__ptr(a), tg__ptr(dh), nr * in);
        } else if (rc == 0) {
            tg__binary_kind k = tanh_form ? TG_BIN_GELU_TANH_GRAD : TG_BIN_GELU_ERF_GRAD;
            rc = tg__binary_into(dh, da, hb, k);
        }
        tg_release(da);
    } else if (dw) {
        a = tg__unary(hb, gelu_of(n->iargs[0]), 0);
    }
    if (rc == 0 && dw)
        rc = a ? tg__gemm_op(dt, true, false, out, in, nr, 1.0, gb, out, tg__ptr(a), in,
                          first ? 0.0 : 1.0, dw, in)
               : -1;
    tg_release(a);
    return rc;
}

/* The backward below for float32 with every gradient wanted, all the rows
 * at once: dh = (g w) * GELU'(h) with GELU(h) made in the same pass, then
 * dw and dbias from one pass of the packed kernel over g. GELU(h) is held
 * whole for that product: a second buffer at h's size for a moment, which
 * a gpt-medium MLP's backward (4.8 GFLOP) pays back in time against blocks
 * whose dw OpenBLAS accumulates and whose bias gradient is a separate
 * column sum. 0, or -1 when out of memory. */
static int gelu_affine_whole(tg_node *n, const tg_tensor *hc, const tg_tensor *gc,
                             const tg_tensor *wc, tg_tensor *dh, tg_tensor *dw, tg_tensor **db)
{
    int64_t out = wc->shape[0], in = wc->shape[1], rows = tg__numel(hc->ndim - 1, hc->shape);
    tg_tensor *a = tg__empty_uninit_like(hc);
    int rc = a ? tg__gemm_op(TG_FLOAT32, false, false, rows, in, out, 1.0, tg__ptr(gc), out,
                          tg__ptr(wc), in, 0.0, tg__ptr(dh), in)
               : -1;
    if (rc == 0) {
        tg__gelu_with_grad(TG_FLOAT32, n->iargs[0] == TG_GELU_TANH, tg__ptr(hc), tg__ptr(a),
                           tg__ptr(dh), rows * in);
        rc = tg__affine_param_grads(gc, a, rows, out, in, dw, db);
    }
    tg_release(a);
    return rc;
}

/* saved[0]: h in bfloat16 when tg__save_bf16_rounded kept it so, else
 * nothing and h is read from the node; iargs[0]: the GELU kind. GELU(h) is
 * computed again here rather than kept since the forward: that is the point
 * of the op. Float32 with every gradient wanted goes all at once
 * (gelu_affine_whole); otherwise GELU(h) is made a block of rows at a time
 * (a kept h widened a block at a time too), each block's dh beside it, so
 * that backward holds dh alone at h's size rather than also GELU(h). */
static int gelu_affine_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    const tg_tensor *w = n->inputs[1], *h = n->inputs[0], *h16 = tg__saved_bf16(n, 0);
    tg_dtype dt = g->dtype;
    size_t es = tg_dtype_size(dt);
    int64_t out = w->shape[0], in = w->shape[1], rows = tg__numel(h->ndim - 1, h->shape);
    tg_tensor *hc = h16 ? NULL : tg__contiguous(h), *gc = tg__contiguous(g);
    tg_tensor *wc = n->needs[0] ? tg__contiguous(w) : NULL;
    tg_tensor *dh = n->needs[0] ? tg__empty_uninit(dt, h->ndim, h->shape) : NULL; /* all written */
    int64_t step = tg__affine_block_rows(rows, in, es);
    /* the first block writes dw; with no rows it is 0 */
    tg_tensor *dw = !n->needs[1] ? NULL
                    : rows   ? tg__empty_uninit_like(w)
                             : tg__empty(dt, 2, w->shape);
    int rc = (h16 || hc) && gc && (!n->needs[0] || (wc && dh)) && (!n->needs[1] || dw) ? 0 : -1;
    bool whole = rc == 0 && hc && dt == TG_FLOAT32 && dh && dw && n->needs[2] && rows > 0;
    if (whole) {
        rc = gelu_affine_whole(n, hc, gc, wc, dh, dw, &grads[2]);
        rows = 0; /* no blocks left, and the bias gradient made */
    }
    for (int64_t r0 = 0; rc == 0 && r0 < rows; r0 += step) {
        int64_t nr = rows - r0 < step ? rows - r0 : step;
        tg_tensor *hb = h16 ? tg__widen_rows(h16, r0, nr) : tg__affine_rows(hc, r0, nr, in);
        tg_tensor *db = dh ? tg__affine_rows(dh, r0, nr, in) : NULL;
        const char *gb = (const char *)tg__ptr(gc) + (size_t)(r0 * out) * es;
        rc = hb && (!dh || db)
                 ? gelu_affine_block(n, hb, gb, wc, dw ? tg__ptr(dw) : NULL, db, r0 == 0)
                 : -1;
        tg_release(hb);
        tg_release(db);
    }
    if (rc == 0 && n->needs[2] && !whole)
        rc = tg__affine_bias_grad(gc, &grads[2]);
    if (rc == 0) {
        grads[0] = dh ? tg__ret(tg_retain(dh)) : NULL;
        grads[1] = dw ? tg__ret(tg_retain(dw)) : NULL;
    }
    tg_release(hc), tg_release(gc), tg_release(wc), tg_release(dh), tg_release(dw);
    return rc;
}

tg_tensor *tg_gelu_affine(const tg_tensor *h, tg_gelu_kind kind, const tg_tensor *weight,
                          const tg_tensor *bias)
{
    TG_CHECK_NULL(h);
    TG_CHECK_NULL(weight);
    if (kind != TG_GELU_ERF && kind != TG_GELU_TANH)
        return tg__fail(TG_ERR_VALUE, "tg_gelu_affine: unknown GELU kind %d", (int)kind);
    if (tg__affine_check("tg_gelu_affine", h, weight, bias) < 0)
        return NULL;
    tg_tensor *hc = tg__contiguous(h);
    tg_tensor *y = hc ? product(hc, weight, bias, kind) : NULL;
    tg_release(hc);
    tg_node *node;
    y = tg__finish(y, TG_OP_GELU_AFFINE, gelu_affine_backward, 3,
                   (const tg_tensor *[]){h, weight, bias}, &node);
    if (node)
        node->iargs[0] = kind;
    tg__save_bf16_rounded(node, 0, 0);
    return y;
}

/* ---- the affine map of a layer norm --------------------------------------- */

/* layer_norm(x) over the last dim with its rows' mean and rstd ([rows]
 * float64, the values the norm's gradients need): y[0..2] are new
 * references, all NULL when out of memory. */
static int normalise(const tg_tensor *xc, const tg_tensor *lw, const tg_tensor *lb, double eps,
                     tg_tensor *y[3])
{
    int64_t d = xc->shape[xc->ndim - 1], rows = tg__numel(xc->ndim - 1, xc->shape);
    tg_tensor *lwc = lw ? tg__contiguous(lw) : NULL, *lbc = lb ? tg__contiguous(lb) : NULL;
    y[0] = tg__empty_uninit_like(xc); /* all written */
    y[1] = tg__empty(TG_FLOAT64, 1, (int64_t[]){rows});
    y[2] = tg__empty(TG_FLOAT64, 1, (int64_t[]){rows});
    bool ok = (!lw || lwc) && (!lb || lbc) && y[0] && y[1] && y[2];
    if (ok && d > 0)
        tg__layer_norm_rows(tg__ptr(y[0]), tg__ptr(y[1]), tg__ptr(y[2]), tg__ptr(xc),
                            lwc ? tg__ptr(lwc) : NULL, lbc ? tg__ptr(lbc) : NULL, rows, d, eps,
                            xc->dtype);
    tg_release(lwc);
    tg_release(lbc);
    if (ok)
        return 0;
    for (int i = 0; i < 3; i++) {
        tg_release(y[i]);
        y[i] = NULL;
    }
    return -1;
}

/* saved: none; args[0]: eps. inputs: x, ln weight, ln bias, weight, bias.
 * The normalised x is computed again from x, as in the forward. */
static int layer_norm_affine_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    const tg_tensor *lw = n->inputs[1], *lb = n->inputs[2];
    bool need_dy = n->needs[0] || n->needs[1] || n->needs[2];
    tg_tensor *xc = tg__contiguous(n->inputs[0]), *y[3] = {NULL, NULL, NULL}, *dy = NULL;
    int rc = xc ? normalise(xc, lw, lb, n->args[0], y) : -1;
    if (rc == 0)
        rc = tg__affine_grads(n, 3, g, y[0], need_dy, NULL, &dy, grads);
    tg_release(y[0]); /* before the norm's gradients, which need one buffer of x's size */
    if (rc == 0 && dy)
        rc = tg__layer_norm_grads(dy, xc, 1, lw, lb, y[1], y[2], n->needs, grads);
    tg_release(dy);
    tg_release(y[1]);
    tg_release(y[2]);
    tg_release(xc);
    return rc;
}

tg_tensor *tg_layer_norm_affine(const tg_tensor *x, const tg_tensor *ln_weight,
                                const tg_tensor *ln_bias, double eps, const tg_tensor *weight,
                                const tg_tensor *bias)
{
    static const char fn[] = "tg_layer_norm_affine";
    TG_CHECK_NULL(x);
    TG_CHECK_NULL(weight);
    if (tg__affine_check(fn, x, weight, bias) < 0 ||
        tg__layer_norm_check(fn, x, 1, ln_weight, ln_bias, eps) < 0)
        return NULL;
    tg_tensor *xc = tg__contiguous(x), *y[3] = {NULL, NULL, NULL};
    tg_tensor *out = xc && normalise(xc, ln_weight, ln_bias, eps, y) == 0
                         ? product(y[0], weight, bias, -1) : NULL;
    for (int i = 0; i < 3; i++)
        tg_release(y[i]); /* the normalised x is gone after the product: the op's point */
    tg_release(xc);
    tg_node *node;
    out = tg__finish(out, TG_OP_LAYER_NORM_AFFINE, layer_norm_affine_backward, 5,
                     (const tg_tensor *[]){x, ln_weight, ln_bias, weight, bias}, &node);
    if (node)
        node->args[0] = eps;
    return out;
}
