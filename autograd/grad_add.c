/* Gradient accumulation: grad += g in place, for the engine adding into a
 * leaf's .grad or a pending gradient and for backward passes that add into
 * a slice. By rows when both are laid out in rows, else a strided walk. */
#include "bf16.h"
#include "graph.h"

#include <string.h>

/* t seen as rows of its last dim, each contiguous, a constant stride *rs
 * apart (the leading dims collapse into one): true, with *rows and *cols;
 * false when t is not laid out so. */
static bool as_rows(const tg_tensor *t, int64_t *rows, int64_t *cols, int64_t *rs)
{
    int n = t->ndim;
    if (n == 0 || (t->shape[n - 1] > 1 && t->stride[n - 1] != 1))
        return false;
    *cols = t->shape[n - 1];
    *rows = 1;
    *rs = *cols;
    int64_t expect = -1; /* the stride the next dim out must have */
    for (int d = n - 2; d >= 0; d--) {
        if (t->shape[d] == 1)
            continue;
        if (expect < 0)
            *rs = t->stride[d];
        else if (t->stride[d] != expect)
            return false;
        expect = t->stride[d] * t->shape[d];
        *rows *= t->shape[d];
    }
    return true;
}

#define ADD_ROWS(T)                                                           \
    do {                                                                      \
        T *d = tg__ptr(grad);                                                 \
        const T *s = tg__ptr(g);                                              \
        TG_FOR_ROWS(rows, cols, r0, r1, {                                     \
            for (int64_t r = r0; r < r1; r++)                                 \
                for (int64_t j = 0; j < cols; j++)                            \
                    d[r * drs + j] += s[r * srs + j];                         \
        });                                                                   \
    } while (0)

/* d[j * di] += s[j * si] for j < len, in one dtype: d and s point at the
 * first element of the run. */
typedef void add_run_fn(void *d, const void *s, int64_t len, int64_t di, int64_t si);

static void add_run_f32(void *dv, const void *sv, int64_t len, int64_t di, int64_t si)
{
    float *d = dv;
    const float *s = sv;
    for (int64_t j = 0; j < len; j++)
        d[j * di] += s[j * si];
}

static void add_run_f64(void *dv, const void *sv, int64_t len, int64_t di, int64_t si)
{
    double *d = dv;
    const double *s = sv;
    for (int64_t j = 0; j < len; j++)
        d[j * di] += s[j * si];
}

/* A bfloat16 tensor's gradient (the output of tg_to_dtype read by two
 * conversions back): summed in float32, rounded once per add. */
static void add_run_bf16(void *dv, const void *sv, int64_t len, int64_t di, int64_t si)
{
    uint16_t *d = dv;
    const uint16_t *s = sv;
    for (int64_t j = 0; j < len; j++) {
        float v = tg__f32_from_bf16(d[j * di]) + tg__f32_from_bf16(s[j * si]);
        d[j * di] = tg__bf16_from_f32(v);
    }
}

/* grad += g over any two layouts of g's shape, one run of the innermost
 * dim at a time. */
static void add_strided(tg_tensor *grad, const tg_tensor *g, add_run_fn *add)
{
    int64_t strides[2][TG_MAX_DIMS];
    memcpy(strides[0], grad->stride, sizeof strides[0]);
    memcpy(strides[1], g->stride, sizeof strides[1]);
    tg__iter it;
    tg__iter_init(&it, g->ndim, g->shape, 2, (const int64_t(*)[TG_MAX_DIMS])strides);
    if (!it.len)
        return;
    size_t item = tg__elem_size(g->dtype);
    do {
        add((char *)tg__ptr(grad) + it.off[0] * item,
            (const char *)tg__ptr(g) + it.off[1] * item, it.len, it.inner[0], it.inner[1]);
    } while (tg__iter_next(&it));
}

void tg__add_into(tg_tensor *grad, const tg_tensor *g)
{
    int64_t n = tg__numel(g->ndim, g->shape), rows, cols, drs, srs, rows2, cols2;
    if (grad->dtype == TG_BFLOAT16) {
        add_strided(grad, g, add_run_bf16);
        return;
    }
    /* laid out in rows (a weight's gradient, a slice of q/k/v): by rows,
     * one block of them per thread when there are enough */
    if (n > 0 && as_rows(grad, &rows, &cols, &drs) &&
        as_rows(g, &rows2, &cols2, &srs) && rows2 == rows && cols2 == cols) {
        if (grad->dtype == TG_FLOAT32)
            ADD_ROWS(float);
        else
            ADD_ROWS(double);
        return;
    }
    add_strided(grad, g, grad->dtype == TG_FLOAT32 ? add_run_f32 : add_run_f64);
}
