/* A Llama-style decoder with Hugging Face LlamaForCausalLM's names: RMSNorm
 * pre-norm blocks of rotary, grouped-query causal attention and a SwiGLU MLP,
 * no biases; generation through a KV cache of n_kv_head heads per layer. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <tensorgrad/module.h>
#include <tensorgrad/nn.h>

#include "layer_parts.h"
#include "lm.h"

/* One decoder layer; projection weights are [out, in]. */
typedef struct {
    tg_tensor *input_norm, *post_norm; /* [d] */
    tg_tensor *q, *k, *v, *o;          /* [H hd, d], [Hkv hd, d], [Hkv hd, d], [d, H hd] */
    tg_tensor *gate, *up, *down;       /* [F, d], [F, d], [d, F] */
} llama_layer;

struct tg_llama {
    tg_llama_config config;
    tg_tensor *embed;     /* [V, d] */
    llama_layer *layers;  /* n_layer */
    tg_tensor *norm;      /* [d] */
    tg_tensor *lm_head;   /* [V, d], or NULL when tied to embed */
    tg_rope_table *rope;  /* cos/sin of positions < block_size */
};

/* Keys (rotated) and values of positions 0..len-1, per layer
 * [Hkv, block_size, hd] each. */
struct tg_llama_cache {
    const tg_llama *model;
    int64_t len;
    tg_tensor **k, **v;
};

/* ---- construction ------------------------------------------------------------ */

/* A leaf the caller owns outright (the private scope keeps an enclosing one
 * from taking it), requiring grad: N(0, std^2), or ones when std is 0. */
static tg_tensor *new_param(tg_rng *rng, tg_dtype dtype, int ndim, const int64_t *shape,
                            double std)
{
    tg_scope_begin();
    tg_tensor *t = std > 0 ? tg_mul_scalar(tg_randn(rng, dtype, ndim, shape), std)
                           : tg_ones(dtype, ndim, shape);
    t = tg_retain(t);
    tg_scope_end();
    if (t && tg_set_requires_grad(t, true) < 0) {
        tg_release(t);
        return NULL;
    }
    return t;
}

static int config_fails(const char *what, const tg_llama_config *c)
{
    tg_fail(TG_ERR_VALUE, "tg_llama_new: %s (n_embd %lld, n_head %lld, n_kv_head %lld)", what,
            (long long)c->n_embd, (long long)c->n_head, (long long)c->n_kv_head);
    return -1;
}

static int check_config(const tg_llama_config *c, tg_dtype dtype)
{
    const tg__size sizes[] = {{"vocab_size", c->vocab_size}, {"block_size", c->block_size},
                              {"n_layer", c->n_layer},       {"n_head", c->n_head},
                              {"n_kv_head", c->n_kv_head},   {"n_embd", c->n_embd},
                              {"hidden_size", c->hidden_size}};
    if (tg__check_sizes("tg_llama_new", sizes, (int)(sizeof sizes / sizeof sizes[0])) < 0)
        return -1;
    if (c->n_embd % c->n_head != 0)
        return config_fails("n_embd is not a multiple of n_head", c);
    if ((c->n_embd / c->n_head) % 2 != 0)
        return config_fails("head_dim = n_embd / n_head is odd (rotary pairs need it even)", c);
    if (c->n_head % c->n_kv_head != 0)
        return config_fails("n_kv_head does not divide n_head", c);
    const struct {
        const char *name;
        double value;
    } reals[] = {{"rope_theta", c->rope_theta}, {"norm_eps", c->norm_eps}};
    for (size_t i = 0; i < 2; i++)
        if (!(isfinite(reals[i].value) && reals[i].value > 0)) {
            tg_fail(TG_ERR_VALUE, "tg_llama_new: %s = %g must be finite and positive",
                    reals[i].name, reals[i].value);
            return -1;
        }
    if (c->rope_pairing != TG_ROPE_HALF && c->rope_pairing != TG_ROPE_INTERLEAVED) {
        tg_fail(TG_ERR_VALUE, "tg_llama_new: rope_pairing = %d is neither TG_ROPE_HALF (0) "
                "nor TG_ROPE_INTERLEAVED (1)", (int)c->rope_pairing);
        return -1;
    }
    if (dtype != TG_FLOAT32 && dtype != TG_FLOAT64) {
        tg_fail(TG_ERR_DTYPE, "tg_llama_new: dtype %s is not a float dtype",
                tg_dtype_name(dtype));
        return -1;
    }
    return 0;
}

