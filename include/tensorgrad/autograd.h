/* tensorgrad autograd: the differentiable ops and the graph behind them.
 *
 * Every op here records itself when grad mode is on and any input requires
 * grad; tg_backward() on a scalar then fills the .grad of every leaf that
 * requires grad. The ownership and error rules of tensor.h hold for every
 * function: a returned tensor is a new reference (held by the open scope, if
 * any), arguments are borrowed, a NULL input gives a NULL result and keeps
 * the first error.
 *
 * A single-head attention block, one op per line:
 *
 *   tg_scope_begin();
 *   tg_tensor *q = tg_matmul(x, wq), *k = tg_matmul(x, wk), *v = tg_matmul(x, wv);
 *   tg_tensor *s = tg_mul_scalar(tg_matmul(q, tg_transpose(k, -2, -1)), 1 / sqrt(d));
 *   tg_tensor *a = tg_softmax(tg_masked_fill(s, causal, -INFINITY), -1);
 *   tg_tensor *loss = tg_mean(tg_matmul(a, v), NULL, 0, false);
 *   tg_backward(loss, NULL);             // wq, wk, wv now hold .grad
 *   tg_scope_end();                      // releases every intermediate
 *
 * Dims may be negative (counting from the end), as in PyTorch. Float ops take
 * float32 or float64; both operands of a binary op must have the same dtype.
 */
#ifndef TG_AUTOGRAD_H
#define TG_AUTOGRAD_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the op list ---------------------------------------------------------- */

typedef enum {
#define TG_OP(name, text, props) TG_OP_##name,
#include "ops.def"
#undef TG_OP
    TG_OP_COUNT
} tg_op;

/* "matmul" for TG_OP_MATMUL; NULL for a value outside the list. */
TG_API const char *tg_op_name(tg_op op);

/* ---- gradients -------------------------------------------------------------- */

/* Marks a leaf (a tensor no op made) as a parameter whose gradient backward
 * should compute. Float dtypes only. 0, or -1 on error. */
TG_API int tg_set_requires_grad(tg_tensor *t, bool requires_grad);
TG_API bool tg_requires_grad(const tg_tensor *t);
/* True when no op made t (created tensors, detached tensors, parameters). */
TG_API bool tg_is_leaf(const tg_tensor *t);
/* The gradient accumulated in a leaf: a new reference (which an open scope
 * holds for you, as for every returned tensor), or NULL without an error
 * when backward has not reached it yet. */
TG_API tg_tensor *tg_grad(const tg_tensor *t);
/* Forgets t's gradient, so the next backward starts from zero. It drops the
 * gradient tensor rather than writing zeros into it, so a reference you hold
 * keeps its values. */
TG_API void tg_zero_grad(tg_tensor *t);

/* Backpropagates from root: grad_output has root's shape and dtype, or is NULL
 * when root holds one element (then it is 1). Gradients *add* into the .grad
 * of every leaf that requires grad; the graph behind root is freed, and a
 * second backward through it is TG_ERR_STATE. So is a tensor an op kept for
 * its gradient that was written in place after the op ran (through tg_data,
 * by an optimizer step...): "tg_backward: a tensor needed for the gradient of
 * mul (saved as input 0, shape [3]) was modified in place after it was used
 * (version 0, now 1)". 0, or -1 on error. */
TG_API int tg_backward(tg_tensor *root, const tg_tensor *grad_output);

/* Called during tg_backward once the leaf's .grad holds this backward pass's
 * whole gradient (every contribution accumulated), before backward returns:
 * exactly once per backward that reaches the leaf, however many ops (or
 * views of it) used it; not at all when backward does not reach it or fails
 * before its last contribution. It runs on the thread that called
 * tg_backward, with grad mode off. The hook may read and write .grad (it
 * owns no reference: tg_grad gives one), but must not start another
 * backward. For overlapping gradient communication with the rest of
 * backward (tensorgrad/dist.h). */
typedef void (*tg_grad_ready_fn)(tg_tensor *leaf, void *user);
/* Sets leaf's hook, at most one per leaf (a second call replaces it; fn
 * NULL removes it); user is handed to fn as it is. The hook goes with the
 * tensor (a tg_detach alias has none). 0, or -1 with TG_ERR_NULL (leaf) or
 * TG_ERR_STATE (leaf was made by an op: "tg_set_grad_ready_hook: only
 * leaves have a hook; this tensor was made by mul"). */
