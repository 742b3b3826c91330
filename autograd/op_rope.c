/* Rotary position embeddings: the table of cos and sin that tg_rope reads,
 * shared between calls and threads and counted so that a graph outlives
 * its owner's free, and the op itself, whose backward is the inverse
 * rotation.
 *
 * kernels: tensor/rope_kernels.c; fused: none; gradcheck:
 * tests/cases_rope.c rope_*; module: nn/llama.c (q and k of every layer);
 * tests: tests/test_rope.c. */
#include "graph.h"
#include "rope_kernels.h"

#include <stdatomic.h>
#include <stdlib.h>

struct tg_rope_table {
    /* The owner's reference, and one per graph node that will read the
     * table in its backward: atomic, since threads share a table. */
    atomic_int_fast64_t refs;
    int64_t max_positions, head_dim;
    double theta;
    tg_rope_pairing pairing;
    /* [max_positions, head_dim / 2] each, in the one block after this */
    double *cos64, *sin64;
    float *cos32, *sin32;
};

tg_rope_table *tg_rope_table_new(int64_t max_positions, int64_t head_dim, double theta,
                                 tg_rope_pairing pairing)
{
    const char *fn = "tg_rope_table_new";
    if (max_positions < 1)
        return tg__fail(TG_ERR_VALUE, "%s: max_positions must be at least 1, got %lld", fn,
                        (long long)max_positions);
    if (head_dim < 2 || head_dim % 2)
        return tg__fail(TG_ERR_VALUE, "%s: head_dim (hd) must be even and at least 2, "
                                      "got hd %lld", fn, (long long)head_dim);
    if (!(theta > 0) || !isfinite(theta))
        return tg__fail(TG_ERR_VALUE, "%s: theta must be positive and finite, got %g", fn,
                        theta);
    if (pairing != TG_ROPE_HALF && pairing != TG_ROPE_INTERLEAVED)
        return tg__fail(TG_ERR_VALUE, "%s: pairing must be TG_ROPE_HALF (0) or "
                                      "TG_ROPE_INTERLEAVED (1), got %d", fn, (int)pairing);
    int64_t half = head_dim / 2;
    /* cos and sin in double and in float: 24 bytes a pair and position */
    if (max_positions > (int64_t)((SIZE_MAX / 2 - sizeof(tg_rope_table)) / 24) / half)
        return tg__fail(TG_ERR_VALUE, "%s: a table of max_positions %lld by hd %lld is too "
                                      "large", fn, (long long)max_positions,
                        (long long)head_dim);
    size_t n = (size_t)(max_positions * half);
    tg_rope_table *t = malloc(sizeof *t + 24 * n);
    if (!t)
        return tg__fail(TG_ERR_NOMEM, "%s: out of memory for a table of max_positions %lld "
                                      "by hd %lld", fn, (long long)max_positions,
                        (long long)head_dim);
    *t = (tg_rope_table){.max_positions = max_positions, .head_dim = head_dim, .theta = theta,
                         .pairing = pairing};
    atomic_init(&t->refs, 1);
    t->cos64 = (double *)(t + 1);
    t->sin64 = t->cos64 + n;
    t->cos32 = (float *)(t->sin64 + n);
    t->sin32 = t->cos32 + n;
    tg__rope_fill_table(t->cos64, t->sin64, t->cos32, t->sin32, max_positions, half, theta);
    return t;
}

static void table_unref(tg_rope_table *t)
{
    if (t && atomic_fetch_sub(&t->refs, 1) == 1)
        free(t);
}

void tg_rope_table_free(tg_rope_table *t)
{
    table_unref(t);
}

/* For the tensor a node keeps: its last release drops the node's reference. */
static void release_pin(void *data, void *user)
{
    (void)data;
    table_unref(user);
}

/* A tensor over the table's cos that holds a reference to the table until
 * the graph node keeping it goes; NULL when out of memory. */
static tg_tensor *pin_table(tg_rope_table *t)
{
    atomic_fetch_add(&t->refs, 1);
    tg_tensor *pin = tg__tensor_over(t->cos64, t->max_positions * (t->head_dim / 2),
                                     release_pin, t);
    if (!pin)
        table_unref(t);
    return pin;
}

/* A new tensor of x's shape and dtype, its elements unset, laid out in x's
 * memory order when x is dense (a permutation of a contiguous tensor, as a
 * transposed view of a projection is), else contiguous: the following
 * reshape or attention then reads it without a copy. */
