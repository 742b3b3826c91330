/* View and join ops: values and shapes against index loops, views sharing
 * storage with their base, gradients of views landing in the right elements
 * of the base, and every error with its code and message. */
#include "testutil.h"

/* A float64 [rows, cols] tensor holding 0, 1, 2, ... in row-major order. */
static tg_tensor *iota(int ndim, const int64_t *shape)
{
    tg_tensor *t = tg_zeros(TG_FLOAT64, ndim, shape);
    double *p = tg_data(t);
    for (int64_t i = 0; i < tg_numel(t); i++)
        p[i] = (double)i;
    return t;
}

/* ---- permute and transpose ---------------------------------------------------- */

START_TEST(permute_reorders_dims_without_copying)
{
    tg_tensor *x = iota(3, SHAPE(2, 3, 4));
    tg_tensor *y = tg_permute(x, (const int[]){2, 0, 1});
    ck_assert_shape(y, 4, 2, 3);
    ck_assert(tg_shares_storage(x, y));
    ck_assert(!tg_is_contiguous(y));
    for (int64_t k = 0; k < 4; k++)
        for (int64_t i = 0; i < 2; i++)
            for (int64_t j = 0; j < 3; j++)
                ck_assert_double_eq(tg_get(y, (int64_t[]){k, i, j}), (double)(i * 12 + j * 4 + k));
    tg_tensor *back = tg_permute(y, (const int[]){-2, -1, -3}); /* the inverse */
    ck_assert(tg_is_contiguous(back));
    ck_assert_values(back, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18,
                     19, 20, 21, 22, 23);
    tg_release(back);
    tg_release(y);
    tg_release(x);
}
END_TEST

START_TEST(permute_rejects_bad_perms)
{
    tg_tensor *x = iota(2, SHAPE(2, 3));
    ck_assert_ptr_null(tg_permute(x, (const int[]){0, 0}));
    ck_assert_error(TG_ERR_DIM, "tg_permute", "dim 0 appears twice");
    ck_assert_ptr_null(tg_permute(x, (const int[]){0, 2}));
    ck_assert_error(TG_ERR_DIM, "tg_permute", "perm[1] = 2", "[2,3]");
    ck_assert_ptr_null(tg_permute(x, NULL));
    ck_assert_error(TG_ERR_NULL, "tg_permute", "perm");
    ck_assert_ptr_null(tg_permute(NULL, (const int[]){0}));
    ck_assert_error(TG_ERR_NULL, "tg_permute");
    tg_release(x);
}
END_TEST

START_TEST(transpose_swaps_two_dims)
{
    tg_tensor *x = iota(3, SHAPE(2, 3, 4));
    tg_tensor *y = tg_transpose(x, 0, -1);
    ck_assert_shape(y, 4, 3, 2);
    ck_assert(tg_shares_storage(x, y));
    for (int64_t k = 0; k < 4; k++)
        for (int64_t j = 0; j < 3; j++)
            for (int64_t i = 0; i < 2; i++)
                ck_assert_double_eq(tg_get(y, (int64_t[]){k, j, i}), (double)(i * 12 + j * 4 + k));
    tg_release(y);
    tg_release(x);
}
END_TEST

/* ---- reshape, unsqueeze, squeeze -------------------------------------------------- */

START_TEST(reshape_of_contiguous_is_a_view_and_infers_minus_one)
{
    tg_tensor *x = iota(2, SHAPE(3, 4));
    tg_tensor *y = tg_reshape(x, 3, SHAPE(2, -1, 3));
    ck_assert_shape(y, 2, 2, 3);
    ck_assert(tg_shares_storage(x, y));
    ck_assert(tg_is_contiguous(y));
    ck_assert_values(y, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11);
    tg_tensor *col = tg_narrow(x, 1, 2, 1); /* [3,1] cannot lose all its dims */
    ck_assert_ptr_null(tg_reshape(col, 0, NULL));
    ck_assert_error(TG_ERR_SHAPE, "tg_reshape", "[3,1]", "3 elements", "[]");
    tg_release(col);
    tg_tensor *one = tg_narrow(x, 0, 2, 1);
    tg_tensor *one1 = tg_narrow(one, 1, 3, 1);
    tg_tensor *scalar = tg_reshape(one1, 0, NULL);
    ck_assert_int_eq(tg_ndim(scalar), 0);
    ck_assert_double_eq(tg_item(scalar), 11);
    ck_assert(tg_shares_storage(x, scalar));
    tg_release(scalar);
    tg_release(one1);
    tg_release(one);
    tg_release(y);
    tg_release(x);
}
END_TEST

