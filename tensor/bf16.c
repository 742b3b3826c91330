/* Rounding float32 arrays to bfloat16 precision, in place or into
 * bfloat16 arrays (bf16.h), the loops written so the compiler turns them
 * into integer vector code. */
#include "bf16.h"

/* f32(bf16(u)) on the bits, branch-free: a NaN keeps its upper half, made
 * quiet; every other value rounds to nearest, ties to even. */
static inline uint32_t round_bits(uint32_t u)
{
    uint32_t nan = (u & 0x7fffffffu) > 0x7f800000u;
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    uint32_t quiet = (u | 0x00400000u) & 0xffff0000u;
    return nan ? quiet : rounded;
}

void tg__bf16_round_f32(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, x + i, sizeof u);
        u = round_bits(u);
        memcpy(x + i, &u, sizeof u);
    }
}

void tg__bf16_from_f32_n(uint16_t *out, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, x + i, sizeof u);
        out[i] = (uint16_t)(round_bits(u) >> 16);
    }
}
