/* Checked mode: a released tensor header is poisoned and kept in a
 * quarantine instead of being reused, so that releasing it again or handing
 * it to an op is reported with both call sites rather than corrupting memory. */
#define _GNU_SOURCE
#include "internal.h"
#include "tg_config.h"
#include <tensorgrad/module.h>

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

bool tg__checked_on = TG_CHECKED_DEFAULT;

/* TG_CHECKED=1 turns checked mode on, 0 off, whatever the build chose; read
 * once as the library loads, before any tensor exists. */
__attribute__((constructor)) static void read_switch(void)
{
    const char *v = getenv("TG_CHECKED");
    if (v && *v)
        tg__checked_on = strcmp(v, "0") != 0;
}

bool tg_checked(void) { return tg__checked_on; }

/* The last QUARANTINE headers released, each with where it was released;
 * the oldest goes back to the allocator when a new one comes in. */
enum { QUARANTINE = 1 << 16 };
typedef struct {
    tg_tensor *t;
    tg__site site;
    int ndim; /* what it was, for the reports */
    int64_t shape[TG_MAX_DIMS];
} held;
static held *ring;
static _Alignas(16) unsigned char poison_bytes[16];
static tg_storage poison = {.refcount = INT64_MAX / 2, .data = poison_bytes};
static int64_t ring_next;
static atomic_flag ring_busy = ATOMIC_FLAG_INIT;

static void ring_lock(void)
{
    while (atomic_flag_test_and_set_explicit(&ring_busy, memory_order_acquire))
        ;
}

static void ring_unlock(void) { atomic_flag_clear_explicit(&ring_busy, memory_order_release); }

void tg__quarantine(tg_tensor *t, const tg__site *site)
{
    held keep = {t, *site, t->ndim, {0}};
    memcpy(keep.shape, t->shape, sizeof keep.shape);
    /* What it held is gone. An op that does not check its inputs (only
     * their shapes, say) reads it as a 0-dim tensor over a few spare bytes
     * that nothing frees, rather than memory that went back to the system. */
    t->refcount = TG__RELEASED;
    t->storage = &poison;
    t->ndim = 0;
    t->offset = 0;
    t->grad = NULL;
    t->node = NULL;
    t->bf16_copy = NULL;
    t->requires_grad = false;
    tg_tensor *evicted = NULL;
    ring_lock();
    if (!ring)
        ring = calloc(QUARANTINE, sizeof *ring);
    if (ring) {
        held *h = &ring[ring_next++ % QUARANTINE];
        evicted = h->t;
        *h = keep;
    } else {
        evicted = t; /* no room to keep it: it is freed after all */
    }
    ring_unlock();
    if (evicted) {
        evicted->refcount = 0;
        tg__small_free(evicted, sizeof *evicted);
    }
}

/* "file:line", or the address as module+offset (addr2line -e module offset). */
static const char *site_str(char *buf, size_t size, const tg__site *s)
{
    int n = 0;
    if (s->how)
        n = snprintf(buf, size, "%s", s->how);
    if (n < 0 || (size_t)n >= size)
        return buf;
    Dl_info info;
    if (s->file)
        snprintf(buf + n, size - (size_t)n, "%s:%d", s->file, s->line);
    else if (s->addr && dladdr(s->addr, &info) && info.dli_fname)
        snprintf(buf + n, size - (size_t)n, "%s+0x%lx", info.dli_fname,
                 (unsigned long)((const char *)s->addr - (const char *)info.dli_fbase));
    else
        snprintf(buf + n, size - (size_t)n, "%p", s->addr);
    return buf;
}

/* Where t was released and what it was, when the quarantine still holds it. */
static bool released_at(const tg_tensor *t, held *found)
{
    bool hit = false;
    ring_lock();
    for (int64_t i = 0; ring && i < QUARANTINE && !hit; i++) {
        if (ring[i].t == t) {
            *found = ring[i];
            hit = true;
        }
    }
    ring_unlock();
    return hit;
}

void tg__report_released(const char *fn, const char *what, const tg_tensor *t,
                         const tg__site *now)
{
    char here[320], before[320] = "", message[800], input[128] = "an input was";
    held was;
    bool known = released_at(t, &was);
    if (known) {
        char at[320];
        snprintf(before, sizeof before, "; released before at %s",
                 site_str(at, sizeof at, &was.site));
        if (!what)
            snprintf(input, sizeof input, "an input (%s %s) was", tg_dtype_name(t->dtype),
                     tg__shape_str((char[96]){0}, 96, was.ndim, was.shape));
    } else if (!what) { /* checked mode off: past its first word the header is as it was */
        snprintf(input, sizeof input, "an input (%s %s) was", tg_dtype_name(t->dtype),
                 TG_SHAPE_STR(t));
    }
    snprintf(message, sizeof message, "%s: %s already released (called from %s%s)", fn,
             what ? what : input, site_str(here, sizeof here, now), before);
    if (tg__checked_on) /* the caller may not look at the error */
        fprintf(stderr, "tensorgrad: %s\n", message);
    tg__fail(TG_ERR_STATE, "%s", message);
}

int tg_check_arg(const void *p, bool is_tensor, const char *fn, const char *name,
                 const void *caller)
{
    if (!p) {
        tg__fail(TG_ERR_NULL, "%s: %s is NULL", fn, name);
        return -1;
    }
    if (is_tensor && tg__dead_tensor(p)) {
        char what[128];
        snprintf(what, sizeof what, "input %s was", name);
        tg__report_released(fn, what, p, &(tg__site){.addr = caller});
        return -1;
    }
    return 0;
}
