/* The GPT harnesses' common part: a tiny checkpoint trained once by the
 * example itself, and edits that turn it into what a damaged or hostile
 * checkpoint could hold, driven by the fuzzer's bytes (gpt_fuzz.h). */
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpt_fuzz.h"

uint8_t gpt_fuzz_byte(gpt_fuzz_input *in)
{
    if (in->left == 0)
        return 0;
    in->left--;
    return *in->at++;
}

static uint64_t raw_bits(gpt_fuzz_input *in)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)gpt_fuzz_byte(in) << (8 * i);
    return v;
}

double gpt_fuzz_double(gpt_fuzz_input *in)
{
    static const double table[] = {
        NAN, INFINITY, -INFINITY, 0.0, -0.0, -1, 1, 2, 3, 4, 5, 6, 0.5, 1e-3, 1e-300,
        1e300, -1e300, 1e7, 1e7 + 1, 4096, 4097, 9.3e18, -9.3e18, 1.8e19, 0x1p63, 0x1p53,
        DBL_MIN, DBL_TRUE_MIN, DBL_MAX, 1000, 50, 100,
    };
    enum { N = sizeof table / sizeof table[0] };
    uint8_t pick = gpt_fuzz_byte(in) % (N + 1);
    if (pick < N)
        return table[pick];
    uint64_t bits = raw_bits(in);
    double v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

int64_t gpt_fuzz_int(gpt_fuzz_input *in)
{
    static const int64_t table[] = {
        0, 1, 2, 3, 4, -1, 12, 13, 14, 15, 16, 17, 31, 32, 33, 64, 255, 256, 257, -256,
        (int64_t)1 << 20, (int64_t)1 << 31, (int64_t)1 << 32, (int64_t)1 << 62,
        INT64_MAX, INT64_MIN,
    };
    enum { N = sizeof table / sizeof table[0] };
    uint8_t pick = gpt_fuzz_byte(in) % (N + 1);
    return pick < N ? table[pick] : (int64_t)raw_bits(in);
}

/* ---- the base checkpoint -------------------------------------------------- */

static char scratch[256];

static void remove_scratch(void)
{
    static const char *const names[] = {"base_task.safetensors", "base_text.safetensors",
                                        "base_llama_task.safetensors",
                                        "base_llama_text.safetensors", "base.svg", "text.txt",
                                        "edited.safetensors", "out.safetensors", "out.svg"};
    char path[GPT_FUZZ_PATH_MAX];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        gpt_fuzz_path(path, names[i]);
        unlink(path);
    }
    rmdir(scratch);
}

void gpt_fuzz_path(char *out, const char *name)
{
    snprintf(out, GPT_FUZZ_PATH_MAX, "%s/%s", scratch, name);
}

/* A text just long enough for the tiny config's context of 16: 90% to
 * train on, and a validation split of one short window, which keeps a
 * resumed run's validation pass to one row. */
static const char text[] = "To be, or not to be, that is the question:\n"
                           "Whether 'tis nobler in the mind to suffer\n"
                           "The slings and arrows of outrageous fortune.\n";

static void write_text(void)
{
    char path[GPT_FUZZ_PATH_MAX];
    gpt_fuzz_path(path, "text.txt");
    FILE *f = fopen(path, "wb");
    GPT_REQUIRE(f && fputs(text, f) >= 0 && fclose(f) == 0);
}

/* The base checkpoint a harness input's first byte picks: bit 0 the one
 * trained on text.txt (else the built-in task), bit 1 the Llama's. */
void gpt_fuzz_base(char *out, uint8_t first)
{
    static const char *const names[] = {"base_task.safetensors", "base_text.safetensors",
                                        "base_llama_task.safetensors",
                                        "base_llama_text.safetensors"};
    gpt_fuzz_path(out, names[first & 3]);
}

/* gpt train --arch gpt|llama --config tiny, stopped at GPT_FUZZ_BASE_STEP
 * of GPT_FUZZ_STEPS, on the built-in task or on text.txt. */
