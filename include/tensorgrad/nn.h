/* tensorgrad nn: modules, optimizers and checkpoints for model code.
 *
 * Modules are plain structs whose tensors you may read (lin->weight), made
 * by tg_<module>_new and freed by tg_<module>_free (NULL is a no-op). A
 * module's forward follows the ownership rule of tensor.h: it returns a new
 * reference and borrows its arguments. Parameters are collected by name into
 * a tg_params list, with PyTorch's state-dict names ("0.weight",
 * "layers.1.norm1.bias"), which is what optimizers and checkpoints take.
 *
 *   tg_params ps = {0};
 *   tg_linear_params(lin, "fc", &ps);            // "fc.weight", "fc.bias"
 *   tg_optim *opt = tg_adamw_new(&ps, 1e-3, 0.9, 0.999, 1e-8, 0.01);
 *   ... tg_backward(loss, NULL); tg_optim_step(opt); tg_optim_zero_grad(opt);
 *   tg_safetensors_save("model.safetensors", &ps, 0, NULL, NULL);
 *   tg_optim_free(opt); tg_params_clear(&ps);
 *
 * Mixed precision needs nothing from the modules or the models (tg_gpt,
 * tg_llama, tg_encoder): the matmul precision is a thread-wide setting
 * (tensor.h), so a model trains with bfloat16 products when its forward runs
 * under tg_set_matmul_precision(TG_PRECISION_BF16); its parameters,
 * gradients and optimizer state stay float32, and backward uses the
 * precision each op recorded in the forward:
 *   tg_precision was = tg_set_matmul_precision(TG_PRECISION_BF16);
 *   tg_gpt_forward(m, idx, targets, &loss); tg_backward(loss, NULL);
 *   tg_set_matmul_precision(was); tg_optim_step(opt);
 */
#ifndef TG_NN_H
#define TG_NN_H

#include "autograd.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- named parameters (nn/params.c) ------------------------------------------ */

/* A growable list of (name, tensor) pairs. The list holds a reference to
 * each tensor and a copy of each name. Zero-initialise it; clear it when done. */
typedef struct {
    int count, capacity;
    char **names;
    tg_tensor **tensors;
} tg_params;

/* Appends prefix.name (just name when prefix is NULL or ""); a name already
 * in the list is TG_ERR_VALUE. 0, or -1 on error. */
TG_API int tg_params_add(tg_params *ps, const char *prefix, const char *name, tg_tensor *t);
/* The tensor called name, borrowed, or NULL (no error) if there is none. */
TG_API tg_tensor *tg_params_find(const tg_params *ps, const char *name);
/* Elements over all tensors. */
TG_API int64_t tg_params_numel(const tg_params *ps);
/* Drops the entries past the first count: undoes additions that a failing
 * operation made partway. */
TG_API void tg_params_truncate(tg_params *ps, int count);
TG_API void tg_params_clear(tg_params *ps);
/* Checks that every floating-point tensor of ps (float32, float64, bfloat16;
 * integer and bool tensors are skipped) holds finite numbers only. Loading
 * does not check this: tg_safetensors_load reads NaN and inf as they are,
 * as PyTorch's loaders do, so call this on what was loaded to refuse a
 * checkpoint that holds them (or on a model after a step, to find where a
 * NaN went). 0; or -1 with TG_ERR_VALUE naming the first tensor that is not
 * finite, the index and value of its first such element and how many it
 * holds, e.g. "tg_params_check_finite: 'wte.weight' (float32 [13,32]) holds
 * nan at [3,5] (not finite: 1 of its 416 values)"; TG_ERR_NULL for a NULL
 * list, name or tensor. */
TG_API int tg_params_check_finite(const tg_params *ps);

/* ---- modules (nn/linear.c, nn/norm.c, nn/embedding.c) ---------------------- */
/* Each _new initialises its parameters as PyTorch's defaults do, drawing
 * from rng in a fixed order, and marks them as requiring grad. Every
 * constructor here returns NULL on error with: TG_ERR_NULL for a NULL rng
 * (or config), TG_ERR_VALUE for a size that is not positive or an option out
 * of range (each constructor's comment says which), TG_ERR_DTYPE for a dtype
 * that is not float32 or float64, TG_ERR_NOMEM when memory runs out; nothing
 * is leaked. */

typedef struct {
    int64_t in_features, out_features;
    tg_tensor *weight; /* [out, in], U(-1/sqrt(in), 1/sqrt(in)) (kaiming_uniform, a=sqrt(5)) */
    tg_tensor *bias;   /* [out] or NULL, U(-1/sqrt(in), 1/sqrt(in)) */
} tg_linear;
/* in_features or out_features < 1: TG_ERR_VALUE. */
TG_API tg_linear *tg_linear_new(int64_t in_features, int64_t out_features, bool bias,
                                tg_dtype dtype, tg_rng *rng);
/* x [..., in] -> [..., out] = x @ weight^T + bias */
TG_API tg_tensor *tg_linear_forward(const tg_linear *m, const tg_tensor *x);
TG_API int tg_linear_params(const tg_linear *m, const char *prefix, tg_params *ps);
TG_API void tg_linear_free(tg_linear *m);

typedef struct {
    int ndim;                          /* normalised trailing dims */
    int64_t shape[TG_MAX_DIMS];
    double eps;
    tg_tensor *weight, *bias;          /* ones and zeros, or NULL without affine */
} tg_layer_norm_module;
/* ndim outside [1, TG_MAX_DIMS], a size < 1 in shape, or eps <= 0:
 * TG_ERR_VALUE. Draws nothing. */
TG_API tg_layer_norm_module *tg_layer_norm_module_new(int ndim, const int64_t *shape, double eps,
                                                      bool affine, tg_dtype dtype);
TG_API tg_tensor *tg_layer_norm_module_forward(const tg_layer_norm_module *m, const tg_tensor *x);
TG_API int tg_layer_norm_module_params(const tg_layer_norm_module *m, const char *prefix,
                                       tg_params *ps);
TG_API void tg_layer_norm_module_free(tg_layer_norm_module *m);

/* RMSNorm over the last dim (torch.nn.RMSNorm, Hugging Face's
 * LlamaRMSNorm): parameter "weight" [dim], ones. */
