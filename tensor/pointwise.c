/* Elementwise kernels: one loop per dtype that walks broadcast, strided or
 * contiguous operands row by row, with the function picked by kind. */
#include "fastmath.h"
#include "kernels.h"

#include <string.h>

#define SQRT_2_OVER_PI 0.7978845608028654
#define GELU_C 0.044715

static inline double gelu_erf_grad(double x)
{
    double cdf = 0.5 * (1.0 + erf(x * M_SQRT1_2));
    double pdf = exp(-0.5 * x * x) * 0.3989422804014327; /* 1/sqrt(2 pi) */
    return cdf + x * pdf;
}

static inline double gelu_tanh(double x)
{
    return 0.5 * x * (1.0 + tanh(SQRT_2_OVER_PI * (x + GELU_C * x * x * x)));
}

static inline double gelu_tanh_grad(double x)
{
    double u = SQRT_2_OVER_PI * (x + GELU_C * x * x * x);
    double t = tanh(u);
    double du = SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_C * x * x);
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du;
}

/* sigmoid without overflow: exp of a non-positive argument only. */
static inline double sigmoid(double x)
{
    return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
}

/* d/dx x sigmoid(x) = s (1 + x (1 - s)): at |x| = 1e4, s is 0 or 1 and the
 * result 0 or 1, never inf * 0. */
static inline double silu_grad(double x)
{
    double s = sigmoid(x);
    return s * (1.0 + x * (1.0 - s));
}

/* float32 SiLU and its derivative on the vectorisable exp: exp(-x)
 * overflows to inf for x < -88, where 1 / (1 + inf) is the 0 it should be. */
static inline float silu_f32(float x)
{
    return x / (1.0f + tg__expf(-x));
}

static inline float silu_grad_f32(float x)
{
    float s = 1.0f / (1.0f + tg__expf(-x));
    return s * (1.0f + x * (1.0f - s));
}

/* float32 GELU (tanh form) and its derivative on the vectorisable tanh:
 * their error is absolute, about 1e-7, well inside float's own rounding of
 * the surrounding arithmetic. */
static inline float gelu_tanh_f32(float x)
{
    float u = (float)SQRT_2_OVER_PI * (x + (float)GELU_C * x * x * x);
    return 0.5f * x * (1.0f + tg__tanhf_approx(u));
}

