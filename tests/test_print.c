/* Printing tensors like PyTorch's repr: number formats, nesting, wrapping,
 * elision of large tensors, and snprintf-style formatting. The expected
 * strings were copied from PyTorch 1.13's output. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>

/* ---- printing --------------------------------------------------------------- */

/* Asserts that t prints as want, then releases t. */
static void expect_repr(tg_tensor *t, const char *want)
{
    ck_assert_ptr_nonnull(t);
    int n = tg_format(NULL, 0, t);
    ck_assert_int_ge(n, 0);
    char *got = malloc((size_t)n + 1);
    ck_assert_int_eq(tg_format(got, (size_t)n + 1, t), n);
    ck_assert_msg(strcmp(got, want) == 0, "printed\n%s\nexpected\n%s", got, want);
    free(got);
    tg_release(t);
}

/* Small tensors built from values, each with PyTorch's repr of the same. */
typedef struct {
    tg_dtype dtype;
    int ndim;
    int64_t shape[3];
    const double *vals;
    const char *want;
} print_case;

static const print_case print_cases[] = {
    {TG_FLOAT32, 1, {3}, (const double[]){1, 2, 3}, "tensor([1., 2., 3.])"},
    {TG_INT64, 2, {2, 2}, (const double[]){1, 2, 3, 4}, "tensor([[1, 2],\n        [3, 4]])"},
    {TG_BOOL, 1, {2}, (const double[]){1, 0}, "tensor([ True, False])"},
    {TG_BOOL, 2, {2, 2}, (const double[]){1, 0, 0, 1},
     "tensor([[ True, False],\n        [False,  True]])"},
    {TG_FLOAT64, 1, {2}, (const double[]){1, 2}, "tensor([1., 2.], dtype=torch.float64)"},
    {TG_FLOAT32, 0, {0}, (const double[]){3.5}, "tensor(3.5000)"},
    {TG_FLOAT64, 0, {0}, (const double[]){3.5}, "tensor(3.5000, dtype=torch.float64)"},
    {TG_INT64, 0, {0}, (const double[]){7}, "tensor(7)"},
    {TG_BOOL, 0, {0}, (const double[]){1}, "tensor(True)"},
    {TG_FLOAT32, 1, {3}, (const double[]){0.12345, 1.5, -2.25},
     "tensor([ 0.1235,  1.5000, -2.2500])"},
    {TG_FLOAT32, 1, {2}, (const double[]){123456.7, 0.5}, "tensor([1.2346e+05, 5.0000e-01])"},
    {TG_FLOAT32, 1, {2}, (const double[]){1e-5, 0.5}, "tensor([1.0000e-05, 5.0000e-01])"},
    {TG_FLOAT32, 1, {3}, (const double[]){0, -1e-5, 1},
     "tensor([ 0.0000e+00, -1.0000e-05,  1.0000e+00])"},
    {TG_FLOAT32, 1, {2}, (const double[]){1e9, 1}, "tensor([1.0000e+09, 1.0000e+00])"},
    {TG_FLOAT32, 1, {2}, (const double[]){1, 2000}, "tensor([1.0000e+00, 2.0000e+03])"},
    {TG_FLOAT32, 1, {1}, (const double[]){1e10}, "tensor([1.0000e+10])"},
    {TG_FLOAT32, 1, {4}, (const double[]){1, NAN, INFINITY, -INFINITY},
     "tensor([1., nan, inf, -inf])"},
    {TG_FLOAT32, 1, {4}, (const double[]){0.5, NAN, INFINITY, -INFINITY},
     "tensor([0.5000,    nan,    inf,   -inf])"},
    {TG_FLOAT64, 1, {2}, (const double[]){NAN, -INFINITY},
     "tensor([nan, -inf], dtype=torch.float64)"},
    {TG_FLOAT32, 2, {2, 2}, (const double[]){0, 0, 0, 0}, "tensor([[0., 0.],\n        [0., 0.]])"},
    {TG_FLOAT32, 1, {2}, (const double[]){-0.0, 1}, "tensor([-0., 1.])"},
    {TG_INT64, 1, {3}, (const double[]){-1, 100, 7}, "tensor([ -1, 100,   7])"},
    {TG_INT64, 1, {2}, (const double[]){0x1p62, -3},
     "tensor([4611686018427387904,                  -3])"},
    {TG_FLOAT64, 1, {8}, (const double[]){10.5, 11.5, 12.5, 13.5, 14.5, 15.5, 16.5, 17.5},
     "tensor([10.5000, 11.5000, 12.5000, 13.5000, 14.5000, 15.5000, 16.5000, 17.5000],\n"
     "       dtype=torch.float64)"},
};

START_TEST(prints_like_pytorch)
{
    const print_case *c = &print_cases[_i];
    expect_repr(make(c->dtype, c->ndim, c->shape, c->vals), c->want);
}
END_TEST

