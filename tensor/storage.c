/* Where tensor data lives: storage from the C library or the user's
 * allocator hook, a cache of released buffers by size class that a
 * training step's next iteration reuses, and the small blocks that tensor
 * headers and graph nodes come from. */
#include "internal.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* The storage allocator (tensor.h); NULL hooks mean the C library. */
static tg_alloc_fn alloc_hook;
static tg_free_fn free_hook;
static void *hook_user;

void tg_set_allocator(tg_alloc_fn alloc, tg_free_fn free_fn, void *user)
{
    bool on = alloc && free_fn;
    alloc_hook = on ? alloc : NULL;
    free_hook = on ? free_fn : NULL;
    hook_user = on ? user : NULL;
}

/* ---- the storage cache ----------------------------------------------------
 * A training step frees and allocates the same buffer sizes every step, so
 * released storage (struct and data together) waits on a free list per size
 * class instead of going back to malloc: a warmed-up step then allocates no
 * tensor data. Only buffers of the C library's malloc are cached, and only
 * handed out while no allocator hook is set, so a hook sees every storage it
 * serves being allocated and freed. Size classes round a request up by at
 * most 1/8: 64-byte steps up to 512 bytes, then 8 classes per power of 2.
 *
 * What the cache holds and what is in use never pass together the most
 * that was ever in use at once (the high mark): a buffer that has to come
 * from the C library first sends the largest cached ones back to it. A
 * step whose sizes differ from the last one's (the first step, a switch of
 * precision, a bf16 copy kept in place of a float32 input) then costs no
 * more memory than its own peak, where a cache that kept every size it saw
 * would add the buffers of one phase to the peak of another. Buffers of a
 * MiB and more are mapped from the kernel rather than taken from malloc's
 * heap, so that one sent back is memory the process no longer holds. */

#define CACHE_CLASSES 420
#define CACHE_LIMIT ((size_t)1 << 30) /* bytes kept at most */
#define BORROW_CLASSES 8           /* classes above a request's own it may take */

/* The caches below are held for a few instructions and rarely contended:
 * a spin lock costs half what a mutex does on the path every op takes. */
static void spin_lock(atomic_flag *f)
{
    while (atomic_flag_test_and_set_explicit(f, memory_order_acquire))
        sched_yield();
}

static void spin_unlock(atomic_flag *f) { atomic_flag_clear_explicit(f, memory_order_release); }

static atomic_flag cache_busy = ATOMIC_FLAG_INIT;
#define cache_lock() spin_lock(&cache_busy)
#define cache_unlock() spin_unlock(&cache_busy)
static tg_storage *cache_bins[CACHE_CLASSES];
static size_t cache_bytes;
static size_t used_bytes, used_high; /* cacheable buffers in use, and the high mark */

/* The size class of an n-byte request (n > 0) and the bytes it allocates. */
static int size_class(size_t n, size_t *capacity)
{
    if (n <= 512) {
        size_t c = (n + 63) / 64;
        *capacity = c * 64;
        return (int)c - 1;
    }
    int bits = 64 - __builtin_clzll((unsigned long long)(n - 1)); /* 2^(bits-1) < n <= 2^bits */
    size_t base = (size_t)1 << (bits - 1), step = base >> 3;
    size_t sub = (n - base + step - 1) / step; /* 1..8 */
    *capacity = base + sub * step;
    return 8 + (bits - 10) * 8 + (int)sub - 1;
}

