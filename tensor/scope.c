/* Scopes: a per-thread stack of the references that public functions
 * returned while a scope was open, released when that scope ends. */
#include "internal.h"

#include <stdatomic.h>
#include <stdlib.h>

typedef struct scope_spare {
    int64_t capacity;
} scope_spare; /* the header of a parked records array */

typedef struct {
    tg_tensor **items;
    int64_t count, capacity;
    int64_t starts[256]; /* where each open scope's records begin */
    int depth;
} scope_stack;

static _Thread_local scope_stack stack;

/* When its outermost scope ends, a thread parks its records array here for
 * the next step (of any thread) instead of freeing it: a training loop then
 * does not allocate it each step. A global, so leak checkers see it. */
static _Atomic(scope_spare *) spare;

void tg_scope_begin(void)
{
    if (stack.depth == (int)(sizeof stack.starts / sizeof stack.starts[0])) {
        tg__fail(TG_ERR_STATE, "tg_scope_begin: more than %d nested scopes", stack.depth);
        stack.depth++; /* keep begin/end balanced; this level records nothing */
        return;
    }
    stack.starts[stack.depth++] = stack.count;
}

int tg_scope_depth(void) { return stack.depth; }

static int pop_scope(const char *fn)
{
    if (stack.depth == 0) {
        tg__fail(TG_ERR_STATE, "%s: no scope is open", fn);
        return -1;
    }
    int level = --stack.depth;
    if (level >= (int)(sizeof stack.starts / sizeof stack.starts[0]))
        return 0;
    int64_t start = stack.starts[level];
    while (stack.count > start)
        tg_release(stack.items[--stack.count]);
    if (stack.depth == 0 && stack.items) {
        scope_spare *mine = (scope_spare *)stack.items;
        mine->capacity = stack.capacity;
        if (stack.capacity > (1 << 16)) /* an unusually large step: let it go */
            free(mine);
        else
            free(atomic_exchange(&spare, mine));
        stack.items = NULL;
        stack.capacity = 0;
    }
    return 0;
}

int tg_scope_end(void) { return pop_scope(__func__); }

tg_tensor *tg_scope_end_keep(tg_tensor *t)
{
    tg_retain(t);
    if (pop_scope(__func__) < 0) {
        tg_release(t);
        return NULL;
    }
    return tg__ret(t);
}

tg_tensor *tg__ret(tg_tensor *t)
{
    if (!t || stack.depth == 0)
        return t;
    if (!stack.items && atomic_load_explicit(&spare, memory_order_relaxed)) {
        scope_spare *got = atomic_exchange(&spare, NULL);
        if (got) {
            stack.capacity = got->capacity;
            stack.items = (tg_tensor **)got;
        }
    }
    if (stack.count == stack.capacity) {
        int64_t cap = stack.capacity ? 2 * stack.capacity : 256;
        tg_tensor **items = realloc(stack.items, (size_t)cap * sizeof *items);
        if (!items) {
            tg_release(t);
            return tg__fail(TG_ERR_NOMEM, "tensorgrad: out of memory recording a scope");
        }
        stack.items = items;
        stack.capacity = cap;
    }
    stack.items[stack.count++] = t;
    return t;
}
