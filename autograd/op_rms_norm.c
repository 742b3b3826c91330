/* RMS normalisation over the last dim (Llama's RMSNorm) with an optional
 * weight, and its fusion into the affine map that follows it, which keeps
 * only x for backward; the product is op_affine.c's.
 *
 * kernels: tensor/rms_norm_kernels.c; fused: tg_rms_norm_affine here;
 * gradcheck: tests/cases_nn.c rms_norm_*, tests/cases_matmul.c
 * rms_norm_affine_*; module: nn/norm.c tg_rms_norm_module, nn/llama.c
 * (before q, k, v and gate, up); tests: tests/test_rms_swiglu.c. */
#include "affine.h"
#include "graph.h"
#include "rms_norm_kernels.h"

#include <math.h>

/* x a float tensor of at least one dim, eps positive and finite, weight
 * NULL or x's dtype and [D] for x [..., D]. 0, or -1 (recorded). */
static int rms_norm_check(const char *fn, const tg_tensor *x, const tg_tensor *weight,
                          double eps)
{
    if (tg__check_float(fn, x) < 0 || (weight && tg__check_float(fn, weight) < 0))
        return -1;
    if (x->ndim < 1) {
        tg__fail(TG_ERR_SHAPE, "%s: x %s has no last dim to normalise", fn, TG_SHAPE_STR(x));
        return -1;
    }
    if (!(eps > 0) || !isfinite(eps)) {
        tg__fail(TG_ERR_VALUE, "%s: eps must be positive and finite, got %g", fn, eps);
        return -1;
    }
    if (weight && weight->dtype != x->dtype) {
        tg__fail(TG_ERR_DTYPE, "%s: weight is %s but x is %s", fn, tg_dtype_name(weight->dtype),
                 tg_dtype_name(x->dtype));
        return -1;
    }
    if (weight && (weight->ndim != 1 || weight->shape[0] != x->shape[x->ndim - 1])) {
        tg__fail(TG_ERR_SHAPE, "%s: weight %s is not [%lld], the last dim of x %s", fn,
                 TG_SHAPE_STR(weight), (long long)x->shape[x->ndim - 1], TG_SHAPE_STR(x));
        return -1;
    }
    return 0;
}

/* rms_norm(xc) (xc contiguous) into *out, with each row's 1/rms in *rstd
 * ([rows] float64): new references, both NULL when out of memory. */
static int normalise(const tg_tensor *xc, const tg_tensor *weight, double eps, tg_tensor **out,
                     tg_tensor **rstd)
{
    int64_t d = xc->shape[xc->ndim - 1], rows = tg__numel(xc->ndim - 1, xc->shape);
    tg_tensor *wc = weight ? tg__contiguous(weight) : NULL;
    *out = tg__empty_uninit_like(xc); /* all written (none when d is 0) */
    *rstd = tg__empty(TG_FLOAT64, 1, (int64_t[]){rows});
    bool ok = (!weight || wc) && *out && *rstd;
    if (ok && d > 0)
        tg__rms_norm_rows(tg__ptr(*out), tg__ptr(*rstd), tg__ptr(xc), wc ? tg__ptr(wc) : NULL,
                          rows, d, eps, xc->dtype);
    tg_release(wc);
    if (ok)
        return 0;
    tg_release(*out);
    tg_release(*rstd);
    *out = *rstd = NULL;
    return -1;
}

/* The gradients of rms_norm(x, w) given g, from the rows' rstd: dx and dw
 * into grads[0] and grads[1] as needs[] asks. 0, or -1 when out of memory. */