TG_API int tg_set_grad_ready_hook(tg_tensor *leaf, tg_grad_ready_fn fn, void *user);

/* Grad mode is per thread and on by default. While it is off, ops record
 * nothing: for inference and for optimizer updates. Returns the old mode:
 *   bool was = tg_set_grad_enabled(false); ...; tg_set_grad_enabled(was); */
TG_API bool tg_set_grad_enabled(bool enabled);
TG_API bool tg_grad_enabled(void);

/* Anomaly mode, for finding where a NaN or Inf first appears; off by default,
 * per thread. While it is on, every op checks its output: an output holding
 * NaN, or holding +-Inf when none of the op's inputs does, is an error
 * (TG_ERR_VALUE) naming the op and its inputs' shapes,
 *   tg_log: anomaly: output holds NaN or Inf (inputs [2,3]; first -inf at 0)
 * and the op returns NULL, so the chain stops at the first offender.
 * tg_masked_fill is exempt from the Inf rule (writing -inf into masked places
 * is its job), and -inf logits give softmax zeros, not an anomaly. tg_backward
 * checks every gradient an op's backward produces the same way (any NaN or
 * Inf) and fails naming that op. The scan costs one pass over each output.
 * Returns the old mode. */
TG_API bool tg_set_anomaly_mode(bool on);
TG_API bool tg_anomaly_mode(void);

/* A tensor sharing t's storage that is a leaf and does not require grad. */
TG_API tg_tensor *tg_detach(const tg_tensor *t);

/* ---- pointwise ops (autograd/op_pointwise.c) -------------------------------- */
/* Binary ops broadcast by NumPy rules: [4,1,3] + [2,1] -> [4,2,3]. The
 * gradient of a broadcast operand is summed back to its own shape. */

TG_API tg_tensor *tg_add(const tg_tensor *a, const tg_tensor *b);
TG_API tg_tensor *tg_sub(const tg_tensor *a, const tg_tensor *b);
TG_API tg_tensor *tg_mul(const tg_tensor *a, const tg_tensor *b);
TG_API tg_tensor *tg_div(const tg_tensor *a, const tg_tensor *b);
TG_API tg_tensor *tg_neg(const tg_tensor *x);
TG_API tg_tensor *tg_add_scalar(const tg_tensor *x, double value);
TG_API tg_tensor *tg_mul_scalar(const tg_tensor *x, double value);
TG_API tg_tensor *tg_exp(const tg_tensor *x);
/* log and sqrt follow IEEE: log(0) = -inf, sqrt(-1) = NaN, no error. */
TG_API tg_tensor *tg_log(const tg_tensor *x);
TG_API tg_tensor *tg_sqrt(const tg_tensor *x);
TG_API tg_tensor *tg_pow_scalar(const tg_tensor *x, double exponent);
TG_API tg_tensor *tg_tanh(const tg_tensor *x);
TG_API tg_tensor *tg_sigmoid(const tg_tensor *x);
TG_API tg_tensor *tg_relu(const tg_tensor *x);
typedef enum {
    TG_GELU_ERF,  /* exact: x * Phi(x), PyTorch's approximate='none' */
    TG_GELU_TANH, /* GPT-2's tanh approximation, approximate='tanh' */
} tg_gelu_kind;
TG_API tg_tensor *tg_gelu(const tg_tensor *x, tg_gelu_kind kind);
/* SiLU (swish): x * sigmoid(x), torch.nn.functional.silu. Finite for every
 * finite x (x = -1e4 gives -0, x = 1e4 gives 1e4), and so is its gradient. */
TG_API tg_tensor *tg_silu(const tg_tensor *x);
/* A copy of x as dtype. Between float dtypes it is differentiable; any other
 * conversion (to or from int64 and bool) gives a tensor without a graph. */
TG_API tg_tensor *tg_to_dtype(const tg_tensor *x, tg_dtype dtype);

/* ---- reductions (autograd/op_reduce.c) --------------------------------------- */
/* dims lists ndims dims to reduce; dims NULL (or ndims 0) reduces all of
 * them. keepdim keeps each reduced dim with size 1. Reducing an empty tensor:
 * sum is 0, mean is NaN (as in PyTorch). */

TG_API tg_tensor *tg_sum(const tg_tensor *x, const int *dims, int ndims, bool keepdim);
TG_API tg_tensor *tg_mean(const tg_tensor *x, const int *dims, int ndims, bool keepdim);
/* Largest value along dim and where it is (int64, the first on a tie).
 * Writes new references to *values and *indices (either pointer may be NULL
 * to skip it). The gradient flows to the position of each maximum.
 * 0, or -1 on error (an empty dim is an error). */
