/* The parts that the Transformer layers and stacks share: config checks, the
 * feed-forward block, the residual-and-norm wrapper, state-dict names, and
 * the causal mask of cached decoding (decoder_cache.c and llama.c use it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tensorgrad/module.h>
#include <tensorgrad/nn.h>

#include "layer_parts.h"

int tg__check_layer_config(const char *fn, const tg_encoder_config *c, tg_dtype dtype)
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

tg_tensor *tg__feed_forward(const tg_linear *linear1, const tg_linear *linear2, tg_activation act,
                            const tg_tensor *x, const tg_dropout_module *drop)
{
    tg_scope_begin();
    tg_tensor *h = tg_linear_forward(linear1, x); /* [B, T, dff] */
    h = act == TG_ACT_GELU ? tg_gelu(h, TG_GELU_ERF) : tg_relu(h);
    h = tg_linear_forward(linear2, tg_dropout_module_forward(drop, h)); /* [B, T, d] */
    return tg_scope_end_keep(h);
}

tg_tensor *tg__residual(bool norm_first, const tg_layer_norm_module *norm,
                        const tg_dropout_module *drop, const tg_tensor *x, tg__sublayer f,
                        const void *ctx)
{
    tg_scope_begin();
    tg_tensor *y;
    if (norm_first) {
        tg_tensor *h = tg_layer_norm_module_forward(norm, x);
        y = h ? tg_add(x, tg_dropout_module_forward(drop, f(ctx, h))) : NULL;
    } else {
        tg_tensor *a = f(ctx, x);
        y = tg_layer_norm_module_forward(norm, tg_add(x, tg_dropout_module_forward(drop, a)));
    }
    return tg_scope_end_keep(y);
}

tg_tensor *tg__offset_causal_mask(int64_t T, int64_t pos0)
{
    int64_t S = pos0 + T;
    tg_tensor *mask = tg_zeros(TG_BOOL, 2, (int64_t[]){T, S});
    bool *p = mask ? tg_data(mask) : NULL;
    for (int64_t i = 0; p && i < T; i++)
        for (int64_t j = pos0 + i + 1; j < S; j++)
            p[i * S + j] = true;
    return mask;
}

char *tg__sub_prefix(const char *prefix, const char *name)
{
    size_t lp = prefix ? strlen(prefix) : 0, ln = strlen(name);
    char *s = malloc(lp + ln + 2);
    if (!s) {
        tg_fail(TG_ERR_NOMEM, "out of memory for the parameter name \"%s\"", name);
        return NULL;
    }
    if (lp) {
        memcpy(s, prefix, lp);
        s[lp++] = '.';
    }
    memcpy(s + lp, name, ln + 1);
    return s;
}

int tg__add_mha(const char *prefix, const char *name, const tg_mha *m, tg_params *ps)
{
    char *p = tg__sub_prefix(prefix, name);
    int rc = p ? tg_mha_params(m, p, ps) : -1;
    free(p);
    return rc;
}

int tg__add_linear(const char *prefix, const char *name, const tg_linear *m, tg_params *ps)
{
    char *p = tg__sub_prefix(prefix, name);
    int rc = p ? tg_linear_params(m, p, ps) : -1;
    free(p);
    return rc;
}

int tg__add_norm(const char *prefix, const char *name, const tg_layer_norm_module *m,
                 tg_params *ps)
{
    char *p = tg__sub_prefix(prefix, name);
    int rc = p ? tg_layer_norm_module_params(m, p, ps) : -1;
    free(p);
    return rc;
}

int tg__add_stack(const char *prefix, const void *stack, int n,
                  int (*add_layer)(const void *stack, int i, const char *prefix, tg_params *ps),
                  const tg_layer_norm_module *norm, tg_params *ps)
{
    int start = ps->count;
    char *layers = tg__sub_prefix(prefix, "layers");
    int rc = layers ? 0 : -1;
    for (int i = 0; rc == 0 && i < n; i++) {
        char idx[24];
        snprintf(idx, sizeof idx, "%d", i);
        char *p = tg__sub_prefix(layers, idx);
        rc = p ? add_layer(stack, i, p, ps) : -1;
        free(p);
    }
    free(layers);
    if (rc == 0 && norm)
        rc = tg__add_norm(prefix, "norm", norm, ps);
    if (rc < 0)
        tg_params_truncate(ps, start);
    return rc;
}
