/* The bfloat16 copies of weights that bf16 precision's thin products read
 * (PyTorch's autocast keeps such casts of its parameters): a generated
 * token's row against a weight matrix reads half the bytes of float32 and
 * does not round the weight again on every call. A copy covers its whole
 * storage, so every view of it shares one; it carries the storage version
 * it was made at and is never read at another. It goes when the storage
 * is written (tg__bump_version), when the storage is freed, and with
 * tg_release_cached_memory. */
#include "bf16.h"
#include "bf16_weights.h"
#include "gemm.h"
#include "gemm_bf16_thin.h"

#include <stdatomic.h>
#include <stdlib.h>

struct tg__bf16_copy {
    int64_t refs;                     /* the storage's, while it holds it, and each reader's */
    uint64_t version;                 /* of the storage when made */
    size_t count;                     /* bfloat16 values: the storage's floats */
    uint16_t *data;
    tg_storage *owner;                /* NULL once dropped by its storage */
    struct tg__bf16_copy *prev, *next; /* every copy a storage holds, for drop_all */
    struct tg__bf16_copy *dead;       /* drop_all's list of copies to free */
};

/* Guards the storages' bf16_copy pointers, the list and every refs. Held
 * for a few pointer moves only: copies are made and freed outside it. */
static atomic_flag busy = ATOMIC_FLAG_INIT;
static struct tg__bf16_copy *held; /* the copies storages hold */
static bool enabled = true;

static void lock(void)
{
    while (atomic_flag_test_and_set_explicit(&busy, memory_order_acquire))
        ;
}

static void unlock(void) { atomic_flag_clear_explicit(&busy, memory_order_release); }

static void copy_free(struct tg__bf16_copy *c)
{
    if (c) {
        free(c->data);
        free(c);
    }
}

/* Takes c off its storage and the list (lock held); true when nothing else
 * holds it, and the caller frees it after unlocking. */
static bool detach(struct tg__bf16_copy *c)
{
    atomic_store_explicit(&c->owner->bf16_copy, NULL, memory_order_relaxed);
    c->owner = NULL;
    if (c->prev)
        c->prev->next = c->next;
    else
        held = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
    return --c->refs == 0;
}

/* Drops one reference (lock not held). */
static void put(struct tg__bf16_copy *c)
{
    lock();
    bool last = --c->refs == 0;
    unlock();
    if (last)
        copy_free(c);
}

/* A copy of s's floats at version v with one reference, or NULL when out
 * of memory. */
static struct tg__bf16_copy *make(const tg_storage *s, uint64_t v)
{
    struct tg__bf16_copy *c = calloc(1, sizeof *c);
    size_t count = s->nbytes / sizeof(float);
    size_t bytes = (count * sizeof(uint16_t) + 63) / 64 * 64;
    if (!c || !(c->data = aligned_alloc(64, bytes ? bytes : 64))) {
        free(c);
        return NULL;
    }
    c->refs = 1;
    c->version = v;
    c->count = count;
    const float *x = s->data;
    TG_FOR_BLOCKS((int64_t)count, lo, len, tg__bf16_from_f32_n(c->data + lo, x + lo, len));
    return c;
}

/* The copy of w's storage at its current version, with a reference for the
 * caller (made and installed if need be), or NULL when out of memory. */
static struct tg__bf16_copy *acquire(const tg_tensor *w)
{
    tg_storage *s = w->storage;
    uint64_t v = s->version;
    lock();
    struct tg__bf16_copy *c = atomic_load_explicit(&s->bf16_copy, memory_order_relaxed);
    if (c && c->version == v)
        c->refs++;
    else
        c = NULL;
    unlock();
    if (c)
        return c;
    if (!(c = make(s, v)))
        return NULL;
    lock();
    struct tg__bf16_copy *old = atomic_load_explicit(&s->bf16_copy, memory_order_relaxed);
    bool free_old = false, install = s->version == v && !(old && old->version == v);
    if (install) {
        free_old = old && detach(old);
        c->refs++;
        c->owner = s;
        c->next = held;
        if (held)
            held->prev = c;
        held = c;
        atomic_store_explicit(&s->bf16_copy, c, memory_order_relaxed);
    }
    unlock();
    if (free_old)
        copy_free(old);
    return c; /* not installed: used once, freed by the caller's put */
}

void tg__bf16_copy_drop(tg_storage *s)
{
    lock();
    struct tg__bf16_copy *c = atomic_load_explicit(&s->bf16_copy, memory_order_relaxed);
    bool last = c && detach(c);
    unlock();
    if (last)
        copy_free(c);
}

void tg__bf16_copies_drop_all(void)
{
    struct tg__bf16_copy *dead = NULL;
    lock();
    while (held) {
        struct tg__bf16_copy *c = held;
        if (detach(c)) {
            c->dead = dead;
            dead = c;
        }
    }
    unlock();
    while (dead) {
        struct tg__bf16_copy *next = dead->dead;
        copy_free(dead);
        dead = next;
    }
}

int64_t tg__bf16_weights_count(size_t *bytes)
{
    int64_t n = 0;
    size_t b = 0;
    lock();
    for (struct tg__bf16_copy *c = held; c; c = c->next, n++)
        b += c->count * sizeof(uint16_t);
    unlock();
    if (bytes)
        *bytes = b;
    return n;
}

bool tg__bf16_weights_enable(bool on)
{
    bool was = enabled;
    enabled = on;
    return was;
}

int tg__gemm_weight(tg_dtype dt, tg_precision prec, int64_t m, int64_t n, int64_t k,
                    const void *a, int64_t lda, const tg_tensor *w, double beta, void *c,
                    int64_t ldc)
{
    int64_t ldw = w->ndim == 2 && w->shape[0] > 1 ? w->stride[0] : k;
    bool thin = dt == TG_FLOAT32 && prec == TG_PRECISION_BF16 && enabled && m >= 1 &&
                m <= TG_GEMM_BF16_THIN_M && n > 0 && k > 0;
    struct tg__bf16_copy *copy = thin ? acquire(w) : NULL;
    if (!copy) /* not thin, or no memory for a copy: round as the product runs */
        return tg__gemm_p(dt, prec, false, false, true, m, n, k, 1.0, a, lda, tg__ptr(w), ldw,
                          beta, c, ldc);
    int rc = tg__sgemm_bf16_thin(true, m, n, k, 1.0f, a, lda, copy->data + w->offset, ldw,
                                 (float)beta, c, ldc);
    put(copy);
    return rc;
}