/* Draws q, k, v, o, gate, up, down in that order (Hugging Face's module order). */
static int init_layer(llama_layer *L, const tg_llama_config *c, tg_dtype dtype, tg_rng *rng)
{
    int64_t d = c->n_embd, hd = d / c->n_head, kv = c->n_kv_head * hd, f = c->hidden_size;
    L->input_norm = new_param(rng, dtype, 1, &d, 0);
    L->post_norm = L->input_norm ? new_param(rng, dtype, 1, &d, 0) : NULL;
    tg_tensor **w[] = {&L->q, &L->k, &L->v, &L->o, &L->gate, &L->up, &L->down};
    const int64_t shapes[][2] = {{d, d}, {kv, d}, {kv, d}, {d, d}, {f, d}, {f, d}, {d, f}};
    for (int i = 0; i < 7; i++) {
        *w[i] = L->post_norm ? new_param(rng, dtype, 2, shapes[i], 0.02) : NULL;
        if (!*w[i])
            return -1;
    }
    return 0;
}

static int init_weights(tg_llama *m, tg_dtype dtype, tg_rng *rng)
{
    const tg_llama_config *c = &m->config;
    int64_t d = c->n_embd;
    m->embed = new_param(rng, dtype, 2, (int64_t[]){c->vocab_size, d}, 0.02);
    if (!m->embed)
        return -1;
    for (int64_t l = 0; l < c->n_layer; l++)
        if (init_layer(&m->layers[l], c, dtype, rng) < 0)
            return -1;
    m->norm = new_param(rng, dtype, 1, &d, 0);
    if (!m->norm)
        return -1;
    if (!c->tie_embeddings &&
        !(m->lm_head = new_param(rng, dtype, 2, (int64_t[]){c->vocab_size, d}, 0.02)))
        return -1;
    m->rope = tg_rope_table_new(c->block_size, d / c->n_head, c->rope_theta, c->rope_pairing);
    return m->rope ? 0 : -1;
}

tg_llama *tg_llama_new(const tg_llama_config *config, tg_dtype dtype, tg_rng *rng)
{
    TG_CHECK_ARG(config);
    TG_CHECK_ARG(rng);
    if (check_config(config, dtype) < 0)
        return NULL;
    tg_llama *m = calloc(1, sizeof *m);
    if (m)
        m->layers = calloc((size_t)config->n_layer, sizeof *m->layers);
    if (!m || !m->layers) {
        free(m);
        return tg_fail(TG_ERR_NOMEM, "tg_llama_new: out of memory");
    }
    m->config = *config;
    bool was = tg_set_grad_enabled(false);
    int rc = init_weights(m, dtype, rng);
    tg_set_grad_enabled(was);
    if (rc < 0) {
        tg_llama_free(m);
        return NULL;
    }
    return m;
}

const tg_llama_config *tg_llama_config_of(const tg_llama *m)
{
    TG_CHECK_ARG(m);
    return &m->config;
}

void tg_llama_free(tg_llama *m)
{
    if (!m)
        return;
    for (int64_t l = 0; m->layers && l < m->config.n_layer; l++) {
        llama_layer *L = &m->layers[l];
        tg_tensor *ts[] = {L->input_norm, L->post_norm, L->q,  L->k,   L->v,
                           L->o,          L->gate,      L->up, L->down};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
            tg_release(ts[i]);
    }
    free(m->layers);
    tg_release(m->embed);
    tg_release(m->norm);
    tg_release(m->lm_head);
    tg_rope_table_free(m->rope);
    free(m);
}

/* ---- parameters ------------------------------------------------------------------ */

