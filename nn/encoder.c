/* nn.TransformerEncoderLayer and nn.TransformerEncoder (batch_first=True):
 * self-attention and a feed-forward block, each wrapped in a residual and a
 * LayerNorm (after the residual, or before the block with norm_first). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tensorgrad/module.h>
#include <tensorgrad/nn.h>

/* Every value PyTorch would reject, named in the message of fn. */
static int check_config(const char *fn, const tg_encoder_config *c, tg_dtype dtype)
{
    if (c->d_model <= 0 || c->nhead <= 0 || c->dim_feedforward <= 0) {
        tg_fail(TG_ERR_VALUE, "%s: d_model %lld, nhead %lld and dim_feedforward %lld must be "
                "positive", fn, (long long)c->d_model, (long long)c->nhead,
                (long long)c->dim_feedforward);
        return -1;
    }
    if (c->d_model % c->nhead != 0) {
        tg_fail(TG_ERR_VALUE, "%s: d_model %lld is not divisible by nhead %lld", fn,
                (long long)c->d_model, (long long)c->nhead);
        return -1;
    }
    if (!(c->dropout >= 0 && c->dropout < 1)) {
        tg_fail(TG_ERR_VALUE, "%s: dropout %g is outside [0, 1)", fn, c->dropout);
        return -1;
    }
    if (!(c->layer_norm_eps > 0)) {
        tg_fail(TG_ERR_VALUE, "%s: layer_norm_eps %g must be positive", fn, c->layer_norm_eps);
        return -1;
    }
    if (c->activation != TG_ACT_RELU && c->activation != TG_ACT_GELU) {
        tg_fail(TG_ERR_VALUE, "%s: activation %d is neither TG_ACT_RELU nor TG_ACT_GELU", fn,
                (int)c->activation);
        return -1;
    }
    if (dtype != TG_FLOAT32 && dtype != TG_FLOAT64) {
        tg_fail(TG_ERR_DTYPE, "%s: dtype %s is not a float dtype", fn, tg_dtype_name(dtype));
        return -1;
    }
    return 0;
}

/* ---- the layer ------------------------------------------------------------ */

tg_encoder_layer *tg_encoder_layer_new(const tg_encoder_config *config, tg_dtype dtype,
                                       tg_rng *rng)
{
    TG_CHECK_ARG(config);
    TG_CHECK_ARG(rng);
    if (check_config("tg_encoder_layer_new", config, dtype) < 0)
        return NULL;
    tg_encoder_layer *m = calloc(1, sizeof *m);
    if (!m)
        return tg_fail(TG_ERR_NOMEM, "tg_encoder_layer_new: out of memory");
    m->config = *config;
    m->rng = rng;
    int64_t d = config->d_model, dff = config->dim_feedforward;
    /* PyTorch's construction order, which fixes the order of the draws. */
    m->self_attn = tg_mha_new(d, config->nhead, config->dropout, true, dtype, rng);
    m->linear1 = m->self_attn ? tg_linear_new(d, dff, true, dtype, rng) : NULL;
    m->linear2 = m->linear1 ? tg_linear_new(dff, d, true, dtype, rng) : NULL;
    double eps = config->layer_norm_eps;
    m->norm1 = m->linear2 ? tg_layer_norm_module_new(1, &d, eps, true, dtype) : NULL;
    m->norm2 = m->norm1 ? tg_layer_norm_module_new(1, &d, eps, true, dtype) : NULL;
    if (!m->norm2) {
        tg_encoder_layer_free(m);
        return NULL;
    }
    /* A new torch.nn.Module is in training mode. */
    tg_encoder_layer_set_train(m, true);
    return m;
}

/* linear2(dropout(activation(linear1(x)))), without the final dropout2. */
static tg_tensor *feed_forward(const tg_encoder_layer *m, const tg_tensor *x,
                               const tg_dropout_module *drop)
{
    tg_tensor *h = tg_linear_forward(m->linear1, x); /* [B, T, dff] */
    h = m->config.activation == TG_ACT_GELU ? tg_gelu(h, TG_GELU_ERF) : tg_relu(h);
    return tg_linear_forward(m->linear2, tg_dropout_module_forward(drop, h)); /* [B, T, d] */
}

