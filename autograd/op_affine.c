/* tg_affine: y = x @ weight^T + bias as one op (torch.nn.functional.linear);
 * tg_gelu_affine: the same of GELU(h), keeping h alone for backward.
 * The output rows start as copies of the bias and the GEMM adds the product
 * onto them, so there is no separate bias pass and no product kept apart
 * from the output. Backward: dx = dy @ weight, dweight = dy^T @ x (summed
 * over every leading dim), dbias = dy summed over the rows. */
#include "gemm.h"
#include "graph.h"
#include "kernels.h"

#include <string.h>

static int check_args(const char *fn, const tg_tensor *x, const tg_tensor *w,
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

/* The gradients of y = xv @ w^T + b given gy, with xv the values the product
 * read (x itself, or GELU of it). dxv [..., in] when want_dxv, into *dxv
 * (owned by the caller); dw and db into grads[1] and grads[2] as the node
 * needs them. 0, or -1 when out of memory. */
static int product_grads(tg_node *n, const tg_tensor *gy, const tg_tensor *xv, bool want_dxv,
                         tg_tensor **dxv, tg_tensor **grads)
{
    const tg_tensor *w = n->inputs[1];
    int64_t out = w->shape[0], in = w->shape[1], rows = tg__numel(xv->ndim - 1, xv->shape);
    tg_tensor *gc = tg__contiguous(gy), *wc = want_dxv ? tg__contiguous(w) : NULL;
    tg_tensor *dx = want_dxv ? tg__empty_uninit_like(xv) : NULL; /* all written */
    tg_tensor *dw = n->needs[1] ? tg__empty_uninit_like(w) : NULL;
    int rc = gc && (!want_dxv || (wc && dx)) && (!n->needs[1] || dw) ? 0 : -1;
    if (rc == 0 && dx && tg__gemm(xv->dtype, false, false, false, rows, in, out, 1.0,
                                  tg__ptr(gc), out, tg__ptr(wc), in, 0.0, tg__ptr(dx), in) < 0)
        rc = -1;
    if (rc == 0 && dw && tg__gemm(xv->dtype, false, true, false, out, in, rows, 1.0,
                                  tg__ptr(gc), out, tg__ptr(xv), in, 0.0, tg__ptr(dw), in) < 0)
        rc = -1;
    if (rc == 0 && n->needs[2]) { /* dbias: dy summed over every leading dim */
        int dims[TG_MAX_DIMS];
        for (int d = 0; d < gy->ndim - 1; d++)
            dims[d] = d;
        grads[2] = gy->ndim > 1 ? tg_sum(gc, dims, gy->ndim - 1, false) : tg__ret(tg_retain(gc));
        rc = grads[2] ? 0 : -1;
    }
    tg_release(gc);
    tg_release(wc);
    if (rc < 0) {
        tg_release(dx);
        tg_release(dw);
        return -1;
    }
    *dxv = dx;
    grads[1] = dw ? tg__ret(dw) : NULL;
    return 0;
}

/* saved: none; the inputs (x, weight, bias) are read from the node. */
static int affine_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    tg_tensor *xc = tg__contiguous(n->inputs[0]), *dx = NULL;
    int rc = xc ? product_grads(n, g, xc, n->needs[0], &dx, grads) : -1;
    tg_release(xc);
    grads[0] = dx ? tg__ret(dx) : NULL;
    return rc;
}

/* y [..., out] = xc @ weight^T + bias, xc contiguous [..., in]. NULL when
 * out of memory. */
