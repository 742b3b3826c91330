/* GPT-2 as in nanoGPT: token and position embeddings, pre-norm blocks of
 * causal self-attention and a GELU MLP, a final LayerNorm and an LM head tied
 * to the token embedding; generation with a per-layer KV cache. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <tensorgrad/module.h>
#include <tensorgrad/nn.h>

#include "lm.h"

/* One transformer block; Linear weights are [out, in]. */
typedef struct {
    tg_layer_norm_module *ln_1, *ln_2;
    tg_linear *c_attn;    /* d -> 3d: q, k and v side by side */
    tg_linear *attn_proj; /* d -> d ("attn.c_proj") */
    tg_linear *c_fc;      /* d -> 4d */
    tg_linear *mlp_proj;  /* 4d -> d ("mlp.c_proj") */
} gpt_block;

struct tg_gpt {
    tg_gpt_config config;
    bool train;                     /* dropout on when true (the default, as in PyTorch) */
    tg_rng *drop_rng;               /* owned: dropout masks, seeded from the init rng */
    tg_embedding_module *wte, *wpe; /* [vocab, d], [block_size, d] */
    gpt_block *h;                   /* n_layer blocks */
    tg_layer_norm_module *ln_f;
};

/* Keys and values of the positions seen so far in generation, per layer:
 * [n_head, block_size, head_dim] each, filled from position 0 up. */
typedef struct {
    tg_tensor *k, *v;
} kv_cache;

/* ---- construction ------------------------------------------------------------ */

/* A leaf N(0, std^2) the caller owns outright (the private scope keeps an
 * enclosing one from taking it), requiring grad. */
static tg_tensor *normal_param(tg_rng *rng, tg_dtype dtype, int ndim, const int64_t *shape,
                               double std)
{
    tg_scope_begin();
    tg_tensor *t = tg_retain(tg_mul_scalar(tg_randn(rng, dtype, ndim, shape), std));
    tg_scope_end();
    if (t && tg_set_requires_grad(t, true) < 0) {
        tg_release(t);
        return NULL;
    }
    return t;
}

static tg_tensor *zero_param(tg_dtype dtype, int64_t n)
{
    tg_scope_begin();
    tg_tensor *t = tg_retain(tg_zeros(dtype, 1, (int64_t[]){n}));
    tg_scope_end();
    if (t && tg_set_requires_grad(t, true) < 0) {
        tg_release(t);
        return NULL;
    }
    return t;
}

/* A Linear with GPT-2's init: weight N(0, std^2), bias zeros. */
static tg_linear *gpt_linear(int64_t in, int64_t out, double std, tg_dtype dtype, tg_rng *rng)
{
    tg_linear *m = calloc(1, sizeof *m);
    if (!m)
        return tg_fail(TG_ERR_NOMEM, "tg_gpt_new: out of memory");
    m->in_features = in;
    m->out_features = out;
    m->weight = normal_param(rng, dtype, 2, (int64_t[]){out, in}, std);
    m->bias = m->weight ? zero_param(dtype, out) : NULL;
    if (!m->bias) {
        tg_linear_free(m);
        return NULL;
    }
    return m;
}

static tg_embedding_module *gpt_embedding(int64_t num, int64_t dim, tg_dtype dtype, tg_rng *rng)
{
    tg_embedding_module *m = calloc(1, sizeof *m);
    if (!m)
        return tg_fail(TG_ERR_NOMEM, "tg_gpt_new: out of memory");
    m->num_embeddings = num;
    m->embedding_dim = dim;
    m->weight = normal_param(rng, dtype, 2, (int64_t[]){num, dim}, 0.02);
    if (!m->weight) {
        tg_embedding_module_free(m);
        return NULL;
    }
    return m;
}

