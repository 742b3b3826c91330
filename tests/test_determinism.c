/* Same seed, same losses: 100 AdamW steps of a GPT with dropout give
 * bit-identical losses run after run, and on one thread as on two. The test
 * program trains in a child copy of itself (argument --losses), so each run
 * is a fresh process with its own OMP_NUM_THREADS. The model is big enough
 * that the products, the elementwise ops and the dropout masks all take
 * their multi-threaded paths. */
#include "testutil.h"

#include <stdint.h>

enum { STEPS = 100, B = 8, T = 32 };

static const char *self_path;

/* Trains and prints each step's loss as a hex float. Returns the exit status. */
static int print_losses(void)
{
    tg_gpt_config cfg = {.vocab_size = 50, .block_size = T, .n_layer = 2, .n_head = 4,
                         .n_embd = 64, .dropout = 0.1};
    tg_rng *rng = tg_rng_new(2024);
    tg_gpt *m = tg_gpt_new(&cfg, TG_FLOAT32, rng);
    tg_params ps = {0};
    tg_optim *opt = NULL;
    if (!m || tg_gpt_params(m, &ps) < 0 ||
        !(opt = tg_adamw_new(&ps, 1e-3, 0.9, 0.99, 1e-8, 0.1)))
        return 1;
    int64_t x[B * T], y[B * T];
    for (int step = 0; step < STEPS; step++) {
        for (int i = 0; i < B * T; i++) {
            x[i] = (int64_t)(tg_rng_next(rng) % 50);
            y[i] = (x[i] * 7 + 3) % 50; /* something to learn */
        }
        tg_scope_begin();
        tg_tensor *loss = NULL;
        tg_gpt_forward(m, tg_from_data(TG_INT64, 2, SHAPE(B, T), x),
                       tg_from_data(TG_INT64, 2, SHAPE(B, T), y), &loss);
        if (!loss || tg_backward(loss, NULL) < 0 || tg_optim_step(opt) < 0)
            return 1;
        printf("%a\n", tg_item(loss));
        tg_optim_zero_grad(opt);
        tg_scope_end();
    }
    tg_optim_free(opt);
    tg_params_clear(&ps);
    tg_gpt_free(m);
    tg_rng_free(rng);
    return 0;
}

/* The losses a child run prints with OMP_NUM_THREADS=threads. */
static void run_child(int threads, char *out, size_t cap)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=%d '%s' --losses", threads, self_path);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    ck_assert_int_eq(pclose(p), 0);
    int lines = 0;
    for (size_t i = 0; i < n; i++)
        lines += out[i] == '\n';
    ck_assert_int_eq(lines, STEPS);
}

/* Three runs (two threads twice, one thread once) in one test, so that the
 * suite trains three times, not six, also under valgrind. The losses must
 * fall, too: the runs compared are training, not stuck. */
START_TEST(losses_repeat_bit_for_bit_on_one_and_two_threads)
{
    static char two[8192], two_again[8192], one[8192];
    run_child(2, two, sizeof two);
    run_child(2, two_again, sizeof two_again);
    run_child(1, one, sizeof one);
    ck_assert_str_eq(two, two_again);
    ck_assert_str_eq(two, one);
    double first = strtod(two, NULL), last = first;
    for (const char *line = two; *line; line = strchr(line, '\n') + 1)
        last = strtod(line, NULL);
    ck_assert_msg(last < 0.8 * first, "loss went from %g to %g", first, last);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--losses"))
        return print_losses();
    self_path = argv[0];
    Suite *s = suite_create("determinism");
    TCase *tc = tcase_create("losses");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, losses_repeat_bit_for_bit_on_one_and_two_threads);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
