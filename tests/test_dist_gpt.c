/* Runs examples/gpt data-parallel under mpiexec (TG_MPIEXEC) on tiny
 * settings: checkpoints that move between world sizes, resuming bit for bit,
 * one rank's bad input ending the whole job, ranks started differently
 * refusing at once, validation at any world size, the plain lines ranks
 * print, signals through mpiexec, and agreement with one process. */
#include "testutil.h"

#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char dir[64];
static char output[1 << 17];

/* The end of output, short enough for a Check message. */
static const char *tail(void)
{
    size_t n = strlen(output);
    return n > 3000 ? output + n - 3000 : output;
}

/* Runs `mpiexec -np NP gpt ARGS` in dir (np 0: gpt alone, no mpiexec), with
 * stdout and stderr in output, and a minute's limit; the exit status. */
static int run_np(int np, const char *args)
{
    const char *mpiexec = getenv("TG_MPIEXEC"), *bin = getenv("TG_EXAMPLES");
    ck_assert_msg(mpiexec && bin, "TG_MPIEXEC and TG_EXAMPLES must be set");
    char cmd[2048];
    if (np > 0)
        snprintf(cmd, sizeof cmd, "cd '%s' && timeout 120 '%s' --bind-to none -np %d '%s/gpt' %s 2>&1",
                 dir, mpiexec, np, bin, args);
    else
        snprintf(cmd, sizeof cmd, "cd '%s' && timeout 120 '%s/gpt' %s 2>&1", dir, bin, args);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t n = fread(output, 1, sizeof output - 1, p);
    output[n] = '\0';
    int status = pclose(p);
    ck_assert_msg(WIFEXITED(status), "gpt %s did not exit:\n%s", args, tail());
    ck_assert_msg(WEXITSTATUS(status) != 124, "gpt %s timed out:\n%s", args, tail());
    /* gpt's own count; under AddressSanitizer a leak exits 23, which fails the
     * runs that must succeed (in a job that ends on a failed rank, mpiexec can
     * stop a rank inside MPI_Finalize, and LeakSanitizer then reports what
     * MPI's unloaded plugins held, with no module to suppress by) */
    ck_assert_msg(!strstr(output, "tensors leaked"), "%s", tail());
    return WEXITSTATUS(status);
}

#define ck_assert_output(fragment) \
    ck_assert_msg(strstr(output, fragment) != NULL, "no '%s' in:\n%s", fragment, tail())

/* The loss and validation loss of the "final:" line. */
static void final_losses(double *loss, double *val)
{
    const char *at = strstr(output, "final: step");
    ck_assert_msg(at != NULL, "no final line in:\n%s", tail());
    ck_assert_int_eq(sscanf(at, "final: step %*d loss %lf val %lf", loss, val), 2);
}

/* The files dir/a and dir/b hold the same bytes. */
static bool same_bytes(const char *a, const char *b)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "cmp -s '%s/%s' '%s/%s'", dir, a, dir, b);
    return system(cmd) == 0;
}

