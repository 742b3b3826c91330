/* Incremental decoding for tg_decoder: per layer, the self-attention keys and
 * values of the target positions decoded so far, and the cross-attention keys
 * and values projected once from the encoder's memory. Inference only. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <tensorgrad/module.h>
#include <tensorgrad/nn.h>

#include "layer_parts.h"

struct tg_decoder_cache {
    const tg_decoder *model;
    int64_t batch, max_len, len;
    int64_t d, heads, head_dim, mem_len; /* mem_len 0 until set_memory */
    tg_dtype dtype;
    tg_tensor **self_k, **self_v; /* per layer [batch, H, max_len, hd], contiguous */
    tg_tensor **mem_k, **mem_v;   /* per layer [batch, H, S, hd], contiguous, or NULL */
    tg_tensor *mem_mask;          /* additive [batch, 1, 1, S], or NULL without padding */
};

/* ---- construction -------------------------------------------------------------- */

/* Every layer present with its sub-modules: a model built by hand is checked
 * like one from tg_decoder_new. */
static int check_model(const char *fn, const tg_decoder *m)
{
    if (m->num_layers < 1 || !m->layers) {
        tg_fail(TG_ERR_VALUE, "%s: the decoder has %d layers", fn, m->num_layers);
        return -1;
    }
    for (int l = 0; l < m->num_layers; l++) {
        const tg_decoder_layer *L = m->layers[l];
        if (!L || !L->self_attn || !L->multihead_attn || !L->linear1 || !L->linear2 ||
            !L->norm1 || !L->norm2 || !L->norm3 || !L->self_attn->out_proj ||
            !L->multihead_attn->out_proj) {
            tg_fail(TG_ERR_NULL, "%s: decoder layer %d lacks a sub-module", fn, l);
            return -1;
        }
    }
    return 0;
}

static void release_all(tg_tensor **ts, int n)
{
    for (int i = 0; ts && i < n; i++)
        tg_release(ts[i]);
}

void tg_decoder_cache_free(tg_decoder_cache *c)
{
    if (!c)
        return;
    int n = c->model->num_layers;
    release_all(c->self_k, n);
    release_all(c->self_v, n);
    release_all(c->mem_k, n);
    release_all(c->mem_v, n);
    tg_release(c->mem_mask);
    free(c->self_k);
    free(c->self_v);
    free(c->mem_k);
    free(c->mem_v);
    free(c);
}

tg_decoder_cache *tg_decoder_cache_new(const tg_decoder *m, int64_t batch, int64_t max_len)
{
    const char *fn = "tg_decoder_cache_new";
    TG_CHECK_ARG(m);
    if (check_model(fn, m) < 0)
        return NULL;
    const tg_mha *sa = m->layers[0]->self_attn;
    int64_t H = sa->num_heads, hd = sa->head_dim, n;
    if (batch < 1 || max_len < 1)
        return tg_fail(TG_ERR_VALUE, "%s: batch %lld and max_len %lld must be positive", fn,
                       (long long)batch, (long long)max_len);
    if (__builtin_mul_overflow(batch, H, &n) || __builtin_mul_overflow(n, max_len, &n) ||
        __builtin_mul_overflow(n, hd, &n) || n > INT64_MAX / 16)
        return tg_fail(TG_ERR_VALUE, "%s: batch %lld * %lld heads * max_len %lld * head_dim "
                       "%lld elements overflow", fn, (long long)batch, (long long)H,
                       (long long)max_len, (long long)hd);
    tg_decoder_cache *c = calloc(1, sizeof *c);
    if (!c)
        return tg_fail(TG_ERR_NOMEM, "%s: out of memory", fn);
    c->model = m;
    c->batch = batch, c->max_len = max_len;
    c->d = m->layers[0]->config.d_model, c->heads = H, c->head_dim = hd;
    c->dtype = tg_dtype_of(sa->out_proj->weight);
    size_t k = (size_t)m->num_layers;
    c->self_k = calloc(k, sizeof *c->self_k), c->self_v = calloc(k, sizeof *c->self_v);
    c->mem_k = calloc(k, sizeof *c->mem_k), c->mem_v = calloc(k, sizeof *c->mem_v);
    if (!c->self_k || !c->self_v || !c->mem_k || !c->mem_v) {
        tg_decoder_cache_free(c);
        return tg_fail(TG_ERR_NOMEM, "%s: out of memory", fn);
    }
    int64_t shape[4] = {batch, H, max_len, hd};
    tg_scope_begin(); /* private, so that an enclosing scope does not take the tensors */
    bool ok = true;
    for (int l = 0; l < m->num_layers && ok; l++) {
        c->self_k[l] = tg_retain(tg_zeros(c->dtype, 4, shape));
        c->self_v[l] = tg_retain(tg_zeros(c->dtype, 4, shape));
        ok = c->self_k[l] && c->self_v[l];
    }
    tg_scope_end();
    if (!ok) {
        tg_decoder_cache_free(c);
        return NULL;
    }
    return c;
}

