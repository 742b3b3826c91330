/* Rotary position embeddings without gradients: the table of cos and sin
 * per position and pair, and the rotation of the rows of a strided
 * [..., T, hd] tensor by it, in vector clones on the OpenMP team. */
#include "fastmath.h"
#include "rope_kernels.h"

#include <stdlib.h>

/* One position per unit of work: half sincos pairs, each worth about 40
 * simple operations. */
void tg__rope_fill_table(double *cos64, double *sin64, float *cos32, float *sin32,
                         int64_t positions, int64_t half, double theta)
{
    TG_FOR_ROWS(positions, half * 40, p0, p1, {
        for (int64_t p = p0; p < p1; p++)
            for (int64_t i = 0; i < half; i++) {
                /* Hugging Face's inv_freq = 1 / theta^(2i / hd), in double */
                double angle = (double)p / pow(theta, (double)(2 * i) / (double)(2 * half));
                int64_t k = p * half + i;
                cos64[k] = cos(angle);
                sin64[k] = sin(angle);
                cos32[k] = (float)cos64[k];
                sin32[k] = (float)sin64[k];
            }
    });
}

/* The rows of unit inner stride, one per pairing and dtype: the pairs
 * (i, i + h) read two contiguous halves, the pairs (2i, 2i + 1) one
 * interleaved run; both vectorise. sg is -1 for the inverse rotation. */
#define ROPE_ROW_KERNELS(T, sfx)                                                     \
    TG_VECTOR_CLONES                                                                 \
    static void half_row_##sfx(T *restrict o, const T *restrict x, const T *restrict c, \
                               const T *restrict s, int64_t h, T sg)                 \
    {                                                                                \
        for (int64_t i = 0; i < h; i++) {                                            \
            T a = x[i], b = x[i + h], sn = sg * s[i];                                \
            o[i] = a * c[i] - b * sn;                                                \
            o[i + h] = b * c[i] + a * sn;                                            \
        }                                                                            \
    }                                                                                \
    TG_VECTOR_CLONES                                                                 \
    static void pair_row_##sfx(T *restrict o, const T *restrict x, const T *restrict c, \
                               const T *restrict s, int64_t h, T sg)                 \
    {                                                                                \
        for (int64_t i = 0; i < h; i++) {                                            \
            T a = x[2 * i], b = x[2 * i + 1], sn = sg * s[i];                        \
            o[2 * i] = a * c[i] - b * sn;                                            \
            o[2 * i + 1] = b * c[i] + a * sn;                                        \
        }                                                                            \
    }
ROPE_ROW_KERNELS(float, f32)
ROPE_ROW_KERNELS(double, f64)
#undef ROPE_ROW_KERNELS

/* A row whose elements are xs (x) and os (out) apart: the same arithmetic
 * element by element, in the dtype's own precision. */
#define ROPE_STRIDED_ROW(T, sfx)                                                     \
    static void strided_row_##sfx(T *o, int64_t os, const T *x, int64_t xs, const T *c, \
                                  const T *s, int64_t h, T sg, bool interleaved)     \
    {                                                                                \
        for (int64_t i = 0; i < h; i++) {                                            \
            int64_t ia = interleaved ? 2 * i : i, ib = interleaved ? 2 * i + 1 : i + h; \
            T a = x[ia * xs], b = x[ib * xs], sn = sg * s[i];                        \
            o[ia * os] = a * c[i] - b * sn;                                          \
            o[ib * os] = b * c[i] + a * sn;                                          \
        }                                                                            \
    }
ROPE_STRIDED_ROW(float, f32)
ROPE_STRIDED_ROW(double, f64)
#undef ROPE_STRIDED_ROW

