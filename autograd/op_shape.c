/* View ops and joins: transpose, permute, reshape, narrow, expand,
 * squeeze/unsqueeze, concat and contiguous. Views share storage; backward
 * puts each gradient element back where its view element came from.
 *
 * kernels: none but the strided copy of tensor/tensor.c (tg__contiguous);
 * fused: none; gradcheck: tests/cases_shape.c; module: every one
 * (splitting and merging heads in nn/attention.c, nn/gpt.c, nn/llama.c). */
#include "graph.h"

#include <string.h>

/* The requested shape, formatted only when a message needs it. */
#define WANT_STR tg__shape_str((char[96]){0}, 96, ndim, shape)

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

/* ---- permute ---------------------------------------------------------------- */

static int permute_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    int inverse[TG_MAX_DIMS];
    for (int d = 0; d < g->ndim; d++)
        inverse[n->iargs[d]] = d; /* output dim d came from input dim perm[d] */
    grads[0] = tg_permute(g, inverse);
    return 0;
}

tg_tensor *tg_permute(const tg_tensor *x, const int *perm)
{
    TG_CHECK_NULL(x);
    if (x->ndim > 0 && !perm)
        return tg__fail(TG_ERR_NULL, "%s: perm is NULL for a %d-dim tensor", __func__, x->ndim);
    int p[TG_MAX_DIMS];
    bool used[TG_MAX_DIMS] = {0};
    int64_t shape[TG_MAX_DIMS], stride[TG_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) {
        if (perm[d] < -x->ndim || perm[d] >= x->ndim)
            return tg__fail(TG_ERR_DIM, "%s: perm[%d] = %d is out of range for a %d-dim tensor %s",
                            __func__, d, perm[d], x->ndim, TG_SHAPE_STR(x));
        p[d] = perm[d] < 0 ? perm[d] + x->ndim : perm[d];
        if (used[p[d]])
            return tg__fail(TG_ERR_DIM, "%s: dim %d appears twice in perm of a %d-dim tensor",
                            __func__, p[d], x->ndim);
        used[p[d]] = true;
        shape[d] = x->shape[p[d]];
        stride[d] = x->stride[p[d]];
    }
    tg_node *node;
    tg_tensor *out = tg__finish(tg__view(x, x->ndim, shape, stride, x->offset), TG_OP_PERMUTE,
                                permute_backward, 1, (const tg_tensor *[]){x}, &node);
    for (int d = 0; node && d < x->ndim; d++)
        node->iargs[d] = p[d];
    return out;
}

/* ---- reshape, unsqueeze, squeeze -------------------------------------------- */

/* Strides that show x's elements, in x's row-major order, with the given
 * shape (same element count, > 0). x's dims are first merged into chunks,
 * runs in which each dim steps exactly over the whole of the next; the new
 * dims must then split each chunk exactly, innermost first. False when some
 * new dim would straddle two chunks: then no view exists. */
static bool view_strides(const tg_tensor *x, int ndim, const int64_t *shape, int64_t *stride)
{
    int64_t csize[TG_MAX_DIMS], cstride[TG_MAX_DIMS];
    int nc = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (x->shape[d] == 1)
            continue; /* a size-1 dim never moves, whatever its stride */
        if (nc > 0 && cstride[nc - 1] == x->stride[d] * x->shape[d]) {
            csize[nc - 1] *= x->shape[d];
            cstride[nc - 1] = x->stride[d];
        } else {
            csize[nc] = x->shape[d];
            cstride[nc] = x->stride[d];
            nc++;
        }
    }
    int c = nc - 1;
    int64_t covered = 1; /* elements of chunk c taken by the new dims seen so far */
    for (int d = ndim - 1; d >= 0; d--) {
        if (shape[d] == 1) {
            stride[d] = d + 1 < ndim ? stride[d + 1] * shape[d + 1] : 1;
            continue;
        }
        if (c < 0)
            return false;
        stride[d] = cstride[c] * covered;
        covered *= shape[d];
        if (covered > csize[c] || csize[c] % covered != 0)
            return false;
        if (covered == csize[c]) {
            c--;
            covered = 1;
        }
    }
    return c < 0;
}

/* Resolves a -1 in shape (ndim entries) against numel into out; -1 and an
 * error naming fn otherwise. */
