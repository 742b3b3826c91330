/* Embedding lookup: rows of a weight table picked by int64 indices. The
 * backward scatters the output gradient back into the picked rows, adding
 * where an index repeats.
 *
 * kernels: tensor/index_kernels.c; fused: none; gradcheck:
 * tests/cases_nn.c embedding_*; module: nn/embedding.c
 * tg_embedding_module (the GPT's token and position tables), nn/llama.c. */
#include "graph.h"
#include "index_kernels.h"

#include <string.h>

static int check_args(const tg_tensor *weight, const tg_tensor *indices)
{
    if (tg__check_float("tg_embedding", weight) < 0)
        return -1;
    if (weight->ndim != 2) {
        tg__fail(TG_ERR_SHAPE, "tg_embedding: weight must be 2-D [num, dim], got %s",
                 TG_SHAPE_STR(weight));
        return -1;
    }
    if (indices->dtype != TG_INT64) {
        tg__fail(TG_ERR_DTYPE, "tg_embedding: indices must be int64, got %s",
                 tg_dtype_name(indices->dtype));
        return -1;
    }
    if (indices->ndim + 1 > TG_MAX_DIMS) {
        tg__fail(TG_ERR_SHAPE, "tg_embedding: indices %s leave no room for the embedding "
                               "dim (at most %d dims)", TG_SHAPE_STR(indices), TG_MAX_DIMS);
        return -1;
    }
    return 0;
}

/* Fails unless every index of idx (contiguous, n of them) is in [0, num). */
static int check_range(const int64_t *idx, int64_t n, int64_t num)
{
    for (int64_t i = 0; i < n; i++)
        if (idx[i] < 0 || idx[i] >= num) {
            tg__fail(TG_ERR_INDEX, "tg_embedding: index %lld (at position %lld) is out of "
                                   "range for num %lld rows", (long long)idx[i],
                     (long long)i, (long long)num);
            return -1;
        }
    return 0;
}

static int embedding_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    const tg_tensor *weight = n->inputs[0];
    const tg_tensor *idx = n->saved[0]; /* the forward's checked copy */
    tg_tensor *gc = tg__contiguous(g);
    tg_tensor *dw = tg__empty(weight->dtype, 2, weight->shape); /* zero-filled */
    int rc = -1;
    if (gc && dw) {
        tg__scatter_add_rows(dw, gc, tg__ptr(idx), tg__numel(idx->ndim, idx->shape));
        grads[0] = tg__ret(tg_retain(dw));
        rc = 0;
    }
    tg_release(gc);
    tg_release(dw);
    return rc;
}

tg_tensor *tg_embedding(const tg_tensor *weight, const tg_tensor *indices)
{
    TG_CHECK_NULL(weight);
    TG_CHECK_NULL(indices);
    if (check_args(weight, indices) < 0)
        return NULL;
    tg_tensor *ic = tg__contiguous(indices);
    if (!ic)
        return NULL;
    int64_t n = tg__numel(ic->ndim, ic->shape);
    if (check_range(tg__ptr(ic), n, weight->shape[0]) < 0) {
        tg_release(ic);
        return NULL;
    }
    int64_t shape[TG_MAX_DIMS]; /* indices.shape + [dim] */
    memcpy(shape, indices->shape, (size_t)indices->ndim * sizeof shape[0]);
    shape[indices->ndim] = weight->shape[1];
    /* backward scatters by the indices: it gets a private copy, so that
     * writing into indices later cannot send it out of bounds */
    const tg_tensor *inputs[1] = {weight};
    bool grad = tg__needs_grad(1, inputs);
    tg_tensor *kept = !grad ? NULL : ic == indices ? tg__convert(ic, TG_INT64) : tg_retain(ic);
    tg_tensor *out = grad && !kept ? NULL : tg__empty_uninit(weight->dtype, indices->ndim + 1, shape);
    if (out) {
        tg__gather_rows(out, weight, tg__ptr(ic), n);
    }
    tg_release(ic);
    tg_node *node;
    out = tg__finish(out, TG_OP_EMBEDDING, embedding_backward, 1, inputs, &node);
    if (node)
        tg__save(node, 0, kept);
    tg_release(kept);
    return out;
}
