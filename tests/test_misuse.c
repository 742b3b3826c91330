/* Misuse the library must catch rather than corrupt memory or answer wrong:
 * scopes nested without limit, data written in place under a graph that
 * still needs it, and tensors used after their release (checked mode). */
#include "testutil.h"

/* ---- scopes ---------------------------------------------------------------- */

/* Opens depth scopes, one tensor made at each level, then closes them,
 * checking that each end releases exactly its own level's tensor. */
static void nest_scopes(int depth)
{
    int64_t live = tg_live_tensors();
    for (int i = 0; i < depth; i++) {
        tg_scope_begin();
        ck_assert_ptr_nonnull(tg_scalar(TG_FLOAT32, i));
    }
    ck_assert_int_eq(tg_scope_depth(), depth);
    ck_assert_int_eq(tg_live_tensors(), live + depth);
    ck_assert_int_eq(tg_error_code(), TG_OK);
    for (int i = depth; i > 0; i--) {
        ck_assert_int_eq(tg_scope_end(), 0);
        ck_assert_int_eq(tg_live_tensors(), live + i - 1);
    }
    ck_assert_int_eq(tg_scope_depth(), 0);
}

START_TEST(scopes_nest_300_deep_with_a_tensor_at_each_level)
{
    nest_scopes(300);
}
END_TEST

START_TEST(scopes_nest_10000_deep_with_a_tensor_at_each_level)
{
    nest_scopes(10000);
    nest_scopes(10000); /* the grown levels went; they grow again */
}
END_TEST

START_TEST(scope_end_keep_hands_a_tensor_down_through_deep_levels)
{
    for (int i = 0; i < 1000; i++)
        tg_scope_begin();
    tg_tensor *t = tg_scalar(TG_FLOAT64, 7);
    for (int i = 0; i < 1000; i++)
        t = tg_scope_end_keep(t);
    ck_assert_double_eq(tg_item(t), 7);
    tg_release(t);
}
END_TEST

/* ---- writes in place under a graph ------------------------------------------ */

/* x [3] = 1, 2, 3, requiring grad. */
static tg_tensor *leaf3(void)
{
    tg_tensor *x = T64(SHAPE(3), 1, 1.0, 2.0, 3.0);
    ck_assert_int_eq(tg_set_requires_grad(x, true), 0);
    return x;
}

START_TEST(backward_refuses_an_input_written_through_tg_data_after_the_op)
{
    tg_scope_begin();
    tg_tensor *x = leaf3();
    tg_tensor *loss = tg_sum(tg_mul(x, x), NULL, 0, false);
    ((double *)tg_data(x))[1] = 10; /* the product would now read 10 */
    ck_assert_int_eq(tg_backward(loss, NULL), -1);
    ck_assert_int_eq(tg_error_code(), TG_ERR_STATE);
    ck_assert_str_eq(tg_error_message(),
                     "tg_backward: a tensor needed for the gradient of mul (saved as input 0, "
                     "shape [3]) was modified in place after it was used (version 0, now 1)");
    ck_assert_ptr_null(tg_grad(x)); /* no half-made gradient either */
    tg_error_clear();
    tg_release(x);
    tg_scope_end();
}
END_TEST

START_TEST(writing_through_tg_data_before_the_op_is_fine)
{
    tg_scope_begin();
    tg_tensor *x = leaf3();
    ((double *)tg_data(x))[1] = 10;
    tg_tensor *loss = tg_sum(tg_mul(x, x), NULL, 0, false);
    ck_assert_int_eq(tg_backward(loss, NULL), 0);
    assert_values(tg_grad(x), (const double[]){2, 20, 6}, 3, 0);
    tg_release(x);
    tg_scope_end();
}
END_TEST