static tg_tensor *empty_in_order_of(const tg_tensor *x)
{
    int nd = x->ndim, order[TG_MAX_DIMS];
    for (int d = 0; d < nd; d++) { /* dims by falling stride, ties in dim order */
        int k = d;
        for (; k > 0 && x->stride[order[k - 1]] < x->stride[d]; k--)
            order[k] = order[k - 1];
        order[k] = d;
    }
    int64_t want = 1, shape[TG_MAX_DIMS] = {0}, stride[TG_MAX_DIMS] = {0};
    bool dense = true, identity = true;
    for (int k = nd - 1; k >= 0; k--) {
        int d = order[k];
        identity = identity && d == k;
        if (x->shape[d] != 1)
            dense = dense && x->stride[d] == want;
        want *= x->shape[d];
    }
    if (!dense || identity)
        return tg__empty_uninit_like(x);
    for (int k = 0; k < nd; k++)
        shape[k] = x->shape[order[k]];
    tg_tensor *buf = tg__empty_uninit(x->dtype, nd, shape);
    if (!buf)
        return NULL;
    tg__contiguous_strides(nd, shape, stride);
    int64_t mapped[TG_MAX_DIMS];
    for (int k = 0; k < nd; k++)
        mapped[order[k]] = stride[k];
    tg_tensor *out = tg__view(buf, nd, x->shape, mapped, 0);
    tg_release(buf);
    return out;
}

/* out (new, in x's memory order) = x rotated at positions pos0.. by t. */
static tg_tensor *rotate(const tg_tensor *x, const tg_rope_table *t, int64_t pos0, bool inverse)
{
    tg_tensor *out = empty_in_order_of(x);
    if (!out)
        return NULL;
    tg__rope_geometry g = {.ndim = x->ndim, .shape = x->shape, .xstride = x->stride,
                           .ostride = out->stride, .pos0 = pos0,
                           .interleaved = t->pairing == TG_ROPE_INTERLEAVED,
                           .inverse = inverse};
    bool f32 = x->dtype == TG_FLOAT32;
    tg__rope_rows(tg__ptr(out), tg__ptr(x), &g, f32 ? (const void *)t->cos32 : t->cos64,
                  f32 ? (const void *)t->sin32 : t->sin64, x->dtype);
    return out;
}

/* iargs[0]: the table, iargs[1]: pos0; saved[0]: the pin that keeps the
 * table alive. The gradient of a rotation is the inverse rotation. */
static int rope_grads(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    const tg_rope_table *t = (const tg_rope_table *)(intptr_t)n->iargs[0];
    grads[0] = tg__ret(rotate(g, t, n->iargs[1], true));
    return grads[0] ? 0 : -1;
}

static int rope_check(const tg_tensor *x, const tg_rope_table *t, int64_t pos0)
{
    const char *fn = "tg_rope";
    if (tg__check_float(fn, x) < 0)
        return -1;
    if (x->ndim < 2) {
        tg__fail(TG_ERR_SHAPE, "%s: x must be at least 2-D [..., T, hd], got %s", fn,
                 TG_SHAPE_STR(x));
        return -1;
    }
    int64_t T = x->shape[x->ndim - 2], hd = x->shape[x->ndim - 1];
    if (hd != t->head_dim) {
        tg__fail(TG_ERR_SHAPE, "%s: x %s has hd %lld but the table was made for hd %lld", fn,
                 TG_SHAPE_STR(x), (long long)hd, (long long)t->head_dim);
        return -1;
    }
    if (pos0 < 0 || pos0 > t->max_positions - T) {
        tg__fail(TG_ERR_VALUE, "%s: positions past the table: pos0 %lld and T %lld (x %s) "
                               "need 0 <= pos0 and pos0 + T <= max_positions %lld", fn,
                 (long long)pos0, (long long)T, TG_SHAPE_STR(x), (long long)t->max_positions);
        return -1;
    }
    return 0;
}

tg_tensor *tg_rope(const tg_tensor *x, const tg_rope_table *table, int64_t pos0)
{
    TG_CHECK_NULL(x);
    TG_CHECK_NULL(table);
    if (rope_check(x, table, pos0) < 0)
        return NULL;
    /* the pin is made before the op is recorded, so that running out of
     * memory for it fails the op rather than leave a graph without it */
    tg_rope_table *tab = (tg_rope_table *)table;
    bool grad = tg__needs_grad(1, &x);
    tg_tensor *pin = grad ? pin_table(tab) : NULL;
    tg_tensor *out = grad && !pin ? NULL : rotate(x, table, pos0, false);
    tg_node *node;
    out = tg__finish(out, TG_OP_ROPE, rope_grads, 1, &x, &node);
    if (node) {
        node->iargs[0] = (int64_t)(intptr_t)tab;
        node->iargs[1] = pos0;
        tg__save(node, 0, pin);
    }
    tg_release(pin);
    return out;
}
