/* The dropout mask as a function of (key, element index): tg_dropout and the
 * fused attention's dropout draw the same mask from the same key, and
 * backward regenerates it instead of keeping it. Never installed. */
#ifndef TG_DROPOUT_MASK_H
#define TG_DROPOUT_MASK_H

#include <tensorgrad/tensor.h>

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

/* Element i (row-major) of the mask: the (i+1)-th output of SplitMix64
 * started at key, taken as a 53-bit fraction u; dropped when u < p, that is
 * when its top 53 bits are below drop_below = tg__drop_below(p). Each element
 * depends on key and i alone, so the mask is the same on any number of
 * threads and its loops vectorise. */
static inline bool tg__dropped(uint64_t key, int64_t i, uint64_t drop_below)
{
    uint64_t z = key + (uint64_t)(i + 1) * 0x9E3779B97F4A7C15u;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    z ^= z >> 31;
    return (z >> 11) < drop_below;
}

/* ceil(p 2^53), for p in [0, 1). */
static inline uint64_t tg__drop_below(double p)
{
    return (uint64_t)ceil(p * 0x1.0p53);
}

/* out[c] = x[c] with mask element first + c applied (0 where dropped, times
 * keep where kept) for c < n; x and out hold n elements of dtype (a float
 * dtype) and may be the same span. The one loop every dropout runs
 * (autograd/op_mask.c). */
void tg__drop_span(tg_dtype dtype, uint64_t key, uint64_t drop_below, double keep,
                   int64_t first, int64_t n, const void *x, void *out);

#endif
