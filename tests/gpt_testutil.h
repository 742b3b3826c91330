/* Helpers of the GPT's test programs (test_gpt.c, test_gpt_generate.c):
 * parameters written from a formula or from a seeded generator. */
#ifndef TG_GPT_TESTUTIL_H
#define TG_GPT_TESTUTIL_H

#include "testutil.h"

static inline bool is_ln_weight(const char *name)
{
    size_t n = strlen(name);
    return strstr(name, "ln_") && n > 6 && strcmp(name + n - 6, "weight") == 0;
}

/* Writes value(i) into every element of t (a contiguous parameter). */
static inline void fill(tg_tensor *t, double (*value)(int64_t i, void *ctx), void *ctx)
{
    ck_assert(tg_is_contiguous(t));
    void *p = tg_data(t);
    for (int64_t i = 0; i < tg_numel(t); i++) {
        double v = value(i, ctx);
        if (tg_dtype_of(t) == TG_FLOAT32)
            ((float *)p)[i] = (float)v;
        else
            ((double *)p)[i] = v;
    }
}

/* Uniform values in [-scale, scale] (LayerNorm weights around 1) from rng, so
 * that attention and the logits are far from uniform. */
typedef struct {
    tg_rng *rng;
    double scale, base;
} uniform_ctx;

static inline double uniform_value(int64_t i, void *ctx)
{
    (void)i;
    const uniform_ctx *u = ctx;
    return u->base + u->scale * (2 * tg_rng_uniform01(u->rng) - 1);
}

static inline void randomize(tg_gpt *m, uint64_t seed, double scale)
{
    tg_rng *rng = tg_rng_new(seed);
    tg_params ps = {0};
    ck_assert_int_eq(tg_gpt_params(m, &ps), 0);
    for (int k = 0; k < ps.count; k++) {
        uniform_ctx u = {rng, scale, is_ln_weight(ps.names[k]) ? 1.0 : 0.0};
        fill(ps.tensors[k], uniform_value, &u);
    }
    tg_params_clear(&ps);
    tg_rng_free(rng);
}

#endif
