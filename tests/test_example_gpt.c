/* Runs examples/gpt on tiny settings in a temporary directory: training on
 * the built-in task and on a small text file, sampling from the checkpoint,
 * resuming bit for bit, signals, and the errors a user (or a file) can make. */
#define _GNU_SOURCE /* posix_openpt and its kin, for a pseudo-terminal */
#include "example_gpt_run.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- running gpt in the background, to signal it ---- */

/* Starts `gpt ARGS` in dir with stdout and stderr into dir/log; its pid. */
static pid_t start(const char *args)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cd '%s' && exec '%s/gpt' %s > log 2>&1", dir,
             getenv("TG_EXAMPLES"), args);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return pid;
}

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Waits up to `seconds` for dir/name to hold at least min_size bytes. */
static bool wait_for_file(const char *name, long min_size, double seconds)
{
    for (double end = seconds_now() + seconds; seconds_now() < end; usleep(5000))
        if (file_size(name) >= min_size)
            return true;
    return false;
}

/* Sends sig to pid and waits for it: its exit status, or 128 + the signal
 * that killed it. The log goes into output. */
static int stop(pid_t pid, int sig)
{
    int status;
    ck_assert_int_eq(kill(pid, sig), 0);
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    char path[128];
    snprintf(path, sizeof path, "%s/log", dir);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    output[fread(output, 1, sizeof output - 1, f)] = '\0';
    fclose(f);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* The steps a checkpoint in dir has done (rows of its train.history). */
static int64_t steps_done(const char *name)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    tg_params ck = {0};
    ck_assert_int_eq(tg_safetensors_load(path, &ck), 0);
    tg_tensor *h = tg_params_find(&ck, "train.history");
    ck_assert_ptr_nonnull(h);
    int64_t n = tg_size(h, 0);
    tg_params_clear(&ck);
    return n;
}

/* Resumes `name` until step `at` and runs the same training straight to
 * `at`; both must end on the same loss. straight_args: the original run's. */
static void assert_resumes_bit_for_bit(const char *name, int64_t at, const char *straight_args)
{
    char args[512], resumed[32], straight[32];
    snprintf(args, sizeof args, "train --resume %s --stop-at %lld --out q.st --svg q.svg", name,
             (long long)at);
    ck_assert_int_eq(run(args), 0);
    final_loss(resumed);
    snprintf(args, sizeof args, "train %s --stop-at %lld --out r.st --svg r.svg --save-every 0",
             straight_args, (long long)at);
    ck_assert_int_eq(run(args), 0);
    final_loss(straight);
    ck_assert_str_eq(resumed, straight);
}

/* A symlink dir/name -> target. */
static void make_link(const char *target, const char *name)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    ck_assert_int_eq(symlink(target, path), 0);
}

/* ---- checkpoints with edited values ---- */

static tg_tensor *settings(double steps, double batch, double lr, double task, double eval_every)
{
    return tg_from_data(TG_FLOAT64, 1, SHAPE(5),
                        (const double[]){steps, batch, lr, task, eval_every});
}

static tg_tensor *config(int64_t vocab, int64_t context, int64_t layers, int64_t heads,
                         int64_t width)
{
    return tg_from_data(TG_INT64, 1, SHAPE(5),
                        (const int64_t[]){vocab, context, layers, heads, width});
}

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
    /* A nucleus too small for two characters is the greedy choice; past the
     * context of 16 (5 + 20 characters) the window slides. */
    char greedy[64];
    ck_assert_int_eq(run("sample --ckpt m.safetensors --prompt 12+3= --tokens 20 --greedy"), 0);
    snprintf(greedy, sizeof greedy, "%s", output);
    ck_assert_int_eq(run("sample --ckpt m.safetensors --prompt 12+3= --tokens 20 --top-p 1e-9 "
                         "--temperature 2 --seed 4"), 0);
    ck_assert_str_eq(output, greedy);
    ck_assert_int_eq(run("sample --ckpt m.safetensors --prompt 12+3 --tokens 25 --top-k 5 "
                         "--top-p 0.9 --seed 3"), 0);
    ck_assert_uint_eq(strlen(output), 4 + 25 + 1);
    ck_assert_uint_eq(strspn(output, "0123456789+=\n"), strlen(output));

    ck_assert_int_eq(run("sample --ckpt m.safetensors --prompt 1x2 --tokens 5"), 1);
    ck_assert_output("'x'");
    ck_assert_output("not in the model's vocabulary");
}
END_TEST