START_TEST(reshape_of_transposed_copies_in_row_major_order)
{
    tg_tensor *x = iota(2, SHAPE(3, 4));
    tg_tensor *t = tg_transpose(x, 0, 1); /* [4,3]: t[i][j] = x[j][i] = 4j + i */
    tg_tensor *y = tg_reshape(t, 2, SHAPE(2, 6));
    ck_assert_shape(y, 2, 6);
    ck_assert(!tg_shares_storage(x, y));
    double want[12];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++)
            want[i * 3 + j] = 4 * j + i;
    assert_values(y, want, 12, 0);
    /* a copy: writing the base leaves it alone */
    ((double *)tg_data(x))[0] = 100;
    ck_assert_double_eq(tg_get(y, SHAPE(0, 0)), 0);
    tg_release(y);
    tg_release(t);
    tg_release(x);
}
END_TEST

START_TEST(reshape_of_non_contiguous_views_when_layout_allows)
{
    /* rows 1..2 of [4,3] are one run of 6 elements in the base */
    tg_tensor *x = iota(2, SHAPE(4, 3));
    tg_tensor *rows = tg_narrow(x, 0, 1, 2);
    tg_tensor *flat = tg_reshape(rows, 1, SHAPE(-1));
    ck_assert(tg_shares_storage(x, flat));
    ck_assert_values(flat, 0, 3, 4, 5, 6, 7, 8);
    /* [2,3,4] permuted to [3,2,4] keeps the last dim whole: splitting it is a view */
    tg_tensor *z = iota(3, SHAPE(2, 3, 4));
    tg_tensor *p = tg_permute(z, (const int[]){1, 0, 2});
    tg_tensor *split = tg_reshape(p, 4, SHAPE(3, 2, 2, 2));
    ck_assert(tg_shares_storage(z, split));
    for (int64_t a = 0; a < 3; a++)
        for (int64_t b = 0; b < 2; b++)
            for (int64_t c = 0; c < 4; c++)
                ck_assert_double_eq(tg_get(split, (int64_t[]){a, b, c / 2, c % 2}),
                                    (double)(b * 12 + a * 4 + c));
    /* merging the permuted dims 0 and 1 needs a copy */
    tg_tensor *merged = tg_reshape(p, 2, SHAPE(6, 4));
    ck_assert(!tg_shares_storage(z, merged));
    for (int64_t r = 0; r < 6; r++)
        for (int64_t c = 0; c < 4; c++)
            ck_assert_double_eq(tg_get(merged, (int64_t[]){r, c}),
                                (double)((r % 2) * 12 + (r / 2) * 4 + c));
    tg_release(merged);
    tg_release(split);
    tg_release(p);
    tg_release(z);
    tg_release(flat);
    tg_release(rows);
    tg_release(x);
}
END_TEST

START_TEST(reshape_of_an_expanded_tensor_views_or_copies_as_the_strides_allow)
{
    tg_tensor *x = T64(SHAPE(3, 1), 2, 1.0, 2.0, 3.0);
    tg_tensor *e = tg_expand(x, 3, SHAPE(2, 3, 4)); /* strides 0, 1, 0 */
    /* splitting the stride-0 last dim is a view */
    tg_tensor *r = tg_reshape(e, 4, SHAPE(2, 3, 2, 2));
    ck_assert(tg_shares_storage(x, r));
    for (int64_t i = 0; i < 2; i++)
        for (int64_t j = 0; j < 3; j++)
            for (int64_t k = 0; k < 4; k++)
                ck_assert_double_eq(tg_get(r, (int64_t[]){i, j, k / 2, k % 2}), (double)(j + 1));
    /* merging dims of strides 0 and 1 is not: a copy */
    tg_tensor *m = tg_reshape(e, 2, SHAPE(6, 4));
    ck_assert(!tg_shares_storage(x, m));
    for (int64_t i = 0; i < 6; i++)
        for (int64_t k = 0; k < 4; k++)
            ck_assert_double_eq(tg_get(m, (int64_t[]){i, k}), (double)(i % 3 + 1));
    tg_release(m);
    tg_release(r);
    tg_release(e);
    tg_release(x);
}
END_TEST

