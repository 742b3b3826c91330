/* The GPT's generation (nn/gpt.c, nn/sample.c): KV-cache generation against
 * full recomputation, past block_size and streamed, sampling against the
 * rule written out independently, top-k and top-p, the context policy, the
 * KV cache's size, and errors (non-finite logits among them). */
#include "testutil.h"

#include "gpt_testutil.h"

/* ---- generation ------------------------------------------------------------------- */

/* The logits of the last position of out[len - ctx .. len), ctx = min(len,
 * block_size), by a full forward: generation without any cache. */
static void full_logits(const tg_gpt *m, const int64_t *seq, int64_t len, double *row)
{
    int64_t block = tg_gpt_config_of(m)->block_size, V = tg_gpt_config_of(m)->vocab_size;
    int64_t ctx = len < block ? len : block;
    tg_scope_begin();
    tg_tensor *idx = tg_from_data(TG_INT64, 2, SHAPE(1, ctx), seq + len - ctx);
    tg_tensor *logits = tg_gpt_forward(m, idx, NULL, NULL);
    ck_assert_shape(logits, 1, ctx, V);
    tg_tensor *last = tg_contiguous(tg_narrow(logits, 1, ctx - 1, 1));
    ck_assert_int_eq(tg_copy_to(last, TG_FLOAT64, row, V), 0);
    tg_scope_end();
}

static int64_t argmax(const double *v, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (v[i] > v[best])
            best = i;
    return best;
}

/* Greedy generation by full recomputation at every step. */
static void slow_greedy(const tg_gpt *m, const int64_t *prompt, int64_t plen, int64_t n,
                        int64_t *out)
{
    double row[64];
    memcpy(out, prompt, (size_t)plen * sizeof *out);
    for (int64_t i = 0; i < n; i++) {
        full_logits(m, out, plen + i, row);
        out[plen + i] = argmax(row, tg_gpt_config_of(m)->vocab_size);
    }
}

static tg_gpt *generation_model(tg_dtype dtype)
{
    tg_gpt_config c = {13, 6, 2, 2, 8, 0.2};
    tg_rng *rng = tg_rng_new(5);
    tg_gpt *m = tg_gpt_new(&c, dtype, rng);
    tg_rng_free(rng); /* the model keeps no reference to it */
    ck_assert_ptr_nonnull(m);
    randomize(m, 50, 2.5);
    tg_gpt_set_train(m, false); /* the no-cache reference path must not drop out */
    return m;
}