START_TEST(prints_nested_dims_with_blank_lines_between_blocks)
{
    expect_repr(ramp(TG_FLOAT32, 3, SHAPE(2, 3, 4), 0, 1),
                "tensor([[[ 0.,  1.,  2.,  3.],\n"
                "         [ 4.,  5.,  6.,  7.],\n"
                "         [ 8.,  9., 10., 11.]],\n"
                "\n"
                "        [[12., 13., 14., 15.],\n"
                "         [16., 17., 18., 19.],\n"
                "         [20., 21., 22., 23.]]])");
    expect_repr(ramp(TG_FLOAT32, 4, SHAPE(1, 1, 2, 2), 0, 1),
                "tensor([[[[0., 1.],\n          [2., 3.]]]])");
    expect_repr(tg_causal_mask(3), "tensor([[False,  True,  True],\n"
                                   "        [False, False,  True],\n"
                                   "        [False, False, False]])");
}
END_TEST

START_TEST(prints_the_logical_values_of_strided_views)
{
    tg_tensor *t = ramp(TG_FLOAT32, 2, SHAPE(2, 3), 0, 1);
    expect_repr(tg_transpose(t, 0, 1), "tensor([[0., 3.],\n        [1., 4.],\n        [2., 5.]])");
    tg_release(t);
    t = ramp(TG_FLOAT32, 1, SHAPE(10), 0, 1);
    expect_repr(tg_narrow(t, 0, 2, 3), "tensor([2., 3., 4.])");
    tg_release(t);
    t = ramp(TG_FLOAT32, 2, SHAPE(1, 3), 1, 1);
    expect_repr(tg_expand(t, 2, SHAPE(2, 3)), "tensor([[1., 2., 3.],\n        [1., 2., 3.]])");
    tg_release(t);
}
END_TEST

START_TEST(prints_long_rows_wrapped_at_eighty_columns)
{
    expect_repr(ramp(TG_FLOAT32, 1, SHAPE(30), 0, 1.5),
                "tensor([ 0.0000,  1.5000,  3.0000,  4.5000,  6.0000,  7.5000,  9.0000, 10.5000,\n"
                "        12.0000, 13.5000, 15.0000, 16.5000, 18.0000, 19.5000, 21.0000, 22.5000,\n"
                "        24.0000, 25.5000, 27.0000, 28.5000, 30.0000, 31.5000, 33.0000, 34.5000,\n"
                "        36.0000, 37.5000, 39.0000, 40.5000, 42.0000, 43.5000])");
    double v[40];
    for (int i = 0; i < 40; i++)
        v[i] = i / 3.0;
    expect_repr(make(TG_FLOAT64, 1, SHAPE(40), v),
                "tensor([ 0.0000,  0.3333,  0.6667,  1.0000,  1.3333,  1.6667,  2.0000,  2.3333,\n"
                "         2.6667,  3.0000,  3.3333,  3.6667,  4.0000,  4.3333,  4.6667,  5.0000,\n"
                "         5.3333,  5.6667,  6.0000,  6.3333,  6.6667,  7.0000,  7.3333,  7.6667,\n"
                "         8.0000,  8.3333,  8.6667,  9.0000,  9.3333,  9.6667, 10.0000, 10.3333,\n"
                "        10.6667, 11.0000, 11.3333, 11.6667, 12.0000, 12.3333, 12.6667, 13.0000],\n"
                "       dtype=torch.float64)");
}
END_TEST

START_TEST(prints_large_tensors_with_the_middle_elided)
{
    expect_repr(ramp(TG_INT64, 1, SHAPE(1001), 0, 1),
                "tensor([   0,    1,    2,  ...,  998,  999, 1000])");
    expect_repr(ramp(TG_INT64, 2, SHAPE(3, 400), 0, 1),
                "tensor([[   0,    1,    2,  ...,  397,  398,  399],\n"
                "        [ 400,  401,  402,  ...,  797,  798,  799],\n"
                "        [ 800,  801,  802,  ..., 1197, 1198, 1199]])");
    expect_repr(ramp(TG_FLOAT32, 2, SHAPE(40, 50), 0, 1),
                "tensor([[0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 4.7000e+01, 4.8000e+01,\n"
                "         4.9000e+01],\n"
                "        [5.0000e+01, 5.1000e+01, 5.2000e+01,  ..., 9.7000e+01, 9.8000e+01,\n"
                "         9.9000e+01],\n"
                "        [1.0000e+02, 1.0100e+02, 1.0200e+02,  ..., 1.4700e+02, 1.4800e+02,\n"
                "         1.4900e+02],\n"
                "        ...,\n"
                "        [1.8500e+03, 1.8510e+03, 1.8520e+03,  ..., 1.8970e+03, 1.8980e+03,\n"
                "         1.8990e+03],\n"
                "        [1.9000e+03, 1.9010e+03, 1.9020e+03,  ..., 1.9470e+03, 1.9480e+03,\n"
                "         1.9490e+03],\n"
                "        [1.9500e+03, 1.9510e+03, 1.9520e+03,  ..., 1.9970e+03, 1.9980e+03,\n"
                "         1.9990e+03]])");
}
END_TEST

