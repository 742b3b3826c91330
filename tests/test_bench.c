/* A smoke test of the benchmark program (bench/bench.c): on its --quick
 * sizes it prints a line saying what the library picked, then one JSON line
 * per config with torch_ref.py's keys in torch_ref.py's order, and it
 * refuses bad arguments with exit status 2. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "testutil.h"

/* The bench binary sits beside the examples in the build tree. */
static const char *bench_path(void)
{
    static char path[4096];
    const char *ex = getenv("TG_EXAMPLES");
    snprintf(path, sizeof path, "%s/../bench/bench", ex ? ex : "examples");
    return path;
}

/* Runs the bench with args; stdout into out (size cap), returns the exit status. */
static int run_bench(const char *args, char *out, size_t cap)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", bench_path(), args);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The keys of line in order, each as "key": ; asserts they appear so. */
static void assert_keys_in_order(const char *line, const char *const *keys, int n)
{
    const char *at = line;
    for (int i = 0; i < n; i++) {
        char quoted[64];
        snprintf(quoted, sizeof quoted, "\"%s\": ", keys[i]);
        const char *hit = strstr(at, quoted);
        ck_assert_msg(hit != NULL, "key %s missing or out of order in: %s", keys[i], line);
        at = hit + strlen(quoted);
    }
}

/* The number after "key": in line, or NAN. */
static double number_after(const char *line, const char *key)
{
    char quoted[64];
    snprintf(quoted, sizeof quoted, "\"%s\": ", key);
    const char *hit = strstr(line, quoted);
    return hit ? strtod(hit + strlen(quoted), NULL) : NAN;
}

START_TEST(bench_prints_one_json_line_per_config_with_reference_keys)
{
    static char out[1 << 16];
    ck_assert_int_eq(run_bench("--quick --threads 1 matmul attn-toy", out, sizeof out), 0);
    static const char *const matmul_keys[] = {"config",     "threads",   "shape",
                                              "metric",     "value",     "unit",
                                              "peak_share", "precision", "peak_rss_mb"};
    static const char *const toy_keys[] = {"config",     "threads",   "metric",     "value",
                                           "unit",       "final_loss", "precision", "peak_rss_mb"};
    static const char *const info_keys[] = {
        "config",      "threads", "version",   "compiler",         "gemm_isa",           "blas",
        "avx512_bf16", "openmp",  "bf16_gemm", "fp32_peak_gflops", "dpbf16_peak_gflops",
        "amx_peak_gflops"};
    int info_lines = 0, matmul_lines = 0, toy_lines = 0, bf16_lines = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        ck_assert_msg(line[0] == '{' && line[strlen(line) - 1] == '}', "not JSON: %s", line);
        ck_assert_double_eq(number_after(line, "threads"), 1);
        if (strstr(line, "\"config\": \"info\"")) { /* first, and not a measurement */
            ck_assert_int_eq(info_lines + matmul_lines + toy_lines, 0);
            assert_keys_in_order(line, info_keys, 12);
            info_lines++;
            continue;
        }
        ck_assert_msg(number_after(line, "value") > 0, "no positive value: %s", line);
        ck_assert_msg(number_after(line, "peak_rss_mb") > 0, "no peak RSS: %s", line);
        bool bf16 = strstr(line, "\"precision\": \"bf16\"") != NULL;
        ck_assert_msg(bf16 || strstr(line, "\"precision\": \"fp32\""), "no precision: %s", line);
        bf16_lines += bf16;
        if (strstr(line, "\"config\": \"matmul\"")) {
            assert_keys_in_order(line, matmul_keys, 9);
            ck_assert_msg(number_after(line, "peak_share") >= 0, "no share: %s", line);
            ck_assert_ptr_nonnull(strstr(line, "\"metric\": \"gflops\""));
            ck_assert_ptr_nonnull(strstr(line, "\"unit\": \"GFLOP/s\""));
            matmul_lines++;
        } else if (strstr(line, "\"config\": \"attn-toy\"")) {
            assert_keys_in_order(line, toy_keys, 8);
            ck_assert_ptr_nonnull(strstr(line, "\"metric\": \"train_800_steps\""));
            double loss = number_after(line, "final_loss");
            ck_assert_msg(loss > 0 && loss < 3, "final loss %g", loss);
            toy_lines++;
        } else {
            ck_abort_msg("unexpected line: %s", line);
        }
    }
    ck_assert_int_eq(info_lines, 1);
    /* --quick keeps the two smallest shapes; each config runs at fp32 and bf16 */
    ck_assert_int_eq(matmul_lines, 4);
    ck_assert_int_eq(toy_lines, 2);
    ck_assert_int_eq(bf16_lines, 3);
}
END_TEST