static int infer_shape(const char *fn, const tg_tensor *x, int ndim, const int64_t *shape,
                       int64_t *out)
{
    if (ndim < 0 || ndim > TG_MAX_DIMS) {
        tg__fail(TG_ERR_SHAPE, "%s: ndim %d is outside [0, %d]", fn, ndim, TG_MAX_DIMS);
        return -1;
    }
    if (ndim > 0 && !shape) {
        tg__fail(TG_ERR_NULL, "%s: shape is NULL for ndim %d", fn, ndim);
        return -1;
    }
    int64_t numel = tg__numel(x->ndim, x->shape), known = 1;
    int infer = -1;
    bool overflow = false, has_zero = false;
    for (int i = 0; i < ndim; i++)
        has_zero |= shape[i] == 0;
    for (int i = 0; i < ndim; i++) {
        out[i] = shape[i];
        if (shape[i] == -1) {
            if (infer >= 0) {
                tg__fail(TG_ERR_SHAPE, "%s: more than one -1 in %s", fn, WANT_STR);
                return -1;
            }
            infer = i;
        } else if (shape[i] < 0) {
            tg__fail(TG_ERR_SHAPE, "%s: negative size %lld in dim %d of %s", fn,
                     (long long)shape[i], i, WANT_STR);
            return -1;
        } else if (has_zero) {
            known = 0;
        } else if (known > INT64_MAX / shape[i]) {
            overflow = true; /* more elements than x can hold: a mismatch */
        } else {
            known *= shape[i];
        }
    }
    if (infer >= 0 && known == 0) {
        tg__fail(TG_ERR_SHAPE, "%s: the -1 in %s is ambiguous: the other sizes hold 0 elements",
                 fn, WANT_STR);
        return -1;
    }
    if (infer >= 0 && !overflow && numel % known == 0)
        out[infer] = numel / known;
    else if (infer >= 0 || overflow || known != numel) {
        tg__fail(TG_ERR_SHAPE, "%s: cannot reshape %s (%lld elements) into %s", fn,
                 TG_SHAPE_STR(x), (long long)numel, WANT_STR);
        return -1;
    }
    return 0;
}

static int reshape_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    grads[0] = tg_reshape(g, n->inputs[0]->ndim, n->inputs[0]->shape);
    return 0;
}

/* x seen with a resolved shape: a view when possible, else a view of a
 * contiguous copy. Recorded as RESHAPE whichever it is. */
static tg_tensor *reshape_to(const tg_tensor *x, int ndim, const int64_t *shape)
{
    int64_t stride[TG_MAX_DIMS];
    tg_tensor *out;
    if (tg__numel(ndim, shape) == 0 || view_strides(x, ndim, shape, stride)) {
        if (tg__numel(ndim, shape) == 0)
            tg__contiguous_strides(ndim, shape, stride);
        out = tg__view(x, ndim, shape, stride, x->offset);
    } else {
        tg_tensor *copy = tg__contiguous(x);
        out = NULL;
        if (copy) {
            tg__contiguous_strides(ndim, shape, stride);
            out = tg__view(copy, ndim, shape, stride, copy->offset);
            tg_release(copy);
        }
    }
    return tg__finish(out, TG_OP_RESHAPE, reshape_backward, 1, (const tg_tensor *[]){x}, NULL);
}

tg_tensor *tg_reshape(const tg_tensor *x, int ndim, const int64_t *shape)
{
    TG_CHECK_NULL(x);
    int64_t resolved[TG_MAX_DIMS];
    if (infer_shape(__func__, x, ndim, shape, resolved) < 0)
        return NULL;
    return reshape_to(x, ndim, resolved);
}

tg_tensor *tg_unsqueeze(const tg_tensor *x, int dim)
{
    TG_CHECK_NULL(x);
    if (dim < -x->ndim - 1 || dim > x->ndim)
        return tg__fail(TG_ERR_DIM, "%s: dim %d is outside [%d, %d] for a %d-dim tensor",
                        __func__, dim, -x->ndim - 1, x->ndim, x->ndim);
    if (x->ndim == TG_MAX_DIMS)
        return tg__fail(TG_ERR_SHAPE, "%s: %s already has the most dims allowed (%d)", __func__,
                        TG_SHAPE_STR(x), TG_MAX_DIMS);
    int d = dim < 0 ? dim + x->ndim + 1 : dim;
    int64_t shape[TG_MAX_DIMS];
    memcpy(shape, x->shape, (size_t)d * sizeof *shape);
    shape[d] = 1;
    memcpy(shape + d + 1, x->shape + d, (size_t)(x->ndim - d) * sizeof *shape);
    return reshape_to(x, x->ndim + 1, shape);
}

