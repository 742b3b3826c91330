/* The ops that hide elements: masked_fill (attention masks, -inf before a
 * softmax) and inverted dropout. Both pass the gradient through where an
 * element is kept and stop it where it is hidden.
 *
 * kernels: tensor/mask_kernels.c; fused: both inside tg_attention
 * (op_attention.c); gradcheck: tests/cases_attention.c masked_fill_*,
 * dropout_*; module: nn/dropout.c tg_dropout_module, nn/sdpa.c (the
 * unfused attention), nn/transformer.c's masks. */
#include "graph.h"
#include "mask_kernels.h"

#include <string.h>

/* ---- masked_fill ------------------------------------------------------------- */

/* g with the masked positions set to exactly 0 (saved[0]: the mask). */
static int masked_fill_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    tg_tensor *dx = tg__masked_fill(g, n->saved[0], 0.0);
    if (!dx)
        return -1;
    grads[0] = tg__ret(dx);
    return 0;
}

tg_tensor *tg_masked_fill(const tg_tensor *x, const tg_tensor *mask, double value)
{
    TG_CHECK_NULL(x);
    TG_CHECK_NULL(mask);
    if (tg__check_float(__func__, x) < 0)
        return NULL;
    if (mask->dtype != TG_BOOL)
        return tg__fail(TG_ERR_DTYPE, "tg_masked_fill: mask must be bool, got %s",
                        tg_dtype_name(mask->dtype));
    int ndim;
    int64_t shape[TG_MAX_DIMS];
    if (tg__broadcast_shape(__func__, x, mask, &ndim, shape) < 0)
        return NULL;
    if (ndim != x->ndim || memcmp(shape, x->shape, (size_t)ndim * sizeof *shape))
        return tg__fail(TG_ERR_SHAPE,
                        "tg_masked_fill: mask %s does not broadcast to x's shape %s "
                        "(it would make %s)",
                        TG_SHAPE_STR(mask), TG_SHAPE_STR(x),
                        tg__shape_str((char[96]){0}, 96, ndim, shape));
    tg_node *node;
    tg_tensor *out = tg__finish(tg__masked_fill(x, mask, value), TG_OP_MASKED_FILL,
                                masked_fill_backward, 1, (const tg_tensor *[]){x}, &node);
    /* The mask is kept as it is (a view, if it was one): backward reads it
     * through the same broadcast strides. */
    tg__save(node, 0, (tg_tensor *)mask);
    return out;
}

/* ---- dropout ----------------------------------------------------------------- */

/* args[0]: p (0 for the identity); iargs[0]: the mask's key. The mask is
 * made again from its key rather than kept: the upstream gradient passes
 * where an element was kept, scaled as it was. */
static int dropout_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    if (n->args[0] == 0) {
        grads[0] = tg__ret(tg_retain(g));
        return 0;
    }
    grads[0] = tg__ret(tg__dropout_apply(g, (uint64_t)n->iargs[0], n->args[0]));
    return grads[0] ? 0 : -1;
}

tg_tensor *tg_dropout(const tg_tensor *x, double p, bool train, tg_rng *rng)
{
    TG_CHECK_NULL(x);
    if (tg__check_float(__func__, x) < 0)
        return NULL;
    if (!(p >= 0.0 && p < 1.0)) /* also rejects NaN */
        return tg__fail(TG_ERR_VALUE, "tg_dropout: p = %g is outside [0, 1)", p);
    tg_node *node;
    if (!train || p == 0.0) {
        /* Identity: an alias of x whose gradient passes through unchanged
         * (args[0] stays 0). */
        return tg__finish(tg__alias(x), TG_OP_DROPOUT, dropout_backward, 1,
                          (const tg_tensor *[]){x}, &node);
    }
    if (!rng)
        return tg__fail(TG_ERR_NULL, "tg_dropout: rng is NULL, but training with p = %g "
                                     "needs one to draw the mask", p);
    uint64_t key = tg_rng_next(rng);
    tg_tensor *out = tg__finish(tg__dropout_apply(x, key, p), TG_OP_DROPOUT, dropout_backward, 1,
                                (const tg_tensor *[]){x}, &node);
    if (node) {
        node->args[0] = p;
        node->iargs[0] = (int64_t)key;
    }
    return out;
}
