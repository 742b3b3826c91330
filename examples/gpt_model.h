/* The language models gpt trains, behind one seam: the training loop, the
 * evaluation, sampling and the checkpoints speak to an `lm` and never ask
 * which architecture it is (nn.h's tg_gpt, or its Llama-style tg_llama). */
#ifndef GPT_MODEL_H
#define GPT_MODEL_H

#include <stddef.h>

#include <tensorgrad/tensorgrad.h>

typedef enum { LM_GPT = 0, LM_LLAMA = 1 } lm_arch;

/* One config for every architecture: the shared sizes first, then what only
 * a Llama has (zero for a GPT). */
typedef struct {
    lm_arch arch;
    int64_t vocab_size, block_size, n_layer, n_head, n_embd;
    int64_t n_kv_head, hidden_size; /* key/value heads; the SwiGLU MLP's width */
    double rope_theta, norm_eps;
    bool tie_embeddings; /* the output head is the token embedding */
    tg_rope_pairing rope_pairing;
} lm_config;

/* "gpt" or "llama"; parse: false for any other name. */
const char *lm_arch_name(lm_arch arch);
bool lm_arch_parse(const char *name, lm_arch *arch);

typedef struct lm lm;

/* The config called name (task, tiny, small, medium) of arch, for a
 * vocabulary of vocab_size tokens. false for an unknown name. */
bool lm_config_named(lm_arch arch, const char *name, int64_t vocab_size, lm_config *c);

/* "vocab V, context T, L layers, H heads, d D" into buf (cap bytes); a
 * Llama adds ", K kv heads, hidden F". */
void lm_config_describe(const lm_config *c, char *buf, size_t cap);

/* A new model with weights drawn from init (borrowed), float32. NULL with
 * the library's error set when the config is refused. */
lm *lm_new(const lm_config *c, tg_rng *init);
const lm_config *lm_config_of(const lm *m);

/* idx int64 [B, T] (T <= block_size) -> logits [B, T, vocab]; *loss the
 * mean cross-entropy against targets (int64 [B, T], -1 ignored). */
tg_tensor *lm_forward(const lm *m, const tg_tensor *idx, const tg_tensor *targets,
                      tg_tensor **loss);
/* The trainable tensors, under the architecture's own names. */
int lm_params(const lm *m, tg_params *ps);
/* As tg_gpt_generate_each. */
int lm_generate_each(lm *m, const int64_t *prompt, int64_t prompt_len, int64_t n,
                     const tg_sample_options *opts, tg_rng *rng, int64_t *out,
                     int (*on_token)(int64_t token, void *ctx), void *ctx);
/* The generator dropout draws from (owned by the model), or NULL for a model
 * without dropout. */
tg_rng *lm_rng(const lm *m);
/* lm_free(NULL) does nothing. */
void lm_free(lm *m);

#endif