TG_API int tg_max(const tg_tensor *x, int dim, bool keepdim, tg_tensor **values,
                  tg_tensor **indices);

/* ---- matmul (autograd/op_matmul.c) ------------------------------------------ */
/* torch.matmul: 1-D @ 1-D is a dot product; a 1-D left operand is a row
 * vector and a 1-D right operand a column vector (the added dim is removed
 * from the result); otherwise [..., n, k] @ [..., k, m] -> [..., n, m] with
 * batch dims broadcast. Transposed operands are used without a copy. */
TG_API tg_tensor *tg_matmul(const tg_tensor *a, const tg_tensor *b);
/* x @ weight^T + bias, as torch.nn.functional.linear: x [..., in], weight
 * [out, in], bias [out] or NULL -> [..., out]. One op: the bias is where the
 * product starts, not a second pass. */
TG_API tg_tensor *tg_affine(const tg_tensor *x, const tg_tensor *weight, const tg_tensor *bias);
/* tg_affine(tg_gelu(h, kind), weight, bias) as one op that keeps only h for
 * backward and computes GELU(h) again there: an MLP's widest activation is
 * held once instead of twice. */
TG_API tg_tensor *tg_gelu_affine(const tg_tensor *h, tg_gelu_kind kind, const tg_tensor *weight,
                                 const tg_tensor *bias);
/* tg_affine(tg_layer_norm(x, 1, ln_weight, ln_bias, eps), weight, bias) as
 * one op that keeps only x for backward and normalises it again there: a
 * pre-norm block's normalised input is not held beside its residual stream.
 * ln_weight, ln_bias and bias may be NULL. */
TG_API tg_tensor *tg_layer_norm_affine(const tg_tensor *x, const tg_tensor *ln_weight,
                                       const tg_tensor *ln_bias, double eps,
                                       const tg_tensor *weight, const tg_tensor *bias);

/* tg_affine(tg_rms_norm(x, norm_weight, eps), weight, bias) as one op that
 * keeps only x for backward and normalises it again there, as
 * tg_layer_norm_affine does: x [..., in], norm_weight [in] or NULL, weight
 * [out, in], bias [out] or NULL -> [..., out]. Errors are those of
 * tg_rms_norm and tg_affine, named tg_rms_norm_affine. (autograd/op_rms_norm.c) */
TG_API tg_tensor *tg_rms_norm_affine(const tg_tensor *x, const tg_tensor *norm_weight, double eps,
                                     const tg_tensor *weight, const tg_tensor *bias);
/* tg_affine(tg_swiglu(gate, up), weight, bias) as one op that keeps only
 * gate and up for backward and makes silu(gate) * up again there, as
 * tg_gelu_affine does: an MLP's widest activation is not held between
 * forward and backward. gate, up [..., hidden] (the same shape), weight
 * [out, hidden], bias [out] or NULL -> [..., out]. Errors are those of
 * tg_swiglu and tg_affine, named tg_swiglu_affine. (autograd/op_swiglu.c) */
TG_API tg_tensor *tg_swiglu_affine(const tg_tensor *gate, const tg_tensor *up,
                                   const tg_tensor *weight, const tg_tensor *bias);

/* ---- views and joins (autograd/op_shape.c) ----------------------------------- */
/* Views share x's storage; their gradient lands in the matching elements of x. */

TG_API tg_tensor *tg_transpose(const tg_tensor *x, int dim0, int dim1);
/* perm lists every dim of x once. */
TG_API tg_tensor *tg_permute(const tg_tensor *x, const int *perm);
/* A view when x's layout allows, a copy otherwise; one size may be -1. */
TG_API tg_tensor *tg_reshape(const tg_tensor *x, int ndim, const int64_t *shape);
/* Elements [start, start+length) of dim. */
TG_API tg_tensor *tg_narrow(const tg_tensor *x, int dim, int64_t start, int64_t length);
/* Repeats size-1 dims (and adds leading ones) without copying; -1 keeps a size. */
TG_API tg_tensor *tg_expand(const tg_tensor *x, int ndim, const int64_t *shape);
TG_API tg_tensor *tg_unsqueeze(const tg_tensor *x, int dim);
/* Removes dim, which must have size 1. */
TG_API tg_tensor *tg_squeeze(const tg_tensor *x, int dim);
/* Joins n tensors of one dtype along dim; other dims must match. */
TG_API tg_tensor *tg_concat(const tg_tensor *const *xs, int n, int dim);
/* x itself (a new reference) when contiguous, else a contiguous copy. */
TG_API tg_tensor *tg_contiguous(const tg_tensor *x);