static inline float gelu_tanh_grad_f32(float x)
{
    float u = (float)SQRT_2_OVER_PI * (x + (float)GELU_C * x * x * x);
    float t = tg__tanhf_approx(u);
    float du = (float)SQRT_2_OVER_PI * (1.0f + 3.0f * (float)GELU_C * x * x);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

/* The element function of each binary kind, on x (from a) and y (from b). */
#define BINARY_EXPR(kind, x, y)                                               \
    ((kind) == TG_BIN_ADD            ? (x) + (y)                              \
     : (kind) == TG_BIN_SUB          ? (x) - (y)                              \
     : (kind) == TG_BIN_MUL          ? (x) * (y)                              \
     : (kind) == TG_BIN_DIV          ? (x) / (y)                              \
     : (kind) == TG_BIN_TANH_GRAD    ? (x) * (1 - (y) * (y))                  \
     : (kind) == TG_BIN_SIGMOID_GRAD ? (x) * (y) * (1 - (y))                  \
     : (kind) == TG_BIN_RELU_GRAD    ? ((y) > 0 ? (x) : 0)                    \
     : (kind) == TG_BIN_GELU_ERF_GRAD ? (x) * gelu_erf_grad(y)                \
     : (kind) == TG_BIN_SILU_GRAD      ? (x) * silu_grad(y)                   \
                                      : (x) * gelu_tanh_grad(y))

/* A loop per kind lets the compiler fold the kind test out of the loop. */
#define BINARY_LOOP(T, KIND)                                                  \
    case KIND:                                                                \
        if (flat && n > TG_PAR_MIN) {                                         \
            _Pragma("omp parallel for schedule(static)")                      \
            for (int64_t i = 0; i < n; i++)                                   \
                o[i] = (T)BINARY_EXPR(KIND, pa[i], pb[i]);                    \
        } else if (flat) {                                                    \
            for (int64_t i = 0; i < n; i++)                                   \
                o[i] = (T)BINARY_EXPR(KIND, pa[i], pb[i]);                    \
        } else {                                                              \
            do {                                                              \
                T *oo = o + it.off[0];                                        \
                const T *aa = pa + it.off[1], *bb = pb + it.off[2];           \
                for (int64_t j = 0; j < it.len; j++)                          \
                    oo[j] = (T)BINARY_EXPR(KIND, aa[j * it.inner[1]],         \
                                           bb[j * it.inner[2]]);              \
            } while (tg__iter_next(&it));                                     \
        }                                                                     \
        break;

#define BINARY_ALL(T)                                                         \
    do {                                                                      \
        T *o = tg__ptr(out);                                                  \
        const T *pa = tg__ptr(a), *pb = tg__ptr(b);                           \
        switch (kind) {                                                       \
            BINARY_LOOP(T, TG_BIN_ADD)                                        \
            BINARY_LOOP(T, TG_BIN_SUB)                                        \
            BINARY_LOOP(T, TG_BIN_MUL)                                        \
            BINARY_LOOP(T, TG_BIN_DIV)                                        \
            BINARY_LOOP(T, TG_BIN_TANH_GRAD)                                  \
            BINARY_LOOP(T, TG_BIN_SIGMOID_GRAD)                               \
            BINARY_LOOP(T, TG_BIN_RELU_GRAD)                                  \
            BINARY_LOOP(T, TG_BIN_GELU_ERF_GRAD)                              \
            BINARY_LOOP(T, TG_BIN_GELU_TANH_GRAD)                             \
            BINARY_LOOP(T, TG_BIN_SILU_GRAD)                                  \
        }                                                                     \
    } while (0)

/* Contiguous float32: a loop per kind on one block, compiled per vector
 * width; TG_FOR_BLOCKS or TG_FOR_ROWS shares the spans out. */
TG_VECTOR_CLONES
static void binary_f32(tg__binary_kind kind, float *restrict o, const float *restrict a,
                       const float *restrict b, int64_t n)
{
    switch (kind) {
#define F32_CASE(KIND)                                                        \
    case KIND:                                                                \
        for (int64_t i = 0; i < n; i++)                                       \
            o[i] = KIND == TG_BIN_GELU_TANH_GRAD ? a[i] * gelu_tanh_grad_f32(b[i])       \
                   : KIND == TG_BIN_SILU_GRAD    ? a[i] * silu_grad_f32(b[i])            \
                                                 : (float)BINARY_EXPR(KIND, a[i], b[i]); \
        break;
        F32_CASE(TG_BIN_ADD)
        F32_CASE(TG_BIN_SUB)
        F32_CASE(TG_BIN_MUL)
        F32_CASE(TG_BIN_DIV)
        F32_CASE(TG_BIN_TANH_GRAD)
        F32_CASE(TG_BIN_SIGMOID_GRAD)
        F32_CASE(TG_BIN_RELU_GRAD)
        F32_CASE(TG_BIN_GELU_ERF_GRAD)
        F32_CASE(TG_BIN_GELU_TANH_GRAD)
        F32_CASE(TG_BIN_SILU_GRAD)
#undef F32_CASE
    }
}

static bool same_shape(const tg_tensor *a, int ndim, const int64_t *shape)
{
    return a->ndim == ndim && !memcmp(a->shape, shape, (size_t)ndim * sizeof *shape);
}

/* Whether b repeats along a's leading dims: a contiguous with the full
 * shape, b contiguous with the trailing dims (a bias or a position table
 * added to every row). */
static bool repeats_rows(const tg_tensor *a, const tg_tensor *b, int ndim, const int64_t *shape)
{
    if (!same_shape(a, ndim, shape) || !tg_is_contiguous(a) || !tg_is_contiguous(b) ||
        b->ndim > ndim || b->ndim == 0)
        return false;
    return !memcmp(b->shape, shape + ndim - b->ndim, (size_t)b->ndim * sizeof *shape);
}

int tg__binary_into(tg_tensor *out, const tg_tensor *a, const tg_tensor *b,
                    tg__binary_kind kind)
{
    int ndim;
    int64_t shape[TG_MAX_DIMS];
    if (tg__broadcast_shape("tg__binary", a, b, &ndim, shape) < 0)
        return -1;
    if (!same_shape(out, ndim, shape) || !tg_is_contiguous(out) || out->dtype != a->dtype) {
        tg__fail(TG_ERR_SHAPE, "tg__binary_into: out %s is not a contiguous %s %s",
                 TG_SHAPE_STR(out), tg_dtype_name(a->dtype),
                 tg__shape_str((char[96]){0}, 96, ndim, shape));
        return -1;
    }
    int64_t n = tg__numel(ndim, shape);
    bool flat = same_shape(a, ndim, shape) && same_shape(b, ndim, shape) &&
                tg_is_contiguous(a) && tg_is_contiguous(b);
    if (a->dtype == TG_FLOAT32 && !flat && repeats_rows(a, b, ndim, shape)) {
        float *o = tg__ptr(out);
        const float *pa = tg__ptr(a), *pb = tg__ptr(b);
        int64_t row = tg__numel(b->ndim, b->shape), rows = row ? n / row : 0;
        TG_FOR_ROWS(rows, row, r0, r1, {
            for (int64_t r = r0; r < r1; r++)
                binary_f32(kind, o + r * row, pa + r * row, pb, row);
        });
        return 0;
    }
    tg__iter it = {0};
    if (!flat) {
        int64_t strides[3][TG_MAX_DIMS];
        memcpy(strides[0], out->stride, sizeof strides[0]);
        tg__broadcast_strides(a, ndim, shape, strides[1]);
        tg__broadcast_strides(b, ndim, shape, strides[2]);
        tg__iter_init(&it, ndim, shape, 3, (const int64_t(*)[TG_MAX_DIMS])strides);
        if (!it.len)
            return 0;
    }
    if (a->dtype == TG_FLOAT32 && flat) {
        float *o = tg__ptr(out);
        const float *pa = tg__ptr(a), *pb = tg__ptr(b);
        TG_FOR_ROWS(n, 1, lo, hi, binary_f32(kind, o + lo, pa + lo, pb + lo, hi - lo));
    } else if (a->dtype == TG_FLOAT32)
        BINARY_ALL(float);
    else
        BINARY_ALL(double);
    return 0;
}

tg_tensor *tg__binary(const tg_tensor *a, const tg_tensor *b, tg__binary_kind kind)
{
    int ndim;
    int64_t shape[TG_MAX_DIMS];
    if (tg__broadcast_shape("tg__binary", a, b, &ndim, shape) < 0)
        return NULL;
    tg_tensor *out = tg__empty_uninit(a->dtype, ndim, shape); /* every element is written */
    if (out && tg__binary_into(out, a, b, kind) < 0) {
        tg_release(out);
        return NULL;
    }
    return out;
}

static inline double unary_eval(tg__unary_kind kind, double x, double arg)
{
    switch (kind) {
    case TG_UN_NEG: return -x;
    case TG_UN_EXP: return exp(x);
    case TG_UN_LOG: return log(x);
    case TG_UN_SQRT: return sqrt(x);
    case TG_UN_TANH: return tanh(x);
    case TG_UN_SIGMOID: return sigmoid(x);
    case TG_UN_RELU: return x > 0 ? x : 0.0;
    case TG_UN_GELU_ERF: return 0.5 * x * (1.0 + erf(x * M_SQRT1_2));
    case TG_UN_GELU_TANH: return gelu_tanh(x);
    case TG_UN_SILU: return x * sigmoid(x);
    case TG_UN_ADD_SCALAR: return x + arg;
    case TG_UN_MUL_SCALAR: return x * arg;
    case TG_UN_POW_SCALAR: return pow(x, arg);
    }
    return NAN;
}

/* Strided float32 and all float64 operands: the math runs in double and
 * rounds once. As in the binary kernel, a loop per kind lets the compiler
 * fold the switch. */
#define UNARY_LOOP(T, KIND)                                                   \
    case KIND:                                                                \
        if (flat && n > TG_PAR_MIN) {                                         \
            _Pragma("omp parallel for schedule(static)")                      \
            for (int64_t i = 0; i < n; i++)                                   \
                o[i] = (T)unary_eval(KIND, px[i], arg);                       \
        } else if (flat) {                                                    \
            for (int64_t i = 0; i < n; i++)                                   \
                o[i] = (T)unary_eval(KIND, px[i], arg);                       \
        } else {                                                              \
            do {                                                              \
                T *oo = o + it.off[0];                                        \
                const T *xx = px + it.off[1];                                 \
                for (int64_t j = 0; j < it.len; j++)                          \
                    oo[j] = (T)unary_eval(KIND, xx[j * it.inner[1]], arg);    \
            } while (tg__iter_next(&it));                                     \
        }                                                                     \
        break;

#define UNARY_ALL(T)                                                          \
    do {                                                                      \
        T *o = tg__ptr(out);                                                  \
        const T *px = tg__ptr(x);                                             \
        switch (kind) {                                                       \
            UNARY_LOOP(T, TG_UN_NEG)                                          \
            UNARY_LOOP(T, TG_UN_EXP)                                          \
            UNARY_LOOP(T, TG_UN_LOG)                                          \
            UNARY_LOOP(T, TG_UN_SQRT)                                         \
            UNARY_LOOP(T, TG_UN_TANH)                                         \
            UNARY_LOOP(T, TG_UN_SIGMOID)                                      \
            UNARY_LOOP(T, TG_UN_RELU)                                         \
            UNARY_LOOP(T, TG_UN_GELU_ERF)                                     \
            UNARY_LOOP(T, TG_UN_GELU_TANH)                                    \
            UNARY_LOOP(T, TG_UN_SILU)                                         \
            UNARY_LOOP(T, TG_UN_ADD_SCALAR)                                   \
            UNARY_LOOP(T, TG_UN_MUL_SCALAR)                                   \
            UNARY_LOOP(T, TG_UN_POW_SCALAR)                                   \
        }                                                                     \
    } while (0)

/* float32 versions of the kinds whose libm call would keep the loop from
 * vectorising; the rest as unary_eval computes them. */
static inline float unary_eval_f32(tg__unary_kind kind, float x, double arg)
{
    switch (kind) {
    case TG_UN_EXP: return tg__expf(x);
    case TG_UN_SIGMOID: return 1.0f / (1.0f + tg__expf(-x));
    case TG_UN_GELU_TANH: return gelu_tanh_f32(x);
    case TG_UN_SILU: return silu_f32(x);
    default: return (float)unary_eval(kind, x, arg);
    }
}

TG_VECTOR_CLONES
static void unary_f32(tg__unary_kind kind, float *restrict o, const float *restrict x, int64_t n,
                      double arg)
{
    switch (kind) {
#define F32_CASE(KIND)                                                        \
    case KIND:                                                                \
        for (int64_t i = 0; i < n; i++)                                       \
            o[i] = unary_eval_f32(KIND, x[i], arg);                           \
        break;
        F32_CASE(TG_UN_NEG)
        F32_CASE(TG_UN_EXP)
        F32_CASE(TG_UN_LOG)
        F32_CASE(TG_UN_SQRT)
        F32_CASE(TG_UN_TANH)
        F32_CASE(TG_UN_SIGMOID)
        F32_CASE(TG_UN_RELU)
        F32_CASE(TG_UN_GELU_ERF)
        F32_CASE(TG_UN_GELU_TANH)
        F32_CASE(TG_UN_SILU)
        F32_CASE(TG_UN_ADD_SCALAR)
        F32_CASE(TG_UN_MUL_SCALAR)
        F32_CASE(TG_UN_POW_SCALAR)
#undef F32_CASE
    }
}

tg_tensor *tg__unary(const tg_tensor *x, tg__unary_kind kind, double arg)
{
    tg_tensor *out = tg__empty_uninit_like(x); /* every element is written */
    if (!out)
        return NULL;
    int64_t n = tg__numel(x->ndim, x->shape);
    bool flat = tg_is_contiguous(x);
    tg__iter it = {0};
    if (!flat) {
        int64_t strides[2][TG_MAX_DIMS];
        memcpy(strides[0], out->stride, sizeof strides[0]);
        memcpy(strides[1], x->stride, sizeof strides[1]);
        tg__iter_init(&it, x->ndim, x->shape, 2, (const int64_t(*)[TG_MAX_DIMS])strides);
        if (!it.len)
            return out;
    }
    if (x->dtype == TG_FLOAT32 && flat) {
        float *o = tg__ptr(out);
        const float *px = tg__ptr(x);
        TG_FOR_BLOCKS(n, lo, len, unary_f32(kind, o + lo, px + lo, len, arg));
    } else if (x->dtype == TG_FLOAT32)
        UNARY_ALL(float);
    else
        UNARY_ALL(double);
    return out;
}

TG_VECTOR_CLONES_EXTERN(tg__gelu_tanh_f32_inplace)
void tg__gelu_tanh_f32_inplace(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = gelu_tanh_f32(x[i]);
}

/* ---- GELU and its gradient together --------------------------------------------- */

/* a = GELU(h) and d *= GELU'(h) on n float32 elements, the tanh form: one
 * tanh per element serves both, in the arithmetic of gelu_tanh_f32 and
 * gelu_tanh_grad_f32. */
TG_VECTOR_CLONES
static void gelu_tanh_with_grad_f32(const float *restrict h, float *restrict a,
                                    float *restrict d, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float x = h[i];
        float u = (float)SQRT_2_OVER_PI * (x + (float)GELU_C * x * x * x);
        float t = tg__tanhf_approx(u);
        float du = (float)SQRT_2_OVER_PI * (1.0f + 3.0f * (float)GELU_C * x * x);
        a[i] = 0.5f * x * (1.0f + t);
        d[i] = d[i] * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
    }
}