/* dir/name (one buffer, rewritten by the next call). */
static const char *in_dir(const char *name)
{
    static char path[160];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

static void make_dir(void)
{
    make_temp_dir(dir, sizeof dir, "tg_dist_gpt");
}

static void remove_dir(void)
{
    remove_temp_dir(dir);
}

/* 12 steps of the addition task, 8 problems per step in all. */
#define TASK "train --steps 12 --save-every 0 --svg l.svg"

START_TEST(one_rank_under_mpiexec_saves_the_bits_of_a_plain_run)
{
    ck_assert_int_eq(run_np(0, TASK " --batch 8 --out plain.st"), 0);
    ck_assert_int_eq(run_np(1, TASK " --batch 8 --out one.st"), 0);
    ck_assert_msg(same_bytes("plain.st", "one.st"), "one rank trained other bits than gpt alone");
}
END_TEST

START_TEST(two_ranks_train_like_one_process_on_the_combined_batch)
{
    double loss1, val1, loss2, val2;
    ck_assert_int_eq(run_np(0, TASK " --batch 8 --out one.st"), 0);
    final_losses(&loss1, &val1);
    ck_assert_int_eq(run_np(2, TASK " --batch 4 --out two.st"), 0);
    ck_assert_output("data-parallel over 2 ranks: batch 4 per rank, 8 combined");
    ck_assert_output("communication per step");
    final_losses(&loss2, &val2);
    /* float32 gradients summed in another order: close, not equal */
    ck_assert_double_eq_tol(loss1, loss2, 1e-3);
    ck_assert_double_eq_tol(val1, val2, 1e-3);
}
END_TEST

/* Stopped at step 6 and resumed at the same world size: the checkpoint is
 * the uninterrupted run's, byte for byte (weights, moments, history, rng). */
static void assert_resumes_bit_for_bit(int np, const char *extra)
{
    char args[512];
    snprintf(args, sizeof args, TASK " --batch 2 --out full.st %s", extra);
    ck_assert_int_eq(run_np(np, args), 0);
    snprintf(args, sizeof args, TASK " --batch 2 --out half.st --stop-at 6 %s", extra);
    ck_assert_int_eq(run_np(np, args), 0);
    ck_assert_output("stopped at step 6 of 12");
    snprintf(args, sizeof args, "train --resume half.st --out rest.st --svg l.svg %s", extra);
    ck_assert_int_eq(run_np(np, args), 0);
    ck_assert_output("resumed");
    ck_assert_msg(same_bytes("full.st", "rest.st"), "%d ranks %s: resumed run differs", np, extra);
}

START_TEST(resume_at_the_same_world_size_is_bit_for_bit)
{
    assert_resumes_bit_for_bit(2, "");
}
END_TEST

START_TEST(sharded_optimizer_resumes_bit_for_bit)
{
    assert_resumes_bit_for_bit(2, "--zero1");
}
END_TEST

/* A checkpoint of 4 ranks (batch 2 each: 8 combined) taken up by 2 ranks,
 * by 1 rank and by gpt alone: each takes its share of the combined batch and
 * ends where the 4 ranks would have, within float32's reordering. */
static void assert_moves_between_world_sizes(const char *extra)
{
    double loss4, val4, loss, val;
    char args[512];
    snprintf(args, sizeof args, TASK " --batch 2 --out full.st %s", extra);
    ck_assert_int_eq(run_np(4, args), 0);
    final_losses(&loss4, &val4);
    snprintf(args, sizeof args, TASK " --batch 2 --out four.st --stop-at 6 %s", extra);
    ck_assert_int_eq(run_np(4, args), 0);
    const int worlds[] = {2, 1, 0};
    for (int i = 0; i < 3; i++) {
        snprintf(args, sizeof args, "train --resume four.st --out r.st --svg l.svg %s", extra);
        ck_assert_int_eq(run_np(worlds[i], args), 0);
        if (worlds[i] == 2)
            ck_assert_output("batch 4 per rank, 8 combined");
        else
            ck_assert_output("batch 8, steps 12, precision fp32, resumed");
        final_losses(&loss, &val);
        ck_assert_msg(fabs(loss - loss4) < 1e-3 && fabs(val - val4) < 1e-3,
                      "at %d ranks: loss %g val %g, 4 ranks: %g %g", worlds[i], loss, val, loss4,
                      val4);
    }
}

START_TEST(checkpoint_of_4_ranks_resumes_at_2_at_1_and_alone)
{
    assert_moves_between_world_sizes("");
}
END_TEST

START_TEST(sharded_checkpoint_of_4_ranks_resumes_at_2_at_1_and_alone)
{
    assert_moves_between_world_sizes("--zero1");
}
END_TEST

START_TEST(combined_batch_that_ranks_cannot_share_asks_for_batch)
{
    ck_assert_int_eq(run_np(0, TASK " --batch 3 --out three.st"), 0);
    ck_assert_int_eq(run_np(2, "train --resume three.st --out r.st --svg l.svg"), 1);
    ck_assert_output("combined batch of 3, which 2 ranks cannot share evenly; give --batch");
}
END_TEST

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* `mpiexec ARGS` fails, and soon (no rank waits for a partner that gave up):
 * every rank ends, each saying why, the failing one its own message, the
 * others which rank failed. */
static void assert_every_rank_stops(const char *args, const char *why)
{
    double started = seconds_now();
    ck_assert_int_ne(run_np(1, args), 0);
    ck_assert_msg(seconds_now() - started < 30, "the job took %.0f s to end:\n%s",
                  seconds_now() - started, tail());
    ck_assert_output(why);
    ck_assert_output("gpt: rank 0 stops: rank 1 failed");
}

START_TEST(data_file_missing_on_one_rank_ends_every_rank)
{
    FILE *f = fopen(in_dir("t.txt"), "w");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < 200; i++)
        fputs("the quick brown fox jumps over the lazy dog\n", f);
    fclose(f);
    /* rank 0 reads t.txt, rank 1 (the second program) a file that is not there */
    char args[512];
    snprintf(args, sizeof args, "train --data t.txt --steps 4 --config tiny --out o.st --svg l.svg "
             ": -np 1 %s/gpt train --data gone.txt --steps 4 --config tiny --out o.st --svg l.svg",
             getenv("TG_EXAMPLES"));
    assert_every_rank_stops(args, "gone.txt");
    ck_assert_msg(access(in_dir("o.st"), F_OK) != 0,
                  "a checkpoint was written:\n%s", tail());
}
END_TEST