typedef struct {
    int64_t dim;
    double eps;
    tg_tensor *weight; /* [dim], ones */
} tg_rms_norm_module;
/* dim < 1, or eps not positive and finite: TG_ERR_VALUE; dtype not float:
 * TG_ERR_DTYPE. Draws nothing. */
TG_API tg_rms_norm_module *tg_rms_norm_module_new(int64_t dim, double eps, tg_dtype dtype);
/* x [..., dim] -> the same shape, tg_rms_norm(x, weight, eps) */
TG_API tg_tensor *tg_rms_norm_module_forward(const tg_rms_norm_module *m, const tg_tensor *x);
TG_API int tg_rms_norm_module_params(const tg_rms_norm_module *m, const char *prefix,
                                     tg_params *ps);
TG_API void tg_rms_norm_module_free(tg_rms_norm_module *m);

typedef struct {
    int64_t num_embeddings, embedding_dim;
    tg_tensor *weight; /* [num, dim], N(0, 1) */
} tg_embedding_module;
/* num_embeddings or embedding_dim < 1: TG_ERR_VALUE. */
TG_API tg_embedding_module *tg_embedding_module_new(int64_t num_embeddings, int64_t embedding_dim,
                                                    tg_dtype dtype, tg_rng *rng);
/* int64 indices of any shape -> indices.shape + [dim] */
TG_API tg_tensor *tg_embedding_module_forward(const tg_embedding_module *m,
                                              const tg_tensor *indices);
TG_API int tg_embedding_module_params(const tg_embedding_module *m, const char *prefix,
                                      tg_params *ps);
TG_API void tg_embedding_module_free(tg_embedding_module *m);

typedef struct {
    double p;   /* probability of zeroing an element, in [0, 1) */
    bool train; /* identity when false */
    tg_rng *rng; /* borrowed: must outlive the module */
} tg_dropout_module;
/* A stack value is fine: tg_dropout_module d = {0.1, true, rng}; */
TG_API tg_tensor *tg_dropout_module_forward(const tg_dropout_module *m, const tg_tensor *x);

/* ---- attention (nn/sdpa.c, nn/attention.c) --------------------------------- */

/* softmax(q @ k^T * scale + mask) @ v, with dropout on the weights:
 * q [..., L, E], k [..., S, E], v [..., S, Ev] -> [..., L, Ev], batch dims
 * broadcast. mask (may be NULL) broadcasts to [..., L, S]: bool, true =
 * not allowed, or float, added to the scores. is_causal masks key j > query
 * i (with mask NULL). scale <= 0 means 1/sqrt(E). A query whose every key is
 * masked gets zero weights, not NaN. When weights is not NULL it receives the
 * attention weights [..., L, S] (after dropout). dropout_p needs rng.
 * Grouped-query attention as tg_attention (autograd.h): q [B, H, L, E] with
 * k [B, Hkv, S, E] and v [B, Hkv, S, Ev], Hkv < H dividing H, query head h
 * reading kv head h / (H / Hkv) (Hkv = 1: multi-query); in place through
 * the fused op, repeated only when weights are asked for. Other head counts
 * below q's give TG_ERR_SHAPE naming them. */
TG_API tg_tensor *tg_scaled_dot_product_attention(const tg_tensor *q, const tg_tensor *k,
                                                  const tg_tensor *v, const tg_tensor *mask,
                                                  double dropout_p, bool is_causal, double scale,
                                                  tg_rng *rng, tg_tensor **weights);

/* torch.nn.MultiheadAttention(embed_dim, num_heads, dropout, bias, batch_first=True,
 * kdim, vdim). Parameter names: in_proj_weight [3E, E], in_proj_bias [3E],
 * out_proj.weight [E, E], out_proj.bias [E]. Keys and values of other widths
 * (kdim or vdim != E) have q_proj_weight [E, E], k_proj_weight [E, kdim],
 * v_proj_weight [E, vdim] in place of in_proj_weight, in that order before
 * in_proj_bias, as PyTorch names them. Init as PyTorch: xavier_uniform
 * projection weights, zero biases, out_proj.weight like Linear. */
typedef struct {
    int64_t embed_dim, num_heads, head_dim;
    double dropout;
    bool train;        /* dropout on the attention weights only when true */
    tg_rng *rng;       /* borrowed, for dropout */
    tg_tensor *in_proj_weight, *in_proj_bias; /* bias NULL without bias; weight NULL when
                                                 the three below are used */
    tg_linear *out_proj;
    int64_t kdim, vdim; /* widths of key and value; 0 (a struct built by hand) means E */
    tg_tensor *q_proj_weight, *k_proj_weight, *v_proj_weight; /* NULL with in_proj_weight */
} tg_mha;

typedef struct {
    const tg_tensor *attn_mask;        /* [L, S] or [B*num_heads, L, S]; bool (true =
                                          not allowed) or float (added); may be NULL */
    const tg_tensor *key_padding_mask; /* [B, S]; bool (true = ignore) or float; NULL */
    bool need_weights;                 /* return the attention weights */
    bool average_attn_weights;         /* [B, L, S] averaged over heads, else [B, H, L, S] */
    bool is_causal;                    /* mask the future (when attn_mask is NULL) */
} tg_mha_options;

/* Draws in_proj_weight, then out_proj.weight, from rng (PyTorch draws
 * out_proj first: the distributions match, not the streams). The module
 * starts in training mode, as in PyTorch, and keeps rng for dropout, so rng
 * must outlive it. embed_dim not divisible by num_heads, or dropout outside
 * [0, 1), is TG_ERR_VALUE. */
TG_API tg_mha *tg_mha_new(int64_t embed_dim, int64_t num_heads, double dropout, bool bias,
                          tg_dtype dtype, tg_rng *rng);
/* MultiheadAttention with keys/values of other widths (PyTorch's kdim/vdim).
 * With kdim == vdim == embed_dim this is tg_mha_new (packed in_proj_weight
 * [3E, E]); otherwise the parameters are q_proj_weight [E, E], k_proj_weight
 * [E, kdim], v_proj_weight [E, vdim] (drawn from rng in that order, each
 * xavier_uniform), in_proj_bias [3E] (when bias), out_proj.* -- PyTorch's
 * names and state_dict order for that case. kdim or vdim < 1 is
 * TG_ERR_VALUE; other errors as tg_mha_new. */
