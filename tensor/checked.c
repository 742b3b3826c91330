/* Checked mode: a released tensor header is poisoned and kept in a
 * quarantine instead of being reused, so that releasing it again or handing
 * it to an op is reported with both call sites rather than corrupting memory. */
#define _GNU_SOURCE
#include "internal.h"
#include "tg_config.h"

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
} held;
static held *ring;
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
    /* what it held is gone; its shape and dtype stay for the reports */
    t->refcount = TG__RELEASED;
    t->storage = NULL;
    t->grad = NULL;
    t->node = NULL;
    t->requires_grad = false;
    tg_tensor *evicted = NULL;
    ring_lock();
    if (!ring)
        ring = calloc(QUARANTINE, sizeof *ring);
    if (ring) {
        held *h = &ring[ring_next++ % QUARANTINE];
        evicted = h->t;
        *h = (held){t, *site};
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

/* Where t was released, when the quarantine still holds it. */
static bool released_at(const tg_tensor *t, tg__site *site)
{
    bool found = false;
    ring_lock();
    for (int64_t i = 0; ring && i < QUARANTINE && !found; i++) {
        if (ring[i].t == t) {
            *site = ring[i].site;
            found = true;
        }
    }
    ring_unlock();
    return found;
}

void tg__report_released(const char *fn, const char *what, const tg_tensor *t,
                         const tg__site *now)
{
    char here[320], before[320] = "", message[720];
    tg__site was;
    if (released_at(t, &was)) {
        char at[320];
        snprintf(before, sizeof before, "; released before at %s", site_str(at, sizeof at, &was));
    }
    snprintf(message, sizeof message, "%s: %s already released (called from %s%s)", fn, what,
             site_str(here, sizeof here, now), before);
    if (tg__checked_on) /* the caller may not look at the error */
        fprintf(stderr, "tensorgrad: %s\n", message);
    tg__fail(TG_ERR_STATE, "%s", message);
}
