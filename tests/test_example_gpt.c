/* Runs examples/gpt on tiny settings in a temporary directory: training on
 * the built-in task and on a small text file, sampling from the checkpoint,
 * resuming bit for bit, and the errors a user can make. */
#include "testutil.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[64];
static char output[1 << 16];

/* Runs `gpt ARGS` in dir with stdout and stderr in output; the exit status. */
static int run(const char *args)
{
    int status = run_example_in(dir, "gpt", args, output, sizeof output);
    ck_assert_msg(!strstr(output, "leaked"), "%s", output);
    ck_assert_msg(status >= 0, "gpt %s crashed:\n%s", args, output);
    return status;
}

#define ck_assert_output(fragment) \
    ck_assert_msg(strstr(output, fragment) != NULL, "no '%s' in:\n%s", fragment, output)

static void write_file(const char *name, const void *data, size_t n)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

static long file_size(const char *name)
{
    char path[128];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* The loss printed on the "final:" line, as text (compared exactly). */
static void final_loss(char out[32])
{
    const char *at = strstr(output, "final: step");
    ck_assert_msg(at != NULL, "no final line in:\n%s", output);
    ck_assert_int_eq(sscanf(at, "final: step %*d loss %31s", out), 1);
}

static void make_dir(void)
{
    strcpy(dir, "/tmp/tg_gpt_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void remove_dir(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static const char text[] =
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\n"
    "All:\nSpeak, speak.\n\nFirst Citizen:\nYou are all resolved rather to die than to "
    "famish?\n\nAll:\nResolved. resolved.\n\nFirst Citizen:\nFirst, you know Caius Marcius "
    "is chief enemy to the people.\n\nAll:\nWe know't, we know't.\n\nFirst Citizen:\nLet us "
    "kill him, and we'll have corn at our own price.\nIs't a verdict?\n";

START_TEST(train_on_builtin_task_logs_saves_and_reports_accuracy)
{
    ck_assert_int_eq(run("train --config tiny --steps 6 --batch 8 --eval-every 3 "
                         "--out m.safetensors --svg c.svg"), 0);
    ck_assert_output("3-digit addition");
    ck_assert_output("step 3/6  loss ");
    ck_assert_output("step 6/6  loss ");
    ck_assert_output("tok/s");
    ck_assert_output("final: step 6 loss ");
    ck_assert_output("exact-match accuracy: ");
    ck_assert_output("saved m.safetensors and c.svg");
    ck_assert(file_size("m.safetensors") > 10000);
    ck_assert(file_size("c.svg") > 500);

    /* the prompt, then exactly --tokens characters of the task's alphabet, then \n */
    ck_assert_int_eq(run("sample --ckpt m.safetensors --prompt 12+3 --tokens 25 --top-k 5 "
                         "--temperature 0.8 --seed 3"), 0);
    ck_assert_uint_eq(strlen(output), 4 + 25 + 1);
    ck_assert(strncmp(output, "12+3", 4) == 0);
    ck_assert_uint_eq(strspn(output, "0123456789+=\n"), strlen(output));
    ck_assert_int_eq(run("sample --ckpt m.safetensors --prompt 7 --tokens 9 --greedy"), 0);
    ck_assert_uint_eq(strlen(output), 1 + 9 + 1);

    ck_assert_int_eq(run("sample --ckpt m.safetensors --prompt 1x2 --tokens 5"), 1);
    ck_assert_output("'x'");
    ck_assert_output("not in the model's vocabulary");
}
END_TEST

START_TEST(svg_has_axes_labels_and_both_curves)
{
    ck_assert_int_eq(run("train --config tiny --steps 4 --batch 4 --eval-every 2 --svg c.svg"), 0);
    char path[128], svg[8192];
    snprintf(path, sizeof path, "%s/c.svg", dir);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(svg, 1, sizeof svg - 1, f);
    fclose(f);
    svg[n] = '\0';
    ck_assert(strncmp(svg, "<svg", 4) == 0);
    ck_assert(strstr(svg, "</svg>") != NULL);
    ck_assert(strstr(svg, ">step</text>") != NULL);
    ck_assert(strstr(svg, ">validation</text>") != NULL);
    const char *first = strstr(svg, "<polyline");
    ck_assert(first != NULL && strstr(first + 1, "<polyline") != NULL);
}
END_TEST

START_TEST(resumed_run_ends_with_the_same_loss)
{
    char straight[32], resumed[32];
    ck_assert_int_eq(run("train --config tiny --steps 8 --batch 4 --seed 5 --out a.safetensors"), 0);
    final_loss(straight);
    ck_assert_int_eq(run("train --config tiny --steps 8 --batch 4 --seed 5 --stop-at 4 "
                         "--out b.safetensors"), 0);
    ck_assert_output("stopped at step 4 of 8");
    ck_assert_int_eq(run("train --resume b.safetensors --out c.safetensors"), 0);
    ck_assert_output("resumed");
    ck_assert_output("step 8/8");
    final_loss(resumed);
    ck_assert_str_eq(straight, resumed);
    ck_assert_uint_ge(strlen(straight), 8); /* "x.xxxxxx" at least */

    /* the same with a text file: the data generator is restored too */
    write_file("t.txt", text, sizeof text - 1);
    ck_assert_int_eq(run("train --data t.txt --config tiny --steps 6 --batch 4 --out d.safetensors"), 0);
    final_loss(straight);
    ck_assert_int_eq(run("train --data t.txt --config tiny --steps 6 --batch 4 --stop-at 3 "
                         "--out e.safetensors"), 0);
    ck_assert_int_eq(run("train --data t.txt --resume e.safetensors --out f.safetensors"), 0);
    final_loss(resumed);
    ck_assert_str_eq(straight, resumed);
}
END_TEST

START_TEST(train_on_text_file_reports_validation_loss_and_samples)
{
    write_file("t.txt", text, sizeof text - 1);
    ck_assert_int_eq(run("train --data t.txt --config tiny --steps 10 --batch 4 --eval-every 5 "
                         "--out t.safetensors"), 0);
    char expect[96];
    snprintf(expect, sizeof expect, "text: %zu characters for training, %zu for validation",
             (sizeof text - 1) - (sizeof text - 1) / 10, (sizeof text - 1) / 10);
    ck_assert_output(expect);
    ck_assert_output("step 5/10  loss ");
    ck_assert_output("  val ");
    ck_assert_output("final: step 10 loss ");
    ck_assert(!strstr(output, "accuracy"));
    ck_assert_int_eq(run("sample --ckpt t.safetensors --prompt All: --tokens 40"), 0);
    ck_assert_uint_eq(strlen(output), 4 + 40 + 1);
    for (const char *c = output; *c; c++)
        ck_assert_msg(strchr(text, *c) != NULL, "'%c' is not in the text", *c);
    ck_assert_int_eq(run("sample --ckpt t.safetensors --prompt Zebra --tokens 4"), 1);
    ck_assert_output("'Z'");
}
END_TEST

START_TEST(bad_data_files_are_runtime_errors)
{
    write_file("empty.txt", "", 0);
    ck_assert_int_eq(run("train --data empty.txt --config tiny --steps 2"), 1);
    ck_assert_output("is empty");
    ck_assert_int_eq(run("train --data missing.txt --config tiny --steps 2"), 1);
    ck_assert_output("cannot read --data missing.txt");
    write_file("nul.txt", "abc\0def ghi jkl mno pqr stu vwx yz abc def ghi jkl", 50);
    ck_assert_int_eq(run("train --data nul.txt --config tiny --steps 2"), 1);
    ck_assert_output("NUL");
    write_file("short.txt", "just a few words", 16);
    ck_assert_int_eq(run("train --data short.txt --config tiny --steps 2"), 1);
    ck_assert_output("too short");
    ck_assert_output("context + 1 = 17");
    ck_assert_int_eq(run("sample --ckpt missing.safetensors"), 1);
    ck_assert_output("cannot load missing.safetensors");
    ck_assert_int_eq(run("sample --ckpt empty.txt"), 1);
    ck_assert_int_eq(run("train --resume missing.safetensors --steps 2"), 1);
}
END_TEST

START_TEST(bad_command_lines_are_usage_errors)
{
    static const struct {
        const char *args, *message;
    } cases[] = {
        {"", "unknown command '(none)'"},
        {"fly", "unknown command 'fly'"},
        {"train --bogus 1", "unknown option '--bogus'"},
        {"train --steps", "--steps needs a value"},
        {"train --steps abc", "--steps: 'abc' is not a number"},
        {"train --steps 0", "--steps: '0'"},
        {"train --lr 1e-3x", "--lr: '1e-3x'"},
        {"train --config huge", "unknown 'huge'"},
        {"train --ckpt x", "unknown option '--ckpt' for train"},
        {"sample --steps 3", "unknown option '--steps' for sample"},
        {"sample --prompt hi", "sample needs --ckpt"},
        {"sample --ckpt m --temperature -1", "--temperature: '-1'"},
        {"sample --ckpt m --tokens 1.5", "--tokens: '1.5'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ck_assert_msg(run(cases[i].args) == 2, "gpt %s:\n%s", cases[i].args, output);
        ck_assert_output(cases[i].message);
        ck_assert_output("usage: gpt train");
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("example_gpt");
    TCase *tc = tcase_checked("gpt");
    tcase_add_checked_fixture(tc, make_dir, remove_dir);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, train_on_builtin_task_logs_saves_and_reports_accuracy);
    tcase_add_test(tc, svg_has_axes_labels_and_both_curves);
    tcase_add_test(tc, resumed_run_ends_with_the_same_loss);
    tcase_add_test(tc, train_on_text_file_reports_validation_loss_and_samples);
    tcase_add_test(tc, bad_data_files_are_runtime_errors);
    tcase_add_test(tc, bad_command_lines_are_usage_errors);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
