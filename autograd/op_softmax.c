/* softmax and log_softmax along one dim, for any layout: each slice along
 * the dim (a "row") is normalised on its own, max first so exp never
 * overflows. A row that is entirely -inf (every key masked) is defined here.
 *
 * kernels: tensor/softmax_kernels.c; fused: inside tg_attention
 * (op_attention.c) and tg_cross_entropy (op_loss.c); gradcheck:
 * tests/cases_attention.c softmax_*, log_softmax_*; module: nn/sdpa.c (the
 * unfused attention). */
#include "graph.h"
#include "softmax_kernels.h"

/* ---- the ops ---------------------------------------------------------------- */
/* node->saved[0]: an alias of the output; iargs[0]: the wrapped dim;
 * iargs[1]: 1 for log_softmax. */

static int softmax_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    const tg_tensor *y = n->saved[0];
    if (!y) { /* the alias could not be made when the op ran */
        tg__fail(TG_ERR_NOMEM, "tg_%s: backward lacks the saved output", tg_op_name(n->op));
        return -1;
    }
    tg_tensor *dx = tg__empty_uninit_like(y); /* every row is written */
    if (!dx)
        return -1;
    tg__softmax_backward_rows(y, g, dx, (int)n->iargs[0], n->iargs[1] != 0);
    grads[0] = tg__ret(dx);
    return 0;
}

static tg_tensor *softmax_op(const char *fn, const tg_tensor *x, int dim, bool log_space)
{
    if (!x)
        return tg__fail(TG_ERR_NULL, "%s: x is NULL", fn);
    if (tg__check_float(fn, x) < 0)
        return NULL;
    int d = tg__wrap_dim(fn, dim, x->ndim);
    if (d < 0)
        return NULL;
    tg_op op = log_space ? TG_OP_LOG_SOFTMAX : TG_OP_SOFTMAX;
    tg_tensor *out = tg__empty_uninit_like(x); /* every row is written */
    if (!out) /* through tg__finish, which names the op in the error */
        return tg__finish(NULL, op, softmax_backward, 1, (const tg_tensor *[]){x}, NULL);
    tg__softmax_rows(x, out, d, log_space);
    tg_node *node;
    out = tg__finish(out, op, softmax_backward, 1, (const tg_tensor *[]){x}, &node);
    if (node) {
        tg_tensor *alias = tg__alias(out);
        tg__save(node, 0, alias);
        tg_release(alias);
        node->iargs[0] = d;
        node->iargs[1] = log_space;
    }
    return out;
}

tg_tensor *tg_softmax(const tg_tensor *x, int dim)
{
    return softmax_op(__func__, x, dim, false);
}

tg_tensor *tg_log_softmax(const tg_tensor *x, int dim)
{
    return softmax_op(__func__, x, dim, true);
}