/* ---- neural-network ops ------------------------------------------------------- */

/* softmax along dim (autograd/op_softmax.c). A slice that is entirely -inf
 * (a query every key of which is masked) gives all zeros, not NaN, and passes
 * zero gradient; log_softmax gives -inf there and passes zero gradient. */
TG_API tg_tensor *tg_softmax(const tg_tensor *x, int dim);
TG_API tg_tensor *tg_log_softmax(const tg_tensor *x, int dim);

/* x where mask is false, value where it is true (autograd/op_mask.c). mask is
 * bool and broadcasts to x's shape; value may be +-INFINITY. No gradient flows
 * to masked positions. */
TG_API tg_tensor *tg_masked_fill(const tg_tensor *x, const tg_tensor *mask, double value);

/* Inverted dropout: zeroes each element with probability p and scales the
 * rest by 1/(1-p). Identity when train is false or p is 0. p must be in
 * [0, 1); rng may be NULL only when nothing is drawn. The mask takes one
 * draw k from rng: element i (row-major) is dropped when the (i+1)-th output
 * of SplitMix64 seeded with k, as a 53-bit fraction (output >> 11) / 2^53,
 * is below p. So a seed fixes the mask whatever the thread count, and
 * backward makes the mask again from k instead of keeping it. */
TG_API tg_tensor *tg_dropout(const tg_tensor *x, double p, bool train, tg_rng *rng);

/* Normalises over the last norm_ndim dims, then scales by weight and adds
 * bias, both shaped like those dims (either may be NULL). Fused forward and
 * backward (autograd/op_layer_norm.c). */
TG_API tg_tensor *tg_layer_norm(const tg_tensor *x, int norm_ndim, const tg_tensor *weight,
                                const tg_tensor *bias, double eps);

/* RMSNorm over the last dim, as Hugging Face's LlamaRMSNorm and
 * torch.nn.functional.rms_norm: x [..., D] -> [..., D],
 *   y = x / sqrt(mean(x^2 over the last dim) + eps) * weight,
 * weight [D] or NULL (no scale). Fused forward and backward; the rows'
 * sums run in double. Errors: x not float or 0-dim (TG_ERR_DTYPE,
 * TG_ERR_SHAPE), eps not positive and finite (TG_ERR_VALUE), weight of
 * another dtype (TG_ERR_DTYPE) or not [D] (TG_ERR_SHAPE).
 * (autograd/op_rms_norm.c) */
TG_API tg_tensor *tg_rms_norm(const tg_tensor *x, const tg_tensor *weight, double eps);

/* SwiGLU's product silu(gate) * up, elementwise: gate and up must have the
 * same shape and float dtype (no broadcasting; TG_ERR_SHAPE, TG_ERR_DTYPE
 * otherwise), any layout. The result is gate's shape. Used as
 * down(silu(gate(x)) * up(x)) in a Llama MLP; tg_swiglu_affine fuses the
 * down projection in. (autograd/op_swiglu.c) */
TG_API tg_tensor *tg_swiglu(const tg_tensor *gate, const tg_tensor *up);

/* Rows of weight [num, dim] picked by int64 indices of any shape: the result
 * is indices.shape + [dim]. An index outside [0, num) is TG_ERR_INDEX. */
TG_API tg_tensor *tg_embedding(const tg_tensor *weight, const tg_tensor *indices);

/* Mean cross-entropy of logits [N, C] (or [C]) against int64 class targets
 * [N] (or a 0-dim target), fused log-softmax + NLL. Targets equal to
 * ignore_index are skipped and left out of the mean; when every target is
 * ignored the loss is NaN, as in PyTorch. Use -100 for PyTorch's default. */
TG_API tg_tensor *tg_cross_entropy(const tg_tensor *logits, const tg_tensor *targets,
                                   int64_t ignore_index);
/* Mean of (input - target)^2 over all elements; shapes must match. */
TG_API tg_tensor *tg_mse_loss(const tg_tensor *input, const tg_tensor *target);

/* ---- rotary position embedding (autograd/op_rope.c) ------------------------ */