START_TEST(reading_through_tg_data_const_leaves_backward_alone)
{
    tg_scope_begin();
    tg_tensor *x = leaf3();
    tg_tensor *y = tg_mul(x, x);
    tg_tensor *loss = tg_sum(y, NULL, 0, false);
    const double *px = tg_data_const(x), *py = tg_data_const(y);
    ck_assert_double_eq(px[2] * px[2], py[2]);
    ck_assert_int_eq(tg_backward(loss, NULL), 0);
    assert_values(tg_grad(x), (const double[]){2, 4, 6}, 3, 0);
    tg_release(x);
    tg_scope_end();
}
END_TEST

START_TEST(writing_into_a_view_of_a_saved_input_is_caught)
{
    tg_scope_begin();
    tg_tensor *x = leaf3();
    tg_tensor *loss = tg_sum(tg_exp(tg_mul(x, x)), NULL, 0, false);
    tg_tensor *tail = tg_narrow(tg_detach(x), 0, 1, 2); /* shares x's storage */
    ((double *)tg_data(tail))[0] = -1;
    ck_assert_int_eq(tg_backward(loss, NULL), -1);
    ck_assert_int_eq(tg_error_code(), TG_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(tg_error_message(), "gradient of mul (saved as input 0"));
    tg_error_clear();
    tg_release(x);
    tg_scope_end();
}
END_TEST

START_TEST(writing_into_an_op_output_it_saved_is_caught)
{
    tg_scope_begin();
    tg_tensor *x = leaf3();
    tg_tensor *e = tg_exp(x); /* exp keeps its output for backward */
    tg_tensor *loss = tg_sum(e, NULL, 0, false);
    ((double *)tg_data(e))[0] = 0;
    ck_assert_int_eq(tg_backward(loss, NULL), -1);
    ck_assert_int_eq(tg_error_code(), TG_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(tg_error_message(), "gradient of exp (saved as saved tensor 0, "
                                                     "shape [3])"));
    tg_error_clear();
    tg_release(x);
    tg_scope_end();
}
END_TEST

START_TEST(an_optimizer_step_between_forward_and_backward_is_caught)
{
    tg_params ps = {0};
    tg_tensor *w = leaf3();
    ck_assert_int_eq(tg_params_add(&ps, NULL, "w", w), 0);
    tg_optim *opt = tg_sgd_new(&ps, 0.1, 0, 0);
    tg_scope_begin();
    ck_assert_int_eq(tg_backward(tg_sum(tg_mul(w, w), NULL, 0, false), NULL), 0);
    tg_tensor *loss = tg_sum(tg_mul(w, w), NULL, 0, false);
    ck_assert_int_eq(tg_optim_step(opt), 0); /* steps on the first gradient: w changes */
    ck_assert_int_eq(tg_backward(loss, NULL), -1);
    ck_assert_int_eq(tg_error_code(), TG_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(tg_error_message(), "was modified in place after it was used"));
    tg_error_clear();
    /* the usual order, step after backward, still trains */
    tg_optim_zero_grad(opt);
    ck_assert_int_eq(tg_backward(tg_sum(tg_mul(w, w), NULL, 0, false), NULL), 0);
    ck_assert_int_eq(tg_optim_step(opt), 0);
    tg_scope_end();
    tg_optim_free(opt);
    tg_params_clear(&ps);
    tg_release(w);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("misuse");
    TCase *tc = tcase_checked("scopes");
    tcase_add_test(tc, scopes_nest_300_deep_with_a_tensor_at_each_level);
    tcase_add_test(tc, scopes_nest_10000_deep_with_a_tensor_at_each_level);
    tcase_add_test(tc, scope_end_keep_hands_a_tensor_down_through_deep_levels);
    suite_add_tcase(s, tc);
    tc = tcase_checked("versions");
    tcase_add_test(tc, backward_refuses_an_input_written_through_tg_data_after_the_op);
    tcase_add_test(tc, writing_through_tg_data_before_the_op_is_fine);
    tcase_add_test(tc, reading_through_tg_data_const_leaves_backward_alone);
    tcase_add_test(tc, writing_into_a_view_of_a_saved_input_is_caught);
    tcase_add_test(tc, writing_into_an_op_output_it_saved_is_caught);
    tcase_add_test(tc, an_optimizer_step_between_forward_and_backward_is_caught);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
