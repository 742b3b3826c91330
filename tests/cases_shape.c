/* Gradient-check cases for the view and join ops, most of them on
 * non-contiguous inputs (transposed or sliced), where a view's gradient must
 * find its way back to the right elements of the base. */
#include "cases.h"

#define UNUSED (void)n, (void)c

static int one_3x4(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 2, (int64_t[]){3, 4});
    return 1;
}

static int one_2x3x4(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 3, (int64_t[]){2, 3, 4});
    return 1;
}

static int one_3x1(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 2, (int64_t[]){3, 1});
    return 1;
}

/* [4,3] to be transposed to [3,4], and a contiguous [2,4] to join below it. */
static int transposed_and_rows(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 2, (int64_t[]){4, 3});
    in[1] = gc_randn(rng, 2, (int64_t[]){2, 4});
    return 2;
}

/* [4,3] to be transposed to [3,4], and a contiguous [3,2] to join beside it. */
static int transposed_and_columns(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 2, (int64_t[]){4, 3});
    in[1] = gc_randn(rng, 2, (int64_t[]){3, 2});
    return 2;
}

static int three_columns(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 2, (int64_t[]){2, 1});
    in[1] = gc_randn(rng, 2, (int64_t[]){2, 3});
    in[2] = gc_randn(rng, 2, (int64_t[]){2, 2});
    return 3;
}

static tg_tensor *f_transpose_3d(tg_tensor *const *x, int n, void *c)
{
    UNUSED;
    return tg_transpose(x[0], 0, 2);
}

static tg_tensor *f_permute_3d(tg_tensor *const *x, int n, void *c)
{
    UNUSED;
    return tg_permute(x[0], (const int[]){2, 0, 1});
}

/* A contiguous input: reshape is a view. */
static tg_tensor *f_reshape(tg_tensor *const *x, int n, void *c)
{
    UNUSED;
    return tg_reshape(x[0], 3, (const int64_t[]){2, -1, 3});
}

/* [3,4] transposed to [4,3] cannot be viewed as [2,6]: reshape copies. */
static tg_tensor *f_reshape_transposed(tg_tensor *const *x, int n, void *c)
{
    UNUSED;
    return tg_reshape(tg_transpose(x[0], 0, 1), 2, (const int64_t[]){2, 6});
}

/* Rows 1..2 of [3,4] are non-contiguous in the base but viewable as [8]. */
static tg_tensor *f_reshape_sliced_rows(tg_tensor *const *x, int n, void *c)
{
    UNUSED;
    return tg_reshape(tg_narrow(x[0], 0, 1, 2), 1, (const int64_t[]){8});
}

static tg_tensor *f_narrow(tg_tensor *const *x, int n, void *c)
{
    UNUSED;
    return tg_narrow(x[0], 1, 1, 2);
}

static tg_tensor *f_narrow_transposed(tg_tensor *const *x, int n, void *c)
{
    UNUSED;
    return tg_narrow(tg_transpose(x[0], 0, 1), 0, 1, 2);
}

static tg_tensor *f_expand(tg_tensor *const *x, int n, void *c)
{
    UNUSED;
    return tg_expand(x[0], 3, (const int64_t[]){2, 3, 4});
}

/* unsqueeze then squeeze at other dims, on a transposed input. */
static tg_tensor *f_unsqueeze_squeeze(tg_tensor *const *x, int n, void *c)
{
    UNUSED;
    tg_tensor *u = tg_unsqueeze(tg_transpose(x[0], 0, 1), -1); /* [4,3,1] */
    return tg_squeeze(tg_unsqueeze(u, 0), 3); /* [1,4,3] */
}

static tg_tensor *f_concat_rows(tg_tensor *const *x, int n, void *c)
{
    UNUSED;
    return tg_concat((const tg_tensor *[]){tg_transpose(x[0], 0, 1), x[1]}, 2, 0);
}

static tg_tensor *f_concat_columns(tg_tensor *const *x, int n, void *c)
{
    UNUSED;
    return tg_concat((const tg_tensor *[]){tg_transpose(x[0], 0, 1), x[1]}, 2, 1);
}