/* Tells the memory checkers that a cached buffer is off limits, or that a
 * reused one holds no defined values yet. */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define CACHE_HIDE(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define CACHE_SHOW(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#elif defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#define CACHE_HIDE(p, n) VALGRIND_MAKE_MEM_NOACCESS(p, n)
#define CACHE_SHOW(p, n) VALGRIND_MAKE_MEM_UNDEFINED(p, n)
#endif
#endif
#ifndef CACHE_HIDE
#define CACHE_HIDE(p, n) ((void)(p), (void)(n))
#define CACHE_SHOW(p, n) ((void)(p), (void)(n))
#endif
/* Under a memory checker, headers and nodes go straight back to free, so
 * that a tensor released twice is reported rather than spliced into a list. */
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_CHECKER() true
#elif defined(RUNNING_ON_VALGRIND)
#define UNDER_CHECKER() (RUNNING_ON_VALGRIND != 0)
#else
#define UNDER_CHECKER() false
#endif

/* A cached storage of nbytes' class or, failing that, of one of the next
 * classes up to twice the size, or NULL. Borrowing a larger buffer is what
 * lets a size needed at one point of a step reuse a size freed at another:
 * a training step's parameter gradients (released by zero_grad) and its
 * activations take turns in the same buffers instead of each keeping its
 * own. A borrowed buffer goes back to its own class when freed. */
static tg_storage *cache_take(size_t nbytes)
{
    size_t capacity;
    int c = size_class(nbytes, &capacity);
    if (c >= CACHE_CLASSES)
        return NULL;
    cache_lock();
    tg_storage *s = NULL;
    int last = c + BORROW_CLASSES < CACHE_CLASSES ? c + BORROW_CLASSES : CACHE_CLASSES - 1;
    for (int b = c; b <= last && !s; b++) {
        s = cache_bins[b];
        if (s) {
            cache_bins[b] = s->next_free;
            cache_bytes -= s->capacity;
            used_bytes += s->capacity;
        }
    }
    cache_unlock();
    if (s)
        CACHE_SHOW(s->data, s->capacity);
    return s;
}

/* From this size up, and not under a memory checker (which tracks the
 * heap, not mappings), tensor data is mapped rather than malloc'd. */
#define MAPPED_FROM ((size_t)1 << 20)

static bool mapped(size_t capacity) { return capacity >= MAPPED_FROM && !UNDER_CHECKER(); }

/* capacity bytes for tensor data (zeroed when zero is set), NULL when
 * memory runs out; data_free gives them back. */
static void *data_alloc(size_t capacity, bool zero)
{
    if (mapped(capacity)) { /* fresh mappings are zero */
        void *p = mmap(NULL, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
        return p == MAP_FAILED ? NULL : p;
    }
    return zero ? calloc(1, capacity) : malloc(capacity);
}

static void data_free(void *p, size_t capacity)
{
    if (mapped(capacity))
        munmap(p, capacity);
    else
        free(p);
}

/* Counts a buffer of capacity bytes that is about to come from the C
 * library as in use, raising the high mark if it does, and sends cached
 * buffers back until the cache fits under the mark beside what is in use:
 * each time the smallest one that covers what is over the mark, or the
 * largest when none does, so that a small request does not cost a large
 * buffer that a later one of its size would have reused. */
static void cache_make_room(size_t capacity)
{
    tg_storage *give = NULL;
    cache_lock();
    used_bytes += capacity;
    if (used_bytes > used_high)
        used_high = used_bytes;
    while (cache_bytes > 0 && used_bytes + cache_bytes > used_high) {
        size_t over = used_bytes + cache_bytes - used_high;
        int pick = -1;
        for (int c = 0; c < CACHE_CLASSES && pick < 0; c++)
            if (cache_bins[c] && cache_bins[c]->capacity >= over)
                pick = c;
        for (int c = CACHE_CLASSES - 1; c >= 0 && pick < 0; c--)
            if (cache_bins[c])
                pick = c;
        tg_storage *s = cache_bins[pick];
        cache_bins[pick] = s->next_free;
        cache_bytes -= s->capacity;
        s->next_free = give;
        give = s;
    }
    cache_unlock();
    while (give) {
        tg_storage *s = give;
        give = s->next_free;
        CACHE_SHOW(s->data, s->capacity);
        data_free(s->data, s->capacity);
        free(s);
    }
}

/* Keeps s for reuse; false when it is not cacheable or the cache is full. */
static bool cache_put(tg_storage *s)
{
    size_t capacity;
    if (s->free_fn || !s->capacity)
        return false;
    int c = size_class(s->capacity, &capacity);
    if (c >= CACHE_CLASSES || capacity != s->capacity)
        return false;
    cache_lock();
    used_bytes -= capacity;
    bool fits = cache_bytes + capacity <= CACHE_LIMIT;
    if (fits) {
        CACHE_HIDE(s->data, capacity);
        s->next_free = cache_bins[c];
        cache_bins[c] = s;
        cache_bytes += capacity;
    }
    cache_unlock();
    return fits;
}

void tg_release_cached_memory(void)
{
    tg__bf16_copies_drop_all();
    cache_lock();
    for (int c = 0; c < CACHE_CLASSES; c++) {
        while (cache_bins[c]) {
            tg_storage *s = cache_bins[c];
            cache_bins[c] = s->next_free;
            CACHE_SHOW(s->data, s->capacity);
            data_free(s->data, s->capacity);
            free(s);
        }
    }
    cache_bytes = 0;
    cache_unlock();
}

/* ---- small blocks ----------------------------------------------------------
 * Tensor headers and graph nodes come and go once per op; a list of freed
 * blocks of two sizes serves them without malloc's bins. The lists are
 * global, so leak checkers see them and a thread's exit strands nothing. A
 * block's first word links it; the checkers are told the rest is off limits. */

enum { SMALL_CLASSES = 2, SMALL_KEEP = 8192 };
static const size_t small_size[SMALL_CLASSES] = {256, 512};

typedef struct small_block {
    struct small_block *next;
} small_block;

static small_block *small_head[SMALL_CLASSES];
static int small_count[SMALL_CLASSES];
static atomic_flag small_busy = ATOMIC_FLAG_INIT;

static int small_class(size_t size)
{
    return size <= small_size[0] ? 0 : size <= small_size[1] ? 1 : -1;
}

void *tg__small_alloc(size_t size)
{
    int c = small_class(size);
    if (c < 0)
        return calloc(1, size);
    spin_lock(&small_busy);
    small_block *b = small_head[c];
    if (b) {
        small_head[c] = b->next;
        small_count[c]--;
    }
    spin_unlock(&small_busy);
    if (!b)
        return calloc(1, small_size[c]);
    CACHE_SHOW(b, small_size[c]);
    memset(b, 0, size);
    return b;
}

void tg__small_free(void *p, size_t size)
{
    int c = small_class(size);
    if (!p)
        return;
    if (c < 0 || UNDER_CHECKER()) {
        free(p);
        return;
    }
    small_block *b = p;
    spin_lock(&small_busy);
    bool keep = small_count[c] < SMALL_KEEP;
    if (keep) {
        b->next = small_head[c];
        small_head[c] = b;
        small_count[c]++;
        CACHE_HIDE(b + 1, small_size[c] - sizeof *b);
    }
    spin_unlock(&small_busy);
    if (!keep)
        free(p);
}


tg_storage *tg__storage_new(size_t nbytes, bool zero)
{
    tg_storage *s = alloc_hook ? NULL : cache_take(nbytes);
    if (s) {
        s->refcount = 0;
        s->nbytes = nbytes;
        s->next_free = NULL;
        s->version = 0;
        if (zero)
            memset(s->data, 0, nbytes);
        return s;
    }
    s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->nbytes = nbytes;
    if (alloc_hook) {
        s->free_fn = free_hook;
        s->free_user = hook_user;
        s->capacity = nbytes;
        s->data = alloc_hook(nbytes, hook_user);
        if (s->data && zero)
            memset(s->data, 0, nbytes);
    } else {
        bool counted = size_class(nbytes, &s->capacity) < CACHE_CLASSES;
        if (counted)
            cache_make_room(s->capacity);
        for (int attempt = 0; attempt < 2 && !s->data; attempt++) {
            s->data = data_alloc(s->capacity, zero);
            if (!s->data && attempt == 0)
                tg_release_cached_memory(); /* the cache gives way to live tensors */
        }
        if (!s->data && counted) {
            cache_lock();
            used_bytes -= s->capacity;
            cache_unlock();
        }
    }
    if (!s->data) {
        free(s);
        return NULL;
    }
    return s;
}

void tg__storage_free(tg_storage *s)
{
    if (s->bf16_copy)
        tg__bf16_copy_drop(s);
    if (cache_put(s))
        return;
    if (s->free_fn)
        s->free_fn(s->data, s->free_user);
    else
        data_free(s->data, s->capacity);
    free(s);
}

void tg__storage_cache_bytes(size_t *in_use, size_t *high_mark, size_t *cached)
{
    cache_lock();
    *in_use = used_bytes;
    *high_mark = used_high;
    *cached = cache_bytes;
    cache_unlock();
}