TG_API tg_mha *tg_mha_new_kv(int64_t embed_dim, int64_t num_heads, int64_t kdim, int64_t vdim,
                             double dropout, bool bias, tg_dtype dtype, tg_rng *rng);
/* Training (dropout on the weights) or evaluation. NULL: no-op. */
TG_API void tg_mha_set_train(tg_mha *m, bool train);
/* query [B, L, E], key [B, S, kdim] and value [B, S, vdim] (or unbatched [L, E],
 * [S, kdim], [S, vdim], with key_padding_mask [S]) -> [B, L, E]. opts may be NULL (no masks, no
 * weights). attn_mask and key_padding_mask combine: a key either masks is
 * masked. When opts->need_weights and weights is not NULL, *weights receives
 * the attention weights (after dropout, as PyTorch). A query whose every key
 * is masked gets zero weights, so its output is out_proj.bias (PyTorch gives
 * NaN). Bad shapes are TG_ERR_SHAPE, int64 masks TG_ERR_DTYPE. */
TG_API tg_tensor *tg_mha_forward(const tg_mha *m, const tg_tensor *query, const tg_tensor *key,
                                 const tg_tensor *value, const tg_mha_options *opts,
                                 tg_tensor **weights);
TG_API int tg_mha_params(const tg_mha *m, const char *prefix, tg_params *ps);
TG_API void tg_mha_free(tg_mha *m);

/* ---- Transformer encoder (nn/encoder.c) ------------------------------------------ */

typedef enum { TG_ACT_RELU, TG_ACT_GELU } tg_activation;

/* torch.nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout,
 * activation, layer_norm_eps, batch_first=True, norm_first). */
typedef struct {
    int64_t d_model, nhead, dim_feedforward;
    double dropout, layer_norm_eps;
    tg_activation activation;
    bool norm_first;
} tg_encoder_config;

/* Names: self_attn.*, linear1.*, linear2.*, norm1.*, norm2.* (PyTorch's
 * state_dict order). _new draws self_attn (as tg_mha_new), then linear1,
 * then linear2 from rng; the norms start as ones and zeros. A new layer is in
 * training mode (train true), as a new torch module is: dropout1, dropout,
 * dropout2 and the attention dropout use rng while train is set; call
 * tg_encoder_layer_set_train(m, false) to evaluate. A bad config (sizes not
 * positive, d_model not divisible by nhead, dropout outside [0, 1),
 * layer_norm_eps <= 0) is NULL with TG_ERR_VALUE. */
typedef struct {
    tg_encoder_config config;
    bool train;
    tg_rng *rng; /* borrowed, for dropout */
    tg_mha *self_attn;
    tg_linear *linear1, *linear2;
    tg_layer_norm_module *norm1, *norm2;
} tg_encoder_layer;

TG_API tg_encoder_layer *tg_encoder_layer_new(const tg_encoder_config *config, tg_dtype dtype,
                                              tg_rng *rng);
/* src [B, T, d_model] (or unbatched [T, d_model]) -> the same shape;
 * src_mask [T, T] and src_key_padding_mask [B, T] as in tg_mha_options
 * (either may be NULL). Always PyTorch's general path: padded positions get
 * computed values, where PyTorch's inference fast path (eval mode, no grad,
 * nested tensors) would return zeros for them. */
TG_API tg_tensor *tg_encoder_layer_forward(const tg_encoder_layer *m, const tg_tensor *src,
                                           const tg_tensor *src_mask,
                                           const tg_tensor *src_key_padding_mask);
TG_API int tg_encoder_layer_params(const tg_encoder_layer *m, const char *prefix, tg_params *ps);
TG_API void tg_encoder_layer_set_train(tg_encoder_layer *m, bool train);
TG_API void tg_encoder_layer_free(tg_encoder_layer *m);

/* torch.nn.TransformerEncoder: num_layers layers ("layers.0.*", ...) each
 * initialised from rng in turn, then an optional final LayerNorm ("norm.*",
 * eps from the layer config). Unlike PyTorch, whose encoder deep-copies one
 * layer so that every layer starts with the same weights, each layer here
 * draws its own; load a checkpoint to reproduce PyTorch's start exactly.
 * num_layers < 1 is TG_ERR_VALUE. tg_encoder_set_train sets every layer. */
typedef struct {
    int num_layers;
    tg_encoder_layer **layers;
    tg_layer_norm_module *norm; /* NULL without a final norm */
} tg_encoder;

TG_API tg_encoder *tg_encoder_new(const tg_encoder_config *layer, int num_layers, bool final_norm,
                                  tg_dtype dtype, tg_rng *rng);
TG_API tg_tensor *tg_encoder_forward(const tg_encoder *m, const tg_tensor *src,
                                     const tg_tensor *mask, const tg_tensor *src_key_padding_mask);
TG_API int tg_encoder_params(const tg_encoder *m, const char *prefix, tg_params *ps);
TG_API void tg_encoder_set_train(tg_encoder *m, bool train);
TG_API void tg_encoder_free(tg_encoder *m);

/* ---- Transformer decoder and nn.Transformer (nn/decoder.c, nn/transformer.c) ------ */

/* torch.nn.TransformerDecoderLayer(d_model, nhead, dim_feedforward, dropout,
 * activation, layer_norm_eps, batch_first=True, norm_first): the same config
 * struct as the encoder layer, with the same checks. */
typedef tg_encoder_config tg_decoder_config;

/* The decoder's masks; a zeroed struct (or NULL) is no mask. Bool masks are
 * true where attention is not allowed, float masks are added to the scores
 * (any float dtype). */
typedef struct {
    const tg_tensor *tgt_mask;                /* [T, T]: bool (true = not allowed) or float (added); NULL */
    const tg_tensor *memory_mask;             /* [T, S]: likewise; NULL */
    const tg_tensor *tgt_key_padding_mask;    /* [B, T]: bool (true = ignore) or float; NULL */
    const tg_tensor *memory_key_padding_mask; /* [B, S]; NULL */
    bool tgt_is_causal;                       /* mask the future when tgt_mask is NULL */
} tg_decoder_masks;

