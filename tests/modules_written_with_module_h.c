/* Part of the modules suite (test_modules.c): the module writer's header,
 * module.h. A module written here with it and the public headers alone, its
 * argument checks and error messages, shape strings, handing a second result
 * to the caller's scope, and the causal mask for L queries and S keys. */
#include "testutil.h"
#include "suite_parts.h"

#include <tensorgrad/module.h>

/* A user's module: y = x * scale, scale [D], x [..., D]. */
typedef struct {
    tg_tensor *scale;
} my_scale;

static tg_tensor *my_scale_forward(const my_scale *m, const tg_tensor *x)
{
    TG_CHECK_ARG(m);
    TG_CHECK_ARG(x);
    int64_t d = tg_shape(m->scale)[0];
    if (tg_ndim(x) == 0 || tg_shape(x)[tg_ndim(x) - 1] != d)
        return tg_fail(TG_ERR_SHAPE, "my_scale_forward: x %s does not end in %lld",
                       TG_SHAPE_STRING(x), (long long)d);
    tg_scope_begin();
    tg_tensor *y = tg_mul(x, m->scale);
    return tg_scope_end_keep(y);
}

/* Counts the rows of x, or -1: the status form of the checks. */
static int my_count_rows(const tg_tensor *x, int64_t *rows)
{
    TG_CHECK_ARG_STATUS(x);
    TG_CHECK_ARG_STATUS(rows);
    *rows = tg_ndim(x) ? tg_shape(x)[0] : 1;
    return 0;
}

START_TEST(a_module_written_with_module_h_computes_and_checks_its_arguments)
{
    my_scale m = {.scale = T64(SHAPE(2), 1, 2.0, -1.0)};
    tg_tensor *x = T64(SHAPE(2, 2), 2, 1.0, 2.0, 3.0, 4.0);
    tg_tensor *y = my_scale_forward(&m, x);
    ck_assert_values(y, 0, 2.0, -2.0, 6.0, -4.0);
    tg_release(y);
    ck_assert_ptr_null(my_scale_forward(NULL, x));
    ck_assert_error(TG_ERR_NULL, "my_scale_forward: m is NULL");
    ck_assert_ptr_null(my_scale_forward(&m, NULL));
    ck_assert_error(TG_ERR_NULL, "my_scale_forward: x is NULL");
    tg_tensor *bad = tg_zeros(TG_FLOAT64, 2, SHAPE(2, 3));
    ck_assert_ptr_null(my_scale_forward(&m, bad));
    ck_assert_error(TG_ERR_SHAPE, "my_scale_forward: x [2,3] does not end in 2");
    int64_t rows = 0;
    ck_assert_int_eq(my_count_rows(bad, &rows), 0);
    ck_assert_int_eq(rows, 2);
    ck_assert_int_eq(my_count_rows(bad, NULL), -1);
    ck_assert_error(TG_ERR_NULL, "my_count_rows: rows is NULL");
    tg_release(bad);
    tg_release(x);
    tg_release(m.scale);
}
END_TEST

START_TEST(tg_fail_returns_null_and_keeps_the_first_error)
{
    ck_assert_ptr_null(tg_fail(TG_ERR_VALUE, "my_module: p %g is out of range", 1.5));
    ck_assert_ptr_null(tg_fail(TG_ERR_SHAPE, "my_module: a later error"));
    ck_assert_int_eq(tg_error_code(), TG_ERR_VALUE);
    ck_assert_str_eq(tg_error_message(), "my_module: p 1.5 is out of range");
    tg_error_clear();
}
END_TEST

START_TEST(shape_string_writes_the_sizes_in_brackets)
{
    char buf[32];
    ck_assert_str_eq(tg_shape_string(buf, sizeof buf, 3, SHAPE(2, 30, 1)), "[2,30,1]");
    ck_assert_str_eq(tg_shape_string(buf, sizeof buf, 0, NULL), "[]");
    char small[5];
    ck_assert_str_eq(tg_shape_string(small, sizeof small, 2, SHAPE(123, 456)), "[123");
    tg_tensor *t = tg_zeros(TG_FLOAT32, 2, SHAPE(4, 5));
    ck_assert_str_eq(TG_SHAPE_STRING(t), "[4,5]");
    tg_release(t);
    ck_assert_int_eq(tg_error_code(), TG_OK);
}
END_TEST

START_TEST(scope_adopt_hands_a_reference_to_the_open_scope)
{
    int64_t live = tg_live_tensors();
    tg_scope_begin();
    tg_tensor *t = tg_zeros(TG_FLOAT32, 1, SHAPE(3)); /* the scope's reference */
    tg_retain(t);                                     /* and ours */
    ck_assert_ptr_eq(tg_scope_adopt(t), t);           /* ours goes to the scope too */
    tg_scope_end();
    ck_assert_int_eq(tg_live_tensors(), live);
    /* With no scope open the reference stays the caller's. */
    t = tg_zeros(TG_FLOAT32, 1, SHAPE(3));
    ck_assert_ptr_eq(tg_scope_adopt(t), t);
    ck_assert_int_eq(tg_live_tensors(), live + 1);
    tg_release(t);
    ck_assert_ptr_null(tg_scope_adopt(NULL));
    ck_assert_int_eq(tg_error_code(), TG_OK);
}
END_TEST

START_TEST(dtype_is_float_for_float32_and_float64_only)
{
    ck_assert(tg_dtype_is_float(TG_FLOAT32));
    ck_assert(tg_dtype_is_float(TG_FLOAT64));
    ck_assert(!tg_dtype_is_float(TG_INT64));
    ck_assert(!tg_dtype_is_float(TG_BOOL));
}
END_TEST

START_TEST(causal_mask_rect_is_true_where_the_key_comes_after_the_query)
{
    tg_scope_begin();
    /* more keys than queries, then more queries than keys */
    ck_assert_values(tg_causal_mask_rect(2, 3), 0, 0, 1, 1, 0, 0, 1);
    ck_assert_values(tg_causal_mask_rect(3, 2), 0, 0, 1, 0, 0, 0, 0);
    tg_tensor *square = tg_causal_mask_rect(4, 4), *ref = tg_causal_mask(4);
    ck_assert_int_eq(tg_dtype_of(square), TG_BOOL);
    ck_assert_int_eq(memcmp(tg_data_const(square), tg_data_const(ref), 16), 0);
    ck_assert_shape(tg_causal_mask_rect(0, 5), 0, 5);
    ck_assert_ptr_null(tg_causal_mask_rect(-1, 2));
    ck_assert_error(TG_ERR_SHAPE, "tg_causal_mask_rect: negative size [-1, 2]");
    tg_scope_end();
}
END_TEST

void modules_written_with_module_h_cases(Suite *s)
{
    TCase *tc = tcase_checked("module");
    tcase_add_test(tc, a_module_written_with_module_h_computes_and_checks_its_arguments);
    tcase_add_test(tc, tg_fail_returns_null_and_keeps_the_first_error);
    tcase_add_test(tc, shape_string_writes_the_sizes_in_brackets);
    tcase_add_test(tc, scope_adopt_hands_a_reference_to_the_open_scope);
    tcase_add_test(tc, dtype_is_float_for_float32_and_float64_only);
    tcase_add_test(tc, causal_mask_rect_is_true_where_the_key_comes_after_the_query);
    suite_add_tcase(s, tc);
}