static tg_tensor *product(const tg_tensor *xc, const tg_tensor *weight, const tg_tensor *bias)
{
    int64_t out = weight->shape[0], in = weight->shape[1];
    int64_t rows = tg__numel(xc->ndim - 1, xc->shape);
    int64_t shape[TG_MAX_DIMS];
    memcpy(shape, xc->shape, sizeof shape);
    shape[xc->ndim - 1] = out;
    tg_tensor *wc = tg__contiguous(weight), *bc = bias ? tg__contiguous(bias) : NULL;
    tg_tensor *y = wc && (!bias || bc) ? tg__empty_uninit(xc->dtype, xc->ndim, shape) : NULL;
    if (y) {
        size_t es = tg_dtype_size(xc->dtype), row_bytes = (size_t)out * es;
        char *yp = tg__ptr(y);
        if (bc)
            for (int64_t r = 0; r < rows; r++)
                memcpy(yp + (size_t)r * row_bytes, tg__ptr(bc), row_bytes);
        if (tg__gemm(xc->dtype, false, false, true, rows, out, in, 1.0, tg__ptr(xc), in,
                     tg__ptr(wc), in, bc ? 1.0 : 0.0, yp, out) < 0) {
            tg_release(y);
            y = NULL;
        }
    }
    tg_release(wc);
    tg_release(bc);
    return y;
}

tg_tensor *tg_affine(const tg_tensor *x, const tg_tensor *weight, const tg_tensor *bias)
{
    TG_CHECK_NULL(x);
    TG_CHECK_NULL(weight);
    if (check_args("tg_affine", x, weight, bias) < 0)
        return NULL;
    tg_tensor *xc = tg__contiguous(x);
    tg_tensor *y = xc ? product(xc, weight, bias) : NULL;
    tg_release(xc);
    return tg__finish(y, TG_OP_AFFINE, affine_backward, 3,
                      (const tg_tensor *[]){x, weight, bias}, NULL);
}

/* ---- the affine map of a GELU ------------------------------------------- */

static tg__unary_kind gelu_of(int64_t kind)
{
    return kind == TG_GELU_TANH ? TG_UN_GELU_TANH : TG_UN_GELU_ERF;
}

/* saved: none; iargs[0]: the GELU kind. GELU(h) is computed again here
 * rather than kept since the forward: that is the point of the op. */
static int gelu_affine_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    tg_tensor *hc = tg__contiguous(n->inputs[0]);
    tg_tensor *a = hc ? tg__unary(hc, gelu_of(n->iargs[0]), 0) : NULL, *da = NULL;
    int rc = a ? product_grads(n, g, a, n->needs[0], &da, grads) : -1;
    if (rc == 0 && da) { /* dh = da * GELU'(h) */
        tg__binary_kind k = n->iargs[0] == TG_GELU_TANH ? TG_BIN_GELU_TANH_GRAD
                                                          : TG_BIN_GELU_ERF_GRAD;
        grads[0] = tg__ret(tg__binary(da, hc, k));
        rc = grads[0] ? 0 : -1;
    }
    tg_release(da);
    tg_release(a);
    tg_release(hc);
    return rc;
}

tg_tensor *tg_gelu_affine(const tg_tensor *h, tg_gelu_kind kind, const tg_tensor *weight,
                          const tg_tensor *bias)
{
    TG_CHECK_NULL(h);
    TG_CHECK_NULL(weight);
    if (kind != TG_GELU_ERF && kind != TG_GELU_TANH)
        return tg__fail(TG_ERR_VALUE, "tg_gelu_affine: unknown GELU kind %d", (int)kind);
    if (check_args("tg_gelu_affine", h, weight, bias) < 0)
        return NULL;
    tg_tensor *hc = tg__contiguous(h);
    tg_tensor *a = hc ? tg__unary(hc, gelu_of(kind), 0) : NULL; /* gone after the product */
    tg_tensor *y = a ? product(a, weight, bias) : NULL;
    tg_release(a);
    tg_release(hc);
    tg_node *node;
    y = tg__finish(y, TG_OP_GELU_AFFINE, gelu_affine_backward, 3,
                   (const tg_tensor *[]){h, weight, bias}, &node);
    if (node)
        node->iargs[0] = kind;
    return y;
}
