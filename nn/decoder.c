/* nn.TransformerDecoderLayer and nn.TransformerDecoder (batch_first=True):
 * self-attention over the target, cross-attention to the encoder's memory and
 * a feed-forward block, each in a residual and a LayerNorm (pre or post). */
#include <stdlib.h>

#include <tensorgrad/module.h>
#include <tensorgrad/nn.h>

#include "layer_parts.h"

/* ---- the layer ------------------------------------------------------------ */

tg_decoder_layer *tg_decoder_layer_new(const tg_decoder_config *config, tg_dtype dtype,
                                       tg_rng *rng)
{
    TG_CHECK_ARG(config);
    TG_CHECK_ARG(rng);
    if (tg__check_layer_config("tg_decoder_layer_new", config, dtype) < 0)
        return NULL;
    tg_decoder_layer *m = calloc(1, sizeof *m);
    if (!m)
        return tg_fail(TG_ERR_NOMEM, "tg_decoder_layer_new: out of memory");
    m->config = *config;
    m->rng = rng;
    int64_t d = config->d_model, dff = config->dim_feedforward, h = config->nhead;
    double p = config->dropout, eps = config->layer_norm_eps;
    /* PyTorch's construction order, which fixes the order of the draws. */
    m->self_attn = tg_mha_new(d, h, p, true, dtype, rng);
    m->multihead_attn = m->self_attn ? tg_mha_new(d, h, p, true, dtype, rng) : NULL;
    m->linear1 = m->multihead_attn ? tg_linear_new(d, dff, true, dtype, rng) : NULL;
    m->linear2 = m->linear1 ? tg_linear_new(dff, d, true, dtype, rng) : NULL;
    m->norm1 = m->linear2 ? tg_layer_norm_module_new(1, &d, eps, true, dtype) : NULL;
    m->norm2 = m->norm1 ? tg_layer_norm_module_new(1, &d, eps, true, dtype) : NULL;
    m->norm3 = m->norm2 ? tg_layer_norm_module_new(1, &d, eps, true, dtype) : NULL;
    if (!m->norm3) {
        tg_decoder_layer_free(m);
        return NULL;
    }
    /* A new torch.nn.Module is in training mode. */
    tg_decoder_layer_set_train(m, true);
    return m;
}

/* ---- argument checks ------------------------------------------------------ */

/* tgt [B, T, d] and memory [B, S, d], or both unbatched [T, d] and [S, d],
 * of one dtype. */
static int check_inputs(const tg_decoder_layer *m, const tg_tensor *tgt, const tg_tensor *mem)
{
    const char *fn = "tg_decoder_layer_forward";
    int64_t d = m->config.d_model;
    int nd = tg_ndim(tgt);
    if ((nd != 2 && nd != 3) || tg_shape(tgt)[nd - 1] != d) {
        tg_fail(TG_ERR_SHAPE, "%s: tgt %s is not [B, T, d_model %lld] or [T, d_model]", fn,
                TG_SHAPE_STRING(tgt), (long long)d);
        return -1;
    }
    if (tg_ndim(mem) != nd || tg_shape(mem)[nd - 1] != d || (nd == 3 && tg_shape(mem)[0] !=
                                                                           tg_shape(tgt)[0])) {
        tg_fail(TG_ERR_SHAPE, "%s: memory %s does not fit tgt %s: it must be [B, S, d_model "
                "%lld] with tgt's batch (or [S, d_model] beside an unbatched tgt)", fn,
                TG_SHAPE_STRING(mem), TG_SHAPE_STRING(tgt), (long long)d);
        return -1;
    }
    if (tg_dtype_of(mem) != tg_dtype_of(tgt)) {
        tg_fail(TG_ERR_DTYPE, "%s: memory is %s and tgt %s", fn,
                tg_dtype_name(tg_dtype_of(mem)), tg_dtype_name(tg_dtype_of(tgt)));
        return -1;
    }
    return 0;
}

/* An attention mask [L, S] (or [B * nhead, L, S] when batched), or with
 * padding a key padding mask [B, S] ([S] when unbatched); bool or float. */