/* src [B, T, d] (or unbatched [T, d]) -> the same shape */
tg_tensor *tg_encoder_layer_forward(const tg_encoder_layer *m, const tg_tensor *src,
                                    const tg_tensor *src_mask,
                                    const tg_tensor *src_key_padding_mask)
{
    TG_CHECK_ARG(m);
    TG_CHECK_ARG(src);
    if (!m->self_attn || !m->linear1 || !m->linear2 || !m->norm1 || !m->norm2)
        return tg_fail(TG_ERR_NULL, "tg_encoder_layer_forward: the layer lacks a sub-module");
    int64_t d = m->config.d_model;
    if ((tg_ndim(src) != 2 && tg_ndim(src) != 3) || tg_shape(src)[tg_ndim(src) - 1] != d)
        return tg_fail(TG_ERR_SHAPE, "tg_encoder_layer_forward: src %s is not [B, T, d_model "
                       "%lld] or [T, d_model]", TG_SHAPE_STRING(src), (long long)d);
    tg_mha_options opts = {.attn_mask = src_mask, .key_padding_mask = src_key_padding_mask};
    /* dropout1, dropout (inside the feed-forward) and dropout2 share p and rng. */
    tg_dropout_module drop = {m->config.dropout, m->train, m->rng};
    tg_scope_begin();
    tg_tensor *x = (tg_tensor *)src; /* borrowed until the first op replaces it */
    if (m->config.norm_first) {
        const tg_tensor *h = tg_layer_norm_module_forward(m->norm1, x);
        const tg_tensor *a = tg_mha_forward(m->self_attn, h, h, h, &opts, NULL);
        x = tg_add(x, tg_dropout_module_forward(&drop, a));
        h = tg_layer_norm_module_forward(m->norm2, x);
        x = tg_add(x, tg_dropout_module_forward(&drop, feed_forward(m, h, &drop)));
    } else {
        const tg_tensor *a = tg_mha_forward(m->self_attn, x, x, x, &opts, NULL);
        x = tg_layer_norm_module_forward(m->norm1, tg_add(x, tg_dropout_module_forward(&drop, a)));
        tg_tensor *ff = tg_dropout_module_forward(&drop, feed_forward(m, x, &drop));
        x = tg_layer_norm_module_forward(m->norm2, tg_add(x, ff));
    }
    return tg_scope_end_keep(x);
}

/* Takes back every entry past count, so a failed _params call adds nothing. */
static void truncate_params(tg_params *ps, int count)
{
    while (ps->count > count) {
        ps->count--;
        free(ps->names[ps->count]);
        tg_release(ps->tensors[ps->count]);
    }
}

/* "prefix.name" (just name without a prefix) in a malloc'd string, or NULL. */
static char *sub_prefix(const char *prefix, const char *name)
{
    size_t lp = prefix ? strlen(prefix) : 0, ln = strlen(name);
    char *s = malloc(lp + ln + 2);
    if (!s) {
        tg_fail(TG_ERR_NOMEM, "tg_encoder_params: out of memory for the name \"%s\"", name);
        return NULL;
    }
    if (lp) {
        memcpy(s, prefix, lp);
        s[lp++] = '.';
    }
    memcpy(s + lp, name, ln + 1);
    return s;
}

/* Adds the parameters of one sub-module under prefix.name. */
static int add_part(const char *prefix, const char *name, tg_params *ps,
                    int (*add)(const void *, const char *, tg_params *), const void *part)
{
    char *p = sub_prefix(prefix, name);
    int rc = p ? add(part, p, ps) : -1;
    free(p);
    return rc;
}

static int add_mha(const void *m, const char *p, tg_params *ps)
{
    return tg_mha_params(m, p, ps);
}
static int add_linear(const void *m, const char *p, tg_params *ps)
{
    return tg_linear_params(m, p, ps);
}
static int add_norm(const void *m, const char *p, tg_params *ps)
{
    return tg_layer_norm_module_params(m, p, ps);
}

int tg_encoder_layer_params(const tg_encoder_layer *m, const char *prefix, tg_params *ps)
{
    TG_CHECK_ARG_STATUS(m);
    TG_CHECK_ARG_STATUS(ps);
    int start = ps->count;
    /* The order of PyTorch's state_dict: modules in construction order. */
    if (add_part(prefix, "self_attn", ps, add_mha, m->self_attn) < 0 ||
        add_part(prefix, "linear1", ps, add_linear, m->linear1) < 0 ||
        add_part(prefix, "linear2", ps, add_linear, m->linear2) < 0 ||
        add_part(prefix, "norm1", ps, add_norm, m->norm1) < 0 ||
        add_part(prefix, "norm2", ps, add_norm, m->norm2) < 0) {
        truncate_params(ps, start);
        return -1;
    }
    return 0;
}