static int check_config(const tg_gpt_config *c, tg_dtype dtype)
{
    const tg__size sizes[] = {{"vocab_size", c->vocab_size}, {"block_size", c->block_size},
                              {"n_layer", c->n_layer},       {"n_head", c->n_head},
                              {"n_embd", c->n_embd}};
    if (tg__check_sizes("tg_gpt_new", sizes, (int)(sizeof sizes / sizeof sizes[0])) < 0)
        return -1;
    if (c->n_embd % c->n_head != 0) {
        tg_fail(TG_ERR_VALUE, "tg_gpt_new: n_embd = %lld is not a multiple of n_head = %lld",
                (long long)c->n_embd, (long long)c->n_head);
        return -1;
    }
    if (!(c->dropout >= 0 && c->dropout < 1)) {
        tg_fail(TG_ERR_VALUE, "tg_gpt_new: dropout = %g is outside [0, 1)", c->dropout);
        return -1;
    }
    if (dtype != TG_FLOAT32 && dtype != TG_FLOAT64) {
        tg_fail(TG_ERR_DTYPE, "tg_gpt_new: dtype %s is not a float dtype", tg_dtype_name(dtype));
        return -1;
    }
    return 0;
}

/* Draws in a fixed order: wte, wpe, then per block c_attn.weight,
 * attn.c_proj.weight, c_fc.weight, mlp.c_proj.weight; finally one number
 * seeds the model's dropout generator. The residual projections get
 * std 0.02/sqrt(2 n_layer) (GPT-2's scaling for the residual stream). */
static int init_weights(tg_gpt *m, tg_dtype dtype, tg_rng *rng)
{
    const tg_gpt_config *c = &m->config;
    int64_t d = c->n_embd;
    double proj_std = 0.02 / sqrt(2.0 * (double)c->n_layer);
    m->wte = gpt_embedding(c->vocab_size, d, dtype, rng);
    m->wpe = m->wte ? gpt_embedding(c->block_size, d, dtype, rng) : NULL;
    if (!m->wpe)
        return -1;
    for (int64_t l = 0; l < c->n_layer; l++) {
        gpt_block *b = &m->h[l];
        b->ln_1 = tg_layer_norm_module_new(1, &d, 1e-5, true, dtype);
        b->c_attn = b->ln_1 ? gpt_linear(d, 3 * d, 0.02, dtype, rng) : NULL;
        b->attn_proj = b->c_attn ? gpt_linear(d, d, proj_std, dtype, rng) : NULL;
        b->ln_2 = b->attn_proj ? tg_layer_norm_module_new(1, &d, 1e-5, true, dtype) : NULL;
        b->c_fc = b->ln_2 ? gpt_linear(d, 4 * d, 0.02, dtype, rng) : NULL;
        b->mlp_proj = b->c_fc ? gpt_linear(4 * d, d, proj_std, dtype, rng) : NULL;
        if (!b->mlp_proj)
            return -1;
    }
    m->ln_f = tg_layer_norm_module_new(1, &d, 1e-5, true, dtype);
    if (!m->ln_f)
        return -1;
    m->drop_rng = tg_rng_new(tg_rng_next(rng));
    if (!m->drop_rng) {
        tg_fail(TG_ERR_NOMEM, "tg_gpt_new: out of memory");
        return -1;
    }
    return 0;
}

tg_gpt *tg_gpt_new(const tg_gpt_config *config, tg_dtype dtype, tg_rng *rng)
{
    TG_CHECK_ARG(config);
    TG_CHECK_ARG(rng);
    if (check_config(config, dtype) < 0)
        return NULL;
    tg_gpt *m = calloc(1, sizeof *m);
    if (m)
        m->h = calloc((size_t)config->n_layer, sizeof *m->h);
    if (!m || !m->h) {
        free(m);
        return tg_fail(TG_ERR_NOMEM, "tg_gpt_new: out of memory");
    }
    m->config = *config;
    m->train = true;
    bool was = tg_set_grad_enabled(false);
    int rc = init_weights(m, dtype, rng);
    tg_set_grad_enabled(was);
    if (rc < 0) {
        tg_gpt_free(m);
        return NULL;
    }
    return m;
}

const tg_gpt_config *tg_gpt_config_of(const tg_gpt *m)
{
    TG_CHECK_ARG(m);
    return &m->config;
}

