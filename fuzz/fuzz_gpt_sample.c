/* libFuzzer harness for `gpt sample`: the example's own tiny checkpoint,
 * edited as for the resume harness, and a command line of fuzzed options
 * (a prompt of any bytes, token counts, temperatures, top-k, seeds,
 * --greedy, unknown options) must write a sample or be refused with a
 * message, never crash, hang or leak. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt_fuzz.h"

/* The entry points libFuzzer calls, which no header of its own declares. */
int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char edited[GPT_FUZZ_PATH_MAX];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    gpt_fuzz_setup();
    gpt_fuzz_path(edited, "edited.safetensors");
    return 0;
}

enum { MAX_ARGS = 64, TEXT_MAX = 64 };

/* The command line being built: argv entries point into text. */
typedef struct {
    char *argv[MAX_ARGS + 1];
    int argc;
    char text[MAX_ARGS][GPT_FUZZ_PATH_MAX];
} command;

static void add(command *c, const char *arg)
{
    if (c->argc >= MAX_ARGS)
        return;
    snprintf(c->text[c->argc], GPT_FUZZ_PATH_MAX, "%s", arg);
    c->argv[c->argc] = c->text[c->argc];
    c->argc++;
}

/* Up to TEXT_MAX raw bytes of the input as one argument (a NUL ends it). */
static void add_bytes(command *c, gpt_fuzz_input *in)
{
    char s[TEXT_MAX + 1];
    size_t n = gpt_fuzz_byte(in) % (TEXT_MAX + 1);
    for (size_t i = 0; i < n; i++)
        s[i] = (char)gpt_fuzz_byte(in);
    s[n] = 0;
    add(c, s);
}

static const char *pick(gpt_fuzz_input *in, const char *const *list, size_t n)
{
    return list[gpt_fuzz_byte(in) % n];
}
#define PICK(in, list) pick(in, list, sizeof list / sizeof list[0])

/* One option from the tag: its name and a value from a table of edge cases
 * or the input's bytes. --tokens stays at most 8, so a run stays short. */
static void add_option(command *c, uint8_t tag, gpt_fuzz_input *in)
{
    static const char *const tokens[] = {"0", "1", "2", "3", "8", "-1", "x", "", "1e1", "07"};
    static const char *const temps[] = {"1", "0.8", "1e-6", "1e6", "0", "-1", "nan", "inf",
                                        "1e-300", "2", "9e-7", "1e6.0", "0x1p-3"};
    static const char *const topk[] = {"0", "1", "2", "5", "12", "13", "14", "100", "1000000",
                                       "1000001", "-1"};
    static const char *const seeds[] = {"0", "1", "42", "9223372036854775807",
                                        "9223372036854775808", "18446744073709551615", "-1"};
    static const char *const unknown[] = {"--bogus", "--steps", "--resume", "-", "", "--",
                                          "--ckpt", "--prompt", "--greedy=1", "sample"};
    char num[40];
    switch (tag % 8) {
    case 0: add(c, "--prompt"); add_bytes(c, in); break;
    case 1: add(c, "--tokens"); add(c, PICK(in, tokens)); break;
    case 2:
        add(c, "--temperature");
        if (gpt_fuzz_byte(in) & 1) {
            add(c, PICK(in, temps));
        } else {
            snprintf(num, sizeof num, "%.17g", gpt_fuzz_double(in));
            add(c, num);
        }
        break;
    case 3: add(c, "--top-k"); add(c, PICK(in, topk)); break;
    case 4: add(c, "--seed"); add(c, PICK(in, seeds)); break;
    case 5: add(c, "--greedy"); break;
    case 6: add(c, PICK(in, unknown)); break;
    case 7: add_bytes(c, in); break;
    }
}

/* The first byte picks the checkpoint: odd, the one trained on text.txt
 * (its vocabulary is that text's bytes); even, the built-in task's; bit 1
 * set, the Llama's rather than the GPT's. Then a
 * list of records: a tag byte, then what the record reads. Tags below 0x80
 * edit the checkpoint, the others add an option. At most 32 records. The
 * command starts as `gpt sample --ckpt FILE --tokens 4`. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static command c;
    c.argc = 0;
    add(&c, "gpt");
    add(&c, "sample");
    add(&c, "--ckpt");
    add(&c, edited);
    add(&c, "--tokens");
    add(&c, "4");

    gpt_fuzz_input in = {data, size};
    char base[GPT_FUZZ_PATH_MAX];
    gpt_fuzz_base(base, gpt_fuzz_byte(&in)); /* text or task, GPT or Llama */
    tg_params ck = {0};
    GPT_REQUIRE(tg_safetensors_load(base, &ck) == 0);
    for (int records = 0; in.left > 0 && records < 32; records++) {
        uint8_t tag = gpt_fuzz_byte(&in);
        if (tag < 0x80)
            gpt_fuzz_edit(&ck, tag, &in);
        else
            add_option(&c, tag, &in);
    }
    GPT_REQUIRE(tg_safetensors_save(edited, &ck, 0, NULL, NULL) == 0);
    tg_params_clear(&ck);

    c.argv[c.argc] = NULL;
    gpt_example_main(c.argc, c.argv);
    tg_error_clear();
    tg_set_grad_enabled(true);
    GPT_REQUIRE(tg_live_tensors() == 0 && tg_scope_depth() == 0);
    return 0;
}