static int layer_params(const llama_layer *L, int64_t l, tg_params *ps)
{
    static const char *const names[] = {
        "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
        "self_attn.o_proj.weight", "mlp.gate_proj.weight",    "mlp.up_proj.weight",
        "mlp.down_proj.weight",    "input_layernorm.weight",  "post_attention_layernorm.weight"};
    tg_tensor *ts[] = {L->q, L->k, L->v, L->o, L->gate, L->up, L->down, L->input_norm,
                       L->post_norm};
    char prefix[48];
    snprintf(prefix, sizeof prefix, "model.layers.%lld", (long long)l);
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        if (tg_params_add(ps, prefix, names[i], ts[i]) < 0)
            return -1;
    return 0;
}

/* LlamaForCausalLM's state-dict order; lm_head.weight only when untied. */
int tg_llama_params(const tg_llama *m, tg_params *ps)
{
    TG_CHECK_ARG_STATUS(m);
    TG_CHECK_ARG_STATUS(ps);
    int start = ps->count;
    int rc = tg_params_add(ps, NULL, "model.embed_tokens.weight", m->embed);
    for (int64_t l = 0; rc == 0 && l < m->config.n_layer; l++)
        rc = layer_params(&m->layers[l], l, ps);
    if (rc == 0)
        rc = tg_params_add(ps, NULL, "model.norm.weight", m->norm);
    if (rc == 0 && m->lm_head)
        rc = tg_params_add(ps, NULL, "lm_head.weight", m->lm_head);
    if (rc < 0)
        tg_params_truncate(ps, start);
    return rc;
}

/* ---- the KV cache ------------------------------------------------------------------ */

int64_t tg_llama_kv_cache_bytes(const tg_llama *m)
{
    TG_CHECK_ARG_STATUS(m);
    const tg_llama_config *c = &m->config;
    /* what tg_llama_cache_new allocates: a key and a value tensor a layer */
    int64_t bytes = (int64_t)tg_dtype_size(tg_dtype_of(m->embed));
    int64_t factors[5] = {2, c->n_layer, c->n_kv_head, c->block_size, c->n_embd / c->n_head};
    for (int i = 0; i < 5; i++)
        if (__builtin_mul_overflow(bytes, factors[i], &bytes)) {
            tg_fail(TG_ERR_VALUE, "tg_llama_kv_cache_bytes: 2 * n_layer %lld * [%lld, %lld, "
                    "%lld] elements overflow int64", (long long)c->n_layer,
                    (long long)factors[2], (long long)factors[3], (long long)factors[4]);
            return -1;
        }
    return bytes;
}

tg_llama_cache *tg_llama_cache_new(const tg_llama *m)
{
    TG_CHECK_ARG(m);
    const tg_llama_config *c = &m->config;
    int64_t shape[3] = {c->n_kv_head, c->block_size, c->n_embd / c->n_head};
    tg_llama_cache *kv = calloc(1, sizeof *kv);
    if (kv) {
        kv->k = calloc((size_t)c->n_layer, sizeof *kv->k);
        kv->v = calloc((size_t)c->n_layer, sizeof *kv->v);
    }
    if (!kv || !kv->k || !kv->v) {
        tg_llama_cache_free(kv);
        return tg_fail(TG_ERR_NOMEM, "tg_llama_cache_new: out of memory");
    }
    kv->model = m;
    tg_dtype dtype = tg_dtype_of(m->embed);
    tg_scope_begin(); /* private, so that an enclosing scope does not take the tensors */
    for (int64_t l = 0; l < c->n_layer; l++) {
        kv->k[l] = tg_retain(tg_zeros(dtype, 3, shape));
        kv->v[l] = kv->k[l] ? tg_retain(tg_zeros(dtype, 3, shape)) : NULL;
        if (!kv->v[l]) {
            tg_scope_end();
            tg_llama_cache_free(kv);
            return NULL;
        }
    }
    tg_scope_end();
    return kv;
}