void tg_encoder_layer_set_train(tg_encoder_layer *m, bool train)
{
    if (!m)
        return;
    m->train = train;
    if (m->self_attn)
        m->self_attn->train = train;
}

void tg_encoder_layer_free(tg_encoder_layer *m)
{
    if (!m)
        return;
    tg_mha_free(m->self_attn);
    tg_linear_free(m->linear1);
    tg_linear_free(m->linear2);
    tg_layer_norm_module_free(m->norm1);
    tg_layer_norm_module_free(m->norm2);
    free(m);
}

/* ---- the stack ------------------------------------------------------------ */

tg_encoder *tg_encoder_new(const tg_encoder_config *layer, int num_layers, bool final_norm,
                           tg_dtype dtype, tg_rng *rng)
{
    TG_CHECK_ARG(layer);
    TG_CHECK_ARG(rng);
    if (check_config("tg_encoder_new", layer, dtype) < 0)
        return NULL;
    if (num_layers < 1)
        return tg_fail(TG_ERR_VALUE, "tg_encoder_new: num_layers %d must be at least 1",
                       num_layers);
    tg_encoder *m = calloc(1, sizeof *m);
    if (!m)
        return tg_fail(TG_ERR_NOMEM, "tg_encoder_new: out of memory");
    m->layers = calloc((size_t)num_layers, sizeof *m->layers);
    if (!m->layers) {
        free(m);
        return tg_fail(TG_ERR_NOMEM, "tg_encoder_new: out of memory for %d layers", num_layers);
    }
    m->num_layers = num_layers;
    for (int i = 0; i < num_layers; i++) {
        m->layers[i] = tg_encoder_layer_new(layer, dtype, rng);
        if (!m->layers[i]) {
            tg_encoder_free(m);
            return NULL;
        }
    }
    if (final_norm) {
        m->norm = tg_layer_norm_module_new(1, &layer->d_model, layer->layer_norm_eps, true, dtype);
        if (!m->norm) {
            tg_encoder_free(m);
            return NULL;
        }
    }
    return m;
}

/* src [B, T, d] -> the same shape, through every layer and the final norm */
tg_tensor *tg_encoder_forward(const tg_encoder *m, const tg_tensor *src, const tg_tensor *mask,
                              const tg_tensor *src_key_padding_mask)
{
    TG_CHECK_ARG(m);
    TG_CHECK_ARG(src);
    if (m->num_layers < 1 || !m->layers)
        return tg_fail(TG_ERR_VALUE, "tg_encoder_forward: the encoder has %d layers",
                       m->num_layers);
    tg_scope_begin();
    tg_tensor *x = (tg_tensor *)src;
    for (int i = 0; i < m->num_layers && x; i++)
        x = tg_encoder_layer_forward(m->layers[i], x, mask, src_key_padding_mask);
    if (m->norm && x)
        x = tg_layer_norm_module_forward(m->norm, x);
    return tg_scope_end_keep(x);
}

int tg_encoder_params(const tg_encoder *m, const char *prefix, tg_params *ps)
{
    TG_CHECK_ARG_STATUS(m);
    TG_CHECK_ARG_STATUS(ps);
    int start = ps->count;
    char *layers = sub_prefix(prefix, "layers");
    int rc = layers ? 0 : -1;
    for (int i = 0; rc == 0 && i < m->num_layers; i++) {
        char idx[24];
        snprintf(idx, sizeof idx, "%d", i);
        char *p = sub_prefix(layers, idx);
        rc = p ? tg_encoder_layer_params(m->layers[i], p, ps) : -1;
        free(p);
    }
    free(layers);
    if (rc == 0 && m->norm)
        rc = add_part(prefix, "norm", ps, add_norm, m->norm);
    if (rc < 0)
        truncate_params(ps, start);
    return rc;
}

void tg_encoder_set_train(tg_encoder *m, bool train)
{
    if (!m)
        return;
    for (int i = 0; i < m->num_layers; i++)
        tg_encoder_layer_set_train(m->layers[i], train);
}

void tg_encoder_free(tg_encoder *m)
{
    if (!m)
        return;
    for (int i = 0; m->layers && i < m->num_layers; i++)
        tg_encoder_layer_free(m->layers[i]);
    free(m->layers);
    tg_layer_norm_module_free(m->norm);
    free(m);
}
