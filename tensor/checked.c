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

/* The quarantine holds the headers released last, with where each was
 * released. Its ring starts at RING_FIRST entries and doubles while the
 * headers and their records fit in quarantine_bytes (TG_CHECKED_QUARANTINE_MB,
 * default 256 MiB, AddressSanitizer's default quarantine): a deep graph whose
 * scope ends releases them all at once, and a double release among them must
 * still be caught. Past the cap the oldest header goes back to the allocator
 * when a new one comes in. */
enum { RING_FIRST = 1 << 16, DEFAULT_MB = 256 };
/* What a quarantined header costs besides its record: the 256-byte block of
 * storage.c's smallest size class and the allocator's own words. */
enum { HEADER_BYTES = 256 + 16 };
_Static_assert(sizeof(tg_tensor) <= HEADER_BYTES - 16, "a header outgrew its size class");
typedef struct {
    tg_tensor *t;
    tg__site site;
    int ndim; /* what it was, for the reports (the header keeps its shape) */
} held;
static size_t quarantine_bytes = (size_t)DEFAULT_MB << 20;

/* TG_CHECKED=1 turns checked mode on, 0 off, whatever the build chose; read
 * once as the library loads, before any tensor exists, with the
 * quarantine's cap in MiB (a whole number >= 1). */
__attribute__((constructor)) static void read_switch(void)
{
    const char *v = getenv("TG_CHECKED");
    if (v && *v)
        tg__checked_on = strcmp(v, "0") != 0;
    const char *mb = getenv("TG_CHECKED_QUARANTINE_MB");
    char *end = NULL;
    unsigned long long n = mb && *mb ? strtoull(mb, &end, 10) : 0;
    if (n >= 1 && !*end && n <= (SIZE_MAX >> 21))
        quarantine_bytes = (size_t)n << 20;
}

bool tg_checked(void) { return tg__checked_on; }

static held *ring;
static int64_t ring_cap;  /* entries allocated */
static int64_t ring_next; /* headers quarantined so far; the next goes at ring_next % ring_cap */
static bool ring_full_size; /* ring_cap is as large as the cap allows (or memory gave) */
static _Alignas(16) unsigned char poison_bytes[16];
static tg_storage poison = {.refcount = INT64_MAX / 2, .data = poison_bytes};
static atomic_flag ring_busy = ATOMIC_FLAG_INIT;

static void ring_lock(void)
{
    while (atomic_flag_test_and_set_explicit(&ring_busy, memory_order_acquire))
        ;
}

static void ring_unlock(void) { atomic_flag_clear_explicit(&ring_busy, memory_order_release); }

/* Before the ring first wraps, its entries are in release order, so a grown
 * ring just goes on at ring_next; once it wraps it stays its size. */
static void grow_ring(void)
{
    int64_t most = (int64_t)(quarantine_bytes / (sizeof(held) + HEADER_BYTES));
    int64_t cap = ring_cap ? 2 * ring_cap : RING_FIRST;
    if (cap > most)
        cap = most > ring_cap ? most : ring_cap;
    held *bigger = cap > ring_cap ? realloc(ring, (size_t)cap * sizeof *ring) : NULL;
    if (bigger) {
        ring = bigger;
        ring_cap = cap;
    }
    ring_full_size = !bigger || cap == most;
}

void tg__quarantine(tg_tensor *t, const tg__site *site)
{
    held keep = {t, *site, t->ndim};
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
    if (ring_next == ring_cap && !ring_full_size)
        grow_ring();
    if (ring_cap) {
        held *h = &ring[ring_next++ % ring_cap];
        evicted = ring_next > ring_cap ? h->t : NULL;
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
    int64_t n = ring_next < ring_cap ? ring_next : ring_cap;
    for (int64_t i = 0; i < n && !hit; i++) {
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
                     tg__shape_str((char[96]){0}, 96, was.ndim, t->shape));
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
