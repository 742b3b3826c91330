/* SwiGLU's product silu(gate) * up, and its fusion into the affine map that
 * follows it (a Llama MLP's down projection), which keeps only gate and up
 * for backward and makes the product again there; the product is
 * op_affine.c's.
 *
 * kernels: tensor/swiglu_kernels.c; fused: tg_swiglu_affine here;
 * gradcheck: tests/cases_nn.c swiglu_*, tests/cases_matmul.c
 * swiglu_affine_*; module: nn/llama.c (the MLP); tests:
 * tests/test_rms_swiglu.c. */
#include "affine.h"
#include "gemm.h"
#include "graph.h"
#include "saved_bf16.h"
#include "swiglu_kernels.h"

#include <string.h>

/* gate and up: float tensors of one dtype and the same shape (no
 * broadcasting: they are two projections of the same rows). */
static int swiglu_check(const char *fn, const tg_tensor *gate, const tg_tensor *up)
{
    if (tg__check_float(fn, gate) < 0 || tg__check_float(fn, up) < 0)
        return -1;
    if (gate->dtype != up->dtype) {
        tg__fail(TG_ERR_DTYPE, "%s: dtypes differ: gate %s, up %s", fn,
                 tg_dtype_name(gate->dtype), tg_dtype_name(up->dtype));
        return -1;
    }
    if (gate->ndim != up->ndim ||
        memcmp(gate->shape, up->shape, (size_t)gate->ndim * sizeof *gate->shape)) {
        tg__fail(TG_ERR_SHAPE, "%s: gate %s and up %s differ in shape (they must match)", fn,
                 TG_SHAPE_STR(gate), TG_SHAPE_STR(up));
        return -1;
    }
    return 0;
}

/* silu(gc) * uc of two contiguous tensors: a new tensor, NULL when out of
 * memory. */
static tg_tensor *product_of(const tg_tensor *gc, const tg_tensor *uc)
{
    tg_tensor *a = tg__empty_uninit_like(gc); /* all written */
    if (a)
        tg__swiglu(gc->dtype, tg__ptr(a), tg__ptr(gc), tg__ptr(uc),
                   tg__numel(gc->ndim, gc->shape));
    return a;
}

/* saved: none; the inputs (gate, up) are read from the node. */
static int swiglu_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    tg_tensor *gatec = tg__contiguous(n->inputs[0]), *upc = tg__contiguous(n->inputs[1]);
    tg_tensor *gc = tg__contiguous(g);
    tg_tensor *dgate = n->needs[0] && gatec ? tg__empty_uninit_like(gatec) : NULL;
    tg_tensor *dup = n->needs[1] && gatec ? tg__empty_uninit_like(gatec) : NULL;
    int rc = gatec && upc && gc && (!n->needs[0] || dgate) && (!n->needs[1] || dup) ? 0 : -1;
    if (rc == 0) {
        tg__swiglu_grads(gc->dtype, tg__ptr(gatec), tg__ptr(upc), tg__ptr(gc),
                         dgate ? tg__ptr(dgate) : NULL, dup ? tg__ptr(dup) : NULL, NULL,
                         tg__numel(gc->ndim, gc->shape));
        grads[0] = dgate ? tg__ret(tg_retain(dgate)) : NULL;
        grads[1] = dup ? tg__ret(tg_retain(dup)) : NULL;
    }
    tg_release(gatec), tg_release(upc), tg_release(gc), tg_release(dgate), tg_release(dup);
    return rc;
}

tg_tensor *tg_swiglu(const tg_tensor *gate, const tg_tensor *up)
{
    TG_CHECK_NULL(gate);
    TG_CHECK_NULL(up);
    if (swiglu_check(__func__, gate, up) < 0)
        return NULL;
    tg_tensor *gatec = tg__contiguous(gate), *upc = tg__contiguous(up);
    tg_tensor *a = gatec && upc ? product_of(gatec, upc) : NULL;
    tg_release(gatec);
    tg_release(upc);
    return tg__finish(a, TG_OP_SWIGLU, swiglu_backward, 2, (const tg_tensor *[]){gate, up},
                      NULL);
}

/* ---- the affine map of a SwiGLU ---------------------------------------------- */

