/* How many threads a new parallel loop may use. */
#include "internal.h"

#include "tg_config.h"

#if TG_HAVE_OPENMP
#include <omp.h>
#endif

int tg__threads_free(void)
{
#if TG_HAVE_OPENMP
    return omp_in_parallel() ? 1 : omp_get_max_threads();
#else
    return 1;
#endif
}