/* Names (PyTorch's state_dict order): self_attn.*, multihead_attn.*,
 * linear1.*, linear2.*, norm1.*, norm2.*, norm3.*. _new draws self_attn,
 * multihead_attn (each as tg_mha_new), linear1, linear2 from rng; the norms
 * start as ones and zeros. A new layer is in training mode: dropout1/2/3,
 * the feed-forward's dropout and both attentions' dropout draw from rng
 * while train is set. A bad config is NULL with TG_ERR_VALUE (or
 * TG_ERR_DTYPE for the dtype), as tg_encoder_layer_new. */
typedef struct {
    tg_decoder_config config;
    bool train;
    tg_rng *rng;                 /* borrowed, for dropout */
    tg_mha *self_attn, *multihead_attn;
    tg_linear *linear1, *linear2;
    tg_layer_norm_module *norm1, *norm2, *norm3;
} tg_decoder_layer;

TG_API tg_decoder_layer *tg_decoder_layer_new(const tg_decoder_config *config, tg_dtype dtype,
                                              tg_rng *rng);
/* tgt [B, T, d], memory [B, S, d] (or unbatched [T, d], [S, d], with
 * padding masks [T] and [S]) -> [B, T, d]; masks may be NULL. Post-norm:
 * x = norm1(x + sa(x)), x = norm2(x + ca(x, memory)), x = norm3(x + ff(x));
 * norm_first: x = x + sa(norm1(x)), x = x + ca(norm2(x), memory),
 * x = x + ff(norm3(x)). A target position whose every memory key is masked
 * (a fully padded source row) gets zero cross-attention weights, so that
 * sublayer gives multihead_attn.out_proj.bias there, not NaN (PyTorch gives
 * NaN). Errors, naming the tensors and shapes: memory of another width,
 * batch or dtype than tgt, or either not [B, *, d] / [*, d]: TG_ERR_SHAPE
 * (TG_ERR_DTYPE for the dtype); a mask of the wrong shape: TG_ERR_SHAPE; a
 * mask neither bool nor float: TG_ERR_DTYPE. */
TG_API tg_tensor *tg_decoder_layer_forward(const tg_decoder_layer *m, const tg_tensor *tgt,
                                           const tg_tensor *memory, const tg_decoder_masks *masks);
TG_API int tg_decoder_layer_params(const tg_decoder_layer *m, const char *prefix, tg_params *ps);
TG_API void tg_decoder_layer_set_train(tg_decoder_layer *m, bool train);
TG_API void tg_decoder_layer_free(tg_decoder_layer *m);

/* torch.nn.TransformerDecoder: "layers.N.*" (each drawn from rng in turn;
 * unlike PyTorch's clones they start different) then an optional final
 * LayerNorm "norm.*". num_layers < 1 is TG_ERR_VALUE. Forward runs every
 * layer with the same memory and masks, then the norm. */
typedef struct {
    int num_layers;
    tg_decoder_layer **layers;
    tg_layer_norm_module *norm; /* NULL without a final norm */
} tg_decoder;
TG_API tg_decoder *tg_decoder_new(const tg_decoder_config *layer, int num_layers, bool final_norm,
                                  tg_dtype dtype, tg_rng *rng);
TG_API tg_tensor *tg_decoder_forward(const tg_decoder *m, const tg_tensor *tgt,
                                     const tg_tensor *memory, const tg_decoder_masks *masks);
TG_API int tg_decoder_params(const tg_decoder *m, const char *prefix, tg_params *ps);
TG_API void tg_decoder_set_train(tg_decoder *m, bool train);
TG_API void tg_decoder_free(tg_decoder *m);

/* torch.nn.Transformer(d_model, nhead, num_encoder_layers, num_decoder_layers,
 * dim_feedforward, dropout, activation, layer_norm_eps, batch_first=True,
 * norm_first): encoder.* (with encoder.norm.*) and decoder.* (with
 * decoder.norm.*), both final norms always present as in PyTorch. _new
 * builds the encoder then the decoder from rng, then, as PyTorch's
 * _reset_parameters, redraws every parameter of two or more dims from
 * xavier_uniform, in state_dict order. */
typedef struct {
    int64_t d_model, nhead, dim_feedforward;
    int num_encoder_layers, num_decoder_layers;
    double dropout, layer_norm_eps;
    tg_activation activation;
    bool norm_first;
} tg_transformer_config;
typedef struct {
    tg_transformer_config config;
    tg_encoder *encoder;
    tg_decoder *decoder;
} tg_transformer;
typedef struct {
    const tg_tensor *src_mask;                /* [S, S]; NULL */
    const tg_tensor *src_key_padding_mask;    /* [B, S]; NULL */
    tg_decoder_masks tgt;                     /* memory_key_padding_mask usually = src_key_padding_mask */
} tg_transformer_masks;
/* A bad config as tg_decoder_layer_new, or num_encoder_layers /
 * num_decoder_layers < 1: NULL with TG_ERR_VALUE. */
TG_API tg_transformer *tg_transformer_new(const tg_transformer_config *config, tg_dtype dtype,
                                          tg_rng *rng);
/* src [B, S, d], tgt [B, T, d] -> [B, T, d] (inputs are already embedded, as
 * in PyTorch): memory = encoder(src, src_mask, src_key_padding_mask), then
 * decoder(tgt, memory, masks->tgt). masks may be NULL. src and tgt of other
 * batch sizes or widths: TG_ERR_SHAPE. */
TG_API tg_tensor *tg_transformer_forward(const tg_transformer *m, const tg_tensor *src,
                                         const tg_tensor *tgt, const tg_transformer_masks *masks);
TG_API int tg_transformer_params(const tg_transformer *m, const char *prefix, tg_params *ps);
TG_API void tg_transformer_set_train(tg_transformer *m, bool train);
TG_API void tg_transformer_free(tg_transformer *m);
/* Transformer.generate_square_subsequent_mask(n): float [n, n], 0 on and
 * below the diagonal and -inf above (dtype TG_FLOAT32/64); with TG_BOOL,
 * true above the diagonal. n < 1: TG_ERR_VALUE; int64: TG_ERR_DTYPE. */
TG_API tg_tensor *tg_square_subsequent_mask(int64_t n, tg_dtype dtype);

/* ---- GPT (nn/gpt.c) ------------------------------------------------------------- */

