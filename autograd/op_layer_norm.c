/* Layer normalisation over the trailing dims of x, with optional elementwise
 * weight and bias: a fused forward that saves each row's mean and 1/std, and
 * the fused backward that reuses them instead of a chain of small ops.
 *
 * kernels: tensor/layer_norm_kernels.c; fused: tg_layer_norm_affine
 * (op_affine.c, through layer_norm.h); gradcheck: tests/cases_nn.c
 * layer_norm_*, tests/cases_matmul.c layer_norm_affine_*; module: nn/norm.c
 * tg_layer_norm_module (the GPT, encoder and decoder blocks). */
#include "graph.h"
#include "layer_norm.h"
#include "layer_norm_kernels.h"

#include <string.h>

/* weight or bias (named what) must be NULL or x's dtype with the shape of the
 * trailing norm_ndim dims of x. */
static int check_affine(const char *fn, const tg_tensor *x, int norm_ndim, const tg_tensor *p,
                        const char *what)
{
    if (!p)
        return 0;
    if (tg__check_float(fn, p) < 0)
        return -1;
    if (p->dtype != x->dtype) {
        tg__fail(TG_ERR_DTYPE, "%s: %s is %s but x is %s", fn, what,
                 tg_dtype_name(p->dtype), tg_dtype_name(x->dtype));
        return -1;
    }
    const int64_t *tail = x->shape + (x->ndim - norm_ndim);
    if (p->ndim != norm_ndim || memcmp(p->shape, tail, (size_t)norm_ndim * sizeof *tail)) {
        tg__fail(TG_ERR_SHAPE, "%s: %s has shape %s but the normalised dims of "
                               "x %s are %s", fn, what, TG_SHAPE_STR(p), TG_SHAPE_STR(x),
                 tg__shape_str((char[96]){0}, 96, norm_ndim, tail));
        return -1;
    }
    return 0;
}

int tg__layer_norm_check(const char *fn, const tg_tensor *x, int norm_ndim,
                         const tg_tensor *weight, const tg_tensor *bias, double eps)
{
    if (tg__check_float(fn, x) < 0)
        return -1;
    if (norm_ndim < 1 || norm_ndim > x->ndim) {
        tg__fail(TG_ERR_DIM, "%s: norm_ndim %d is out of range for x %s "
                             "(expected 1 to %d)", fn, norm_ndim, TG_SHAPE_STR(x), x->ndim);
        return -1;
    }
    if (!(eps > 0) || !isfinite(eps)) {
        tg__fail(TG_ERR_VALUE, "%s: eps must be positive and finite, got %g", fn, eps);
        return -1;
    }
    if (check_affine(fn, x, norm_ndim, weight, "weight") < 0 ||
        check_affine(fn, x, norm_ndim, bias, "bias") < 0)
        return -1;
    return 0;
}

/* rows = product of the leading dims, d = product of the normalised ones. */
static void row_geometry(const tg_tensor *x, int norm_ndim, int64_t *rows, int64_t *d)
{
    *rows = tg__numel(x->ndim - norm_ndim, x->shape);
    *d = tg__numel(norm_ndim, x->shape + (x->ndim - norm_ndim));
}

/* A [d] float64 scratch row for a summed parameter gradient, or NULL. */
static tg_tensor *scratch(bool needed, int64_t d)
{
    return needed ? tg__empty(TG_FLOAT64, 1, (int64_t[]){d}) : NULL;
}

int tg__layer_norm_grads(const tg_tensor *g, const tg_tensor *x, int norm_ndim,
                         const tg_tensor *w, const tg_tensor *b, const tg_tensor *mean,
                         const tg_tensor *rstd, const bool *needs, tg_tensor **grads)
{
    int64_t rows, d;
    row_geometry(x, norm_ndim, &rows, &d);
    tg_tensor *gc = tg__contiguous(g), *xc = tg__contiguous(x);
    tg_tensor *wc = w ? tg__contiguous(w) : NULL;
    tg_tensor *dx = needs[0] ? tg__empty_uninit_like(x) : NULL; /* all written */
    tg_tensor *dw = scratch(needs[1], d), *db = scratch(needs[2], d);
    int rc = -1;
    if (gc && xc && (!w || wc) && (!needs[0] || dx) && (!needs[1] || dw) &&
        (!needs[2] || db)) {
        tg__layer_norm_backward_rows(dx ? tg__ptr(dx) : NULL, dw ? tg__ptr(dw) : NULL,
                                     db ? tg__ptr(db) : NULL, tg__ptr(gc), tg__ptr(xc),
                                     wc ? tg__ptr(wc) : NULL, tg__ptr(mean), tg__ptr(rstd),
                                     rows, d, x->dtype);
        rc = 0;
        grads[0] = dx ? tg__ret(tg_retain(dx)) : NULL;
        /* the float64 sums, in the parameter's own dtype and shape */
        if (dw)
            grads[1] = tg_reshape(tg__ret(tg__convert(dw, w->dtype)), w->ndim, w->shape);
        if (db)
            grads[2] = tg_reshape(tg__ret(tg__convert(db, b->dtype)), b->ndim, b->shape);
    }
    tg_release(gc);
    tg_release(xc);
    tg_release(wc);
    tg_release(dx);
    tg_release(dw);
    tg_release(db);
    return rc;
}

/* saved: the rows' mean and 1/std (float64); iargs[0]: norm_ndim. */
static int layer_norm_grads(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    return tg__layer_norm_grads(g, n->inputs[0], (int)n->iargs[0], n->inputs[1], n->inputs[2],
                                n->saved[0], n->saved[1], n->needs, grads);
}

tg_tensor *tg_layer_norm(const tg_tensor *x, int norm_ndim, const tg_tensor *weight,
                         const tg_tensor *bias, double eps)
{
    TG_CHECK_NULL(x);
    if (tg__layer_norm_check("tg_layer_norm", x, norm_ndim, weight, bias, eps) < 0)
        return NULL;
    int64_t rows, d;
    row_geometry(x, norm_ndim, &rows, &d);
    tg_tensor *xc = tg__contiguous(x);
    tg_tensor *wc = weight ? tg__contiguous(weight) : NULL;
    tg_tensor *bc = bias ? tg__contiguous(bias) : NULL;
    tg_tensor *out = tg__empty_uninit_like(x); /* all written (none when d is 0) */
    tg_tensor *mean = tg__empty(TG_FLOAT64, 1, (int64_t[]){rows});
    tg_tensor *rstd = tg__empty(TG_FLOAT64, 1, (int64_t[]){rows});
    bool ok = xc && (!weight || wc) && (!bias || bc) && out && mean && rstd;
    if (ok && d > 0)
        tg__layer_norm_rows(tg__ptr(out), tg__ptr(mean), tg__ptr(rstd), tg__ptr(xc),
                            wc ? tg__ptr(wc) : NULL, bc ? tg__ptr(bc) : NULL, rows, d, eps,
                            x->dtype);
    tg_release(xc);
    tg_release(wc);
    tg_release(bc);
    if (!ok) {
        tg_release(out);
        out = NULL;
    }
    tg_node *node;
    out = tg__finish(out, TG_OP_LAYER_NORM, layer_norm_grads, 3,
                     (const tg_tensor *[]){x, weight, bias}, &node);
    if (node) {
        node->iargs[0] = norm_ndim;
        tg__save(node, 0, mean);
        tg__save(node, 1, rstd);
    }
    tg_release(mean);
    tg_release(rstd);
    return out;
}