/* Input i (gate or up) of n as the backward reads it: widened from its
 * bfloat16 copy in saved[i] when the node kept one, else contiguous (a new
 * reference; NULL when out of memory). */
static tg_tensor *input_values(const tg_node *n, int i)
{
    tg_tensor *x = tg__saved_operand(n, i, i), *xc = x ? tg__contiguous(x) : NULL;
    tg_release(x);
    return xc;
}

/* nr rows of the backward below, each operand contiguous, of dtype dt: da
 * = gb w (da becomes dgate where n wants it) and from da, gate and up,
 * dup and a = silu(gate) * up where given; with no da, a alone. 0, or -1
 * when out of memory. */
static int swiglu_rows(const tg_node *n, tg_dtype dt, int64_t nr, int64_t in, int64_t out,
                       const void *gate, const void *up, const void *gb, const tg_tensor *wc,
                       void *da, void *dup, void *a)
{
    int rc = 0;
    if (da) {
        rc = tg__gemm_op(dt, false, false, nr, in, out, 1.0, gb, out, tg__ptr(wc), in, 0.0, da,
                         in);
        if (rc == 0)
            tg__swiglu_grads(dt, gate, up, da, n->needs[0] ? da : NULL, dup, a, nr * in);
    } else if (a) {
        tg__swiglu(dt, a, gate, up, nr * in);
    }
    return rc;
}

/* swiglu_affine_backward's work when gate and up were kept in bfloat16, a
 * block of rows at a time: each block widens its rows of gate and up, makes
 * its rows of da (into da itself, which becomes dgate) and of dup, and its
 * rows of a, which it adds into dw as gb^T a. The backward then holds da
 * and dup whole and the rest a block at a time. 0, or -1 when out of memory. */
static int swiglu_affine_blocks(tg_node *n, const tg_tensor *gc, const tg_tensor *wc,
                                tg_tensor *da, tg_tensor *dup, tg_tensor *dw, int64_t rows,
                                int64_t out, int64_t in)
{
    const tg_tensor *gate16 = tg__saved_bf16(n, 0), *up16 = tg__saved_bf16(n, 1);
    int64_t step = tg__affine_block_rows(rows, in, sizeof(float));
    int rc = 0;
    for (int64_t r0 = 0; rc == 0 && r0 < rows; r0 += step) {
        int64_t nr = rows - r0 < step ? rows - r0 : step;
        const float *gb = (const float *)tg__ptr(gc) + r0 * out;
        tg_tensor *gate = tg__widen_rows(gate16, r0, nr), *up = tg__widen_rows(up16, r0, nr);
        tg_tensor *dab = da ? tg__affine_rows(da, r0, nr, in) : NULL;
        tg_tensor *dupb = dup ? tg__affine_rows(dup, r0, nr, in) : NULL;
        tg_tensor *a = dw ? tg__empty_uninit(TG_FLOAT32, 2, (int64_t[]){nr, in}) : NULL;
        rc = gate && up && (!da || dab) && (!dup || dupb) && (!dw || a)
                 ? swiglu_rows(n, TG_FLOAT32, nr, in, out, tg__ptr(gate), tg__ptr(up), gb, wc,
                               dab ? tg__ptr(dab) : NULL, dupb ? tg__ptr(dupb) : NULL,
                               a ? tg__ptr(a) : NULL)
                 : -1;
        if (rc == 0 && dw)
            rc = tg__gemm_op(TG_FLOAT32, true, false, out, in, nr, 1.0, gb, out, tg__ptr(a), in,
                             r0 == 0 ? 0.0 : 1.0, tg__ptr(dw), in);
        tg_release(gate), tg_release(up), tg_release(dab), tg_release(dupb), tg_release(a);
    }
    return rc;
}

/* saved[0], saved[1]: gate and up rounded to bfloat16 when
 * tg__save_bf16_rounded kept them so (under bf16), else nothing and they
 * are read from the node. inputs: gate, up, weight, bias. With a =
 * silu(gate) * up and y = a @ w^T + b: da = g w (into the buffer that
 * becomes dgate), then one pass makes dgate and dup from da and a again
 * from gate and up, and dw, db come from a (float32: one pass of the packed
 * kernel); kept gate and up go a block of rows at a time
 * (swiglu_affine_blocks). a is made here rather than kept since the
 * forward: that is the point of the op. */