/* The GPT-2 architecture: token + learned position embeddings; per block
 * x = x + attn(ln_1(x)), x = x + mlp(ln_2(x)) with causal multi-head
 * self-attention (fused QKV Linear c_attn d -> 3d, output Linear c_proj) and
 * mlp = c_proj(gelu_tanh(c_fc(x))), d -> 4d -> d; final ln_f; the LM head
 * shares the token embedding's weight. Linear weights are [out, in] as in
 * torch.nn.Linear (GPT-2's original Conv1D checkpoints store them transposed). */
typedef struct {
    int64_t vocab_size, block_size, n_layer, n_head, n_embd;
    double dropout;
} tg_gpt_config;

typedef struct tg_gpt tg_gpt;

/* Init as GPT-2: weights N(0, 0.02), c_proj weights N(0, 0.02/sqrt(2 n_layer)),
 * biases 0, LayerNorms ones/zeros. A size in config that is not positive,
 * n_layer over 2^20, n_embd not a multiple of n_head, or dropout outside
 * [0, 1): TG_ERR_VALUE. */
TG_API tg_gpt *tg_gpt_new(const tg_gpt_config *config, tg_dtype dtype, tg_rng *rng);
TG_API const tg_gpt_config *tg_gpt_config_of(const tg_gpt *m);
/* idx int64 [B, T] (T <= block_size) -> logits [B, T, vocab]. When targets
 * (int64 [B, T]) is not NULL and loss is not NULL, *loss receives the mean
 * cross-entropy (targets of -1 are ignored). */
TG_API tg_tensor *tg_gpt_forward(const tg_gpt *m, const tg_tensor *idx, const tg_tensor *targets,
                                 tg_tensor **loss);
/* Names: transformer.wte.weight, transformer.wpe.weight,
 * transformer.h.<i>.ln_1.*, .attn.c_attn.*, .attn.c_proj.*, .ln_2.*,
 * .mlp.c_fc.*, .mlp.c_proj.*, transformer.ln_f.* (lm_head.weight is tied to
 * transformer.wte.weight and not listed twice). */
TG_API int tg_gpt_params(const tg_gpt *m, tg_params *ps);
TG_API void tg_gpt_set_train(tg_gpt *m, bool train);
/* The generator the model's dropout draws from (owned by the model, seeded
 * from the rng given to tg_gpt_new): save and restore its state, e.g. with
 * tg_rng_state_tensor, to resume a run bit for bit. */
TG_API tg_rng *tg_gpt_rng(const tg_gpt *m);

/* How generation picks each token. Zeroed options are not usable as they
 * are (temperature 0 is refused unless greedy); {.temperature = 1} draws
 * from the model's distribution and refuses to run past the context. */
typedef struct {
    double temperature; /* > 0; logits are divided by it */
    int64_t top_k;      /* keep the k most likely tokens (ties with the k-th too); 0 keeps all */
    bool greedy;        /* take the most likely token (ignores temperature, top_k, top_p) */
    /* Nucleus sampling, applied after temperature and top_k as Hugging Face
     * does: keep the smallest set of most likely tokens whose probabilities
     * sum to >= top_p (always at least the most likely one). 0 or 1 keeps
     * all; outside [0, 1] or NaN is TG_ERR_VALUE. */
    double top_p;
    /* When prompt_len + n > block_size: true slides the context window (the
     * model sees the last block_size tokens); false refuses the call up
     * front with TG_ERR_VALUE, before any token is made. */
    bool slide;
} tg_sample_options;

/* Appends n tokens to prompt[0..prompt_len) (each in [0, vocab)), writing
 * prompt_len + n tokens to out. Uses a KV cache (tg_gpt_kv_cache_bytes), so
 * each new token costs one position; past block_size tokens the context
 * slides when opts->slide is set, and the cache is refilled from the
 * window's last block_size tokens each time it moves. rng may be NULL when
 * greedy. 0, or -1 on error: NULL m, prompt, opts or out (TG_ERR_NULL),
 * prompt_len < 1 or n < 0, top_k < 0, top_p outside [0, 1], a temperature
 * that is not positive unless greedy, or prompt_len + n > block_size
 * without slide (TG_ERR_VALUE), a prompt token outside [0, vocab)
 * (TG_ERR_INDEX), no rng unless greedy (TG_ERR_NULL). */
TG_API int tg_gpt_generate(tg_gpt *m, const int64_t *prompt, int64_t prompt_len, int64_t n,
                           const tg_sample_options *opts, tg_rng *rng, int64_t *out);
/* tg_gpt_generate that hands each new token to on_token(token, ctx) as soon
 * as it is chosen, before the next one is computed (to print a stream, for
 * example). A nonzero return from on_token stops generation there; that is
 * not an error: the call returns 0 and out holds the prompt and the tokens
 * made so far. on_token NULL is tg_gpt_generate. */
TG_API int tg_gpt_generate_each(tg_gpt *m, const int64_t *prompt, int64_t prompt_len, int64_t n,
                                const tg_sample_options *opts, tg_rng *rng, int64_t *out,
                                int (*on_token)(int64_t token, void *ctx), void *ctx);
/* The bytes of the KV cache generation allocates (and frees on return):
 * n_layer * 2 (keys, values) * n_head * block_size * head_dim * the
 * model's dtype size, whatever prompt_len and n are. -1 with TG_ERR_NULL
 * for NULL m (TG_ERR_VALUE if the count would overflow int64). */
TG_API int64_t tg_gpt_kv_cache_bytes(const tg_gpt *m);
TG_API void tg_gpt_free(tg_gpt *m);

/* ---- Llama (nn/llama.c) ----------------------------------------------------------- */

/* A Llama-style decoder with Hugging Face LlamaForCausalLM's layout: token
 * embedding, no position embedding; per layer
 *   h = x + o_proj(attn(rope(q_proj(n)), rope(k_proj(n)), v_proj(n))),
 *   x = h + down_proj(silu(gate_proj(n')) * up_proj(n')),
 * n = input_layernorm(x), n' = post_attention_layernorm(h),
 * with RMSNorm, causal grouped-query attention (query head i reads kv head
 * i / (n_head / n_kv_head)), rotary positions on q and k; then model.norm and
 * the LM head. Every Linear is bias-free, weights [out, in]. */
