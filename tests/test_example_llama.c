/* Runs examples/gpt with --arch llama: the defaults that learn the built-in
 * task, resuming bit for bit, sampling, and checkpoints that disagree with
 * themselves or with the architecture asked for. */
#include "example_gpt_run.h"

#include <math.h>

/* --arch llama's defaults learn the task past the bar (under a minute on two
 * cores). Built with AddressSanitizer, or run under valgrind (the test setup
 * sets TG_MEMCHECK), the run is ten to a hundred times slower: there it is
 * short, and checks the path's memory, not what it learns. TG_TEST_SHORT
 * makes it short too: CI asserts the learning once, in its default build. */
#if defined(__SANITIZE_ADDRESS__)
static const bool built_for_memcheck = true;
#else
static const bool built_for_memcheck = false;
#endif

static bool short_llama_run(void)
{
    return built_for_memcheck || getenv("TG_MEMCHECK") != NULL ||
           getenv("TG_TEST_SHORT") != NULL;
}

/* The accuracy on the "exact-match accuracy: X% of 500" line. */
static double task_accuracy_printed(void)
{
    const char *at = strstr(output, "exact-match accuracy: ");
    double pct = -1;
    ck_assert_msg(at && sscanf(at, "exact-match accuracy: %lf%%", &pct) == 1, "%s", output);
    return pct;
}

/* The first run a user makes must learn: on the task, --arch llama without
 * --steps, --batch or --lr trains 5000 steps of 32 at 3e-3 (a GPT, or
 * either with --data, keeps its own). One step shows the settings in use. */
START_TEST(llama_on_the_task_defaults_to_settings_that_learn_it)
{
    ck_assert_int_eq(run("train --arch llama --stop-at 1 --out l.st --svg l.svg"), 0);
    ck_assert_output("AdamW lr 0.003 (warmup + cosine), batch 32, steps 5000,");
    ck_assert_int_eq(run("train --arch llama --lr 1e-3 --stop-at 1 --out l.st --svg l.svg"), 0);
    ck_assert_output("AdamW lr 0.001 (warmup + cosine), batch 32, steps 5000,");
    ck_assert_int_eq(run("train --stop-at 1 --out g.st --svg g.svg"), 0);
    ck_assert_output("AdamW lr 0.001 (warmup + cosine), batch 64, steps 1500,");
    ck_assert_int_eq(run("train --arch llama --steps 7 --stop-at 1 --out l.st --svg l.svg"), 0);
    ck_assert_output("batch 32, steps 7,");
    ck_assert_int_eq(run("train --arch llama --batch 8 --stop-at 1 --out l.st --svg l.svg"), 0);
    ck_assert_output("batch 8, steps 5000,");
}
END_TEST

START_TEST(llama_learns_the_task_past_the_accuracy_bar)
{
    const char *args = short_llama_run() ? "--steps 20 --batch 8" : "";
    double bar = short_llama_run() ? 0.0 : 99.0;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "train --arch llama %s --out l.st --svg l.svg", args);
    ck_assert_int_eq(run(cmd), 0);
    ck_assert_output("training a Llama on 3-digit addition");
    ck_assert_output("2 kv heads, hidden 384");
    double pct = task_accuracy_printed();
    fprintf(stderr, "llama: '%s' gives %.1f%% on the task\n", args, pct);
    size_t len = strlen(output); /* the end: Check refuses messages of many kilobytes */
    ck_assert_msg(pct >= bar, "accuracy %.1f%%:\n%s", pct, output + (len > 2000 ? len - 2000 : 0));
}
END_TEST

START_TEST(llama_run_resumes_bit_for_bit_and_samples)
{
    char straight[32], resumed[32];
    ck_assert_int_eq(run("train --arch llama --config tiny --steps 8 --batch 4 --seed 5 "
                         "--out a.st --svg a.svg"), 0);
    ck_assert_output("vocab 13, context 16, 1 layers, 2 heads, d 32, 1 kv heads, hidden 96");
    final_loss(straight);
    ck_assert_int_eq(run("train --arch llama --config tiny --steps 8 --batch 4 --seed 5 "
                         "--stop-at 4 --out b.st --svg b.svg"), 0);
    ck_assert_int_eq(run("train --resume b.st --out c.st --svg c.svg"), 0);
    ck_assert_output("training a Llama on");
    ck_assert_output("resumed");
    final_loss(resumed);
    ck_assert_str_eq(straight, resumed);
    /* a Llama has no dropout, so its checkpoint holds no dropout generator */
    write_edited("b.st", "d.st", "train.rng_dropout", NULL);
    ck_assert_int_eq(run("train --resume d.st --out e.st --svg e.svg"), 0);
    final_loss(resumed);
    ck_assert_str_eq(straight, resumed);

    write_file("t.txt", text, sizeof text - 1);
    ck_assert_int_eq(run("train --arch llama --data t.txt --config tiny --steps 6 --batch 4 "
                         "--out f.st --svg f.svg"), 0);
    final_loss(straight);
    ck_assert_int_eq(run("train --arch llama --data t.txt --config tiny --steps 6 --batch 4 "
                         "--stop-at 3 --out g.st --svg g.svg"), 0);
    ck_assert_int_eq(run("train --arch llama --data t.txt --resume g.st --out h.st "
                         "--svg h.svg"), 0);
    final_loss(resumed);
    ck_assert_str_eq(straight, resumed);
    ck_assert_int_eq(run("train --arch gpt --data t.txt --resume g.st --out h.st"), 1);
    ck_assert_output("g.st is a llama checkpoint; resume it with --arch llama or without");

    static const char *const samplings[] = {"--greedy", "--temperature 0.8 --seed 3",
                                            "--top-k 5", "--top-p 0.9 --temperature 1.5"};
    for (size_t i = 0; i < sizeof samplings / sizeof samplings[0]; i++) {
        char args[128];
        snprintf(args, sizeof args, "sample --ckpt c.st --prompt 12+3 --tokens 25 %s",
                 samplings[i]);
        ck_assert_msg(run(args) == 0, "gpt %s:\n%s", args, output);
        ck_assert_uint_eq(strlen(output), 4 + 25 + 1); /* slides past the context of 16 */
        ck_assert(strncmp(output, "12+3", 4) == 0);
        ck_assert_uint_eq(strspn(output, "0123456789+=\n"), strlen(output));
    }
}
END_TEST

