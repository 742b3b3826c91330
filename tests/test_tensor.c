/* The tensor layer: creation and its errors, accessors, reference counting,
 * scopes and dtype conversion (the seeded generator: test_rng.c). */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>

/* ---- creation ---------------------------------------------------------------- */

START_TEST(zeros_ones_and_full_fill_every_element)
{
    tg_tensor *z = tg_zeros(TG_FLOAT32, 2, SHAPE(2, 3));
    tg_tensor *o = tg_ones(TG_INT64, 1, SHAPE(4));
    tg_tensor *f = tg_full(TG_FLOAT64, 2, SHAPE(2, 2), 2.5);
    tg_tensor *b = tg_full(TG_BOOL, 1, SHAPE(3), 3.0);
    ck_assert_shape(z, 2, 3);
    ck_assert_int_eq(tg_dtype_of(z), TG_FLOAT32);
    ck_assert_values(z, 0, 0, 0, 0, 0, 0, 0);
    ck_assert_int_eq(tg_dtype_of(o), TG_INT64);
    ck_assert_values(o, 0, 1, 1, 1, 1);
    ck_assert_values(f, 0, 2.5, 2.5, 2.5, 2.5);
    ck_assert_int_eq(tg_dtype_of(b), TG_BOOL);
    ck_assert_values(b, 0, 1, 1, 1);
    ck_assert(tg_is_contiguous(z));
    tg_release(z);
    tg_release(o);
    tg_release(f);
    tg_release(b);
}
END_TEST

START_TEST(arange_counts_up_to_but_excluding_end)
{
    tg_tensor *a = tg_arange(TG_FLOAT32, 0, 5, 1);
    tg_tensor *b = tg_arange(TG_FLOAT64, 1, 2, 0.25);
    tg_tensor *c = tg_arange(TG_INT64, 0, 10, 3);
    ck_assert_shape(a, 5);
    ck_assert_values(a, 0, 0, 1, 2, 3, 4);
    ck_assert_values(b, 0, 1, 1.25, 1.5, 1.75);
    ck_assert_int_eq(tg_dtype_of(c), TG_INT64);
    ck_assert_values(c, 0, 0, 3, 6, 9);
    tg_release(a);
    tg_release(b);
    tg_release(c);
}
END_TEST

START_TEST(arange_with_negative_step_counts_down)
{
    tg_tensor *a = tg_arange(TG_INT64, 5, 0, -2);
    tg_tensor *b = tg_arange(TG_FLOAT64, 1, -1, -0.5);
    ck_assert_values(a, 0, 5, 3, 1);
    ck_assert_values(b, 0, 1, 0.5, 0, -0.5);
    tg_release(a);
    tg_release(b);
}
END_TEST

START_TEST(arange_of_an_empty_range_has_no_elements)
{
    const double ranges[][3] = {{0, 0, 1}, {5, 0, 1}, {0, 5, -1}, {2, 2, -0.5}};
    for (int i = 0; i < 4; i++) {
        tg_tensor *t = tg_arange(TG_FLOAT32, ranges[i][0], ranges[i][1], ranges[i][2]);
        ck_assert_shape(t, 0);
        ck_assert_int_eq(tg_numel(t), 0);
        tg_release(t);
    }
    ck_assert_int_eq(tg_error_code(), TG_OK);
}
END_TEST

START_TEST(from_data_copies_the_callers_values)
{
    double d[4] = {1.5, -2, 3, 4};
    tg_tensor *t = tg_from_data(TG_FLOAT64, 2, SHAPE(2, 2), d);
    d[0] = 99; /* the tensor owns a copy */
    ck_assert_values(t, 0, 1.5, -2, 3, 4);
    int64_t ids[3] = {7, -1, INT64_C(1) << 40};
    bool mask[3] = {true, false, true};
    tg_tensor *i = tg_from_data(TG_INT64, 1, SHAPE(3), ids);
    tg_tensor *m = tg_from_data(TG_BOOL, 1, SHAPE(3), mask);
    ck_assert_values(i, 0, 7, -1, 1099511627776.0);
    ck_assert_values(m, 0, 1, 0, 1);
    tg_release(t);
    tg_release(i);
    tg_release(m);
}
END_TEST