/* Which elements of a head of hd form the pairs that rotate together. */
typedef enum {
    TG_ROPE_HALF = 0,       /* Hugging Face Llama: pairs (i, i + hd/2), rotate_half */
    TG_ROPE_INTERLEAVED = 1 /* Meta's original: pairs (2i, 2i + 1) */
} tg_rope_pairing;

/* The cos and sin of every position p < max_positions and pair i < hd / 2
 * at angle p * theta^(-2i / hd) (Hugging Face's inv_freq), computed once in
 * double and kept in float64 and rounded to float32 (about 24 bytes per
 * position and pair: 12 MB for 8192 positions of hd 128), so both dtypes
 * read values rounded once from the exact angle. Immutable: tg_rope only
 * reads it, from any number of threads at once. Every graph that used it
 * holds a reference, so tg_rope_table_free may come before backward; the
 * memory goes with the last of them. Errors (NULL returned): TG_ERR_VALUE
 * for max_positions < 1, head_dim odd or < 2, theta not finite and > 0, a
 * pairing other than the two, or a table whose size overflows;
 * TG_ERR_NOMEM. tg_rope_table_free(NULL) does nothing. */
typedef struct tg_rope_table tg_rope_table;
TG_API tg_rope_table *tg_rope_table_new(int64_t max_positions, int64_t head_dim, double theta,
                                        tg_rope_pairing pairing);
TG_API void tg_rope_table_free(tg_rope_table *t);

/* x [..., T, hd] (positions along dim -2, e.g. [B, H, T, hd]) with each pair
 * (a, b) of row t rotated by the table's angles at position pos0 + t:
 * a' = a cos - b sin, b' = b cos + a sin (for TG_ROPE_HALF this is
 * x * cos + rotate_half(x) * sin). x is float32 or float64 in any layout,
 * read in place; the result, a new tensor of x's shape and dtype, keeps x's
 * memory order when x is a permutation of a contiguous tensor (the
 * transposed view [B, H, T, hd] of a [B, T, H * hd] projection gives a
 * result whose memory is [B, T, H, hd] again), else it is contiguous. The
 * gradient of x is the inverse rotation of the result's gradient, in that
 * gradient's memory order by the same rule. The graph keeps no copy of x,
 * only a reference to the table. Errors:
 * TG_ERR_NULL (x or table), TG_ERR_DTYPE (x not float), TG_ERR_SHAPE (x
 * under 2-D, its hd not the table's), TG_ERR_VALUE (pos0 < 0 or pos0 + T >
 * max_positions: positions past the table). */
TG_API tg_tensor *tg_rope(const tg_tensor *x, const tg_rope_table *table, int64_t pos0);

/* ---- fused attention (autograd/op_attention.c) ----------------------------- */

/* dropout(softmax(q @ k^T * scale + mask)) @ v in one op that never holds
 * the [L, S] scores: q [..., L, E], k [..., S, E], v [..., S, Ev] ->
 * [..., L, Ev], one float dtype, any layout, batch dims broadcast. mask (may
 * be NULL) is bool (true = not allowed) or float (added to the scores),
 * broadcast to [..., L, S]; it is a constant here and gets no gradient.
 * is_causal also masks key j > query i (applied together with mask).
 * scale <= 0 means 1/sqrt(E). dropout_p in [0, 1) drops attention weights
 * with the mask tg_dropout would draw from rng for the weights [..., L, S]
 * (one draw; rng may be NULL when dropout_p is 0), and backward makes the
 * mask again rather than keeping it. A query whose every key is masked
 * gives zeros and passes zero gradient. Saves the output and one logsumexp
 * per query row for backward, which recomputes the scores tile by tile.
 * With 4-D inputs [B, H, L, E] the output's memory is [B, L, H, Ev] (a
 * transposed view, not contiguous), so that merging the heads with
 * transpose(1, 2) and reshape costs no copy. Grouped-query attention: q
 * [B, H, L, E] (4 dims or more, heads at dim -3) may come with k [B, Hkv,
 * S, E] and v [B, Hkv, S, Ev] where Hkv < H divides H; query head h reads
 * kv head h / (H / Hkv) in place (Hugging Face's repeat_kv order, never a
 * copy), and Hkv = 1 is multi-query attention. Masks and dropout are those
 * of the [B, H, L, S] scores; the gradients of k and v sum each kv head's
 * group of query heads. tg_scaled_dot_product_attention (nn.h) calls this
 * when it can. Errors: TG_ERR_NULL (also rng NULL with dropout),
 * TG_ERR_DTYPE (q, k, v not one float dtype; mask not bool or float),
 * TG_ERR_SHAPE (also k and v with fewer heads than q but different head
 * counts, or a count that does not divide q's), TG_ERR_VALUE (scale not
 * finite, dropout_p outside [0, 1)). */