START_TEST(greedy_with_kv_cache_equals_full_recomputation_past_block_size)
{
    tg_gpt *m = generation_model(TG_FLOAT64);
    const int64_t prompt[] = {3, 7, 1};
    int64_t fast[3 + 14], slow[3 + 14];
    tg_sample_options o = {.greedy = true, .slide = true};
    ck_assert_int_eq(tg_gpt_generate(m, prompt, 3, 14, &o, NULL, fast), 0);
    slow_greedy(m, prompt, 3, 14, slow);
    for (int i = 0; i < 17; i++)
        ck_assert_msg(fast[i] == slow[i], "token %d: %lld with the cache, %lld without", i,
                      (long long)fast[i], (long long)slow[i]);
    /* Several different tokens come out, so the comparison means something. */
    bool seen[13] = {false};
    int distinct = 0;
    for (int i = 3; i < 17; i++) {
        distinct += !seen[fast[i]];
        seen[fast[i]] = true;
    }
    ck_assert_int_ge(distinct, 3);
    /* A prompt longer than block_size starts from its last block_size tokens. */
    const int64_t long_prompt[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    int64_t fast2[9 + 5], slow2[9 + 5];
    ck_assert_int_eq(tg_gpt_generate(m, long_prompt, 9, 5, &o, NULL, fast2), 0);
    slow_greedy(m, long_prompt, 9, 5, slow2);
    for (int i = 0; i < 14; i++)
        ck_assert_int_eq(fast2[i], slow2[i]);
    /* Generation never drops out, whatever the training mode. */
    tg_gpt_set_train(m, true);
    ck_assert_int_eq(tg_gpt_generate(m, prompt, 3, 14, &o, NULL, slow), 0);
    ck_assert_int_eq(memcmp(fast, slow, sizeof fast), 0);
    tg_gpt_free(m);
}
END_TEST

START_TEST(greedy_generation_in_float32_matches_full_recomputation)
{
    tg_gpt *m = generation_model(TG_FLOAT32);
    const int64_t prompt[] = {0};
    int64_t fast[1 + 10], slow[1 + 10];
    tg_sample_options o = {.greedy = true, .slide = true};
    ck_assert_int_eq(tg_gpt_generate(m, prompt, 1, 10, &o, NULL, fast), 0);
    slow_greedy(m, prompt, 1, 10, slow);
    for (int i = 0; i < 11; i++)
        ck_assert_int_eq(fast[i], slow[i]);
    tg_gpt_free(m);
}
END_TEST

/* Records the tokens it is given and asks to stop after `stop_after` of them. */
typedef struct {
    int64_t seen[32];
    int count, stop_after;
} token_log;

static int log_token(int64_t token, void *ctx)
{
    token_log *log = ctx;
    log->seen[log->count++] = token;
    return log->count >= log->stop_after;
}

START_TEST(generate_each_reports_each_new_token_in_order_and_can_stop)
{
    tg_gpt *m = generation_model(TG_FLOAT32);
    const int64_t prompt[] = {3, 7, 1};
    int64_t plain[3 + 12], streamed[3 + 12] = {0};
    tg_sample_options o = {.greedy = true, .slide = true};
    ck_assert_int_eq(tg_gpt_generate(m, prompt, 3, 12, &o, NULL, plain), 0);
    token_log log = {.stop_after = 100};
    ck_assert_int_eq(tg_gpt_generate_each(m, prompt, 3, 12, &o, NULL, streamed, log_token, &log),
                     0);
    ck_assert_int_eq(log.count, 12); /* the prompt is not reported, past block_size still is */
    for (int i = 0; i < 12; i++)
        ck_assert_int_eq(log.seen[i], plain[3 + i]);
    ck_assert_int_eq(memcmp(plain, streamed, sizeof plain), 0);
    /* A nonzero return stops after that token, without an error. */
    int64_t cut[3 + 12] = {0};
    log = (token_log){.stop_after = 4};
    ck_assert_int_eq(tg_gpt_generate_each(m, prompt, 3, 12, &o, NULL, cut, log_token, &log), 0);
    ck_assert_int_eq(log.count, 4);
    ck_assert_int_eq(memcmp(cut, plain, sizeof(int64_t) * 7), 0);
    ck_assert_int_eq(cut[7], 0); /* nothing written past the stop */
    ck_assert_int_eq(tg_error_code(), TG_OK);
    tg_gpt_free(m);
}
END_TEST

/* A non-finite weight reaches the logits from the position that reads it
 * on: generation stops there, in every mode, naming the position, with the
 * tokens made before it in out and reported, instead of answering token 0. */
START_TEST(generate_stops_at_the_first_position_whose_logits_are_not_finite)
{
    tg_gpt *m = generation_model(TG_FLOAT64);
    tg_params ps = {0};
    ck_assert_int_eq(tg_gpt_params(m, &ps), 0);
    tg_tensor *wpe = tg_params_find(&ps, "transformer.wpe.weight"); /* [6, 8] */
    ((double *)tg_data(wpe))[4 * 8 + 1] = NAN; /* position 4: the logits for position 5 */
    tg_params_clear(&ps);
    const tg_sample_options modes[] = {{.greedy = true}, {.temperature = 1},
                                       {.temperature = 1, .top_k = 3},
                                       {.temperature = 1, .top_p = 0.8}};
    const int64_t prompt[] = {3, 7};
    tg_rng *rng = tg_rng_new(4);
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        int64_t out[2 + 4] = {0};
        token_log log = {.stop_after = 100};
        ck_assert_int_eq(tg_gpt_generate_each(m, prompt, 2, 4, &modes[i], rng, out, log_token,
                                              &log), -1);
        ck_assert_error(TG_ERR_VALUE, "tg_gpt_generate", "logits for position 5 hold nan");
        ck_assert_int_eq(log.count, 3);
        for (int k = 0; k < 3; k++)
            ck_assert_int_eq(out[2 + k], log.seen[k]);
    }
    tg_rng_free(rng);
    tg_gpt_free(m);
}
END_TEST

/* softmax(row / temperature) over the top_k largest, drawn by inverse CDF
 * with one uniform number: the sampling rule written out independently. */
