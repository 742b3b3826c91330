/* tensorgrad tensors: the data type every other part builds on.
 * A tensor is a reference-counted view (sizes, strides, offset) over a
 * reference-counted storage, so views share memory and copy nothing.
 *
 * Ownership, in one sentence: every function that returns a tensor returns
 * a new reference, arguments are borrowed, and tg_release(NULL) does nothing.
 * Inside a scope (see autograd.h) the scope holds those references for you.
 *
 * Errors: no function here exits, aborts or crashes on bad input. A failing
 * call returns NULL (or a negative status) and records a thread-local code
 * and a message that names the function and the values involved, e.g.
 *   tg_matmul: inner dimensions differ: [2,3] @ [4,5]
 * A call given a NULL tensor returns NULL and keeps the first error, so a
 * chain of calls needs one check at its end.
 */
#ifndef TG_TENSOR_H
#define TG_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <tensorgrad/tg_version.h> /* TG_VERSION_MAJOR, _MINOR, _PATCH, _STRING */

#ifdef __cplusplus
extern "C" {
#endif

/* Marks a public function: the library is built with hidden visibility, so
 * what a public header declares with TG_API is all it exports. */
#if defined(__GNUC__) || defined(__clang__)
#define TG_API __attribute__((visibility("default")))
#else
#define TG_API
#endif

#define TG_MAX_DIMS 8

typedef struct tg_tensor tg_tensor;

typedef enum {
    TG_FLOAT32,
    TG_FLOAT64,
    TG_INT64, /* indices: embedding rows, class targets */
    TG_BOOL,  /* masks: true means "masked" */
    /* bfloat16: 2 bytes, the upper half of a float32 (8 exponent bits, 7
     * mantissa bits). A storage type: creation, tg_to_dtype (both ways,
     * differentiable, rounding to nearest even), tg_copy_to / tg_copy_from,
     * printing and safetensors take it; every other op refuses it with
     * TG_ERR_DTYPE. tg_from_data and tg_copy_* read and write its raw bits
     * as uint16_t. */
    TG_BFLOAT16,
} tg_dtype;

/* ---- matmul precision ----------------------------------------------------- */
/* Under TG_PRECISION_BF16 the float32 products of tg_matmul, tg_affine and
 * the fused affine ops (tg_gelu_affine, tg_layer_norm_affine,
 * tg_rms_norm_affine, tg_swiglu_affine), forward and backward, round their
 * operands to bfloat16 (nearest even) and accumulate in float32, as
 * PyTorch's bf16 autocast does for Linear layers; outputs stay float32.
 * Everything else (float64, norms, softmax, losses, the fused attention's
 * tile products, optimizers) is unaffected. Per thread, like grad mode;
 * the graph records the setting with each op, so backward uses the
 * forward's whatever the setting is when it runs. A forward product of
 * the affine ops with 1-4 rows (generating a token) keeps a bfloat16 copy
 * of its weight's storage and reads that on later calls, until a write
 * the library sees (tg_data, tg_copy_from, an optimizer step...) or the
 * storage's end frees it; tg_release_cached_memory frees them all.
 * Returns the previous
 * setting; an unknown value is TG_ERR_VALUE and changes nothing:
 *   tg_precision was = tg_set_matmul_precision(TG_PRECISION_BF16);
 *   ... forward, backward ...; tg_set_matmul_precision(was); */
typedef enum {
    TG_PRECISION_FLOAT32 = 0,
    TG_PRECISION_BF16 = 1,
} tg_precision;
TG_API tg_precision tg_set_matmul_precision(tg_precision p);
TG_API tg_precision tg_matmul_precision(void);
/* "fp32" or "bf16" ("unknown" for anything else). */
TG_API const char *tg_precision_name(tg_precision p);

/* ---- errors ------------------------------------------------------------ */

typedef enum {
    TG_OK = 0,
    TG_ERR_NULL,     /* a required argument was NULL */
    TG_ERR_SHAPE,    /* shapes do not fit together */
    TG_ERR_DIM,      /* a dimension index is out of range */
    TG_ERR_DTYPE,    /* a dtype the function does not take */
    TG_ERR_INDEX,    /* an index value out of range */
    TG_ERR_VALUE,    /* an argument value out of its domain */
    TG_ERR_STATE,    /* misuse of the autograd graph or of an object */
    TG_ERR_NOMEM,    /* an allocation failed or a size overflowed */
    TG_ERR_IO,       /* reading or writing a file failed */
} tg_error;

/* The code and message of the first error recorded on this thread since the
 * last tg_error_clear(). The message is "" when there is none; the pointer
 * stays valid until the next error or clear on this thread. */
TG_API tg_error tg_error_code(void);
TG_API const char *tg_error_message(void);
TG_API void tg_error_clear(void);
TG_API const char *tg_error_name(tg_error code);

/* Called on every recorded error (the first of a chain and later ones),
 * for example to break in a debugger or abort during development.
 * NULL removes the handler. The handler is process-wide. */
typedef void (*tg_error_handler)(tg_error code, const char *message, void *user);
TG_API void tg_set_error_handler(tg_error_handler handler, void *user);

/* ---- lifetime ---------------------------------------------------------- */

/* Adds a reference and returns t (NULL stays NULL). */
TG_API tg_tensor *tg_retain(const tg_tensor *t);
/* Drops a reference; the last one frees the tensor. NULL does nothing. */
TG_API void tg_release(tg_tensor *t);
/* Tensors alive in the process: tests assert it returns to its old value. */
TG_API int64_t tg_live_tensors(void);

/* ---- checked mode ------------------------------------------------------- */
/* Releasing a tensor twice, or using one after its last reference (or its
 * scope) went, is a bug that normally reads or corrupts freed memory. In
 * checked mode the library catches it: a released tensor header is kept,
 * poisoned, in a quarantine rather than reused, and a later tg_release,
 * tg_retain, accessor or op on it fails with TG_ERR_STATE and also prints
 * the message to stderr:
 *   tensorgrad: tg_release: tensor already released (called from
 *     ./app+0x1a2b; released before at ./app+0x19f0)
 *   tensorgrad: tg_reshape: input x was already released (called from
 *     ./app+0x1c52; released before at the end of a scope, tg_scope_end
 *     called from ./app+0x1c40)
 * Call sites are module+offset (give them to `addr2line -e module offset`),
 * or file:line for releases in code compiled with -DTG_CHECKED, which makes
 * tg_release a macro over tg_release_at. An op may find a released input
 * in a check shared by many ops, and then names the input by its dtype and
 * shape and the call site by an address within the library. The live count
 * is never decremented twice.
 * Checked mode is on when the environment has TG_CHECKED=1 as the library
 * loads (TG_CHECKED=0 turns it off), or by default in a library configured
 * with -Dchecked=true. Without it a second release is still refused while
 * the header has not been reused, but nothing is printed.
 *   The quarantine holds the most recently released headers, as many as fit
 * in 256 MiB (about 840,000; 320 bytes each with their records), or in
 * TG_CHECKED_QUARANTINE_MB MiB when the environment sets it as the library
 * loads. It grows as releases come, so a short program uses no more than its
 * releases need. A tensor released again after that many other releases
 * (a scope ending over a graph larger than that, say) is past it: its header
 * may have gone back to the allocator, and the second release is then
 * neither caught nor safe. */
TG_API bool tg_checked(void);
TG_API void tg_release_at(tg_tensor *t, const char *file, int line);
#ifdef TG_CHECKED
#define tg_release(t) tg_release_at((t), __FILE__, __LINE__)
#endif

/* ---- memory ------------------------------------------------------------ */
/* Tensor storage (the elements, not the small headers) comes from this
 * allocator: alloc(size, user) returns size bytes (size > 0) or NULL, and
 * free(ptr, user) gives them back. A failing alloc makes the call that needed
 * the memory return NULL with TG_ERR_NOMEM and a message naming the op and
 * the shape, e.g. "tg_matmul: out of memory for 6 elements of float32 [2,3]";
 * nothing leaks. Each storage is freed by the free of the allocator that
 * made it, so the hook may change while tensors live. alloc NULL (or free
 * NULL) restores malloc and free. Process-wide: set it before other threads
 * use the library. Tests use it to fail the Nth allocation. */
typedef void *(*tg_alloc_fn)(size_t size, void *user);
typedef void (*tg_free_fn)(void *ptr, void *user);
TG_API void tg_set_allocator(tg_alloc_fn alloc, tg_free_fn free, void *user);
/* Storage that malloc made is not freed when its last tensor goes: it waits
 * (up to 1 GiB in all) to serve a later tensor of about the same size, or
 * of up to half its size when none of the request's own size waits, so
 * that a training step that repeats allocates nothing once warmed up. A hook
 * set with tg_set_allocator bypasses this cache. This frees what it holds
 * (it also empties itself when malloc fails), and also the bfloat16 copies
 * of weights that bf16 matmul precision keeps for generation (see
 * tg_set_matmul_precision), which the next such product makes again.
 * Thread-safe. */
TG_API void tg_release_cached_memory(void);

/* ---- scopes -------------------------------------------------------------- */
/* Model code builds a forward pass one op per line without releasing each
 * intermediate: between tg_scope_begin() and tg_scope_end() every tensor a
 * function returns is also recorded in the scope, and the scope releases that
 * reference when it ends. So inside a scope you release nothing you did not
 * tg_retain yourself. Scopes nest to any depth and are per thread.
 *
 *   tg_scope_begin();
 *   tg_tensor *h = tg_relu(tg_matmul(x, w));   // no releases needed
 *   tg_tensor *y = tg_scope_end_keep(h);      // y outlives the scope
 *
 * tg_scope_end_keep(t) ends the scope but hands t's reference to the
 * enclosing scope, or to the caller when there is none. tg_retain(t) inside a
 * scope gives you a reference of your own that you must release. */
TG_API void tg_scope_begin(void);
/* Ends the innermost scope; -1 with TG_ERR_STATE when none is open. */
TG_API int tg_scope_end(void);
TG_API tg_tensor *tg_scope_end_keep(tg_tensor *t);
/* Scopes open on this thread. */
TG_API int tg_scope_depth(void);

/* ---- creation ---------------------------------------------------------- */
/* shape has ndim entries, 0 <= ndim <= TG_MAX_DIMS, each >= 0. */

TG_API tg_tensor *tg_zeros(tg_dtype dtype, int ndim, const int64_t *shape);
TG_API tg_tensor *tg_ones(tg_dtype dtype, int ndim, const int64_t *shape);
TG_API tg_tensor *tg_full(tg_dtype dtype, int ndim, const int64_t *shape, double value);
/* [start, start+step, ...) up to but excluding end: a 1-D tensor. */
TG_API tg_tensor *tg_arange(tg_dtype dtype, double start, double end, double step);
/* Copies numel(shape) elements from data, which holds values of `dtype`
 * (float, double, int64_t or bool) in row-major order. */
TG_API tg_tensor *tg_from_data(tg_dtype dtype, int ndim, const int64_t *shape, const void *data);
/* A 0-dim tensor holding value. */
TG_API tg_tensor *tg_scalar(tg_dtype dtype, double value);
/* The causal mask for n positions: bool [n, n], true above the diagonal
 * (a query may not look at later keys). */
TG_API tg_tensor *tg_causal_mask(int64_t n);
/* The same for L queries and S keys: bool [L, S], true where j > i (the
 * first L rows and S columns of tg_causal_mask(max(L, S))). A negative size
 * is TG_ERR_SHAPE. */
TG_API tg_tensor *tg_causal_mask_rect(int64_t L, int64_t S);

/* ---- random numbers ----------------------------------------------------- */
/* A seeded generator (xoshiro256**): the same seed gives the same numbers on
 * every machine and at every thread count. Not shared between threads. */

typedef struct tg_rng tg_rng;
TG_API tg_rng *tg_rng_new(uint64_t seed);
TG_API void tg_rng_free(tg_rng *rng);
TG_API void tg_rng_seed(tg_rng *rng, uint64_t seed);
TG_API uint64_t tg_rng_next(tg_rng *rng);    /* 64 random bits */
TG_API double tg_rng_uniform01(tg_rng *rng); /* in [0, 1) */
TG_API double tg_rng_normal(tg_rng *rng);    /* standard normal */
/* The generator's whole state, to save and restore a run bit for bit. */
TG_API void tg_rng_get_state(const tg_rng *rng, uint64_t state[4]);
TG_API void tg_rng_set_state(tg_rng *rng, const uint64_t state[4]);
/* The same state as an int64 [4] tensor holding the four words' bits, to
 * save in a checkpoint beside the parameters; and back from one (anything but
 * an int64 tensor of 4 elements is TG_ERR_SHAPE or TG_ERR_DTYPE). */
TG_API tg_tensor *tg_rng_state_tensor(const tg_rng *rng);
TG_API int tg_rng_set_state_tensor(tg_rng *rng, const tg_tensor *state);

/* Uniform in [low, high), and normal with mean and std: float dtypes. */
TG_API tg_tensor *tg_uniform(tg_rng *rng, tg_dtype dtype, int ndim, const int64_t *shape,
                             double low, double high);
TG_API tg_tensor *tg_rand(tg_rng *rng, tg_dtype dtype, int ndim, const int64_t *shape);
TG_API tg_tensor *tg_randn(tg_rng *rng, tg_dtype dtype, int ndim, const int64_t *shape);

/* ---- accessors ---------------------------------------------------------- */
/* Given NULL these return 0, -1 or NULL and record TG_ERR_NULL. */

TG_API int tg_ndim(const tg_tensor *t);
/* Size of dim d; negative d counts from the end. -1 on error. */
TG_API int64_t tg_size(const tg_tensor *t, int d);
/* Pointer to the t's ndim sizes (valid while t lives). */
TG_API const int64_t *tg_shape(const tg_tensor *t);
TG_API const int64_t *tg_strides(const tg_tensor *t);
TG_API int64_t tg_numel(const tg_tensor *t);
TG_API tg_dtype tg_dtype_of(const tg_tensor *t);
TG_API const char *tg_dtype_name(tg_dtype dtype);
TG_API size_t tg_dtype_size(tg_dtype dtype);
/* True for TG_FLOAT32 and TG_FLOAT64. */
TG_API bool tg_dtype_is_float(tg_dtype dtype);
TG_API bool tg_is_contiguous(const tg_tensor *t);
/* The value of a one-element tensor, as a double. NAN and an error if t
 * does not hold exactly one element. */
TG_API double tg_item(const tg_tensor *t);
/* Element at a multi-index (ndim entries), as a double; NAN on error. */
TG_API double tg_get(const tg_tensor *t, const int64_t *index);
/* Pointer to t's first element. Only for contiguous tensors (check
 * tg_is_contiguous, or call tg_contiguous first); NULL otherwise. Writing
 * through it changes every view of the same storage.
 * tg_data counts as a write: it bumps the version of t's storage (shared by
 * its views), and a backward that needs t's values as they were when an op
 * used them then fails with TG_ERR_STATE rather than compute a wrong
 * gradient. Fill a tensor before using it, or read through tg_data_const,
 * which changes nothing. */
TG_API void *tg_data(const tg_tensor *t);
TG_API const void *tg_data_const(const tg_tensor *t);
/* Copies t's elements, in row-major order, into out as `dtype`; returns 0,
 * or -1 if the buffer (capacity elements) is too small. */
TG_API int tg_copy_to(const tg_tensor *t, tg_dtype dtype, void *out, int64_t capacity);
/* The mirror of tg_copy_to: copies count elements of `dtype` from data, in
 * row-major order, into t, whatever its layout (a view writes through to
 * the tensor it views), converting element by element (to bool, nonzero is
 * true; bool data holds 0 or 1, as C's bool does). data is borrowed. It is
 * a write: it bumps the version of t's storage, so a graph that read t
 * cannot backpropagate afterwards (TG_ERR_STATE). Returns 0, or -1 with
 * TG_ERR_NULL (t or data NULL), TG_ERR_STATE (t released, in checked
 * mode), TG_ERR_DTYPE (unknown dtype) or TG_ERR_SHAPE (count is not
 * tg_numel(t)). */
TG_API int tg_copy_from(tg_tensor *t, tg_dtype dtype, const void *data, int64_t count);
/* True when a and b share storage. */
TG_API bool tg_shares_storage(const tg_tensor *a, const tg_tensor *b);

/* ---- printing ---------------------------------------------------------- */

/* Writes t like PyTorch's print(t): tensor([[...]]) with the dtype when it
 * is not float32 or int64, requires_grad=True on a leaf that requires grad,
 * the middle of large dims elided with "...", and a final newline.
 * Returns 0, or -1 on error. */
TG_API int tg_print_to(FILE *f, const tg_tensor *t);
TG_API int tg_print(const tg_tensor *t);
/* The same text without the newline into buf (always terminated); returns
 * the length the full text needs, like snprintf, or -1 on error. */
TG_API int tg_format(char *buf, size_t size, const tg_tensor *t);

/* ---- version, threads and build info ------------------------------------ */

/* The version of the library loaded at run time, e.g. "0.1.0" (a static
 * string). TG_VERSION_STRING is the version of the headers a program was
 * compiled with; the two differ when it loads another build. */
TG_API const char *tg_version(void);

/* Each rank's default, taken the first time the library needs it: its
 * share of the cores it may run on. That is the CPUs of its affinity mask,
 * or the CPUs of the node divided among the ranks the launcher puts there
 * when those are fewer (OMPI_COMM_WORLD_LOCAL_SIZE, PMIX_LOCAL_SIZE,
 * MPI_LOCALNRANKS, Slurm's SLURM_STEP_TASKS_PER_NODE or
 * SLURM_NTASKS_PER_NODE), at most SLURM_CPUS_PER_TASK, and at most the
 * cgroup's CPU quota (cpu.max; v1 cpu.cfs_quota_us) over those ranks.
 * OMP_NUM_THREADS, a thread's own omp_set_num_threads (to a count other than
 * the mask's) and tg_set_num_threads win over it; OPENBLAS_NUM_THREADS wins
 * for OpenBLAS. tg_build_info says which applies and why.
 *
 * Sets the threads the library's parallel loops and its OpenBLAS calls use
 * to n, 1 <= n <= 1024; returns 0, or -1 with TG_ERR_VALUE for any other n.
 * OpenMP keeps its count per thread: this sets it for loops started from the
 * calling thread (OMP_NUM_THREADS sets every thread's default), and
 * OpenBLAS's, which is process-wide. Without OpenMP the library runs on one
 * thread: any valid n is accepted and tg_num_threads() stays 1. Training
 * gives the same bits on one thread as on two. */
TG_API int tg_set_num_threads(int n);
/* The threads a parallel loop started from the calling thread may use (1
 * without OpenMP). */
TG_API int tg_num_threads(void);

/* What the library was built with and what it picked on this machine. The
 * strings are static, valid for the life of the process. */
typedef struct {
    const char *version;     /* tg_version() */
    const char *compiler;    /* what compiled the library, e.g. "gcc 12.2.0" */
    const char *gemm_isa;    /* the built-in float32 matmul kernels in use, picked at run
                                time: "avx512", "avx2" or "portable" (always under valgrind) */
    bool avx512_bf16;        /* the CPU has AVX512_BF16 */
    const char *bf16_gemm;   /* how bfloat16 products run (tg_set_matmul_precision), picked at
                                run time: "avx512_bf16" (vdpbf16ps kernels), "amx" (AMX tiles)
                                or "converting" (operands rounded to bfloat16, then the float32
                                kernels: where those are faster, and always under valgrind) */
    const char *blas;        /* "OpenBLAS" or "none" */
    const char *blas_config; /* OpenBLAS's openblas_get_config(): version and build; or "" */
    const char *blas_core;   /* the CPU core OpenBLAS tuned for, e.g. "Zen"; or "" */
    bool openmp;             /* built with OpenMP */
    int threads;             /* tg_num_threads() */
    const char *threads_why; /* why that count: the default's reason, e.g. "2 cores in the
                                affinity mask shared by 2 ranks on this node, per
                                OMPI_COMM_WORLD_LOCAL_SIZE", or "OMP_NUM_THREADS=4",
                                "tg_set_num_threads", "built without OpenMP" */
    bool mpi;                /* built with MPI: tensorgrad/dist.h is installed */
} tg_build_info;

/* Fills *info; returns 0, or -1 with TG_ERR_NULL when info is NULL. */
TG_API int tg_build_info_get(tg_build_info *info);
/* The same as one line into buf (always terminated), e.g.
 *   tensorgrad 0.1.0 (gcc 12.2.0); gemm: avx512; avx512_bf16: no;
 *   bf16 gemm: converting; blas: OpenBLAS 0.3.21 DYNAMIC_ARCH ... (core Zen); openmp: yes,
 *   2 threads (2 cores in the affinity mask); mpi: yes
 * Returns the length the whole line needs, like snprintf (buf may be NULL
 * when size is 0), or -1 with TG_ERR_NULL when buf is NULL and size is not. */
TG_API int tg_build_info_format(char *buf, size_t size);

#ifdef __cplusplus
}
#endif
#endif