tg_rng *tg_gpt_rng(const tg_gpt *m)
{
    TG_CHECK_ARG(m);
    return m->drop_rng;
}

void tg_gpt_set_train(tg_gpt *m, bool train)
{
    if (m)
        m->train = train;
}

void tg_gpt_free(tg_gpt *m)
{
    if (!m)
        return;
    for (int64_t l = 0; m->h && l < m->config.n_layer; l++) {
        gpt_block *b = &m->h[l];
        tg_layer_norm_module_free(b->ln_1);
        tg_layer_norm_module_free(b->ln_2);
        tg_linear_free(b->c_attn);
        tg_linear_free(b->attn_proj);
        tg_linear_free(b->c_fc);
        tg_linear_free(b->mlp_proj);
    }
    free(m->h);
    tg_embedding_module_free(m->wte);
    tg_embedding_module_free(m->wpe);
    tg_layer_norm_module_free(m->ln_f);
    tg_rng_free(m->drop_rng);
    free(m);
}

/* ---- parameters ------------------------------------------------------------------ */

/* Takes the entries from start on back out of ps: params are all or nothing. */
static void truncate_params(tg_params *ps, int start)
{
    while (ps->count > start) {
        ps->count--;
        free(ps->names[ps->count]);
        tg_release(ps->tensors[ps->count]);
    }
}

static int block_params(const gpt_block *b, int64_t l, tg_params *ps)
{
    char p[96];
#define BLOCK_PREFIX(part) (snprintf(p, sizeof p, "transformer.h.%lld." part, (long long)l), p)
    if (tg_layer_norm_module_params(b->ln_1, BLOCK_PREFIX("ln_1"), ps) < 0 ||
        tg_linear_params(b->c_attn, BLOCK_PREFIX("attn.c_attn"), ps) < 0 ||
        tg_linear_params(b->attn_proj, BLOCK_PREFIX("attn.c_proj"), ps) < 0 ||
        tg_layer_norm_module_params(b->ln_2, BLOCK_PREFIX("ln_2"), ps) < 0 ||
        tg_linear_params(b->c_fc, BLOCK_PREFIX("mlp.c_fc"), ps) < 0 ||
        tg_linear_params(b->mlp_proj, BLOCK_PREFIX("mlp.c_proj"), ps) < 0)
        return -1;
#undef BLOCK_PREFIX
    return 0;
}

/* PyTorch's state-dict order, without lm_head.weight (it is wte's weight). */
int tg_gpt_params(const tg_gpt *m, tg_params *ps)
{
    TG_CHECK_ARG_STATUS(m);
    TG_CHECK_ARG_STATUS(ps);
    int start = ps->count;
    int rc = tg_embedding_module_params(m->wte, "transformer.wte", ps);
    if (rc == 0)
        rc = tg_embedding_module_params(m->wpe, "transformer.wpe", ps);
    for (int64_t l = 0; rc == 0 && l < m->config.n_layer; l++)
        rc = block_params(&m->h[l], l, ps);
    if (rc == 0)
        rc = tg_layer_norm_module_params(m->ln_f, "transformer.ln_f", ps);
    if (rc < 0)
        truncate_params(ps, start);
    return rc;
}

/* ---- forward ----------------------------------------------------------------------- */
/* These run inside the caller's scope: intermediates are released at its end. */

static tg_tensor *maybe_dropout(const tg_gpt *m, tg_tensor *x, double p)
{
    return p > 0 ? tg_dropout(x, p, true, m->drop_rng) : x;
}

/* [B, T, d] slice of the fused qkv -> heads [B, H, T, Dh], as a view when it can be. */
static tg_tensor *split_heads(const tg_tensor *x, int64_t B, int64_t T, int64_t H, int64_t Dh)
{
    return tg_transpose(tg_reshape(x, 4, (int64_t[]){B, T, H, Dh}), 1, 2);
}

/* Copies k and v [1, H, T, Dh] into the cache at positions pos0..pos0+T-1.
 * Runs with grad mode off (generation only). */