static int64_t reference_sample(const double *row, int64_t V, double temperature, int64_t top_k,
                                tg_rng *rng)
{
    double w[64], total = 0, top = row[argmax(row, V)];
    for (int64_t i = 0; i < V; i++) {
        int64_t larger = 0;
        for (int64_t j = 0; j < V; j++)
            larger += row[j] > row[i];
        bool kept = top_k == 0 || larger < top_k;
        w[i] = kept ? exp((row[i] - top) / temperature) : 0;
        total += w[i];
    }
    double u = tg_rng_uniform01(rng) * total, cum = 0;
    for (int64_t i = 0; i < V; i++) {
        cum += w[i];
        if (u < cum)
            return i;
    }
    return V - 1;
}

static void check_sampling(double temperature, int64_t top_k)
{
    tg_gpt *m = generation_model(TG_FLOAT64);
    const int64_t prompt[] = {2, 5};
    enum { NEW = 12 };
    int64_t got[2 + NEW], want[2 + NEW];
    tg_sample_options o = {.temperature = temperature, .top_k = top_k, .slide = true};
    tg_rng *rng = tg_rng_new(99), *ref = tg_rng_new(99);
    ck_assert_int_eq(tg_gpt_generate(m, prompt, 2, NEW, &o, rng, got), 0);
    memcpy(want, prompt, sizeof prompt);
    double row[64];
    for (int i = 0; i < NEW; i++) {
        full_logits(m, want, 2 + i, row);
        want[2 + i] = reference_sample(row, 13, temperature, top_k, ref);
    }
    for (int i = 0; i < 2 + NEW; i++)
        ck_assert_msg(got[i] == want[i], "token %d: %lld, expected %lld", i, (long long)got[i],
                      (long long)want[i]);
    /* The same seed gives the same tokens. */
    int64_t again[2 + NEW];
    tg_rng_seed(rng, 99);
    ck_assert_int_eq(tg_gpt_generate(m, prompt, 2, NEW, &o, rng, again), 0);
    ck_assert_int_eq(memcmp(got, again, sizeof got), 0);
    tg_rng_free(rng);
    tg_rng_free(ref);
    tg_gpt_free(m);
}

START_TEST(sampling_follows_softmax_of_scaled_logits_and_is_reproducible)
{
    check_sampling(1.0, 0);
    check_sampling(0.7, 0);
    check_sampling(1.5, 4);
}
END_TEST

START_TEST(top_k_one_equals_greedy)
{
    tg_gpt *m = generation_model(TG_FLOAT64);
    const int64_t prompt[] = {4};
    int64_t greedy[1 + 9], top1[1 + 9];
    tg_sample_options g = {.greedy = true, .slide = true}, k1 = {.temperature = 2.0, .top_k = 1, .slide = true};
    tg_rng *rng = tg_rng_new(6);
    ck_assert_int_eq(tg_gpt_generate(m, prompt, 1, 9, &g, NULL, greedy), 0);
    ck_assert_int_eq(tg_gpt_generate(m, prompt, 1, 9, &k1, rng, top1), 0);
    ck_assert_int_eq(memcmp(greedy, top1, sizeof greedy), 0);
    tg_rng_free(rng);
    tg_gpt_free(m);
}
END_TEST

START_TEST(top_p_too_small_for_two_tokens_equals_greedy)
{
    tg_gpt *m = generation_model(TG_FLOAT64);
    const int64_t prompt[] = {4};
    int64_t greedy[1 + 9], nucleus[1 + 9];
    tg_sample_options g = {.greedy = true, .slide = true};
    tg_sample_options p = {.temperature = 1.5, .top_p = 1e-9, .slide = true};
    tg_rng *rng = tg_rng_new(6);
    ck_assert_int_eq(tg_gpt_generate(m, prompt, 1, 9, &g, NULL, greedy), 0);
    ck_assert_int_eq(tg_gpt_generate(m, prompt, 1, 9, &p, rng, nucleus), 0);
    ck_assert_int_eq(memcmp(greedy, nucleus, sizeof greedy), 0);
    /* top_p 1 keeps all: the same tokens as no top_p from the same seed. */
    int64_t all[1 + 9], plain[1 + 9];
    p.top_p = 1;
    tg_rng_seed(rng, 6);
    ck_assert_int_eq(tg_gpt_generate(m, prompt, 1, 9, &p, rng, all), 0);
    p.top_p = 0;
    tg_rng_seed(rng, 6);
    ck_assert_int_eq(tg_gpt_generate(m, prompt, 1, 9, &p, rng, plain), 0);
    ck_assert_int_eq(memcmp(all, plain, sizeof all), 0);
    tg_rng_free(rng);
    tg_gpt_free(m);
}
END_TEST

