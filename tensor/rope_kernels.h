/* The arithmetic of rotary position embeddings (tensor/rope_kernels.c): the
 * cos/sin table of every position, and the rotation of strided rows by it,
 * forward or inverse. Never installed. */
#ifndef TG_ROPE_KERNELS_H
#define TG_ROPE_KERNELS_H

#include "internal.h"

/* cos and sin of p * theta^(-2i / (2 * half)) for p < positions, i < half,
 * computed in double: cos64, sin64 [positions, half] float64 and the same
 * values rounded to float in cos32, sin32. */
void tg__rope_fill_table(double *cos64, double *sin64, float *cos32, float *sin32,
                         int64_t positions, int64_t half, double theta);

/* How tg__rope_rows reads and writes: x and out [..., T, hd] of ndim >= 2
 * dims and the given shape, each with its own strides (any layout; out
 * must not overlap x); position of row t along dim -2 is pos0 + t. */
typedef struct {
    int ndim;
    const int64_t *shape;
    const int64_t *xstride, *ostride;
    int64_t pos0;
    bool interleaved; /* pairs (2i, 2i + 1); otherwise (i, i + hd / 2) */
    bool inverse;     /* rotate by -angle: the backward */
} tg__rope_geometry;

/* out = x rotated pair by pair by the angles of its rows' positions: with
 * c, s the table's cos and sin of pair i at the row's position,
 *   out_a = x_a * c - x_b * s,  out_b = x_b * c + x_a * s
 * (s negated when inverse). cos, sin: the table's [positions, hd / 2] in
 * dt's float type (the caller checked pos0 + T <= positions). Rows go to
 * the OpenMP team when there are enough; each element's result is its
 * own, so any thread count gives the same bits. */
void tg__rope_rows(void *out, const void *x, const tg__rope_geometry *g, const void *cos,
                   const void *sin, tg_dtype dt);

/* A 1-D float64 tensor of n elements over data the library does not own:
 * release(data, user) runs when the last view of it goes. What a graph
 * node keeps to hold a reference to memory that is not a tensor's. NULL
 * with TG_ERR_NOMEM when out of memory (release is then not called). */
tg_tensor *tg__tensor_over(const double *data, int64_t n, void (*release)(void *data, void *user),
                           void *user);

#endif
