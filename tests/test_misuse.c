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

int main(void)
{
    Suite *s = suite_create("misuse");
    TCase *tc = tcase_checked("scopes");
    tcase_add_test(tc, scopes_nest_300_deep_with_a_tensor_at_each_level);
    tcase_add_test(tc, scopes_nest_10000_deep_with_a_tensor_at_each_level);
    tcase_add_test(tc, scope_end_keep_hands_a_tensor_down_through_deep_levels);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
