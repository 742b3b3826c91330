/* The seeded generator: xoshiro256** seeded through splitmix64, so the same
 * seed gives the same stream on every machine and thread count. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

struct tg_rng {
    uint64_t s[4]; /* the whole state: saving these four words resumes a run */
};

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

tg_rng *tg_rng_new(uint64_t seed)
{
    tg_rng *r = malloc(sizeof *r);
    if (!r)
        return tg__fail(TG_ERR_NOMEM, "tg_rng_new: out of memory");
    tg_rng_seed(r, seed);
    return r;
}

void tg_rng_free(tg_rng *rng) { free(rng); }

void tg_rng_seed(tg_rng *rng, uint64_t seed)
{
    if (!rng)
        return;
    for (int i = 0; i < 4; i++)
        rng->s[i] = splitmix64(&seed);
}

uint64_t tg_rng_next(tg_rng *rng)
{
    uint64_t *s = rng->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double tg_rng_uniform01(tg_rng *rng) { return (double)(tg_rng_next(rng) >> 11) * 0x1.0p-53; }

/* Box-Muller, one value per pair of draws: keeping no spare value means the
 * four state words are all there is to save. */
double tg_rng_normal(tg_rng *rng)
{
    double u1 = tg_rng_uniform01(rng), u2 = tg_rng_uniform01(rng);
    double r = sqrt(-2.0 * log(1.0 - u1)); /* 1 - u1 is in (0, 1] */
    return r * cos(2.0 * M_PI * u2);
}

void tg_rng_get_state(const tg_rng *rng, uint64_t state[4])
{
    for (int i = 0; i < 4; i++)
        state[i] = rng->s[i];
}

void tg_rng_set_state(tg_rng *rng, const uint64_t state[4])
{
    for (int i = 0; i < 4; i++)
        rng->s[i] = state[i];
}

tg_tensor *tg_rng_state_tensor(const tg_rng *rng)
{
    TG_CHECK_NULL(rng);
    int64_t words[4];
    memcpy(words, rng->s, sizeof words); /* the bits, not the values */
    int64_t shape[1] = {4};
    return tg_from_data(TG_INT64, 1, shape, words);
}

int tg_rng_set_state_tensor(tg_rng *rng, const tg_tensor *state)
{
    TG_CHECK_NULL_STATUS(rng);
    TG_CHECK_NULL_STATUS(state);
    if (state->dtype != TG_INT64) {
        tg__fail(TG_ERR_DTYPE, "tg_rng_set_state_tensor: state must be int64, got %s",
                 tg_dtype_name(state->dtype));
        return -1;
    }
    if (tg__numel(state->ndim, state->shape) != 4) {
        tg__fail(TG_ERR_SHAPE, "tg_rng_set_state_tensor: state %s does not hold 4 words",
                 TG_SHAPE_STR(state));
        return -1;
    }
    int64_t words[4];
    if (tg_copy_to(state, TG_INT64, words, 4) < 0)
        return -1;
    if (!(words[0] | words[1] | words[2] | words[3])) {
        tg__fail(TG_ERR_VALUE, "tg_rng_set_state_tensor: an all-zero state never leaves zero");
        return -1;
    }
    memcpy(rng->s, words, sizeof words);
    return 0;
}