START_TEST(bad_checkpoint_on_one_rank_ends_every_rank)
{
    ck_assert_int_eq(run_np(0, TASK " --batch 2 --stop-at 3 --out good.st"), 0);
    FILE *f = fopen(in_dir("bad.st"), "w");
    ck_assert_ptr_nonnull(f);
    fputs("not a checkpoint", f);
    fclose(f);
    char args[512];
    snprintf(args, sizeof args, "train --resume good.st --out o.st --svg l.svg "
             ": -np 1 %s/gpt train --resume bad.st --out o.st --svg l.svg", getenv("TG_EXAMPLES"));
    assert_every_rank_stops(args, "bad.st");
}
END_TEST

/* ---- ranks started differently ---- */

/* Runs rank 0 with `gpt train COMMON A` and rank 1 with `gpt train COMMON
 * B` (mpiexec's MPMD form); the exit status, within 30 s. */
static int run_two(const char *common, const char *a, const char *b)
{
    char args[1024];
    snprintf(args, sizeof args, "train %s %s : -np 1 %s/gpt train %s %s", common, a,
             getenv("TG_EXAMPLES"), common, b);
    double started = seconds_now();
    int rc = run_np(1, args);
    ck_assert_msg(seconds_now() - started < 30, "the job took %.0f s to end:\n%s",
                  seconds_now() - started, tail());
    return rc;
}

/* How often fragment occurs in output. */
static int occurrences(const char *fragment)
{
    int n = 0;
    for (const char *at = output; (at = strstr(at, fragment)) != NULL; at++)
        n++;
    return n;
}

/* Different options hang (--zero1, --save-every with --zero1, --stop-at on
 * one rank), abort (--steps) or train replicas that disagree (--lr, --seed,
 * --precision, --batch): every rank refuses before the first step, naming
 * the option and both values, and the job exits 2. */
START_TEST(ranks_started_with_different_options_refuse_at_once)
{
    static const struct {
        const char *a, *b, *message;
    } cases[] = {
        {"--lr 0.001", "--lr 0.002", "--lr differs between ranks: rank 0 has 0.001, rank 1 has 0.002"},
        {"--seed 1", "--seed 2", "--seed differs between ranks: rank 0 has 1, rank 1 has 2"},
        {"--precision bf16", "", "--precision differs between ranks: rank 0 has bf16, rank 1 has (not given)"},
        {"--zero1", "", "--zero1 differs between ranks: rank 0 has on, rank 1 has off"},
        {"--zero1 --save-every 2", "--zero1 --save-every 3", "--save-every differs between ranks: rank 0 has 2, rank 1 has 3"},
        {"", "--stop-at 2", "--stop-at differs between ranks: rank 0 has 0, rank 1 has 2"},
        {"--steps 4", "--steps 5", "--steps differs between ranks: rank 0 has 4, rank 1 has 5"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = run_two("--config tiny --batch 2 --steps 4 --out o.st --svg l.svg", cases[i].a,
                         cases[i].b);
        ck_assert_msg(rc == 2, "%s / %s: exit %d:\n%s", cases[i].a, cases[i].b, rc, tail());
        ck_assert_msg(occurrences(cases[i].message) == 2, "not on both ranks: '%s' in:\n%s",
                      cases[i].message, tail());
        ck_assert_msg(!strstr(output, "step 1/"), "trained:\n%s", tail());
    }
    ck_assert_msg(access(in_dir("o.st"), F_OK) != 0, "a checkpoint was written");
}
END_TEST

/* Writes n characters of text drawn from seed to dir/name. */
static void write_text(const char *name, int n, unsigned seed)
{
    FILE *f = fopen(in_dir(name), "w");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        fputc("abcdefgh \n"[(seed >> 16) % 10], f);
    }
    fclose(f);
}