static int cache_write(kv_cache *c, const tg_tensor *k, const tg_tensor *v, int64_t pos0)
{
    if (!k || !v)
        return -1;
    const int64_t *cs = tg_shape(c->k); /* [H, S, Dh] */
    int64_t H = cs[0], S = cs[1], Dh = cs[2], T = tg_shape(k)[2];
    size_t row = (size_t)Dh * tg_dtype_size(tg_dtype_of(k));
    const tg_tensor *src[2] = {k, v};
    tg_tensor *dst[2] = {c->k, c->v};
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
            for (int64_t t = 0; t < T; t++)
                memcpy(to + (size_t)(h * S + pos0 + t) * row, from + (size_t)(h * T + t) * row,
                       row);
    }
    tg_scope_end();
    return rc;
}

/* lin(ln(x)) as one op, which keeps x alone for backward: the normalised x
 * is made again there instead of held beside the residual stream. */
static tg_tensor *norm_linear(const tg_layer_norm_module *ln, const tg_linear *lin,
                              const tg_tensor *x)
{
    return tg_layer_norm_affine(x, ln->weight, ln->bias, ln->eps, lin->weight, lin->bias);
}

/* Causal self-attention of ln_1(x): x [B, T, d] -> [B, T, d]. With a cache
 * (B = 1, generation) the new keys and values go in at positions pos0.. and
 * the queries attend over all pos0 + T cached positions; T > 1 only with
 * pos0 = 0, so is_causal's mask (key j > query i) is the right one. */
static tg_tensor *attention(const tg_gpt *m, const gpt_block *b, const tg_tensor *x,
                            kv_cache *cache, int64_t pos0, double p)
{
    int64_t B = tg_shape(x)[0], T = tg_shape(x)[1], d = m->config.n_embd, H = m->config.n_head;
    int64_t Dh = d / H;
    tg_tensor *qkv = norm_linear(b->ln_1, b->c_attn, x); /* [B, T, 3d] */
    tg_tensor *y;
    if (!cache) {
        /* the heads read from qkv in place, their gradients written into one */
        y = tg_attention_qkvpacked(qkv, H, true, 0, p, m->drop_rng); /* [B, T, d] */
    } else {
        tg_tensor *q = split_heads(tg_narrow(qkv, 2, 0, d), B, T, H, Dh);
        tg_tensor *k = split_heads(tg_narrow(qkv, 2, d, d), B, T, H, Dh);
        tg_tensor *v = split_heads(tg_narrow(qkv, 2, 2 * d, d), B, T, H, Dh);
        if (cache_write(cache, k, v, pos0) < 0)
            return NULL;
        k = tg_unsqueeze(tg_narrow(cache->k, 1, 0, pos0 + T), 0); /* [1, H, S, Dh] */
        v = tg_unsqueeze(tg_narrow(cache->v, 1, 0, pos0 + T), 0);
        y = tg_scaled_dot_product_attention(q, k, v, NULL, p, T > 1, 0, m->drop_rng,
                                            NULL); /* [B, H, T, Dh] */
        y = tg_reshape(tg_transpose(y, 1, 2), 3, (int64_t[]){B, T, d});
    }
    return maybe_dropout(m, tg_linear_forward(b->attn_proj, y), p);
}

/* x = x + attn(ln_1(x)); x = x + mlp(ln_2(x)). Each branch has a scope of
 * its own: under bf16 the graph keeps qkv, the attention's output and h in
 * bfloat16, and their float32 data goes as the branch ends rather than
 * with the block. */
static tg_tensor *block_forward(const tg_gpt *m, const gpt_block *b, tg_tensor *x,
                                kv_cache *cache, int64_t pos0, double p)
{
    tg_scope_begin();
    x = tg_add(x, tg_scope_end_keep(attention(m, b, x, cache, pos0, p)));
    tg_scope_begin();
    tg_tensor *h = x ? norm_linear(b->ln_2, b->c_fc, x) : NULL; /* [B, T, 4d] */
    /* mlp_proj(gelu(h)) as one op: GELU(h), the widest activation, is not kept */
    tg_tensor *y = h ? tg_gelu_affine(h, TG_GELU_TANH, b->mlp_proj->weight, b->mlp_proj->bias)
                     : NULL;
    return tg_add(x, maybe_dropout(m, tg_scope_end_keep(y), p));
}

