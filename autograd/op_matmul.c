/* tg_matmul: torch.matmul's shape rules (1-D operands, broadcast batch
 * dims), a batch loop of GEMM calls that reads transposed operands in place,
 * and the backward dA = dC @ B^T, dB = A^T @ dC.
 *
 * kernels: tensor/matmul_kernels.c over tensor/gemm.c; fused: with a
 * bias as tg_affine (op_affine.c); gradcheck: tests/cases_matmul.c
 * matmul_*; module: nn/sdpa.c (the unfused attention). */
#include "graph.h"
#include "matmul_kernels.h"
#include "saved_bf16.h"

#include <string.h>

static int mm_fail_shape(const char *what, const tg_tensor *a, const tg_tensor *b)
{
    tg__fail(TG_ERR_SHAPE, "tg_matmul: %s: %s @ %s", what, TG_SHAPE_STR(a), TG_SHAPE_STR(b));
    return -1;
}

/* Validates a @ b and works out s. 0, or -1 with the error recorded. */
static int mm_check(const tg_tensor *a, const tg_tensor *b, tg__mm_shape *s)
{
    if (!a || !b) {
        tg__fail(TG_ERR_NULL, "tg_matmul: %s is NULL", a ? "b" : "a");
        return -1;
    }
    if (tg__check_float("tg_matmul", a) < 0 || tg__check_float("tg_matmul", b) < 0)
        return -1;
    if (a->dtype != b->dtype) {
        tg__fail(TG_ERR_DTYPE, "tg_matmul: dtypes differ: %s @ %s (convert one with tg_to_dtype)",
                 tg_dtype_name(a->dtype), tg_dtype_name(b->dtype));
        return -1;
    }
    if (a->ndim == 0 || b->ndim == 0)
        return mm_fail_shape("operands need at least 1 dim", a, b);
    s->k = a->shape[a->ndim - 1];
    if (s->k != b->shape[b->ndim == 1 ? 0 : b->ndim - 2])
        return mm_fail_shape("inner dimensions differ", a, b);
    s->m = a->ndim == 1 ? 1 : a->shape[a->ndim - 2];
    s->n = b->ndim == 1 ? 1 : b->shape[b->ndim - 1];
    /* Batch dims align from the right, as in broadcasting. */
    int na = a->ndim > 2 ? a->ndim - 2 : 0, nb = b->ndim > 2 ? b->ndim - 2 : 0;
    s->nb = na > nb ? na : nb;
    for (int d = 0; d < s->nb; d++) {
        int da = d - (s->nb - na), db = d - (s->nb - nb);
        int64_t x = da >= 0 ? a->shape[da] : 1, y = db >= 0 ? b->shape[db] : 1;
        if (x != y && x != 1 && y != 1)
            return mm_fail_shape("batch dimensions do not broadcast", a, b);
        s->batch[d] = x == 1 ? y : x;
    }
    s->out_ndim = s->nb;
    memcpy(s->out_shape, s->batch, sizeof s->out_shape);
    if (a->ndim > 1)
        s->out_shape[s->out_ndim++] = s->m;
    if (b->ndim > 1)
        s->out_shape[s->out_ndim++] = s->n;
    return 0;
}
/* ---- backward ------------------------------------------------------------------ */

/* t viewed as [its first nb dims..., rows, cols], with a size-1 rows or cols
 * dim inserted where t has none: a 1-D operand, or the output of a product
 * with one. Owned by the backward scope. */