/* The loss axis's labels, the texts anchored at their end, into v[]: how
 * many (at most max). */
static int svg_loss_labels(const char *svg, double *v, int max)
{
    int n = 0;
    const char *tag = "text-anchor=\"end\">";
    for (const char *at = strstr(svg, tag); at && n < max; at = strstr(at + 1, tag))
        ck_assert_int_eq(sscanf(at + strlen(tag), "%lf", &v[n++]), 1);
    return n;
}

START_TEST(svg_has_axes_labels_and_both_curves)
{
    ck_assert_int_eq(run("train --config tiny --steps 4 --batch 4 --eval-every 2 --svg c.svg"), 0);
    char final[32];
    final_loss(final);
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
    /* the loss on a log scale: a label at each decade, from one below the
     * last loss to one above it */
    double label[16];
    int n_labels = svg_loss_labels(svg, label, 16);
    ck_assert_int_ge(n_labels, 2);
    for (int i = 0; i < n_labels; i++) {
        double decade = log10(label[i]);
        ck_assert_msg(fabs(decade - round(decade)) < 1e-9, "label %g is not a power of ten:\n%s",
                      label[i], svg);
        if (i)
            ck_assert_double_eq_tol(label[i] / label[i - 1], 10, 1e-9);
    }
    ck_assert_double_le(label[0], atof(final));
    ck_assert_double_ge(label[n_labels - 1], atof(final));
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

/* --precision bf16: said in the header, its own losses, kept by the
 * checkpoint so that a resumed run without the option ends the same. */
START_TEST(bf16_run_is_recorded_and_resumes_bit_for_bit)
{
    char fp32[32], straight[32], resumed[32];
    ck_assert_int_eq(run("train --config tiny --steps 6 --batch 4 --seed 5 --out a.st"), 0);
    ck_assert_output("precision fp32");
    final_loss(fp32);
    ck_assert_int_eq(run("train --config tiny --steps 6 --batch 4 --seed 5 --precision bf16 "
                         "--out b.st"), 0);
    ck_assert_output("precision bf16");
    final_loss(straight);
    ck_assert_str_ne(straight, fp32);
    ck_assert_int_eq(run("train --config tiny --steps 6 --batch 4 --seed 5 --precision bf16 "
                         "--stop-at 3 --out c.st"), 0);
    ck_assert_int_eq(run("train --resume c.st --out d.st"), 0);
    ck_assert_output("precision bf16");
    final_loss(resumed);
    ck_assert_str_eq(straight, resumed);
    ck_assert_int_eq(run("train --arch llama --config tiny --steps 2 --batch 4 --precision bf16 "
                         "--out e.st"), 0);
    ck_assert_output("precision bf16");
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
        {"train --config \"$(printf 'a\\033[2J\\nb')\"", "--config: unknown 'a\\x1b[2J\\nb'"},
        {"train --arch mamba", "--arch: unknown 'mamba' (gpt or llama)"},
        {"train --arch", "--arch needs a value"},
        {"train --precision fp16", "--precision: unknown 'fp16' (fp32 or bf16)"},
        {"sample --ckpt m --precision bf16", "unknown option '--precision' for sample"},
        {"sample --ckpt m --arch llama", "unknown option '--arch' for sample"},
        {"train --ckpt x", "unknown option '--ckpt' for train"},
        {"sample --steps 3", "unknown option '--steps' for sample"},
        {"sample --prompt hi", "sample needs --ckpt"},
        {"sample --ckpt m --temperature -1", "--temperature: '-1'"},
        {"sample --ckpt m --tokens 1.5", "--tokens: '1.5'"},
        {"sample --ckpt m --top-p 1.5", "--top-p: '1.5' is not a number in the allowed range 0..1"},
        {"sample --ckpt m --top-p -0.1", "--top-p: '-0.1'"},
        {"sample --ckpt m --top-p nan", "--top-p: 'nan'"},
        {"sample --ckpt m --top-p", "--top-p needs a value"},
        {"train --top-p 0.9", "unknown option '--top-p' for train"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ck_assert_msg(run(cases[i].args) == 2, "gpt %s:\n%s", cases[i].args, output);
        ck_assert_output(cases[i].message);
        ck_assert_output("usage: gpt train");
    }
}
END_TEST

START_TEST(resume_checks_every_value_of_the_checkpoint_like_the_command_line)
{
    ck_assert_int_eq(run("train --config tiny --steps 4 --batch 4 --stop-at 2 --out base.st "
                         "--svg base.svg"), 0);
    const struct {
        const char *name;
        tg_tensor *value;
        const char *message;
    } cases[] = {
        {"train.settings", settings(4, 4, 1e-3, 1, 0), "--eval-every from bad.st: '0' is not"},
        {"train.settings", settings(1e18, 4, 1e-3, 1, 1), "--steps from bad.st: '1e+18' is not"},
        {"train.settings", settings(NAN, 4, 1e-3, 1, 1), "--steps from bad.st: 'nan' is not"},
        {"train.settings", settings(4, 1e9, 1e-3, 1, 1), "--batch from bad.st: '1000000000'"},
        {"train.settings", settings(4, 0, 1e-3, 1, 1), "--batch from bad.st: '0'"},
        {"train.settings", settings(4, -3, 1e-3, 1, 1), "--batch from bad.st: '-3'"},
        {"train.settings", settings(4, 4, NAN, 1, 1), "--lr from bad.st: 'nan'"},
        {"train.settings", settings(4, 4, 1e-3, 0.5, 1), "task flag"},
        {"train.history", tg_zeros(TG_FLOAT64, 0, NULL), "train.history is float64 with 0 dim"},
        {"train.history", tg_zeros(TG_FLOAT64, 2, SHAPE(3, 2)), "train.history is [3, 2], not [2, 2]"},
        {"train.history", NULL, "it has no train.history"},
        {"train.rng_data", NULL, "its train.rng_data is not usable"},
        {"gpt.config", config(13, 16, 1, 2, 1000000000), "width = 1000000000 is outside 1..16384"},
        {"gpt.config", config(13, 16, 1, 3, 32), "3 heads do not divide its width 32"},
        {"gpt.config", config(14, 16, 1, 2, 32), "gpt.vocab has 13 entries but gpt.config says vocab 14"},
        {"gpt.config", config(13, 0, 1, 2, 32), "context = 0 is outside"},
        {"gpt.config", config(13, 16, 2, 2, 32), "it has no transformer.h.1.ln_1.weight"},
        {"gpt.vocab", tg_zeros(TG_INT64, 1, SHAPE(13)), "gpt.vocab[1] = 0 is a repeat"},
        {"gpt.vocab", ramp(TG_INT64, 1, SHAPE(13), 250, 1), "gpt.vocab[6] = 256 is not a byte"},
        {"transformer.h.0.mlp.c_fc.weight", tg_zeros(TG_FLOAT32, 2, SHAPE(32, 128)),
         "mlp.c_fc.weight is float32 [32, 128]; gpt.config implies float [128, 32]"},
        {"transformer.wte.weight", tg_zeros(TG_INT64, 2, SHAPE(13, 32)), "wte.weight is int64"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_edited("base.st", "bad.st", cases[i].name, cases[i].value);
        int status = run("train --resume bad.st --out o.st --svg o.svg");
        ck_assert_msg(status == 1 || status == 2, "case %zu: exit %d:\n%s", i, status, output);
        ck_assert_msg(strstr(output, cases[i].message), "case %zu: no '%s' in:\n%s", i,
                      cases[i].message, output);
        ck_assert_msg(!strstr(output, "step 3/"), "case %zu trained:\n%s", i, output);
    }
    /* sample --ckpt checks the model part the same way */
    write_edited("base.st", "bad.st", "gpt.config", config(13, 16, 1, 2, 1000000000));
    ck_assert_int_eq(run("sample --ckpt bad.st --tokens 3"), 1);
    ck_assert_output("width = 1000000000 is outside");
    ck_assert_int_eq(file_size("o.st"), -1);
}
END_TEST

START_TEST(outputs_that_are_inputs_or_each_other_are_refused)
{
    write_file("t.txt", text, sizeof text - 1);
    ck_assert_int_eq(run("train --config tiny --steps 2 --batch 4 --out b.st --svg b.svg"), 0);
    make_link("t.txt", "link.txt");
    make_link("new.svg", "dangling"); /* a save follows it, so it is new.svg */
    static const struct {
        const char *args, *message;
    } cases[] = {
        {"--data t.txt --out t.txt", "--out t.txt is the same file as --data t.txt"},
        {"--data t.txt --out link.txt", "--out link.txt is the same file as --data t.txt"},
        {"--out new.st --svg ./new.st", "--out new.st is the same file as --svg ./new.st"},
        {"--out b.st --svg b.st", "--out b.st is the same file as --svg b.st"},
        {"--data t.txt --svg ./t.txt", "--svg ./t.txt is the same file as --data t.txt"},
        {"--resume b.st --svg b.st --out c.st", "--svg b.st is the same file as --resume b.st"},
        {"--out dangling --svg new.svg", "--out dangling is the same file as --svg new.svg"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[256];
        snprintf(args, sizeof args, "train --config tiny --steps 2 --batch 4 %s", cases[i].args);
        ck_assert_msg(run(args) == 2, "gpt %s:\n%s", args, output);
        ck_assert_output(cases[i].message);
        ck_assert_output("usage: gpt train");
    }
    ck_assert_int_eq(file_size("t.txt"), (long)sizeof text - 1);
    ck_assert_int_eq(file_size("new.st"), -1);
    ck_assert_int_eq(file_size("new.svg"), -1);
    /* resuming into the checkpoint it came from is the normal way to go on */
    ck_assert_int_eq(run("train --resume b.st --steps 3 --out b.st --svg b.svg"), 0);
    ck_assert_output("step 3/3");
}
END_TEST

START_TEST(unwritable_outputs_are_refused_before_training)
{
    write_file("t.txt", text, sizeof text - 1);
    make_link("nodir/x.st", "broken");
    char sub[128];
    snprintf(sub, sizeof sub, "%s/sub", dir);
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    static const struct {
        const char *args, *message;
    } cases[] = {
        {"--out nodir/m.st", "cannot write --out nodir/m.st"},
        {"--svg nodir/c.svg", "cannot write --svg nodir/c.svg"},
        {"--out t.txt/m.st", "cannot write --out t.txt/m.st"},
        {"--out .", "cannot write --out .: tg_safetensors_check_writable: .: names a directory"},
        {"--svg sub", "cannot write --svg sub: tg_path_check_writable: sub: is a directory"},
        {"--out broken", "cannot write --out broken"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[256];
        snprintf(args, sizeof args, "train --config tiny --steps 2 --batch 4 %s", cases[i].args);
        ck_assert_msg(run(args) == 1, "gpt %s:\n%s", args, output);
        ck_assert_output(cases[i].message);
        ck_assert_msg(!strstr(output, "step 1/"), "gpt %s trained:\n%s", args, output);
    }
}
END_TEST

START_TEST(periodic_checkpoint_of_a_killed_run_resumes_bit_for_bit)
{
    const char *run_args = "--config tiny --batch 4 --steps 100000 --seed 7";
    char args[256];
    snprintf(args, sizeof args, "train %s --save-every 3 --out p.st --svg p.svg", run_args);
    pid_t pid = start(args);
    bool saved = wait_for_file("p.st", 1000, 60);
    ck_assert_int_eq(stop(pid, SIGKILL), 128 + SIGKILL);
    ck_assert_msg(saved, "no checkpoint appeared:\n%s", output);
    int64_t done = steps_done("p.st"); /* a periodic save: the kill left no other */
    ck_assert_int_ge(done, 3);
    ck_assert_int_eq(done % 3, 0);
    assert_resumes_bit_for_bit("p.st", done + 2, run_args);
}
END_TEST

START_TEST(sigterm_saves_a_resumable_checkpoint_and_exits_143)
{
    const char *run_args = "--config tiny --batch 4 --steps 100000 --seed 8";
    char args[256];
    snprintf(args, sizeof args, "train %s --save-every 4 --out p.st --svg p.svg", run_args);
    pid_t pid = start(args);
    bool saved = wait_for_file("p.st", 1000, 60);
    ck_assert_int_eq(stop(pid, SIGTERM), 143);
    ck_assert_msg(saved, "no checkpoint appeared:\n%s", output);
    ck_assert_output("by SIGTERM; continue with --resume p.st");
    ck_assert_output("saved p.st at step 4\n");
    const char *at = strstr(output, "stopped at step ");
    ck_assert_ptr_nonnull(at);
    long long stopped = atoll(at + strlen("stopped at step "));
    ck_assert_int_eq(steps_done("p.st"), stopped); /* saved at the stop, not only every 4 */
    assert_resumes_bit_for_bit("p.st", stopped + 2, run_args);

    pid = start("train --config tiny --batch 4 --steps 100000 --save-every 2 --out i.st "
                "--svg i.svg");
    saved = wait_for_file("i.st", 1000, 60);
    ck_assert_int_eq(stop(pid, SIGINT), 130);
    ck_assert(saved);
    ck_assert_output("by SIGINT; continue with --resume i.st");
}
END_TEST

/* sig is pending for pid's process (not yet taken by a thread). */
static bool signal_pending(pid_t pid, int sig)
{
    char path[64], line[128];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    unsigned long long mask = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "ShdPnd: %llx", &mask) == 1)
            break;
    if (f)
        fclose(f);
    return mask >> (sig - 1) & 1;
}

/* A Ctrl-C that reaches the program and then its launcher's SIGTERM (as when
 * a launcher shares the terminal's process group): the first signal is the
 * one reported, and the second does not cut the save short. */
START_TEST(first_of_two_signals_is_reported_and_the_run_still_saves)
{
    pid_t pid = start("train --batch 64 --steps 100000 --save-every 2 --out s.st --svg s.svg");
    bool saved = wait_for_file("s.st", 1000, 60);
    ck_assert_int_eq(kill(pid, SIGINT), 0);
    for (double end = seconds_now() + 5; signal_pending(pid, SIGINT) && seconds_now() < end;)
        usleep(1000);
    ck_assert_int_eq(stop(pid, SIGTERM), 130);
    ck_assert(saved);
    ck_assert_output("by SIGINT; continue with --resume s.st");
}
END_TEST

START_TEST(data_files_too_large_or_endless_are_refused_at_once)
{
    char path[128];
    snprintf(path, sizeof path, "%s/huge.txt", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(ftruncate(fileno(f), (off_t)2 << 30), 0); /* sparse: no disk used */
    fclose(f);
    double t0 = seconds_now();
    ck_assert_int_eq(run("train --data huge.txt --config tiny --steps 2"), 1);
    ck_assert_output("it is larger than 1 GiB");
    ck_assert_output("--data takes a text file of 1 GiB at most");
    ck_assert_int_eq(run("train --data /dev/zero --config tiny --steps 2"), 1);
    ck_assert_output("NUL");
    ck_assert_msg(seconds_now() - t0 < 10, "took %.1f s", seconds_now() - t0);
}
END_TEST

START_TEST(sample_prints_tokens_as_they_are_made)
{
    ck_assert_int_eq(run("train --config tiny --steps 2 --batch 4 --out m.st --svg m.svg"), 0);
    pid_t pid = start("sample --ckpt m.st --prompt 12 --tokens 1000000");
    bool streamed = wait_for_file("log", 200, 30);
    ck_assert_int_eq(stop(pid, SIGKILL), 128 + SIGKILL);
    ck_assert_msg(streamed, "nothing printed while sampling:\n%s", output);
    ck_assert(strncmp(output, "12", 2) == 0);
    ck_assert_uint_eq(strspn(output, "0123456789+=\n"), strlen(output));
}
END_TEST

START_TEST(training_on_far_too_little_text_warns_first)
{
    write_file("small.txt", text, 100);
    ck_assert_int_eq(run("train --data small.txt --config tiny --batch 4 --steps 100000 "
                         "--stop-at 1 --out s.st --svg s.svg"), 0);
    ck_assert_output("gpt: warning: the run reads 6400000 characters, 71111 times the 90 of "
                     "the training split");
    ck_assert_int_eq(run("train --data t.txt --config tiny --steps 2 --batch 4 --out s.st "
                         "--svg s.svg"), 1); /* missing file: no warning either way */
    write_file("t.txt", text, sizeof text - 1);
    ck_assert_int_eq(run("train --data t.txt --config tiny --steps 2 --batch 4 --out s.st "
                         "--svg s.svg"), 0);
    ck_assert(!strstr(output, "warning"));
}
END_TEST

START_TEST(control_characters_of_a_prompt_are_escaped_in_messages)
{
    ck_assert_int_eq(run("train --config tiny --steps 2 --batch 4 --out m.st --svg m.svg"), 0);
    ck_assert_int_eq(run("sample --ckpt m.st --prompt \"$(printf '1\\0012')\""), 1);
    ck_assert_output("character '\\x01' (byte 1, at 1)");
    ck_assert_int_eq(run("sample --ckpt m.st --prompt \"$(printf 'x\\n2')\""), 1);
    ck_assert_output("character 'x' (byte 120, at 0)");
    ck_assert_int_eq(run("sample --ckpt m.st --prompt \"$(printf '1+\\n2')\""), 0); /* \n is in */
    ck_assert_int_eq(run("sample --ckpt m.st --prompt \"$(printf '1+\\t2')\""), 1);
    ck_assert_output("character '\\t' (byte 9, at 2)");
    ck_assert(!strstr(output, "'\t'"));
    ck_assert_int_eq(run("train --steps \"$(printf '1\\n2')\""), 2);
    ck_assert_output("--steps: '1\\n2' is not a number");
}
END_TEST

START_TEST(help_prints_the_usage_and_succeeds)
{
    static const char *const cases[] = {"--help", "-h", "help", "train --help",
                                        "sample --help", "train --steps 3 -h"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ck_assert_msg(run(cases[i]) == 0, "gpt %s:\n%s", cases[i], output);
        ck_assert_output("usage: gpt train");
        ck_assert_output("--save-every");
    }
}
END_TEST

START_TEST(config_given_with_resume_must_be_the_checkpoints_shape)
{
    ck_assert_int_eq(run("train --config tiny --steps 4 --batch 4 --stop-at 2 --out c.st "
                         "--svg c.svg"), 0);
    ck_assert_int_eq(run("train --resume c.st --config task --out o.st --svg o.svg"), 1);
    ck_assert_output("c.st does not have the shape of --config task; resume it without --config");
    ck_assert(!strstr(output, "step 3/"));
    ck_assert_int_eq(run("train --resume c.st --config tiny --out o.st --svg o.svg"), 0);
    ck_assert_output("final: step 4 ");
}
END_TEST

/* Runs `ENV gpt ARGS` in dir with stdout and stderr on a pseudo-terminal, as
 * mpirun gives its ranks; what it wrote into output. */
static void run_on_terminal(const char *env, const char *args)
{
    int master = posix_openpt(O_RDWR | O_NOCTTY);
    ck_assert_int_ge(master, 0);
    ck_assert_int_eq(grantpt(master), 0);
    ck_assert_int_eq(unlockpt(master), 0);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cd '%s' && exec env %s '%s/gpt' %s", dir, env,
             getenv("TG_EXAMPLES"), args);
    const char *slave_name = ptsname(master);
    ck_assert_ptr_nonnull(slave_name);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int slave = open(slave_name, O_RDWR);
        if (slave < 0 || dup2(slave, 1) < 0 || dup2(slave, 2) < 0)
            _exit(127);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    size_t n = 0;
    for (ssize_t got; n + 1 < sizeof output && (got = read(master, output + n,
                                                           sizeof output - 1 - n)) > 0;)
        n += (size_t)got; /* ends with EIO once the program has exited */
    output[n] = '\0';
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    close(master);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "gpt %s:\n%s", args, output);
}

START_TEST(progress_under_an_mpi_launcher_is_plain_lines)
{
    const char *args = "train --config tiny --steps 6 --batch 4 --out t.st --svg t.svg";
    run_on_terminal("", args); /* a terminal: one line that redraws itself */
    ck_assert_output("\033[K");
    /* MPICH's and Slurm's marks; Open MPI's and PMIx's make gpt join an MPI
     * job, which test_dist_gpt runs under mpiexec */
    static const char *const launchers[] = {"PMI_RANK=0", "SLURM_PROCID=0"};
    for (size_t i = 0; i < sizeof launchers / sizeof launchers[0]; i++) {
        run_on_terminal(launchers[i], args);
        ck_assert_output("step 6/6");
        /* the terminal turns each \n into \r\n; no other \r, and no escapes */
        for (const char *c = output; (c = strchr(c, '\r')) != NULL; c++)
            ck_assert_msg(c[1] == '\n', "%s: a carriage return in:\n%s", launchers[i], output);
        ck_assert_msg(!strchr(output, '\033'), "%s: escapes in:\n%s", launchers[i], output);
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
    tcase_add_test(tc, bf16_run_is_recorded_and_resumes_bit_for_bit);
    tcase_add_test(tc, train_on_text_file_reports_validation_loss_and_samples);
    tcase_add_test(tc, bad_data_files_are_runtime_errors);
    tcase_add_test(tc, bad_command_lines_are_usage_errors);
    tcase_add_test(tc, resume_checks_every_value_of_the_checkpoint_like_the_command_line);
    tcase_add_test(tc, outputs_that_are_inputs_or_each_other_are_refused);
    tcase_add_test(tc, unwritable_outputs_are_refused_before_training);
    tcase_add_test(tc, periodic_checkpoint_of_a_killed_run_resumes_bit_for_bit);
    tcase_add_test(tc, sigterm_saves_a_resumable_checkpoint_and_exits_143);
    tcase_add_test(tc, first_of_two_signals_is_reported_and_the_run_still_saves);
    tcase_add_test(tc, data_files_too_large_or_endless_are_refused_at_once);
    tcase_add_test(tc, sample_prints_tokens_as_they_are_made);
    tcase_add_test(tc, training_on_far_too_little_text_warns_first);
    tcase_add_test(tc, control_characters_of_a_prompt_are_escaped_in_messages);
    tcase_add_test(tc, help_prints_the_usage_and_succeeds);
    tcase_add_test(tc, config_given_with_resume_must_be_the_checkpoints_shape);
    tcase_add_test(tc, progress_under_an_mpi_launcher_is_plain_lines);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