int64_t tg_llama_cache_len(const tg_llama_cache *c)
{
    TG_CHECK_ARG_STATUS(c);
    return c->len;
}

void tg_llama_cache_reset(tg_llama_cache *c)
{
    if (c)
        c->len = 0;
}

void tg_llama_cache_free(tg_llama_cache *c)
{
    if (!c)
        return;
    for (int64_t l = 0; c->model && l < c->model->config.n_layer; l++) {
        tg_release(c->k ? c->k[l] : NULL);
        tg_release(c->v ? c->v[l] : NULL);
    }
    free(c->k);
    free(c->v);
    free(c);
}

/* Copies k and v [1, Hkv, T, hd] (any layout) into layer l's cache at
 * positions pos0..pos0+T-1. Grad mode is off (the cache is generation's). */
static int cache_write(tg_llama_cache *c, int64_t l, const tg_tensor *k, const tg_tensor *v,
                       int64_t pos0)
{
    if (!k || !v)
        return -1;
    const int64_t *cs = tg_shape(c->k[l]); /* [Hkv, S, hd] */
    int64_t H = cs[0], S = cs[1], T = tg_shape(k)[2];
    size_t row = (size_t)cs[2] * tg_dtype_size(tg_dtype_of(k));
    const tg_tensor *src[2] = {k, v};
    tg_tensor *dst[2] = {c->k[l], c->v[l]};
    int rc = 0;
    tg_scope_begin(); /* holds the contiguous copies */
    for (int i = 0; i < 2 && rc == 0; i++) {
        const char *from = tg_data_const(tg_contiguous(src[i]));
        char *to = from ? tg_data(dst[i]) : NULL;
        if (!to) {
            rc = -1;
            break;
        }
        for (int64_t h = 0; h < H; h++)
            memcpy(to + (size_t)(h * S + pos0) * row, from + (size_t)(h * T) * row,
                   (size_t)T * row);
    }
    tg_scope_end();
    return rc;
}

/* ---- forward ----------------------------------------------------------------------- */
/* These run inside the caller's scope: intermediates are released at its end. */

/* [B, T, n hd] -> heads [B, n, T, hd], a view. */
static tg_tensor *split_heads(const tg_tensor *x, int64_t n, int64_t hd)
{
    const int64_t *s = tg_shape(x);
    return tg_transpose(tg_reshape(x, 4, (int64_t[]){s[0], s[1], n, hd}), 1, 2);
}

/* Causal grouped-query self-attention of input_layernorm(x) at positions
 * pos0..: x [B, T, d] -> o_proj(heads merged) [B, T, d]. Each projection
 * normalises x again inside one op, so the normalised x is never held. With
 * a cache (B = 1) the new keys and values join the cached ones first. */
static tg_tensor *attention(const tg_llama *m, const llama_layer *L, const tg_tensor *x,
                            tg_llama_cache *cache, int64_t l, int64_t pos0)
{
    const tg_llama_config *c = &m->config;
    int64_t B = tg_shape(x)[0], T = tg_shape(x)[1], hd = c->n_embd / c->n_head;
    double eps = c->norm_eps;
    tg_tensor *q = tg_rms_norm_affine(x, L->input_norm, eps, L->q, NULL); /* [B, T, H hd] */
    tg_tensor *k = tg_rms_norm_affine(x, L->input_norm, eps, L->k, NULL); /* [B, T, Hkv hd] */
    tg_tensor *v = tg_rms_norm_affine(x, L->input_norm, eps, L->v, NULL);
    q = tg_rope(split_heads(q, c->n_head, hd), m->rope, pos0); /* [B, H, T, hd] */
    k = tg_rope(split_heads(k, c->n_kv_head, hd), m->rope, pos0);
    v = split_heads(v, c->n_kv_head, hd);
    const tg_tensor *mask = NULL;
    if (cache) {
        if (cache_write(cache, l, k, v, pos0) < 0)
            return NULL;
        k = tg_unsqueeze(tg_narrow(cache->k[l], 1, 0, pos0 + T), 0); /* [1, Hkv, S, hd] */
        v = tg_unsqueeze(tg_narrow(cache->v[l], 1, 0, pos0 + T), 0);
        if (pos0 > 0 && T > 1 && !(mask = tg__offset_causal_mask(T, pos0)))
            return NULL;
    }
    /* query head i reads kv head i / (H / Hkv) in place */
    tg_tensor *y = tg_attention(q, k, v, mask, !mask && pos0 == 0, 0, 0, NULL); /* [B,H,T,hd] */
    y = tg_reshape(tg_transpose(y, 1, 2), 3, (int64_t[]){B, T, c->n_embd});
    return tg_affine(y, L->o, NULL);
}

