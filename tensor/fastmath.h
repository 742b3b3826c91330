/* float32 exp and tanh written in plain arithmetic, so that loops calling
 * them vectorise (libm's expf and tanh are opaque calls, one element at a
 * time). exp is within 2 ulp of the true value where the result is normal;
 * tanh_approx is within 1e-7 of tanh in absolute terms (its relative error
 * grows near 0, which is why tg_tanh keeps libm and only GELU uses it).
 *
 * TG_VECTOR_CLONES compiles a kernel once per x86 vector width and picks
 * the widest the CPU has when the library loads: x86-64-v4 (AVX-512 with
 * its 256-bit forms, FMA, and 64-bit lane multiplies, which the dropout
 * hash needs), AVX2 or the baseline. Bare AVX-512F would leave 8-lane
 * multiply-adds as a multiply and an add. The AVX2 clone stays without
 * FMA: valgrind, which the CI runs the tests under, emulates FMA one
 * element at a time. Never installed.
 *
 * A kernel that other files call takes TG_VECTOR_CLONES_EXTERN(name)
 * instead. gcc names the dispatcher (an ifunc) after the function, so a
 * call from another file reaches it; clang before 18 names it "name.ifunc"
 * and defines no "name" at all, so such a call does not link (and a
 * declaration carrying the attribute, clang's own cure, miscompiles in
 * clang 14: the caller jumps to the resolver). There the macro adds the
 * global "name" as an alias of the dispatcher, which is what gcc and later
 * clang emit; gcc's output is unchanged.
 *
 * -Dvector_clones=false defines both away: each kernel is compiled once,
 * for the baseline. ThreadSanitizer needs that: the loader runs the
 * resolvers while it relocates the program and the library, before the
 * sanitizer's runtime is set up, so every test crashes at load in an
 * instrumented resolver. The GEMM's own dispatch (gemm_x86.c) asks the
 * CPU at run time and stays. */
#ifndef TG_FASTMATH_H
#define TG_FASTMATH_H

#include <stdint.h>
#include <string.h>

#include "tg_config.h"

#if TG_WITH_VECTOR_CLONES && defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define TG_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#endif
#endif
#ifndef TG_VECTOR_CLONES
#define TG_VECTOR_CLONES
#define TG_VECTOR_CLONES_EXTERN(name)
#elif defined(__clang__) && __clang_major__ < 18
#define TG_VECTOR_CLONES_EXTERN(name)                                          \
    __asm__(".globl " #name "\n\t.set " #name ", \"" #name ".ifunc\"");       \
    TG_VECTOR_CLONES
#else
#define TG_VECTOR_CLONES_EXTERN(name) TG_VECTOR_CLONES
#endif

/* Eight double lanes and the eight floats they widen from: kernels that
 * sum float32 in double (column sums, layer_norm's parameter sums,
 * attention's rows) keep their running sums in them, in registers. */
#define TG_DLANES 8
typedef double tg__dlanes __attribute__((vector_size(TG_DLANES * sizeof(double))));
typedef float tg__flanes __attribute__((vector_size(TG_DLANES * sizeof(float))));

/* e^x: x = n ln2 + r with |r| <= ln2/2, e^r by its Taylor series to r^7
 * (truncation below 6e-9, a tenth of float's epsilon), times 2^n built in
 * the exponent bits. Below -87.34, where e^x is subnormal, it gives 0; above
 * 88.3 (e^x > 2.2e38, near float's largest) it gives +inf. */
static inline float tg__expf(float x)
{
    const float log2e = 1.44269504f, ln2_hi = 0.693145752f, ln2_lo = 1.42860677e-6f;
    const float round_bias = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float xc = x > -87.34f ? x : -87.34f;   /* also sends NaN here; fixed below */
    xc = xc < 88.3f ? xc : 88.3f;
    float n = (xc * log2e + round_bias) - round_bias;
    float r = (xc - n * ln2_hi) - n * ln2_lo;
    float p = 1.0f / 5040;
    p = p * r + 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float y = p * scale;
    y = x < -87.34f ? 0.0f : y;
    y = x > 88.3f ? __builtin_inff() : y;
    return x == x ? y : x;
}

/* tanh(u) = sign(u) (1 - 2 / (e^{2|u|} + 1)). */
static inline float tg__tanhf_approx(float u)
{
    float a = u < 0 ? -u : u;
    float t = 1.0f - 2.0f / (tg__expf(2.0f * a) + 1.0f);
    return u < 0 ? -t : t;
}

#endif
