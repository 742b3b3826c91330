/* libFuzzer harness for the safetensors loader: any byte string, written to a
 * file, must load or fail with an error code set, never crash or leak; a
 * failed tg_safetensors_load_into leaves the parameters untouched. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tensorgrad/tensorgrad.h>

/* The entry points libFuzzer calls, which no header of its own declares. */
int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Harness invariants, not library errors: stop the fuzzer on the spot. */
#define REQUIRE(c)                                                             \
    do {                                                                       \
        if (!(c)) {                                                            \
            fprintf(stderr, "fuzz_safetensors: %s failed: %s\n", #c,           \
                    tg_error_message());                                       \
            abort();                                                           \
        }                                                                      \
    } while (0)

static char path[64];

/* The fixed destination of tg_safetensors_load_into: every dtype, a 0-dim
 * tensor, an empty one and a transposed (non-contiguous) one. A file that
 * loads into it is fuzz/corpus/safetensors/params.safetensors. */
static tg_params dest;

static void build_dest(void)
{
    tg_tensor *w = tg_arange(TG_FLOAT32, 0, 6, 1), *w2 = tg_reshape(w, 2, (int64_t[]){2, 3});
    tg_params_add(&dest, NULL, "w", tg_transpose(w2, 0, 1)); /* [3, 2] view */
    tg_params_add(&dest, NULL, "b", tg_full(TG_FLOAT64, 1, (int64_t[]){2}, 0.5));
    tg_params_add(&dest, NULL, "step", tg_scalar(TG_INT64, 7));
    tg_params_add(&dest, NULL, "mask", tg_ones(TG_BOOL, 2, (int64_t[]){1, 3}));
    tg_params_add(&dest, NULL, "empty", tg_zeros(TG_FLOAT32, 2, (int64_t[]){0, 4}));
    tg_release(w);
    tg_release(w2);
    /* tg_params_add took its own references; the views above are owned by
     * nobody else, so drop the creators' references. */
    for (int i = 0; i < dest.count; i++)
        tg_release(dest.tensors[i]);
    REQUIRE(dest.count == 5);
}

/* dest's values as doubles, to see whether a failed load changed any. */
static void snapshot(double *out, int64_t cap)
{
    int64_t at = 0;
    for (int i = 0; i < dest.count; i++) {
        int64_t n = tg_numel(dest.tensors[i]);
        REQUIRE(at + n <= cap);
        REQUIRE(tg_copy_to(dest.tensors[i], TG_FLOAT64, out + at, n) == 0);
        at += n;
    }
}

/* libFuzzer may stop between writing and unlinking an input. */
static void remove_input(void)
{
    unlink(path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(path, sizeof path, "%s/fuzz_st_%ld.safetensors", dir, (long)getpid());
    build_dest();
    atexit(remove_input);
    return 0;
}

static void write_input(const uint8_t *data, size_t size)
{
    FILE *fp = fopen(path, "wb");
    REQUIRE(fp);
    REQUIRE(fwrite(data, 1, size, fp) == size);
    REQUIRE(fclose(fp) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int64_t live = tg_live_tensors();
    write_input(data, size);

    tg_params out = {0};
    tg_error_clear();
    int rc = tg_safetensors_load(path, &out);
    REQUIRE(rc == 0 ? tg_error_code() == TG_OK : tg_error_code() != TG_OK && out.count == 0);
    for (int i = 0; i < out.count; i++)
        REQUIRE(out.tensors[i] && out.names[i] && tg_is_contiguous(out.tensors[i]));
    tg_params_clear(&out);

    double before[32] = {0}, after[32] = {0};
    snapshot(before, 32);
    tg_error_clear();
    rc = tg_safetensors_load_into(path, &dest);
    REQUIRE(rc == 0 ? tg_error_code() == TG_OK : tg_error_code() != TG_OK);
    snapshot(after, 32);
    if (rc != 0)
        REQUIRE(memcmp(before, after, sizeof before) == 0);
    tg_error_clear();

    REQUIRE(tg_live_tensors() == live);
    unlink(path);
    return 0;
}