/* The seq2seq config prints torch_seq2seq.py's keys: a training step of
 * tg_transformer, in ms, with its tokens (source and target) a second. */
START_TEST(bench_seq2seq_prints_a_train_step_line)
{
    static char out[1 << 16];
    ck_assert_int_eq(run_bench("--quick --threads 1 seq2seq", out, sizeof out), 0);
    static const char *const keys[] = {"config",       "threads", "metric",     "value",
                                       "unit", "tokens_per_s", "peak_rss_mb"};
    const char *line = strstr(out, "{\"config\": \"seq2seq\"");
    ck_assert_msg(line != NULL, "no seq2seq line in:\n%s", out);
    assert_keys_in_order(line, keys, 7);
    ck_assert_ptr_nonnull(strstr(line, "\"metric\": \"train_step\", "));
    ck_assert_ptr_nonnull(strstr(line, "\"unit\": \"ms\""));
    ck_assert_msg(number_after(line, "value") > 0 && number_after(line, "tokens_per_s") > 0,
                  "%s", line);
}
END_TEST

/* The llama configs print torch_llama.py's keys; generation's line carries
 * the KV cache's bytes, which for 2 kv heads of 6 are a third of the GPT's. */
START_TEST(bench_llama_configs_print_their_lines_and_cache_bytes)
{
    static char out[1 << 16];
    ck_assert_int_eq(run_bench("--quick --threads 1 --precision bf16 llama-medium llama-generate",
                               out, sizeof out), 0);
    static const char *const train_keys[] = {"config", "threads",      "metric",    "value",
                                             "unit",   "tokens_per_s", "precision", "peak_rss_mb"};
    static const char *const gen_keys[] = {"config", "threads",        "metric",
                                           "value",  "unit",           "kv_cache_bytes",
                                           "kv_cache_bytes_gpt", "precision", "peak_rss_mb"};
    int train = 0, gen = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        if (strstr(line, "\"config\": \"llama-medium\"")) {
            assert_keys_in_order(line, train_keys, 8);
            ck_assert_ptr_nonnull(strstr(line, "\"precision\": \"bf16\""));
            ck_assert_ptr_nonnull(strstr(line, "\"metric\": \"train_step\""));
            ck_assert_msg(number_after(line, "value") > 0, "no time: %s", line);
            train++;
        } else if (strstr(line, "\"config\": \"llama-generate\"")) {
            assert_keys_in_order(line, gen_keys, 9);
            /* 6 layers x (k, v) x 2 kv heads x 256 positions x 64 floats x 4 bytes */
            ck_assert_double_eq(number_after(line, "kv_cache_bytes"), 6.0 * 2 * 2 * 256 * 64 * 4);
            ck_assert_double_eq(number_after(line, "kv_cache_bytes_gpt"),
                                3 * number_after(line, "kv_cache_bytes"));
            gen++;
        }
    }
    ck_assert_int_eq(train, 1);
    ck_assert_int_eq(gen, 1);
}
END_TEST

START_TEST(bench_rejects_unknown_config)
{
    char out[4096];
    ck_assert_int_eq(run_bench("--quick gpt-huge", out, sizeof out), 2);
    ck_assert_ptr_nonnull(strstr(out, "unknown argument 'gpt-huge'"));
    ck_assert_ptr_nonnull(strstr(out, "gpt-medium")); /* the usage lists the configs */
}
END_TEST

START_TEST(bench_rejects_bad_thread_count)
{
    char out[4096];
    ck_assert_int_eq(run_bench("--threads 0 matmul", out, sizeof out), 2);
    ck_assert_ptr_nonnull(strstr(out, "--threads"));
    ck_assert_int_eq(run_bench("--threads", out, sizeof out), 2);
    ck_assert_int_eq(run_bench("--precision fp16 matmul", out, sizeof out), 2);
    ck_assert_ptr_nonnull(strstr(out, "--precision takes fp32, bf16 or both"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("bench");
    TCase *tc = tcase_checked("bench");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, bench_prints_one_json_line_per_config_with_reference_keys);
    tcase_add_test(tc, bench_llama_configs_print_their_lines_and_cache_bytes);
    tcase_add_test(tc, bench_seq2seq_prints_a_train_step_line);
    tcase_add_test(tc, bench_rejects_unknown_config);
    tcase_add_test(tc, bench_rejects_bad_thread_count);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
