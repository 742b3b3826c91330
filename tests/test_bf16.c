/* TG_BFLOAT16, the storage dtype: creation, nearest-even conversion with
 * autograd, copies, printing, safetensors, and every other op refusing it
 * by name. */
#define _GNU_SOURCE /* memmem */
#include <string.h>

#include "testutil.h"

static uint16_t bits_of(const tg_tensor *t, int64_t i)
{
    uint16_t buf[64];
    ck_assert_int_le(tg_numel(t), 64);
    ck_assert_int_eq(tg_copy_to(t, TG_BFLOAT16, buf, 64), 0);
    return buf[i];
}

START_TEST(bfloat16_has_its_name_size_and_is_not_a_float_dtype)
{
    ck_assert_str_eq(tg_dtype_name(TG_BFLOAT16), "bfloat16");
    ck_assert_uint_eq(tg_dtype_size(TG_BFLOAT16), 2);
    ck_assert(!tg_dtype_is_float(TG_BFLOAT16));
}
END_TEST

/* bf16 keeps 7 mantissa bits: at 1.0 its step is 2^-7, so 1 + 2^-8 is a
 * tie (to 1.0, the even one) and 1 + 3 * 2^-8 one too (to 1 + 2^-6). */
START_TEST(conversion_to_bfloat16_rounds_to_nearest_even)
{
    const float v[] = {1.0f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-12f,
                       -2.5f, INFINITY, 0x1.fffffep127f};
    const uint16_t want[] = {0x3f80, 0x3f80, 0x3f82, 0x3f81, 0xc020, 0x7f80, 0x7f80};
    tg_tensor *x = tg_from_data(TG_FLOAT32, 1, SHAPE(7), v);
    tg_tensor *b = tg_to_dtype(x, TG_BFLOAT16);
    ck_assert_int_eq(tg_dtype_of(b), TG_BFLOAT16);
    for (int i = 0; i < 7; i++) {
        ck_assert_uint_eq(bits_of(b, i), want[i]);
        ck_assert_uint_eq(bits_of(x, i), want[i]); /* tg_copy_to converts the same way */
    }
    tg_release(x);
    tg_release(b);
}
END_TEST

START_TEST(bfloat16_tensors_are_made_from_bits_and_read_as_values)
{
    const uint16_t bits[] = {0x3f80, 0xc0a0, 0x0000, 0x3e80}; /* 1, -5, 0, 0.25 */
    tg_tensor *b = tg_from_data(TG_BFLOAT16, 2, SHAPE(2, 2), bits);
    ck_assert_double_eq(tg_get(b, SHAPE(0, 1)), -5.0);
    tg_tensor *f = tg_to_dtype(b, TG_FLOAT64);
    ck_assert_values(f, 0, 1, -5, 0, 0.25);
    tg_tensor *full = tg_full(TG_BFLOAT16, 1, SHAPE(3), 2.5);
    tg_tensor *zeros = tg_zeros(TG_BFLOAT16, 1, SHAPE(2));
    ck_assert_uint_eq(bits_of(full, 2), 0x4020);
    ck_assert_uint_eq(bits_of(zeros, 1), 0);
    /* tg_copy_from: bits into a float32 tensor convert exactly */
    tg_tensor *dst = tg_zeros(TG_FLOAT32, 1, SHAPE(4));
    ck_assert_int_eq(tg_copy_from(dst, TG_BFLOAT16, bits, 4), 0);
    ck_assert_values(dst, 0, 1, -5, 0, 0.25);
    ck_assert_ptr_null(tg_arange(TG_BFLOAT16, 0, 3, 1));
    ck_assert_int_eq(tg_error_code(), TG_ERR_DTYPE);
    tg_error_clear();
    tg_release(b), tg_release(f), tg_release(full), tg_release(zeros), tg_release(dst);
}
END_TEST

/* y = float32(bf16(x)) is differentiable: dy/dx passes the gradient rounded
 * to bf16 (its dtype on the way through), and two readers' gradients are
 * summed in bf16 too. */
START_TEST(to_dtype_through_bfloat16_carries_the_gradient_rounded)
{
    tg_scope_begin();
    tg_tensor *x = T32(SHAPE(2), 1, 0.3f, -7.0f);
    tg_set_requires_grad(x, true);
    tg_tensor *b = tg_to_dtype(x, TG_BFLOAT16);
    tg_tensor *g = T32(SHAPE(2), 1, 1.0f + 0x1p-8f + 0x1p-10f, 0.5f);
    tg_tensor *once = tg_mul(tg_to_dtype(b, TG_FLOAT32), g);
    tg_tensor *twice = tg_add(once, tg_to_dtype(b, TG_FLOAT32));
    ck_assert_int_eq(tg_backward(tg_sum(twice, NULL, 0, false), NULL), 0);
    /* bf16(g) = 1 + 2^-7, plus 1: 2 + 2^-7 is a tie between bf16's 2 and
     * 2 + 2^-6, to 2; 0.5 + 1 is exact */
    ck_assert_values(tg_grad(x), 0, 2.0, 1.5);
    ck_assert_int_eq(tg_scope_end(), 0);
}
END_TEST

/* Ops of float math refuse it as they check dtypes; views and joins, which
 * would work on any element size, refuse it too. */
