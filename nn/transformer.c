/* nn.Transformer (batch_first=True): an encoder stack with its final norm
 * feeding the memory of a decoder stack with its final norm, and
 * generate_square_subsequent_mask's equivalent. */
#include <math.h>
#include <stdlib.h>

#include <tensorgrad/module.h>
#include <tensorgrad/nn.h>

#include "layer_parts.h"

tg_tensor *tg_square_subsequent_mask(int64_t n, tg_dtype dtype)
{
    if (n < 1)
        return tg_fail(TG_ERR_VALUE, "tg_square_subsequent_mask: n %lld must be at least 1",
                       (long long)n);
    if (dtype != TG_BOOL && dtype != TG_FLOAT32 && dtype != TG_FLOAT64)
        return tg_fail(TG_ERR_DTYPE, "tg_square_subsequent_mask: dtype %s is neither bool nor "
                       "float", tg_dtype_name(dtype));
    if (dtype == TG_BOOL)
        return tg_causal_mask(n);
    tg_scope_begin();
    tg_tensor *m = tg_masked_fill(tg_zeros(dtype, 2, (int64_t[]){n, n}), tg_causal_mask(n),
                                  -INFINITY);
    return tg_scope_end_keep(m);
}

/* PyTorch's Transformer._reset_parameters: every parameter of two or more
 * dims, in state_dict order, from xavier_uniform (fan_in the columns,
 * fan_out the rows). */
static int reset_parameters(tg_transformer *m, tg_rng *rng)
{
    tg_params ps = {0};
    if (tg_transformer_params(m, NULL, &ps) < 0)
        return -1;
    bool was = tg_set_grad_enabled(false);
    int rc = 0;
    /* The draws belong to this scope, not to one the caller may have open. */
    tg_scope_begin();
    for (int i = 0; rc == 0 && i < ps.count; i++) {
        tg_tensor *p = ps.tensors[i];
        if (tg_ndim(p) < 2)
            continue;
        double a = sqrt(6.0 / (double)(tg_shape(p)[0] + tg_shape(p)[1]));
        tg_tensor *u = tg_uniform(rng, tg_dtype_of(p), tg_ndim(p), tg_shape(p), -a, a);
        rc = u ? tg_copy_from(p, tg_dtype_of(p), tg_data_const(u), tg_numel(p)) : -1;
    }
    tg_scope_end();
    tg_set_grad_enabled(was);
    tg_params_clear(&ps);
    return rc;
}

tg_transformer *tg_transformer_new(const tg_transformer_config *config, tg_dtype dtype,
                                   tg_rng *rng)
{
    TG_CHECK_ARG(config);
    TG_CHECK_ARG(rng);
    const tg_transformer_config *c = config;
    tg_encoder_config layer = {.d_model = c->d_model, .nhead = c->nhead,
                               .dim_feedforward = c->dim_feedforward, .dropout = c->dropout,
                               .layer_norm_eps = c->layer_norm_eps, .activation = c->activation,
                               .norm_first = c->norm_first};
    if (tg__check_layer_config("tg_transformer_new", &layer, dtype) < 0)
        return NULL;
    if (c->num_encoder_layers < 1 || c->num_decoder_layers < 1)
        return tg_fail(TG_ERR_VALUE, "tg_transformer_new: num_encoder_layers %d and "
                       "num_decoder_layers %d must be at least 1", c->num_encoder_layers,
                       c->num_decoder_layers);
    tg_transformer *m = calloc(1, sizeof *m);
    if (!m)
        return tg_fail(TG_ERR_NOMEM, "tg_transformer_new: out of memory");
    m->config = *c;
    m->encoder = tg_encoder_new(&layer, c->num_encoder_layers, true, dtype, rng);
    m->decoder = m->encoder ? tg_decoder_new(&layer, c->num_decoder_layers, true, dtype, rng)
                            : NULL;
    if (!m->decoder || reset_parameters(m, rng) < 0) {
        tg_transformer_free(m);
        return NULL;
    }
    return m;
}

/* src [B, S, d] and tgt [B, T, d] (or both unbatched) of one batch and width. */
static int check_inputs(const tg_transformer *m, const tg_tensor *src, const tg_tensor *tgt)
{
    int nd = tg_ndim(src);
    int64_t d = m->config.d_model;
    bool ok = (nd == 2 || nd == 3) && tg_ndim(tgt) == nd && tg_shape(src)[nd - 1] == d &&
              tg_shape(tgt)[nd - 1] == d && (nd == 2 || tg_shape(src)[0] == tg_shape(tgt)[0]);
    if (!ok) {
        tg_fail(TG_ERR_SHAPE, "tg_transformer_forward: src %s and tgt %s must be [B, S, d_model "
                "%lld] and [B, T, d_model] with one B (or both unbatched)", TG_SHAPE_STRING(src),
                TG_SHAPE_STRING(tgt), (long long)d);
        return -1;
    }
    return 0;
}

tg_tensor *tg_transformer_forward(const tg_transformer *m, const tg_tensor *src,
                                  const tg_tensor *tgt, const tg_transformer_masks *masks)
{
    TG_CHECK_ARG(m);
    TG_CHECK_ARG(src);
    TG_CHECK_ARG(tgt);
    if (!m->encoder || !m->decoder)
        return tg_fail(TG_ERR_NULL, "tg_transformer_forward: the model lacks its %s",
                       m->encoder ? "decoder" : "encoder");
    if (check_inputs(m, src, tgt) < 0)
        return NULL;
    const tg_transformer_masks none = {0};
    if (!masks)
        masks = &none;
    tg_scope_begin();
    tg_tensor *memory = tg_encoder_forward(m->encoder, src, masks->src_mask,
                                           masks->src_key_padding_mask);
    tg_tensor *y = memory ? tg_decoder_forward(m->decoder, tgt, memory, &masks->tgt) : NULL;
    return tg_scope_end_keep(y);
}

int tg_transformer_params(const tg_transformer *m, const char *prefix, tg_params *ps)
{
    TG_CHECK_ARG_STATUS(m);
    TG_CHECK_ARG_STATUS(ps);
    int start = ps->count;
    char *enc = tg__sub_prefix(prefix, "encoder"), *dec = tg__sub_prefix(prefix, "decoder");
    int rc = enc && dec && tg_encoder_params(m->encoder, enc, ps) == 0 &&
                     tg_decoder_params(m->decoder, dec, ps) == 0
                 ? 0 : -1;
    free(enc);
    free(dec);
    if (rc < 0)
        tg_params_truncate(ps, start);
    return rc;
}

void tg_transformer_set_train(tg_transformer *m, bool train)
{
    if (!m)
        return;
    tg_encoder_set_train(m->encoder, train);
    tg_decoder_set_train(m->decoder, train);
}

void tg_transformer_free(tg_transformer *m)
{
    if (!m)
        return;
    tg_encoder_free(m->encoder);
    tg_decoder_free(m->decoder);
    free(m);
}
