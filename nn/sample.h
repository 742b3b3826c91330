/* Token choice shared by the language models' generation loops: the checks
 * of a generation request and the draw of one token from a row of logits
 * (greedy, temperature, top-k, top-p). Internal; never installed. */
#ifndef TG_NN_SAMPLE_H
#define TG_NN_SAMPLE_H

#include <stdint.h>

#include <tensorgrad/nn.h>

/* Checks a request to append n tokens to prompt[0..prompt_len) for the
 * public function fn (named in every message): prompt_len >= 1, n >= 0,
 * prompt tokens in [0, vocab_size), top_k >= 0, top_p in [0, 1], and unless
 * greedy a positive temperature and an rng; without o->slide, prompt_len + n
 * must fit in block_size. 0, or -1 with the error recorded. */
int tg__sample_check(const char *fn, const int64_t *prompt, int64_t prompt_len, int64_t n,
                     const tg_sample_options *o, const tg_rng *rng, int64_t vocab_size,
                     int64_t block_size);

/* A row of logits over the vocabulary and the room a draw from it needs. */
typedef struct tg__sampler tg__sampler;

/* For a vocabulary of vocab_size >= 1 tokens; NULL with TG_ERR_NOMEM
 * recorded for fn when memory runs out. */
tg__sampler *tg__sampler_new(int64_t vocab_size, const char *fn);
/* The row [vocab_size] the caller fills with the next token's logits. */
double *tg__sampler_row(tg__sampler *s);
/* A token from the row (which it overwrites) for the token at position pos
 * of the sequence, with options that passed tg__sample_check: the argmax
 * when greedy; otherwise the logits are divided by the temperature, cut to
 * the top_k largest (ties with the k-th kept), then to the nucleus (the
 * fewest most likely tokens whose probabilities sum to >= top_p, at least
 * one), and one uniform number from rng draws from what is left by inverse
 * CDF in token order. -1 with TG_ERR_VALUE, naming the function and pos,
 * when the row holds NaN or +inf or every logit is -inf. */
int64_t tg__sampler_pick(tg__sampler *s, const tg_sample_options *o, tg_rng *rng, int64_t pos);
void tg__sampler_free(tg__sampler *s);

#endif
