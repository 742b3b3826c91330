/* tensorgrad module: what a module or optimizer writer needs beyond the
 * ops. The library's own modules and optimizers (nn.h) are written with this
 * header and the public ones alone, so yours can do all that they do.
 *
 * Writing your own module
 * -----------------------
 * A module is a struct of parameter tensors and settings, with a _new, a
 * _forward, a _params and a _free. The forward checks its arguments, runs
 * ops inside a scope and hands its result out of it:
 *
 *   #include <tensorgrad/nn.h>
 *   #include <tensorgrad/module.h>
 *
 *   typedef struct { tg_tensor *scale; } my_scale;   // scale [D]
 *
 *   tg_tensor *my_scale_forward(const my_scale *m, const tg_tensor *x)  // x [..., D]
 *   {
 *       TG_CHECK_ARG(m);            // NULL or released: NULL, error recorded
 *       TG_CHECK_ARG(x);
 *       if (tg_shape(x)[tg_ndim(x) - 1] != tg_shape(m->scale)[0])
 *           return tg_fail(TG_ERR_SHAPE, "my_scale_forward: x %s does not end in %lld",
 *                          TG_SHAPE_STRING(x), (long long)tg_shape(m->scale)[0]);
 *       tg_scope_begin();
 *       tg_tensor *y = tg_relu(tg_mul(x, m->scale));
 *       return tg_scope_end_keep(y);  // a new reference, in the caller's scope
 *   }
 *
 * Errors follow the library's rule: a failing call returns NULL (or -1) and
 * records a message that names the function and the values involved.
 * Read parameters with tg_data_const; tg_data is for writing (it bumps the
 * tensor's version, so a graph that kept the tensor refuses to backpropagate
 * through the old values), as when filling a tensor you just made. */
#ifndef TG_MODULE_H
#define TG_MODULE_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define TG__PRINTF(f, a) __attribute__((format(printf, f, a)))
#define TG__CALLER __builtin_return_address(0)
#else
#define TG__PRINTF(f, a)
#define TG__CALLER NULL
#endif

/* Records an error with code and a printf-style message (unless one is
 * already recorded on this thread: the first of a chain is kept) and calls
 * the error handler. Always returns NULL, so `return tg_fail(...)` reads
 * naturally in a function returning a pointer. Start the message with the
 * function's name: "my_forward: x [2,3] is not [B, T, D]". */
TG_API void *tg_fail(tg_error code, const char *fmt, ...) TG__PRINTF(2, 3);

/* Checks an argument p, named name, of the function fn: -1 with TG_ERR_NULL
 * "fn: name is NULL" when p is NULL; when is_tensor, -1 with TG_ERR_STATE
 * when p is a tensor already released ("fn: input name was already released
 * (called from caller; ...)"); else 0. caller is the code address the call
 * came from, for the message. Use it through the macros below. */
TG_API int tg_check_arg(const void *p, bool is_tensor, const char *fn, const char *name,
                        const void *caller);

/* Return NULL (TG_CHECK_ARG) or -1 (TG_CHECK_ARG_STATUS) from the calling
 * function when p fails tg_check_arg. p may be any pointer; a tensor is also
 * checked for having been released. The macros need C11 (_Generic). */
#define TG__ARG_IS_TENSOR(p) \
    _Generic((p), tg_tensor *: true, const tg_tensor *: true, default: false)