static int rms_norm_grads(const tg_tensor *g, const tg_tensor *x, const tg_tensor *w,
                          const tg_tensor *rstd, const bool *needs, tg_tensor **grads)
{
    int64_t d = x->shape[x->ndim - 1], rows = tg__numel(x->ndim - 1, x->shape);
    tg_tensor *gc = tg__contiguous(g), *xc = tg__contiguous(x);
    tg_tensor *wc = w ? tg__contiguous(w) : NULL;
    tg_tensor *dx = needs[0] ? tg__empty_uninit_like(x) : NULL; /* all written */
    tg_tensor *dw = w && needs[1] ? tg__empty(TG_FLOAT64, 1, (int64_t[]){d}) : NULL;
    int rc = gc && xc && (!w || wc) && (!needs[0] || dx) && (!(w && needs[1]) || dw) ? 0 : -1;
    if (rc == 0 && d > 0)
        tg__rms_norm_backward_rows(dx ? tg__ptr(dx) : NULL, dw ? tg__ptr(dw) : NULL,
                                   tg__ptr(gc), tg__ptr(xc), wc ? tg__ptr(wc) : NULL,
                                   tg__ptr(rstd), rows, d, x->dtype);
    if (rc == 0) {
        grads[0] = dx ? tg__ret(tg_retain(dx)) : NULL;
        /* the float64 sums, in the weight's dtype */
        grads[1] = dw ? tg__ret(tg__convert(dw, w->dtype)) : NULL;
        if (dw && !grads[1])
            rc = -1;
    }
    tg_release(gc), tg_release(xc), tg_release(wc), tg_release(dx), tg_release(dw);
    return rc;
}

/* saved[0]: the rows' rstd (float64). */
static int rms_norm_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    return rms_norm_grads(g, n->inputs[0], n->inputs[1], n->saved[0], n->needs, grads);
}

tg_tensor *tg_rms_norm(const tg_tensor *x, const tg_tensor *weight, double eps)
{
    TG_CHECK_NULL(x);
    if (rms_norm_check(__func__, x, weight, eps) < 0)
        return NULL;
    tg_tensor *xc = tg__contiguous(x), *out = NULL, *rstd = NULL;
    if (xc)
        normalise(xc, weight, eps, &out, &rstd);
    tg_release(xc);
    tg_node *node;
    out = tg__finish(out, TG_OP_RMS_NORM, rms_norm_backward, 2,
                     (const tg_tensor *[]){x, weight}, &node);
    if (node)
        tg__save(node, 0, rstd);
    tg_release(rstd);
    return out;
}

/* ---- the affine map of an RMS norm ------------------------------------------ */

/* saved: none; args[0]: eps. inputs: x, norm weight, weight, bias. The
 * normalised x is computed again from x, as in the forward. */
static int rms_norm_affine_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    bool need_dxn = n->needs[0] || n->needs[1];
    tg_tensor *xc = tg__contiguous(n->inputs[0]), *xn = NULL, *rstd = NULL, *dxn = NULL;
    int rc = xc ? normalise(xc, n->inputs[1], n->args[0], &xn, &rstd) : -1;
    if (rc == 0)
        rc = tg__affine_grads(n, 2, g, xn, need_dxn, NULL, &dxn, grads);
    tg_release(xn); /* before the norm's gradients, which need one buffer of x's size */
    if (rc == 0 && dxn)
        rc = rms_norm_grads(dxn, xc, n->inputs[1], rstd, n->needs, grads);
    tg_release(dxn);
    tg_release(rstd);
    tg_release(xc);
    return rc;
}

tg_tensor *tg_rms_norm_affine(const tg_tensor *x, const tg_tensor *norm_weight, double eps,
                              const tg_tensor *weight, const tg_tensor *bias)
{
    static const char fn[] = "tg_rms_norm_affine";
    TG_CHECK_NULL(x);
    TG_CHECK_NULL(weight);
    if (rms_norm_check(fn, x, norm_weight, eps) < 0 || tg__affine_check(fn, x, weight, bias) < 0)
        return NULL;
    tg_tensor *xc = tg__contiguous(x), *xn = NULL, *rstd = NULL;
    tg_tensor *y = xc && normalise(xc, norm_weight, eps, &xn, &rstd) == 0
                       ? tg__affine_product(xn, weight, bias)
                       : NULL;
    tg_release(xn); /* the normalised x is gone after the product: the op's point */
    tg_release(rstd);
    tg_release(xc);
    tg_node *node;
    y = tg__finish(y, TG_OP_RMS_NORM_AFFINE, rms_norm_affine_backward, 4,
                   (const tg_tensor *[]){x, norm_weight, weight, bias}, &node);
    if (node)
        node->args[0] = eps;
    return y;
}
