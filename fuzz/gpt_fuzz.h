/* What the two harnesses of the GPT example (fuzz_gpt_resume.c and
 * fuzz_gpt_sample.c) share: the example's renamed main, a small checkpoint
 * trained once per process, and edits of a checkpoint driven by fuzz bytes. */
#ifndef GPT_FUZZ_H
#define GPT_FUZZ_H

#include <stddef.h>
#include <stdint.h>

#include <tensorgrad/tensorgrad.h>

/* examples/gpt.c's main, compiled into the harness under this name. */
int gpt_example_main(int argc, char **argv);

/* Harness invariants, not library errors: stop the fuzzer on the spot. */
#define GPT_REQUIRE(c)                                                         \
    do {                                                                       \
        if (!(c)) {                                                            \
            fprintf(stderr, "%s: %s failed: %s\n", __FILE__, #c,               \
                    tg_error_message());                                       \
            abort();                                                           \
        }                                                                      \
    } while (0)

/* The fuzz input, read front to back; past its end every byte reads 0. */
typedef struct {
    const uint8_t *at;
    size_t left;
} gpt_fuzz_input;

uint8_t gpt_fuzz_byte(gpt_fuzz_input *in);
/* A double from a table of edge cases (NaN, infinities, 0, -0, negatives,
 * values near int64's range and the example's limits), or 8 raw bytes. */
double gpt_fuzz_double(gpt_fuzz_input *in);
/* An int64 from a table of edge cases, or 8 raw bytes. */
int64_t gpt_fuzz_int(gpt_fuzz_input *in);

/* The base checkpoint's step count: it stopped there, out of GPT_FUZZ_STEPS. */
enum { GPT_FUZZ_BASE_STEP = 4, GPT_FUZZ_STEPS = 1000 };

/* Once per process: sends stdout to /dev/null (the example prints progress
 * and samples), makes a scratch directory, writes a short text.txt there,
 * and trains the example's tiny config, GPT and Llama, for
 * GPT_FUZZ_BASE_STEP steps into base_task.safetensors (the built-in task),
 * base_text.safetensors (on text.txt), base_llama_task.safetensors and
 * base_llama_text.safetensors. Returns the directory (removed at exit with
 * what it holds). */
const char *gpt_fuzz_setup(void);

/* Writes <dir>/name into out (GPT_FUZZ_PATH_MAX bytes). */
enum { GPT_FUZZ_PATH_MAX = 512 };
void gpt_fuzz_path(char *out, const char *name);
/* Writes the path of the base checkpoint an input's first byte picks into
 * out: bit 0 set, trained on text.txt; bit 1 set, the Llama's. */
void gpt_fuzz_base(char *out, uint8_t first);

/* Applies one edit to the checkpoint's tensors ck, chosen by tag and read
 * from in: a value of train.settings, gpt.config (llama.config) or gpt.vocab; gpt.vocab,
 * train.history or a generator state replaced by a tensor of another
 * shape, dtype or values; any tensor replaced, removed, or one element set.
 * Tensors made here stay small (at most 65536 elements). */
void gpt_fuzz_edit(tg_params *ck, uint8_t tag, gpt_fuzz_input *in);

#endif
