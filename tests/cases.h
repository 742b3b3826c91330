/* Gradient-check cases: each area's cases_<area>.c lists functions of
 * tensors with the inputs to check them at; test_gradcheck.c runs every case
 * in float64 against finite differences and in float32 against float64, and
 * asserts that every op in include/tensorgrad/ops.def is covered. */
#ifndef TG_CASES_H
#define TG_CASES_H

#include <tensorgrad/tensorgrad.h>

typedef struct {
    const char *name;
    tg_gradcheck_fn fn;
    /* Makes the inputs (float64 for float ones; the checker converts) into
     * inputs[], returns how many. Random values come from rng. */
    int (*make_inputs)(tg_tensor **inputs, tg_rng *rng);
    double atol32, rtol32; /* float32 cross-check tolerances; 0: defaults */
} gc_case;

#define CASES(area) extern const gc_case cases_##area[]; extern const int n_cases_##area;
CASES(attention)
CASES(pointwise)
CASES(reduce)
CASES(matmul)
CASES(shape)
CASES(nn)
CASES(sdpa_fused)
CASES(rope)
#undef CASES

/* A float64 tensor of normal values. */
static inline tg_tensor *gc_randn(tg_rng *rng, int ndim, const int64_t *shape)
{
    return tg_randn(rng, TG_FLOAT64, ndim, shape);
}

/* A float64 tensor uniform in [lo, hi), for inputs with a domain (log, sqrt). */
static inline tg_tensor *gc_uniform(tg_rng *rng, int ndim, const int64_t *shape, double lo,
                                    double hi)
{
    return tg_uniform(rng, TG_FLOAT64, ndim, shape, lo, hi);
}

#endif
