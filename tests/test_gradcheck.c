/* Every gradient-check case of every area, in float64 against central
 * differences and in float32 against float64; and the test that no op in
 * the op list goes without a case. */
#include "cases.h"
#include "testutil.h"

#include <stdio.h>

#define MAX_CASES 512
static const gc_case *all_cases[MAX_CASES];
static int n_all;

static void collect(const gc_case *cases, int n)
{
    for (int i = 0; i < n && n_all < MAX_CASES; i++)
        all_cases[n_all++] = &cases[i];
}

/* The case's function on its float inputs passed through an op first (times
 * 1), so that every op also runs on inputs that have a graph node: those
 * are the inputs a node may keep as husks, without their data. */
static tg_tensor *through_an_op(tg_tensor *const *inputs, int n, void *ctx)
{
    const gc_case *c = ctx;
    tg_tensor *moved[16];
    for (int i = 0; i < n; i++)
        moved[i] = tg_requires_grad(inputs[i]) ? tg_mul_scalar(inputs[i], 1.0) : inputs[i];
    return c->fn(moved, n, NULL);
}

/* Runs one case three ways; returns 1 when all pass, else writes why. */
static int run_case(const gc_case *c, char *why, size_t size)
{
    tg_rng *rng = tg_rng_new(1234);
    tg_tensor *inputs[16] = {0};
    int n = c->make_inputs(inputs, rng);
    tg_rng_free(rng);
    tg_gradcheck_result r64, r32;
    tg_gradcheck_options o32 = {.atol = c->atol32, .rtol = c->rtol32};
    int ok64 = n > 0 ? tg_gradcheck(c->fn, NULL, inputs, n, NULL, &r64) : -1;
    int ok32 = n > 0 ? tg_gradcheck_float32(c->fn, NULL, inputs, n, &o32, &r32) : -1;
    tg_gradcheck_result rop;
    int okop = n > 0 ? tg_gradcheck(through_an_op, (void *)c, inputs, n, NULL, &rop) : -1;
    for (int i = 0; i < n; i++)
        tg_release(inputs[i]);
    if (ok64 == 1 && ok32 == 1 && okop == 1)
        return 1;
    snprintf(why, size, "%s: %s | %s | %s | %s", c->name,
             ok64 < 0 ? "float64 check errored" : r64.message,
             ok32 < 0 ? "float32 check errored" : r32.message,
             okop < 0 ? "check through an op errored" : rop.message, tg_error_message());
    return 0;
}

START_TEST(gradcheck_case_passes)
{
    char why[1024];
    ck_assert_msg(run_case(all_cases[_i], why, sizeof why), "%s", why);
}
END_TEST

START_TEST(every_op_in_the_list_has_a_gradcheck_case)
{
    char why[1024];
    for (int i = 0; i < n_all; i++)
        run_case(all_cases[i], why, sizeof why);
    int64_t seen[TG_OP_COUNT][2];
    tg_gradcheck_coverage(seen, TG_OP_COUNT);
    char missing[1024] = "";
    for (int op = 0; op < TG_OP_COUNT; op++)
        if (!seen[op][0] || !seen[op][1])
            snprintf(missing + strlen(missing), sizeof missing - strlen(missing), " %s%s",
                     tg_op_name(op), !seen[op][0] ? "(f64)" : "(f32)");
    ck_assert_msg(missing[0] == '\0', "ops without a gradient check:%s", missing);
}
END_TEST

START_TEST(op_names_follow_the_list)
{
    ck_assert_str_eq(tg_op_name(TG_OP_ADD), "add");
    ck_assert_str_eq(tg_op_name(TG_OP_MATMUL), "matmul");
    ck_assert_ptr_null(tg_op_name(TG_OP_COUNT));
    for (int op = 0; op < TG_OP_COUNT; op++)
        for (int other = 0; other < op; other++)
            ck_assert_str_ne(tg_op_name(op), tg_op_name(other));
}
END_TEST

int main(void)
{
    collect(cases_pointwise, n_cases_pointwise);
    collect(cases_reduce, n_cases_reduce);
    collect(cases_matmul, n_cases_matmul);
    collect(cases_shape, n_cases_shape);
    collect(cases_attention, n_cases_attention);
    collect(cases_nn, n_cases_nn);
    collect(cases_sdpa_fused, n_cases_sdpa_fused);
    collect(cases_rope, n_cases_rope);
    Suite *s = suite_create("gradcheck");
    TCase *cases = tcase_checked("cases");
    tcase_set_timeout(cases, 60);
    tcase_add_loop_test(cases, gradcheck_case_passes, 0, n_all);
    suite_add_tcase(s, cases);
    TCase *coverage = tcase_checked("coverage");
    tcase_set_timeout(coverage, 120);
    tcase_add_test(coverage, every_op_in_the_list_has_a_gradcheck_case);
    tcase_add_test(coverage, op_names_follow_the_list);
    suite_add_tcase(s, coverage);
    return run_suite(s);
}
