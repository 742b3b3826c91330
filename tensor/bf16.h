/* bfloat16, the upper half of a float32: conversion with round-to-nearest-
 * even both ways, for the mixed-precision products (gemm_bf16.c) and the
 * TG_BFLOAT16 storage. Internal to the library. */
#ifndef TG_BF16_H
#define TG_BF16_H

#include <stdint.h>
#include <string.h>

/* The bfloat16 nearest to x, ties to the even one. NaN stays NaN (quiet,
 * sign kept), an infinity stays infinite, a float32 past the largest
 * bfloat16 becomes infinite, and denormals round like any other value
 * (nothing is flushed to zero). */
static inline uint16_t tg__bf16_from_f32(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* The float32 holding bfloat16 h exactly. */
static inline float tg__f32_from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* out[i] = tg__bf16_from_f32(x[i]) for n floats (n <= 0: nothing). */
void tg__bf16_from_f32_n(uint16_t *out, const float *x, int64_t n);

/* x <- float32(bfloat16(x)) for n floats, in place (n <= 0: nothing). */
void tg__bf16_round_f32(float *x, int64_t n);

#endif
