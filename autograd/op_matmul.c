/* tg_matmul: torch.matmul's shape rules (1-D operands, broadcast batch
 * dims), a batch loop of GEMM calls that reads transposed operands in place,
 * and the backward dA = dC @ B^T, dB = A^T @ dC. */
#include "gemm.h"
#include "graph.h"

#include <string.h>

/* Below this many multiply-adds per matrix, the batch loop runs its GEMMs
 * on separate threads instead of leaving threads to each GEMM. */
#define MM_SMALL (64.0 * 64.0 * 64.0)
/* Below this much work in all, a thread team costs more than it saves. */
#define MM_BATCH_MIN (1 << 20)

/* The product's geometry: [batch..., m, k] @ [batch..., k, n], with the
 * output [batch..., m, n] less m when a is 1-D and less n when b is. */
typedef struct {
    int nb; /* broadcast batch dims */
    int64_t batch[TG_MAX_DIMS];
    int64_t m, k, n;
    int out_ndim;
    int64_t out_shape[TG_MAX_DIMS];
} mm_shape;

/* An operand as a stack of matrices that GEMM can read. */
typedef struct {
    const char *data;
    int64_t bstride[TG_MAX_DIMS]; /* per output batch dim; 0 where broadcast */
    bool trans;                   /* stored column-major: a transposed matrix */
    int64_t ld;
} mm_operand;

static int mm_fail_shape(const char *what, const tg_tensor *a, const tg_tensor *b)
{
    tg__fail(TG_ERR_SHAPE, "tg_matmul: %s: %s @ %s", what, TG_SHAPE_STR(a), TG_SHAPE_STR(b));
    return -1;
}

/* Validates a @ b and works out s. 0, or -1 with the error recorded. */
static int mm_check(const tg_tensor *a, const tg_tensor *b, mm_shape *s)
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

/* How GEMM can read a rows x cols matrix whose element (i, j) is at
 * i * rs + j * cs: row-major (cs == 1) or as the transpose of a row-major
 * matrix (rs == 1, e.g. a tg_transpose of a contiguous one), with a leading
 * dimension BLAS accepts. The stride of a size-1 dim never matters. False
 * when neither fits (stride-0 or stepped views): the caller copies. */
static bool gemm_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, bool *trans,
                        int64_t *ld)
{
    int64_t ld_n = rows == 1 ? (cols > 1 ? cols : 1) : rs;
    if ((cols == 1 || cs == 1) && ld_n >= cols && ld_n >= 1) {
        *trans = false;
        *ld = ld_n;
        return true;
    }
    int64_t ld_t = cols == 1 ? (rows > 1 ? rows : 1) : cs;
    if ((rows == 1 || rs == 1) && ld_t >= rows && ld_t >= 1) {
        *trans = true;
        *ld = ld_t;
        return true;
    }
    return false;
}

/* Sets o up for operand t (the left one when left) of the product s. */
static bool mm_operand_init(mm_operand *o, const tg_tensor *t, bool left, const mm_shape *s)
{
    int nt = t->ndim > 2 ? t->ndim - 2 : 0;
    for (int d = 0; d < s->nb; d++) {
        int dt = d - (s->nb - nt);
        o->bstride[d] = dt >= 0 && t->shape[dt] != 1 ? t->stride[dt] : 0;
    }
    o->data = tg__ptr(t);
    if (t->ndim == 1) /* a row [1,k] on the left, a column [k,1] on the right */
        return left ? gemm_layout(1, s->k, 0, t->stride[0], &o->trans, &o->ld)
                    : gemm_layout(s->k, 1, t->stride[0], 0, &o->trans, &o->ld);
    int r = t->ndim - 2, c = t->ndim - 1;
    return gemm_layout(t->shape[r], t->shape[c], t->stride[r], t->stride[c], &o->trans, &o->ld);
}

/* True when t's batch dims and rows are one run of rows ld apart, so the
 * whole stack is a single tall row-major matrix: [B,T,C] @ [C,D] becomes
 * one [B*T,C] @ [C,D] GEMM. */
static bool rows_collapse(const tg_tensor *t, int64_t ld)
{
    int64_t step = ld * t->shape[t->ndim - 2];
    for (int d = t->ndim - 3; d >= 0; d--) {
        if (t->shape[d] != 1 && t->stride[d] != step)
            return false;
        step *= t->shape[d];
    }
    return true;
}

/* Product i of the batch into its slice of out (rows m, columns n). */
static int product(tg_tensor *out, const mm_operand *oa, const mm_operand *ob, const mm_shape *s,
                   int64_t i, int64_t m, int64_t n, int64_t k, bool builtin)
{
    size_t es = tg_dtype_size(out->dtype);
    int64_t off_a = 0, off_b = 0, rest = i;
    for (int d = s->nb - 1; d >= 0 && i > 0; d--) {
        int64_t idx = rest % s->batch[d];
        rest /= s->batch[d];
        off_a += idx * oa->bstride[d];
        off_b += idx * ob->bstride[d];
    }
    return tg__gemm(out->dtype, builtin, oa->trans, ob->trans, m, n, k, 1.0,
                    oa->data + off_a * (int64_t)es, oa->ld, ob->data + off_b * (int64_t)es, ob->ld,
                    0.0, (char *)tg__ptr(out) + i * m * n * (int64_t)es, n);
}