int64_t tg_decoder_cache_len(const tg_decoder_cache *c)
{
    TG_CHECK_ARG_STATUS(c);
    return c->len;
}

/* ---- helpers that run inside the caller's scope ------------------------------- */

/* The weight and bias of projection i (0 query, 1 key, 2 value) of m: rows
 * of the packed in_proj_weight, or q/k/v_proj_weight when keys or values
 * have another width. */
static tg_tensor *project(const tg_mha *m, const tg_tensor *x, int i)
{
    int64_t E = m->embed_dim;
    const tg_tensor *w;
    if (m->in_proj_weight)
        w = tg_narrow(m->in_proj_weight, 0, i * E, E);
    else
        w = i == 0 ? m->q_proj_weight : i == 1 ? m->k_proj_weight : m->v_proj_weight;
    const tg_tensor *b = m->in_proj_bias ? tg_narrow(m->in_proj_bias, 0, i * E, E) : NULL;
    if (!w || (m->in_proj_bias && !b))
        return NULL;
    tg_tensor *y = tg_affine(x, w, b); /* [B, T, E] */
    if (!y)
        return NULL;
    y = tg_reshape(y, 4, (int64_t[]){tg_shape(y)[0], tg_shape(y)[1], m->num_heads, m->head_dim});
    return tg_transpose(y, 1, 2); /* [B, H, T, hd], a view */
}

/* Heads o [B, H, T, hd] merged and through out_proj: [B, T, E]. */
static tg_tensor *merge_out(const tg_mha *m, tg_tensor *o)
{
    if (!o)
        return NULL;
    int64_t B = tg_shape(o)[0], T = tg_shape(o)[2];
    o = tg_reshape(tg_transpose(o, 1, 2), 3, (int64_t[]){B, T, m->embed_dim});
    return tg_linear_forward(m->out_proj, o);
}

/* Copies src [B, H, T, hd] (any layout) into dst [B, H, max_len, hd] at
 * positions pos0..pos0+T-1. */
static int write_positions(tg_tensor *dst, const tg_tensor *src, int64_t pos0)
{
    const tg_tensor *s = tg_contiguous(src);
    const char *from = s ? tg_data_const(s) : NULL;
    char *to = from ? tg_data(dst) : NULL;
    if (!to)
        return -1;
    const int64_t *ds = tg_shape(dst);
    int64_t rows = ds[0] * ds[1], max_len = ds[2], T = tg_shape(src)[2];
    size_t pos = (size_t)ds[3] * tg_dtype_size(tg_dtype_of(dst));
    for (int64_t r = 0; r < rows; r++)
        memcpy(to + (size_t)(r * max_len + pos0) * pos, from + (size_t)(r * T) * pos,
               (size_t)T * pos);
    return 0;
}

/* ---- memory --------------------------------------------------------------------- */

