/* Reductions: sum and mean over chosen dims, and max along one dim with its
 * indices. Backward spreads the gradient back over the reduced dims.
 *
 * kernels: tensor/reduce.c, tensor/index_kernels.c (max and its
 * backward's scatter); fused: none; gradcheck: tests/cases_reduce.c sum_*,
 * mean_*, max_*; module: nn/attention.c (the heads' mean of the weights),
 * nn/dist.c. */
#include "graph.h"
#include "index_kernels.h"
#include "kernels.h"

#include <string.h>

/* Fills reduce[] from the dims argument; -1 and an error on a bad dim. */
static int parse_dims(const char *fn, const tg_tensor *x, const int *dims, int ndims,
                      bool *reduce)
{
    memset(reduce, 0, TG_MAX_DIMS * sizeof *reduce);
    if (ndims < 0 || ndims > TG_MAX_DIMS) {
        tg__fail(TG_ERR_VALUE, "%s: %d dims given, at most %d", fn, ndims, TG_MAX_DIMS);
        return -1;
    }
    if (!dims || ndims == 0) {
        for (int d = 0; d < x->ndim; d++)
            reduce[d] = true;
        return 0;
    }
    for (int i = 0; i < ndims; i++) {
        if (x->ndim == 0 && (dims[i] == 0 || dims[i] == -1))
            continue; /* a 0-dim tensor reduces over "dim 0" to itself, as in PyTorch */
        int d = tg__wrap_dim(fn, dims[i], x->ndim);
        if (d < 0)
            return -1;
        if (reduce[d]) {
            tg__fail(TG_ERR_DIM, "%s: dim %d appears twice", fn, dims[i]);
            return -1;
        }
        reduce[d] = true;
    }
    return 0;
}

/* The shape without the reduced dims (keepdim false). */
static int squeezed_shape(const tg_tensor *x, const bool *reduce, int64_t *shape)
{
    int n = 0;
    for (int d = 0; d < x->ndim; d++)
        if (!reduce[d])
            shape[n++] = x->shape[d];
    return n;
}

/* A keepdim result viewed without its reduced dims, or itself. */
static tg_tensor *drop_reduced(tg_tensor *r, const bool *reduce, bool keepdim)
{
    if (!r || keepdim)
        return r;
    int64_t shape[TG_MAX_DIMS], stride[TG_MAX_DIMS];
    int n = squeezed_shape(r, reduce, shape);
    tg__contiguous_strides(n, shape, stride);
    tg_tensor *v = tg__view(r, n, shape, stride, r->offset);
    tg_release(r);
    return v;
}

/* g (the reduced shape, with or without kept dims) seen as input's shape:
 * an expanded view, stride 0 along the reduced dims. */
static tg_tensor *spread(const tg_tensor *g, const tg_tensor *input, const bool *reduce)
{
    int64_t stride[TG_MAX_DIMS];
    int gi = 0;
    bool kept = g->ndim == input->ndim;
    for (int d = 0; d < input->ndim; d++) {
        if (reduce[d]) {
            stride[d] = 0;
            gi += kept;
        } else {
            stride[d] = g->stride[gi++];
        }
    }
    return tg__ret(tg__view(g, input->ndim, input->shape, stride, g->offset));
}

static int64_t reduced_count(const tg_tensor *x, const bool *reduce)
{
    int64_t count = 1;
    for (int d = 0; d < x->ndim; d++)
        if (reduce[d])
            count *= x->shape[d];
    return count;
}

static void store_dims(tg_node *node, const bool *reduce)
{
    for (int d = 0; d < TG_MAX_DIMS; d++)
        node->iargs[d] = reduce[d];
}

static void load_dims(const tg_node *node, bool *reduce)
{
    for (int d = 0; d < TG_MAX_DIMS; d++)
        reduce[d] = node->iargs[d] != 0;
}

/* ---- sum and mean --------------------------------------------------------- */

static int sum_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    bool reduce[TG_MAX_DIMS];
    load_dims(n, reduce);
    grads[0] = spread(g, n->inputs[0], reduce);
    return 0;
}

