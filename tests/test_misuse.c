/* Misuse the library must catch rather than corrupt memory or answer wrong:
 * scopes nested without limit, data written in place under a graph that
 * still needs it, and tensors used after their release (checked mode). The
 * suite's other parts: bad arguments (misuse_bad_input.c) and values or
 * memory gone wrong (misuse_robustness.c). meson runs it twice, checked
 * mode off and on. */
#include "testutil.h"
#include "suite_parts.h"

#include <unistd.h>

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

/* x [3] = 1, 2, 3, requiring grad (the open scope holds it). */
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
    tg_scope_end();
}
END_TEST

START_TEST(backward_refuses_an_input_overwritten_by_copy_from_after_the_op)
{
    tg_scope_begin();
    tg_tensor *x = leaf3();
    tg_tensor *loss = tg_sum(tg_mul(x, x), NULL, 0, false);
    ck_assert_int_eq(tg_copy_from(x, TG_FLOAT64, (double[]){4, 5, 6}, 3), 0);
    ck_assert_int_eq(tg_backward(loss, NULL), -1);
    ck_assert_int_eq(tg_error_code(), TG_ERR_STATE);
    /* one write, one bump */
    ck_assert_ptr_nonnull(strstr(tg_error_message(), "(version 0, now 1)"));
    ck_assert_ptr_null(tg_grad(x));
    tg_error_clear();
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

START_TEST(loading_a_checkpoint_into_a_saved_parameter_is_caught)
{
    char path[] = "/tmp/tg_misuse_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    tg_params ps = {0};
    tg_tensor *w = leaf3();
    ck_assert_int_eq(tg_params_add(&ps, NULL, "w", w), 0);
    ck_assert_int_eq(tg_safetensors_save(path, &ps, 0, NULL, NULL), 0);
    tg_scope_begin();
    tg_tensor *loss = tg_sum(tg_mul(w, w), NULL, 0, false);
    ck_assert_int_eq(tg_safetensors_load_into(path, &ps), 0); /* same values, new version */
    ck_assert_int_eq(tg_backward(loss, NULL), -1);
    ck_assert_int_eq(tg_error_code(), TG_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(tg_error_message(), "was modified in place after it was used"));
    tg_error_clear();
    tg_scope_end();
    tg_params_clear(&ps);
    tg_release(w);
    unlink(path);
}
END_TEST

/* ---- released tensors ---------------------------------------------------------- */

/* These run in the "misuse_checked" test (TG_CHECKED=1); a header released
 * with checked mode off goes straight back to free under AddressSanitizer
 * or valgrind, which then report the misuse themselves, so the unchecked
 * double release runs only natively. */
#if defined(__SANITIZE_ADDRESS__)
#define HEADERS_FREED_AT_ONCE true
#elif __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define HEADERS_FREED_AT_ONCE (RUNNING_ON_VALGRIND != 0) /* the library frees them too */
#else
#define HEADERS_FREED_AT_ONCE false
#endif

/* Runs fn with stderr going into out (size bytes, terminated). */
static void capture_stderr(void (*fn)(void *), void *arg, char *out, size_t size)
{
    fflush(stderr);
    int saved = dup(2);
    FILE *tmp = tmpfile();
    ck_assert_ptr_nonnull(tmp);
    dup2(fileno(tmp), 2);
    fn(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    size_t n = fread(out, 1, size - 1, tmp);
    out[n] = '\0';
    fclose(tmp);
}

static void release_it(void *t) { tg_release(t); }

static bool starts_with(const char *s, const char *prefix)
{
    return !strncmp(s, prefix, strlen(prefix));
}

START_TEST(a_double_release_is_reported_and_keeps_the_live_count)
{
    if (!tg_checked() && HEADERS_FREED_AT_ONCE)
        return;
    int64_t live = tg_live_tensors();
    tg_tensor *t = tg_scalar(TG_FLOAT32, 1);
    tg_release(t);
    ck_assert_int_eq(tg_live_tensors(), live);
    char err[1024];
    capture_stderr(release_it, t, err, sizeof err);
    ck_assert_int_eq(tg_live_tensors(), live);
    ck_assert_int_eq(tg_error_code(), TG_ERR_STATE);
    const char *m = tg_error_message();
    ck_assert_msg(starts_with(m, "tg_release: tensor already released (called from "), "%s", m);
    if (tg_checked()) {
        ck_assert_msg(strstr(m, "test_misuse+0x") && strstr(m, "; released before at "), "%s", m);
        ck_assert_msg(starts_with(err, "tensorgrad: tg_release: tensor already released"), "%s",
                      err);
    }
    tg_error_clear();
    /* still refused, and still not counted, the third time */
    tg_release(t);
    ck_assert_int_eq(tg_live_tensors(), live);
    ck_assert_int_eq(tg_error_code(), TG_ERR_STATE);
    tg_error_clear();
}
END_TEST

START_TEST(a_release_through_tg_release_at_names_file_and_line)
{
    if (!tg_checked())
        return;
    tg_tensor *t = tg_scalar(TG_FLOAT32, 1);
    tg_release_at(t, "model.c", 12);
    tg_release_at(t, "model.c", 34);
    ck_assert_str_eq(tg_error_message(), "tg_release: tensor already released (called from "
                                         "model.c:34; released before at model.c:12)");
    tg_error_clear();
}
END_TEST

/* A deep graph's scope releases more headers at its end than the quarantine
 * first holds: a tensor released before them and released again after them
 * is still reported with its first release, and no live tensor (one that
 * took its header from the allocator) loses a reference. */
START_TEST(a_double_release_past_70000_other_releases_is_still_reported)
{
    if (!tg_checked())
        return;
    enum { OTHERS = 70000, KEEP = 8192 };
    int64_t live = tg_live_tensors();
    tg_tensor *t = tg_scalar(TG_FLOAT32, 1);
    tg_release_at(t, "model.c", 12);
    tg_scope_begin();
    for (int i = 0; i < OTHERS; i++)
        ck_assert_ptr_nonnull(tg_scalar(TG_FLOAT32, i));
    ck_assert_int_eq(tg_scope_end(), 0);
    tg_scope_begin();
    tg_tensor *first = tg_scalar(TG_FLOAT64, 0);
    for (int i = 1; i < KEEP; i++)
        ck_assert_ptr_nonnull(tg_scalar(TG_FLOAT64, i));
    tg_release_at(t, "model.c", 34);
    ck_assert_str_eq(tg_error_message(), "tg_release: tensor already released (called from "
                                         "model.c:34; released before at model.c:12)");
    tg_error_clear();
    ck_assert_int_eq(tg_live_tensors(), live + KEEP);
    ck_assert_double_eq(tg_item(first), 0);
    ck_assert_int_eq(tg_scope_end(), 0);
    ck_assert_int_eq(tg_live_tensors(), live);
}
END_TEST

START_TEST(using_a_tensor_after_its_scope_ended_is_reported)
{
    if (!tg_checked())
        return;
    int64_t live = tg_live_tensors();
    tg_scope_begin();
    tg_tensor *a = tg_ones(TG_FLOAT32, 2, SHAPE(2, 2));
    tg_tensor *n = tg_neg(a);
    tg_scope_end();
    ck_assert_int_eq(tg_live_tensors(), live);
    ck_assert_ptr_null(tg_matmul(a, a));
    ck_assert_int_eq(tg_error_code(), TG_ERR_STATE);
    const char *m = tg_error_message();
    ck_assert_msg(starts_with(m, "tg_matmul: an input (float32 [2,2]) was already released "
                                 "(called from "), "%s", m);
    const char *scope = strstr(m, "; released before at the end of a scope, tg_scope_end "
                                  "called from ");
    ck_assert_msg(scope && strstr(scope, "test_misuse+0x"), "%s", m); /* this test's code */
    tg_error_clear();
    ck_assert_ptr_null(tg_reshape(n, 1, SHAPE(4))); /* an op with its own check */
    ck_assert_msg(strstr(tg_error_message(), "tg_reshape: input x was already released"), "%s",
                  tg_error_message());
    tg_error_clear();
    tg_scope_begin();
    ck_assert_ptr_null(tg_scope_end_keep(a)); /* not handed on to be released again */
    ck_assert_msg(starts_with(tg_error_message(), "tg_scope_end_keep: tensor already released "
                                                  "(called from "), "%s", tg_error_message());
    ck_assert_int_eq(tg_scope_depth(), 0); /* the scope ended all the same */
    tg_error_clear();
    ck_assert_ptr_null(tg_data_const(a));
    ck_assert_ptr_null(tg_retain(a));
    ck_assert_ptr_nonnull(strstr(tg_error_message(), "tg_data_const: tensor already released"));
    tg_error_clear();
    ck_assert_int_eq(tg_live_tensors(), live);
}
END_TEST

/* Ops that take an optional tensor or an array of them check each one. */
START_TEST(a_released_mask_or_array_element_is_reported)
{
    if (!tg_checked())
        return;
    tg_tensor *q = tg_ones(TG_FLOAT32, 3, SHAPE(1, 2, 4));
    tg_tensor *mask = tg_zeros(TG_BOOL, 2, SHAPE(2, 2));
    tg_release(mask);
    ck_assert_ptr_null(tg_attention(q, q, q, mask, false, 0, 0, NULL));
    ck_assert_msg(strstr(tg_error_message(), "tg_attention: mask was already released"), "%s",
                  tg_error_message());
    tg_error_clear();
    tg_tensor *gone = tg_ones(TG_FLOAT32, 3, SHAPE(1, 2, 4));
    tg_release(gone);
    ck_assert_ptr_null(tg_concat((const tg_tensor *[]){q, gone}, 2, 0));
    ck_assert_msg(strstr(tg_error_message(), "tg_concat: xs[1] was already released"), "%s",
                  tg_error_message());
    tg_error_clear();
    tg_release(q);
}
END_TEST

/* Modules check their tensor arguments as ops do, through module.h. */
START_TEST(a_released_tensor_given_to_a_module_is_reported)
{
    if (!tg_checked())
        return;
    tg_rng *rng = tg_rng_new(1);
    tg_linear *lin = tg_linear_new(2, 3, true, TG_FLOAT32, rng);
    tg_tensor *x = tg_ones(TG_FLOAT32, 2, SHAPE(1, 2));
    tg_release(x);
    ck_assert_ptr_null(tg_linear_forward(lin, x));
    ck_assert_msg(starts_with(tg_error_message(), "tg_linear_forward: input x was already "
                                                  "released (called from "),
                  "%s", tg_error_message());
    tg_error_clear();
    tg_linear_free(lin);
    tg_rng_free(rng);
}
END_TEST

/* Every misuse a test provokes it also clears: nothing is left over, such
 * as a tensor of the test's own released twice. */
static void no_error_left(void)
{
    ck_assert_msg(tg_error_code() == TG_OK, "error left: %s", tg_error_message());
}

static TCase *tcase_misuse(const char *name)
{
    TCase *tc = tcase_checked(name);
    tcase_add_checked_fixture(tc, NULL, no_error_left);
    return tc;
}

int main(void)
{
    Suite *s = suite_create("misuse");
    TCase *tc = tcase_misuse("scopes");
    tcase_add_test(tc, scopes_nest_300_deep_with_a_tensor_at_each_level);
    tcase_add_test(tc, scopes_nest_10000_deep_with_a_tensor_at_each_level);
    tcase_add_test(tc, scope_end_keep_hands_a_tensor_down_through_deep_levels);
    suite_add_tcase(s, tc);
    tc = tcase_misuse("versions");
    tcase_add_test(tc, backward_refuses_an_input_written_through_tg_data_after_the_op);
    tcase_add_test(tc, backward_refuses_an_input_overwritten_by_copy_from_after_the_op);
    tcase_add_test(tc, writing_through_tg_data_before_the_op_is_fine);
    tcase_add_test(tc, loading_a_checkpoint_into_a_saved_parameter_is_caught);
    tcase_add_test(tc, reading_through_tg_data_const_leaves_backward_alone);
    tcase_add_test(tc, writing_into_a_view_of_a_saved_input_is_caught);
    tcase_add_test(tc, writing_into_an_op_output_it_saved_is_caught);
    tcase_add_test(tc, an_optimizer_step_between_forward_and_backward_is_caught);
    suite_add_tcase(s, tc);
    tc = tcase_misuse("released");
    tcase_add_test(tc, a_double_release_is_reported_and_keeps_the_live_count);
    tcase_add_test(tc, a_release_through_tg_release_at_names_file_and_line);
    tcase_add_test(tc, a_double_release_past_70000_other_releases_is_still_reported);
    tcase_add_test(tc, using_a_tensor_after_its_scope_ended_is_reported);
    tcase_add_test(tc, a_released_mask_or_array_element_is_reported);
    tcase_add_test(tc, a_released_tensor_given_to_a_module_is_reported);
    suite_add_tcase(s, tc);
    misuse_bad_input_cases(s);
    misuse_robustness_cases(s);
    return run_suite(s);
}