START_TEST(reshape_rejects_bad_shapes)
{
    tg_tensor *x = iota(2, SHAPE(2, 3));
    ck_assert_ptr_null(tg_reshape(x, 2, SHAPE(4, 2)));
    ck_assert_error(TG_ERR_SHAPE, "tg_reshape", "cannot reshape [2,3]", "6 elements", "[4,2]");
    ck_assert_ptr_null(tg_reshape(x, 2, SHAPE(4, -1)));
    ck_assert_error(TG_ERR_SHAPE, "tg_reshape", "[4,-1]");
    ck_assert_ptr_null(tg_reshape(x, 3, SHAPE(-1, 3, -1)));
    ck_assert_error(TG_ERR_SHAPE, "tg_reshape", "more than one -1", "[-1,3,-1]");
    ck_assert_ptr_null(tg_reshape(x, 2, SHAPE(-2, -3)));
    ck_assert_error(TG_ERR_SHAPE, "tg_reshape", "negative size -2");
    ck_assert_ptr_null(tg_reshape(x, 3, SHAPE(INT64_C(1) << 40, INT64_C(1) << 40, 1 << 20)));
    ck_assert_error(TG_ERR_SHAPE, "tg_reshape", "cannot reshape");
    ck_assert_ptr_null(tg_reshape(x, 9, SHAPE(1, 1, 1, 1, 1, 1, 1, 2, 3)));
    ck_assert_error(TG_ERR_SHAPE, "tg_reshape", "ndim 9");
    ck_assert_ptr_null(tg_reshape(x, 2, NULL));
    ck_assert_error(TG_ERR_NULL, "tg_reshape", "shape");
    ck_assert_ptr_null(tg_reshape(NULL, 1, SHAPE(6)));
    ck_assert_error(TG_ERR_NULL, "tg_reshape");
    tg_tensor *empty = tg_zeros(TG_FLOAT64, 2, SHAPE(0, 3));
    ck_assert_ptr_null(tg_reshape(empty, 2, SHAPE(0, -1)));
    ck_assert_error(TG_ERR_SHAPE, "tg_reshape", "ambiguous");
    tg_tensor *e = tg_reshape(empty, 3, SHAPE(3, 0, 5));
    ck_assert_shape(e, 3, 0, 5);
    tg_release(e);
    tg_release(empty);
    tg_release(x);
}
END_TEST

START_TEST(unsqueeze_and_squeeze_add_and_remove_size_one_dims)
{
    tg_tensor *x = iota(2, SHAPE(2, 3));
    tg_tensor *t = tg_transpose(x, 0, 1); /* [3,2], non-contiguous */
    tg_scope_begin();
    ck_assert_shape(tg_unsqueeze(t, 0), 1, 3, 2);
    ck_assert_shape(tg_unsqueeze(t, 1), 3, 1, 2);
    ck_assert_shape(tg_unsqueeze(t, 2), 3, 2, 1);
    ck_assert_shape(tg_unsqueeze(t, -1), 3, 2, 1);
    ck_assert_shape(tg_unsqueeze(t, -3), 1, 3, 2);
    tg_tensor *u = tg_unsqueeze(t, 1);
    ck_assert(tg_shares_storage(x, u));
    for (int64_t i = 0; i < 3; i++)
        for (int64_t j = 0; j < 2; j++)
            ck_assert_double_eq(tg_get(u, (int64_t[]){i, 0, j}), (double)(j * 3 + i));
    tg_tensor *s = tg_squeeze(u, -2);
    ck_assert_shape(s, 3, 2);
    ck_assert(tg_shares_storage(x, s));
    for (int64_t i = 0; i < 3; i++)
        for (int64_t j = 0; j < 2; j++)
            ck_assert_double_eq(tg_get(s, (int64_t[]){i, j}), (double)(j * 3 + i));
    ck_assert_int_eq(tg_ndim(tg_unsqueeze(tg_scalar(TG_FLOAT64, 2.0), 0)), 1);
    ck_assert_int_eq(tg_ndim(tg_squeeze(tg_ones(TG_FLOAT64, 1, SHAPE(1)), 0)), 0);
    tg_scope_end();
    tg_release(t);
    tg_release(x);
}
END_TEST

START_TEST(unsqueeze_and_squeeze_reject_bad_dims)
{
    tg_tensor *x = iota(2, SHAPE(2, 1));
    ck_assert_ptr_null(tg_unsqueeze(x, 3));
    ck_assert_error(TG_ERR_DIM, "tg_unsqueeze", "dim 3", "[-3, 2]");
    ck_assert_ptr_null(tg_unsqueeze(x, -4));
    ck_assert_error(TG_ERR_DIM, "tg_unsqueeze", "dim -4");
    ck_assert_ptr_null(tg_squeeze(x, 0));
    ck_assert_error(TG_ERR_SHAPE, "tg_squeeze", "dim 0", "[2,1]", "size 2");
    ck_assert_ptr_null(tg_squeeze(x, 2));
    ck_assert_error(TG_ERR_DIM, "tg_squeeze", "dim 2");
    tg_tensor *s = tg_scalar(TG_FLOAT64, 1.0);
    ck_assert_ptr_null(tg_squeeze(s, 0));
    ck_assert_error(TG_ERR_DIM, "tg_squeeze", "0-dim");
    tg_tensor *full = tg_zeros(TG_FLOAT32, 8, SHAPE(1, 1, 1, 1, 1, 1, 1, 1));
    ck_assert_ptr_null(tg_unsqueeze(full, 0));
    ck_assert_error(TG_ERR_SHAPE, "tg_unsqueeze", "most dims");
    ck_assert_ptr_null(tg_unsqueeze(NULL, 0));
    ck_assert_error(TG_ERR_NULL, "tg_unsqueeze");
    ck_assert_ptr_null(tg_squeeze(NULL, 0));
    ck_assert_error(TG_ERR_NULL, "tg_squeeze");
    tg_release(full);
    tg_release(s);
    tg_release(x);
}
END_TEST