tg_tensor *tg_sum(const tg_tensor *x, const int *dims, int ndims, bool keepdim)
{
    TG_CHECK_NULL(x);
    bool reduce[TG_MAX_DIMS];
    if (tg__check_float(__func__, x) < 0 || parse_dims(__func__, x, dims, ndims, reduce) < 0)
        return NULL;
    tg_tensor *out = drop_reduced(tg__sum_dims(x, reduce), reduce, keepdim);
    tg_node *node;
    out = tg__finish(out, TG_OP_SUM, sum_backward, 1, (const tg_tensor *[]){x}, &node);
    if (node)
        store_dims(node, reduce);
    return out;
}

static int mean_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    bool reduce[TG_MAX_DIMS];
    load_dims(n, reduce);
    int64_t count = reduced_count(n->inputs[0], reduce);
    grads[0] = tg_mul_scalar(spread(g, n->inputs[0], reduce), 1.0 / (double)count);
    return 0;
}

tg_tensor *tg_mean(const tg_tensor *x, const int *dims, int ndims, bool keepdim)
{
    TG_CHECK_NULL(x);
    bool reduce[TG_MAX_DIMS];
    if (tg__check_float(__func__, x) < 0 || parse_dims(__func__, x, dims, ndims, reduce) < 0)
        return NULL;
    tg_tensor *sum = tg__sum_dims(x, reduce);
    tg_tensor *out = NULL;
    if (sum) {
        int64_t count = reduced_count(x, reduce);
        out = tg__unary(sum, TG_UN_MUL_SCALAR, count ? 1.0 / (double)count : NAN);
        tg_release(sum);
    }
    out = drop_reduced(out, reduce, keepdim);
    tg_node *node;
    out = tg__finish(out, TG_OP_MEAN, mean_backward, 1, (const tg_tensor *[]){x}, &node);
    if (node)
        store_dims(node, reduce);
    return out;
}

/* ---- max along a dim ------------------------------------------------------- */

/* The gradient goes to the position of each maximum; zero elsewhere. */
static int max_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    const tg_tensor *x = n->inputs[0], *idx = n->saved[0]; /* idx: keepdim indices */
    int dim = (int)n->iargs[0];
    tg_tensor *out = tg__empty_like(x);
    tg_tensor *gc = tg__contiguous(g);
    if (!out || !gc) {
        tg_release(out);
        tg_release(gc);
        return -1;
    }
    tg__scatter_add_dim(out, gc, idx, dim);
    tg_release(gc);
    grads[0] = tg__ret(out);
    return 0;
}

int tg_max(const tg_tensor *x, int dim, bool keepdim, tg_tensor **values, tg_tensor **indices)
{
    if (values)
        *values = NULL;
    if (indices)
        *indices = NULL;
    TG_CHECK_NULL_STATUS(x);
    if (tg__check_float(__func__, x) < 0)
        return -1;
    if (x->ndim == 0) {
        tg__fail(TG_ERR_DIM, "tg_max: a 0-dim tensor has no dim %d", dim);
        return -1;
    }
    int d = tg__wrap_dim(__func__, dim, x->ndim);
    if (d < 0)
        return -1;
    if (x->shape[d] == 0) {
        tg__fail(TG_ERR_SHAPE, "tg_max: dim %d of %s is empty", dim, TG_SHAPE_STR(x));
        return -1;
    }
    tg_tensor *v = NULL, *ix = NULL;
    bool reduce[TG_MAX_DIMS] = {0};
    reduce[d] = true;
    if (tg__max_dim(x, d, &v, &ix) < 0) {
        tg_release(v);
        tg_release(ix);
        return -1;
    }
    tg_tensor *saved_ix = tg_retain(ix);
    v = drop_reduced(v, reduce, keepdim);
    ix = drop_reduced(ix, reduce, keepdim);
    tg_node *node;
    v = tg__finish(v, TG_OP_MAX, max_backward, 1, (const tg_tensor *[]){x}, &node);
    if (node) {
        node->iargs[0] = d;
        tg__save(node, 0, saved_ix);
    }
    tg_release(saved_ix);
    ix = tg__ret(ix);
    bool ok = v && ix;
    /* What the caller does not take is dropped here, unless a scope owns it. */
    if (values && ok)
        *values = v;
    else if (!tg_scope_depth())
        tg_release(v);
    if (indices && ok)
        *indices = ix;
    else if (!tg_scope_depth())
        tg_release(ix);
    return ok ? 0 : -1;
}