START_TEST(ranks_reading_different_data_or_checkpoints_refuse_at_once)
{
    write_text("a.txt", 3000, 1);
    write_text("b.txt", 3000, 2);
    const char *common = "--config tiny --batch 2 --steps 4 --out o.st --svg l.svg";
    ck_assert_int_eq(run_two(common, "--data a.txt", "--data b.txt"), 2);
    ck_assert_output("--data differs between ranks: rank 0 has a text of 3000 characters, digest ");
    ck_assert_int_eq(occurrences("--data differs"), 2);
    write_text("c.txt", 3000, 1); /* a.txt under another name: the same input */
    ck_assert_int_eq(run_two(common, "--data a.txt", "--data c.txt"), 0);
    ck_assert_int_eq(run_np(0, "train --data a.txt --config tiny --batch 2 --steps 4 --stop-at 2 "
                               "--out s2.st --svg l.svg"), 0);
    ck_assert_int_eq(run_np(0, "train --data a.txt --config tiny --batch 2 --steps 4 --stop-at 3 "
                               "--out s3.st --svg l.svg"), 0);
    ck_assert_int_eq(run_two("--data a.txt --out o.st --svg l.svg", "--resume s2.st",
                             "--resume s3.st"), 2);
    ck_assert_output("--resume differs between ranks: rank 0 has a checkpoint at step 2, digest ");
    ck_assert_output("rank 1 has a checkpoint at step 3, digest ");
}
END_TEST

/* ---- validation ---- */

START_TEST(validation_loss_does_not_depend_on_the_world_size)
{
    write_text("v.txt", 3000, 3);
    /* stopped at step 6, whose validation loss was not measured */
    ck_assert_int_eq(run_np(0, "train --data v.txt --config tiny --batch 8 --steps 12 "
                               "--eval-every 5 --stop-at 6 --out v.st --svg l.svg"), 0);
    const int worlds[] = {0, 2, 4};
    double loss, val[3];
    for (int i = 0; i < 3; i++) {
        /* nothing trained: the final line measures the checkpoint's parameters */
        ck_assert_int_eq(run_np(worlds[i], "train --data v.txt --resume v.st --stop-at 6 "
                                           "--out r.st --svg l.svg"), 0);
        final_losses(&loss, &val[i]);
    }
    ck_assert_msg(fabs(val[1] - val[0]) <= 2e-6 && fabs(val[2] - val[0]) <= 2e-6,
                  "val %.6f alone, %.6f at 2 ranks, %.6f at 4", val[0], val[1], val[2]);
}
END_TEST

/* ---- what a rank writes ---- */

START_TEST(ranks_under_mpiexec_print_plain_lines)
{
    ck_assert_int_eq(run_np(1, TASK " --batch 2 --eval-every 1 --out p.st"), 0);
    ck_assert_output("step 12/12");
    ck_assert_msg(!strchr(output, '\r') && !strchr(output, '\033'),
                  "carriage returns or escapes in:\n%s", tail());
}
END_TEST

/* ---- signals ---- */

static pid_t job;

/* Starts `mpiexec -np 2 gpt ARGS` in dir, in a process group of its own,
 * with its output in dir/log; returns once rank 0 printed step 3. mpiexec
 * gives the ranks 3 s from its SIGTERM to its SIGKILL (1 s by default), so
 * that a loaded machine has the time to finish a step and save. */
