/* The models behind gpt's seam (gpt_model.h): the named configs of each
 * architecture, and each call handed to the architecture's own function. */
#include "gpt_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct lm {
    lm_config config;
    tg_gpt *gpt;
};

/* small and medium are the gpt-small and gpt-medium shapes of BENCHMARKS.md;
 * task is sized to learn addition in under a minute on two cores; tiny
 * is for quick checks. */
static const struct {
    const char *name;
    int64_t block_size, n_layer, n_head, n_embd;
} shapes[] = {
    {"task", 16, 2, 4, 128},
    {"tiny", 16, 1, 2, 32},
    {"small", 64, 4, 4, 128},
    {"medium", 256, 6, 6, 384},
};

bool lm_config_named(lm_arch arch, const char *name, int64_t vocab_size, lm_config *c)
{
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (!strcmp(name, shapes[i].name)) {
            *c = (lm_config){arch, vocab_size, shapes[i].block_size, shapes[i].n_layer,
                             shapes[i].n_head, shapes[i].n_embd};
            return true;
        }
    return false;
}

void lm_config_describe(const lm_config *c, char *buf, size_t cap)
{
    snprintf(buf, cap, "vocab %lld, context %lld, %lld layers, %lld heads, d %lld",
             (long long)c->vocab_size, (long long)c->block_size, (long long)c->n_layer,
             (long long)c->n_head, (long long)c->n_embd);
}

lm *lm_new(const lm_config *c, tg_rng *init)
{
    lm *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->config = *c;
    tg_gpt_config g = {c->vocab_size, c->block_size, c->n_layer, c->n_head, c->n_embd, 0.0};
    m->gpt = tg_gpt_new(&g, TG_FLOAT32, init);
    if (!m->gpt) {
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
    return tg_gpt_forward(m->gpt, idx, targets, loss);
}

int lm_params(const lm *m, tg_params *ps)
{
    return tg_gpt_params(m->gpt, ps);
}

int lm_generate_each(lm *m, const int64_t *prompt, int64_t prompt_len, int64_t n,
                     const tg_sample_options *opts, tg_rng *rng, int64_t *out,
                     int (*on_token)(int64_t token, void *ctx), void *ctx)
{
    return tg_gpt_generate_each(m->gpt, prompt, prompt_len, n, opts, rng, out, on_token, ctx);
}

tg_rng *lm_rng(const lm *m)
{
    return tg_gpt_rng(m->gpt);
}

void lm_free(lm *m)
{
    if (!m)
        return;
    tg_gpt_free(m->gpt);
    free(m);
}
