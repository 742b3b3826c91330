/* What the Transformer's layers share (encoder.c, decoder.c, transformer.c):
 * config checks, the feed-forward block, the residual-and-norm wrapper,
 * state-dict naming; and cached decoding's causal mask. Internal. */
#ifndef TG_NN_LAYER_PARTS_H
#define TG_NN_LAYER_PARTS_H

#include <tensorgrad/nn.h>

/* Every value of a layer config that PyTorch would reject (sizes not
 * positive, d_model not divisible by nhead, dropout outside [0, 1),
 * layer_norm_eps <= 0, an unknown activation: TG_ERR_VALUE; a dtype that is
 * not float: TG_ERR_DTYPE), named in a message of fn. 0 or -1. */
int tg__check_layer_config(const char *fn, const tg_encoder_config *c, tg_dtype dtype);

/* linear2(dropout(activation(linear1(x)))), without the dropout after it:
 * x [..., d] -> [..., d]. */
tg_tensor *tg__feed_forward(const tg_linear *linear1, const tg_linear *linear2, tg_activation act,
                            const tg_tensor *x, const tg_dropout_module *drop);

/* Bool [T, pos0 + T], true where key j comes after query i (j > pos0 + i):
 * the causal mask of T queries that follow pos0 cached positions. A new
 * reference, or NULL. */
tg_tensor *tg__offset_causal_mask(int64_t T, int64_t pos0);

/* A sublayer: x [B, T, d] -> [B, T, d], a new reference (NULL on error). */
typedef tg_tensor *(*tg__sublayer)(const void *ctx, const tg_tensor *x);

/* The sublayer with its residual connection and norm, as PyTorch's layers
 * run it: norm(x + drop(f(x))) after (post-norm), or x + drop(f(norm(x)))
 * with norm_first. A new reference, or NULL. */
tg_tensor *tg__residual(bool norm_first, const tg_layer_norm_module *norm,
                        const tg_dropout_module *drop, const tg_tensor *x, tg__sublayer f,
                        const void *ctx);

/* The parameters of one sub-module under prefix.name (just name without a
 * prefix). 0, or -1 with ps as it was. */
int tg__add_mha(const char *prefix, const char *name, const tg_mha *m, tg_params *ps);
int tg__add_linear(const char *prefix, const char *name, const tg_linear *m, tg_params *ps);
int tg__add_norm(const char *prefix, const char *name, const tg_layer_norm_module *m,
                 tg_params *ps);
/* "prefix.name" (just name without a prefix) in a malloc'd string, or NULL
 * with TG_ERR_NOMEM. */
char *tg__sub_prefix(const char *prefix, const char *name);

/* A stack's parameters in PyTorch's order: "prefix.layers.N.*" for N in
 * [0, n) through add_layer(stack, N, that prefix, ps), then "prefix.norm.*"
 * when norm is not NULL. All or nothing: 0, or -1 with ps as it was. */
int tg__add_stack(const char *prefix, const void *stack, int n,
                  int (*add_layer)(const void *stack, int i, const char *prefix, tg_params *ps),
                  const tg_layer_norm_module *norm, tg_params *ps);

#endif