static tg_tensor *f_concat_three(tg_tensor *const *x, int n, void *c)
{
    UNUSED;
    return tg_concat((const tg_tensor *[]){x[0], x[1], x[2]}, 3, -1);
}

static tg_tensor *f_contiguous_transposed(tg_tensor *const *x, int n, void *c)
{
    UNUSED;
    return tg_contiguous(tg_transpose(x[0], 0, 1));
}

/* Three slices of one intermediate (as q, k and v of one projection), two
 * of them overlapping, and the intermediate used whole as well: their
 * gradients meet in one buffer, in place, whatever order they arrive in. */
static tg_tensor *f_narrow_slices_of_one(tg_tensor *const *x, int n, void *c)
{
    (void)n, (void)c;
    tg_tensor *h = tg_tanh(x[0]); /* [3, 4], not a leaf */
    tg_tensor *a = tg_narrow(h, 1, 0, 2), *b = tg_narrow(h, 1, 1, 2), *d = tg_narrow(h, 1, 2, 2);
    tg_tensor *y = tg_add(tg_mul(a, b), tg_mul(d, d));
    return tg_add(tg_sum(tg_mul(y, y), NULL, 0, false), tg_sum(tg_mul(h, h), NULL, 0, false));
}

/* The same with the whole uses first and three of them (h * h + h): the
 * slices' gradients then arrive on a sum the engine has already made. */
static tg_tensor *f_narrow_after_whole_uses(tg_tensor *const *x, int n, void *c)
{
    (void)n, (void)c;
    tg_tensor *h = tg_tanh(x[0]);
    tg_tensor *whole = tg_sum(tg_add(tg_mul(h, h), h), NULL, 0, false);
    tg_tensor *a = tg_narrow(h, 1, 0, 2), *b = tg_narrow(h, 1, 1, 3);
    tg_tensor *parts = tg_add(tg_sum(tg_mul(a, a), NULL, 0, false), tg_sum(tg_exp(b), NULL, 0, false));
    return tg_add(whole, parts);
}

/* Slices of a leaf: the leaf's .grad is the buffer they add into. */
static tg_tensor *f_narrow_slices_of_leaf(tg_tensor *const *x, int n, void *c)
{
    (void)n, (void)c;
    tg_tensor *a = tg_narrow(x[0], 0, 0, 2), *b = tg_narrow(x[0], 0, 1, 2);
    return tg_sum(tg_mul(tg_mul(a, b), a), NULL, 0, false);
}

const gc_case cases_shape[] = {
    {"transpose_3d", f_transpose_3d, one_2x3x4, 0, 0},
    {"permute_3d", f_permute_3d, one_2x3x4, 0, 0},
    {"reshape_contiguous_infers_minus_one", f_reshape, one_3x4, 0, 0},
    {"reshape_transposed_copies", f_reshape_transposed, one_3x4, 0, 0},
    {"reshape_sliced_rows_as_view", f_reshape_sliced_rows, one_3x4, 0, 0},
    {"narrow", f_narrow, one_3x4, 0, 0},
    {"narrow_transposed", f_narrow_transposed, one_3x4, 0, 0},
    {"narrow_slices_of_one_intermediate", f_narrow_slices_of_one, one_3x4, 0, 0},
    {"narrow_slices_of_a_leaf", f_narrow_slices_of_leaf, one_3x4, 0, 0},
    {"narrow_after_whole_uses", f_narrow_after_whole_uses, one_3x4, 0, 0},
    {"expand_3x1_to_2x3x4", f_expand, one_3x1, 0, 0},
    {"unsqueeze_squeeze_transposed", f_unsqueeze_squeeze, one_3x4, 0, 0},
    {"concat_transposed_and_contiguous_dim0", f_concat_rows, transposed_and_rows, 0, 0},
    {"concat_transposed_and_contiguous_dim1", f_concat_columns, transposed_and_columns, 0, 0},
    {"concat_three_along_last_dim", f_concat_three, three_columns, 0, 0},
    {"contiguous_transposed", f_contiguous_transposed, one_3x4, 0, 0},
};
const int n_cases_shape = sizeof cases_shape / sizeof cases_shape[0];