tg_tensor *tg_squeeze(const tg_tensor *x, int dim)
{
    TG_CHECK_NULL(x);
    if (x->ndim == 0)
        return tg__fail(TG_ERR_DIM, "%s: a 0-dim tensor has no dim %d to remove", __func__, dim);
    int d = tg__wrap_dim(__func__, dim, x->ndim);
    if (d < 0)
        return NULL;
    if (x->shape[d] != 1)
        return tg__fail(TG_ERR_SHAPE, "%s: dim %d of %s has size %lld, not 1", __func__, dim,
                        TG_SHAPE_STR(x), (long long)x->shape[d]);
    int64_t shape[TG_MAX_DIMS];
    memcpy(shape, x->shape, (size_t)d * sizeof *shape);
    memcpy(shape + d, x->shape + d + 1, (size_t)(x->ndim - d - 1) * sizeof *shape);
    return reshape_to(x, x->ndim - 1, shape);
}

/* ---- narrow ------------------------------------------------------------------ */

/* The gradient of a slice: g added into its slice of the input's gradient,
 * in place (q, k and v narrowed from one projection share one buffer). */
static int narrow_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    int d = (int)n->iargs[0];
    tg_tensor *full = tg__grad_target(n, 0);
    tg_tensor *slice = full ? tg__view(full, g->ndim, g->shape, full->stride,
                                       full->offset + n->iargs[1] * full->stride[d])
                            : NULL;
    if (!slice)
        return -1;
    tg__add_into(slice, g);
    tg_release(slice);
    grads[0] = TG_GRAD_ADDED;
    return 0;
}

tg_tensor *tg_narrow(const tg_tensor *x, int dim, int64_t start, int64_t length)
{
    TG_CHECK_NULL(x);
    if (x->ndim == 0)
        return tg__fail(TG_ERR_DIM, "%s: a 0-dim tensor has no dim %d to narrow", __func__, dim);
    int d = tg__wrap_dim(__func__, dim, x->ndim);
    if (d < 0)
        return NULL;
    int64_t size = x->shape[d];
    if (start < 0 || start > size)
        return tg__fail(TG_ERR_INDEX, "%s: start %lld is outside [0, %lld] for dim %d of %s",
                        __func__, (long long)start, (long long)size, dim, TG_SHAPE_STR(x));
    if (length < 0 || length > size - start)
        return tg__fail(TG_ERR_INDEX, "%s: length %lld from start %lld overruns dim %d of %s",
                        __func__, (long long)length, (long long)start, dim, TG_SHAPE_STR(x));
    int64_t shape[TG_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[d] = length;
    tg_node *node;
    tg_tensor *out = tg__finish(tg__view(x, x->ndim, shape, x->stride,
                                         x->offset + start * x->stride[d]),
                                TG_OP_NARROW, narrow_backward, 1, (const tg_tensor *[]){x}, &node);
    if (node) {
        node->iargs[0] = d;
        node->iargs[1] = start;
    }
    return out;
}

/* ---- expand --------------------------------------------------------------------- */

/* g has the expanded shape; the engine sums it back to the input's. */
static int pass_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    (void)n;
    grads[0] = tg__ret(tg_retain(g));
    return 0;
}

tg_tensor *tg_expand(const tg_tensor *x, int ndim, const int64_t *shape)
{
    TG_CHECK_NULL(x);
    if (ndim < x->ndim || ndim > TG_MAX_DIMS)
        return tg__fail(TG_ERR_SHAPE, "%s: cannot expand %s to %d dims (need %d to %d)",
                        __func__, TG_SHAPE_STR(x), ndim, x->ndim, TG_MAX_DIMS);
    if (ndim > 0 && !shape)
        return tg__fail(TG_ERR_NULL, "%s: shape is NULL for ndim %d", __func__, ndim);
    int64_t out_shape[TG_MAX_DIMS], stride[TG_MAX_DIMS];
    int lead = ndim - x->ndim;
    for (int d = 0; d < ndim; d++) {
        int xd = d - lead; /* x's matching dim, < 0 for a new leading one */
        int64_t have = xd >= 0 ? x->shape[xd] : 1;
        if (shape[d] < -1 || (shape[d] == -1 && xd < 0))
            return tg__fail(TG_ERR_SHAPE, "%s: size %lld in dim %d of %s is not allowed for %s",
                            __func__, (long long)shape[d], d, WANT_STR, TG_SHAPE_STR(x));
        out_shape[d] = shape[d] == -1 ? have : shape[d];
        if (out_shape[d] != have && have != 1)
            return tg__fail(TG_ERR_SHAPE, "%s: cannot expand %s to %s: dim %d has size %lld, "
                            "only size-1 dims can grow", __func__, TG_SHAPE_STR(x), WANT_STR, d,
                            (long long)have);
        /* a dim that grows from 1 repeats its one element: stride 0 */
        stride[d] = xd >= 0 && out_shape[d] == have ? x->stride[xd] : 0;
    }
    if (tg__check_shape(__func__, ndim, out_shape) < 0)
        return NULL;
    return tg__finish(tg__view(x, ndim, out_shape, stride, x->offset), TG_OP_EXPAND,
                      pass_backward, 1, (const tg_tensor *[]){x}, NULL);
}

