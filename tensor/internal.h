/* The library's private view of a tensor: its struct, error macros, and the
 * helpers that every kernel and op share (allocation, broadcasting, strided
 * iteration). Never installed; users see only tensor.h. */
#ifndef TG_TENSOR_INTERNAL_H
#define TG_TENSOR_INTERNAL_H

#include <tensorgrad/tensor.h>

#include <math.h>
#include <stdarg.h>

typedef struct tg_storage {
    int64_t refcount;
    void *data;
    size_t nbytes;
    /* Bytes behind data: nbytes rounded up to the storage cache's size class
     * (storage.c), so a freed buffer serves any later request of its class. */
    size_t capacity;
    struct tg_storage *next_free; /* the cache's free list */
    /* How data goes back: the hook of tg_set_allocator that was current when
     * it was allocated (NULL: the C library's free). */
    void (*free_fn)(void *ptr, void *user);
    void *free_user;
    /* Counts writes the user can see coming (tg_data, optimizer steps, ...):
     * a graph node notes it for what it keeps, and backward refuses data
     * changed since. Views share it, as they share the storage. */
    uint64_t version;
    /* The bfloat16 copy of data that bf16 precision's thin products read
     * (bf16_weights.c), made at some version; NULL when there is none. */
    struct tg__bf16_copy *_Atomic bf16_copy;
} tg_storage;

/* What a tensor's node points to begins with this: a reference count and
 * the function that frees the whole object when the count reaches zero.
 * Tensors hold and drop references to it without knowing what it is (the
 * layer above, autograd, puts its op nodes behind it). */
typedef struct tg__owner {
    int64_t refcount;
    void (*destroy)(struct tg__owner *self);
} tg__owner;

static inline void tg__owner_retain(tg__owner *o)
{
    o->refcount++;
}

static inline void tg__owner_release(tg__owner *o)
{
    if (o && --o->refcount == 0)
        o->destroy(o);
}

struct tg_tensor {
    /* Not the first word: a freed header's first word links the free list,
     * and a refcount left at 0 there lets a second release be refused. */
    tg_storage *storage;
    int64_t refcount; /* <= 0: released (TG__RELEASED in checked mode) */
    int64_t offset; /* in elements */
    int ndim;
    tg_dtype dtype;
    int64_t shape[TG_MAX_DIMS];
    int64_t stride[TG_MAX_DIMS]; /* in elements; 0 on an expanded dim */
    /* autograd */
    bool requires_grad;     /* set on leaves by the user, on outputs by ops */
    tg_tensor *grad;        /* accumulated gradient of a leaf */
    tg__owner *node;        /* the op that made this tensor, NULL on leaves */
    /* a leaf's tg_set_grad_ready_hook, and the contributions to its .grad
     * that the running backward has still to add (autograd/graph.c) */
    void (*grad_hook)(tg_tensor *leaf, void *user);
    void *grad_hook_user;
    int64_t grad_pending;
    /* A bfloat16 copy of this tensor's values that graph nodes keep for
     * their bf16 backward products (autograd/saved_bf16.c), retained, so
     * that every op reading it shares one copy; NULL when none was made. */
    tg_tensor *bf16_copy;
};

/* ---- errors ------------------------------------------------------------ */

/* Records an error (unless one is already recorded) and calls the handler.
 * Always returns NULL so that `return tg__fail(...)` reads naturally. */