static int check_memory(const tg_decoder_cache *c, const tg_tensor *memory,
                        const tg_tensor *kpm)
{
    const char *fn = "tg_decoder_cache_set_memory";
    if (tg_ndim(memory) != 3 || tg_shape(memory)[0] != c->batch || tg_shape(memory)[1] < 1 ||
        tg_shape(memory)[2] != c->d) {
        tg_fail(TG_ERR_SHAPE, "%s: memory %s is not [batch %lld, S, d_model %lld] with S >= 1",
                fn, TG_SHAPE_STRING(memory), (long long)c->batch, (long long)c->d);
        return -1;
    }
    if (tg_dtype_of(memory) != c->dtype) {
        tg_fail(TG_ERR_DTYPE, "%s: memory is %s, the decoder %s", fn,
                tg_dtype_name(tg_dtype_of(memory)), tg_dtype_name(c->dtype));
        return -1;
    }
    int64_t S = tg_shape(memory)[1];
    if (kpm && (tg_ndim(kpm) != 2 || tg_shape(kpm)[0] != c->batch || tg_shape(kpm)[1] != S)) {
        tg_fail(TG_ERR_SHAPE, "%s: memory_key_padding_mask %s is not [batch, S] = [%lld,%lld]",
                fn, TG_SHAPE_STRING(kpm), (long long)c->batch, (long long)S);
        return -1;
    }
    if (kpm && tg_dtype_of(kpm) != TG_BOOL && !tg_dtype_is_float(tg_dtype_of(kpm))) {
        tg_fail(TG_ERR_DTYPE, "%s: memory_key_padding_mask must be bool or float, not %s", fn,
                tg_dtype_name(tg_dtype_of(kpm)));
        return -1;
    }
    return 0;
}

/* kpm [B, S] as an additive [B, 1, 1, S] in dtype: -inf where a bool is true. */
static tg_tensor *additive_padding(const tg_tensor *kpm, tg_dtype dtype)
{
    const int64_t *s = tg_shape(kpm);
    /* a new tensor either way: the cache never shares the caller's storage */
    tg_tensor *a = tg_dtype_of(kpm) == TG_BOOL
                       ? tg_masked_fill(tg_zeros(dtype, 2, s), kpm, -INFINITY)
                       : tg_add(tg_zeros(dtype, 2, s), tg_to_dtype(kpm, dtype));
    return tg_contiguous(tg_reshape(a, 4, (int64_t[]){s[0], 1, 1, s[1]}));
}

int tg_decoder_cache_set_memory(tg_decoder_cache *c, const tg_tensor *memory,
                                const tg_tensor *memory_key_padding_mask)
{
    TG_CHECK_ARG_STATUS(c);
    TG_CHECK_ARG_STATUS(memory);
    const tg_tensor *kpm = memory_key_padding_mask;
    if (check_memory(c, memory, kpm) < 0)
        return -1;
    int n = c->model->num_layers;
    tg_tensor **k = calloc((size_t)n, sizeof *k), **v = calloc((size_t)n, sizeof *v);
    bool ok = k && v;
    if (!ok)
        tg_fail(TG_ERR_NOMEM, "tg_decoder_cache_set_memory: out of memory");
    bool was = tg_set_grad_enabled(false);
    tg_scope_begin();
    for (int l = 0; l < n && ok; l++) {
        const tg_mha *a = c->model->layers[l]->multihead_attn;
        k[l] = tg_retain(tg_contiguous(project(a, memory, 1))); /* [B, H, S, hd] */
        v[l] = tg_retain(tg_contiguous(project(a, memory, 2)));
        ok = k[l] && v[l];
    }
    tg_tensor *mask = ok && kpm ? tg_retain(additive_padding(kpm, c->dtype)) : NULL;
    ok = ok && (!kpm || mask);
    tg_scope_end();
    tg_set_grad_enabled(was);
    if (!ok) { /* all or nothing: the cache keeps its old memory */
        release_all(k, n);
        release_all(v, n);
        tg_release(mask);
        free(k);
        free(v);
        return -1;
    }
    release_all(c->mem_k, n);
    release_all(c->mem_v, n);
    tg_release(c->mem_mask);
    free(c->mem_k);
    free(c->mem_v);
    c->mem_k = k, c->mem_v = v, c->mem_mask = mask;
    c->mem_len = tg_shape(memory)[1];
    c->len = 0;
    return 0;
}

/* ---- the cached forward ------------------------------------------------------ */

/* Causal self-attention of h [B, T, d] at positions len..len+T-1: its keys
 * and values join the cache, its queries read every cached position up to
 * their own. */