START_TEST(generate_without_slide_refuses_past_block_size_up_front)
{
    tg_gpt *m = generation_model(TG_FLOAT32); /* block_size 6 */
    const int64_t prompt[] = {3, 7, 1};
    int64_t out[3 + 4] = {0}, fits[3 + 3];
    tg_sample_options o = {.greedy = true};
    ck_assert_int_eq(tg_gpt_generate(m, prompt, 3, 4, &o, NULL, out), -1);
    ck_assert_error(TG_ERR_VALUE, "tg_gpt_generate", "prompt_len = 3", "n = 4",
                    "block_size = 6", "set slide");
    for (int i = 0; i < 3 + 4; i++)
        ck_assert_int_eq(out[i], 0); /* refused before anything was written */
    ck_assert_int_eq(tg_gpt_generate(m, prompt, 3, 3, &o, NULL, fits), 0);
    /* Sliding, the first tokens are the ones that fit. */
    o.slide = true;
    ck_assert_int_eq(tg_gpt_generate(m, prompt, 3, 4, &o, NULL, out), 0);
    ck_assert_int_eq(memcmp(out, fits, sizeof fits), 0);
    tg_gpt_free(m);
}
END_TEST

START_TEST(kv_cache_bytes_counts_keys_and_values_of_every_layer)
{
    /* 2 layers * (k, v) * 2 heads * 6 positions * head_dim 8/2 = 192 elements */
    tg_gpt *m = generation_model(TG_FLOAT32);
    ck_assert_int_eq(tg_gpt_kv_cache_bytes(m), 2 * 2 * 2 * 6 * 4 * 4);
    tg_gpt_free(m);
    m = generation_model(TG_FLOAT64);
    ck_assert_int_eq(tg_gpt_kv_cache_bytes(m), 1536);
    tg_gpt_free(m);
    /* 3 layers, 4 heads of 5 over 7 positions, float32: 3*2*4*7*5*4 */
    tg_gpt_config c = {.vocab_size = 9, .block_size = 7, .n_layer = 3, .n_head = 4, .n_embd = 20};
    tg_rng *rng = tg_rng_new(1);
    m = tg_gpt_new(&c, TG_FLOAT32, rng);
    ck_assert_int_eq(tg_gpt_kv_cache_bytes(m), 3360);
    tg_gpt_free(m);
    tg_rng_free(rng);
    ck_assert_int_eq(tg_gpt_kv_cache_bytes(NULL), -1);
    ck_assert_error(TG_ERR_NULL, "tg_gpt_kv_cache_bytes");
}
END_TEST

START_TEST(generate_of_zero_tokens_copies_the_prompt_and_leaves_grad_mode)
{
    tg_gpt *m = generation_model(TG_FLOAT32);
    const int64_t prompt[] = {1, 2, 3};
    int64_t out[3] = {0};
    tg_sample_options o = {.greedy = true, .slide = true};
    ck_assert_int_eq(tg_gpt_generate(m, prompt, 3, 0, &o, NULL, out), 0);
    ck_assert_int_eq(memcmp(out, prompt, sizeof out), 0);
    int64_t more[5];
    ck_assert_int_eq(tg_gpt_generate(m, prompt, 3, 2, &o, NULL, more), 0);
    ck_assert(tg_grad_enabled());
    tg_gpt_free(m);
}
END_TEST

/* The KV cache and the copies made while filling it belong to generation
 * alone: a scope the caller has open is left as it was. */
START_TEST(generate_inside_an_open_scope_leaves_it_as_it_was)
{
    tg_gpt *m = generation_model(TG_FLOAT32);
    const int64_t prompt[] = {3, 7, 1};
    int64_t inside[3 + 12], outside[3 + 12];
    tg_sample_options o = {.greedy = true, .slide = true};
    ck_assert_int_eq(tg_gpt_generate(m, prompt, 3, 12, &o, NULL, outside), 0);
    int64_t live = tg_live_tensors();
    tg_scope_begin();
    ck_assert_int_eq(tg_gpt_generate(m, prompt, 3, 12, &o, NULL, inside), 0);
    ck_assert_int_eq(tg_live_tensors(), live);
    ck_assert_int_eq(tg_scope_depth(), 1);
    tg_scope_end();
    ck_assert_int_eq(tg_live_tensors(), live);
    ck_assert_int_eq(memcmp(inside, outside, sizeof inside), 0);
    ck_assert_int_eq(tg_error_code(), TG_OK);
    tg_gpt_free(m);
}
END_TEST

