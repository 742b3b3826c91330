/* Runs examples/encoder as a newcomer would: a short training run must
 * reverse far more held-out sequences than chance (about 0), --eval on its
 * checkpoint must print the same accuracy, and bad input must be refused. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

enum { OUT_CAP = 1 << 16 };

/* 150 steps take a few seconds and reach 90-94 % on seeds 1-3 (measured on
 * a loaded 2-core machine; 100 steps give 13-20 %); chance is about 0 %. */
#define SHORT_STEPS "150"
#define SHORT_STEPS_W "  150" /* as the progress line prints it: %5ld */
#define MIN_ACCURACY 50

static char dir[256];          /* a fresh temporary directory */
static char train_out[OUT_CAP]; /* the output of the short training run */
static int train_status = -1;

/* The example in this test's directory. */
static int run_example(const char *args, char *out, size_t cap)
{
    return run_example_in(dir, "encoder", args, out, cap);
}

/* The training run happens once, before the tests that read its output. */
static void train_setup(void)
{
    strcpy(dir, "/tmp/tg_example_encoder_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    train_status = run_example("--steps " SHORT_STEPS " --seed 3 --save short.safetensors",
                               train_out, sizeof train_out);
}

static void remove_in_dir(const char *name)
{
    char path[400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
}

static void train_teardown(void)
{
    remove_in_dir("short.safetensors");
    remove_in_dir("encoder.safetensors");
    rmdir(dir);
}

/* The percentage on the final "held-out sequence accuracy:" line of out, or
 * fails the test. */
static double final_accuracy(const char *out)
{
    const char *key = "held-out sequence accuracy: ", *p = strstr(out, key);
    ck_assert_msg(p != NULL, "no accuracy line in:\n%s", out);
    double pct = -1;
    int right = -1, total = -1;
    ck_assert_int_eq(sscanf(p + strlen(key), "%lf%% (%d/%d)", &pct, &right, &total), 3);
    ck_assert_int_eq(total, 500);
    ck_assert_double_eq_tol(pct, 100.0 * right / total, 0.006);
    return pct;
}

START_TEST(short_run_beats_chance_by_far)
{
    ck_assert_msg(train_status == 0, "exit status %d, output:\n%s", train_status, train_out);
    double pct = final_accuracy(train_out);
    fprintf(stderr, "encoder: %s steps give %.2f%% held-out sequence accuracy\n", SHORT_STEPS,
            pct);
    ck_assert_msg(pct >= MIN_ACCURACY, "held-out sequence accuracy %.2f%% is below %d%%", pct,
                  MIN_ACCURACY);
}
END_TEST

START_TEST(short_run_reports_progress_time_and_examples)
{
    ck_assert_msg(train_status == 0, "exit status %d", train_status);
    /* The curve: one line per evaluation, ending at the last step. */
    ck_assert_ptr_nonnull(strstr(train_out, "step " SHORT_STEPS_W "  loss "));
    const char *t = strstr(train_out, "trained " SHORT_STEPS " steps in ");
    ck_assert_msg(t != NULL, "no training time in:\n%s", train_out);
    double seconds = atof(t + strlen("trained " SHORT_STEPS " steps in "));
    ck_assert_msg(seconds > 0 && seconds < 600, "training time %g s", seconds);
    ck_assert_ptr_nonnull(strstr(train_out, "saved the weights to short.safetensors"));
    /* Each example line: input -> predicted / expected, and the expected
     * output is the input reversed. */
    const char *p = strstr(train_out, "(input -> predicted / expected):\n");
    ck_assert_ptr_nonnull(p);
    p = strchr(p, '\n') + 1;
    for (int i = 0; i < 8; i++) {
        char in[16], pred[16], want[16], verdict[8];
        ck_assert_int_eq(sscanf(p, " %15s -> %15s / %15s %7s", in, pred, want, verdict), 4);
        size_t n = strlen(in);
        ck_assert_msg(n >= 3 && n <= 10 && strlen(pred) == n && strlen(want) == n, "%.60s", p);
        for (size_t k = 0; k < n; k++)
            ck_assert_int_eq(want[k], in[n - 1 - k]);
        ck_assert_str_eq(verdict, strcmp(pred, want) == 0 ? "ok" : "WRONG");
        p = strchr(p, '\n') + 1;
    }
}
END_TEST

START_TEST(eval_of_the_checkpoint_prints_the_same_accuracy)
{
    ck_assert_msg(train_status == 0, "exit status %d", train_status);
    static char out[OUT_CAP];
    int st = run_example("--eval short.safetensors", out, sizeof out);
    ck_assert_msg(st == 0, "exit status %d, output:\n%s", st, out);
    ck_assert_ptr_null(strstr(out, "step ")); /* evaluation only: no training */
    ck_assert_ptr_nonnull(strstr(out, "loaded short.safetensors"));
    ck_assert_double_eq(final_accuracy(out), final_accuracy(train_out));
}
END_TEST

START_TEST(eval_of_a_missing_file_names_it_and_fails)
{
    static char out[OUT_CAP];
    int st = run_example("--eval no_such_file.safetensors", out, sizeof out);
    ck_assert_msg(st != 0, "exit status 0 for a missing checkpoint:\n%s", out);
    ck_assert_msg(strstr(out, "no_such_file.safetensors") != NULL, "output:\n%s", out);
    ck_assert_ptr_null(strstr(out, "held-out sequence accuracy"));
}
END_TEST

START_TEST(eval_of_a_file_that_is_not_a_checkpoint_fails)
{
    char path[400];
    snprintf(path, sizeof path, "%s/encoder.safetensors", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("not a checkpoint\n", f);
    fclose(f);
    static char out[OUT_CAP];
    int st = run_example("--eval encoder.safetensors", out, sizeof out);
    ck_assert_msg(st == 1, "exit status %d:\n%s", st, out);
    ck_assert_msg(strstr(out, "encoder.safetensors") != NULL, "output:\n%s", out);
}
END_TEST

START_TEST(bad_options_print_usage_and_exit_2)
{
    const char *bad[] = {"--steps", "--steps 0", "--steps ten", "--steps 5x", "--seed -1",
                         "--save", "--eval", "--frobnicate", "extra"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        static char out[OUT_CAP];
        int st = run_example(bad[i], out, sizeof out);
        ck_assert_msg(st == 2, "'%s': exit status %d", bad[i], st);
        ck_assert_msg(strstr(out, "usage:") != NULL, "'%s': no usage in:\n%s", bad[i], out);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("example_encoder");
    TCase *tc = tcase_checked("example_encoder");
    tcase_add_unchecked_fixture(tc, train_setup, train_teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, short_run_beats_chance_by_far);
    tcase_add_test(tc, short_run_reports_progress_time_and_examples);
    tcase_add_test(tc, eval_of_the_checkpoint_prints_the_same_accuracy);
    tcase_add_test(tc, eval_of_a_missing_file_names_it_and_fails);
    tcase_add_test(tc, eval_of_a_file_that_is_not_a_checkpoint_fails);
    tcase_add_test(tc, bad_options_print_usage_and_exit_2);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
