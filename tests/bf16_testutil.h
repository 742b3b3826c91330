/* Operands for the bfloat16 product tests (internal areas, which see
 * bf16.h): values whose rounding to bfloat16 matters, and the value a
 * float becomes once rounded. */
#ifndef TG_BF16_TESTUTIL_H
#define TG_BF16_TESTUTIL_H

#include "bf16.h"

#include <stddef.h>
#include <stdint.h>

/* Values in [-1, 1) whose float32 bits go past bfloat16's. */
static inline void fill(float *x, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) & 0xffffff) / (float)0x800000 - 1.0f;
    }
}

static inline double rounded(float x)
{
    return tg__f32_from_bf16(tg__bf16_from_f32(x));
}

#endif