/* out (contiguous, s.out_shape) = a @ b, for m, n, k > 0. Operands with no
 * GEMM layout are copied to contiguous first. 0, or -1 on failure. */
static int mm_forward(const tg_tensor *a, const tg_tensor *b, const mm_shape *s, tg_tensor *out)
{
    mm_operand oa, ob;
    tg_tensor *ca = NULL, *cb = NULL;
    if (!mm_operand_init(&oa, a, true, s)) {
        if (!(ca = tg__contiguous(a)))
            return -1;
        a = ca; /* contiguous: always row-major */
        mm_operand_init(&oa, a, true, s);
    }
    if (!mm_operand_init(&ob, b, false, s)) {
        if (!(cb = tg__contiguous(b))) {
            tg_release(ca);
            return -1;
        }
        b = cb;
        mm_operand_init(&ob, b, false, s);
    }
    int64_t count = tg__numel(s->nb, s->batch), m = s->m, n = s->n, k = s->k;
    if (count > 1 && b->ndim <= 2 && a->ndim > 2 && !oa.trans && rows_collapse(a, oa.ld)) {
        m *= count;
        count = 1;
    }
    int failed = 0;
    /* A stack of small products is split over threads, each running the
     * built-in kernel; a large product is threaded inside GEMM instead. */
    double work = (double)m * (double)n * (double)k;
    bool batch_parallel = count > 1 && work < MM_SMALL && work * (double)count >= MM_BATCH_MIN;
    /* The branch in C, not an OpenMP if clause: a region that the clause
     * turns off still costs a runtime call and an allocation per matmul. */
    if (batch_parallel) {
#pragma omp parallel for reduction(+ : failed) schedule(static)
        for (int64_t i = 0; i < count; i++)
            failed += product(out, &oa, &ob, s, i, m, n, k, true) < 0;
    } else {
        for (int64_t i = 0; i < count; i++)
            failed += product(out, &oa, &ob, s, i, m, n, k, false) < 0;
    }
    tg_release(ca);
    tg_release(cb);
    if (failed)
        tg__fail(TG_ERR_NOMEM, "tg_matmul: out of memory for GEMM scratch space");
    return failed ? -1 : 0;
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
    const tg_tensor *a = node->inputs[0], *b = node->inputs[1];
    bool a_vec = node->iargs[0], b_vec = node->iargs[1];
    int nb = node->out_ndim - !a_vec - !b_vec;
    tg_tensor *gm = as_matrices(g, nb, !a_vec, !b_vec);                    /* [.., m, n] */
    tg_tensor *am = as_matrices(a, a_vec ? 0 : a->ndim - 2, !a_vec, true); /* [.., m, k] */
    tg_tensor *bm = as_matrices(b, b_vec ? 0 : b->ndim - 2, true, !b_vec); /* [.., k, n] */
    if (!gm || !am || !bm)
        return -1;
    if (node->needs[0]) {
        tg_tensor *ga = tg_matmul(gm, tg_transpose(bm, -2, -1)); /* [batch.., m, k] */
        grads[0] = a_vec ? drop_dim(ga, ga ? ga->ndim - 2 : 0) : ga;
        if (!grads[0])
            return -1;
    }
    if (node->needs[1]) {
        tg_tensor *gb = b->ndim <= 2 && nb > 0 ? stacked_weight_grad(am, gm)
                                               : tg_matmul(tg_transpose(am, -2, -1), gm);
        grads[1] = b_vec ? drop_dim(gb, gb ? gb->ndim - 1 : 0) : gb; /* [batch.., k, n] */
        if (!grads[1])
            return -1;
    }
    return 0;
}

tg_tensor *tg_matmul(const tg_tensor *a, const tg_tensor *b)
{
    mm_shape s;
    if (mm_check(a, b, &s) < 0)
        return NULL;
    /* GEMM writes every element (beta 0); only k == 0 needs the zeros. */
    tg_tensor *out = s.k > 0 ? tg__empty_uninit(a->dtype, s.out_ndim, s.out_shape)
                             : tg__empty(a->dtype, s.out_ndim, s.out_shape);
    if (out && tg__numel(s.out_ndim, s.out_shape) > 0 && s.k > 0 && mm_forward(a, b, &s, out) < 0) {
        tg_release(out);
        return NULL;
    }
    tg_node *node;
    out = tg__finish(out, TG_OP_MATMUL, matmul_backward, 2, (const tg_tensor *[]){a, b}, &node);
    if (node) {
        node->iargs[0] = a->ndim == 1;
        node->iargs[1] = b->ndim == 1;
    }
    return out;
}
