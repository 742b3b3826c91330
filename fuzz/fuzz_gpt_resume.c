/* libFuzzer harness for `gpt train --resume`: the example's own tiny
 * checkpoint, edited by the fuzz input (gpt_fuzz_edit: settings, history,
 * generator states, config, vocabulary, any tensor), must resume for one
 * step or be refused with a message, never crash, hang or leak. */
#include <stdio.h>
#include <stdlib.h>

#include "gpt_fuzz.h"

/* The entry points libFuzzer calls, which no header of its own declares. */
int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char text[GPT_FUZZ_PATH_MAX], edited[GPT_FUZZ_PATH_MAX], out[GPT_FUZZ_PATH_MAX], svg[GPT_FUZZ_PATH_MAX];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    gpt_fuzz_setup();
    gpt_fuzz_path(text, "text.txt");
    gpt_fuzz_path(edited, "edited.safetensors");
    gpt_fuzz_path(out, "out.safetensors");
    gpt_fuzz_path(svg, "out.svg");
    return 0;
}

/* The first byte picks the checkpoint: odd, the one trained on text.txt,
 * resumed with --data text.txt (a few milliseconds a run); even, the one of
 * the built-in task (its validation pass takes a tenth of a second); bit 1
 * set, the Llama's rather than the GPT's (gpt_fuzz_base). The
 * rest is a list of edits: a tag byte, then what the edit reads. At most
 * 32 edits, so that an input stays one quick run. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gpt_fuzz_input in = {data, size};
    uint8_t first = gpt_fuzz_byte(&in);
    bool on_text = first & 1;
    char base[GPT_FUZZ_PATH_MAX];
    gpt_fuzz_base(base, first);
    tg_params ck = {0};
    GPT_REQUIRE(tg_safetensors_load(base, &ck) == 0);
    for (int edits = 0; in.left > 0 && edits < 32; edits++)
        gpt_fuzz_edit(&ck, gpt_fuzz_byte(&in), &in);
    GPT_REQUIRE(tg_safetensors_save(edited, &ck, 0, NULL, NULL) == 0);
    tg_params_clear(&ck);

    char stop[32];
    snprintf(stop, sizeof stop, "%d", GPT_FUZZ_BASE_STEP + 1);
    char *argv[] = {"gpt", "train", "--resume", edited, "--stop-at", stop,
                    "--out", out, "--svg", svg, "--data", text, NULL};
    gpt_example_main(on_text ? 12 : 10, argv);
    tg_error_clear();
    tg_set_grad_enabled(true); /* a program may exit with it off; the next input starts on */
    GPT_REQUIRE(tg_live_tensors() == 0 && tg_scope_depth() == 0);
    return 0;
}