START_TEST(prints_elided_3d_blocks_separated_by_blank_lines)
{
    expect_repr(ramp(TG_INT64, 3, SHAPE(7, 1, 150), 0, 1),
                "tensor([[[   0,    1,    2,  ...,  147,  148,  149]],\n\n"
                "        [[ 150,  151,  152,  ...,  297,  298,  299]],\n\n"
                "        [[ 300,  301,  302,  ...,  447,  448,  449]],\n\n"
                "        ...,\n\n"
                "        [[ 600,  601,  602,  ...,  747,  748,  749]],\n\n"
                "        [[ 750,  751,  752,  ...,  897,  898,  899]],\n\n"
                "        [[ 900,  901,  902,  ..., 1047, 1048, 1049]]])");
}
END_TEST

START_TEST(prints_empty_tensors_with_size_and_dtype)
{
    expect_repr(tg_zeros(TG_FLOAT32, 1, SHAPE(0)), "tensor([])");
    expect_repr(tg_zeros(TG_FLOAT32, 2, SHAPE(0, 3)), "tensor([], size=(0, 3))");
    expect_repr(tg_zeros(TG_INT64, 1, SHAPE(0)), "tensor([], dtype=torch.int64)");
    expect_repr(tg_zeros(TG_BOOL, 1, SHAPE(0)), "tensor([], dtype=torch.bool)");
    expect_repr(tg_zeros(TG_FLOAT64, 2, SHAPE(2, 0)),
                "tensor([], size=(2, 0), dtype=torch.float64)");
}
END_TEST

START_TEST(prints_requires_grad_on_a_leaf)
{
    tg_tensor *t = ramp(TG_FLOAT32, 1, SHAPE(2), 1, 1);
    ck_assert_int_eq(tg_set_requires_grad(t, true), 0);
    expect_repr(t, "tensor([1., 2.], requires_grad=True)");
}
END_TEST

START_TEST(format_truncates_like_snprintf)
{
    tg_tensor *t = ramp(TG_FLOAT32, 1, SHAPE(3), 1, 1); /* "tensor([1., 2., 3.])": 20 chars */
    char buf[10];
    memset(buf, 'x', sizeof buf);
    ck_assert_int_eq(tg_format(buf, sizeof buf, t), 20);
    ck_assert_str_eq(buf, "tensor([1");
    ck_assert_int_eq(tg_format(buf, 1, t), 20);
    ck_assert_str_eq(buf, "");
    ck_assert_int_eq(tg_format(NULL, 0, t), 20);
    char full[21];
    ck_assert_int_eq(tg_format(full, sizeof full, t), 20);
    ck_assert_str_eq(full, "tensor([1., 2., 3.])");
    ck_assert_int_eq(tg_error_code(), TG_OK);
    tg_release(t);
}
END_TEST

START_TEST(format_and_print_reject_null)
{
    char buf[8] = "junk";
    ck_assert_int_eq(tg_format(buf, sizeof buf, NULL), -1);
    ck_assert_str_eq(buf, "");
    ck_assert_error(TG_ERR_NULL, "tg_format");
    tg_tensor *t = tg_zeros(TG_FLOAT32, 1, SHAPE(1));
    ck_assert_int_eq(tg_format(NULL, 5, t), -1);
    ck_assert_error(TG_ERR_NULL, "tg_format");
    ck_assert_int_eq(tg_print(NULL), -1);
    ck_assert_error(TG_ERR_NULL, "tg_print");
    ck_assert_int_eq(tg_print_to(NULL, t), -1);
    ck_assert_error(TG_ERR_NULL, "tg_print_to");
    tg_release(t);
}
END_TEST

START_TEST(print_to_writes_the_repr_and_a_newline)
{
    FILE *f = tmpfile();
    ck_assert_ptr_nonnull(f);
    tg_tensor *t = make(TG_INT64, 2, SHAPE(2, 2), (double[]){1, 2, 3, 4});
    ck_assert_int_eq(tg_print_to(f, t), 0);
    rewind(f);
    char got[64] = {0};
    size_t n = fread(got, 1, sizeof got - 1, f);
    fclose(f);
    ck_assert_int_eq(n, strlen("tensor([[1, 2],\n        [3, 4]])\n"));
    ck_assert_str_eq(got, "tensor([[1, 2],\n        [3, 4]])\n");
    tg_release(t);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("print");
    TCase *tc;
    tc = tcase_checked("printing");
    tcase_add_loop_test(tc, prints_like_pytorch, 0,
                        (int)(sizeof print_cases / sizeof print_cases[0]));
    tcase_add_test(tc, prints_nested_dims_with_blank_lines_between_blocks);
    tcase_add_test(tc, prints_the_logical_values_of_strided_views);
    tcase_add_test(tc, prints_long_rows_wrapped_at_eighty_columns);
    tcase_add_test(tc, prints_large_tensors_with_the_middle_elided);
    tcase_add_test(tc, prints_elided_3d_blocks_separated_by_blank_lines);
    tcase_add_test(tc, prints_empty_tensors_with_size_and_dtype);
    tcase_add_test(tc, prints_requires_grad_on_a_leaf);
    tcase_add_test(tc, format_truncates_like_snprintf);
    tcase_add_test(tc, format_and_print_reject_null);
    tcase_add_test(tc, print_to_writes_the_repr_and_a_newline);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