/* ---- narrow -------------------------------------------------------------------- */

START_TEST(narrow_is_a_view_of_the_slice)
{
    tg_tensor *x = iota(2, SHAPE(3, 4));
    tg_tensor *y = tg_narrow(x, -1, 1, 2);
    ck_assert_shape(y, 3, 2);
    ck_assert(tg_shares_storage(x, y));
    ck_assert_values(y, 0, 1, 2, 5, 6, 9, 10);
    tg_tensor *t = tg_transpose(x, 0, 1);   /* [4,3]: t[i][j] = 4j + i */
    tg_tensor *z = tg_narrow(t, 0, 2, 2);   /* t rows 2..3 */
    ck_assert_shape(z, 2, 3);
    ck_assert(tg_shares_storage(x, z));
    ck_assert_values(z, 0, 2, 6, 10, 3, 7, 11);
    tg_tensor *none = tg_narrow(x, 0, 3, 0);
    ck_assert_shape(none, 0, 4);
    tg_release(none);
    tg_release(z);
    tg_release(t);
    tg_release(y);
    tg_release(x);
}
END_TEST

START_TEST(narrow_rejects_out_of_range_slices)
{
    tg_tensor *x = iota(2, SHAPE(3, 4));
    ck_assert_ptr_null(tg_narrow(x, 1, 5, 0));
    ck_assert_error(TG_ERR_INDEX, "tg_narrow", "start 5", "[0, 4]", "[3,4]");
    ck_assert_ptr_null(tg_narrow(x, 1, -1, 1));
    ck_assert_error(TG_ERR_INDEX, "tg_narrow", "start -1");
    ck_assert_ptr_null(tg_narrow(x, 1, 2, 3));
    ck_assert_error(TG_ERR_INDEX, "tg_narrow", "length 3", "start 2", "[3,4]");
    ck_assert_ptr_null(tg_narrow(x, 0, 0, -1));
    ck_assert_error(TG_ERR_INDEX, "tg_narrow", "length -1");
    ck_assert_ptr_null(tg_narrow(x, 2, 0, 1));
    ck_assert_error(TG_ERR_DIM, "tg_narrow", "dim 2");
    tg_tensor *s = tg_scalar(TG_FLOAT64, 1.0);
    ck_assert_ptr_null(tg_narrow(s, 0, 0, 1));
    ck_assert_error(TG_ERR_DIM, "tg_narrow", "0-dim");
    ck_assert_ptr_null(tg_narrow(NULL, 0, 0, 1));
    ck_assert_error(TG_ERR_NULL, "tg_narrow");
    tg_release(s);
    tg_release(x);
}
END_TEST

/* ---- expand ----------------------------------------------------------------------- */

START_TEST(expand_repeats_size_one_dims_with_stride_zero)
{
    tg_tensor *x = T64(SHAPE(3, 1), 2, 1.0, 2.0, 3.0);
    tg_tensor *y = tg_expand(x, 3, SHAPE(2, -1, 4));
    ck_assert_shape(y, 2, 3, 4);
    ck_assert(tg_shares_storage(x, y));
    ck_assert(tg_strides(y)[0] == 0 && tg_strides(y)[2] == 0);
    for (int64_t i = 0; i < 2; i++)
        for (int64_t j = 0; j < 3; j++)
            for (int64_t k = 0; k < 4; k++)
                ck_assert_double_eq(tg_get(y, (int64_t[]){i, j, k}), (double)(j + 1));
    /* same sizes: a plain view */
    tg_tensor *same = tg_expand(x, 2, SHAPE(3, 1));
    ck_assert(tg_is_contiguous(same));
    /* a transposed input keeps its strides on the kept dims */
    tg_tensor *r = T64(SHAPE(1, 2), 2, 5.0, 6.0);
    tg_tensor *rt = tg_transpose(r, 0, 1); /* [2,1] */
    tg_tensor *e = tg_expand(rt, 2, SHAPE(2, 3));
    ck_assert_values(e, 0, 5, 5, 5, 6, 6, 6);
    tg_release(e);
    tg_release(rt);
    tg_release(r);
    tg_release(same);
    tg_release(y);
    tg_release(x);
}
END_TEST

