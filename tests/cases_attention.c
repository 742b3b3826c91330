/* Gradient-check cases for the attention ops: softmax and log_softmax over
 * different dims and layouts, masked scores (causal and fully masked rows),
 * masked_fill with a broadcast mask, and dropout with a fixed mask. */
#include "cases.h"

#include <math.h>

static int one_3x4(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 2, (int64_t[]){3, 4});
    return 1;
}

static int one_4x3(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 2, (int64_t[]){4, 3});
    return 1;
}

static int one_2x3x4(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 3, (int64_t[]){2, 3, 4});
    return 1;
}

/* Attention scores for 4 queries and 4 keys. */
static int scores_4x4(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 2, (int64_t[]){4, 4});
    return 1;
}

static tg_tensor *f_softmax_last(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    return tg_softmax(x[0], -1);
}

static tg_tensor *f_softmax_dim0(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    return tg_softmax(x[0], 0);
}

/* [4,3] transposed to a non-contiguous [3,4], normalised along its rows. */
static tg_tensor *f_softmax_transposed(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    return tg_softmax(tg_transpose(x[0], 0, 1), -1);
}

/* The middle dim of [2,3,4]: rows neither contiguous nor outermost. */
static tg_tensor *f_softmax_middle(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    return tg_softmax(x[0], 1);
}

static tg_tensor *f_log_softmax_last(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    return tg_log_softmax(x[0], -1);
}

/* A sliced, transposed view: [2,3,4] -> narrow dim 2 to 3 -> [2,3,3]^T(0,2). */
static tg_tensor *f_log_softmax_view(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    return tg_log_softmax(tg_transpose(tg_narrow(x[0], 2, 1, 3), 0, 2), 0);
}

/* Causal attention weights: query i sees keys 0..i; the masked scores must
 * get no gradient. */
static tg_tensor *f_causal_softmax(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    return tg_softmax(tg_masked_fill(x[0], tg_causal_mask(4), -INFINITY), -1);
}

/* Row 1 of [3,4] entirely masked: its weights are 0 (not NaN) and it passes
 * zero gradient; row 2 is partly masked. */
static tg_tensor *f_fully_masked_row(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    const bool m[12] = {0, 0, 0, 0, 1, 1, 1, 1, 0, 1, 0, 1};
    tg_tensor *mask = tg_from_data(TG_BOOL, 2, (int64_t[]){3, 4}, m);
    return tg_softmax(tg_masked_fill(x[0], mask, -INFINITY), -1);
}

/* A [1,4] mask broadcast over the 3 rows of [3,4]. */
static tg_tensor *f_masked_fill_broadcast(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    const bool m[4] = {1, 0, 0, 1};
    tg_tensor *mask = tg_from_data(TG_BOOL, 2, (int64_t[]){1, 4}, m);
    return tg_masked_fill(x[0], mask, 2.5);
}

/* The same mask against a transposed input. */
static tg_tensor *f_masked_fill_transposed(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    const bool m[4] = {0, 1, 1, 0};
    tg_tensor *mask = tg_from_data(TG_BOOL, 2, (int64_t[]){1, 4}, m);
    return tg_masked_fill(tg_transpose(x[0], 0, 1), mask, -3.0);
}

/* A fresh generator with one seed on every call: every evaluation the
 * checker makes draws the same mask, so the function is deterministic. */
static tg_tensor *f_dropout(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    tg_rng *rng = tg_rng_new(7);
    tg_tensor *y = tg_dropout(x[0], 0.4, true, rng);
    tg_rng_free(rng);
    return y;
}

/* Dropout of a transposed input, followed by a softmax. */
static tg_tensor *f_dropout_transposed(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    tg_rng *rng = tg_rng_new(7);
    tg_tensor *y = tg_softmax(tg_dropout(tg_transpose(x[0], 0, 1), 0.25, true, rng), -1);
    tg_rng_free(rng);
    return y;
}

const gc_case cases_attention[] = {
    {"softmax_last_dim", f_softmax_last, one_3x4, 0, 0},
    {"softmax_dim0", f_softmax_dim0, one_3x4, 0, 0},
    {"softmax_transposed_input", f_softmax_transposed, one_4x3, 0, 0},
    {"softmax_middle_dim", f_softmax_middle, one_2x3x4, 0, 0},
    {"log_softmax_last_dim", f_log_softmax_last, one_3x4, 0, 0},
    {"log_softmax_sliced_transposed", f_log_softmax_view, one_2x3x4, 0, 0},
    {"softmax_causal_mask", f_causal_softmax, scores_4x4, 0, 0},
    {"softmax_fully_masked_row", f_fully_masked_row, one_3x4, 0, 0},
    {"masked_fill_broadcast_mask", f_masked_fill_broadcast, one_3x4, 0, 0},
    {"masked_fill_transposed_input", f_masked_fill_transposed, one_4x3, 0, 0},
    {"dropout_fixed_mask", f_dropout, one_3x4, 0, 0},
    {"dropout_transposed_then_softmax", f_dropout_transposed, one_4x3, 0, 0},
};
const int n_cases_attention = sizeof cases_attention / sizeof cases_attention[0];
