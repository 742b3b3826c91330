/* The token choice every model's generation shares (nn/sample.h): top-p
 * against hand-made distributions whose nucleus is known, its order with
 * temperature and top-k, rows no token can be drawn from, and the checks of
 * a generation request. */
#include "testutil.h"

#include "sample.h"

enum { V = 4, DRAWS = 20000 };

/* Token probabilities out of order, so that ranking cannot be token order:
 * token 1 is the most likely, then 3, 0, 2. */
static const double probs[V] = {0.15, 0.5, 0.05, 0.3};

/* Draws DRAWS tokens from logits log(probs) with o (seeded rng) and counts
 * how often each token comes out. */
static void count_draws(const tg_sample_options *o, int64_t counts[V])
{
    tg__sampler *s = tg__sampler_new(V, "count_draws");
    ck_assert_ptr_nonnull(s);
    tg_rng *rng = tg_rng_new(2024);
    memset(counts, 0, V * sizeof *counts);
    for (int i = 0; i < DRAWS; i++) {
        double *row = tg__sampler_row(s);
        for (int t = 0; t < V; t++)
            row[t] = log(probs[t]) + 3.0; /* a shift softmax ignores */
        int64_t token = tg__sampler_pick(s, o, rng, i);
        ck_assert_int_ge(token, 0);
        ck_assert_int_lt(token, V);
        counts[token]++;
    }
    tg_rng_free(rng);
    tg__sampler_free(s);
}

/* counts[t] / DRAWS is within 0.02 of want[t] for every token (the draw's
 * standard error is under 0.004). */
static void assert_shares(const int64_t counts[V], const double want[V])
{
    for (int t = 0; t < V; t++) {
        double got = (double)counts[t] / DRAWS;
        ck_assert_msg(fabs(got - want[t]) < 0.02, "token %d drawn %.4f of the time, expected %.4f",
                      t, got, want[t]);
    }
}

START_TEST(top_p_keeps_the_smallest_set_reaching_it_in_its_proportions)
{
    /* 0.5 + 0.3 = 0.8 >= 0.7 while 0.5 alone is not: tokens 1 and 3 stay. */
    int64_t counts[V];
    tg_sample_options o = {.temperature = 1, .top_p = 0.7};
    count_draws(&o, counts);
    ck_assert_int_eq(counts[0], 0);
    ck_assert_int_eq(counts[2], 0);
    assert_shares(counts, (const double[]){0, 0.5 / 0.8, 0, 0.3 / 0.8});
}
END_TEST

START_TEST(top_p_reached_by_the_most_likely_token_keeps_it_alone)
{
    int64_t counts[V];
    tg_sample_options o = {.temperature = 1, .top_p = 0.5};
    count_draws(&o, counts);
    ck_assert_int_eq(counts[1], DRAWS);
    /* Below the first probability the most likely token still stays. */
    o.top_p = 1e-9;
    count_draws(&o, counts);
    ck_assert_int_eq(counts[1], DRAWS);
}
END_TEST

START_TEST(top_p_of_zero_or_one_keeps_every_token)
{
    int64_t counts[V];
    const double shares[] = {0, 1};
    for (int i = 0; i < 2; i++) {
        tg_sample_options o = {.temperature = 1, .top_p = shares[i]};
        count_draws(&o, counts);
        assert_shares(counts, probs);
    }
}
END_TEST

START_TEST(top_p_applies_after_top_k_renormalises)
{
    /* top_k 2 leaves 0.625 and 0.375, so top_p 0.6 keeps token 1 alone; cut
     * by top_p first, the two tokens would both survive. */
    int64_t counts[V];
    tg_sample_options o = {.temperature = 1, .top_k = 2, .top_p = 0.6};
    count_draws(&o, counts);
    ck_assert_int_eq(counts[1], DRAWS);
    /* top_k 3 leaves 0.5/0.95, 0.3/0.95, 0.15/0.95: top_p 0.6 keeps two. */
    o.top_k = 3;
    count_draws(&o, counts);
    assert_shares(counts, (const double[]){0, 0.5 / 0.8, 0, 0.3 / 0.8});
}
END_TEST

START_TEST(top_p_applies_after_the_temperature)
{
    /* At temperature 2 the probabilities go as sqrt(p): 0.379, 0.294, 0.208,
     * 0.120 in rank order, so top_p 0.7 needs three tokens (at temperature 1
     * two reach it). */
    int64_t counts[V];
    tg_sample_options o = {.temperature = 2, .top_p = 0.7};
    count_draws(&o, counts);
    ck_assert_int_eq(counts[2], 0);
    double w[V], total = 0;
    for (int t = 0; t < V; t++)
        total += w[t] = t == 2 ? 0 : sqrt(probs[t]);
    for (int t = 0; t < V; t++)
        w[t] /= total;
    assert_shares(counts, w);
}
END_TEST

/* A row with NaN or +inf has no softmax: every way of choosing refuses it,
 * naming the position, rather than answering token 0. */