START_TEST(expand_rejects_changing_a_size_other_than_one)
{
    tg_tensor *x = T64(SHAPE(3, 1), 2, 1.0, 2.0, 3.0);
    ck_assert_ptr_null(tg_expand(x, 2, SHAPE(4, 2)));
    ck_assert_error(TG_ERR_SHAPE, "tg_expand", "[3,1]", "[4,2]", "dim 0 has size 3");
    ck_assert_ptr_null(tg_expand(x, 1, SHAPE(3)));
    ck_assert_error(TG_ERR_SHAPE, "tg_expand", "[3,1]", "1 dims");
    ck_assert_ptr_null(tg_expand(x, 3, SHAPE(-1, 3, 2)));
    ck_assert_error(TG_ERR_SHAPE, "tg_expand", "size -1 in dim 0");
    ck_assert_ptr_null(tg_expand(x, 2, SHAPE(3, -2)));
    ck_assert_error(TG_ERR_SHAPE, "tg_expand", "size -2");
    ck_assert_ptr_null(tg_expand(x, 2, NULL));
    ck_assert_error(TG_ERR_NULL, "tg_expand", "shape");
    ck_assert_ptr_null(tg_expand(NULL, 1, SHAPE(1)));
    ck_assert_error(TG_ERR_NULL, "tg_expand");
    tg_release(x);
}
END_TEST

/* ---- concat ------------------------------------------------------------------------ */

START_TEST(concat_joins_non_contiguous_inputs_along_either_dim)
{
    tg_tensor *a = iota(2, SHAPE(3, 2));
    tg_tensor *at = tg_transpose(a, 0, 1); /* [2,3]: at[i][j] = 2j + i */
    tg_tensor *b = T64(SHAPE(1, 3), 2, 10.0, 11.0, 12.0);
    tg_tensor *rows = tg_concat((const tg_tensor *[]){at, b}, 2, 0);
    ck_assert_shape(rows, 3, 3);
    ck_assert(!tg_shares_storage(rows, a));
    ck_assert_values(rows, 0, 0, 2, 4, 1, 3, 5, 10, 11, 12);
    tg_tensor *c = T64(SHAPE(2, 1), 2, 20.0, 21.0);
    tg_tensor *cols = tg_concat((const tg_tensor *[]){c, at, c}, 3, -1);
    ck_assert_shape(cols, 2, 5);
    ck_assert_values(cols, 0, 20, 0, 2, 4, 20, 21, 1, 3, 5, 21);
    tg_tensor *single = tg_concat((const tg_tensor *[]){at}, 1, 1);
    ck_assert(!tg_shares_storage(single, a));
    ck_assert_values(single, 0, 0, 2, 4, 1, 3, 5);
    tg_release(single);
    tg_release(cols);
    tg_release(c);
    tg_release(rows);
    tg_release(b);
    tg_release(at);
    tg_release(a);
}
END_TEST

START_TEST(concat_works_for_float32_and_int64)
{
    tg_tensor *a = T32(SHAPE(2), 1, 1.5f, 2.5f);
    tg_tensor *b = T32(SHAPE(1), 1, -1.0f);
    tg_tensor *y = tg_concat((const tg_tensor *[]){a, b}, 2, 0);
    ck_assert_int_eq(tg_dtype_of(y), TG_FLOAT32);
    ck_assert_values(y, 0, 1.5, 2.5, -1.0);
    tg_tensor *i = tg_from_data(TG_INT64, 1, SHAPE(2), (const int64_t[]){7, 8});
    tg_tensor *j = tg_concat((const tg_tensor *[]){i, i}, 2, 0);
    ck_assert_int_eq(tg_dtype_of(j), TG_INT64);
    ck_assert_values(j, 0, 7, 8, 7, 8);
    tg_release(j);
    tg_release(i);
    tg_release(y);
    tg_release(b);
    tg_release(a);
}
END_TEST

