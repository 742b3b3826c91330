/* The models behind gpt's seam (gpt_model.h): the named configs of each
 * architecture, and each call handed to the architecture's own function. */
#include "gpt_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct lm {
    lm_config config;
    tg_gpt *gpt;     /* one of the two */
    tg_llama *llama;
};

const char *lm_arch_name(lm_arch arch)
{
    return arch == LM_LLAMA ? "llama" : "gpt";
}

bool lm_arch_parse(const char *name, lm_arch *arch)
{
    if (strcmp(name, "gpt") && strcmp(name, "llama"))
        return false;
    *arch = strcmp(name, "gpt") ? LM_LLAMA : LM_GPT;
    return true;
}

/* small and medium are the gpt-small and gpt-medium shapes of BENCHMARKS.md
 * (llama-medium: the width, depth and context of gpt-medium); task is sized
 * to learn addition in under a minute on two cores; tiny is for quick
 * checks. A Llama's key/value heads and MLP width are the last two columns;
 * examples/gpt_train_torch.py --arch llama builds the same shapes. */
static const struct {
    const char *name;
    int64_t block_size, n_layer, n_head, n_embd, n_kv_head, hidden_size;
} shapes[] = {
    {"task", 16, 2, 4, 128, 2, 384},
    {"tiny", 16, 1, 2, 32, 1, 96},
    {"small", 64, 4, 4, 128, 2, 384},
    {"medium", 256, 6, 6, 384, 2, 1024},
};

bool lm_config_named(lm_arch arch, const char *name, int64_t vocab_size, lm_config *c)
{
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        if (strcmp(name, shapes[i].name))
            continue;
        *c = (lm_config){.arch = arch, .vocab_size = vocab_size,
                         .block_size = shapes[i].block_size, .n_layer = shapes[i].n_layer,
                         .n_head = shapes[i].n_head, .n_embd = shapes[i].n_embd};
        if (arch == LM_LLAMA) { /* Llama 2's rope theta and norm eps, the head tied */
            c->n_kv_head = shapes[i].n_kv_head;
            c->hidden_size = shapes[i].hidden_size;
            c->rope_theta = 10000;
            c->norm_eps = 1e-5;
            c->tie_embeddings = true;
            c->rope_pairing = TG_ROPE_HALF;
        }
        return true;
    }
    return false;
}

void lm_config_describe(const lm_config *c, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "vocab %lld, context %lld, %lld layers, %lld heads, d %lld",
                     (long long)c->vocab_size, (long long)c->block_size, (long long)c->n_layer,
                     (long long)c->n_head, (long long)c->n_embd);
    if (c->arch == LM_LLAMA && n >= 0 && (size_t)n < cap)
        snprintf(buf + n, cap - (size_t)n, ", %lld kv heads, hidden %lld",
                 (long long)c->n_kv_head, (long long)c->hidden_size);
}

static tg_llama *new_llama(const lm_config *c, tg_rng *init)
{
    tg_llama_config l = {.vocab_size = c->vocab_size, .block_size = c->block_size,
                         .n_layer = c->n_layer, .n_head = c->n_head, .n_kv_head = c->n_kv_head,
                         .n_embd = c->n_embd, .hidden_size = c->hidden_size,
                         .rope_theta = c->rope_theta, .norm_eps = c->norm_eps,
                         .tie_embeddings = c->tie_embeddings, .rope_pairing = c->rope_pairing};
    return tg_llama_new(&l, TG_FLOAT32, init);
}

lm *lm_new(const lm_config *c, tg_rng *init)
{
    lm *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->config = *c;
    tg_gpt_config g = {c->vocab_size, c->block_size, c->n_layer, c->n_head, c->n_embd, 0.0};
    if (c->arch == LM_LLAMA)
        m->llama = new_llama(c, init);
    else
        m->gpt = tg_gpt_new(&g, TG_FLOAT32, init);
    if (!m->gpt && !m->llama) {
        free(m);
        return NULL;
    }
    return m;
}

const lm_config *lm_config_of(const lm *m)
{
    return &m->config;
}

tg_tensor *lm_forward(const lm *m, const tg_tensor *idx, const tg_tensor *targets,
                      tg_tensor **loss)
{
    if (m->llama)
        return tg_llama_forward(m->llama, idx, targets, loss);
    return tg_gpt_forward(m->gpt, idx, targets, loss);
}

int lm_params(const lm *m, tg_params *ps)
{
    return m->llama ? tg_llama_params(m->llama, ps) : tg_gpt_params(m->gpt, ps);
}

int lm_generate_each(lm *m, const int64_t *prompt, int64_t prompt_len, int64_t n,
                     const tg_sample_options *opts, tg_rng *rng, int64_t *out,
                     int (*on_token)(int64_t token, void *ctx), void *ctx)
{
    if (m->llama)
        return tg_llama_generate_each(m->llama, prompt, prompt_len, n, opts, rng, out, on_token,
                                      ctx);
    return tg_gpt_generate_each(m->gpt, prompt, prompt_len, n, opts, rng, out, on_token, ctx);
}

tg_rng *lm_rng(const lm *m)
{
    return m->llama ? NULL : tg_gpt_rng(m->gpt); /* a Llama has no dropout */
}

void lm_free(lm *m)
{
    if (!m)
        return;
    tg_gpt_free(m->gpt);
    tg_llama_free(m->llama);
    free(m);
}