/* idx int64 [B, T] at positions pos0.. -> final hidden states [B, T, d]
 * after ln_f. caches is NULL, or n_layer caches for generation. */
static tg_tensor *trunk(const tg_gpt *m, const tg_tensor *idx, kv_cache *caches, int64_t pos0,
                        double p)
{
    int64_t T = tg_shape(idx)[1];
    tg_tensor *pos = tg_zeros(TG_INT64, 1, (int64_t[]){T});
    if (!pos)
        return NULL;
    int64_t *pp = tg_data(pos);
    for (int64_t t = 0; t < T; t++)
        pp[t] = pos0 + t;
    tg_tensor *x = tg_add(tg_embedding_module_forward(m->wte, idx),
                          tg_embedding_module_forward(m->wpe, pos));
    x = maybe_dropout(m, x, p);
    for (int64_t l = 0; x && l < m->config.n_layer; l++) {
        /* A block's own scope: what it made and the graph does not keep (the
         * branches' outputs before each residual add) goes when it ends. */
        tg_scope_begin();
        x = tg_scope_end_keep(block_forward(m, &m->h[l], x, caches ? &caches[l] : NULL, pos0, p));
    }
    return tg_layer_norm_module_forward(m->ln_f, x);
}

/* The tied LM head: x [..., d] @ wte^T -> [..., vocab]. */
static tg_tensor *lm_head(const tg_gpt *m, const tg_tensor *x)
{
    return tg_affine(x, m->wte->weight, NULL);
}