/* One row: x and out at element offsets xo and oo, at table row pos. */
static void rope_row(void *out, int64_t oo, const void *x, int64_t xo,
                     const tg__rope_geometry *g, const void *cos, const void *sin, int64_t pos,
                     tg_dtype dt)
{
    int last = g->ndim - 1;
    int64_t h = g->shape[last] / 2, xs = g->xstride[last], os = g->ostride[last];
    bool unit = xs == 1 && os == 1;
    if (dt == TG_FLOAT32) {
        float *o = (float *)out + oo, sg = g->inverse ? -1.0f : 1.0f;
        const float *xr = (const float *)x + xo;
        const float *c = (const float *)cos + pos * h, *s = (const float *)sin + pos * h;
        if (unit && g->interleaved)
            pair_row_f32(o, xr, c, s, h, sg);
        else if (unit)
            half_row_f32(o, xr, c, s, h, sg);
        else
            strided_row_f32(o, os, xr, xs, c, s, h, sg, g->interleaved);
    } else {
        double *o = (double *)out + oo, sg = g->inverse ? -1.0 : 1.0;
        const double *xr = (const double *)x + xo;
        const double *c = (const double *)cos + pos * h, *s = (const double *)sin + pos * h;
        if (unit && g->interleaved)
            pair_row_f64(o, xr, c, s, h, sg);
        else if (unit)
            half_row_f64(o, xr, c, s, h, sg);
        else
            strided_row_f64(o, os, xr, xs, c, s, h, sg, g->interleaved);
    }
}

/* Rows [r0, r1) in row-major order of the leading ndim - 1 dims: the
 * index of r0 is worked out once, then stepped like an odometer. */
static void rope_range(void *out, const void *x, const tg__rope_geometry *g, const void *cos,
                       const void *sin, tg_dtype dt, int64_t r0, int64_t r1)
{
    int lead = g->ndim - 1; /* dims 0..lead-1 index the rows; lead - 1 is T */
    int64_t idx[TG_MAX_DIMS], xo = 0, oo = 0, rest = r0;
    for (int d = lead - 1; d >= 0; d--) {
        idx[d] = rest % g->shape[d];
        rest /= g->shape[d];
        xo += idx[d] * g->xstride[d];
        oo += idx[d] * g->ostride[d];
    }
    for (int64_t r = r0; r < r1; r++) {
        rope_row(out, oo, x, xo, g, cos, sin, g->pos0 + idx[lead - 1], dt);
        for (int d = lead - 1; d >= 0; d--) {
            xo += g->xstride[d];
            oo += g->ostride[d];
            if (++idx[d] < g->shape[d])
                break;
            xo -= g->xstride[d] * g->shape[d];
            oo -= g->ostride[d] * g->shape[d];
            idx[d] = 0;
        }
    }
}

void tg__rope_rows(void *out, const void *x, const tg__rope_geometry *g, const void *cos,
                   const void *sin, tg_dtype dt)
{
    int64_t rows = tg__numel(g->ndim - 1, g->shape), hd = g->shape[g->ndim - 1];
    if (rows == 0 || hd == 0)
        return;
    /* about three operations an element */
    TG_FOR_ROWS(rows, 3 * hd, r0, r1, rope_range(out, x, g, cos, sin, dt, r0, r1));
}

tg_tensor *tg__tensor_over(const double *data, int64_t n, void (*release)(void *data, void *user),
                           void *user)
{
    /* A storage of its own that the cache never takes (it has a free
     * function): the last view's release hands data back through it. */
    tg_storage *s = calloc(1, sizeof *s);
    if (!s)
        return tg__fail(TG_ERR_NOMEM, "tensorgrad: out of memory for a tensor header");
    *s = (tg_storage){.data = (void *)data, .nbytes = (size_t)n * sizeof *data,
                      .free_fn = release, .free_user = user};
    tg_tensor frame = {.storage = s, .dtype = TG_FLOAT64};
    tg_tensor *t = tg__view(&frame, 1, (int64_t[]){n}, (int64_t[]){1}, 0);
    if (!t)
        free(s);
    return t;
}
