/* libFuzzer harness for the examples' text data path: apply the GPT example's
 * rules (reject empty, NUL-containing or shorter-than-context text; the
 * vocabulary is the distinct bytes), then push the first window through the
 * library the way the example does, tokens and raw bytes alike. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tensorgrad/tensorgrad.h>

/* The entry points libFuzzer calls, which no header of its own declares. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REQUIRE(c)                                                             \
    do {                                                                       \
        if (!(c)) {                                                            \
            fprintf(stderr, "fuzz_text_data: %s failed: %s\n", #c,             \
                    tg_error_message());                                       \
            abort();                                                           \
        }                                                                      \
    } while (0)

enum { BLOCK = 8, EMBD = 8 };

/* examples/gpt.c's load_text: byte -> id in byte order, -1 for bytes that
 * do not occur. Returns the vocabulary size, or 0 when the text breaks a
 * rule: empty, a NUL byte, or a 90% training split shorter than context + 1. */
static int64_t build_vocab(const uint8_t *text, size_t n, int64_t id_of[256])
{
    bool seen[256] = {false};
    if (n == 0 || memchr(text, 0, n) || n - n / 10 < BLOCK + 1)
        return 0;
    for (size_t i = 0; i < n; i++)
        seen[text[i]] = true;
    int64_t v = 0;
    for (int b = 0; b < 256; b++)
        id_of[b] = seen[b] ? v++ : -1;
    return v;
}

/* The first window as ids [1, BLOCK] and its next-token targets; then the
 * raw bytes as ids, which must be refused exactly when one is >= vocab. */
static void run_window(const uint8_t *text, const int64_t id_of[256], int64_t vocab)
{
    const int64_t shape[2] = {1, BLOCK};
    int64_t ids[BLOCK], next[BLOCK], raw[BLOCK], max_raw = 0;
    for (int t = 0; t < BLOCK; t++) {
        ids[t] = id_of[text[t]];
        next[t] = id_of[text[t + 1]];
        raw[t] = text[t];
        max_raw = raw[t] > max_raw ? raw[t] : max_raw;
    }
    tg_rng *rng = tg_rng_new(1);
    tg_gpt_config cfg = {.vocab_size = vocab, .block_size = BLOCK, .n_layer = 1,
                         .n_head = 2, .n_embd = EMBD, .dropout = 0.1};
    tg_gpt *model = tg_gpt_new(&cfg, TG_FLOAT32, rng);
    REQUIRE(model);

    tg_scope_begin();
    tg_tensor *idx = tg_from_data(TG_INT64, 2, shape, ids);
    tg_tensor *targets = tg_from_data(TG_INT64, 2, shape, next);
    tg_tensor *table = tg_zeros(TG_FLOAT32, 2, (int64_t[]){vocab, EMBD});
    tg_tensor *emb = tg_embedding(table, idx);
    REQUIRE(emb && tg_ndim(emb) == 3 && tg_shape(emb)[2] == EMBD);
    tg_tensor *loss = NULL;
    tg_tensor *logits = tg_gpt_forward(model, idx, targets, &loss);
    REQUIRE(logits && loss && tg_shape(logits)[2] == vocab);
    double l = 0;
    REQUIRE(tg_copy_to(loss, TG_FLOAT64, &l, 1) == 0 && isfinite(l));
    REQUIRE(tg_backward(loss, NULL) == 0);

    tg_error_clear();
    tg_tensor *bad = tg_gpt_forward(model, tg_from_data(TG_INT64, 2, shape, raw), NULL, NULL);
    if (max_raw < vocab)
        REQUIRE(bad && tg_error_code() == TG_OK);
    else
        REQUIRE(!bad && tg_error_code() == TG_ERR_INDEX);
    tg_error_clear();
    tg_scope_end();

    tg_gpt_free(model);
    tg_rng_free(rng);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int64_t live = tg_live_tensors(), id_of[256];
    int64_t vocab = build_vocab(data, size, id_of);
    if (vocab > 0)
        run_window(data, id_of, vocab);
    REQUIRE(tg_live_tensors() == live && tg_scope_depth() == 0);
    return 0;
}