static tg_tensor *self_block(tg_decoder_cache *c, int l, const tg_tensor *h)
{
    const tg_mha *a = c->model->layers[l]->self_attn;
    int64_t T = tg_shape(h)[1], pos0 = c->len;
    tg_tensor *q = project(a, h, 0);
    tg_tensor *k = project(a, h, 1), *v = project(a, h, 2);
    if (!q || !k || !v || write_positions(c->self_k[l], k, pos0) < 0 ||
        write_positions(c->self_v[l], v, pos0) < 0)
        return NULL;
    k = tg_narrow(c->self_k[l], 2, 0, pos0 + T); /* [B, H, pos0 + T, hd] */
    v = tg_narrow(c->self_v[l], 2, 0, pos0 + T);
    tg_tensor *mask = NULL;
    if (pos0 > 0 && T > 1 && !(mask = tg__offset_causal_mask(T, pos0)))
        return NULL;
    return merge_out(a, tg_attention(q, k, v, mask, pos0 == 0 && T > 1, 0, 0, NULL));
}

/* Cross-attention of h [B, T, d] over the memory's cached keys and values. */
static tg_tensor *cross_block(const tg_decoder_cache *c, int l, const tg_tensor *h)
{
    const tg_mha *a = c->model->layers[l]->multihead_attn;
    tg_tensor *q = project(a, h, 0);
    return merge_out(a, tg_attention(q, c->mem_k[l], c->mem_v[l], c->mem_mask, false, 0, 0, NULL));
}

static tg_tensor *feed_forward(const tg_decoder_layer *L, const tg_tensor *x)
{
    tg_tensor *h = tg_linear_forward(L->linear1, x);
    h = L->config.activation == TG_ACT_GELU ? tg_gelu(h, TG_GELU_ERF) : tg_relu(h);
    return tg_linear_forward(L->linear2, h);
}

/* One layer, as tg_decoder_layer_forward in eval mode (no dropout). */
static tg_tensor *layer_step(tg_decoder_cache *c, int l, tg_tensor *x)
{
    const tg_decoder_layer *L = c->model->layers[l];
    if (L->config.norm_first) {
        x = tg_add(x, self_block(c, l, tg_layer_norm_module_forward(L->norm1, x)));
        x = tg_add(x, cross_block(c, l, tg_layer_norm_module_forward(L->norm2, x)));
        return tg_add(x, feed_forward(L, tg_layer_norm_module_forward(L->norm3, x)));
    }
    x = tg_layer_norm_module_forward(L->norm1, tg_add(x, self_block(c, l, x)));
    x = tg_layer_norm_module_forward(L->norm2, tg_add(x, cross_block(c, l, x)));
    return tg_layer_norm_module_forward(L->norm3, tg_add(x, feed_forward(L, x)));
}

static int check_step(const tg_decoder *m, const tg_decoder_cache *c, const tg_tensor *tgt)
{
    const char *fn = "tg_decoder_forward_cached";
    if (c->model != m) {
        tg_fail(TG_ERR_VALUE, "%s: the cache was made for another decoder", fn);
        return -1;
    }
    if (c->mem_len == 0) {
        tg_fail(TG_ERR_STATE, "%s: no memory yet (call tg_decoder_cache_set_memory first)", fn);
        return -1;
    }
    if (tg_ndim(tgt) != 3 || tg_shape(tgt)[0] != c->batch || tg_shape(tgt)[1] < 1 ||
        tg_shape(tgt)[2] != c->d) {
        tg_fail(TG_ERR_SHAPE, "%s: tgt %s is not [batch %lld, t, d_model %lld] with t >= 1", fn,
                TG_SHAPE_STRING(tgt), (long long)c->batch, (long long)c->d);
        return -1;
    }
    if (tg_dtype_of(tgt) != c->dtype) {
        tg_fail(TG_ERR_DTYPE, "%s: tgt is %s, the decoder %s", fn,
                tg_dtype_name(tg_dtype_of(tgt)), tg_dtype_name(c->dtype));
        return -1;
    }
    if (tg_shape(tgt)[1] > c->max_len - c->len) {
        tg_fail(TG_ERR_VALUE, "%s: %lld cached positions + %lld new ones exceed max_len %lld", fn,
                (long long)c->len, (long long)tg_shape(tgt)[1], (long long)c->max_len);
        return -1;
    }
    return 0;
}