START_TEST(concat_rejects_mismatched_inputs)
{
    tg_tensor *a = tg_zeros(TG_FLOAT64, 2, SHAPE(2, 3));
    tg_tensor *b = tg_zeros(TG_FLOAT64, 2, SHAPE(2, 4));
    tg_tensor *c = tg_zeros(TG_FLOAT32, 2, SHAPE(2, 3));
    tg_tensor *d = tg_zeros(TG_FLOAT64, 1, SHAPE(3));
    tg_tensor *s = tg_scalar(TG_FLOAT64, 1.0);
    ck_assert_ptr_null(tg_concat((const tg_tensor *[]){a, b}, 2, 0));
    ck_assert_error(TG_ERR_SHAPE, "tg_concat", "xs[1] [2,4]", "xs[0] [2,3]", "dim 1");
    ck_assert_ptr_null(tg_concat((const tg_tensor *[]){a, c}, 2, 0));
    ck_assert_error(TG_ERR_DTYPE, "tg_concat", "float32", "float64");
    ck_assert_ptr_null(tg_concat((const tg_tensor *[]){a, d}, 2, 0));
    ck_assert_error(TG_ERR_SHAPE, "tg_concat", "[3]", "1 dims", "[2,3]");
    ck_assert_ptr_null(tg_concat((const tg_tensor *[]){a, b}, 2, 2));
    ck_assert_error(TG_ERR_DIM, "tg_concat", "dim 2");
    ck_assert_ptr_null(tg_concat((const tg_tensor *[]){s, s}, 2, 0));
    ck_assert_error(TG_ERR_DIM, "tg_concat", "0-dim");
    ck_assert_ptr_null(tg_concat((const tg_tensor *[]){a}, 0, 0));
    ck_assert_error(TG_ERR_VALUE, "tg_concat", "n is 0");
    ck_assert_ptr_null(tg_concat((const tg_tensor *[]){a, NULL}, 2, 0));
    ck_assert_error(TG_ERR_NULL, "tg_concat", "xs[1]");
    ck_assert_ptr_null(tg_concat(NULL, 1, 0));
    ck_assert_error(TG_ERR_NULL, "tg_concat", "xs");
    tg_release(s);
    tg_release(d);
    tg_release(c);
    tg_release(b);
    tg_release(a);
}
END_TEST

/* ---- contiguous ----------------------------------------------------------------------- */

START_TEST(contiguous_returns_x_itself_or_a_row_major_copy)
{
    tg_tensor *x = iota(2, SHAPE(2, 3));
    tg_tensor *same = tg_contiguous(x);
    ck_assert_ptr_eq(same, x);
    tg_release(same);
    tg_tensor *t = tg_transpose(x, 0, 1);
    tg_tensor *c = tg_contiguous(t);
    ck_assert(tg_is_contiguous(c));
    ck_assert(!tg_shares_storage(c, x));
    ck_assert_shape(c, 3, 2);
    ck_assert_values(c, 0, 0, 3, 1, 4, 2, 5);
    const double *raw = tg_data(c); /* row-major in memory, not just through strides */
    ck_assert_ptr_nonnull(raw);
    for (int i = 0; i < 6; i++)
        ck_assert_double_eq(raw[i], (double)((i % 2) * 3 + i / 2));
    ck_assert_ptr_null(tg_contiguous(NULL));
    ck_assert_error(TG_ERR_NULL, "tg_contiguous");
    tg_release(c);
    tg_release(t);
    tg_release(x);
}
END_TEST

/* ---- views and their base --------------------------------------------------------------- */

START_TEST(writes_to_the_base_are_seen_by_its_views)
{
    tg_tensor *x = iota(2, SHAPE(3, 4));
    tg_scope_begin();
    tg_tensor *t = tg_transpose(x, 0, 1);
    tg_tensor *n = tg_narrow(x, 1, 1, 2);
    tg_tensor *r = tg_reshape(x, 1, SHAPE(12));
    tg_tensor *p = tg_permute(x, (const int[]){1, 0});
    tg_tensor *e = tg_expand(tg_narrow(x, 0, 1, 1), 2, SHAPE(5, 4));
    tg_tensor *u = tg_unsqueeze(x, 0);
    double *data = tg_data(x);
    data[6] = -7; /* x[1][2] */
    ck_assert_double_eq(tg_get(t, SHAPE(2, 1)), -7);
    ck_assert_double_eq(tg_get(n, SHAPE(1, 1)), -7);
    ck_assert_double_eq(tg_get(r, SHAPE(6)), -7);
    ck_assert_double_eq(tg_get(p, SHAPE(2, 1)), -7);
    ck_assert_double_eq(tg_get(e, SHAPE(4, 2)), -7);
    ck_assert_double_eq(tg_get(u, SHAPE(0, 1, 2)), -7);
    tg_scope_end();
    tg_release(x);
}
END_TEST

