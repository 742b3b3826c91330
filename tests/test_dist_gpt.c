/* Runs examples/gpt data-parallel under mpiexec (TG_MPIEXEC) on tiny
 * settings: checkpoints that move between world sizes, resuming bit for bit,
 * one rank's bad input ending the whole job, and agreement with one process. */
#include "testutil.h"

#include <math.h>
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
    suite_add_tcase(s, tc);
    return run_suite(s);
}
