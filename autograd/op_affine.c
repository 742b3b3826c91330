/* tg_affine: y = x @ weight^T + bias as one op (torch.nn.functional.linear).
 * The output rows start as copies of the bias and the GEMM adds the product
 * onto them, so there is no separate bias pass and no product kept apart
 * from the output. Backward: dx = dy @ weight, dweight = dy^T @ x (summed
 * over every leading dim), dbias = dy summed over the rows. */
#include "gemm.h"
#include "graph.h"

#include <string.h>

static int check_args(const tg_tensor *x, const tg_tensor *w, const tg_tensor *b)
{
    if (tg__check_float("tg_affine", x) < 0 || tg__check_float("tg_affine", w) < 0 ||
        (b && tg__check_float("tg_affine", b) < 0))
        return -1;
    if (w->dtype != x->dtype || (b && b->dtype != x->dtype)) {
        tg__fail(TG_ERR_DTYPE, "tg_affine: dtypes differ: x %s, weight %s, bias %s",
                 tg_dtype_name(x->dtype), tg_dtype_name(w->dtype),
                 b ? tg_dtype_name(b->dtype) : "none");
        return -1;
    }
    if (x->ndim < 1 || w->ndim != 2 || x->shape[x->ndim - 1] != w->shape[1]) {
        tg__fail(TG_ERR_SHAPE, "tg_affine: x %s and weight %s do not fit (expected x [..., in] "
                               "and weight [out, in])", TG_SHAPE_STR(x), TG_SHAPE_STR(w));
        return -1;
    }
    if (b && (b->ndim != 1 || b->shape[0] != w->shape[0])) {
        tg__fail(TG_ERR_SHAPE, "tg_affine: bias %s is not [out %lld]", TG_SHAPE_STR(b),
                 (long long)w->shape[0]);
        return -1;
    }
    return 0;
}

/* saved: none; the inputs (x, weight, bias) are read from the node. */
static int affine_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    const tg_tensor *x = n->inputs[0], *w = n->inputs[1];
    int64_t out = w->shape[0], in = w->shape[1], rows = tg__numel(x->ndim - 1, x->shape);
    tg_tensor *gc = tg__contiguous(g), *xc = n->needs[1] ? tg__contiguous(x) : NULL;
    tg_tensor *wc = n->needs[0] ? tg__contiguous(w) : NULL;
    tg_tensor *dx = n->needs[0] ? tg__empty_uninit_like(x) : NULL; /* all written */
    tg_tensor *dw = n->needs[1] ? tg__empty_uninit_like(w) : NULL;
    int rc = gc && (!n->needs[1] || xc) && (!n->needs[0] || (wc && dx)) &&
                     (!n->needs[1] || dw) ? 0 : -1;
    if (rc == 0 && dx && tg__gemm(x->dtype, false, false, false, rows, in, out, 1.0,
                                  tg__ptr(gc), out, tg__ptr(wc), in, 0.0, tg__ptr(dx), in) < 0)
        rc = -1;
    if (rc == 0 && dw && tg__gemm(x->dtype, false, true, false, out, in, rows, 1.0,
                                  tg__ptr(gc), out, tg__ptr(xc), in, 0.0, tg__ptr(dw), in) < 0)
        rc = -1;
    if (rc == 0 && n->needs[2]) { /* dbias: dy summed over every leading dim */
        int dims[TG_MAX_DIMS];
        for (int d = 0; d < g->ndim - 1; d++)
            dims[d] = d;
        grads[2] = g->ndim > 1 ? tg_sum(gc, dims, g->ndim - 1, false) : tg__ret(tg_retain(gc));
        rc = grads[2] ? 0 : -1;
    }
    tg_release(gc);
    tg_release(xc);
    tg_release(wc);
    if (rc < 0) {
        tg_release(dx);
        tg_release(dw);
        return -1;
    }
    grads[0] = dx ? tg__ret(dx) : NULL;
    grads[1] = dw ? tg__ret(dw) : NULL;
    return 0;
}

tg_tensor *tg_affine(const tg_tensor *x, const tg_tensor *weight, const tg_tensor *bias)
{
    TG_CHECK_NULL(x);
    TG_CHECK_NULL(weight);
    if (check_args(x, weight, bias) < 0)
        return NULL;
    int64_t out = weight->shape[0], in = weight->shape[1];
    int64_t rows = tg__numel(x->ndim - 1, x->shape);
    int64_t shape[TG_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = out;
    tg_tensor *xc = tg__contiguous(x), *wc = tg__contiguous(weight);
    tg_tensor *bc = bias ? tg__contiguous(bias) : NULL;
    tg_tensor *y = xc && wc && (!bias || bc) ? tg__empty_uninit(x->dtype, x->ndim, shape) : NULL;
    if (y) {
        size_t es = tg_dtype_size(x->dtype), row_bytes = (size_t)out * es;
        char *yp = tg__ptr(y);
        if (bc)
            for (int64_t r = 0; r < rows; r++)
                memcpy(yp + (size_t)r * row_bytes, tg__ptr(bc), row_bytes);
        if (tg__gemm(x->dtype, false, false, true, rows, out, in, 1.0, tg__ptr(xc), in,
                     tg__ptr(wc), in, bc ? 1.0 : 0.0, yp, out) < 0) {
            tg_release(y);
            y = NULL;
        }
    }
    tg_release(xc);
    tg_release(wc);
    tg_release(bc);
    return tg__finish(y, TG_OP_AFFINE, affine_backward, 3,
                      (const tg_tensor *[]){x, weight, bias}, NULL);
}
