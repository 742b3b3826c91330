/* tensorgrad module: what a module writer needs beyond the ops. The
 * library's own modules (nn.h) are written with this header and the public
 * ones alone, so yours can do all that they do.
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

#ifdef __cplusplus
}
#endif

#endif