START_TEST(views_allocate_no_new_storage)
{
    tg_tensor *x = iota(3, SHAPE(2, 3, 4));
    tg_scope_begin();
    const tg_tensor *views[] = {
        tg_transpose(x, 0, 2),
        tg_permute(x, (const int[]){1, 2, 0}),
        tg_reshape(x, 2, SHAPE(6, 4)),
        tg_narrow(x, 2, 1, 3),
        tg_expand(x, 4, SHAPE(5, 2, 3, 4)),
        tg_unsqueeze(x, 1),
        tg_squeeze(tg_unsqueeze(x, 3), 3),
    };
    for (size_t i = 0; i < sizeof views / sizeof views[0]; i++)
        ck_assert_msg(tg_shares_storage(views[i], x), "view %zu copied", i);
    tg_scope_end();
    tg_release(x);
}
END_TEST

/* ---- gradients --------------------------------------------------------------------------- */

START_TEST(gradient_of_a_narrowed_transposed_view_lands_in_the_base)
{
    tg_tensor *x = iota(2, SHAPE(3, 4));
    tg_set_requires_grad(x, true);
    tg_scope_begin();
    /* t = x^T [4,3]; rows 1..2 of t are columns 1..2 of x */
    tg_tensor *v = tg_narrow(tg_transpose(x, 0, 1), 0, 1, 2);
    tg_tensor *w = T64(SHAPE(2, 3), 2, 1, 2, 3, 4, 5, 6);
    ck_assert_int_eq(tg_backward(tg_sum(tg_mul(v, w), NULL, 0, false), NULL), 0);
    /* grad x[j][1 + i] = w[i][j] */
    ck_assert_values(tg_grad(x), 0,
                     0, 1, 4, 0,
                     0, 2, 5, 0,
                     0, 3, 6, 0);
    tg_scope_end();
    tg_release(x);
}
END_TEST

START_TEST(gradients_of_reshape_permute_and_squeeze_follow_the_elements)
{
    tg_tensor *x = iota(2, SHAPE(2, 3));
    tg_set_requires_grad(x, true);
    tg_scope_begin();
    /* [2,3] -> [3,1,2] (reshape) -> [2,3] (squeeze, permute): y[a][b] = x.flat[2b + a] */
    tg_tensor *y = tg_permute(tg_squeeze(tg_reshape(x, 3, SHAPE(3, 1, 2)), 1),
                              (const int[]){1, 0});
    tg_tensor *w = T64(SHAPE(2, 3), 2, 1, 10, 100, 1000, 1e4, 1e5);
    tg_backward(tg_sum(tg_mul(y, w), NULL, 0, false), NULL);
    double want[6];
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 3; b++)
            want[2 * b + a] = ((const double[]){1, 10, 100, 1000, 1e4, 1e5})[a * 3 + b];
    assert_values(tg_grad(x), want, 6, 0);
    tg_scope_end();
    tg_release(x);
}
END_TEST

START_TEST(gradient_of_expand_is_summed_over_the_copies)
{
    tg_tensor *x = T64(SHAPE(3, 1), 2, 1.0, 2.0, 3.0);
    tg_set_requires_grad(x, true);
    tg_scope_begin();
    tg_tensor *w = iota(3, SHAPE(2, 3, 4));
    tg_backward(tg_sum(tg_mul(tg_expand(x, 3, SHAPE(2, 3, 4)), w), NULL, 0, false), NULL);
    double want[3] = {0};
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 4; k++)
                want[j] += i * 12 + j * 4 + k;
    ck_assert_shape(tg_grad(x), 3, 1);
    assert_values(tg_grad(x), want, 3, 0);
    tg_scope_end();
    tg_release(x);
}
END_TEST

START_TEST(gradient_of_concat_splits_back_to_each_input)
{
    tg_tensor *a = T64(SHAPE(2, 1), 2, 1.0, 2.0);
    tg_tensor *b = iota(2, SHAPE(3, 2));
    tg_tensor *c = T64(SHAPE(2, 1), 2, 0.0, 0.0); /* no grad: skipped */
    tg_set_requires_grad(a, true);
    tg_set_requires_grad(b, true);
    tg_scope_begin();
    tg_tensor *bt = tg_transpose(b, 0, 1); /* [2,3] */
    tg_tensor *y = tg_concat((const tg_tensor *[]){a, bt, c}, 3, 1); /* [2,5] */
    tg_tensor *w = T64(SHAPE(2, 5), 2, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10);
    tg_backward(tg_sum(tg_mul(y, w), NULL, 0, false), NULL);
    ck_assert_values(tg_grad(a), 0, 1, 6);
    /* grad b[j][i] = w[i][1 + j] */
    ck_assert_values(tg_grad(b), 0, 2, 7, 3, 8, 4, 9);
    ck_assert_ptr_null(tg_grad(c));
    tg_scope_end();
    tg_release(c);
    tg_release(b);
    tg_release(a);
}
END_TEST

