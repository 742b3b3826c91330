/* Named parameter lists: (name, tensor) pairs with PyTorch's state-dict names,
 * the currency of optimizers and checkpoints. The list owns a reference to
 * each tensor and a copy of each name. */
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