typedef struct {
    int64_t vocab_size, block_size, n_layer, n_head, n_kv_head, n_embd, hidden_size;
    double rope_theta;            /* > 0, e.g. 10000 */
    double norm_eps;              /* > 0, e.g. 1e-5 */
    bool tie_embeddings;          /* lm_head shares model.embed_tokens.weight */
    tg_rope_pairing rope_pairing; /* TG_ROPE_HALF (Hugging Face) or TG_ROPE_INTERLEAVED (Meta) */
} tg_llama_config;

typedef struct tg_llama tg_llama;

/* Init as Hugging Face: every Linear and the embedding N(0, 0.02), drawn in
 * the order embed_tokens, then per layer q, k, v, o, gate, up, down, then
 * lm_head (when not tied); the norms ones. Builds the model's rotary table
 * for block_size positions. NULL on error: TG_ERR_NULL (config, rng),
 * TG_ERR_VALUE (a size not positive, n_layer over 2^20, n_embd not a
 * multiple of n_head, an odd head_dim = n_embd / n_head, n_kv_head not
 * dividing n_head, rope_theta or norm_eps not finite and positive, an unknown
 * rope_pairing; the message names the values), TG_ERR_DTYPE (dtype not
 * float32 or float64), TG_ERR_NOMEM. */
TG_API tg_llama *tg_llama_new(const tg_llama_config *config, tg_dtype dtype, tg_rng *rng);
TG_API const tg_llama_config *tg_llama_config_of(const tg_llama *m);
/* idx int64 [B, T] (1 <= T <= block_size, tokens in [0, vocab)) at positions
 * 0..T-1 -> logits [B, T, vocab]. When targets (int64 [B, T]) and loss are
 * not NULL, *loss receives the mean cross-entropy (targets of -1 are
 * ignored), a new reference like the logits. NULL (and *loss NULL) on
 * error: TG_ERR_NULL, TG_ERR_DTYPE (idx or targets not int64), TG_ERR_SHAPE
 * (idx not [B, T] with T in range, targets not idx's shape), TG_ERR_INDEX
 * (a token outside [0, vocab)). */
TG_API tg_tensor *tg_llama_forward(const tg_llama *m, const tg_tensor *idx,
                                   const tg_tensor *targets, tg_tensor **loss);
/* Names (the state dict of LlamaForCausalLM): model.embed_tokens.weight;
 * per layer model.layers.<i>.self_attn.{q,k,v,o}_proj.weight,
 * .mlp.{gate,up,down}_proj.weight, .input_layernorm.weight,
 * .post_attention_layernorm.weight; model.norm.weight; lm_head.weight
 * (absent when tied: the embedding's weight is listed once). Load a Hugging
 * Face checkpoint into them with tg_safetensors_load_into, which refuses a
 * tensor of another shape (a checkpoint with another n_kv_head, say) naming
 * it and both shapes. 0, or -1 with ps as it was. */
TG_API int tg_llama_params(const tg_llama *m, tg_params *ps);

/* The keys and values of one sequence's positions, per layer: [n_kv_head,
 * block_size, head_dim] each, n_kv_head / n_head of what a multi-head cache
 * of the same width holds. Made empty for one model, and usable with that
 * model only. NULL on error (TG_ERR_NULL, TG_ERR_NOMEM). */
typedef struct tg_llama_cache tg_llama_cache;
TG_API tg_llama_cache *tg_llama_cache_new(const tg_llama *m);
/* Positions the cache holds (the next token's position); -1 with
 * TG_ERR_NULL when c is NULL. */
TG_API int64_t tg_llama_cache_len(const tg_llama_cache *c);
/* Forgets every position (keeps the memory). NULL: no-op. */
TG_API void tg_llama_cache_reset(tg_llama_cache *c);
TG_API void tg_llama_cache_free(tg_llama_cache *c);
/* Runs idx int64 [1, T] at positions len..len+T-1, len = tg_llama_cache_len
 * (c), attending over the cached positions and the new ones, and adds the
 * new keys and values to c: logits [1, T, vocab], equal to those rows of
 * tg_llama_forward over the whole sequence. Runs with grad mode off (the
 * logits have no graph). Errors: TG_ERR_NULL, TG_ERR_VALUE (c made for
 * another model), TG_ERR_SHAPE (idx not [1, T], or len + T over block_size),
 * TG_ERR_DTYPE, TG_ERR_INDEX (a token outside [0, vocab)); c is unchanged. */
TG_API tg_tensor *tg_llama_forward_cached(const tg_llama *m, tg_llama_cache *c,
                                          const tg_tensor *idx);
/* The bytes of the KV cache generation allocates (tg_llama_cache_new):
 * 2 * n_layer * n_kv_head * block_size * head_dim * the dtype's size.
 * -1 with TG_ERR_NULL when m is NULL. */
TG_API int64_t tg_llama_kv_cache_bytes(const tg_llama *m);

/* As tg_gpt_generate: appends n tokens to prompt[0..prompt_len) into out
 * (prompt_len + n tokens), greedy or sampled (temperature, top_k, top_p),
 * each new token costing one position through a cache. When prompt_len + n
 * exceeds block_size, opts->slide false refuses the call up front
 * (TG_ERR_VALUE, nothing written); true slides the window to the last
 * block_size tokens and, since every position's rotation changes, rebuilds
 * the cache from it. 0, or -1 on error. */
TG_API int tg_llama_generate(tg_llama *m, const int64_t *prompt, int64_t prompt_len, int64_t n,
                             const tg_sample_options *opts, tg_rng *rng, int64_t *out);
/* tg_llama_generate handing each new token to on_token as tg_gpt_generate_each does. */
TG_API int tg_llama_generate_each(tg_llama *m, const int64_t *prompt, int64_t prompt_len,
                                  int64_t n, const tg_sample_options *opts, tg_rng *rng,
                                  int64_t *out, int (*on_token)(int64_t token, void *ctx),
                                  void *ctx);
TG_API void tg_llama_free(tg_llama *m);

/* ---- incremental decoding (nn/decoder_cache.c) ---------------------------------- */

