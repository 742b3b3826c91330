/* How many threads the library's parallel loops and its OpenBLAS calls use:
 * the public setting (tg_set_num_threads), the default each rank takes
 * (its share of the cores, decided at first use) and what a new loop may take. */
#include "internal.h"

#include "cpu_share.h"
#include "tg_config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#if TG_HAVE_OPENMP
#include <omp.h>
#endif
#if TG_HAVE_BLAS
#include <cblas.h> /* OpenBLAS's, which declares openblas_set_num_threads */
#endif

/* More threads than this is taken for a mistake: an OpenMP runtime that
 * cannot start the threads it was told to use aborts the process. */
#define TG_THREADS_MAX 1024

/* The default, decided once per process: OpenMP's teams are sized by its
 * environment before any code of ours runs, so a process of several ranks
 * on one node would run a full team per rank, and the teams' waiting
 * threads would spin on the cores the other ranks compute on. */
static struct {
    pthread_once_t once;
    int threads;         /* the default team, 0 to keep the runtime's */
    int runtime_default; /* the team OpenMP gives a thread no one told otherwise */
    char why[192];
} choice = {.once = PTHREAD_ONCE_INIT};

/* Per thread (OpenMP keeps its count per thread): whether this thread has
 * taken its count, and from where. */
static _Thread_local bool prepared;
static _Thread_local const char *origin;

__attribute__((unused)) static bool env_set(const char *name)
{
    const char *v = getenv(name);
    return v && *v;
}

static void decide(void)
{
    tg__cpu_view v;
    tg__cpu_view_read(&v);
    int share = tg__threads_pick(&v, choice.why, sizeof choice.why);
#if TG_HAVE_OPENMP
    /* libgomp's team without OMP_NUM_THREADS: the CPUs of the mask it loaded with */
    choice.runtime_default = v.mask_cpus > 0 ? v.mask_cpus : omp_get_max_threads();
    if (env_set("OMP_NUM_THREADS"))
        snprintf(choice.why, sizeof choice.why, "OMP_NUM_THREADS=%s", getenv("OMP_NUM_THREADS"));
    else
        choice.threads = share;
#else
    snprintf(choice.why, sizeof choice.why, "built without OpenMP");
#endif
#if TG_HAVE_BLAS
    /* OpenBLAS reads these itself when it loads */
    if (!env_set("OPENBLAS_NUM_THREADS") && !env_set("OMP_NUM_THREADS"))
        openblas_set_num_threads(share);
#endif
    (void)share;
}

/* Gives the calling thread the default count unless it chose its own: the
 * first time it asks, outside parallel regions (they never nest). */
static void prepare(void)
{
    if (prepared)
        return;
#if TG_HAVE_OPENMP
    if (omp_in_parallel())
        return;
    int current = omp_get_max_threads();
    pthread_once(&choice.once, decide);
    if (choice.threads > 0 && current == choice.runtime_default) {
        omp_set_num_threads(choice.threads);
    } else {
        omp_set_num_threads(current); /* OpenBLAS's setting sets it too */
        if (choice.threads > 0)
            origin = "omp_set_num_threads";
    }
#else
    pthread_once(&choice.once, decide);
#endif
    prepared = true;
}

int tg_set_num_threads(int n)
{
    if (n < 1 || n > TG_THREADS_MAX) {
        tg__fail(TG_ERR_VALUE, "tg_set_num_threads: %d threads, expected 1 to %d", n,
                 TG_THREADS_MAX);
        return -1;
    }
    pthread_once(&choice.once, decide);
    prepared = true;
    origin = "tg_set_num_threads";
#if TG_HAVE_BLAS
    openblas_set_num_threads(n);
#endif
#if TG_HAVE_OPENMP
    omp_set_num_threads(n);
#endif
    return 0;
}

int tg_num_threads(void)
{
    prepare();
#if TG_HAVE_OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

const char *tg__threads_origin(void)
{
    prepare();
    return origin ? origin : choice.why;
}

int tg__threads_free(void)
{
    prepare();
#if TG_HAVE_OPENMP
    return omp_in_parallel() ? 1 : omp_get_max_threads();
#else
    return 1;
#endif
}