/* ---- concat --------------------------------------------------------------------- */

static int concat_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    int d = (int)n->iargs[0];
    int64_t start = 0;
    for (int i = 0; i < n->n_inputs; i++) {
        int64_t size = n->inputs[i]->shape[d];
        if (n->needs[i])
            grads[i] = tg_narrow(g, d, start, size);
        start += size;
    }
    return 0;
}

/* Checks that xs[0..n) are non-NULL and fit xs[0] for a concat along dim;
 * writes the wrapped dim and the output shape. */
static int concat_shape(const tg_tensor *const *xs, int n, int dim, int *d_out, int64_t *shape)
{
    const tg_tensor *a = xs[0];
    for (int i = 0; i < n; i++) {
        const tg_tensor *b = xs[i];
        if (!b) {
            tg__fail(TG_ERR_NULL, "tg_concat: xs[%d] is NULL", i);
            return -1;
        }
        char what[32];
        snprintf(what, sizeof what, "xs[%d] was", i);
        if (TG__CHECK_ALIVE("tg_concat", what, b) < 0)
            return -1;
        if (b->dtype != a->dtype) {
            tg__fail(TG_ERR_DTYPE, "tg_concat: xs[%d] is %s but xs[0] is %s", i,
                     tg_dtype_name(b->dtype), tg_dtype_name(a->dtype));
            return -1;
        }
        if (b->ndim != a->ndim) {
            tg__fail(TG_ERR_SHAPE, "tg_concat: xs[%d] %s has %d dims but xs[0] %s has %d", i,
                     TG_SHAPE_STR(b), b->ndim, TG_SHAPE_STR(a), a->ndim);
            return -1;
        }
    }
    if (a->ndim == 0) {
        tg__fail(TG_ERR_DIM, "tg_concat: 0-dim tensors have no dim %d to join along", dim);
        return -1;
    }
    int d = tg__wrap_dim("tg_concat", dim, a->ndim);
    if (d < 0)
        return -1;
    memcpy(shape, a->shape, sizeof a->shape);
    for (int i = 1; i < n; i++) {
        const tg_tensor *b = xs[i];
        for (int k = 0; k < a->ndim; k++)
            if (k != d && b->shape[k] != a->shape[k]) {
                tg__fail(TG_ERR_SHAPE, "tg_concat: xs[%d] %s differs from xs[0] %s in dim %d "
                         "(joining along dim %d)", i, TG_SHAPE_STR(b), TG_SHAPE_STR(a), k, d);
                return -1;
            }
        shape[d] += b->shape[d];
    }
    *d_out = d;
    return 0;
}

tg_tensor *tg_concat(const tg_tensor *const *xs, int n, int dim)
{
    TG_CHECK_NULL(xs);
    if (n < 1)
        return tg__fail(TG_ERR_VALUE, "%s: n is %d, need at least one tensor", __func__, n);
    int d;
    int64_t shape[TG_MAX_DIMS];
    if (concat_shape(xs, n, dim, &d, shape) < 0)
        return NULL;
    tg_tensor *out = tg__empty_uninit(xs[0]->dtype, xs[0]->ndim, shape); /* the parts tile it */
    int64_t start = 0;
    for (int i = 0; out && i < n; i++) {
        tg_tensor *part = tg__view(out, out->ndim, xs[i]->shape, out->stride,
                                   out->offset + start * out->stride[d]);
        if (!part) {
            tg_release(out);
            return NULL;
        }
        tg__copy(part, xs[i]);
        tg_release(part);
        start += xs[i]->shape[d];
    }
    tg_node *node;
    out = tg__finish(out, TG_OP_CONCAT, concat_backward, n, xs, &node);
    if (node)
        node->iargs[0] = d;
    return out;
}

/* ---- contiguous ------------------------------------------------------------------- */

tg_tensor *tg_contiguous(const tg_tensor *x)
{
    TG_CHECK_NULL(x);
    if (tg_is_contiguous(x))
        return tg__ret(tg_retain(x));
    return tg__finish(tg__contiguous(x), TG_OP_CONTIGUOUS, pass_backward, 1,
                      (const tg_tensor *[]){x}, NULL);
}