tg_tensor *tg_decoder_forward_cached(const tg_decoder *m, tg_decoder_cache *c, const tg_tensor *tgt)
{
    TG_CHECK_ARG(m);
    TG_CHECK_ARG(c);
    TG_CHECK_ARG(tgt);
    if (check_step(m, c, tgt) < 0)
        return NULL;
    bool was = tg_set_grad_enabled(false);
    tg_scope_begin();
    tg_tensor *x = (tg_tensor *)tgt; /* borrowed until the first op replaces it */
    for (int l = 0; l < m->num_layers && x; l++)
        x = layer_step(c, l, x);
    if (m->norm)
        x = tg_layer_norm_module_forward(m->norm, x);
    x = tg_scope_end_keep(x);
    tg_set_grad_enabled(was);
    /* Positions past len were written, but only count once every layer has them. */
    if (x)
        c->len += tg_shape(tgt)[1];
    return x;
}

/* ---- beam search's reorder ---------------------------------------------------- */

/* A new contiguous tensor of rows[0..n) of t along dim 0. */
static tg_tensor *gather_rows(const tg_tensor *t, const int64_t *rows, int64_t n)
{
    int64_t shape[TG_MAX_DIMS];
    memcpy(shape, tg_shape(t), sizeof(int64_t) * (size_t)tg_ndim(t));
    size_t row = (size_t)(tg_numel(t) / shape[0]) * tg_dtype_size(tg_dtype_of(t));
    shape[0] = n;
    tg_tensor *out = tg_zeros(tg_dtype_of(t), tg_ndim(t), shape);
    char *to = out ? tg_data(out) : NULL;
    const char *from = tg_data_const(t);
    for (int64_t i = 0; to && i < n; i++)
        memcpy(to + (size_t)i * row, from + (size_t)rows[i] * row, row);
    return tg_retain(out);
}

/* Replaces the n_t tensors of ts by their gathered rows; ts is unchanged when
 * the gathering fails. */
static int gather_all(tg_tensor **ts, int n_t, const int64_t *rows, int64_t n)
{
    tg_tensor **next = calloc((size_t)n_t, sizeof *next);
    if (!next) {
        tg_fail(TG_ERR_NOMEM, "tg_decoder_cache_select: out of memory");
        return -1;
    }
    bool ok = true;
    for (int i = 0; i < n_t && ok; i++)
        ok = !ts[i] || (next[i] = gather_rows(ts[i], rows, n));
    if (ok)
        for (int i = 0; i < n_t; i++) {
            tg_release(ts[i]);
            ts[i] = next[i];
        }
    else
        release_all(next, n_t);
    free(next);
    return ok ? 0 : -1;
}

int tg_decoder_cache_select(tg_decoder_cache *c, const int64_t *rows, int64_t n)
{
    TG_CHECK_ARG_STATUS(c);
    TG_CHECK_ARG_STATUS(rows);
    if (n < 1) {
        tg_fail(TG_ERR_VALUE, "tg_decoder_cache_select: n %lld must be positive", (long long)n);
        return -1;
    }
    for (int64_t i = 0; i < n; i++)
        if (rows[i] < 0 || rows[i] >= c->batch) {
            tg_fail(TG_ERR_INDEX, "tg_decoder_cache_select: rows[%lld] = %lld is outside the "
                    "batch [0, %lld)", (long long)i, (long long)rows[i], (long long)c->batch);
            return -1;
        }
    /* Every tensor of the cache in one list, so that one failure changes none. */
    int L = c->model->num_layers, n_t = 4 * L + 1;
    tg_tensor **all = malloc((size_t)n_t * sizeof *all);
    if (!all) {
        tg_fail(TG_ERR_NOMEM, "tg_decoder_cache_select: out of memory");
        return -1;
    }
    for (int l = 0; l < L; l++) {
        all[4 * l] = c->self_k[l], all[4 * l + 1] = c->self_v[l];
        all[4 * l + 2] = c->mem_k ? c->mem_k[l] : NULL;
        all[4 * l + 3] = c->mem_v ? c->mem_v[l] : NULL;
    }
    all[4 * L] = c->mem_mask;
    tg_scope_begin();
    int rc = gather_all(all, n_t, rows, n);
    tg_scope_end();
    if (rc == 0) {
        for (int l = 0; l < L; l++) {
            c->self_k[l] = all[4 * l], c->self_v[l] = all[4 * l + 1];
            if (c->mem_k)
                c->mem_k[l] = all[4 * l + 2], c->mem_v[l] = all[4 * l + 3];
        }
        c->mem_mask = all[4 * L];
        c->batch = n;
    }
    free(all);
    return rc;
}