/* Greedy or beam decoding with tg_decoder at one layer step per new token:
 * per layer, the self-attention keys and values of the target positions
 * decoded so far, and the cross-attention keys and values projected once
 * from memory. Inference only: the functions run with grad mode off (their
 * results have no graph) and apply no dropout, whatever the layers' train
 * flags. A cache is made for one decoder and usable with it only.
 *
 *   tg_decoder_cache *c = tg_decoder_cache_new(dec, beams, max_len);
 *   tg_decoder_cache_set_memory(c, memory, src_key_padding_mask);
 *   for (...) {
 *       tg_tensor *y = tg_decoder_forward_cached(dec, c, embedded); // [beams, 1, d]
 *       ... pick the next tokens; tg_decoder_cache_select(c, parents, beams);
 *   }
 *   tg_decoder_cache_free(c); */
typedef struct tg_decoder_cache tg_decoder_cache;
/* Room for batch rows and max_len target positions: 2 * num_layers * batch
 * * d_model * max_len elements of the decoder's dtype, plus the memory's
 * keys and values once set. NULL on error: TG_ERR_NULL (m, or a layer
 * lacking a sub-module), TG_ERR_VALUE (batch or max_len < 1, a size that
 * overflows), TG_ERR_NOMEM. */
TG_API tg_decoder_cache *tg_decoder_cache_new(const tg_decoder *m, int64_t batch, int64_t max_len);
/* memory [batch, S, d] (the encoder's output), memory_key_padding_mask
 * [batch, S] (bool, true = ignore, or float, added) or NULL: projects each
 * layer's cross-attention keys and values once and resets the target length
 * to 0. The cache copies what it keeps: memory and the mask may be released
 * after the call. A row whose source is all padding attends to nothing: its
 * cross-attention gives multihead_attn.out_proj.bias (no NaN), as
 * tg_mha_forward does. 0, or -1 with the cache as it was: TG_ERR_NULL,
 * TG_ERR_SHAPE (memory not [batch, S >= 1, d_model], the mask not [batch,
 * S]), TG_ERR_DTYPE (memory not the decoder's dtype, an int64 mask). */
TG_API int tg_decoder_cache_set_memory(tg_decoder_cache *c, const tg_tensor *memory,
                                       const tg_tensor *memory_key_padding_mask);
/* tgt [batch, t, d], the next t target positions (already embedded), at
 * positions len..len+t-1 (len = tg_decoder_cache_len): causal over the
 * cached positions and these; returns [batch, t, d], equal (within float
 * rounding) to the matching rows of tg_decoder_forward over the whole prefix
 * with a causal mask and the same memory padding mask (in eval mode), and
 * adds t to len. Errors (NULL, len unchanged): TG_ERR_NULL, TG_ERR_VALUE (c
 * made for another decoder; len + t > max_len), TG_ERR_STATE (no memory set
 * yet), TG_ERR_SHAPE (tgt not [batch, t >= 1, d_model]), TG_ERR_DTYPE. */
TG_API tg_tensor *tg_decoder_forward_cached(const tg_decoder *m, tg_decoder_cache *c,
                                            const tg_tensor *tgt);
/* Keep rows[0..n) of the batch, in that order (repeats allowed; n may
 * differ from the batch, which becomes n): beam search's reorder. The
 * memory's keys and values and its padding mask are reordered with them.
 * 0, or -1 with the cache as it was: TG_ERR_NULL, TG_ERR_VALUE (n < 1),
 * TG_ERR_INDEX (a row outside [0, batch)), TG_ERR_NOMEM. */
TG_API int tg_decoder_cache_select(tg_decoder_cache *c, const int64_t *rows, int64_t n);
/* Target positions the cache holds; -1 with TG_ERR_NULL for NULL c. */
TG_API int64_t tg_decoder_cache_len(const tg_decoder_cache *c);
/* NULL: no-op. Free the cache before its decoder. */
TG_API void tg_decoder_cache_free(tg_decoder_cache *c);

/* ---- optimizers (nn/optim.c) ------------------------------------------------- */
/* PyTorch 1.13's update formulas (torch.optim, foreach=False), computed in
 * the parameter's dtype (float32 results agree with PyTorch's to about one
 * rounding). The optimizer keeps references to the parameters of ps as they
 * are at _new: float leaves of any layout, each listed once. A parameter
 * without a gradient is skipped, and each parameter counts its own steps, as
 * in PyTorch. Updates happen in place, with grad mode off.
 * The constructors return NULL with TG_ERR_NULL for a NULL ps, TG_ERR_VALUE
 * for an empty list, a tensor listed twice, or a hyperparameter out of
 * PyTorch's range (lr, eps, weight_decay, momentum >= 0; 0 <= betas < 1),
 * TG_ERR_DTYPE for a non-float parameter, TG_ERR_STATE for a non-leaf.
 * They are written on module.h's tg_update_params, tg_sum_squares and
 * tg_scale_in_place, which an optimizer of your own can use too. */

typedef struct tg_optim tg_optim;
/* SGD with momentum (dampening 0, nesterov off) and L2 weight decay:
 *   g += wd * p;  buf = g at a parameter's first step, else momentum * buf + g;
 *   p -= lr * buf  (p -= lr * g without momentum). */
TG_API tg_optim *tg_sgd_new(const tg_params *ps, double lr, double momentum, double weight_decay);
/* Adam, L2 weight decay added to the gradient; t is the parameter's step:
 *   g += wd * p;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
 *   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps). */
TG_API tg_optim *tg_adam_new(const tg_params *ps, double lr, double beta1, double beta2, double eps,
                             double weight_decay);
/* AdamW: decoupled weight decay, p *= 1 - lr * wd, then the Adam step
 * without the L2 term. */
TG_API tg_optim *tg_adamw_new(const tg_params *ps, double lr, double beta1, double beta2,
                              double eps, double weight_decay);
/* One step for every parameter that has a gradient. 0, or -1 (TG_ERR_NULL;
 * TG_ERR_STATE, with no parameter changed, if a gradient's shape or dtype
 * differs from its parameter's). */
