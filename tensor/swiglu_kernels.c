/* SwiGLU's product silu(gate) * up and its gradients, elementwise over
 * contiguous buffers: float32 on the vectorisable exp of fastmath.h,
 * compiled per vector width; float64 in libm's arithmetic. */
#include "fastmath.h"
#include "swiglu_kernels.h"

#include <math.h>

/* sigmoid(x) in float32: exp(-x) is inf below -88, which gives the 0 it
 * should; above 88 it is 0, which gives 1. */
static inline float sigmoid_f32(float x)
{
    return 1.0f / (1.0f + tg__expf(-x));
}

/* sigmoid(x) in float64, exp of a non-positive argument only. */
static inline double sigmoid_f64(double x)
{
    double e = exp(-fabs(x));
    return x >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}

TG_VECTOR_CLONES
static void swiglu_f32(float *restrict out, const float *restrict gate, const float *restrict up,
                       int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = gate[i] * sigmoid_f32(gate[i]) * up[i];
}

static void swiglu_f64(double *restrict out, const double *restrict gate,
                       const double *restrict up, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = gate[i] * sigmoid_f64(gate[i]) * up[i];
}

void tg__swiglu(tg_dtype dt, void *out, const void *gate, const void *up, int64_t n)
{
    if (dt == TG_FLOAT32)
        TG_FOR_BLOCKS(n, lo, len,
                      swiglu_f32((float *)out + lo, (const float *)gate + lo,
                                 (const float *)up + lo, len));
    else
        TG_FOR_BLOCKS(n, lo, len,
                      swiglu_f64((double *)out + lo, (const double *)gate + lo,
                                 (const double *)up + lo, len));
}

/* With s = sigmoid(g) and silu(g) = g s: silu'(g) = s (1 + g (1 - s)).
 * The loop body is one macro for both dtypes; SIG names the sigmoid. d is
 * read before dgate is written, so the two may be one buffer. */
#define SWIGLU_GRADS_LOOP(T, SIG)                                             \
    for (int64_t i = 0; i < n; i++) {                                         \
        T g = gate[i], u = up[i], s = SIG(g), silu = g * s, di = d[i];        \
        if (a)                                                                \
            a[i] = silu * u;                                                  \
        if (dup)                                                              \
            dup[i] = di * silu;                                               \
        if (dgate)                                                            \
            dgate[i] = di * u * (s * (1 + g * (1 - s)));                      \
    }

TG_VECTOR_CLONES
static void swiglu_grads_f32(const float *restrict gate, const float *restrict up, const float *d,
                             float *dgate, float *restrict dup, float *restrict a, int64_t n)
{
    SWIGLU_GRADS_LOOP(float, sigmoid_f32)
}

static void swiglu_grads_f64(const double *restrict gate, const double *restrict up,
                             const double *d, double *dgate, double *restrict dup,
                             double *restrict a, int64_t n)
{
    SWIGLU_GRADS_LOOP(double, sigmoid_f64)
}

/* p + lo for an optional buffer of T. */
#define AT(T, p, lo) ((p) ? (T *)(p) + (lo) : NULL)

void tg__swiglu_grads(tg_dtype dt, const void *gate, const void *up, const void *d, void *dgate,
                      void *dup, void *a, int64_t n)
{
    if (dt == TG_FLOAT32)
        TG_FOR_BLOCKS(n, lo, len,
                      swiglu_grads_f32((const float *)gate + lo, (const float *)up + lo,
                                       (const float *)d + lo, AT(float, dgate, lo),
                                       AT(float, dup, lo), AT(float, a, lo), len));
    else
        TG_FOR_BLOCKS(n, lo, len,
                      swiglu_grads_f64((const double *)gate + lo, (const double *)up + lo,
                                       (const double *)d + lo, AT(double, dgate, lo),
                                       AT(double, dup, lo), AT(double, a, lo), len));
}