static int check_mask(const tg_decoder_layer *m, const char *name, const tg_tensor *mask,
                      bool padding, int64_t B, int64_t L, int64_t S)
{
    const char *fn = "tg_decoder_layer_forward";
    if (!mask)
        return 0;
    tg_dtype dt = tg_dtype_of(mask);
    if (dt != TG_BOOL && dt != TG_FLOAT32 && dt != TG_FLOAT64) {
        tg_fail(TG_ERR_DTYPE, "%s: %s is %s, neither bool nor float", fn, name,
                tg_dtype_name(dt));
        return -1;
    }
    const int64_t *sh = tg_shape(mask);
    int nd = tg_ndim(mask);
    bool ok;
    if (padding)
        ok = B < 0 ? nd == 1 && sh[0] == S : nd == 2 && sh[0] == B && sh[1] == S;
    else
        ok = (nd == 2 && sh[0] == L && sh[1] == S) ||
             (nd == 3 && sh[0] == (B < 0 ? 1 : B) * m->config.nhead && sh[1] == L && sh[2] == S);
    if (!ok) {
        if (padding && B < 0)
            tg_fail(TG_ERR_SHAPE, "%s: %s %s is not [%lld] (unbatched)", fn, name,
                    TG_SHAPE_STRING(mask), (long long)S);
        else if (padding)
            tg_fail(TG_ERR_SHAPE, "%s: %s %s is not [B, %s] = [%lld,%lld]", fn, name,
                    TG_SHAPE_STRING(mask), S == L ? "T" : "S", (long long)B, (long long)S);
        else
            tg_fail(TG_ERR_SHAPE, "%s: %s %s is not [%lld,%lld] (or [B * nhead, %lld, %lld])",
                    fn, name, TG_SHAPE_STRING(mask), (long long)L, (long long)S, (long long)L,
                    (long long)S);
        return -1;
    }
    return 0;
}

static int check_masks(const tg_decoder_layer *m, const tg_tensor *tgt, const tg_tensor *mem,
                       const tg_decoder_masks *k)
{
    bool batched = tg_ndim(tgt) == 3;
    int64_t B = batched ? tg_shape(tgt)[0] : -1;
    int64_t T = tg_shape(tgt)[batched], S = tg_shape(mem)[batched];
    return check_mask(m, "tgt_mask", k->tgt_mask, false, B, T, T) < 0 ||
           check_mask(m, "memory_mask", k->memory_mask, false, B, T, S) < 0 ||
           check_mask(m, "tgt_key_padding_mask", k->tgt_key_padding_mask, true, B, T, T) < 0 ||
           check_mask(m, "memory_key_padding_mask", k->memory_key_padding_mask, true, B, T, S) < 0
           ? -1 : 0;
}

/* ---- forward -------------------------------------------------------------- */

/* The three sublayers, for tg__residual. */
typedef struct {
    const tg_decoder_layer *m;
    const tg_tensor *memory;
    tg_mha_options self_opts, cross_opts;
    const tg_dropout_module *drop;
} sublayer_ctx;

static tg_tensor *self_attention(const void *ctx, const tg_tensor *x)
{
    const sublayer_ctx *c = ctx;
    return tg_mha_forward(c->m->self_attn, x, x, x, &c->self_opts, NULL);
}

static tg_tensor *cross_attention(const void *ctx, const tg_tensor *x)
{
    const sublayer_ctx *c = ctx;
    return tg_mha_forward(c->m->multihead_attn, x, c->memory, c->memory, &c->cross_opts, NULL);
}

static tg_tensor *feed_forward(const void *ctx, const tg_tensor *x)
{
    const sublayer_ctx *c = ctx;
    return tg__feed_forward(c->m->linear1, c->m->linear2, c->m->config.activation, x, c->drop);
}

tg_tensor *tg_decoder_layer_forward(const tg_decoder_layer *m, const tg_tensor *tgt,
                                    const tg_tensor *memory, const tg_decoder_masks *masks)
{
    TG_CHECK_ARG(m);
    TG_CHECK_ARG(tgt);
    TG_CHECK_ARG(memory);
    if (!m->self_attn || !m->multihead_attn || !m->linear1 || !m->linear2 || !m->norm1 ||
        !m->norm2 || !m->norm3)
        return tg_fail(TG_ERR_NULL, "tg_decoder_layer_forward: the layer lacks a sub-module");
    const tg_decoder_masks none = {0};
    if (!masks)
        masks = &none;
    if (check_inputs(m, tgt, memory) < 0 || check_masks(m, tgt, memory, masks) < 0)
        return NULL;
    /* dropout1, 2, 3 and the feed-forward's dropout share p and rng. */
    tg_dropout_module drop = {m->config.dropout, m->train, m->rng};
    sublayer_ctx c = {
        .m = m, .memory = memory, .drop = &drop,
        .self_opts = {.attn_mask = masks->tgt_mask, .key_padding_mask = masks->tgt_key_padding_mask,
                      .is_causal = masks->tgt_is_causal && !masks->tgt_mask},
        .cross_opts = {.attn_mask = masks->memory_mask,
                       .key_padding_mask = masks->memory_key_padding_mask},
    };
    bool nf = m->config.norm_first;
    tg_scope_begin();
    tg_tensor *x = tg__residual(nf, m->norm1, &drop, tgt, self_attention, &c);
    x = x ? tg__residual(nf, m->norm2, &drop, x, cross_attention, &c) : NULL;
    x = x ? tg__residual(nf, m->norm3, &drop, x, feed_forward, &c) : NULL;
    return tg_scope_end_keep(x);
}

