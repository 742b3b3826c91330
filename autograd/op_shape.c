/* View ops and joins: transpose, permute, reshape, narrow, expand,
 * squeeze/unsqueeze, concat and contiguous. Views share storage; backward
 * puts each gradient element back where its view element came from. */
#include "graph.h"

#include <string.h>

/* ---- transpose ------------------------------------------------------------- */

static int transpose_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    grads[0] = tg_transpose(g, (int)n->iargs[0], (int)n->iargs[1]);
    return 0;
}

tg_tensor *tg_transpose(const tg_tensor *x, int dim0, int dim1)
{
    TG_CHECK_NULL(x);
    int d0 = tg__wrap_dim(__func__, dim0, x->ndim);
    int d1 = d0 < 0 ? -1 : tg__wrap_dim(__func__, dim1, x->ndim);
    if (d1 < 0)
        return NULL;
    if (x->ndim == 0)
        return tg__finish(tg__alias(x), TG_OP_TRANSPOSE, transpose_backward, 1,
                          (const tg_tensor *[]){x}, NULL);
    int64_t shape[TG_MAX_DIMS], stride[TG_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    memcpy(stride, x->stride, sizeof stride);
    shape[d0] = x->shape[d1];
    shape[d1] = x->shape[d0];
    stride[d0] = x->stride[d1];
    stride[d1] = x->stride[d0];
    tg_node *node;
    tg_tensor *out = tg__finish(tg__view(x, x->ndim, shape, stride, x->offset), TG_OP_TRANSPOSE,
                                transpose_backward, 1, (const tg_tensor *[]){x}, &node);
    if (node) {
        node->iargs[0] = d0;
        node->iargs[1] = d1;
    }
    return out;
}