void *tg__fail(tg_error code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Writes "[2,3]" for t's shape into buf. */
const char *tg__shape_str(char *buf, size_t size, int ndim, const int64_t *shape);
#define TG_SHAPE_STR(t) \
    tg__shape_str((char[96]){0}, 96, (t)->ndim, (t)->shape)

/* Validation, in the dav1d style: fail with the function name and condition. */
/* A tensor argument must also be alive: one already released is refused. */
#define TG_CHECK_NULL(t)                                                      \
    do {                                                                      \
        if (!(t))                                                             \
            return tg__fail(TG_ERR_NULL, "%s: " #t " is NULL", __func__);     \
        if (TG__DEAD(t)) {                                                    \
            TG__REPORT_DEAD(t);                                               \
            return NULL;                                                      \
        }                                                                     \
    } while (0)
#define TG_CHECK_NULL_STATUS(t)                                               \
    do {                                                                      \
        if (!(t)) {                                                           \
            tg__fail(TG_ERR_NULL, "%s: " #t " is NULL", __func__);            \
            return -1;                                                        \
        }                                                                     \
        if (TG__DEAD(t)) {                                                    \
            TG__REPORT_DEAD(t);                                               \
            return -1;                                                        \
        }                                                                     \
    } while (0)

/* ---- released tensors (checked.c) ----------------------------------------- */

/* Checked mode (TG_CHECKED=1 or -Dchecked=true): released headers are kept
 * poisoned in a quarantine, never reused while there. */
extern bool tg__checked_on;
#define TG__RELEASED (-INT64_C(0x7e1ea5ed))
/* Where a call came from: file:line when the caller's build passed them,
 * else a code address; how, when set, is said first. */
typedef struct {
    const void *addr;
    const char *file;
    int line;
    const char *how;
} tg__site;
/* Keeps a header whose last reference went, poisoned. */
void tg__quarantine(tg_tensor *t, const tg__site *site);
/* Records TG_ERR_STATE "fn: what already released (called from ...; released
 * before at ...)", also on stderr in checked mode. what NULL: "an input
 * (dtype shape) was". */
void tg__report_released(const char *fn, const char *what, const tg_tensor *t,
                         const tg__site *now);
/* Drops a reference on behalf of a call made at site. */
void tg__release_at_site(tg_tensor *t, const tg__site *site);

static inline bool tg__dead_tensor(const tg_tensor *t) { return t->refcount <= 0; }
static inline bool tg__dead_other(const void *p) { (void)p; return false; }
/* True when t is a tensor that was released (other pointers: false). */
#define TG__DEAD(t) _Generic((t), tg_tensor *: tg__dead_tensor,                  \
                             const tg_tensor *: tg__dead_tensor,                 \
                             default: tg__dead_other)(t)
#define TG__REPORT_DEAD(t)                                                    \
    tg__report_released(__func__, "input " #t " was", (const tg_tensor *)(const void *)(t), \
                        &(tg__site){.addr = __builtin_return_address(0)})
/* For ops whose tensors come in an array or are optional: -1 (with the
 * report naming fn and what, e.g. "xs[2] was") when t is a released tensor,
 * else 0. NULL passes. */
#define TG__CHECK_ALIVE(fn, what, t)                                          \
    ((t) && tg__dead_tensor(t)                                                \
         ? (tg__report_released(fn, what, (t),                                \
                                &(tg__site){.addr = __builtin_return_address(0)}), -1) \
         : 0)

/* ---- scopes -------------------------------------------------------------- */

/* Every public function returns its new tensor through this: it records the
 * reference in the innermost scope, if one is open. NULL passes through. */
tg_tensor *tg__ret(tg_tensor *t);

/* ---- allocation --------------------------------------------------------- */

/* Zeroed memory for a tensor header or a graph node, from a per-thread list
 * of freed blocks when size is small; give it back with the same size.
 * NULL when memory runs out. */
void *tg__small_alloc(size_t size);
void tg__small_free(void *p, size_t size);

/* A new storage of nbytes (> 0), zero-filled when zero is set, from the
 * cache of released buffers or the current allocator (storage.c); NULL
 * when memory runs out. tg__storage_free sends one back to the cache or
 * to where it came from. */
tg_storage *tg__storage_new(size_t nbytes, bool zero);
void tg__storage_free(tg_storage *s);
/* The storage cache's account, in bytes: the cacheable buffers in use, the
 * most ever in use at once, and those waiting in the cache. For tests. */
void tg__storage_cache_bytes(size_t *in_use, size_t *high_mark, size_t *cached);

/* A new contiguous tensor, zero-filled. NULL with TG_ERR_NOMEM on failure.
 * Storage comes from a cache of freed buffers when one fits (storage.c). */
tg_tensor *tg__empty(tg_dtype dtype, int ndim, const int64_t *shape);
tg_tensor *tg__empty_like(const tg_tensor *t);
/* The same with the elements left unset: for kernels that write every one
 * of them (pointwise, copies, softmax...), never for ones that accumulate. */
tg_tensor *tg__empty_uninit(tg_dtype dtype, int ndim, const int64_t *shape);
tg_tensor *tg__empty_uninit_like(const tg_tensor *t);
/* True, once, when a tg__empty on this thread ran out of memory since the
 * last call: lets the graph reword the error with the op's name. */
bool tg__take_nomem(void);
/* A new header over t's storage with the given geometry (no autograd state). */
tg_tensor *tg__view(const tg_tensor *t, int ndim, const int64_t *shape,
                    const int64_t *stride, int64_t offset);
/* A view of t with t's own geometry but no autograd state: what an op saves
 * of its own output without making output -> node -> output a cycle. */
tg_tensor *tg__alias(const tg_tensor *t);
/* A header with t's shape, strides, dtype and graph link but no storage:
 * what a graph node keeps of an input whose data its backward never reads,
 * so that the data goes as soon as nothing else holds it. NULL when out of
 * memory (nothing recorded). Only its metadata may be used. */
tg_tensor *tg__husk(const tg_tensor *t);
/* t itself (retained) when contiguous, otherwise a contiguous copy. */
tg_tensor *tg__contiguous(const tg_tensor *t);
/* dst[i] = src[i] for two tensors of one shape, any layouts, converting the
 * dtype element by element when they differ. */
void tg__copy(tg_tensor *dst, const tg_tensor *src);
/* A contiguous copy of t converted to dtype. */
tg_tensor *tg__convert(const tg_tensor *t, tg_dtype dtype);
/* tg_dtype_size, inlined: kernels ask for it once per row. */
static inline size_t tg__elem_size(tg_dtype dtype)
{
    return dtype == TG_BOOL ? 1 : dtype == TG_BFLOAT16 ? 2 : dtype == TG_FLOAT32 ? 4 : 8;
}
/* Frees the bfloat16 copy of s (bf16_weights.c) unless a product still
 * reads it, which then frees it; nothing when s has none. */
void tg__bf16_copy_drop(tg_storage *s);
/* The same for every storage: tg_release_cached_memory calls it. */
void tg__bf16_copies_drop_all(void);
/* Marks t's storage (and so every view of it) as written in place: call it
 * wherever the library writes into a tensor the user holds or hands out
 * mutable access to one, never for outputs it is still filling. */
static inline void tg__bump_version(const tg_tensor *t)
{
    if (t && t->storage) {
        t->storage->version++;
        if (t->storage->bf16_copy) /* stale now: its memory goes at once */
            tg__bf16_copy_drop(t->storage);
    }
}
/* The version of t's storage; 0 for a husk, which has none. */
static inline uint64_t tg__version(const tg_tensor *t)
{
    return t && t->storage ? t->storage->version : 0;
}
/* Pointer to t's first element (at its offset), whatever its layout. */
static inline void *tg__ptr(const tg_tensor *t)
{
    return (char *)t->storage->data + (size_t)t->offset * tg__elem_size(t->dtype);
}
int64_t tg__numel(int ndim, const int64_t *shape);
/* Row-major strides for shape. */
void tg__contiguous_strides(int ndim, const int64_t *shape, int64_t *stride);
bool tg__is_float(tg_dtype dtype);
/* Validates a shape argument: returns 0, or records an error for fn. */
int tg__check_shape(const char *fn, int ndim, const int64_t *shape);
/* Wraps a negative dim; -1 (and an error for fn) when out of range. */
int tg__wrap_dim(const char *fn, int dim, int ndim);
/* Fails unless t has a float dtype. */
int tg__check_float(const char *fn, const tg_tensor *t);

/* ---- threads ------------------------------------------------------------ */

/* Loops over more elements than this run on OpenMP threads (static
 * partitioning). Branch on it in C rather than with an if() clause: a
 * parallel region whose clause is false still builds a team, a cost a tiny
 * op pays in full; and libgomp's workers spin after each region, taking a
 * core from OpenBLAS, so only work worth it gets a region. */
#define TG_PAR_MIN 32768

/* The team size a parallel loop started here would get: OpenMP's limit,
 * or 1 inside a parallel region (regions never nest) or without OpenMP. */
int tg__threads_free(void);

/* Runs the body (the last argument) over ranges [r0, r1) of [0, count):
 * in one piece when work is below min_work, else one contiguous range per
 * thread, the first to the first thread (static partitioning). Ops that
 * split their rows this way, as the narrow GEMM does too, tend to find
 * each half of a buffer in the cache of the core that wrote it. */
#define TG_FOR_SPLIT(count, work, min_work, r0, r1, ...)                      \
    do {                                                                      \
        int64_t parts_ = (work) < (min_work) ? 1 : tg__threads_free();        \
        parts_ = parts_ < (count) ? parts_ : (count);                         \
        if (parts_ <= 1) {                                                    \
            int64_t r0 = 0, r1 = (count);                                     \
            __VA_ARGS__;                                                      \
        } else {                                                              \
            _Pragma("omp parallel for num_threads(parts_) schedule(static)")  \
            for (int64_t q_ = 0; q_ < parts_; q_++) {                         \
                int64_t r0 = (count) * q_ / parts_;                           \
                int64_t r1 = (count) * (q_ + 1) / parts_;                     \
                __VA_ARGS__;                                                  \
            }                                                                 \
        }                                                                     \
    } while (0)

/* Elementwise work over [0, n): the body with lo and len naming each
 * thread's span, on the team above TG_PAR_MIN elements. Each element's
 * result is its own, so any thread count gives the same result. */
#define TG_FOR_BLOCKS(n, lo, len, ...)                                        \
    TG_FOR_SPLIT(n, n, TG_PAR_MIN + 1, lo, hi_, {                             \
        int64_t len = hi_ - lo;                                               \
        __VA_ARGS__;                                                          \
    })

/* Rows [r0, r1) of rows rows, each costing about row_cost simple element
 * operations (an add is 1, an exp about 8), on the team from
 * TG_ROWS_PAR_MIN of them. */
#define TG_ROWS_PAR_MIN 8192
#define TG_FOR_ROWS(rows, row_cost, r0, r1, ...)                              \
    TG_FOR_SPLIT(rows, (rows) * (row_cost), TG_ROWS_PAR_MIN, r0, r1, __VA_ARGS__)

/* Per-thread state that ops touch on every call: initial-exec TLS is one
 * load where the shared library's default model calls __tls_get_addr. For
 * small variables only (the static TLS surplus for dlopen is limited). */
#define TG_TLS _Thread_local __attribute__((tls_model("initial-exec")))

/* ---- broadcasting and strided loops ------------------------------------ */

/* The NumPy broadcast of two shapes into (ndim, shape); -1 and an error
 * naming fn and both shapes when they do not broadcast. */
int tg__broadcast_shape(const char *fn, const tg_tensor *a, const tg_tensor *b,
                        int *ndim, int64_t *shape);
/* t's strides as seen when broadcast to (ndim, shape): 0 on new or size-1 dims. */
void tg__broadcast_strides(const tg_tensor *t, int ndim, const int64_t *shape,
                           int64_t *stride);

/* Walks the rows of an n-d index space for up to 4 operands at once: each
 * step gives every operand's offset of the row start; the innermost dim is
 * left to the caller's loop (len elements, inner stride per operand).
 *
 *   tg__iter it; tg__iter_init(&it, ndim, shape, 2, strides);
 *   if (it.len) do { for (j < it.len) ... base + it.off[k] + j * it.inner[k] }
 *   while (tg__iter_next(&it));
 */
#define TG_ITER_MAX_OPS 4
typedef struct {
    int ndim; /* outer dims (all but the innermost) */
    int nops;
    int64_t shape[TG_MAX_DIMS];
    int64_t stride[TG_ITER_MAX_OPS][TG_MAX_DIMS];
    int64_t index[TG_MAX_DIMS];
    int64_t off[TG_ITER_MAX_OPS];
    int64_t inner[TG_ITER_MAX_OPS];
    int64_t len; /* elements in one row; 0 when the space is empty */
} tg__iter;
void tg__iter_init(tg__iter *it, int ndim, const int64_t *shape, int nops,
                   const int64_t (*strides)[TG_MAX_DIMS]);
bool tg__iter_next(tg__iter *it);

#endif
