/* The fuzz corpus as regression tests: every file in fuzz/corpus/<harness>/
 * goes through the harness's own entry point (fuzz/fuzz_<harness>.c, built
 * here with gcc and without libFuzzer), which aborts on a broken invariant. */
#include <dirent.h>

#include "testutil.h"

/* Both harnesses define the libFuzzer entry points; rename them per file. */
#define LLVMFuzzerInitialize fuzz_safetensors_init
#define LLVMFuzzerTestOneInput fuzz_safetensors_one
#include "fuzz/fuzz_safetensors.c"
#undef LLVMFuzzerInitialize
#undef LLVMFuzzerTestOneInput
#undef REQUIRE
#define LLVMFuzzerTestOneInput fuzz_text_data_one
#include "fuzz/fuzz_text_data.c"
#undef LLVMFuzzerTestOneInput

/* <src>/fuzz/corpus/<harness>: TG_FIXTURES is <src>/tests/fixtures. */
static void corpus_dir(char *buf, size_t size, const char *harness)
{
    const char *fx = getenv("TG_FIXTURES");
    const char *tail = "/tests/fixtures";
    size_t n = fx ? strlen(fx) : 0;
    if (fx && n >= strlen(tail) && strcmp(fx + n - strlen(tail), tail) == 0)
        snprintf(buf, size, "%.*s/fuzz/corpus/%s", (int)(n - strlen(tail)), fx, harness);
    else
        snprintf(buf, size, "fuzz/corpus/%s", harness);
}

static uint8_t *read_all(const char *path, size_t *size)
{
    FILE *fp = fopen(path, "rb");
    ck_assert_msg(fp, "cannot open %s", path);
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)n + 1);
    ck_assert(buf && fread(buf, 1, (size_t)n, fp) == (size_t)n);
    fclose(fp);
    *size = (size_t)n;
    return buf;
}

/* Runs every file of the harness's corpus through one; returns the count. */
static int replay(const char *harness, int (*one)(const uint8_t *, size_t))
{
    char dir[1024], file[1400];
    corpus_dir(dir, sizeof dir, harness);
    DIR *d = opendir(dir);
    ck_assert_msg(d, "cannot open the corpus %s", dir);
    int count = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(file, sizeof file, "%s/%s", dir, e->d_name);
        size_t size;
        uint8_t *bytes = read_all(file, &size);
        one(bytes, size);
        free(bytes);
        count++;
    }
    closedir(d);
    return count;
}

START_TEST(safetensors_corpus_loads_or_fails_cleanly)
{
    ck_assert_int_ge(replay("safetensors", fuzz_safetensors_one), 12);
}
END_TEST

START_TEST(text_corpus_runs_or_is_rejected_cleanly)
{
    ck_assert_int_ge(replay("text_data", fuzz_text_data_one), 12);
}
END_TEST

/* The named seeds mean what their names say: the valid ones load, each bad
 * one is refused for its own reason. */
static int load_seed(const char *name)
{
    char dir[1024], file[1400];
    corpus_dir(dir, sizeof dir, "safetensors");
    snprintf(file, sizeof file, "%s/%s", dir, name);
    tg_params out = {0};
    int rc = tg_safetensors_load(file, &out);
    tg_params_clear(&out);
    return rc;
}

START_TEST(safetensors_seeds_fail_for_their_reason)
{
    static const struct {
        const char *name, *fragment;
    } bad_seeds[] = {
        {"empty_file", "too short"},
        {"short_length", "too short"},
        {"length_past_end", "past the end of the file"},
        {"malformed_json", "malformed JSON"},
        {"unknown_dtype", "unsupported dtype 'F16'"},
        {"shape_mismatch", "needs 12 bytes"},
        {"overlap", "overlap"},
        {"duplicate_names", "duplicate tensor name 'x'"},
        {"duplicate_dtype", "tensor 'x' has key 'dtype' twice"},
        {"duplicate_shape", "tensor 'x' has key 'shape' twice"},
        {"duplicate_metadata", "the header has __metadata__ twice"},
        {"duplicate_metadata_key", "__metadata__ has key 'format' twice"},
        {"huge_shape", "needs more than"},
        {"zero_dim_huge_shape", "needs more than"},
        {"deep_nesting", "nesting deeper"},
        {"numbers", "not a non-negative integer"},
    };
    for (size_t i = 0; i < sizeof bad_seeds / sizeof bad_seeds[0]; i++) {
        ck_assert_msg(load_seed(bad_seeds[i].name) < 0, "%s loaded", bad_seeds[i].name);
        ck_assert_error(TG_ERR_VALUE, "tg_safetensors_load", bad_seeds[i].name,
                        bad_seeds[i].fragment);
    }
    const char *good[] = {"params.safetensors", "torch_written.safetensors", "adamw.safetensors",
                          "mha_self.safetensors", "empty_header", "escapes_and_unicode"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        ck_assert_msg(load_seed(good[i]) == 0, "%s: %s", good[i], tg_error_message());
}
END_TEST

/* The seed meant for tg_safetensors_load_into does fit the harness's
 * parameters, so the fuzzer starts from a file that gets past matching. */
START_TEST(params_seed_loads_into_the_harness_parameters)
{
    char dir[1024], file[1400];
    corpus_dir(dir, sizeof dir, "safetensors");
    snprintf(file, sizeof file, "%s/params.safetensors", dir);
    ck_assert_msg(tg_safetensors_load_into(file, &dest) == 0, "%s", tg_error_message());
    ck_assert_values(tg_params_find(&dest, "w"), 0, 1, 2, 3, 4, 5, 6);
    ck_assert_values(tg_params_find(&dest, "b"), 0, -1.5, 2.5);
    ck_assert_values(tg_params_find(&dest, "step"), 0, 42);
    ck_assert_values(tg_params_find(&dest, "mask"), 0, 1, 0, 1);
}
END_TEST

int main(void)
{
    fuzz_safetensors_init(NULL, NULL);
    Suite *s = suite_create("fuzz_corpus");
    TCase *tc = tcase_checked("corpus");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, safetensors_corpus_loads_or_fails_cleanly);
    tcase_add_test(tc, text_corpus_runs_or_is_rejected_cleanly);
    tcase_add_test(tc, safetensors_seeds_fail_for_their_reason);
    tcase_add_test(tc, params_seed_loads_into_the_harness_parameters);
    suite_add_tcase(s, tc);
    int rc = run_suite(s);
    tg_params_clear(&dest);
    return rc;
}