tg_tensor *tg_gpt_forward(const tg_gpt *m, const tg_tensor *idx, const tg_tensor *targets,
                          tg_tensor **loss)
{
    if (loss)
        *loss = NULL;
    TG_CHECK_ARG(m);
    TG_CHECK_ARG(idx);
    bool want_loss = targets && loss;
    if (tg__check_idx(__func__, idx, m->config.vocab_size, m->config.block_size,
                      m->config.block_size) < 0 ||
        (want_loss && tg__check_targets(__func__, idx, targets) < 0))
        return NULL;
    int64_t B = tg_shape(idx)[0], T = tg_shape(idx)[1], V = m->config.vocab_size;
    double p = m->train ? m->config.dropout : 0;
    tg_scope_begin();
    tg_tensor *logits = lm_head(m, trunk(m, idx, NULL, 0, p)); /* [B, T, V] */
    tg_tensor *l = NULL;
    if (want_loss && logits) {
        /* Flattened to [B*T, V] against [B*T], as nanoGPT does; -1 marks padding. */
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

/* ---- generation ---------------------------------------------------------------------- */

static void free_caches(kv_cache *c, int64_t n_layer)
{
    for (int64_t l = 0; c && l < n_layer; l++) {
        tg_release(c[l].k);
        tg_release(c[l].v);
    }
    free(c);
}

/* The shape [n_head, block_size, head_dim] of one layer's keys (and of its
 * values): what new_caches allocates and tg_gpt_kv_cache_bytes counts. */
static void cache_shape(const tg_gpt *m, int64_t shape[3])
{
    const tg_gpt_config *c = &m->config;
    shape[0] = c->n_head;
    shape[1] = c->block_size;
    shape[2] = c->n_embd / c->n_head;
}

int64_t tg_gpt_kv_cache_bytes(const tg_gpt *m)
{
    TG_CHECK_ARG_STATUS(m);
    int64_t shape[3], bytes = (int64_t)tg_dtype_size(tg_dtype_of(m->wte->weight));
    cache_shape(m, shape);
    int64_t factors[5] = {m->config.n_layer, 2, shape[0], shape[1], shape[2]};
    for (int i = 0; i < 5; i++)
        if (__builtin_mul_overflow(bytes, factors[i], &bytes)) {
            tg_fail(TG_ERR_VALUE, "tg_gpt_kv_cache_bytes: n_layer %lld * 2 * [%lld, %lld, "
                    "%lld] elements overflow int64", (long long)factors[0],
                    (long long)shape[0], (long long)shape[1], (long long)shape[2]);
            return -1;
        }
    return bytes;
}

/* n_layer caches of keys and values, zeros, each cache_shape. */
static kv_cache *new_caches(const tg_gpt *m)
{
    int64_t n_layer = m->config.n_layer, shape[3];
    cache_shape(m, shape);
    kv_cache *kv = calloc((size_t)n_layer, sizeof *kv);
    if (!kv)
        return tg_fail(TG_ERR_NOMEM, "tg_gpt_generate: out of memory for the KV cache");
    tg_dtype dtype = tg_dtype_of(m->wte->weight);
    /* A private scope, so that an enclosing one does not take the caches. */
    tg_scope_begin();
    for (int64_t l = 0; l < n_layer; l++) {
        kv[l].k = tg_retain(tg_zeros(dtype, 3, shape));
        kv[l].v = kv[l].k ? tg_retain(tg_zeros(dtype, 3, shape)) : NULL;
        if (!kv[l].v) {
            tg_scope_end();
            free_caches(kv, n_layer);
            return NULL;
        }
    }
    tg_scope_end();
    return kv;
}

/* What generation's steps share: the model and its caches, made at the first. */
typedef struct {
    const tg_gpt *m;
    kv_cache *caches;
} generation;

/* tg__gen_stepper's step: tokens [T] at positions pos0.. through the model with
 * the caches, the logits of the last one to row [vocab]. */
static int next_logits(void *model, const int64_t *tokens, int64_t T, int64_t pos0, double *row)
{
    generation *g = model;
    if (!g->caches && !(g->caches = new_caches(g->m)))
        return -1;
    tg_scope_begin();
    tg_tensor *idx = tg_from_data(TG_INT64, 2, (int64_t[]){1, T}, tokens);
    tg_tensor *x = idx ? trunk(g->m, idx, g->caches, pos0, 0) : NULL; /* [1, T, d] */
    tg_tensor *logits = lm_head(g->m, tg_narrow(x, 1, T - 1, 1));     /* [1, 1, V] */
    int rc = logits ? tg_copy_to(logits, TG_FLOAT64, row, g->m->config.vocab_size) : -1;
    tg_scope_end();
    return rc;
}

/* On caches made at the first step. Past block_size (opts->slide) the
 * window becomes the last block_size tokens (nanoGPT's crop) and, since
 * every position embedding shifts, the cache is rebuilt from it. */
int tg_gpt_generate(tg_gpt *m, const int64_t *prompt, int64_t prompt_len, int64_t n,
                    const tg_sample_options *opts, tg_rng *rng, int64_t *out)
{
    return tg_gpt_generate_each(m, prompt, prompt_len, n, opts, rng, out, NULL, NULL);
}

int tg_gpt_generate_each(tg_gpt *m, const int64_t *prompt, int64_t prompt_len, int64_t n,
                         const tg_sample_options *opts, tg_rng *rng, int64_t *out,
                         int (*on_token)(int64_t token, void *ctx), void *ctx)
{
    TG_CHECK_ARG_STATUS(m);
    TG_CHECK_ARG_STATUS(prompt);
    TG_CHECK_ARG_STATUS(opts);
    TG_CHECK_ARG_STATUS(out);
    generation g = {m, NULL};
    tg__gen_stepper d = {.fn = "tg_gpt_generate", .vocab_size = m->config.vocab_size,
                         .block_size = m->config.block_size, .step = next_logits, .model = &g};
    int rc = tg__generate(&d, prompt, prompt_len, n, opts, rng, out, on_token, ctx);
    free_caches(g.caches, m->config.n_layer);
    return rc;
}
