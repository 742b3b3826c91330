/* Creating tensors: constants, ranges, copies of C arrays (and C arrays
 * copied into existing tensors), random tensors from a seeded generator,
 * and the causal mask. */
#include "bf16.h"
#include "internal.h"

#include <string.h>

static bool known_dtype(const char *fn, tg_dtype dtype)
{
    if (tg_dtype_size(dtype))
        return true;
    tg__fail(TG_ERR_DTYPE, "%s: unknown dtype %d", fn, (int)dtype);
    return false;
}

static void fill(tg_tensor *t, double value)
{
    int64_t n = tg__numel(t->ndim, t->shape);
    void *p = tg__ptr(t);
    switch (t->dtype) {
    case TG_FLOAT32: for (int64_t i = 0; i < n; i++) ((float *)p)[i] = (float)value; break;
    case TG_FLOAT64: for (int64_t i = 0; i < n; i++) ((double *)p)[i] = value; break;
    case TG_INT64: for (int64_t i = 0; i < n; i++) ((int64_t *)p)[i] = (int64_t)value; break;
    case TG_BOOL: for (int64_t i = 0; i < n; i++) ((bool *)p)[i] = value != 0; break;
    case TG_BFLOAT16: {
        uint16_t h = tg__bf16_from_f32((float)value);
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)p)[i] = h;
        break;
    }
    }
}

static tg_tensor *make_full(const char *fn, tg_dtype dtype, int ndim, const int64_t *shape,
                            double value)
{
    if (!known_dtype(fn, dtype) || tg__check_shape(fn, ndim, shape) < 0)
        return NULL;
    if (dtype == TG_INT64 && !(fabs(value) < 0x1p63))
        return tg__fail(TG_ERR_VALUE, "%s: %g does not fit in int64", fn, value);
    tg_tensor *t = tg__empty(dtype, ndim, shape);
    if (t && value != 0)
        fill(t, value);
    return tg__ret(t);
}

tg_tensor *tg_zeros(tg_dtype dtype, int ndim, const int64_t *shape)
{
    return make_full(__func__, dtype, ndim, shape, 0.0);
}

tg_tensor *tg_ones(tg_dtype dtype, int ndim, const int64_t *shape)
{
    return make_full(__func__, dtype, ndim, shape, 1.0);
}

tg_tensor *tg_full(tg_dtype dtype, int ndim, const int64_t *shape, double value)
{
    return make_full(__func__, dtype, ndim, shape, value);
}

tg_tensor *tg_scalar(tg_dtype dtype, double value)
{
    return make_full(__func__, dtype, 0, NULL, value);
}

tg_tensor *tg_arange(tg_dtype dtype, double start, double end, double step)
{
    if (!known_dtype(__func__, dtype))
        return NULL;
    if (dtype == TG_BOOL || dtype == TG_BFLOAT16)
        return tg__fail(TG_ERR_DTYPE, "tg_arange: %s is not a dtype it makes",
                        tg_dtype_name(dtype));
    if (step == 0 || !isfinite(start) || !isfinite(end) || !isfinite(step))
        return tg__fail(TG_ERR_VALUE, "tg_arange: start %g, end %g, step %g do not make a range",
                        start, end, step);
    double count = ceil((end - start) / step);
    if (count < 0)
        count = 0;
    if (count > 0x1p56)
        return tg__fail(TG_ERR_NOMEM, "tg_arange: %g elements is too many", count);
    int64_t n = (int64_t)count;
    tg_tensor *t = tg__empty(dtype, 1, &n);
    if (!t)
        return NULL;
    void *p = tg__ptr(t);
    for (int64_t i = 0; i < n; i++) {
        double v = start + (double)i * step;
        switch (dtype) {
        case TG_FLOAT32: ((float *)p)[i] = (float)v; break;
        case TG_FLOAT64: ((double *)p)[i] = v; break;
        case TG_INT64: ((int64_t *)p)[i] = (int64_t)v; break;
        case TG_BOOL: case TG_BFLOAT16: break; /* refused above */
        }
    }
    return tg__ret(t);
}

tg_tensor *tg_from_data(tg_dtype dtype, int ndim, const int64_t *shape, const void *data)
{
    if (!known_dtype(__func__, dtype) || tg__check_shape(__func__, ndim, shape) < 0)
        return NULL;
    TG_CHECK_NULL(data);
    tg_tensor *t = tg__empty(dtype, ndim, shape);
    if (t)
        memcpy(tg__ptr(t), data, (size_t)tg__numel(ndim, shape) * tg_dtype_size(dtype));
    return tg__ret(t);
}