/* The same for any float dtype and either form, in double, rounding once:
 * the erf form shares its CDF, the tanh form its tanh. */
#define GELU_WITH_GRAD_LOOP(T)                                                \
    do {                                                                      \
        const T *hh = (const T *)h + lo;                                      \
        T *aa = (T *)a + lo, *dd = (T *)d + lo;                               \
        for (int64_t i = 0; i < len; i++) {                                   \
            double x = hh[i], g, dg;                                          \
            if (tanh_form) {                                                  \
                double t = tanh(SQRT_2_OVER_PI * (x + GELU_C * x * x * x));   \
                double du = SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_C * x * x);    \
                g = 0.5 * x * (1.0 + t);                                      \
                dg = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du;          \
            } else {                                                          \
                double cdf = 0.5 * (1.0 + erf(x * M_SQRT1_2));                \
                g = x * cdf;                                                  \
                dg = cdf + x * exp(-0.5 * x * x) * 0.3989422804014327;        \
            }                                                                 \
            aa[i] = (T)g;                                                     \
            dd[i] = (T)(dd[i] * dg);                                          \
        }                                                                     \
    } while (0)

void tg__gelu_with_grad(tg_dtype dtype, bool tanh_form, const void *h, void *a, void *d,
                        int64_t n)
{
    if (dtype == TG_FLOAT32 && tanh_form)
        TG_FOR_BLOCKS(n, lo, len,
                      gelu_tanh_with_grad_f32((const float *)h + lo, (float *)a + lo,
                                              (float *)d + lo, len));
    else if (dtype == TG_FLOAT32)
        TG_FOR_BLOCKS(n, lo, len, GELU_WITH_GRAD_LOOP(float));
    else
        TG_FOR_BLOCKS(n, lo, len, GELU_WITH_GRAD_LOOP(double));
}