static int swiglu_affine_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    const tg_tensor *w = n->inputs[2], *gate = n->inputs[0];
    bool need_da = n->needs[0] || n->needs[1], need_a = n->needs[2];
    int64_t out = w->shape[0], in = w->shape[1], rows = tg__numel(gate->ndim - 1, gate->shape);
    bool blocks = rows > 0 && tg__saved_bf16(n, 0) && tg__saved_bf16(n, 1);
    tg_tensor *gatec = blocks ? NULL : input_values(n, 0), *upc = blocks ? NULL : input_values(n, 1);
    tg_tensor *gc = tg__contiguous(g), *wc = need_da ? tg__contiguous(w) : NULL;
    bool ok = (blocks || (gatec && upc)) && gc && (!need_da || wc);
    tg_dtype dt = g->dtype;
    /* da becomes dgate */
    tg_tensor *da = ok && need_da ? tg__empty_uninit(dt, gate->ndim, gate->shape) : NULL;
    tg_tensor *dup = ok && n->needs[1] ? tg__empty_uninit(dt, gate->ndim, gate->shape) : NULL;
    tg_tensor *a = ok && need_a && !blocks ? tg__empty_uninit(dt, gate->ndim, gate->shape) : NULL;
    tg_tensor *dw = ok && need_a ? tg__empty_uninit_like(w) : NULL;
    int rc = ok && (!need_da || da) && (!n->needs[1] || dup) && (!need_a || ((blocks || a) && dw))
                 ? 0 : -1;
    if (rc == 0 && blocks) {
        rc = swiglu_affine_blocks(n, gc, wc, da, dup, dw, rows, out, in);
        if (rc == 0 && n->needs[3])
            rc = tg__affine_bias_grad(gc, &grads[3]);
    } else {
        if (rc == 0)
            rc = swiglu_rows(n, dt, rows, in, out, tg__ptr(gatec), tg__ptr(upc), tg__ptr(gc), wc,
                             da ? tg__ptr(da) : NULL, dup ? tg__ptr(dup) : NULL,
                             a ? tg__ptr(a) : NULL);
        if (rc == 0 && (need_a || n->needs[3]))
            rc = tg__affine_param_grads(gc, a, rows, out, in, dw,
                                        n->needs[3] ? &grads[3] : NULL);
    }
    if (rc == 0) {
        grads[0] = n->needs[0] ? tg__ret(tg_retain(da)) : NULL;
        grads[1] = dup ? tg__ret(tg_retain(dup)) : NULL;
        grads[2] = dw ? tg__ret(tg_retain(dw)) : NULL;
    }
    tg_release(gatec), tg_release(upc), tg_release(gc), tg_release(wc);
    tg_release(da), tg_release(dup), tg_release(a), tg_release(dw);
    return rc;
}

tg_tensor *tg_swiglu_affine(const tg_tensor *gate, const tg_tensor *up, const tg_tensor *weight,
                            const tg_tensor *bias)
{
    static const char fn[] = "tg_swiglu_affine";
    TG_CHECK_NULL(gate);
    TG_CHECK_NULL(up);
    TG_CHECK_NULL(weight);
    if (swiglu_check(fn, gate, up) < 0 || tg__affine_check(fn, gate, weight, bias) < 0)
        return NULL;
    tg_tensor *gatec = tg__contiguous(gate), *upc = tg__contiguous(up);
    tg_tensor *a = gatec && upc ? product_of(gatec, upc) : NULL;
    tg_tensor *y = a ? tg__affine_product(a, weight, bias) : NULL;
    tg_release(a); /* silu(gate) * up is gone after the product: the op's point */
    tg_release(gatec);
    tg_release(upc);
    tg_node *node;
    y = tg__finish(y, TG_OP_SWIGLU_AFFINE, swiglu_affine_backward, 4,
                   (const tg_tensor *[]){gate, up, weight, bias}, &node);
    tg__save_bf16_rounded(node, 0, 0);
    tg__save_bf16_rounded(node, 1, 1);
    return y;
}