/* h = x + attn(input_layernorm(x)); h + down(silu(gate(n)) * up(n)) with
 * n = post_attention_layernorm(h). Each branch has a scope of its own:
 * under bf16 the graph keeps q, k, gate and up in bfloat16, and their
 * float32 data goes as the branch ends rather than with the layer. */
static tg_tensor *layer_forward(const tg_llama *m, const llama_layer *L, tg_tensor *x,
                                tg_llama_cache *cache, int64_t l, int64_t pos0)
{
    double eps = m->config.norm_eps;
    tg_scope_begin();
    tg_tensor *h = tg_add(x, tg_scope_end_keep(attention(m, L, x, cache, l, pos0)));
    tg_scope_begin();
    tg_tensor *gate = tg_rms_norm_affine(h, L->post_norm, eps, L->gate, NULL); /* [B, T, F] */
    tg_tensor *up = tg_rms_norm_affine(h, L->post_norm, eps, L->up, NULL);
    /* down_proj(silu(gate) * up) as one op: the product is not kept */
    return tg_add(h, tg_scope_end_keep(tg_swiglu_affine(gate, up, L->down, NULL)));
}

/* idx int64 [B, T] at positions pos0.. -> logits [B, T', V] of its last
 * T' = last_only ? 1 : T positions. cache is NULL, or generation's. */
static tg_tensor *logits_of(const tg_llama *m, const tg_tensor *idx, tg_llama_cache *cache,
                            int64_t pos0, bool last_only)
{
    int64_t T = tg_shape(idx)[1];
    tg_tensor *x = tg_embedding(m->embed, idx); /* [B, T, d] */
    for (int64_t l = 0; x && l < m->config.n_layer; l++) {
        /* A layer's own scope: what it made and the graph does not keep (the
         * branches' outputs before each residual add) goes when it ends. */
        tg_scope_begin();
        x = tg_scope_end_keep(layer_forward(m, &m->layers[l], x, cache, l, pos0));
    }
    if (last_only && x)
        x = tg_narrow(x, 1, T - 1, 1);
    /* model.norm and lm_head in one op */
    return tg_rms_norm_affine(x, m->norm, m->config.norm_eps, m->lm_head ? m->lm_head : m->embed,
                              NULL);
}

tg_tensor *tg_llama_forward(const tg_llama *m, const tg_tensor *idx, const tg_tensor *targets,
                            tg_tensor **loss)
{
    if (loss)
        *loss = NULL;
    TG_CHECK_ARG(m);
    TG_CHECK_ARG(idx);
    bool want_loss = targets && loss;
    int64_t block = m->config.block_size;
    if (tg__check_idx(__func__, idx, m->config.vocab_size, block, block) < 0 ||
        (want_loss && tg__check_targets(__func__, idx, targets) < 0))
        return NULL;
    int64_t B = tg_shape(idx)[0], T = tg_shape(idx)[1], V = m->config.vocab_size;
    tg_scope_begin();
    tg_tensor *logits = logits_of(m, idx, NULL, 0, false); /* [B, T, V] */
    tg_tensor *l = NULL;
    if (want_loss && logits) {
        /* flattened to [B T, V] against [B T]; -1 marks padding */
        l = tg_retain(tg_cross_entropy(tg_reshape(logits, 2, (int64_t[]){B * T, V}),
                                       tg_reshape(targets, 1, (int64_t[]){B * T}), -1));
        if (!l)
            logits = NULL;
    }
    logits = tg_scope_end_keep(logits);
    if (l)
        *loss = tg_scope_adopt(l); /* to the caller's scope, like logits */
    return logits;
}

