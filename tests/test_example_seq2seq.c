/* Runs examples/seq2seq as a newcomer would: the default run translates at
 * least 99% of the held-out numbers exactly, greedy and with beam search;
 * --load of its checkpoint decodes the same; bad beam sizes and files, and
 * weights that are not finite, are refused. */
#include "testutil.h"

#include <math.h>
#include <unistd.h>

/* Built with AddressSanitizer, or under valgrind (TG_MEMCHECK), a run is ten
 * to a hundred times slower: there it is short, and checks the paths'
 * memory, not what the model learns. TG_TEST_SHORT makes it short too: CI
 * asserts the learning once, in its default build. */
#if defined(__SANITIZE_ADDRESS__)
static const bool built_for_memcheck = true;
#else
static const bool built_for_memcheck = false;
#endif

static bool short_run(void)
{
    return built_for_memcheck || getenv("TG_MEMCHECK") != NULL ||
           getenv("TG_TEST_SHORT") != NULL;
}

enum { OUT_CAP = 1 << 16, MIN_PERCENT = 99 };

static char dir[64];
static char train_out[OUT_CAP];
static int train_status = -1;

static int run(const char *args, char *out)
{
    int status = run_example_in(dir, "seq2seq", args, out, OUT_CAP);
    ck_assert_msg(status >= 0, "seq2seq %s crashed:\n%s", args, out);
    ck_assert_msg(!strstr(out, "leaked"), "%s", out);
    return status;
}

/* The training run happens once, before the tests that read its output. */
static void train_setup(void)
{
    make_temp_dir(dir, sizeof dir, "tg_seq2seq");
    train_status = run(short_run() ? "--steps 20 --out s.safetensors"
                                   : "--out s.safetensors", train_out);
}

static void train_teardown(void) { remove_temp_dir(dir); }

/* The greedy and beam percentages of out's "exact match" line. */
static void accuracies(const char *out, double *greedy, double *beam)
{
    const char *p = strstr(out, "exact match on 600 held-out translations: ");
    ck_assert_msg(p != NULL, "no accuracy line in:\n%s", out);
    ck_assert_int_eq(sscanf(p, "exact match on 600 held-out translations: greedy %lf%%, beam 4 "
                            "%lf%%", greedy, beam), 2);
}

/* What the evaluation printed: from its heading to the accuracies (the time
 * after them left out). */
static void evaluation_of(const char *out, char *text, size_t cap)
{
    const char *from = strstr(out, "held-out numbers"), *to = strstr(out, "  (");
    ck_assert_msg(from && to && to > from, "no evaluation in:\n%s", out);
    ck_assert_uint_lt((size_t)(to - from), cap);
    memcpy(text, from, (size_t)(to - from));
    text[to - from] = '\0';
}

START_TEST(default_run_translates_99_percent_of_held_out_numbers_both_ways)
{
    ck_assert_msg(train_status == 0, "exit status %d:\n%s", train_status, train_out);
    double greedy, beam;
    accuracies(train_out, &greedy, &beam);
    fprintf(stderr, "seq2seq: greedy %.1f%%, beam %.1f%%\n", greedy, beam);
    ck_assert_ptr_nonnull(strstr(train_out, "saved s.safetensors"));
    /* a translation each way is shown */
    ck_assert_ptr_nonnull(strstr(train_out, " hundred "));
    if (short_run())
        return;
    ck_assert_msg(greedy >= MIN_PERCENT && beam >= MIN_PERCENT,
                  "greedy %.1f%%, beam %.1f%%, below %d%%:\n%s", greedy, beam, MIN_PERCENT,
                  train_out);
}
END_TEST

START_TEST(load_decodes_the_checkpoint_as_the_training_run_did)
{
    ck_assert_msg(train_status == 0, "exit status %d", train_status);
    static char out[OUT_CAP], want[OUT_CAP], got[OUT_CAP];
    int st = run("--load s.safetensors", out);
    ck_assert_msg(st == 0, "exit status %d:\n%s", st, out);
    ck_assert_ptr_null(strstr(out, "step ")); /* no training */
    ck_assert_ptr_nonnull(strstr(out, "loaded s.safetensors"));
    evaluation_of(train_out, want, sizeof want);
    evaluation_of(out, got, sizeof got);
    ck_assert_str_eq(got, want);
}
END_TEST

START_TEST(beam_size_outside_the_vocabulary_is_refused)
{
    static char out[OUT_CAP];
    ck_assert_int_eq(run("--load s.safetensors --beam 0", out), 2);
    ck_assert_msg(strstr(out, "--beam 0 is outside 1..45"), "%s", out);
    ck_assert_int_eq(run("--load s.safetensors --beam 46", out), 2);
    ck_assert_msg(strstr(out, "--beam 46 is outside 1..45"), "%s", out);
    ck_assert_ptr_null(strstr(out, "exact match"));
}
END_TEST

START_TEST(load_of_a_missing_or_bad_file_fails_naming_it)
{
    static char out[OUT_CAP];
    ck_assert_int_eq(run("--load no_such.safetensors", out), 1);
    ck_assert_msg(strstr(out, "no_such.safetensors"), "%s", out);
    ck_assert_ptr_null(strstr(out, "exact match"));
    char path[128];
    snprintf(path, sizeof path, "%s/bad.safetensors", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("not a checkpoint\n", f);
    fclose(f);
    ck_assert_int_eq(run("--load bad.safetensors", out), 1);
    ck_assert_msg(strstr(out, "bad.safetensors"), "%s", out);
}
END_TEST

/* NaN weights would decode to 0% and exit 0: --load refuses them, naming
 * the parameter. */
START_TEST(load_of_weights_that_are_not_finite_fails_naming_the_parameter)
{
    ck_assert_msg(train_status == 0, "exit status %d", train_status);
    char path[128], want[256];
    snprintf(path, sizeof path, "%s/s.safetensors", dir);
    tg_params ck = {0};
    ck_assert_int_eq(tg_safetensors_load(path, &ck), 0);
    tg_tensor *t = ck.tensors[ck.count - 1];
    ck_assert(tg_dtype_of(t) == TG_FLOAT32);
    ((float *)tg_data(t))[0] = NAN;
    snprintf(want, sizeof want, "'%s' (float32 ", ck.names[ck.count - 1]);
    snprintf(path, sizeof path, "%s/nan.safetensors", dir);
    ck_assert_int_eq(tg_safetensors_save(path, &ck, 0, NULL, NULL), 0);
    tg_params_clear(&ck);
    static char out[OUT_CAP];
    ck_assert_int_eq(run("--load nan.safetensors", out), 1);
    ck_assert_msg(strstr(out, want) && strstr(out, "holds nan at [0"), "%s", out);
    ck_assert_ptr_null(strstr(out, "exact match"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("example_seq2seq");
    TCase *tc = tcase_create("seq2seq");
    tcase_add_unchecked_fixture(tc, train_setup, train_teardown);
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, default_run_translates_99_percent_of_held_out_numbers_both_ways);
    tcase_add_test(tc, load_decodes_the_checkpoint_as_the_training_run_did);
    tcase_add_test(tc, beam_size_outside_the_vocabulary_is_refused);
    tcase_add_test(tc, load_of_a_missing_or_bad_file_fails_naming_it);
    tcase_add_test(tc, load_of_weights_that_are_not_finite_fails_naming_the_parameter);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
