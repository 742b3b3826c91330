/* The batched matrix product behind tg_matmul: each operand read as a stack
 * of matrices in place (transposed views included, copied only when GEMM
 * cannot read them), and the batch loop of GEMM calls, on the threads when
 * the products are small. */
#include "gemm.h"
#include "matmul_kernels.h"

#include <string.h>

/* Below this many multiply-adds per matrix, the batch loop runs its GEMMs
 * on separate threads instead of leaving threads to each GEMM. */
#define MM_SMALL (64.0 * 64.0 * 64.0)
/* Below this much work in all, a thread team costs more than it saves. */
#define MM_BATCH_MIN (1 << 20)

/* An operand as a stack of matrices that GEMM can read. */
typedef struct {
    const char *data;
    int64_t bstride[TG_MAX_DIMS]; /* per output batch dim; 0 where broadcast */
    bool trans;                   /* stored column-major: a transposed matrix */
    int64_t ld;
} mm_operand;

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
static bool mm_operand_init(mm_operand *o, const tg_tensor *t, bool left,
                            const tg__mm_shape *s)
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
static int product(tg_tensor *out, const mm_operand *oa, const mm_operand *ob,
                   const tg__mm_shape *s, int64_t i, int64_t m, int64_t n, int64_t k,
                   bool builtin)
{
    size_t es = tg_dtype_size(out->dtype);
    int64_t off_a = 0, off_b = 0, rest = i;
    for (int d = s->nb - 1; d >= 0 && i > 0; d--) {
        int64_t idx = rest % s->batch[d];
        rest /= s->batch[d];
        off_a += idx * oa->bstride[d];
        off_b += idx * ob->bstride[d];
    }
    return tg__gemm_p(out->dtype, tg_matmul_precision(), builtin, oa->trans, ob->trans, m, n, k, 1.0,
                    oa->data + off_a * (int64_t)es, oa->ld, ob->data + off_b * (int64_t)es, ob->ld,
                    0.0, (char *)tg__ptr(out) + i * m * n * (int64_t)es, n);
}

/* out (contiguous, s.out_shape) = a @ b, for m, n, k > 0. Operands with no
 * GEMM layout are copied to contiguous first. 0, or -1 on failure. */
int tg__matmul_forward(const tg_tensor *a, const tg_tensor *b, const tg__mm_shape *s,
                       tg_tensor *out)
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