START_TEST(other_ops_refuse_bfloat16_naming_the_op_and_the_dtype)
{
    tg_scope_begin();
    tg_tensor *b = tg_zeros(TG_BFLOAT16, 2, SHAPE(2, 3));
    tg_tensor *f = tg_zeros(TG_FLOAT32, 2, SHAPE(3, 2));
    struct {
        const char *name;
        tg_tensor *got;
    } calls[] = {
        {"tg_add", tg_add(b, b)},
        {"tg_matmul", tg_matmul(b, f)},
        {"tg_exp", tg_exp(b)},
        {"tg_sum", tg_sum(b, NULL, 0, false)},
        {"tg_softmax", tg_softmax(b, -1)},
        {"tg_reshape", tg_reshape(b, 1, SHAPE(6))},
        {"tg_transpose", tg_transpose(b, 0, 1)},
        {"tg_concat", tg_concat((const tg_tensor *[]){b, b}, 2, 0)},
        {"tg_affine", tg_affine(b, tg_zeros(TG_BFLOAT16, 2, SHAPE(4, 3)), NULL)},
    };
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
        tg_error_clear();
        ck_assert_msg(calls[i].got == NULL, "%s took bfloat16", calls[i].name);
    }
    /* each message names its op and the dtype (checked one at a time) */
    const char *names[] = {"tg_add", "tg_reshape", "tg_concat"};
    for (int i = 0; i < 3; i++) {
        tg_error_clear();
        tg_tensor *r = i == 0 ? tg_add(b, b)
                       : i == 1 ? tg_reshape(b, 1, SHAPE(6))
                                : tg_concat((const tg_tensor *[]){b, b}, 2, 0);
        ck_assert_ptr_null(r);
        ck_assert_int_eq(tg_error_code(), TG_ERR_DTYPE);
        ck_assert_msg(strstr(tg_error_message(), names[i]) &&
                          strstr(tg_error_message(), "bfloat16"),
                      "message: %s", tg_error_message());
    }
    tg_error_clear();
    ck_assert_int_eq(tg_scope_end(), 0);
}
END_TEST

START_TEST(bfloat16_prints_its_values_and_dtype)
{
    const uint16_t bits[] = {0x3fc0, 0xc020}; /* 1.5, -2.5 */
    tg_tensor *b = tg_from_data(TG_BFLOAT16, 1, SHAPE(2), bits);
    char buf[256] = {0};
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    ck_assert_int_eq(tg_print_to(f, b), 0);
    fclose(f);
    ck_assert_msg(strstr(buf, "tensor([ 1.5000, -2.5000], dtype=torch.bfloat16)"), "got %s",
                  buf);
    tg_release(b);
}
END_TEST

START_TEST(safetensors_saves_and_loads_bf16)
{
    char dir[128], path[192];
    make_temp_dir(dir, sizeof dir, "tg_bf16");
    snprintf(path, sizeof path, "%s/h.safetensors", dir);
    const uint16_t bits[] = {0x3f80, 0xc0a0, 0x7fc0, 0x0001, 0xff80, 0x3e80};
    tg_tensor *b = tg_from_data(TG_BFLOAT16, 2, SHAPE(3, 2), bits);
    tg_params ps = {0}, back = {0};
    ck_assert_int_eq(tg_params_add(&ps, NULL, "h", b), 0);
    ck_assert_int_eq(tg_safetensors_save(path, &ps, 0, NULL, NULL), 0);
    ck_assert_int_eq(tg_safetensors_load(path, &back), 0);
    ck_assert_int_eq(back.count, 1);
    ck_assert_int_eq(tg_dtype_of(back.tensors[0]), TG_BFLOAT16);
    ck_assert_shape(back.tensors[0], 3, 2);
    for (int i = 0; i < 6; i++) /* NaN, a denormal and -inf too, bit for bit */
        ck_assert_uint_eq(bits_of(back.tensors[0], i), bits[i]);
    /* the header names it BF16, as PyTorch's safetensors does */
    FILE *f = fopen(path, "rb");
    char head[128] = {0};
    ck_assert_uint_gt(fread(head, 1, sizeof head - 1, f), 8);
    fclose(f);
    ck_assert_ptr_nonnull(memmem(head, sizeof head, "\"BF16\"", 6));
    tg_params_clear(&ps);
    tg_params_clear(&back);
    tg_release(b);
    remove_temp_dir(dir);
}
END_TEST

static Suite *bf16_suite(void)
{
    Suite *s = suite_create("bf16");
    TCase *tc = tcase_checked("bf16");
    tcase_add_test(tc, bfloat16_has_its_name_size_and_is_not_a_float_dtype);
    tcase_add_test(tc, conversion_to_bfloat16_rounds_to_nearest_even);
    tcase_add_test(tc, bfloat16_tensors_are_made_from_bits_and_read_as_values);
    tcase_add_test(tc, to_dtype_through_bfloat16_carries_the_gradient_rounded);
    tcase_add_test(tc, other_ops_refuse_bfloat16_naming_the_op_and_the_dtype);
    tcase_add_test(tc, bfloat16_prints_its_values_and_dtype);
    tcase_add_test(tc, safetensors_saves_and_loads_bf16);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return run_suite(bf16_suite());
}
