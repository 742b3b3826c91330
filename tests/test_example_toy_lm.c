/* Runs examples/toy_attention_lm as a newcomer would and checks what it
 * prints: the loss falls below 0.35 in the full 800 steps, the attention table
 * is causal with rows summing to 100 %, the summary follows from the table,
 * the SVG heatmap is well formed, and bad options are refused. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

enum { N = 8, OUT_CAP = 1 << 16 };

/* Under valgrind (the test setup sets TG_MEMCHECK) 800 steps take minutes:
 * there the run is 100 steps, which takes every path of the example and
 * prints the same table, and the loss bar is left to the other builds. */
static int full_steps(void) { return getenv("TG_MEMCHECK") ? 100 : 800; }

static char dir[256];           /* a fresh temporary directory */
static char full_out[OUT_CAP];  /* the output of the full 800-step run */
static int full_status = -1;
static char full_svg[300];

/* The example in this test's directory. */
static int run_example(const char *args, char *out, size_t cap)
{
    return run_example_in(dir, "toy_attention_lm", args, out, cap);
}

/* The full run happens once, before the tests that read its output. */
static void full_run_setup(void)
{
    strcpy(dir, "/tmp/tg_toy_lm_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(full_svg, sizeof full_svg, "%s/heat.svg", dir);
    char args[64];
    snprintf(args, sizeof args, "--steps %d --seed 0 --svg heat.svg", full_steps());
    full_status = run_example(args, full_out, sizeof full_out);
}

static void remove_in_dir(const char *name)
{
    char path[400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
}

static void full_run_teardown(void)
{
    remove_in_dir("heat.svg");
    remove_in_dir("attention_heatmap.svg");
    rmdir(dir);
}

/* The printed percentage table: pct[row][col]; fails the test if absent. */
static void parse_table(const char *out, int pct[N][N], char letters[N])
{
    const char *p = strstr(out, "attention weights on \"abababab\"");
    ck_assert_msg(p != NULL, "no attention table in:\n%s", out);
    p = strchr(p, '\n') + 1; /* the title */
    p = strchr(p, '\n') + 1; /* the column header */
    for (int i = 0; i < N; i++) {
        int row = -1, *r = pct[i];
        int got = sscanf(p, " %d '%c' %d %d %d %d %d %d %d %d", &row, &letters[i], &r[0], &r[1],
                         &r[2], &r[3], &r[4], &r[5], &r[6], &r[7]);
        ck_assert_msg(got == 10 && row == i, "bad table row %d: %.60s", i, p);
        p = strchr(p, '\n') + 1;
    }
}

static void assert_full_run_ok(void)
{
    ck_assert_msg(full_status == 0, "exit status %d, output:\n%s", full_status, full_out);
}

START_TEST(full_run_reaches_loss_below_0_35)
{
    assert_full_run_ok();
    double prev = 1e9, loss = -1;
    for (int step = 100; step <= full_steps(); step += 100) {
        char key[32];
        snprintf(key, sizeof key, "step %4d  loss ", step);
        const char *p = strstr(full_out, key);
        ck_assert_msg(p != NULL, "no loss line for step %d", step);
        loss = atof(p + strlen(key));
        ck_assert_msg(loss > 0 && loss < 3, "step %d: loss %g", step, loss);
        prev = loss;
    }
    const char *f = strstr(full_out, "final loss ");
    ck_assert_ptr_nonnull(f);
    ck_assert_double_eq_tol(atof(f + 11), prev, 1e-4);
    if (full_steps() == 800)
        ck_assert_msg(loss < 0.35, "final loss %.4f is not below 0.35", loss);
}
END_TEST

START_TEST(full_run_reports_its_training_time)
{
    assert_full_run_ok();
    const char *p = strstr(full_out, "training time ");
    ck_assert_ptr_nonnull(p);
    double seconds = -1;
    int steps = 0;
    ck_assert_int_eq(sscanf(p, "training time %lf s for %d steps", &seconds, &steps), 2);
    ck_assert_int_eq(steps, full_steps());
    ck_assert_msg(seconds > 0 && seconds < 600, "time %g s", seconds);
    fprintf(stderr, "toy_attention_lm: %d steps in %.3f s\n", steps, seconds);
}
END_TEST

START_TEST(printed_weights_are_causal_and_rows_sum_to_100)
{
    assert_full_run_ok();
    int pct[N][N];
    char letters[N];
    parse_table(full_out, pct, letters);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(letters[i], "abababab"[i]);
        int sum = 0;
        for (int j = 0; j < N; j++) {
            if (j > i)
                ck_assert_msg(pct[i][j] == 0, "row %d looks ahead at %d: %d%%", i, j, pct[i][j]);
            ck_assert_msg(pct[i][j] >= 0 && pct[i][j] <= 100, "cell %d,%d: %d", i, j, pct[i][j]);
            sum += pct[i][j];
        }
        ck_assert_msg(abs(sum - 100) <= 4, "row %d sums to %d%%", i, sum);
    }
    ck_assert_int_eq(pct[0][0], 100); /* the first position can only see itself */
}
END_TEST

/* Row i's "looks most at pos j" sentence, or -1. */
static int looks_most_at(const char *out, int i)
{
    char key[64];
    snprintf(key, sizeof key, "pos %d '%c' looks most at pos ", i, "abababab"[i]);
    const char *p = strstr(out, key);
    return p ? atoi(p + strlen(key)) : -1;
}

START_TEST(each_row_names_its_largest_weight)
{
    assert_full_run_ok();
    int pct[N][N];
    char letters[N];
    parse_table(full_out, pct, letters);
    for (int i = 0; i < N; i++) {
        int j = looks_most_at(full_out, i), best = 0;
        ck_assert_msg(j >= 0 && j <= i, "row %d: looks at %d", i, j);
        for (int k = 0; k <= i; k++)
            best = pct[i][k] > best ? pct[i][k] : best;
        /* Rounding may tie two cells; the named one must be a largest. */
        ck_assert_msg(pct[i][j] == best, "row %d names %d (%d%%), largest is %d%%", i, j,
                      pct[i][j], best);
    }
}
END_TEST

START_TEST(summary_counts_follow_from_the_rows)
{
    assert_full_run_ok();
    int prev = 0, same = 0, self = 0, other = 0;
    for (int i = 1; i < N; i++) {
        int j = looks_most_at(full_out, i);
        ck_assert_int_ge(j, 0);
        if (j == i)
            self++;
        else if (j == i - 1)
            prev++;
        else if ((i - j) % 2 == 0)
            same++;
        else
            other++;
    }
    const char *p = strstr(full_out, "what the model learned: ");
    ck_assert_ptr_nonnull(p);
    int c[4] = {-1, -1, -1, -1};
    ck_assert_int_eq(sscanf(p, "what the model learned: of the 7 positions that have a choice "
                               "(1-7), %d look most at the previous token, %d at an earlier "
                               "position holding the same letter, %d at themselves and %d at the "
                               "other letter further back",
                            &c[0], &c[1], &c[2], &c[3]),
                     4);
    ck_assert_int_eq(c[0], prev);
    ck_assert_int_eq(c[1], same);
    ck_assert_int_eq(c[2], self);
    ck_assert_int_eq(c[3], other);
    /* The verdict follows the majority, whichever it is. */
    const char *verdict = prev > 3           ? "mostly looks at the previous token"
                          : same + self > 3  ? "mostly looks at a position holding its own letter"
                          : prev + other > 3 ? "mostly looks at a position holding the other letter"
                                             : "no single pattern";
    ck_assert_msg(strstr(p, verdict) != NULL, "expected \"%s\" in: %.600s", verdict, p);
}
END_TEST

static char *read_file(const char *path, long *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    *len = ftell(f);
    rewind(f);
    char *buf = malloc((size_t)*len + 1);
    if (buf && fread(buf, 1, (size_t)*len, f) != (size_t)*len) {
        free(buf);
        buf = NULL;
    }
    if (buf)
        buf[*len] = '\0';
    fclose(f);
    return buf;
}

static int count_of(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

START_TEST(svg_heatmap_is_well_formed)
{
    assert_full_run_ok();
    long len = 0;
    char *svg = read_file(full_svg, &len);
    ck_assert_msg(svg != NULL, "no file %s", full_svg);
    while (len > 0 && (svg[len - 1] == '\n' || svg[len - 1] == ' '))
        svg[--len] = '\0';
    ck_assert_msg(strncmp(svg, "<svg", 4) == 0, "starts with %.20s", svg);
    ck_assert_msg(len >= 6 && strcmp(svg + len - 6, "</svg>") == 0, "ends with %s",
                  svg + (len > 20 ? len - 20 : 0));
    ck_assert_int_eq(count_of(svg, "class=\"cell\""), N * N);
    ck_assert_int_eq(count_of(svg, "<svg"), 1);
    /* Each cell's label is the percentage the table printed, row by row. */
    int pct[N][N];
    char letters[N];
    parse_table(full_out, pct, letters);
    const char *p = svg;
    for (int k = 0; k < N * N; k++) {
        p = strstr(p, "class=\"cell\"");
        p = strstr(p, "\">");
        ck_assert_ptr_nonnull(p);
        ck_assert_int_eq(atoi(p + 2), pct[k / N][k % N]);
    }
    free(svg);
}
END_TEST

START_TEST(bad_options_exit_2_with_a_message)
{
    static const char *const bad[] = {
        "--steps", "--steps 0", "--steps abc", "--steps -5", "--steps 10x",
        "--seed", "--seed x", "--svg", "--bogus", "extra",
    };
    char out[4096];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int st = run_example(bad[i], out, sizeof out);
        ck_assert_msg(st == 2, "'%s': exit %d", bad[i], st);
        ck_assert_msg(strstr(out, "usage:") != NULL, "'%s': no usage in %s", bad[i], out);
        ck_assert_msg(strstr(out, "toy_attention_lm: ") != NULL, "'%s': no message in %s",
                      bad[i], out);
        ck_assert_msg(strstr(out, "loss") == NULL, "'%s' trained anyway", bad[i]);
    }
    ck_assert_int_eq(run_example("--help", out, sizeof out), 0);
    ck_assert_ptr_nonnull(strstr(out, "usage:"));
}
END_TEST

START_TEST(unwritable_svg_path_fails_with_a_message)
{
    char out[OUT_CAP];
    int st = run_example("--steps 1 --svg /nonexistent-dir/x.svg", out, sizeof out);
    ck_assert_msg(st == 1, "exit %d writing to a missing directory", st);
    ck_assert_msg(strstr(out, "cannot write --svg /nonexistent-dir/x.svg: ") != NULL, "got:\n%s",
                  out);
    ck_assert_msg(strstr(out, "loss") == NULL, "trained anyway:\n%s", out);
}
END_TEST

START_TEST(default_svg_name_is_in_the_current_directory)
{
    char out[OUT_CAP], path[400];
    ck_assert_int_eq(run_example("--steps 2", out, sizeof out), 0);
    snprintf(path, sizeof path, "%s/attention_heatmap.svg", dir);
    struct stat sb;
    ck_assert_msg(stat(path, &sb) == 0 && sb.st_size > 0, "no %s", path);
    ck_assert_ptr_nonnull(strstr(out, "step    2  loss "));
}
END_TEST

/* The loss line of a short run with this seed. */
static void short_run_losses(const char *seed, char *line, size_t cap)
{
    char out[OUT_CAP], args[64];
    snprintf(args, sizeof args, "--steps 30 --seed %s --svg s.svg", seed);
    ck_assert_int_eq(run_example(args, out, sizeof out), 0);
    remove_in_dir("s.svg");
    const char *p = strstr(out, "step   30  loss ");
    ck_assert_ptr_nonnull(p);
    snprintf(line, cap, "%.*s", (int)strcspn(p, "\n"), p);
}

START_TEST(same_seed_repeats_and_another_seed_differs)
{
    char a[128], b[128], c[128];
    short_run_losses("3", a, sizeof a);
    short_run_losses("3", b, sizeof b);
    short_run_losses("4", c, sizeof c);
    ck_assert_str_eq(a, b);
    ck_assert_str_ne(a, c);
}
END_TEST

static Suite *toy_lm_suite(void)
{
    Suite *s = suite_create("example_toy_lm");
    TCase *full = tcase_checked("full_run");
    /* Unchecked: the 800-step run happens once, not once per test. */
    tcase_add_unchecked_fixture(full, full_run_setup, full_run_teardown);
    tcase_set_timeout(full, 120);
    tcase_add_test(full, full_run_reaches_loss_below_0_35);
    tcase_add_test(full, full_run_reports_its_training_time);
    tcase_add_test(full, printed_weights_are_causal_and_rows_sum_to_100);
    tcase_add_test(full, each_row_names_its_largest_weight);
    tcase_add_test(full, summary_counts_follow_from_the_rows);
    tcase_add_test(full, svg_heatmap_is_well_formed);
    tcase_add_test(full, bad_options_exit_2_with_a_message);
    tcase_add_test(full, unwritable_svg_path_fails_with_a_message);
    tcase_add_test(full, default_svg_name_is_in_the_current_directory);
    tcase_add_test(full, same_seed_repeats_and_another_seed_differs);
    suite_add_tcase(s, full);
    return s;
}

int main(void)
{
    return run_suite(toy_lm_suite());
}