static void start_job(const char *args)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cd '%s' && exec '%s' --mca odls_base_sigkill_timeout 3 --bind-to "
             "none -np 2 '%s/gpt' %s > log 2>&1", dir, getenv("TG_MPIEXEC"),
             getenv("TG_EXAMPLES"), args);
    unlink(in_dir("log")); /* the last job's log has a step 3 too */
    job = fork();
    ck_assert_int_ge(job, 0);
    if (job == 0) {
        setpgid(0, 0);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    setpgid(job, job);
    for (double end = seconds_now() + 60; seconds_now() < end; usleep(20000)) {
        FILE *f = fopen(in_dir("log"), "r");
        size_t n = f ? fread(output, 1, sizeof output - 1, f) : 0;
        output[n] = '\0';
        if (f)
            fclose(f);
        if (strstr(output, "step 3/"))
            return;
    }
    kill(-job, SIGKILL);
    waitpid(job, NULL, 0);
    ck_abort_msg("the job printed no step 3:\n%s", tail());
}

/* Waits up to a minute for the job: its exit status, the log in output. */
static int wait_job(void)
{
    int status = 0;
    for (double end = seconds_now() + 60; waitpid(job, &status, WNOHANG) == 0; usleep(20000))
        if (seconds_now() > end) {
            kill(-job, SIGKILL);
            waitpid(job, &status, 0);
            ck_abort_msg("the job did not end");
        }
    FILE *f = fopen(in_dir("log"), "r");
    ck_assert_ptr_nonnull(f);
    /* the log's end, where the stopped line is: a fast job's lines outgrow output */
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, size > (long)sizeof output - 1 ? size - (long)sizeof output + 1 : 0, SEEK_SET);
    output[fread(output, 1, sizeof output - 1, f)] = '\0';
    fclose(f);
    ck_assert_msg(WIFEXITED(status), "mpiexec was killed by signal %d:\n%s", WTERMSIG(status), tail());
    return WEXITSTATUS(status);
}

/* The step of "stopped at step N of", and dir/name holds that many steps. */
static void assert_saved_at_the_stop(const char *name)
{
    const char *at = strstr(output, "stopped at step ");
    ck_assert_msg(at != NULL, "no stopped line:\n%s", tail());
    long long stopped = atoll(at + strlen("stopped at step "));
    tg_params ck = {0};
    ck_assert_msg(tg_safetensors_load(in_dir(name), &ck) == 0, "%s:\n%s", tg_error_message(), tail());
    tg_tensor *history = tg_params_find(&ck, "train.history");
    ck_assert_ptr_nonnull(history);
    ck_assert_int_eq(tg_size(history, 0), stopped);
    tg_params_clear(&ck);
}

/* After a signal to mpiexec itself: mpiexec stops reading the ranks'
 * output as it winds the job down, and they write no more of it, so the
 * stopped line may not reach the log. Where it came through it names the
 * launcher and the step saved; either way dir/name holds at least the steps
 * the log shows. */
static void assert_saved_after_the_launcher_stopped(const char *name, const char *said)
{
    if (strstr(output, "stopped at step ")) {
        ck_assert_output(said);
        assert_saved_at_the_stop(name);
        return;
    }
    long long shown = 0;
    for (const char *at = output; (at = strstr(at, "step ")) != NULL; at += 5)
        if (at[5] >= '1' && at[5] <= '9' && strchr(at, '/'))
            shown = atoll(at + 5) > shown ? atoll(at + 5) : shown;
    tg_params ck = {0};
    ck_assert_msg(tg_safetensors_load(in_dir(name), &ck) == 0, "%s:\n%s", tg_error_message(), tail());
    tg_tensor *history = tg_params_find(&ck, "train.history");
    ck_assert_ptr_nonnull(history);
    ck_assert_msg(tg_size(history, 0) >= shown, "saved %lld steps, the log shows %lld",
                  (long long)tg_size(history, 0), shown);
    tg_params_clear(&ck);
}