START_TEST(pick_refuses_logits_that_are_not_finite_in_every_mode)
{
    const tg_sample_options modes[] = {{.greedy = true}, {.temperature = 1},
                                       {.temperature = 0.7, .top_k = 2},
                                       {.temperature = 1, .top_p = 0.9}};
    const double bad[] = {NAN, INFINITY};
    const char *shown[] = {"hold nan at token 2", "hold inf at token 2"};
    tg__sampler *s = tg__sampler_new(V, "tg_gpt_generate");
    tg_rng *rng = tg_rng_new(7);
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++)
        for (int b = 0; b < 2; b++) {
            double *row = tg__sampler_row(s);
            for (int t = 0; t < V; t++)
                row[t] = t == 2 ? bad[b] : log(probs[t]);
            ck_assert_int_eq(tg__sampler_pick(s, &modes[m], rng, 17), -1);
            ck_assert_error(TG_ERR_VALUE, "tg_gpt_generate: ", "position 17", shown[b]);
        }
    /* All NaN: no argmax to fall back on either. */
    for (int t = 0; t < V; t++)
        tg__sampler_row(s)[t] = NAN;
    ck_assert_int_eq(tg__sampler_pick(s, &modes[0], rng, 3), -1);
    ck_assert_error(TG_ERR_VALUE, "position 3", "hold nan at token 0");
    tg_rng_free(rng);
    tg__sampler_free(s);
}
END_TEST

/* -inf is a masked token, not an error, until no token is left. */
START_TEST(pick_draws_around_minus_inf_and_refuses_a_row_of_only_minus_inf)
{
    tg__sampler *s = tg__sampler_new(V, "tg_llama_generate");
    tg_rng *rng = tg_rng_new(7);
    const tg_sample_options greedy = {.greedy = true}, sampled = {.temperature = 1, .top_k = 3};
    for (int i = 0; i < 50; i++) {
        double *row = tg__sampler_row(s);
        for (int t = 0; t < V; t++)
            row[t] = t == 3 ? 0 : -INFINITY;
        ck_assert_int_eq(tg__sampler_pick(s, i % 2 ? &greedy : &sampled, rng, i), 3);
    }
    for (int t = 0; t < V; t++)
        tg__sampler_row(s)[t] = -INFINITY;
    ck_assert_int_eq(tg__sampler_pick(s, &sampled, rng, 9), -1);
    ck_assert_error(TG_ERR_VALUE, "tg_llama_generate: ", "every logit for position 9 is -inf");
    tg_rng_free(rng);
    tg__sampler_free(s);
}
END_TEST

START_TEST(sample_check_refuses_top_p_outside_the_unit_interval)
{
    const int64_t prompt[] = {1};
    tg_rng *rng = tg_rng_new(1);
    const double bad[] = {-0.1, 1.5, NAN, INFINITY};
    const char *shown[] = {"top_p = -0.1", "top_p = 1.5", "top_p = nan", "top_p = inf"};
    for (int i = 0; i < 4; i++) {
        tg_sample_options o = {.temperature = 1, .top_p = bad[i]};
        ck_assert_int_eq(tg__sample_check("f", prompt, 1, 2, &o, rng, V, 8), -1);
        ck_assert_error(TG_ERR_VALUE, "f: ", shown[i], "[0, 1]");
    }
    /* Greedy does not excuse a bad top_p, as it does not a bad top_k. */
    tg_sample_options g = {.greedy = true, .top_p = 2};
    ck_assert_int_eq(tg__sample_check("f", prompt, 1, 2, &g, NULL, V, 8), -1);
    ck_assert_error(TG_ERR_VALUE, "top_p = 2");
    tg_sample_options ok = {.temperature = 1, .top_p = 1};
    ck_assert_int_eq(tg__sample_check("f", prompt, 1, 2, &ok, rng, V, 8), 0);
    tg_rng_free(rng);
}
END_TEST

START_TEST(sample_check_refuses_running_past_the_context_unless_sliding)
{
    const int64_t prompt[] = {1, 2, 3};
    tg_sample_options o = {.greedy = true};
    ck_assert_int_eq(tg__sample_check("f", prompt, 3, 5, &o, NULL, V, 8), 0); /* exactly fits */
    ck_assert_int_eq(tg__sample_check("f", prompt, 3, 6, &o, NULL, V, 8), -1);
    ck_assert_error(TG_ERR_VALUE, "f: ", "prompt_len = 3", "n = 6", "block_size = 8",
                    "set slide");
    ck_assert_int_eq(tg__sample_check("f", prompt, 3, 0, &o, NULL, V, 2), -1);
    ck_assert_error(TG_ERR_VALUE, "block_size = 2");
    o.slide = true;
    ck_assert_int_eq(tg__sample_check("f", prompt, 3, 6, &o, NULL, V, 8), 0);
    ck_assert_int_eq(tg_error_code(), TG_OK);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sample");
    TCase *tc = tcase_checked("sample");
    tcase_add_test(tc, top_p_keeps_the_smallest_set_reaching_it_in_its_proportions);
    tcase_add_test(tc, top_p_reached_by_the_most_likely_token_keeps_it_alone);
    tcase_add_test(tc, top_p_of_zero_or_one_keeps_every_token);
    tcase_add_test(tc, top_p_applies_after_top_k_renormalises);
    tcase_add_test(tc, top_p_applies_after_the_temperature);
    tcase_add_test(tc, pick_refuses_logits_that_are_not_finite_in_every_mode);
    tcase_add_test(tc, pick_draws_around_minus_inf_and_refuses_a_row_of_only_minus_inf);
    tcase_add_test(tc, sample_check_refuses_top_p_outside_the_unit_interval);
    tcase_add_test(tc, sample_check_refuses_running_past_the_context_unless_sliding);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
