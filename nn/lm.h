/* What the language models (gpt.c, llama.c) share: the checks of a token
 * batch, and the generation loop (the request's checks, the context window
 * that slides past block_size, a cache that runs each new token as one
 * position, the token choice of sample.h). Internal. */
#ifndef TG_NN_LM_H
#define TG_NN_LM_H

#include <stdint.h>

#include <tensorgrad/nn.h>

/* idx int64 [B, T] with 1 <= T <= max_len (block_size, or less when a
 * cache holds positions already) and tokens in [0, vocab_size); fn is named
 * in the message. 0, or -1 with the error recorded. */
int tg__check_idx(const char *fn, const tg_tensor *idx, int64_t vocab_size, int64_t max_len,
                  int64_t block_size);
/* targets int64 [B, T] like idx. 0, or -1 with the error recorded. */
int tg__check_targets(const char *fn, const tg_tensor *idx, const tg_tensor *targets);

/* A model config's sizes: every value must be positive (the first that is
 * not is named), then the one named "n_layer" at most 2^20; fn is named in
 * the message. 0, or -1 with TG_ERR_VALUE recorded. */
typedef struct {
    const char *name;
    int64_t value;
} tg__size;
int tg__check_sizes(const char *fn, const tg__size *sizes, int n);

/* A model as the generation loop steps it: step runs tokens[0..T) at positions
 * pos0..pos0+T-1, the model's cache holding the window's positions below
 * pos0 (pos0 = 0: start the cache again), adds them to the cache and
 * writes the last position's logits to row [vocab_size]; 0 or -1. */
typedef struct {
    const char *fn; /* the public function, named in messages */
    int64_t vocab_size, block_size;
    int (*step)(void *model, const int64_t *tokens, int64_t T, int64_t pos0, double *row);
    void *model;
} tg__gen_stepper;

/* tg_gpt_generate_each's contract for any stepper: checks the request
 * (tg__sample_check), copies the prompt to out, then appends n tokens, each
 * handed to on_token (may be NULL; nonzero stops, not an error). When the
 * sequence outgrows block_size the window becomes its last block_size
 * tokens and the cache is rebuilt from them (step at pos0 = 0). Runs with
 * grad mode off. 0, or -1 with the error recorded: logits that hold NaN or
 * +inf stop it with TG_ERR_VALUE naming the position (out then holds the
 * tokens made before it). */
int tg__generate(const tg__gen_stepper *d, const int64_t *prompt, int64_t prompt_len, int64_t n,
                 const tg_sample_options *opts, tg_rng *rng, int64_t *out,
                 int (*on_token)(int64_t token, void *ctx), void *ctx);

#endif
