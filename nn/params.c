/* Named parameter lists: (name, tensor) pairs with PyTorch's state-dict names,
 * the currency of optimizers and checkpoints. The list owns a reference to
 * each tensor and a copy of each name; its values can be checked finite. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <tensorgrad/module.h>
#include <tensorgrad/nn.h>

#include "layer_parts.h"

/* Room for one more entry; -1 with TG_ERR_NOMEM when it cannot be had. */
static int reserve_one(tg_params *ps)
{
    if (ps->count < ps->capacity)
        return 0;
    if (ps->capacity > (1 << 29)) {
        tg_fail(TG_ERR_NOMEM, "tg_params_add: too many parameters (%d)", ps->count);
        return -1;
    }
    int cap = ps->capacity ? 2 * ps->capacity : 16;
    char **names = realloc(ps->names, (size_t)cap * sizeof *names);
    if (!names)
        goto nomem;
    ps->names = names;
    tg_tensor **tensors = realloc(ps->tensors, (size_t)cap * sizeof *tensors);
    if (!tensors)
        goto nomem;
    ps->tensors = tensors;
    ps->capacity = cap;
    return 0;
nomem:
    tg_fail(TG_ERR_NOMEM, "tg_params_add: out of memory growing the list to %d entries", cap);
    return -1;
}

int tg_params_add(tg_params *ps, const char *prefix, const char *name, tg_tensor *t)
{
    TG_CHECK_ARG_STATUS(ps);
    TG_CHECK_ARG_STATUS(name);
    TG_CHECK_ARG_STATUS(t);
    if (!*name) {
        tg_fail(TG_ERR_VALUE, "tg_params_add: empty name (prefix \"%s\")", prefix ? prefix : "");
        return -1;
    }
    char *full = tg__sub_prefix(prefix, name);
    if (!full) {
        tg_fail(TG_ERR_NOMEM, "tg_params_add: out of memory copying name \"%s\"", name);
        return -1;
    }
    if (tg_params_find(ps, full)) {
        tg_fail(TG_ERR_VALUE, "tg_params_add: duplicate name \"%s\"", full);
        free(full);
        return -1;
    }
    if (reserve_one(ps) < 0) {
        free(full);
        return -1;
    }
    ps->names[ps->count] = full;
    ps->tensors[ps->count] = tg_retain(t);
    ps->count++;
    return 0;
}

tg_tensor *tg_params_find(const tg_params *ps, const char *name)
{
    TG_CHECK_ARG(ps);
    TG_CHECK_ARG(name);
    for (int i = 0; i < ps->count; i++)
        if (strcmp(ps->names[i], name) == 0)
            return ps->tensors[i];
    return NULL;
}

int64_t tg_params_numel(const tg_params *ps)
{
    TG_CHECK_ARG_STATUS(ps);
    int64_t n = 0;
    for (int i = 0; i < ps->count; i++)
        n += tg_numel(ps->tensors[i]);
    return n;
}

void tg_params_truncate(tg_params *ps, int count)
{
    if (!ps)
        return;
    while (ps->count > (count > 0 ? count : 0)) {
        ps->count--;
        free(ps->names[ps->count]);
        tg_release(ps->tensors[ps->count]);
    }
}

void tg_params_clear(tg_params *ps)
{
    if (!ps)
        return;
    tg_params_truncate(ps, 0);
    free(ps->names);
    free(ps->tensors);
    *ps = (tg_params){0};
}

/* The value of bfloat16 bits: the top half of a float32's. */
static double bf16_value(uint16_t bits)
{
    uint32_t u = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The first of n elements of dtype at p that is NaN or an infinity (-1 if
 * none), its value, and how many there are. */
static int64_t first_not_finite(const void *p, tg_dtype dtype, int64_t n, double *value,
                                int64_t *count)
{
    int64_t first = -1;
    *count = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = dtype == TG_FLOAT32   ? ((const float *)p)[i]
                 : dtype == TG_FLOAT64   ? ((const double *)p)[i]
                                         : bf16_value(((const uint16_t *)p)[i]);
        if (isfinite(v))
            continue;
        if (first < 0) {
            first = i;
            *value = v;
        }
        (*count)++;
    }
    return first;
}

/* 0, or -1 with a message naming t (called name in the list), the index
 * and value of its first non-finite element, and how many it holds. */
static int check_finite(const char *name, const tg_tensor *t)
{
    tg_scope_begin(); /* holds the contiguous copy */
    tg_tensor *c = tg_contiguous(t);
    double value = 0;
    int64_t count = 0, at = -1;
    if (c && tg_numel(c) > 0)
        at = first_not_finite(tg_data_const(c), tg_dtype_of(c), tg_numel(c), &value, &count);
    if (at >= 0) {
        int64_t index[TG_MAX_DIMS];
        for (int d = tg_ndim(c) - 1; d >= 0; d--) {
            index[d] = at % tg_shape(c)[d];
            at /= tg_shape(c)[d];
        }
        tg_fail(TG_ERR_VALUE, "tg_params_check_finite: '%s' (%s %s) holds %g at %s "
                "(not finite: %lld of its %lld values)", name, tg_dtype_name(tg_dtype_of(c)),
                TG_SHAPE_STRING(c), value,
                tg_shape_string((char[96]){0}, 96, tg_ndim(c), index), (long long)count,
                (long long)tg_numel(c));
    }
    int rc = c && count == 0 ? 0 : -1;
    tg_scope_end();
    return rc;
}

int tg_params_check_finite(const tg_params *ps)
{
    TG_CHECK_ARG_STATUS(ps);
    for (int i = 0; i < ps->count; i++) {
        if (!ps->names[i] || !ps->tensors[i]) {
            tg_fail(TG_ERR_NULL, "tg_params_check_finite: NULL name or tensor at index %d", i);
            return -1;
        }
        tg_dtype dtype = tg_dtype_of(ps->tensors[i]);
        bool real = dtype == TG_FLOAT32 || dtype == TG_FLOAT64 || dtype == TG_BFLOAT16;
        if (real && check_finite(ps->names[i], ps->tensors[i]) < 0)
            return -1;
    }
    return 0;
}
