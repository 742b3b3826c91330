/* What the optimizer and checkpoint files need beyond the public API to
 * report errors like the rest of the library: a stand-in, under the names
 * below, for <tensorgrad/module.h>'s helpers for module writers. */
#ifndef TG_NN_MODULE_SHIM_H
#define TG_NN_MODULE_SHIM_H

#include <tensorgrad/tensor.h>

/* Records an error (unless one is already recorded) and calls the handler;
 * always returns NULL. */
void *tg__fail(tg_error code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Writes a shape as "[2,3]" into buf and returns buf. */
const char *tg__shape_str(char *buf, size_t size, int ndim, const int64_t *shape);
bool tg__is_float(tg_dtype dtype);

#define tg_fail tg__fail
#define tg_dtype_is_float tg__is_float
#define tg_shape_str tg__shape_str
/* "[2,3]" for tensor t, in a buffer that lives to the end of the enclosing
 * block. */
#define TG_SHAPE_OF(t) tg_shape_str((char[96]){0}, 96, tg_ndim(t), tg_shape(t))
/* Returns -1 from the calling function, with TG_ERR_NULL "fn: x is NULL",
 * when the pointer x is NULL. */
#define TG_NULL_STATUS(x)                                                     \
    do {                                                                      \
        if (!(x)) {                                                           \
            tg_fail(TG_ERR_NULL, "%s: " #x " is NULL", __func__);             \
            return -1;                                                        \
        }                                                                     \
    } while (0)

#endif