static tg_tensor *llama_config(double kv_heads, double heads, double theta)
{
    return tg_from_data(TG_FLOAT64, 1, SHAPE(11),
                        (const double[]){13, 16, 1, heads, kv_heads, 32, 96, theta, 1e-5, 1, 0});
}

START_TEST(llama_checkpoint_that_disagrees_with_itself_is_refused)
{
    ck_assert_int_eq(run("train --arch llama --config tiny --steps 4 --batch 4 --stop-at 2 "
                         "--out base.st --svg base.svg"), 0);
    const struct {
        const char *name;
        tg_tensor *value;
        const char *message;
    } cases[] = {
        {"llama.config", llama_config(2, 2, 10000),
         "model.layers.0.self_attn.k_proj.weight is float32 [16, 32]; llama.config implies "
         "float [32, 32]"},
        {"llama.config", llama_config(1, 2, 0), "rope theta = 0 is not a finite number > 0"},
        {"llama.config", llama_config(1, 2, INFINITY), "rope theta = inf is not a finite"},
        {"llama.config", llama_config(1, 32, 10000), "head size 1 (width 32 / 32 heads) is odd"},
        {"llama.config", llama_config(3, 2, 10000), "3 kv heads do not divide its 2 heads"},
        {"llama.config", llama_config(1.5, 2, 10000), "kv heads = 1.5 is not a whole number"},
        {"llama.config", tg_zeros(TG_FLOAT64, 1, SHAPE(5)), "llama.config has 5 values, not 11"},
        {"llama.config", NULL, "it has no llama.config"},
        {"model.arch", tg_full(TG_INT64, 1, SHAPE(1), 7), "its model.arch is 7, not 0"},
        /* without its arch record a checkpoint is a GPT's */
        {"model.arch", NULL, "it has no gpt.config"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_edited("base.st", "bad.st", cases[i].name, cases[i].value);
        int status = run("train --resume bad.st --out o.st --svg o.svg");
        ck_assert_msg(status == 1, "case %zu: exit %d:\n%s", i, status, output);
        ck_assert_msg(strstr(output, cases[i].message), "case %zu: no '%s' in:\n%s", i,
                      cases[i].message, output);
        ck_assert_int_eq(run("sample --ckpt bad.st --tokens 3"), 1);
        ck_assert_msg(strstr(output, cases[i].message), "sample, case %zu:\n%s", i, output);
    }
    ck_assert_int_eq(file_size("o.st"), -1);
}
END_TEST

START_TEST(gpt_checkpoint_without_an_arch_record_still_loads)
{
    ck_assert_int_eq(run("train --config tiny --steps 4 --batch 4 --stop-at 2 --out g.st "
                         "--svg g.svg"), 0);
    char path[128];
    snprintf(path, sizeof path, "%s/g.st", dir);
    tg_params ck = {0};
    ck_assert_int_eq(tg_safetensors_load(path, &ck), 0);
    ck_assert_ptr_null(tg_params_find(&ck, "model.arch"));
    tg_error_clear();
    tg_params_clear(&ck);
    ck_assert_int_eq(run("sample --ckpt g.st --prompt 1 --tokens 4 --greedy"), 0);
    ck_assert_int_eq(run("train --resume g.st --out h.st --svg h.svg"), 0);
    ck_assert_output("training on 3-digit addition");
    ck_assert_output("final: step 4 ");
    ck_assert_int_eq(run("train --arch llama --resume g.st --out h.st --svg h.svg"), 1);
    ck_assert_output("g.st is a gpt checkpoint; resume it with --arch gpt or without --arch");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("example_llama");
    TCase *tc = tcase_checked("llama");
    tcase_add_checked_fixture(tc, make_dir, remove_dir);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, llama_on_the_task_defaults_to_settings_that_learn_it);
    tcase_add_test(tc, llama_run_resumes_bit_for_bit_and_samples);
    tcase_add_test(tc, llama_checkpoint_that_disagrees_with_itself_is_refused);
    tcase_add_test(tc, gpt_checkpoint_without_an_arch_record_still_loads);
    suite_add_tcase(s, tc);
    /* under two minutes alone on two cores, but meson runs the other programs beside it */
    TCase *task = tcase_checked("llama_task");
    tcase_add_checked_fixture(task, make_dir, remove_dir);
    tcase_set_timeout(task, 300);
    tcase_add_test(task, llama_learns_the_task_past_the_accuracy_bar);
    suite_add_tcase(s, task);
    return run_suite(s);
}