TG_API int tg_optim_step(tg_optim *opt);
/* Forgets every parameter's gradient (PyTorch's set_to_none). NULL: no-op. */
TG_API void tg_optim_zero_grad(tg_optim *opt);
/* lr < 0 (or NaN) is TG_ERR_VALUE and keeps the old rate. */
TG_API void tg_optim_set_lr(tg_optim *opt, double lr);
TG_API double tg_optim_lr(const tg_optim *opt);
/* Calls of tg_optim_step so far. */
TG_API int64_t tg_optim_steps(const tg_optim *opt);
/* The optimizer's state, added to out as new tensors (copies) named:
 *   "step"                     int64 [], tg_optim_steps
 *   "step.<param name>"        int64 [], the steps in which it had a gradient
 *   "exp_avg.<...>", "exp_avg_sq.<...>"   Adam and AdamW
 *   "momentum_buffer.<...>"    SGD with momentum != 0
 * A name already in out is TG_ERR_VALUE and leaves out as it was.
 * Loading takes the same names back (step counts of any dtype holding whole
 * numbers, moments of any float dtype, converted): all or nothing, a missing
 * name (TG_ERR_VALUE), a shape mismatch (TG_ERR_SHAPE) or a non-float moment
 * (TG_ERR_DTYPE) changes nothing. Names it does not know are ignored, so one
 * checkpoint may also hold the model. Saving and loading resume bit for bit. */
TG_API int tg_optim_state(const tg_optim *opt, tg_params *out);
TG_API int tg_optim_load_state(tg_optim *opt, const tg_params *state);
TG_API void tg_optim_free(tg_optim *opt);

/* Scales every gradient in ps so that their global L2 norm is at most
 * max_norm, like torch.nn.utils.clip_grad_norm_: norm = sqrt(sum of g^2 over
 * all gradients, accumulated in double), and when scale = max_norm /
 * (norm + 1e-6) is below 1 (or NaN) every gradient is multiplied by it.
 * Parameters without a gradient are skipped. Returns the norm before
 * clipping, or -1 on error (TG_ERR_NULL; TG_ERR_VALUE for max_norm < 0). */
TG_API double tg_clip_grad_norm(const tg_params *ps, double max_norm);

/* The learning rate at step (0-based) of a linear warmup then a cosine decay:
 *   step < warmup:           lr_max * (step + 1) / warmup
 *   warmup <= step < total:  lr_min + 0.5 * (lr_max - lr_min) * (1 + cos(pi * p)),
 *                            p = (step - warmup) / (total - warmup)
 *   step >= total:           lr_min
 * NAN with TG_ERR_VALUE when a count or a rate is negative. */
TG_API double tg_lr_warmup_cosine(int64_t step, int64_t warmup, int64_t total, double lr_max,
                                  double lr_min);

/* ---- safetensors checkpoints (nn/safetensors.c, nn/save_path.c) ------------ */
/* The format: 8-byte little-endian header length N, N bytes of JSON mapping
 * each name to {"dtype": "F32"|"F64"|"BF16"|"I64"|"BOOL", "shape": [...],
 * "data_offsets": [begin, end]} (plus an optional "__metadata__" object of
 * strings), then the raw little-endian data. Files load in PyTorch's
 * safetensors and back. */

/* Writes the tensors of ps (any layout) to path atomically: a temporary file
 * beside the target (target.tmp.<pid>.<n>), flushed and fsynced, then
 * renamed over the target, so a crash leaves the old file or the new one,
 * never a mix. metadata may be NULL or a list of n_meta key/value pairs
 * (keys[i], values[i]). Several threads may save at once, to any paths.
 *   The target: a symlink is followed (relative links from the link's own
 * directory, chains too) and the file it names is replaced, the link left in
 * place; a dangling link creates the file it names. A replaced file keeps its
 * permission bits (and its owner, where the caller may give files away); a
 * new file gets 0666 & ~umask.
 *   Refused with TG_ERR_IO before anything is written, the message naming
 * the function and the path (and the link's target): an empty path, a
 * directory, an existing file that is not a regular file, an existing file
 * with no write permission bits (whoever the caller is, root too), a link
 * chain over 40 long (a loop). A failed write or rename is TG_ERR_IO too and
 * leaves neither a temporary file nor a changed target.
 *   A writer killed mid-save leaves its temporary file; the next save to the
 * same target deletes those whose process no longer runs (names of exactly
 * that pattern only; a live writer's file is never touched). */
TG_API int tg_safetensors_save(const char *path, const tg_params *ps, int n_meta,
                               const char *const *keys, const char *const *values);
/* Checks now, before hours of work, that a program could later create or
 * replace the regular file path, and leaves no file behind: path is resolved
 * as tg_safetensors_save resolves it (a symlink is followed to its target),
 * what save refuses is refused, and a temporary file is created and removed
 * in the target's directory. For any output a program will write, a
 * checkpoint, a picture or a log alike. 0, or -1 with TG_ERR_IO, the message
 * naming this function and the path, and why: the path is empty; it names a
 * directory ("." or a trailing '/' too); the file is a directory, is not a
 * regular file (a FIFO, a device), or has no write permission bits (root
 * too); a link chain is over 40 long; the directory does not exist, is not
 * a directory, or refuses a new file (the errno text). A NULL path is
 * TG_ERR_NULL. The answer holds for now only: the file system may change
 * before the write. */
TG_API int tg_path_check_writable(const char *path);
/* tg_path_check_writable for a checkpoint tg_safetensors_save will write:
 * the same check and answers, the message naming this function. */
TG_API int tg_safetensors_check_writable(const char *path);
/* Reads every tensor of path into out (as new contiguous tensors, names as
 * in the file). Rejects, with a message naming the problem and the file:
 * a truncated file, a header length past the end, malformed JSON, a key
 * repeated anywhere in the header (a tensor name, __metadata__, "dtype" in
 * one entry: JSON readers disagree on which one counts), an unknown dtype,
 * a shape that does not match its byte range, offsets out of range or
 * overlapping. Values are read as they are, NaN and inf included, as
 * PyTorch reads them: tg_params_check_finite refuses those. path must be a
 * regular file: a directory, FIFO, device or socket is TG_ERR_IO ("is not a
 * regular file (it is a FIFO)"), reported at once, without opening it, so a
 * FIFO never blocks. A missing or unreadable file is TG_ERR_IO too. On error
 * out is left as it was. */
TG_API int tg_safetensors_load(const char *path, tg_params *out);
/* Copies the file's tensors into the tensors of ps, matched by name: all or
 * nothing. A missing name, an unexpected name, or a shape or dtype mismatch
 * is an error and changes no parameter. The file is read and refused as by
 * tg_safetensors_load. */
TG_API int tg_safetensors_load_into(const char *path, const tg_params *ps);

#ifdef __cplusplus
}
#endif
#endif