int tg_copy_from(tg_tensor *t, tg_dtype dtype, const void *data, int64_t count)
{
    TG_CHECK_NULL_STATUS(t);
    TG_CHECK_NULL_STATUS(data);
    if (!known_dtype(__func__, dtype))
        return -1;
    int64_t n = tg__numel(t->ndim, t->shape);
    if (count != n) {
        tg__fail(TG_ERR_SHAPE, "%s: %lld elements given for tensor %s of %lld", __func__,
                 (long long)count, TG_SHAPE_STR(t), (long long)n);
        return -1;
    }
    /* data seen as a contiguous tensor of t's shape; the copy converts */
    tg_storage s = {.refcount = 1, .data = (void *)data,
                    .nbytes = (size_t)n * tg_dtype_size(dtype)};
    tg_tensor src = {.refcount = 1, .storage = &s, .ndim = t->ndim, .dtype = dtype};
    memcpy(src.shape, t->shape, sizeof src.shape);
    tg__contiguous_strides(src.ndim, src.shape, src.stride);
    tg__copy(t, &src);
    tg__bump_version(t); /* a graph that read t must not backpropagate now */
    return 0;
}

/* bool [L, S], true where key j comes after query i (j > i). */
static tg_tensor *causal(int64_t L, int64_t S)
{
    int64_t shape[2] = {L, S};
    tg_tensor *t = tg__empty(TG_BOOL, 2, shape);
    if (!t)
        return NULL;
    bool *p = tg__ptr(t);
    for (int64_t i = 0; i < L; i++)
        for (int64_t j = i + 1; j < S; j++)
            p[i * S + j] = true;
    return tg__ret(t);
}

tg_tensor *tg_causal_mask(int64_t n)
{
    if (n < 0)
        return tg__fail(TG_ERR_SHAPE, "tg_causal_mask: negative size %lld", (long long)n);
    return causal(n, n);
}

tg_tensor *tg_causal_mask_rect(int64_t L, int64_t S)
{
    if (L < 0 || S < 0)
        return tg__fail(TG_ERR_SHAPE, "tg_causal_mask_rect: negative size [%lld, %lld]",
                        (long long)L, (long long)S);
    return causal(L, S);
}

/* ---- random tensors ----------------------------------------------------- */

typedef enum { DRAW_UNIFORM, DRAW_NORMAL } draw_kind;

static tg_tensor *draw(const char *fn, tg_rng *rng, tg_dtype dtype, int ndim,
                       const int64_t *shape, draw_kind kind, double a, double b)
{
    if (!rng)
        return tg__fail(TG_ERR_NULL, "%s: rng is NULL", fn);
    if (!tg__is_float(dtype))
        return tg__fail(TG_ERR_DTYPE, "%s: expected float32 or float64, got %s", fn,
                        tg_dtype_name(dtype));
    if (!isfinite(a) || !isfinite(b))
        return tg__fail(TG_ERR_VALUE, "%s: parameters %g and %g must be finite", fn, a, b);
    if (tg__check_shape(fn, ndim, shape) < 0)
        return NULL;
    tg_tensor *t = tg__empty(dtype, ndim, shape);
    if (!t)
        return NULL;
    int64_t n = tg__numel(ndim, shape);
    void *p = tg__ptr(t);
    /* Values come from the stream in row-major order, one draw per element,
     * so the result does not depend on threads. */
    for (int64_t i = 0; i < n; i++) {
        double v = kind == DRAW_UNIFORM ? a + (b - a) * tg_rng_uniform01(rng)
                                        : a + b * tg_rng_normal(rng);
        if (dtype == TG_FLOAT32)
            ((float *)p)[i] = (float)v;
        else
            ((double *)p)[i] = v;
    }
    return tg__ret(t);
}

tg_tensor *tg_uniform(tg_rng *rng, tg_dtype dtype, int ndim, const int64_t *shape,
                      double low, double high)
{
    if (!(low <= high))
        return tg__fail(TG_ERR_VALUE, "tg_uniform: low %g is greater than high %g", low, high);
    return draw(__func__, rng, dtype, ndim, shape, DRAW_UNIFORM, low, high);
}

tg_tensor *tg_rand(tg_rng *rng, tg_dtype dtype, int ndim, const int64_t *shape)
{
    return draw(__func__, rng, dtype, ndim, shape, DRAW_UNIFORM, 0.0, 1.0);
}

tg_tensor *tg_randn(tg_rng *rng, tg_dtype dtype, int ndim, const int64_t *shape)
{
    return draw(__func__, rng, dtype, ndim, shape, DRAW_NORMAL, 0.0, 1.0);
}
