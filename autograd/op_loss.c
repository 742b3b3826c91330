/* The losses: cross-entropy as one fused log-softmax + NLL over class logits,
 * and mean squared error. Both reduce to a 0-dim mean and accumulate in
 * double whatever the dtype.
 *
 * kernels: tensor/loss_kernels.c; fused: cross-entropy is log_softmax and
 * NLL in one (op_softmax.c has the op alone); gradcheck: tests/cases_nn.c
 * cross_entropy*, mse_loss_*; module: nn/gpt.c and nn/llama.c (their
 * forward with targets). */
#include "graph.h"
#include "loss_kernels.h"

#include <string.h>

/* ---- cross-entropy ----------------------------------------------------------- */

static int ce_check(const tg_tensor *logits, const tg_tensor *targets, int64_t ignore_index)
{
    if (tg__check_float("tg_cross_entropy", logits) < 0)
        return -1;
    if (targets->dtype != TG_INT64) {
        tg__fail(TG_ERR_DTYPE, "tg_cross_entropy: targets must be int64 class indices, got %s",
                 tg_dtype_name(targets->dtype));
        return -1;
    }
    bool fits = (logits->ndim == 2 && targets->ndim == 1 &&
                 targets->shape[0] == logits->shape[0]) ||
                (logits->ndim == 1 && targets->ndim == 0);
    if (!fits) {
        tg__fail(TG_ERR_SHAPE, "tg_cross_entropy: logits %s and targets %s do not fit "
                               "(expected logits [N,C] with targets [N], or [C] with a 0-dim "
                               "target)", TG_SHAPE_STR(logits), TG_SHAPE_STR(targets));
        return -1;
    }
    tg__ce_geometry g = tg__ce_geometry_of(logits, targets);
    for (int64_t r = 0; r < g.rows; r++) {
        int64_t t = tg__ce_target(targets, &g, r);
        if (t != ignore_index && (t < 0 || t >= g.classes)) {
            tg__fail(TG_ERR_INDEX, "tg_cross_entropy: target %lld (row %lld) is out of range "
                                   "for %lld classes", (long long)t, (long long)r,
                     (long long)g.classes);
            return -1;
        }
    }
    return 0;
}

/* dlogits = (softmax - onehot) * g / count on kept rows, 0 on ignored rows.
 * saved[0]: each row's logsumexp [rows] float64; args[0]: count; iargs[0]:
 * ignore_index. */
static int cross_entropy_backward(tg_node *n, const tg_tensor *grad, tg_tensor **grads)
{
    const tg_tensor *logits = n->inputs[0], *targets = n->inputs[1];
    tg__ce_geometry g = tg__ce_geometry_of(logits, targets);
    const double *lse = tg__ptr(n->saved[0]);
    double scale = (grad->dtype == TG_FLOAT32 ? (double)*(const float *)tg__ptr(grad)
                                              : *(const double *)tg__ptr(grad)) / n->args[0];
    tg_tensor *d = tg__empty_uninit(logits->dtype, logits->ndim, logits->shape); /* all written */
    if (!d)
        return -1;
    tg__ce_grad(logits, targets, &g, lse, scale, n->iargs[0], d);
    grads[0] = tg__ret(d);
    return 0;
}

tg_tensor *tg_cross_entropy(const tg_tensor *logits, const tg_tensor *targets,
                            int64_t ignore_index)
{
    TG_CHECK_NULL(logits);
    TG_CHECK_NULL(targets);
    if (ce_check(logits, targets, ignore_index) < 0)
        return NULL;
    tg__ce_geometry g = tg__ce_geometry_of(logits, targets);
    tg_tensor *lse = tg__empty(TG_FLOAT64, 1, (int64_t[]){g.rows});
    tg_tensor *out = tg__empty(logits->dtype, 0, NULL);
    if (!lse || !out) { /* through tg__finish, which names the op in the error */
        tg_release(lse);
        tg_release(out);
        return tg__finish(NULL, TG_OP_CROSS_ENTROPY, cross_entropy_backward, 2,
                          (const tg_tensor *[]){logits, targets}, NULL);
    }
    double *lp = tg__ptr(lse);
    if (tg__ce_logsumexp(logits, &g, lp) < 0) {
        tg_release(lse);
        tg_release(out);
        return tg__finish(NULL, TG_OP_CROSS_ENTROPY, cross_entropy_backward, 2,
                          (const tg_tensor *[]){logits, targets}, NULL);
    }
    int64_t count;
    double total = tg__ce_nll_total(logits, targets, &g, lp, ignore_index, &count);
    double loss = count ? total / (double)count : NAN; /* all ignored: NaN, as PyTorch */
    if (out->dtype == TG_FLOAT32)
        *(float *)tg__ptr(out) = (float)loss;
    else
        *(double *)tg__ptr(out) = loss;
    tg_node *node;
    out = tg__finish(out, TG_OP_CROSS_ENTROPY, cross_entropy_backward, 2,
                     (const tg_tensor *[]){logits, targets}, &node);
    if (node) {
        tg__save(node, 0, lse);
        node->args[0] = (double)count;
        node->iargs[0] = ignore_index;
    }
    tg_release(lse);
    return out;
}

/* ---- mean squared error -------------------------------------------------------- */


/* d/dinput = 2 (input - target) g / n, d/dtarget = its negation. */
static int mse_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    const tg_tensor *a = n->inputs[0], *b = n->inputs[1];
    double count = (double)tg__numel(a->ndim, a->shape);
    tg_tensor *da = tg_mul_scalar(tg_mul(tg_sub(a, b), g), 2.0 / count);
    grads[0] = n->needs[0] ? da : NULL;
    grads[1] = n->needs[1] ? tg_neg(da) : NULL;
    return da ? 0 : -1;
}

tg_tensor *tg_mse_loss(const tg_tensor *input, const tg_tensor *target)
{
    TG_CHECK_NULL(input);
    TG_CHECK_NULL(target);
    if (tg__check_float(__func__, input) < 0 || tg__check_float(__func__, target) < 0)
        return NULL;
    if (input->dtype != target->dtype)
        return tg__fail(TG_ERR_DTYPE, "tg_mse_loss: dtypes differ: input %s, target %s",
                        tg_dtype_name(input->dtype), tg_dtype_name(target->dtype));
    if (input->ndim != target->ndim ||
        memcmp(input->shape, target->shape, (size_t)input->ndim * sizeof input->shape[0]))
        return tg__fail(TG_ERR_SHAPE, "tg_mse_loss: input %s and target %s differ in shape",
                        TG_SHAPE_STR(input), TG_SHAPE_STR(target));
    int64_t n = tg__numel(input->ndim, input->shape);
    double loss = n ? tg__sum_squared_diff(input, target) / (double)n : NAN;
    tg_tensor *out = tg__empty(input->dtype, 0, NULL);
    if (!out) /* through tg__finish, which names the op in the error */
        return tg__finish(NULL, TG_OP_MSE_LOSS, mse_backward, 2,
                          (const tg_tensor *[]){input, target}, NULL);
    if (out->dtype == TG_FLOAT32)
        *(float *)tg__ptr(out) = (float)loss;
    else
        *(double *)tg__ptr(out) = loss;
    return tg__finish(out, TG_OP_MSE_LOSS, mse_backward, 2,
                      (const tg_tensor *[]){input, target}, NULL);
}