static tg_tensor *as_matrices(const tg_tensor *t, int nb, bool has_rows, bool has_cols)
{
    int64_t shape[TG_MAX_DIMS], stride[TG_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    memcpy(stride, t->stride, sizeof stride);
    int d = nb;
    shape[nb] = has_rows ? t->shape[d] : 1;
    stride[nb] = has_rows ? t->stride[d++] : 0;
    shape[nb + 1] = has_cols ? t->shape[d] : 1;
    stride[nb + 1] = has_cols ? t->stride[d] : 0;
    return tg__ret(tg__view(t, nb + 2, shape, stride, t->offset));
}

/* t without its size-1 dim d (a view owned by the backward scope): puts
 * back the dim as_matrices inserted. NULL passes through. */
static tg_tensor *drop_dim(tg_tensor *t, int d)
{
    if (!t)
        return NULL;
    int64_t shape[TG_MAX_DIMS], stride[TG_MAX_DIMS];
    for (int i = 0, j = 0; i < t->ndim; i++)
        if (i != d) {
            shape[j] = t->shape[i];
            stride[j++] = t->stride[i];
        }
    return tg__ret(tg__view(t, t->ndim - 1, shape, stride, t->offset));
}

/* dB for a b with no batch dims: the sum over the batch of A_i^T @ dC_i is
 * one product of the stacks flattened, [batch*m, k]^T @ [batch*m, n], which
 * spares the [batch..., k, n] intermediate the engine would sum. */
static tg_tensor *stacked_weight_grad(const tg_tensor *am, const tg_tensor *gm)
{
    tg_tensor *ac = tg__ret(tg__contiguous(am)), *gc = tg__ret(tg__contiguous(gm));
    if (!ac || !gc)
        return NULL;
    int64_t k = ac->shape[ac->ndim - 1], n = gc->shape[gc->ndim - 1];
    int64_t rows = tg__numel(gc->ndim - 1, gc->shape);
    tg_tensor *a2 = tg__ret(tg__view(ac, 2, (int64_t[]){rows, k}, (int64_t[]){k, 1}, ac->offset));
    tg_tensor *g2 = tg__ret(tg__view(gc, 2, (int64_t[]){rows, n}, (int64_t[]){n, 1}, gc->offset));
    return tg_matmul(tg_transpose(a2, 0, 1), g2);
}

/* In matrix form [batch..., m, k] @ [batch..., k, n]: dA = dC @ B^T and
 * dB = A^T @ dC, each with the output's batch dims (the engine sums them
 * back to the operand's); a 1-D operand's added dim is dropped again. */
static int matmul_backward(tg_node *node, const tg_tensor *g, tg_tensor **grads)
{
    /* Each operand is read only for the other's gradient, a product at the
     * forward's precision: in bfloat16 in saved[0] and saved[1] when
     * tg__save_bf16_operand kept them so. */
    const tg_tensor *a = node->needs[1] ? tg__ret(tg__saved_operand(node, 0, 0)) : NULL;
    const tg_tensor *b = node->needs[0] ? tg__ret(tg__saved_operand(node, 1, 1)) : NULL;
    bool a_vec = node->iargs[0], b_vec = node->iargs[1], b_2d = node->inputs[1]->ndim <= 2;
    int nb = node->out_ndim - !a_vec - !b_vec;
    tg_tensor *gm = as_matrices(g, nb, !a_vec, !b_vec); /* [.., m, n] */
    if (!gm || (node->needs[1] && !a) || (node->needs[0] && !b))
        return -1;
    if (node->needs[0]) {
        tg_tensor *bm = as_matrices(b, b_vec ? 0 : b->ndim - 2, true, !b_vec); /* [.., k, n] */
        tg_tensor *ga = tg_matmul(gm, tg_transpose(bm, -2, -1)); /* [batch.., m, k] */
        grads[0] = a_vec ? drop_dim(ga, ga ? ga->ndim - 2 : 0) : ga;
        if (!grads[0])
            return -1;
    }
    if (node->needs[1]) {
        tg_tensor *am = as_matrices(a, a_vec ? 0 : a->ndim - 2, !a_vec, true); /* [.., m, k] */
        tg_tensor *gb = b_2d && nb > 0 ? stacked_weight_grad(am, gm)
                                      : tg_matmul(tg_transpose(am, -2, -1), gm);
        grads[1] = b_vec ? drop_dim(gb, gb ? gb->ndim - 1 : 0) : gb; /* [batch.., k, n] */
        if (!grads[1])
            return -1;
    }
    return 0;
}

tg_tensor *tg_matmul(const tg_tensor *a, const tg_tensor *b)
{
    tg__mm_shape s;
    if (mm_check(a, b, &s) < 0)
        return NULL;
    /* GEMM writes every element (beta 0); only k == 0 needs the zeros. */
    tg_tensor *out = s.k > 0 ? tg__empty_uninit(a->dtype, s.out_ndim, s.out_shape)
                             : tg__empty(a->dtype, s.out_ndim, s.out_shape);
    if (out && tg__numel(s.out_ndim, s.out_shape) > 0 && s.k > 0 &&
        tg__matmul_forward(a, b, &s, out) < 0) {
        tg_release(out);
        return NULL;
    }
    tg_node *node;
    out = tg__finish(out, TG_OP_MATMUL, matmul_backward, 2, (const tg_tensor *[]){a, b}, &node);
    if (node) {
        node->iargs[0] = a->ndim == 1;
        node->iargs[1] = b->ndim == 1;
    }
    tg__save_bf16_operand(node, 0, 0);
    tg__save_bf16_operand(node, 1, 1);
    return out;
}
