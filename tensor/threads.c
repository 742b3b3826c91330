/* How many threads the library's parallel loops and its OpenBLAS calls use:
 * the public setting (tg_set_num_threads) and what a new loop may take. */
#include "internal.h"

#include "tg_config.h"

#if TG_HAVE_OPENMP
#include <omp.h>
#endif
#if TG_HAVE_BLAS
#include <cblas.h> /* OpenBLAS's, which declares openblas_set_num_threads */
#endif

/* More threads than this is taken for a mistake: an OpenMP runtime that
 * cannot start the threads it was told to use aborts the process. */
#define TG_THREADS_MAX 1024

int tg_set_num_threads(int n)
{
    if (n < 1 || n > TG_THREADS_MAX) {
        tg__fail(TG_ERR_VALUE, "tg_set_num_threads: %d threads, expected 1 to %d", n,
                 TG_THREADS_MAX);
        return -1;
    }
#if TG_HAVE_OPENMP
    omp_set_num_threads(n);
#endif
#if TG_HAVE_BLAS
    openblas_set_num_threads(n);
#endif
    return 0;
}

int tg_num_threads(void)
{
#if TG_HAVE_OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

int tg__threads_free(void)
{
#if TG_HAVE_OPENMP
    return omp_in_parallel() ? 1 : omp_get_max_threads();
#else
    return 1;
#endif
}
