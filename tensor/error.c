/* The thread-local error record: the first failure of a chain of calls,
 * its code and a message naming the function and the values involved. */
#include "internal.h"
#include <tensorgrad/module.h>

#include <stdio.h>
#include <string.h>

static _Thread_local tg_error last_code = TG_OK;
static _Thread_local char last_message[512];

static tg_error_handler handler;
static void *handler_user;

tg_error tg_error_code(void) { return last_code; }

const char *tg_error_message(void) { return last_message; }

void tg_error_clear(void)
{
    last_code = TG_OK;
    last_message[0] = '\0';
}

void tg_set_error_handler(tg_error_handler h, void *user)
{
    handler = h;
    handler_user = user;
}

const char *tg_error_name(tg_error code)
{
    switch (code) {
    case TG_OK: return "TG_OK";
    case TG_ERR_NULL: return "TG_ERR_NULL";
    case TG_ERR_SHAPE: return "TG_ERR_SHAPE";
    case TG_ERR_DIM: return "TG_ERR_DIM";
    case TG_ERR_DTYPE: return "TG_ERR_DTYPE";
    case TG_ERR_INDEX: return "TG_ERR_INDEX";
    case TG_ERR_VALUE: return "TG_ERR_VALUE";
    case TG_ERR_STATE: return "TG_ERR_STATE";
    case TG_ERR_NOMEM: return "TG_ERR_NOMEM";
    case TG_ERR_IO: return "TG_ERR_IO";
    }
    return "TG_ERR_UNKNOWN";
}

static void record(tg_error code, const char *fmt, va_list ap)
{
    char message[sizeof last_message];
    vsnprintf(message, sizeof message, fmt, ap);
    /* Keep the first error: it names the call that started a failing chain. */
    if (last_code == TG_OK) {
        last_code = code;
        memcpy(last_message, message, sizeof last_message);
    }
    if (handler)
        handler(code, message, handler_user);
}

void *tg__fail(tg_error code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    record(code, fmt, ap);
    va_end(ap);
    return NULL;
}

void *tg_fail(tg_error code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    record(code, fmt, ap);
    va_end(ap);
    return NULL;
}

const char *tg__shape_str(char *buf, size_t size, int ndim, const int64_t *shape)
{
    size_t used = 0;
    used += (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < ndim && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, i ? ",%lld" : "%lld",
                                 (long long)shape[i]);
    if (used < size)
        snprintf(buf + used, size - used, "]");
    return buf;
}

const char *tg_shape_string(char *buf, size_t size, int ndim, const int64_t *shape)
{
    if (!buf || size == 0)
        return buf;
    if (ndim < 0 || ndim > TG_MAX_DIMS || (ndim && !shape))
        ndim = 0;
    return tg__shape_str(buf, size, ndim, shape);
}