/* The cached forward without argument checks: logits of idx [1, T]'s last
 * position (last_only) or of all T; c->len advances only on success. */
static tg_tensor *forward_cached(const tg_llama *m, tg_llama_cache *c, const tg_tensor *idx,
                                 bool last_only)
{
    bool was = tg_set_grad_enabled(false);
    tg_scope_begin();
    tg_tensor *logits = tg_scope_end_keep(logits_of(m, idx, c, c->len, last_only));
    tg_set_grad_enabled(was);
    if (logits)
        c->len += tg_shape(idx)[1];
    return logits;
}

tg_tensor *tg_llama_forward_cached(const tg_llama *m, tg_llama_cache *c, const tg_tensor *idx)
{
    TG_CHECK_ARG(m);
    TG_CHECK_ARG(c);
    TG_CHECK_ARG(idx);
    if (c->model != m)
        return tg_fail(TG_ERR_VALUE, "tg_llama_forward_cached: the cache was made for "
                       "another model");
    int64_t block = m->config.block_size;
    if (tg__check_idx(__func__, idx, m->config.vocab_size, block - c->len, block) < 0)
        return NULL;
    if (tg_shape(idx)[0] != 1)
        return tg_fail(TG_ERR_SHAPE, "tg_llama_forward_cached: idx %s is not one sequence "
                       "[1, T]", TG_SHAPE_STRING(idx));
    return forward_cached(m, c, idx, false);
}

/* ---- generation ---------------------------------------------------------------------- */

/* What generation's steps share: the model and its cache, made at the first. */
typedef struct {
    const tg_llama *m;
    tg_llama_cache *cache;
} generation;

/* tg__gen_stepper's step: tokens [T] at positions pos0.. of the cache, whose
 * positions from pos0 on are dropped first; the last one's logits to row. */
static int next_logits(void *model, const int64_t *tokens, int64_t T, int64_t pos0, double *row)
{
    generation *g = model;
    if (!g->cache && !(g->cache = tg_llama_cache_new(g->m)))
        return -1;
    g->cache->len = pos0;
    tg_scope_begin();
    tg_tensor *idx = tg_from_data(TG_INT64, 2, (int64_t[]){1, T}, tokens);
    tg_tensor *logits = idx ? forward_cached(g->m, g->cache, idx, true) : NULL; /* [1, 1, V] */
    int rc = logits ? tg_copy_to(logits, TG_FLOAT64, row, g->m->config.vocab_size) : -1;
    tg_scope_end();
    return rc;
}

int tg_llama_generate(tg_llama *m, const int64_t *prompt, int64_t prompt_len, int64_t n,
                      const tg_sample_options *opts, tg_rng *rng, int64_t *out)
{
    return tg_llama_generate_each(m, prompt, prompt_len, n, opts, rng, out, NULL, NULL);
}

/* On a cache made at the first step. Past block_size (opts->slide) the
 * cache is rebuilt from the slid window: every token's rotation changed. */
int tg_llama_generate_each(tg_llama *m, const int64_t *prompt, int64_t prompt_len, int64_t n,
                           const tg_sample_options *opts, tg_rng *rng, int64_t *out,
                           int (*on_token)(int64_t token, void *ctx), void *ctx)
{
    TG_CHECK_ARG_STATUS(m);
    TG_CHECK_ARG_STATUS(prompt);
    TG_CHECK_ARG_STATUS(opts);
    TG_CHECK_ARG_STATUS(out);
    generation g = {m, NULL};
    tg__gen_stepper d = {.fn = "tg_llama_generate", .vocab_size = m->config.vocab_size,
                         .block_size = m->config.block_size, .step = next_logits, .model = &g};
    int rc = tg__generate(&d, prompt, prompt_len, n, opts, rng, out, on_token, ctx);
    tg_llama_cache_free(g.cache);
    return rc;
}