static void train_base(bool on_text, bool llama)
{
    char out[GPT_FUZZ_PATH_MAX], svg[GPT_FUZZ_PATH_MAX], data[GPT_FUZZ_PATH_MAX];
    char steps[32], stop[32];
    gpt_fuzz_base(out, (uint8_t)(on_text | llama << 1));
    gpt_fuzz_path(svg, "base.svg");
    gpt_fuzz_path(data, "text.txt");
    snprintf(steps, sizeof steps, "%d", GPT_FUZZ_STEPS);
    snprintf(stop, sizeof stop, "%d", GPT_FUZZ_BASE_STEP);
    char *argv[] = {"gpt", "train", "--arch", llama ? "llama" : "gpt", "--config", "tiny",
                    "--steps", steps, "--stop-at", stop, "--batch", "2", "--out", out,
                    "--svg", svg, "--data", data, NULL};
    GPT_REQUIRE(gpt_example_main(on_text ? 18 : 16, argv) == 0);
    GPT_REQUIRE(tg_live_tensors() == 0);
}

const char *gpt_fuzz_setup(void)
{
    int null_fd = open("/dev/null", O_WRONLY);
    GPT_REQUIRE(null_fd >= 0 && dup2(null_fd, STDOUT_FILENO) == STDOUT_FILENO);
    close(null_fd);
    const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(scratch, sizeof scratch, "%s/fuzz_gpt_XXXXXX", dir);
    GPT_REQUIRE(mkdtemp(scratch));
    atexit(remove_scratch);
    write_text();
    for (int base = 0; base < 4; base++)
        train_base(base & 1, base & 2);
    return scratch;
}

/* ---- edits ------------------------------------------------------------------ */

/* Element i of t (contiguous, as loaded or made here) set to a value drawn
 * for its dtype. */
static void set_element(tg_tensor *t, int64_t i, gpt_fuzz_input *in)
{
    void *data = tg_data(t);
    if (!data || i < 0 || i >= tg_numel(t))
        return;
    switch (tg_dtype_of(t)) {
    case TG_FLOAT32: ((float *)data)[i] = (float)gpt_fuzz_double(in); break;
    case TG_FLOAT64: ((double *)data)[i] = gpt_fuzz_double(in); break;
    case TG_INT64: ((int64_t *)data)[i] = gpt_fuzz_int(in); break;
    case TG_BOOL: ((bool *)data)[i] = gpt_fuzz_byte(in) & 1; break;
    case TG_BFLOAT16: ((uint16_t *)data)[i] = (uint16_t)gpt_fuzz_int(in); break; /* any bits */
    }
}

/* A tensor of up to 4 dims from a table that includes 0 (empty) and a huge
 * dim next to a 0; its values one drawn value repeated, then up to 7 more
 * drawn for its first elements. dtype < 0 draws the dtype too. NULL when
 * the library refuses the shape. */
static tg_tensor *fuzz_tensor(gpt_fuzz_input *in, int dtype)
{
    static const int64_t dims[] = {0, 1, 2, 3, 4, 5, 8, 13, 16, 32, 64, 4096, (int64_t)1 << 40};
    enum { N = sizeof dims / sizeof dims[0], MAX_NUMEL = 1 << 16 };
    if (dtype < 0)
        dtype = gpt_fuzz_byte(in) % 4;
    int ndim = gpt_fuzz_byte(in) % 5;
    int64_t shape[4], numel = 1;
    for (int d = 0; d < ndim; d++)
        shape[d] = dims[gpt_fuzz_byte(in) % N];
    for (int d = 0; d < ndim; d++)
        numel = shape[d] == 0 ? 0 : numel;
    for (int d = 0; d < ndim && numel > 0; d++) {
        if (numel * shape[d] > MAX_NUMEL || shape[d] > MAX_NUMEL)
            shape[d] = 1;
        numel *= shape[d];
    }
    tg_tensor *t = tg_zeros((tg_dtype)dtype, ndim, shape);
    if (!t)
        return tg_error_clear(), NULL;
    int64_t n = tg_numel(t);
    if (n > 0) {
        set_element(t, 0, in);
        size_t size = tg_dtype_of(t) == TG_FLOAT32 ? 4 : tg_dtype_of(t) == TG_BOOL ? 1 : 8;
        for (int64_t i = 1; i < n; i++)
            memcpy((char *)tg_data(t) + i * size, tg_data(t), size);
    }
    for (int k = gpt_fuzz_byte(in) % 8, i = 1; i <= k && i < n; i++)
        set_element(t, i, in);
    return t;
}