START_TEST(generate_rejects_bad_arguments)
{
    tg_gpt *m = generation_model(TG_FLOAT32);
    const int64_t prompt[] = {1, 2}, bad[] = {1, 13};
    int64_t out[8];
    tg_rng *rng = tg_rng_new(1);
    tg_sample_options g = {.greedy = true}, s = {.temperature = 1.0};
    ck_assert_int_eq(tg_gpt_generate(NULL, prompt, 2, 1, &g, NULL, out), -1);
    ck_assert_error(TG_ERR_NULL, "tg_gpt_generate", "m");
    ck_assert_int_eq(tg_gpt_generate(m, NULL, 2, 1, &g, NULL, out), -1);
    ck_assert_error(TG_ERR_NULL, "prompt");
    ck_assert_int_eq(tg_gpt_generate(m, prompt, 2, 1, NULL, NULL, out), -1);
    ck_assert_error(TG_ERR_NULL, "opts");
    ck_assert_int_eq(tg_gpt_generate(m, prompt, 2, 1, &g, NULL, NULL), -1);
    ck_assert_error(TG_ERR_NULL, "out");
    ck_assert_int_eq(tg_gpt_generate(m, prompt, 0, 1, &g, NULL, out), -1);
    ck_assert_error(TG_ERR_VALUE, "tg_gpt_generate", "prompt_len = 0");
    ck_assert_int_eq(tg_gpt_generate(m, prompt, 2, -1, &g, NULL, out), -1);
    ck_assert_error(TG_ERR_VALUE, "n = -1");
    ck_assert_int_eq(tg_gpt_generate(m, bad, 2, 1, &g, NULL, out), -1);
    ck_assert_error(TG_ERR_INDEX, "prompt[1] = 13");
    ck_assert_int_eq(tg_gpt_generate(m, prompt, 2, 1, &s, NULL, out), -1);
    ck_assert_error(TG_ERR_NULL, "rng");
    s.temperature = 0;
    ck_assert_int_eq(tg_gpt_generate(m, prompt, 2, 1, &s, rng, out), -1);
    ck_assert_error(TG_ERR_VALUE, "temperature = 0");
    s.temperature = 1;
    s.top_k = -2;
    ck_assert_int_eq(tg_gpt_generate(m, prompt, 2, 1, &s, rng, out), -1);
    ck_assert_error(TG_ERR_VALUE, "top_k = -2");
    s.top_k = 0;
    s.top_p = 1.25;
    ck_assert_int_eq(tg_gpt_generate(m, prompt, 2, 1, &s, rng, out), -1);
    ck_assert_error(TG_ERR_VALUE, "tg_gpt_generate", "top_p = 1.25");
    s.top_p = NAN;
    ck_assert_int_eq(tg_gpt_generate(m, prompt, 2, 1, &s, rng, out), -1);
    ck_assert_error(TG_ERR_VALUE, "top_p = nan");
    tg_rng_free(rng);
    tg_gpt_free(m);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gpt_generate");
    TCase *gen = tcase_checked("generate");
    tcase_add_test(gen, greedy_with_kv_cache_equals_full_recomputation_past_block_size);
    tcase_add_test(gen, greedy_generation_in_float32_matches_full_recomputation);
    tcase_add_test(gen, generate_each_reports_each_new_token_in_order_and_can_stop);
    tcase_add_test(gen, generate_stops_at_the_first_position_whose_logits_are_not_finite);
    tcase_add_test(gen, sampling_follows_softmax_of_scaled_logits_and_is_reproducible);
    tcase_add_test(gen, top_k_one_equals_greedy);
    tcase_add_test(gen, top_p_too_small_for_two_tokens_equals_greedy);
    tcase_add_test(gen, generate_without_slide_refuses_past_block_size_up_front);
    tcase_add_test(gen, kv_cache_bytes_counts_keys_and_values_of_every_layer);
    tcase_add_test(gen, generate_of_zero_tokens_copies_the_prompt_and_leaves_grad_mode);
    tcase_add_test(gen, generate_inside_an_open_scope_leaves_it_as_it_was);
    tcase_add_test(gen, generate_rejects_bad_arguments);
    suite_add_tcase(s, gen);
    return run_suite(s);
}