/* The pid of one of mpiexec's ranks (a child of job named gpt). */
static pid_t a_rank(void)
{
    DIR *proc = opendir("/proc");
    ck_assert_ptr_nonnull(proc);
    pid_t found = 0;
    for (struct dirent *e; !found && (e = readdir(proc)) != NULL;) {
        char path[300], comm[64];
        int ppid = 0;
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (f && fscanf(f, "%*d (%63[^)]) %*c %d", comm, &ppid) == 2 && ppid == job &&
            !strcmp(comm, "gpt"))
            found = (pid_t)atoi(e->d_name);
        if (f)
            fclose(f);
    }
    closedir(proc);
    ck_assert_msg(found > 0, "no rank found");
    return found;
}

#define SIGNALLED "train --config tiny --batch 2 --steps 100000 --eval-every 1 --save-every 0 --svg l.svg"

/* A Ctrl-C (SIGINT to the process group) or SIGTERM to mpiexec: Open MPI's
 * mpiexec sends its ranks SIGTERM a second later and exits 1 whatever they
 * do; in that second the ranks save, their output sent to /dev/null since
 * mpiexec no longer reads it (a rank blocked writing a line would never
 * save). */
START_TEST(signal_to_mpiexec_saves_the_job)
{
    start_job(SIGNALLED " --out t.st");
    ck_assert_int_eq(kill(job, SIGTERM), 0);
    ck_assert_int_eq(wait_job(), 1);
    assert_saved_after_the_launcher_stopped("t.st", "by SIGTERM from the MPI launcher; continue with --resume t.st");

    start_job(SIGNALLED " --zero1 --out i.st");
    ck_assert_int_eq(kill(-job, SIGINT), 0);
    ck_assert_int_eq(wait_job(), 1);
    assert_saved_after_the_launcher_stopped("i.st", "by SIGTERM from the MPI launcher; continue with --resume i.st");
}
END_TEST

/* A signal to one rank stops every rank at the same step; the job exits with
 * the signal's code (130, 143); SIGUSR1, which mpiexec passes on to every
 * rank, stops the job the same way with 138. */
START_TEST(signal_to_a_rank_or_sigusr1_to_mpiexec_stops_the_job_with_its_code)
{
    start_job(SIGNALLED " --out r.st");
    ck_assert_int_eq(kill(a_rank(), SIGINT), 0);
    ck_assert_int_eq(wait_job(), 130);
    ck_assert_output("by SIGINT; continue with --resume r.st");
    assert_saved_at_the_stop("r.st");

    start_job(SIGNALLED " --zero1 --out u.st");
    ck_assert_int_eq(kill(job, SIGUSR1), 0);
    ck_assert_int_eq(wait_job(), 138);
    ck_assert_output("by SIGUSR1 from the MPI launcher; continue with --resume u.st");
    assert_saved_at_the_stop("u.st");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("dist_gpt");
    TCase *tc = tcase_checked("dist_gpt");
    tcase_add_checked_fixture(tc, make_dir, remove_dir);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, one_rank_under_mpiexec_saves_the_bits_of_a_plain_run);
    tcase_add_test(tc, two_ranks_train_like_one_process_on_the_combined_batch);
    tcase_add_test(tc, resume_at_the_same_world_size_is_bit_for_bit);
    tcase_add_test(tc, sharded_optimizer_resumes_bit_for_bit);
    tcase_add_test(tc, checkpoint_of_4_ranks_resumes_at_2_at_1_and_alone);
    tcase_add_test(tc, sharded_checkpoint_of_4_ranks_resumes_at_2_at_1_and_alone);
    tcase_add_test(tc, combined_batch_that_ranks_cannot_share_asks_for_batch);
    tcase_add_test(tc, data_file_missing_on_one_rank_ends_every_rank);
    tcase_add_test(tc, bad_checkpoint_on_one_rank_ends_every_rank);
    tcase_add_test(tc, ranks_started_with_different_options_refuse_at_once);
    tcase_add_test(tc, ranks_reading_different_data_or_checkpoints_refuse_at_once);
    tcase_add_test(tc, validation_loss_does_not_depend_on_the_world_size);
    tcase_add_test(tc, ranks_under_mpiexec_print_plain_lines);
    tcase_add_test(tc, signal_to_mpiexec_saves_the_job);
    tcase_add_test(tc, signal_to_a_rank_or_sigusr1_to_mpiexec_stops_the_job_with_its_code);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
