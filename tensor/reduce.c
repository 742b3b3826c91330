/* Summing over chosen dims: the kernel behind sum, mean and the engine's
 * reduction of broadcast gradients. Accumulates in double for both dtypes. */
#include "fastmath.h"
#include "kernels.h"

#include <string.h>

/* acc[row offsets of strides[0]] += x over the iteration space of x. */
#define SUM_ROWS(T, acc)                                                      \
    do {                                                                      \
        const T *px = tg__ptr(x);                                             \
        do {                                                                  \
            double *a = (acc) + it.off[0];                                    \
            const T *p = px + it.off[1];                                      \
            if (it.inner[0] == 0) { /* the row is reduced: one running sum */ \
                double s = 0;                                                 \
                for (int64_t j = 0; j < it.len; j++)                          \
                    s += p[j * it.inner[1]];                                  \
                *a += s;                                                      \
            } else {                                                          \
                for (int64_t j = 0; j < it.len; j++)                          \
                    a[j * it.inner[0]] += p[j * it.inner[1]];                 \
            }                                                                 \
        } while (tg__iter_next(&it));                                         \
    } while (0)

/* Columns per block when the leading dims of a contiguous tensor are summed
 * (a bias gradient): each block is one thread's, its rows added in order,
 * so any thread count gives the same sums. */
#define SUM_COLS 64

/* A float32 block of SUM_COLS columns is summed in SUM_COLS / 8 double
 * lanes (fastmath.h), held in registers over all the rows. */

/* acc[j] (double, zeroed) += x[r * cols + j] for j in [j0, j1), every row in
 * order: whole blocks of SUM_COLS columns in vector accumulators, the
 * columns left over row by row. */
TG_VECTOR_CLONES
static void sum_leading_float(const float *x, int64_t rows, int64_t cols, int64_t j0,
                              int64_t j1, double *acc)
{
    enum { NV = SUM_COLS / TG_DLANES };
    int64_t j = j0;
    for (; j + SUM_COLS <= j1; j += SUM_COLS) {
        tg__dlanes a[NV];
        for (int v = 0; v < NV; v++)
            memcpy(&a[v], acc + j + v * TG_DLANES, sizeof a[v]);
        for (int64_t r = 0; r < rows; r++) {
            const float *row = x + r * cols + j;
            for (int v = 0; v < NV; v++) {
                tg__flanes f;
                memcpy(&f, row + v * TG_DLANES, sizeof f);
                a[v] += __builtin_convertvector(f, tg__dlanes);
            }
        }
        for (int v = 0; v < NV; v++)
            memcpy(acc + j + v * TG_DLANES, &a[v], sizeof a[v]);
    }
    if (j == j1)
        return;
    for (int64_t r = 0; r < rows; r++) /* the columns' chains side by side */
        for (int64_t c = j; c < j1; c++)
            acc[c] += (double)x[r * cols + c];
}

/* The same for float64, as plain loops. */
static void sum_leading_double(const double *x, int64_t rows, int64_t cols, int64_t j0,
                               int64_t j1, double *acc)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = j0; j < j1; j++)
            acc[j] += x[r * cols + j];
}

/* The dims reduced are exactly the leading ones of a contiguous x: the sums
 * of rows x cols by column, into acc. False when x is not of that form. */
static bool sum_leading_dims(const tg_tensor *x, const bool *reduce, double *acc)
{
    int lead = 0;
    while (lead < x->ndim && reduce[lead])
        lead++;
    for (int d = lead; d < x->ndim; d++)
        if (reduce[d])
            return false;
    if (lead == 0 || !tg_is_contiguous(x))
        return false;
    int64_t rows = tg__numel(lead, x->shape), cols = tg__numel(x->ndim - lead, x->shape + lead);
    int64_t blocks = (cols + SUM_COLS - 1) / SUM_COLS;
    bool f32 = x->dtype == TG_FLOAT32;
    if (rows * cols > TG_PAR_MIN && blocks > 1) {
#pragma omp parallel for schedule(static)
        for (int64_t b = 0; b < blocks; b++) {
            int64_t j0 = b * SUM_COLS, j1 = j0 + SUM_COLS < cols ? j0 + SUM_COLS : cols;
            if (f32)
                sum_leading_float(tg__ptr(x), rows, cols, j0, j1, acc);
            else
                sum_leading_double(tg__ptr(x), rows, cols, j0, j1, acc);
        }
    } else if (f32) {
        sum_leading_float(tg__ptr(x), rows, cols, 0, cols, acc);
    } else {
        sum_leading_double(tg__ptr(x), rows, cols, 0, cols, acc);
    }
    return true;
}

tg_tensor *tg__sum_dims(const tg_tensor *x, const bool *reduce)
{
    int64_t shape[TG_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++)
        shape[d] = reduce[d] ? 1 : x->shape[d];
    /* float64 sums straight into its (zeroed) output; float32 into a double
     * buffer, on the stack when small, that the output is rounded from. */
    bool f32 = x->dtype == TG_FLOAT32;
    tg_tensor *out = f32 ? tg__empty_uninit(x->dtype, x->ndim, shape)
                         : tg__empty(x->dtype, x->ndim, shape);
    if (!out)
        return NULL;
    int64_t n_out = tg__numel(x->ndim, shape);
    double small[256];
    double *acc = f32 ? small : tg__ptr(out);
    tg_tensor *big = NULL; /* a larger buffer, from the storage cache */
    if (f32 && n_out > (int64_t)(sizeof small / sizeof small[0])) {
        big = tg__empty(TG_FLOAT64, 1, &n_out);
        if (!big) {
            tg_release(out);
            return NULL;
        }
        acc = tg__ptr(big);
    } else if (f32) {
        memset(small, 0, (size_t)n_out * sizeof small[0]);
    }
    int64_t strides[2][TG_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++)
        strides[0][d] = reduce[d] ? 0 : out->stride[d];
    memcpy(strides[1], x->stride, sizeof strides[1]);
    tg__iter it;
    tg__iter_init(&it, x->ndim, x->shape, 2, (const int64_t(*)[TG_MAX_DIMS])strides);
    if (it.len && !sum_leading_dims(x, reduce, acc)) {
        if (f32)
            SUM_ROWS(float, acc);
        else
            SUM_ROWS(double, acc);
    }
    if (f32) {
        float *o = tg__ptr(out);
        for (int64_t i = 0; i < n_out; i++)
            o[i] = (float)acc[i];
        tg_release(big);
    }
    return out;
}