static int find(const tg_params *ck, const char *name)
{
    for (int i = 0; i < ck->count; i++)
        if (!strcmp(ck->names[i], name))
            return i;
    return -1;
}

/* Entry i's tensor becomes t (a new reference, given to ck); NULL keeps it. */
static void replace(tg_params *ck, int i, tg_tensor *t)
{
    if (i < 0 || i >= ck->count || !t) {
        tg_release(t);
        return;
    }
    tg_release(ck->tensors[i]);
    ck->tensors[i] = t;
}

/* Drops entry i: the last entry takes its place. */
static void drop(tg_params *ck, int i)
{
    if (i < 0 || i >= ck->count)
        return;
    int last = ck->count - 1;
    tg_tensor *t = ck->tensors[i];
    char *name = ck->names[i];
    ck->tensors[i] = ck->tensors[last];
    ck->names[i] = ck->names[last];
    ck->tensors[last] = t;
    ck->names[last] = name;
    tg_params_truncate(ck, last);
}

/* A vocabulary of n entries: first, first + step, ... (mod 256), one of
 * them possibly outside a byte's range. */
static tg_tensor *fuzz_vocab(gpt_fuzz_input *in)
{
    int64_t n = gpt_fuzz_byte(in), first = gpt_fuzz_byte(in), step = gpt_fuzz_byte(in) % 4;
    n = n == 255 ? 300 : n;
    int64_t v[300];
    for (int64_t i = 0; i < n; i++)
        v[i] = (first + i * step) % 256;
    if (n > 0 && gpt_fuzz_byte(in) & 1)
        v[gpt_fuzz_byte(in) % n] = gpt_fuzz_int(in);
    return tg_from_data(TG_INT64, 1, (int64_t[]){n}, v);
}

void gpt_fuzz_edit(tg_params *ck, uint8_t tag, gpt_fuzz_input *in)
{
    int any = ck->count > 0 ? gpt_fuzz_byte(in) % ck->count : -1;
    int settings = find(ck, "train.settings"), config = find(ck, "gpt.config");
    int llama_config = find(ck, "llama.config");
    int vocab = find(ck, "gpt.vocab"), history = find(ck, "train.history");
    int rng = find(ck, gpt_fuzz_byte(in) & 1 ? "train.rng_data" : "train.rng_dropout");
    switch (tag % 9) {
    case 0: /* steps, batch, lr, task flag or eval interval */
        if (settings >= 0)
            set_element(ck->tensors[settings], gpt_fuzz_byte(in) % 5, in);
        break;
    case 1: /* vocab size, context, layers, heads or width; a Llama's kv heads too, its
             * hidden width, rope theta, norm eps, tied head and pairing */
        if (config >= 0)
            set_element(ck->tensors[config], gpt_fuzz_byte(in) % 5, in);
        else if (llama_config >= 0)
            set_element(ck->tensors[llama_config], gpt_fuzz_byte(in) % 11, in);
        break;
    case 2:
        if (vocab >= 0)
            set_element(ck->tensors[vocab], gpt_fuzz_byte(in), in);
        break;
    case 3: replace(ck, vocab, fuzz_vocab(in)); break;
    case 4: replace(ck, history, fuzz_tensor(in, gpt_fuzz_byte(in) & 1 ? TG_FLOAT64 : -1)); break;
    case 5:
        if (gpt_fuzz_byte(in) & 1)
            replace(ck, rng, fuzz_tensor(in, -1));
        else if (rng >= 0)
            set_element(ck->tensors[rng], gpt_fuzz_byte(in) % 4, in);
        break;
    case 6: replace(ck, any, fuzz_tensor(in, -1)); break;
    case 7: drop(ck, any); break;
    case 8:
        if (any >= 0) {
            int64_t at = gpt_fuzz_byte(in) | (int64_t)gpt_fuzz_byte(in) << 8;
            int64_t n = tg_numel(ck->tensors[any]);
            set_element(ck->tensors[any], n > 0 ? at % n : 0, in);
        }
        break;
    }
}
