/* nn.TransformerEncoderLayer and nn.TransformerEncoder (batch_first=True):
 * self-attention and a feed-forward block, each wrapped in a residual and a
 * LayerNorm (after the residual, or before the block with norm_first). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tensorgrad/module.h>
#include <tensorgrad/nn.h>

#include "layer_parts.h"

/* ---- the layer ------------------------------------------------------------ */

tg_encoder_layer *tg_encoder_layer_new(const tg_encoder_config *config, tg_dtype dtype,
                                       tg_rng *rng)
{
    TG_CHECK_ARG(config);
    TG_CHECK_ARG(rng);
    if (tg__check_layer_config("tg_encoder_layer_new", config, dtype) < 0)
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

/* The two sublayers, for tg__residual. */
typedef struct {
    const tg_encoder_layer *m;
    const tg_mha_options *opts;
    const tg_dropout_module *drop;
} sublayer_ctx;

static tg_tensor *self_attention(const void *ctx, const tg_tensor *x)
{
    const sublayer_ctx *c = ctx;
    return tg_mha_forward(c->m->self_attn, x, x, x, c->opts, NULL);
}

static tg_tensor *feed_forward(const void *ctx, const tg_tensor *x)
{
    const sublayer_ctx *c = ctx;
    return tg__feed_forward(c->m->linear1, c->m->linear2, c->m->config.activation, x, c->drop);
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
    sublayer_ctx c = {m, &opts, &drop};
    bool nf = m->config.norm_first;
    tg_scope_begin();
    tg_tensor *x = tg__residual(nf, m->norm1, &drop, src, self_attention, &c);
    x = x ? tg__residual(nf, m->norm2, &drop, x, feed_forward, &c) : NULL;
    return tg_scope_end_keep(x);
}

int tg_encoder_layer_params(const tg_encoder_layer *m, const char *prefix, tg_params *ps)
{
    TG_CHECK_ARG_STATUS(m);
    TG_CHECK_ARG_STATUS(ps);
    int start = ps->count;
    /* The order of PyTorch's state_dict: modules in construction order. */
    if (tg__add_mha(prefix, "self_attn", m->self_attn, ps) < 0 ||
        tg__add_linear(prefix, "linear1", m->linear1, ps) < 0 ||
        tg__add_linear(prefix, "linear2", m->linear2, ps) < 0 ||
        tg__add_norm(prefix, "norm1", m->norm1, ps) < 0 ||
        tg__add_norm(prefix, "norm2", m->norm2, ps) < 0) {
        tg_params_truncate(ps, start);
        return -1;
    }
    return 0;
}

void tg_encoder_layer_set_train(tg_encoder_layer *m, bool train)
{
    if (!m)
        return;
    m->train = train;
    tg_mha_set_train(m->self_attn, train);
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
    if (tg__check_layer_config("tg_encoder_new", layer, dtype) < 0)
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

static int add_layer(const void *stack, int i, const char *prefix, tg_params *ps)
{
    return tg_encoder_layer_params(((const tg_encoder *)stack)->layers[i], prefix, ps);
}

int tg_encoder_params(const tg_encoder *m, const char *prefix, tg_params *ps)
{
    TG_CHECK_ARG_STATUS(m);
    TG_CHECK_ARG_STATUS(ps);
    return tg__add_stack(prefix, m, m->num_layers, add_layer, m->norm, ps);
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