START_TEST(scalar_is_a_zero_dim_tensor)
{
    tg_tensor *s = tg_scalar(TG_FLOAT64, -3.25);
    ck_assert_int_eq(tg_ndim(s), 0);
    ck_assert_int_eq(tg_numel(s), 1);
    ck_assert_double_eq(tg_item(s), -3.25);
    tg_tensor *z = tg_zeros(TG_INT64, 0, NULL); /* ndim 0 needs no shape */
    ck_assert_int_eq(tg_ndim(z), 0);
    ck_assert_double_eq(tg_item(z), 0);
    tg_release(s);
    tg_release(z);
}
END_TEST

START_TEST(causal_mask_is_true_strictly_above_the_diagonal)
{
    tg_tensor *m = tg_causal_mask(5);
    ck_assert_shape(m, 5, 5);
    ck_assert_int_eq(tg_dtype_of(m), TG_BOOL);
    for (int64_t i = 0; i < 5; i++)
        for (int64_t j = 0; j < 5; j++)
            ck_assert_double_eq(tg_get(m, (int64_t[]){i, j}), j > i ? 1.0 : 0.0);
    tg_tensor *e = tg_causal_mask(0);
    ck_assert_shape(e, 0, 0);
    ck_assert_ptr_null(tg_causal_mask(-2));
    ck_assert_error(TG_ERR_SHAPE, "tg_causal_mask", "-2");
    tg_release(m);
    tg_release(e);
}
END_TEST

/* ---- creation errors ------------------------------------------------------- */

START_TEST(creation_rejects_a_negative_size)
{
    ck_assert_ptr_null(tg_zeros(TG_FLOAT32, 2, SHAPE(2, -1)));
    ck_assert_error(TG_ERR_SHAPE, "tg_zeros", "-1");
    ck_assert_ptr_null(tg_from_data(TG_FLOAT64, 1, SHAPE(-3), (double[]){0}));
    ck_assert_error(TG_ERR_SHAPE, "tg_from_data", "-3");
}
END_TEST

/* An empty tensor whose other sizes multiply past 2^56 would overflow its
 * strides: refused like any too-large shape. */
START_TEST(creation_rejects_huge_sizes_beside_a_zero)
{
    ck_assert_ptr_null(tg_zeros(TG_FLOAT32, 3, SHAPE(0, INT64_C(1) << 62, INT64_C(1) << 62)));
    ck_assert_error(TG_ERR_NOMEM, "tg_zeros", "too many elements");
    tg_tensor *ok = tg_zeros(TG_FLOAT32, 3, SHAPE(0, 1 << 20, 1 << 20));
    ck_assert_int_eq(tg_numel(ok), 0);
    tg_release(ok);
}
END_TEST