START_TEST(gradient_of_contiguous_passes_through)
{
    tg_tensor *x = iota(2, SHAPE(2, 2));
    tg_set_requires_grad(x, true);
    tg_scope_begin();
    tg_tensor *c = tg_contiguous(tg_transpose(x, 0, 1));
    ck_assert(!tg_is_leaf(c));
    tg_tensor *w = T64(SHAPE(2, 2), 2, 1, 2, 3, 4);
    tg_backward(tg_sum(tg_mul(c, w), NULL, 0, false), NULL);
    ck_assert_values(tg_grad(x), 0, 1, 3, 2, 4);
    tg_scope_end();
    tg_release(x);
}
END_TEST

START_TEST(float32_views_and_copies_keep_their_values)
{
    tg_tensor *x = T32(SHAPE(2, 3), 2, 1.f, 2.f, 3.f, 4.f, 5.f, 6.f);
    tg_set_requires_grad(x, true);
    tg_scope_begin();
    tg_tensor *y = tg_reshape(tg_transpose(x, 0, 1), 1, SHAPE(-1));
    ck_assert_int_eq(tg_dtype_of(y), TG_FLOAT32);
    ck_assert_values(y, 0, 1, 4, 2, 5, 3, 6);
    tg_tensor *w = T32(SHAPE(6), 1, 1.f, 2.f, 3.f, 4.f, 5.f, 6.f);
    tg_backward(tg_sum(tg_mul(tg_narrow(y, 0, 1, 4), tg_narrow(w, 0, 0, 4)), NULL, 0, false),
                NULL);
    /* y[1..4] = x[1][0], x[0][1], x[1][1], x[0][2] with weights 1..4 */
    ck_assert_values(tg_grad(x), 0, 0, 2, 4, 1, 3, 0);
    tg_scope_end();
    tg_release(x);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("shape");
    TCase *views = tcase_checked("views");
    tcase_add_test(views, permute_reorders_dims_without_copying);
    tcase_add_test(views, transpose_swaps_two_dims);
    tcase_add_test(views, reshape_of_contiguous_is_a_view_and_infers_minus_one);
    tcase_add_test(views, reshape_of_transposed_copies_in_row_major_order);
    tcase_add_test(views, reshape_of_non_contiguous_views_when_layout_allows);
    tcase_add_test(views, reshape_of_an_expanded_tensor_views_or_copies_as_the_strides_allow);
    tcase_add_test(views, unsqueeze_and_squeeze_add_and_remove_size_one_dims);
    tcase_add_test(views, narrow_is_a_view_of_the_slice);
    tcase_add_test(views, expand_repeats_size_one_dims_with_stride_zero);
    tcase_add_test(views, writes_to_the_base_are_seen_by_its_views);
    tcase_add_test(views, views_allocate_no_new_storage);
    suite_add_tcase(s, views);
    TCase *joins = tcase_checked("joins");
    tcase_add_test(joins, concat_joins_non_contiguous_inputs_along_either_dim);
    tcase_add_test(joins, concat_works_for_float32_and_int64);
    tcase_add_test(joins, contiguous_returns_x_itself_or_a_row_major_copy);
    suite_add_tcase(s, joins);
    TCase *grads = tcase_checked("gradients");
    tcase_add_test(grads, gradient_of_a_narrowed_transposed_view_lands_in_the_base);
    tcase_add_test(grads, gradients_of_reshape_permute_and_squeeze_follow_the_elements);
    tcase_add_test(grads, gradient_of_expand_is_summed_over_the_copies);
    tcase_add_test(grads, gradient_of_concat_splits_back_to_each_input);
    tcase_add_test(grads, gradient_of_contiguous_passes_through);
    tcase_add_test(grads, float32_views_and_copies_keep_their_values);
    suite_add_tcase(s, grads);
    TCase *errors = tcase_checked("errors");
    tcase_add_test(errors, permute_rejects_bad_perms);
    tcase_add_test(errors, reshape_rejects_bad_shapes);
    tcase_add_test(errors, unsqueeze_and_squeeze_reject_bad_dims);
    tcase_add_test(errors, narrow_rejects_out_of_range_slices);
    tcase_add_test(errors, expand_rejects_changing_a_size_other_than_one);
    tcase_add_test(errors, concat_rejects_mismatched_inputs);
    suite_add_tcase(s, errors);
    return run_suite(s);
}