TG_API tg_tensor *tg_attention(const tg_tensor *q, const tg_tensor *k, const tg_tensor *v,
                               const tg_tensor *mask, bool is_causal, double scale,
                               double dropout_p, tg_rng *rng);

/* tg_attention of the heads packed in one projection, as a self-attention
 * layer's fused q, k, v Linear makes them: qkv [B, T, 3 * heads * E] holds
 * q, k and v one after another in its last dim, each [B, T, heads * E]
 * with head h at columns h * E.. of its part. Returns [B, T, heads * E],
 * the heads merged (head h at columns h * E..). The same values, and the
 * same dropout mask for the same rng, as tg_attention on the heads split
 * out with narrow, reshape and transpose(1, 2), merged back with
 * transpose(1, 2) and reshape; backward writes the gradients of q, k and v
 * into one gradient of qkv instead of three added into it. No mask: only
 * is_causal. Errors: TG_ERR_NULL (qkv; rng with dropout), TG_ERR_DTYPE
 * (not float), TG_ERR_SHAPE (qkv not 3-D, its last dim not 3 * heads * E,
 * or more heads than columns), TG_ERR_VALUE (heads < 1, scale not finite, dropout_p outside [0, 1)). */
TG_API tg_tensor *tg_attention_qkvpacked(const tg_tensor *qkv, int64_t heads, bool is_causal,
                                         double scale, double dropout_p, tg_rng *rng);

/* ---- gradient checking (autograd/gradcheck.c) ------------------------------ */

/* The function under test: builds an output from the n inputs using any
 * tensorgrad ops and returns it (NULL on error). The checker calls it inside
 * a scope, so it releases nothing. It must be deterministic: a dropout
 * inside it should reseed its rng on each call. */
typedef tg_tensor *(*tg_gradcheck_fn)(tg_tensor *const *inputs, int n, void *ctx);

/* A field left 0 takes its default. */
typedef struct {
    double eps;   /* finite-difference step, default 1e-6 */
    double atol;  /* default 1e-5 */
    double rtol;  /* default 1e-3 */
    uint64_t seed; /* for the random weights that reduce the output */
} tg_gradcheck_options;

typedef struct {
    bool passed;
    int checked;        /* elements compared */
    int input;          /* the worst element: which input */
    int64_t index;      /* ... and its row-major index there */
    double analytic;    /* the gradient autograd gave */
    double numeric;     /* the gradient the central difference gave */
    double error;       /* |analytic - numeric| */
    char message[256];  /* a sentence naming the worst element */
} tg_gradcheck_result;

/* Compares autograd with central differences, everything in float64:
 * float inputs are copied to float64 (int64 and bool inputs are passed as
 * they are) and the output is reduced to a scalar with fixed random weights
 * (a plain sum would let softmax and layer_norm pass whatever their
 * gradient). Passes when |analytic - numeric| <= atol + rtol * |numeric| for
 * every element of every float input; NaN anywhere fails. opts may be NULL
 * for the defaults. Returns 1 on pass, 0 on a mismatch, -1 on error (f
 * failed, or bad arguments); result may be NULL. */
TG_API int tg_gradcheck(tg_gradcheck_fn f, void *ctx, tg_tensor *const *inputs, int n,
                        const tg_gradcheck_options *opts, tg_gradcheck_result *result);

/* Checks the float32 code paths: runs f on float32 copies of the inputs and
 * on float64 copies, and compares the outputs and the analytic gradients at
 * float32 tolerance (atol and rtol of opts, defaults 1e-4 and 1e-3 here).
 * Same returns as tg_gradcheck. */
TG_API int tg_gradcheck_float32(tg_gradcheck_fn f, void *ctx, tg_tensor *const *inputs, int n,
                                const tg_gradcheck_options *opts, tg_gradcheck_result *result);

/* Ops that ran backward during gradient checks in this process, for the
 * test that every op in the list has a case: seen[op] counts float64 checks
 * in [0] and float32 checks in [1]. */
TG_API void tg_gradcheck_coverage(int64_t seen[][2], int count);

#ifdef __cplusplus
}
#endif
#endif