#define TG__CHECK_ARG(p)                                                      \
    tg_check_arg((const void *)(p), TG__ARG_IS_TENSOR(p), __func__, #p, TG__CALLER)
#define TG_CHECK_ARG(p)                                                       \
    do {                                                                      \
        if (TG__CHECK_ARG(p) < 0)                                             \
            return NULL;                                                      \
    } while (0)
#define TG_CHECK_ARG_STATUS(p)                                                \
    do {                                                                      \
        if (TG__CHECK_ARG(p) < 0)                                             \
            return -1;                                                        \
    } while (0)

/* Writes a shape as "[2,3]" ("[]" for a scalar) into buf (size bytes,
 * always terminated) and returns buf. TG_SHAPE_STRING(t) is t's shape in a
 * buffer that lives until the end of the enclosing block: pass it straight
 * to tg_fail or printf. */
TG_API const char *tg_shape_string(char *buf, size_t size, int ndim, const int64_t *shape);
#define TG_SHAPE_STRING(t) tg_shape_string((char[96]){0}, 96, tg_ndim(t), tg_shape(t))

/* Hands a reference you own to the innermost open scope, which releases it
 * when it ends (with no scope open it stays yours), and returns t. For a
 * forward that gives out a second result through a pointer, beside the one
 * tg_scope_end_keep hands on:
 *
 *   tg_retain(w);                      // ours, past the scope's end
 *   out = tg_scope_end_keep(out);
 *   *weights = tg_scope_adopt(w);      // now the caller's scope holds it
 *
 * NULL passes; a released tensor gives NULL and TG_ERR_STATE. */
TG_API tg_tensor *tg_scope_adopt(tg_tensor *t);

/* ---- writing your own optimizer ------------------------------------------------
 * The loops behind tg_optim_step and tg_clip_grad_norm (nn/optim.c uses
 * these and nothing else). An optimizer keeps its own state tensors and, each
 * step, describes every parameter's update with a tg_param_update; one call of
 * tg_update_params then updates them all, as PyTorch's fused multi-tensor
 * updates do. An AdamW step by hand, at step t (counted from 1):
 *
 *   tg_param_update u = {.param = p, .grad = tg_grad(p), .m = exp_avg,
 *                        .v = exp_avg_sq, .rule = TG_UPDATE_ADAM};
 *   u.c = (tg_update_coefs){.decay = 1 - lr * wd, .beta1 = b1, .beta2 = b2,
 *                           .eps = eps, .step_size = lr / (1 - pow(b1, t)),
 *                           .bc2_sqrt = sqrt(1 - pow(b2, t))};
 *   if (tg_update_params(&u, 1) < 0) ... tg_error_message() says why
 *
 * exp_avg and exp_avg_sq start as zeros of p's shape and dtype (tg_zeros);
 * tg_grad's reference belongs to the open scope. With many parameters, pass
 * them all in one call: the float32 ones then share one parallel loop. */

/* Which formula a tg_param_update applies. */
typedef enum {
    TG_UPDATE_SGD,  /* torch.optim.SGD (no dampening, no Nesterov) */
    TG_UPDATE_ADAM, /* torch.optim.Adam, or AdamW when decay != 1 */
} tg_update_rule;

/* The numbers of one parameter's update, in double. Each is rounded to the
 * parameter's dtype before use, as PyTorch rounds Python scalars, and the
 * formulas run in PyTorch 1.13's order (torch.optim, foreach=False). With
 * g the gradient and p the parameter:
 *   SGD:  g += l2 * p; m = first ? g : m * momentum + g (when m is given);
 *         p -= lr * (m or g)
 *   Adam: p *= decay; g += l2 * p; m = m * beta1 + (1 - beta1) * g;
 *         v = v * beta2 + (1 - beta2) * g * g;
 *         p -= step_size * m / (sqrt(v) / bc2_sqrt + eps)
 * A rule ignores the other's fields; Adam needs decay = 1 for no decay. */
typedef struct {
    double l2;        /* weight decay added to the gradient (SGD, Adam); 0 for none */
    double decay;     /* Adam: multiplied into p first; AdamW's 1 - lr * wd, else 1 */
    double lr;        /* SGD: the learning rate */
    double momentum;  /* SGD: the momentum buffer's decay (used only with m) */
    bool first;       /* SGD: this is the parameter's first step, m starts as g */
    double beta1;     /* Adam: the first moment's decay */
    double beta2;     /* Adam: the second moment's decay */
    double bc2_sqrt;  /* Adam: sqrt(1 - beta2^t), t the parameter's step from 1 */
    double eps;       /* Adam: added to the denominator */
    double step_size; /* Adam: lr / (1 - beta1^t) */
} tg_update_coefs;

/* One parameter's update. All tensors are borrowed.
 *   param  float32 or float64, any shape and layout (a view updates the
 *          storage it sees).
 *   grad   param's shape and dtype, any layout.
 *   m      contiguous, param's shape and dtype: exp_avg (Adam, required) or
 *          the momentum buffer (SGD; NULL for none, then momentum must be 0).
 *   v      contiguous, param's shape and dtype: exp_avg_sq (Adam, required;
 *          ignored by SGD).
 * param, m and v are written; no two updates of one call may write the same
 * memory. */
typedef struct {
    tg_tensor *param;
    const tg_tensor *grad;
    tg_tensor *m, *v;
    tg_update_rule rule;
    tg_update_coefs c;
} tg_param_update;

/* Applies the n updates of updates[0..n-1] in place: every contiguous
 * float32 Adam(W) parameter in one parallel loop, then the others one by
 * one. Then bumps each parameter's version, so a graph that read one refuses
 * to backpropagate. Any thread count gives the same bits. Runs no graph:
 * grad mode does not matter. Every update is checked before anything is
 * written: returns 0, or -1 with nothing changed and TG_ERR_NULL (updates,
 * a param or grad, or a required m / v NULL), TG_ERR_VALUE (n < 0, an
 * unknown rule, momentum without m), TG_ERR_STATE (a tensor already
 * released), TG_ERR_DTYPE (param not float, grad / m / v of another dtype)
 * or TG_ERR_SHAPE (grad / m / v of another shape, m / v not contiguous);
 * the message names the update: "tg_update_params: updates[2].grad is ...". */
TG_API int tg_update_params(const tg_param_update *updates, int n);

/* The sum of the squares of t's elements (float32 or float64, any layout),
 * accumulated in double, in t's logical order; 0 for an empty tensor. The
 * squared norm tg_clip_grad_norm adds up. Returns -1 with TG_ERR_NULL,
 * TG_ERR_STATE (released) or TG_ERR_DTYPE (not float). */
TG_API double tg_sum_squares(const tg_tensor *t);

/* t *= coef in place, any layout (a view scales the storage it sees), with
 * coef rounded to t's dtype first, as PyTorch's mul_ does. Bumps t's
 * version, so a graph that read t refuses to backpropagate. Returns 0, or -1
 * with TG_ERR_NULL, TG_ERR_STATE (released) or TG_ERR_DTYPE (not float). */
TG_API int tg_scale_in_place(tg_tensor *t, double coef);

#ifdef __cplusplus
}
#endif

#endif