START_TEST(creation_rejects_more_than_eight_dims)
{
    const int64_t shape[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    ck_assert_ptr_null(tg_ones(TG_FLOAT32, 9, shape));
    ck_assert_error(TG_ERR_SHAPE, "tg_ones", "9");
    ck_assert_ptr_null(tg_full(TG_FLOAT32, -1, shape, 1));
    ck_assert_error(TG_ERR_SHAPE, "tg_full");
    tg_tensor *t = tg_ones(TG_FLOAT32, 8, shape); /* eight is allowed */
    ck_assert_int_eq(tg_ndim(t), 8);
    tg_release(t);
}
END_TEST

START_TEST(creation_rejects_a_null_shape_with_dims)
{
    ck_assert_ptr_null(tg_full(TG_FLOAT32, 2, NULL, 1.0));
    ck_assert_error(TG_ERR_NULL, "tg_full", "shape");
    ck_assert_ptr_null(tg_from_data(TG_FLOAT32, 1, SHAPE(2), NULL));
    ck_assert_error(TG_ERR_NULL, "tg_from_data");
}
END_TEST

START_TEST(creation_rejects_an_unknown_dtype)
{
    ck_assert_ptr_null(tg_zeros((tg_dtype)42, 1, SHAPE(2)));
    ck_assert_error(TG_ERR_DTYPE, "tg_zeros", "42");
    ck_assert_ptr_null(tg_arange((tg_dtype)7, 0, 3, 1));
    ck_assert_error(TG_ERR_DTYPE, "tg_arange");
    ck_assert_ptr_null(tg_arange(TG_BOOL, 0, 3, 1));
    ck_assert_error(TG_ERR_DTYPE, "tg_arange", "bool");
}
END_TEST

START_TEST(arange_rejects_a_zero_or_nonfinite_step)
{
    ck_assert_ptr_null(tg_arange(TG_FLOAT32, 0, 3, 0));
    ck_assert_error(TG_ERR_VALUE, "tg_arange", "step 0");
    ck_assert_ptr_null(tg_arange(TG_FLOAT64, 0, INFINITY, 1));
    ck_assert_error(TG_ERR_VALUE, "tg_arange");
}
END_TEST

/* ---- accessors ------------------------------------------------------------ */

START_TEST(size_counts_negative_dims_from_the_end)
{
    tg_tensor *t = tg_zeros(TG_FLOAT32, 3, SHAPE(2, 3, 4));
    ck_assert_int_eq(tg_size(t, 0), 2);
    ck_assert_int_eq(tg_size(t, 2), 4);
    ck_assert_int_eq(tg_size(t, -1), 4);
    ck_assert_int_eq(tg_size(t, -3), 2);
    ck_assert_int_eq(tg_error_code(), TG_OK);
    ck_assert_int_eq(tg_size(t, 3), -1);
    ck_assert_error(TG_ERR_DIM, "tg_size", "3");
    ck_assert_int_eq(tg_size(t, -4), -1);
    ck_assert_error(TG_ERR_DIM, "tg_size", "-4");
    tg_tensor *s = tg_scalar(TG_FLOAT32, 1);
    ck_assert_int_eq(tg_size(s, 0), -1);
    ck_assert_error(TG_ERR_DIM, "tg_size");
    tg_release(t);
    tg_release(s);
}
END_TEST

START_TEST(shape_numel_and_dtype_describe_the_tensor)
{
    tg_tensor *t = tg_zeros(TG_INT64, 3, SHAPE(2, 0, 5));
    ck_assert_int_eq(tg_ndim(t), 3);
    ck_assert_int_eq(tg_shape(t)[0], 2);
    ck_assert_int_eq(tg_shape(t)[1], 0);
    ck_assert_int_eq(tg_shape(t)[2], 5);
    ck_assert_int_eq(tg_numel(t), 0);
    ck_assert_int_eq(tg_dtype_of(t), TG_INT64);
    ck_assert_str_eq(tg_dtype_name(TG_INT64), "int64");
    ck_assert_str_eq(tg_dtype_name(TG_BOOL), "bool");
    ck_assert_int_eq(tg_dtype_size(TG_FLOAT32), 4);
    ck_assert_int_eq(tg_dtype_size(TG_FLOAT64), 8);
    ck_assert_int_eq(tg_dtype_size(TG_BOOL), 1);
    tg_release(t);
}
END_TEST

START_TEST(accessors_given_null_record_a_null_error)
{
    ck_assert_int_eq(tg_ndim(NULL), -1);
    ck_assert_error(TG_ERR_NULL, "tg_ndim");
    ck_assert_int_eq(tg_numel(NULL), -1);
    ck_assert_error(TG_ERR_NULL, "tg_numel");
    ck_assert_ptr_null(tg_shape(NULL));
    ck_assert_error(TG_ERR_NULL, "tg_shape");
    ck_assert(isnan(tg_item(NULL)));
    ck_assert_error(TG_ERR_NULL, "tg_item");
    ck_assert_ptr_null(tg_data(NULL));
    ck_assert_error(TG_ERR_NULL, "tg_data");
}
END_TEST

START_TEST(item_reads_one_element_tensors_only)
{
    tg_tensor *a = tg_full(TG_INT64, 2, SHAPE(1, 1), 7);
    tg_tensor *b = tg_full(TG_BOOL, 1, SHAPE(1), 1);
    tg_tensor *c = tg_zeros(TG_FLOAT32, 1, SHAPE(2));
    ck_assert_double_eq(tg_item(a), 7.0);
    ck_assert_double_eq(tg_item(b), 1.0);
    ck_assert(isnan(tg_item(c)));
    ck_assert_error(TG_ERR_SHAPE, "tg_item", "[2]");
    tg_release(a);
    tg_release(b);
    tg_release(c);
}
END_TEST

START_TEST(get_reads_a_multi_index_and_rejects_out_of_range)
{
    tg_tensor *t = ramp(TG_FLOAT64, 2, SHAPE(2, 3), 0, 1); /* [[0,1,2],[3,4,5]] */
    ck_assert_double_eq(tg_get(t, (int64_t[]){1, 2}), 5);
    ck_assert_double_eq(tg_get(t, (int64_t[]){0, 1}), 1);
    ck_assert(isnan(tg_get(t, (int64_t[]){2, 0})));
    ck_assert_error(TG_ERR_INDEX, "tg_get", "2", "[2,3]");
    ck_assert(isnan(tg_get(t, (int64_t[]){0, -1})));
    ck_assert_error(TG_ERR_INDEX, "tg_get");
    tg_tensor *tt = tg_transpose(t, 0, 1); /* [3,2]: tt[2][1] = t[1][2] */
    ck_assert_double_eq(tg_get(tt, (int64_t[]){2, 1}), 5);
    tg_release(tt);
    tg_release(t);
}
END_TEST

START_TEST(data_is_refused_for_a_non_contiguous_tensor)
{
    tg_tensor *t = ramp(TG_FLOAT32, 2, SHAPE(2, 3), 0, 1);
    tg_tensor *tt = tg_transpose(t, 0, 1);
    ck_assert(!tg_is_contiguous(tt));
    ck_assert_ptr_null(tg_data(tt));
    ck_assert_error(TG_ERR_STATE, "tg_data", "contiguous");
    /* Writing through the contiguous base shows in its views. */
    ((float *)tg_data(t))[1] = 42;
    ck_assert_double_eq(tg_get(tt, (int64_t[]){1, 0}), 42);
    ck_assert(tg_shares_storage(t, tt));
    tg_release(tt);
    tg_release(t);
}
END_TEST

START_TEST(copy_from_fills_any_layout_in_logical_order_converting_the_dtype)
{
    tg_tensor *t = tg_zeros(TG_FLOAT32, 2, SHAPE(2, 3));
    ck_assert_int_eq(tg_copy_from(t, TG_FLOAT64, (double[]){1.5, -2, 0, 3, 4, 5}, 6), 0);
    ck_assert_values(t, 0, 1.5, -2, 0, 3, 4, 5);
    tg_tensor *tt = tg_transpose(t, 0, 1); /* [3,2]: row-major data lands column-wise in t */
    ck_assert_int_eq(tg_copy_from(tt, TG_FLOAT64, (double[]){1, 2, 3, 4, 5, 6}, 6), 0);
    ck_assert_values(t, 0, 1, 3, 5, 2, 4, 6);
    tg_tensor *b = tg_zeros(TG_BOOL, 1, SHAPE(3));
    ck_assert_int_eq(tg_copy_from(b, TG_INT64, (int64_t[]){0, -7, 2}, 3), 0);
    ck_assert_values(b, 0, 0, 1, 1);
    tg_release(b);
    tg_release(tt);
    tg_release(t);
}
END_TEST

START_TEST(copy_from_refuses_a_wrong_count_and_null_changing_nothing)
{
    tg_tensor *t = tg_zeros(TG_FLOAT64, 2, SHAPE(2, 2));
    double v[5] = {1, 2, 3, 4, 5};
    ck_assert_int_eq(tg_copy_from(t, TG_FLOAT64, v, 5), -1);
    ck_assert_error(TG_ERR_SHAPE, "tg_copy_from", "5", "[2,2]", "4");
    ck_assert_int_eq(tg_copy_from(t, TG_FLOAT64, v, 3), -1);
    ck_assert_error(TG_ERR_SHAPE, "tg_copy_from", "3");
    ck_assert_int_eq(tg_copy_from(t, TG_FLOAT64, NULL, 4), -1);
    ck_assert_error(TG_ERR_NULL, "tg_copy_from", "data");
    ck_assert_int_eq(tg_copy_from(NULL, TG_FLOAT64, v, 4), -1);
    ck_assert_error(TG_ERR_NULL, "tg_copy_from");
    ck_assert_int_eq(tg_copy_from(t, (tg_dtype)9, v, 4), -1);
    ck_assert_error(TG_ERR_DTYPE, "tg_copy_from");
    ck_assert_values(t, 0, 0, 0, 0, 0);
    tg_release(t);
}
END_TEST

START_TEST(copy_to_converts_the_dtype_in_logical_order)
{
    tg_tensor *t = make(TG_FLOAT64, 2, SHAPE(2, 2), (double[]){1.5, -2.5, 0, 3});
    tg_tensor *tt = tg_transpose(t, 0, 1); /* [[1.5,0],[-2.5,3]] */
    int64_t ints[4];
    ck_assert_int_eq(tg_copy_to(tt, TG_INT64, ints, 4), 0);
    ck_assert_int_eq(ints[0], 1);
    ck_assert_int_eq(ints[1], 0);
    ck_assert_int_eq(ints[2], -2);
    ck_assert_int_eq(ints[3], 3);
    bool flags[4];
    ck_assert_int_eq(tg_copy_to(t, TG_BOOL, flags, 4), 0);
    ck_assert(flags[0] && flags[1] && !flags[2] && flags[3]);
    float f[4];
    ck_assert_int_eq(tg_copy_to(tt, TG_FLOAT32, f, 4), 0);
    ck_assert_float_eq(f[2], -2.5f);
    ck_assert_int_eq(tg_copy_to(t, TG_FLOAT32, f, 3), -1);
    ck_assert_error(TG_ERR_VALUE, "tg_copy_to", "3");
    ck_assert_int_eq(tg_copy_to(t, (tg_dtype)9, f, 4), -1);
    ck_assert_error(TG_ERR_DTYPE, "tg_copy_to");
    tg_release(tt);
    tg_release(t);
}
END_TEST

/* ---- reference counting and scopes ---------------------------------------- */

START_TEST(retain_and_release_count_references)
{
    int64_t before = tg_live_tensors();
    tg_tensor *t = tg_ones(TG_FLOAT32, 1, SHAPE(3));
    ck_assert_int_eq(tg_live_tensors(), before + 1);
    ck_assert_ptr_eq(tg_retain(t), t);
    tg_release(t);
    ck_assert_int_eq(tg_live_tensors(), before + 1); /* one reference left */
    ck_assert_values(t, 0, 1, 1, 1);
    tg_release(t);
    ck_assert_int_eq(tg_live_tensors(), before);
    ck_assert_ptr_null(tg_retain(NULL));
    tg_release(NULL);
    ck_assert_int_eq(tg_error_code(), TG_OK);
}
END_TEST

START_TEST(a_view_keeps_the_storage_alive)
{
    tg_tensor *t = ramp(TG_FLOAT64, 2, SHAPE(2, 3), 1, 1);
    tg_tensor *v = tg_transpose(t, 0, 1);
    tg_release(t);
    ck_assert_values(v, 0, 1, 4, 2, 5, 3, 6);
    tg_release(v);
}
END_TEST

START_TEST(scope_releases_what_was_made_inside)
{
    int64_t before = tg_live_tensors();
    tg_scope_begin();
    ck_assert_int_eq(tg_scope_depth(), 1);
    tg_tensor *a = tg_ones(TG_FLOAT32, 1, SHAPE(2));
    tg_zeros(TG_FLOAT32, 1, SHAPE(2));
    tg_tensor *kept = tg_retain(a); /* a reference of our own */
    ck_assert_int_eq(tg_live_tensors(), before + 2);
    ck_assert_int_eq(tg_scope_end(), 0);
    ck_assert_int_eq(tg_scope_depth(), 0);
    ck_assert_int_eq(tg_live_tensors(), before + 1);
    ck_assert_values(kept, 0, 1, 1);
    tg_release(kept);
}
END_TEST

START_TEST(nested_scopes_release_only_their_own_tensors)
{
    int64_t before = tg_live_tensors();
    tg_scope_begin();
    tg_tensor *outer = tg_ones(TG_FLOAT32, 1, SHAPE(2));
    tg_scope_begin();
    tg_ones(TG_FLOAT32, 1, SHAPE(2));
    tg_ones(TG_FLOAT32, 1, SHAPE(2));
    ck_assert_int_eq(tg_scope_depth(), 2);
    ck_assert_int_eq(tg_live_tensors(), before + 3);
    tg_scope_end();
    ck_assert_int_eq(tg_live_tensors(), before + 1);
    ck_assert_values(outer, 0, 1, 1);
    tg_scope_end();
    ck_assert_int_eq(tg_live_tensors(), before);
}
END_TEST

START_TEST(scope_end_keep_hands_the_tensor_to_the_outer_scope)
{
    int64_t before = tg_live_tensors();
    tg_scope_begin();
    tg_scope_begin();
    tg_tensor *t = tg_full(TG_FLOAT64, 1, SHAPE(2), 4);
    tg_ones(TG_FLOAT64, 1, SHAPE(2));
    ck_assert_ptr_eq(tg_scope_end_keep(t), t);
    ck_assert_int_eq(tg_scope_depth(), 1);
    ck_assert_int_eq(tg_live_tensors(), before + 1);
    ck_assert_values(t, 0, 4, 4);
    tg_scope_end(); /* the outer scope now owns t */
    ck_assert_int_eq(tg_live_tensors(), before);
}
END_TEST

START_TEST(scope_end_keep_without_outer_scope_returns_to_the_caller)
{
    int64_t before = tg_live_tensors();
    tg_scope_begin();
    tg_tensor *t = tg_scope_end_keep(tg_ones(TG_FLOAT32, 1, SHAPE(1)));
    ck_assert_int_eq(tg_scope_depth(), 0);
    ck_assert_int_eq(tg_live_tensors(), before + 1);
    tg_release(t);
    ck_assert_int_eq(tg_live_tensors(), before);
}
END_TEST

START_TEST(scope_end_with_none_open_is_a_state_error)
{
    ck_assert_int_eq(tg_scope_end(), -1);
    ck_assert_error(TG_ERR_STATE, "tg_scope_end", "no scope");
    tg_tensor *t = tg_ones(TG_FLOAT32, 1, SHAPE(1));
    ck_assert_ptr_null(tg_scope_end_keep(t));
    ck_assert_error(TG_ERR_STATE, "tg_scope_end_keep");
    ck_assert_values(t, 0, 1); /* the caller's reference is untouched */
    tg_release(t);
    ck_assert_int_eq(tg_scope_depth(), 0);
}
END_TEST

/* ---- dtype conversion ------------------------------------------------------- */

START_TEST(to_dtype_converts_between_all_four_dtypes)
{
    const tg_dtype all[4] = {TG_FLOAT32, TG_FLOAT64, TG_INT64, TG_BOOL};
    const double src[4] = {0, 1, 2, -3};
    for (int s = 0; s < 4; s++) {
        tg_tensor *x = make(all[s], 1, SHAPE(4), src);
        for (int d = 0; d < 4; d++) {
            tg_tensor *y = tg_to_dtype(x, all[d]);
            ck_assert_int_eq(tg_dtype_of(y), all[d]);
            ck_assert_shape(y, 4);
            double want[4];
            for (int i = 0; i < 4; i++) {
                double v = all[s] == TG_BOOL ? (src[i] != 0) : src[i];
                want[i] = all[d] == TG_BOOL ? (v != 0) : v;
            }
            assert_values(y, want, 4, 0);
            tg_release(y);
        }
        tg_release(x);
    }
}
END_TEST

START_TEST(to_dtype_truncates_floats_toward_zero)
{
    const double v[5] = {-1.7, -0.5, 0.5, 2.9, -3.0};
    for (int k = 0; k < 2; k++) {
        tg_tensor *x = make(k ? TG_FLOAT64 : TG_FLOAT32, 1, SHAPE(5), v);
        tg_tensor *y = tg_to_dtype(x, TG_INT64);
        ck_assert_values(y, 0, -1, 0, 0, 2, -3);
        tg_release(x);
        tg_release(y);
    }
}
END_TEST

START_TEST(to_dtype_maps_nonzero_to_true)
{
    tg_tensor *f = make(TG_FLOAT32, 1, SHAPE(4), (double[]){0, -0.1, 3, NAN});
    tg_tensor *i = make(TG_INT64, 1, SHAPE(3), (double[]){0, -5, 1});
    tg_tensor *fb = tg_to_dtype(f, TG_BOOL), *ib = tg_to_dtype(i, TG_BOOL);
    ck_assert_values(fb, 0, 0, 1, 1, 1);
    ck_assert_values(ib, 0, 0, 1, 1);
    ck_assert_ptr_null(tg_to_dtype(NULL, TG_BOOL));
    ck_assert_error(TG_ERR_NULL, "tg_to_dtype");
    ck_assert_ptr_null(tg_to_dtype(f, (tg_dtype)11));
    ck_assert_error(TG_ERR_DTYPE, "tg_to_dtype");
    tg_release(f);
    tg_release(i);
    tg_release(fb);
    tg_release(ib);
}
END_TEST
static Suite *tensor_suite(void)
{
    Suite *s = suite_create("tensor");
    TCase *tc = tcase_checked("creation");
    tcase_add_test(tc, zeros_ones_and_full_fill_every_element);
    tcase_add_test(tc, arange_counts_up_to_but_excluding_end);
    tcase_add_test(tc, arange_with_negative_step_counts_down);
    tcase_add_test(tc, arange_of_an_empty_range_has_no_elements);
    tcase_add_test(tc, from_data_copies_the_callers_values);
    tcase_add_test(tc, scalar_is_a_zero_dim_tensor);
    tcase_add_test(tc, causal_mask_is_true_strictly_above_the_diagonal);
    tcase_add_test(tc, creation_rejects_a_negative_size);
    tcase_add_test(tc, creation_rejects_more_than_eight_dims);
    tcase_add_test(tc, creation_rejects_huge_sizes_beside_a_zero);
    tcase_add_test(tc, creation_rejects_a_null_shape_with_dims);
    tcase_add_test(tc, creation_rejects_an_unknown_dtype);
    tcase_add_test(tc, arange_rejects_a_zero_or_nonfinite_step);
    suite_add_tcase(s, tc);

    tc = tcase_checked("accessors");
    tcase_add_test(tc, size_counts_negative_dims_from_the_end);
    tcase_add_test(tc, shape_numel_and_dtype_describe_the_tensor);
    tcase_add_test(tc, accessors_given_null_record_a_null_error);
    tcase_add_test(tc, item_reads_one_element_tensors_only);
    tcase_add_test(tc, get_reads_a_multi_index_and_rejects_out_of_range);
    tcase_add_test(tc, data_is_refused_for_a_non_contiguous_tensor);
    tcase_add_test(tc, copy_to_converts_the_dtype_in_logical_order);
    tcase_add_test(tc, copy_from_fills_any_layout_in_logical_order_converting_the_dtype);
    tcase_add_test(tc, copy_from_refuses_a_wrong_count_and_null_changing_nothing);
    suite_add_tcase(s, tc);

    tc = tcase_checked("lifetime");
    tcase_add_test(tc, retain_and_release_count_references);
    tcase_add_test(tc, a_view_keeps_the_storage_alive);
    tcase_add_test(tc, scope_releases_what_was_made_inside);
    tcase_add_test(tc, nested_scopes_release_only_their_own_tensors);
    tcase_add_test(tc, scope_end_keep_hands_the_tensor_to_the_outer_scope);
    tcase_add_test(tc, scope_end_keep_without_outer_scope_returns_to_the_caller);
    tcase_add_test(tc, scope_end_with_none_open_is_a_state_error);
    suite_add_tcase(s, tc);

    tc = tcase_checked("dtype");
    tcase_add_test(tc, to_dtype_converts_between_all_four_dtypes);
    tcase_add_test(tc, to_dtype_truncates_floats_toward_zero);
    tcase_add_test(tc, to_dtype_maps_nonzero_to_true);
    suite_add_tcase(s, tc);

    return s;
}

int main(void) { return run_suite(tensor_suite()); }
