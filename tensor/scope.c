/* Scopes: a per-thread stack of the references that public functions
 * returned while a scope was open, released when that scope ends. */
#include "internal.h"
#include <tensorgrad/module.h>

#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>

typedef struct scope_spare {
    int64_t capacity;
} scope_spare; /* the header of a parked records array */

typedef struct {
    tg_tensor **items;
    int64_t count, capacity;
    /* Where the records of the scope at each level begin: the first levels
     * here, deeper ones in more[], which grows with the nesting (so any depth
     * works) and goes when the outermost scope ends. */
    int64_t first[64];
    int64_t *more;
    int depth, more_cap;
    /* Nonzero: the level (depth counted from 1) opened when more[] could not
     * grow. It and the levels inside it record nothing of their own (their
     * tensors go to the scope below it); they only count depth, so that
     * begin and end stay balanced. */
    int lost;
} scope_stack;

static _Thread_local scope_stack stack;

/* When its outermost scope ends, a thread parks its records array here for
 * the next step (of any thread) instead of freeing it: a training loop then
 * does not allocate it each step. A global, so leak checkers see it. */
static _Atomic(scope_spare *) spare;

#define FIRST_LEVELS ((int)(sizeof stack.first / sizeof stack.first[0]))

static int64_t *start_of(int level)
{
    return level < FIRST_LEVELS ? &stack.first[level] : &stack.more[level - FIRST_LEVELS];
}

/* Room for the level stack.depth; false when memory ran out. */
static bool room_for_level(void)
{
    int deep = stack.depth - FIRST_LEVELS;
    if (deep < stack.more_cap)
        return true;
    if (stack.more_cap > INT_MAX / 2)
        return false;
    int cap = stack.more_cap ? 2 * stack.more_cap : 256;
    int64_t *more = realloc(stack.more, (size_t)cap * sizeof *more);
    if (!more)
        return false;
    stack.more = more;
    stack.more_cap = cap;
    return true;
}

void tg_scope_begin(void)
{
    if (stack.depth == INT_MAX) { /* more than memory allows anyway */
        tg__fail(TG_ERR_STATE, "tg_scope_begin: %d scopes are already open", stack.depth);
        return;
    }
    if (!stack.lost && !room_for_level()) {
        tg__fail(TG_ERR_NOMEM, "tg_scope_begin: out of memory opening scope %d",
                 stack.depth + 1);
        stack.lost = stack.depth + 1;
    }
    if (!stack.lost)
        *start_of(stack.depth) = stack.count;
    stack.depth++;
}

int tg_scope_depth(void) { return stack.depth; }

/* Ends the innermost scope for fn; site says where fn was called from, for
 * checked mode's account of where each tensor was released. */
static int pop_scope(const char *fn, const tg__site *site)
{
    if (stack.depth == 0) {
        tg__fail(TG_ERR_STATE, "%s: no scope is open", fn);
        return -1;
    }
    int level = --stack.depth;
    if (stack.lost) { /* a level that recorded nothing of its own */
        if (level + 1 == stack.lost)
            stack.lost = 0;
        return 0;
    }
    int64_t start = *start_of(level);
    while (stack.count > start)
        tg__release_at_site(stack.items[--stack.count], site);
    if (stack.depth == 0 && stack.more) { /* deep nesting is rare: let it go */
        free(stack.more);
        stack.more = NULL;
        stack.more_cap = 0;
    }
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

int tg_scope_end(void)
{
    return pop_scope(__func__, &(tg__site){.addr = __builtin_return_address(0),
                                           .how = "the end of a scope, tg_scope_end called from "});
}

tg_tensor *tg_scope_end_keep(tg_tensor *t)
{
    tg_tensor *kept = NULL;
    if (t && tg__dead_tensor(t)) /* not handed on to be released again; the scope still ends */
        tg__report_released(__func__, "tensor", t,
                            &(tg__site){.addr = __builtin_return_address(0)});
    else
        kept = tg_retain(t);
    tg__site site = {.addr = __builtin_return_address(0),
                     .how = "the end of a scope, tg_scope_end_keep called from "};
    if (pop_scope(__func__, &site) < 0) {
        tg_release(kept);
        return NULL;
    }
    return tg__ret(kept);
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

tg_tensor *tg_scope_adopt(tg_tensor *t)
{
    if (t && tg__dead_tensor(t)) {
        tg__report_released(__func__, "tensor", t,
                            &(tg__site){.addr = __builtin_return_address(0)});
        return NULL;
    }
    return tg__ret(t);
}