int tg_decoder_layer_params(const tg_decoder_layer *m, const char *prefix, tg_params *ps)
{
    TG_CHECK_ARG_STATUS(m);
    TG_CHECK_ARG_STATUS(ps);
    int start = ps->count;
    /* The order of PyTorch's state_dict: modules in construction order. */
    if (tg__add_mha(prefix, "self_attn", m->self_attn, ps) < 0 ||
        tg__add_mha(prefix, "multihead_attn", m->multihead_attn, ps) < 0 ||
        tg__add_linear(prefix, "linear1", m->linear1, ps) < 0 ||
        tg__add_linear(prefix, "linear2", m->linear2, ps) < 0 ||
        tg__add_norm(prefix, "norm1", m->norm1, ps) < 0 ||
        tg__add_norm(prefix, "norm2", m->norm2, ps) < 0 ||
        tg__add_norm(prefix, "norm3", m->norm3, ps) < 0) {
        tg_params_truncate(ps, start);
        return -1;
    }
    return 0;
}

void tg_decoder_layer_set_train(tg_decoder_layer *m, bool train)
{
    if (!m)
        return;
    m->train = train;
    tg_mha_set_train(m->self_attn, train);
    tg_mha_set_train(m->multihead_attn, train);
}

void tg_decoder_layer_free(tg_decoder_layer *m)
{
    if (!m)
        return;
    tg_mha_free(m->self_attn);
    tg_mha_free(m->multihead_attn);
    tg_linear_free(m->linear1);
    tg_linear_free(m->linear2);
    tg_layer_norm_module_free(m->norm1);
    tg_layer_norm_module_free(m->norm2);
    tg_layer_norm_module_free(m->norm3);
    free(m);
}

/* ---- the stack ------------------------------------------------------------ */

tg_decoder *tg_decoder_new(const tg_decoder_config *layer, int num_layers, bool final_norm,
                           tg_dtype dtype, tg_rng *rng)
{
    TG_CHECK_ARG(layer);
    TG_CHECK_ARG(rng);
    if (tg__check_layer_config("tg_decoder_new", layer, dtype) < 0)
        return NULL;
    if (num_layers < 1)
        return tg_fail(TG_ERR_VALUE, "tg_decoder_new: num_layers %d must be at least 1",
                       num_layers);
    tg_decoder *m = calloc(1, sizeof *m);
    if (!m)
        return tg_fail(TG_ERR_NOMEM, "tg_decoder_new: out of memory");
    m->layers = calloc((size_t)num_layers, sizeof *m->layers);
    if (!m->layers) {
        free(m);
        return tg_fail(TG_ERR_NOMEM, "tg_decoder_new: out of memory for %d layers", num_layers);
    }
    m->num_layers = num_layers;
    for (int i = 0; i < num_layers; i++)
        if (!(m->layers[i] = tg_decoder_layer_new(layer, dtype, rng))) {
            tg_decoder_free(m);
            return NULL;
        }
    if (final_norm &&
        !(m->norm = tg_layer_norm_module_new(1, &layer->d_model, layer->layer_norm_eps, true,
                                             dtype))) {
        tg_decoder_free(m);
        return NULL;
    }
    return m;
}

/* tgt [B, T, d], memory [B, S, d] -> [B, T, d], through every layer and the final norm */
tg_tensor *tg_decoder_forward(const tg_decoder *m, const tg_tensor *tgt, const tg_tensor *memory,
                              const tg_decoder_masks *masks)
{
    TG_CHECK_ARG(m);
    TG_CHECK_ARG(tgt);
    TG_CHECK_ARG(memory);
    if (m->num_layers < 1 || !m->layers)
        return tg_fail(TG_ERR_VALUE, "tg_decoder_forward: the decoder has %d layers",
                       m->num_layers);
    tg_scope_begin();
    tg_tensor *x = (tg_tensor *)tgt;
    for (int i = 0; i < m->num_layers && x; i++)
        x = tg_decoder_layer_forward(m->layers[i], x, memory, masks);
    if (m->norm && x)
        x = tg_layer_norm_module_forward(m->norm, x);
    return tg_scope_end_keep(x);
}

static int add_layer(const void *stack, int i, const char *prefix, tg_params *ps)
{
    return tg_decoder_layer_params(((const tg_decoder *)stack)->layers[i], prefix, ps);
}

int tg_decoder_params(const tg_decoder *m, const char *prefix, tg_params *ps)
{
    TG_CHECK_ARG_STATUS(m);
    TG_CHECK_ARG_STATUS(ps);
    return tg__add_stack(prefix, m, m->num_layers, add_layer, m->norm, ps);
}

void tg_decoder_set_train(tg_decoder *m, bool train)
{
    if (!m)
        return;
    for (int i = 0; i < m->num_layers; i++)
        tg_decoder_layer_set_train(m->layers[i], train);
}

void tg_decoder_free(tg_decoder *m)
{
    if (!m)
        return;
    for (int i = 0; m->layers && i < m->num_layers; i++)
        tg_decoder_layer_free(m->layers[i]);
    free(m->layers);
    tg_layer_norm_module_free(m->norm);
    free(m);
}
