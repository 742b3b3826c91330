/* nn.MultiheadAttention (batch_first=True): packed q/k/v projections (or three
 * apart when keys and values have other widths), heads split by views, the masks merged into one, scaled dot-product attention
 * per head, and the output projection. PyTorch 1.13's
 * multi_head_attention_forward is the reference for every step. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tensorgrad/module.h>
#include <tensorgrad/nn.h>

/* ---- construction -------------------------------------------------------------- */

/* A leaf the caller owns outright (the private scope keeps an enclosing one
 * from taking the reference), marked as requiring grad. */
static tg_tensor *own_param(tg_tensor *t)
{
    t = tg_retain(t);
    if (t && tg_set_requires_grad(t, true) < 0) {
        tg_release(t);
        return NULL;
    }
    return t;
}

/* A [rows, cols] weight from xavier_uniform: U(+-sqrt(6 / (rows + cols))). */
static tg_tensor *xavier(int64_t rows, int64_t cols, tg_dtype dtype, tg_rng *rng)
{
    double a = sqrt(6.0 / (double)(rows + cols));
    return own_param(tg_uniform(rng, dtype, 2, (int64_t[]){rows, cols}, -a, a));
}

/* Whether the q/k/v projections are one packed [3E, E] weight. */
static bool packed(const tg_mha *m)
{
    return m->in_proj_weight != NULL;
}

/* Draws from rng in this order: in_proj_weight [3E, E] from xavier_uniform
 * (or q_proj_weight, k_proj_weight, v_proj_weight, each xavier_uniform of
 * its own shape), then out_proj.weight [E, E] like nn.Linear
 * (U(+-1/sqrt(E))). The biases are zeros and draw nothing. (PyTorch builds
 * out_proj first, so its draws come in the other order; only the
 * distributions match, not the streams.) */
static int init_params(tg_mha *m, bool separate, bool bias, tg_dtype dtype, tg_rng *rng)
{
    int64_t E = m->embed_dim;
    bool was = tg_set_grad_enabled(false);
    tg_scope_begin();
    bool ok;
    if (separate) {
        m->q_proj_weight = xavier(E, E, dtype, rng);
        m->k_proj_weight = m->q_proj_weight ? xavier(E, m->kdim, dtype, rng) : NULL;
        m->v_proj_weight = m->k_proj_weight ? xavier(E, m->vdim, dtype, rng) : NULL;
        ok = m->v_proj_weight != NULL;
    } else {
        m->in_proj_weight = xavier(3 * E, E, dtype, rng);
        ok = m->in_proj_weight != NULL;
    }
    if (ok)
        m->out_proj = tg_linear_new(E, E, false, dtype, rng);
    if (m->out_proj && bias) {
        m->in_proj_bias = own_param(tg_zeros(dtype, 1, (int64_t[]){3 * E}));
        m->out_proj->bias = own_param(tg_zeros(dtype, 1, (int64_t[]){E}));
    }
    tg_scope_end();
    tg_set_grad_enabled(was);
    ok = ok && m->out_proj && (!bias || (m->in_proj_bias && m->out_proj->bias));
    return ok ? 0 : -1;
}

/* tg_mha_new and tg_mha_new_kv, fn naming the one called. */
static tg_mha *mha_new(const char *fn, int64_t embed_dim, int64_t num_heads, int64_t kdim,
                       int64_t vdim, double dropout, bool bias, tg_dtype dtype, tg_rng *rng)
{
    if (embed_dim <= 0 || num_heads <= 0)
        return tg_fail(TG_ERR_VALUE, "%s: embed_dim %lld and num_heads %lld must be positive",
                       fn, (long long)embed_dim, (long long)num_heads);
    if (kdim <= 0 || vdim <= 0)
        return tg_fail(TG_ERR_VALUE, "%s: kdim %lld and vdim %lld must be positive", fn,
                       (long long)kdim, (long long)vdim);
    if (embed_dim % num_heads != 0)
        return tg_fail(TG_ERR_VALUE, "%s: embed_dim %lld is not divisible by num_heads %lld",
                       fn, (long long)embed_dim, (long long)num_heads);
    if (!(dropout >= 0 && dropout < 1))
        return tg_fail(TG_ERR_VALUE, "%s: dropout %g is outside [0, 1)", fn, dropout);
    if (dtype != TG_FLOAT32 && dtype != TG_FLOAT64)
        return tg_fail(TG_ERR_DTYPE, "%s: dtype %s is not a float dtype", fn,
                       tg_dtype_name(dtype));
    tg_mha *m = calloc(1, sizeof *m);
    if (!m)
        return tg_fail(TG_ERR_NOMEM, "%s: out of memory", fn);
    m->embed_dim = embed_dim;
    m->num_heads = num_heads;
    m->head_dim = embed_dim / num_heads;
    m->kdim = kdim;
    m->vdim = vdim;
    m->dropout = dropout;
    /* Training mode, as a fresh torch module; dropout then draws from rng. */
    m->train = true;
    m->rng = rng;
    bool separate = kdim != embed_dim || vdim != embed_dim;
    if (init_params(m, separate, bias, dtype, rng) < 0) {
        tg_mha_free(m);
        return NULL;
    }
    return m;
}

tg_mha *tg_mha_new(int64_t embed_dim, int64_t num_heads, double dropout, bool bias,
                   tg_dtype dtype, tg_rng *rng)
{
    TG_CHECK_ARG(rng);
    return mha_new("tg_mha_new", embed_dim, num_heads, embed_dim, embed_dim, dropout, bias,
                   dtype, rng);
}

tg_mha *tg_mha_new_kv(int64_t embed_dim, int64_t num_heads, int64_t kdim, int64_t vdim,
                      double dropout, bool bias, tg_dtype dtype, tg_rng *rng)
{
    TG_CHECK_ARG(rng);
    return mha_new("tg_mha_new_kv", embed_dim, num_heads, kdim, vdim, dropout, bias, dtype, rng);
}

void tg_mha_set_train(tg_mha *m, bool train)
{
    if (m)
        m->train = train;
}

/* The widths of key and value (0 in a struct built by hand means embed_dim). */
static int64_t kdim_of(const tg_mha *m)
{
    return m->kdim > 0 ? m->kdim : m->embed_dim;
}
static int64_t vdim_of(const tg_mha *m)
{
    return m->vdim > 0 ? m->vdim : m->embed_dim;
}

/* The dtype of the parameters. */
static tg_dtype param_dtype(const tg_mha *m)
{
    return tg_dtype_of(packed(m) ? m->in_proj_weight : m->q_proj_weight);
}

/* ---- argument checks ------------------------------------------------------------ */

/* The module's tensors must fit its sizes: a struct built by hand (as the
 * gradient check does) is checked like one from _new. */
static int check_module(const tg_mha *m)
{
    const char *fn = "tg_mha_forward";
    int64_t E = m->embed_dim, H = m->num_heads;
    bool sep = m->q_proj_weight && m->k_proj_weight && m->v_proj_weight;
    if ((!m->in_proj_weight && !sep) || !m->out_proj) {
        tg_fail(TG_ERR_NULL, "%s: m->%s is NULL", fn,
                m->out_proj ? "in_proj_weight (or one of q/k/v_proj_weight)" : "out_proj");
        return -1;
    }
    if (E <= 0 || H <= 0 || m->head_dim * H != E) {
        tg_fail(TG_ERR_VALUE, "%s: embed_dim %lld, num_heads %lld and head_dim %lld do not "
                "fit", fn, (long long)E, (long long)H, (long long)m->head_dim);
        return -1;
    }
    const tg_tensor *w = m->in_proj_weight, *b = m->in_proj_bias;
    if (w && (tg_ndim(w) != 2 || tg_shape(w)[0] != 3 * E || tg_shape(w)[1] != E ||
              kdim_of(m) != E || vdim_of(m) != E)) {
        tg_fail(TG_ERR_SHAPE, "%s: in_proj_weight %s is not [3 * embed_dim, embed_dim] with "
                "embed_dim %lld (kdim %lld, vdim %lld)", fn, TG_SHAPE_STRING(w), (long long)E,
                (long long)kdim_of(m), (long long)vdim_of(m));
        return -1;
    }
    const tg_tensor *ws[3] = {m->q_proj_weight, m->k_proj_weight, m->v_proj_weight};
    int64_t cols[3] = {E, kdim_of(m), vdim_of(m)};
    for (int i = 0; !w && i < 3; i++)
        if (tg_ndim(ws[i]) != 2 || tg_shape(ws[i])[0] != E || tg_shape(ws[i])[1] != cols[i]) {
            tg_fail(TG_ERR_SHAPE, "%s: %c_proj_weight %s is not [embed_dim, %s] = [%lld,%lld]",
                    fn, "qkv"[i], TG_SHAPE_STRING(ws[i]), i == 0 ? "embed_dim" : i == 1 ? "kdim"
                    : "vdim", (long long)E, (long long)cols[i]);
            return -1;
        }
    if (b && (tg_ndim(b) != 1 || tg_shape(b)[0] != 3 * E)) {
        tg_fail(TG_ERR_SHAPE, "%s: in_proj_bias %s is not [3 * embed_dim] with embed_dim "
                "%lld", fn, TG_SHAPE_STRING(b), (long long)E);
        return -1;
    }
    return 0;
}

/* query [B, L, E], key [B, S, kdim], value [B, S, vdim] (all batched by now). */
static int check_inputs(const tg_mha *m, const tg_tensor *q, const tg_tensor *k,
                        const tg_tensor *v)
{
    const char *fn = "tg_mha_forward";
    if (tg_ndim(q) != 3 || tg_ndim(k) != 3 || tg_ndim(v) != 3 || tg_shape(q)[2] != m->embed_dim ||
        tg_shape(k)[2] != kdim_of(m) || tg_shape(v)[2] != vdim_of(m)) {
        tg_fail(TG_ERR_SHAPE, "%s: query %s, key %s and value %s must be [B, *, embed_dim "
                "%lld], [B, *, kdim %lld] and [B, *, vdim %lld], or all unbatched", fn,
                TG_SHAPE_STRING(q), TG_SHAPE_STRING(k), TG_SHAPE_STRING(v),
                (long long)m->embed_dim, (long long)kdim_of(m), (long long)vdim_of(m));
        return -1;
    }
    bool same_kv = tg_shape(k)[0] == tg_shape(v)[0] && tg_shape(k)[1] == tg_shape(v)[1];
    if (!same_kv || tg_shape(q)[0] != tg_shape(k)[0]) {
        tg_fail(TG_ERR_SHAPE, "%s: key %s and value %s must have the same batch and length, "
                "and the batch size of query %s", fn, TG_SHAPE_STRING(k), TG_SHAPE_STRING(v),
                TG_SHAPE_STRING(q));
        return -1;
    }
    tg_dtype dt = param_dtype(m);
    if (tg_dtype_of(q) != dt || tg_dtype_of(k) != dt || tg_dtype_of(v) != dt) {
        tg_fail(TG_ERR_DTYPE, "%s: query, key and value (%s, %s, %s) must have the "
                "parameters' dtype %s", fn, tg_dtype_name(tg_dtype_of(q)),
                tg_dtype_name(tg_dtype_of(k)), tg_dtype_name(tg_dtype_of(v)), tg_dtype_name(dt));
        return -1;
    }
    return 0;
}

/* attn_mask [L, S] or [B*H, L, S], key_padding_mask [B, S]; bool or float. */
static int check_masks(const tg_mha *m, const tg_tensor *am, const tg_tensor *kpm, int64_t B,
                       int64_t L, int64_t S)
{
    const char *fn = "tg_mha_forward";
    if ((am && tg_dtype_of(am) == TG_INT64) || (kpm && tg_dtype_of(kpm) == TG_INT64)) {
        tg_fail(TG_ERR_DTYPE, "%s: %s must be bool or float, not int64", fn,
                am && tg_dtype_of(am) == TG_INT64 ? "attn_mask" : "key_padding_mask");
        return -1;
    }
    if (am && !(tg_ndim(am) == 2 && tg_shape(am)[0] == L && tg_shape(am)[1] == S) &&
        !(tg_ndim(am) == 3 && tg_shape(am)[0] == B * m->num_heads && tg_shape(am)[1] == L &&
          tg_shape(am)[2] == S)) {
        tg_fail(TG_ERR_SHAPE, "%s: attn_mask %s is neither [L, S] = [%lld,%lld] nor "
                "[B * num_heads, L, S] = [%lld,%lld,%lld]", fn, TG_SHAPE_STRING(am),
                (long long)L, (long long)S, (long long)(B * m->num_heads), (long long)L,
                (long long)S);
        return -1;
    }
    if (kpm && !(tg_ndim(kpm) == 2 && tg_shape(kpm)[0] == B && tg_shape(kpm)[1] == S)) {
        tg_fail(TG_ERR_SHAPE, "%s: key_padding_mask %s is not [B, S] = [%lld,%lld]", fn,
                TG_SHAPE_STRING(kpm), (long long)B, (long long)S);
        return -1;
    }
    return 0;
}

/* ---- forward -------------------------------------------------------------------- */

/* A mask as something to add to the scores, in dtype: -inf where a bool
 * mask is true. Called inside the forward's scope. */
static tg_tensor *additive(const tg_tensor *mask, tg_dtype dtype)
{
    if (tg_dtype_of(mask) == TG_BOOL)
        return tg_masked_fill(tg_zeros(dtype, tg_ndim(mask), tg_shape(mask)), mask, -INFINITY);
    return tg_dtype_of(mask) == dtype ? (tg_tensor *)mask : tg_to_dtype(mask, dtype);
}

/* The one mask the heads see, broadcasting to [B, H, L, S], or NULL:
 * attn_mask (or the causal mask) combined with key_padding_mask. A bool
 * mask alone goes through as it is; two are added as floats, so -inf from
 * either masks the score (PyTorch's logical_or / masked_fill). */
static tg_tensor *merged_mask(const tg_mha *m, const tg_tensor *am, const tg_tensor *kpm,
                              bool is_causal, tg_dtype dtype, int64_t B, int64_t L, int64_t S)
{
    tg_tensor *a = (tg_tensor *)am;
    if (!a && is_causal)
        a = tg_causal_mask_rect(L, S); /* true where j > i */
    if (a && tg_ndim(a) == 3)
        a = tg_reshape(a, 4, (int64_t[]){B, m->num_heads, L, S});
    tg_tensor *p = kpm ? tg_reshape(kpm, 4, (int64_t[]){B, 1, 1, S}) : NULL;
    if (!p || !a) {
        tg_tensor *one = a ? a : p;
        return one && tg_dtype_of(one) != TG_BOOL ? additive(one, dtype) : one;
    }
    return tg_add(additive(a, dtype), additive(p, dtype));
}

/* y [B, T, E] -> [B, H, T, Dh], a view. */
static tg_tensor *split_heads(const tg_mha *m, tg_tensor *y)
{
    if (!y)
        return NULL;
    y = tg_reshape(y, 4, (int64_t[]){tg_shape(y)[0], tg_shape(y)[1], m->num_heads, m->head_dim});
    return tg_transpose(y, 1, 2);
}

/* x [B, T, E] (kdim, vdim for i = 1, 2) -> the i-th projection (rows
 * [i*E, (i+1)*E) of the packed weight, or q/k/v_proj_weight), split into
 * heads: [B, H, T, Dh], a view of the projection. */
static tg_tensor *project_heads(const tg_mha *m, const tg_tensor *x, int i)
{
    int64_t E = m->embed_dim;
    tg_tensor *const sep[3] = {m->q_proj_weight, m->k_proj_weight, m->v_proj_weight};
    tg_tensor *w = packed(m) ? tg_narrow(m->in_proj_weight, 0, i * E, E) : sep[i]; /* [E, in] */
    tg_tensor *b = m->in_proj_bias ? tg_narrow(m->in_proj_bias, 0, i * E, E) : NULL;
    if (m->in_proj_bias && !b)
        return NULL;
    return split_heads(m, tg_affine(x, w, b)); /* [B, T, E] -> heads */
}

/* Self-attention (query, key and value one tensor): the three projections
 * as one product with the whole packed weight, [B, T, 3E], split into the
 * heads of q, k and v (views). One wide GEMM each way instead of three
 * narrow ones, and one gradient for x instead of three summed. */
static void project_self(const tg_mha *m, const tg_tensor *x, tg_tensor *heads[3])
{
    int64_t E = m->embed_dim;
    tg_tensor *qkv = tg_affine(x, m->in_proj_weight, m->in_proj_bias);
    for (int i = 0; i < 3; i++)
        heads[i] = qkv ? split_heads(m, tg_narrow(qkv, 2, i * E, E)) : NULL;
}

tg_tensor *tg_mha_forward(const tg_mha *m, const tg_tensor *query, const tg_tensor *key,
                          const tg_tensor *value, const tg_mha_options *opts,
                          tg_tensor **weights)
{
    if (weights)
        *weights = NULL;
    TG_CHECK_ARG(m);
    TG_CHECK_ARG(query);
    TG_CHECK_ARG(key);
    TG_CHECK_ARG(value);
    if (check_module(m) < 0)
        return NULL;
    const tg_mha_options none = {0};
    if (!opts)
        opts = &none;
    bool unbatched = tg_ndim(query) == 2 && tg_ndim(key) == 2 && tg_ndim(value) == 2;
    bool self = query == key && key == value;
    bool want_w = opts->need_weights && weights;
    tg_scope_begin();
    const tg_tensor *q = query, *k = key, *v = value, *kpm = opts->key_padding_mask;
    if (unbatched) {
        /* Batch of one: an unbatched key_padding_mask is [S]. */
        q = tg_unsqueeze(q, 0), k = tg_unsqueeze(k, 0), v = tg_unsqueeze(v, 0);
        if (kpm && tg_ndim(kpm) == 1)
            kpm = tg_unsqueeze(kpm, 0);
    }
    if (check_inputs(m, q, k, v) < 0 ||
        check_masks(m, opts->attn_mask, kpm, tg_shape(q)[0], tg_shape(q)[1], tg_shape(k)[1]) < 0) {
        tg_scope_end();
        return NULL;
    }
    int64_t B = tg_shape(q)[0], L = tg_shape(q)[1], S = tg_shape(k)[1];
    tg_tensor *w = NULL; /* [B, H, L, S] */
    double p = m->train ? m->dropout : 0;
    tg_tensor *o;
    if (self && packed(m) && !opts->attn_mask && !kpm && !want_w && (p == 0 || m->rng)) {
        /* the heads read from the one [B, L, 3E] projection in place, and
         * their gradients written into one: the output comes merged */
        tg_tensor *qkv = tg_affine(q, m->in_proj_weight, m->in_proj_bias);
        o = tg_attention_qkvpacked(qkv, m->num_heads, opts->is_causal, 0, p, m->rng);
    } else {
        tg_tensor *mask = merged_mask(m, opts->attn_mask, kpm, opts->is_causal, tg_dtype_of(q), B,
                                      L, S);
        tg_tensor *heads[3];
        if (self && packed(m)) {
            project_self(m, q, heads);
        } else {
            heads[0] = project_heads(m, q, 0);
            heads[1] = project_heads(m, k, 1);
            heads[2] = project_heads(m, v, 2);
        }
        o = tg_scaled_dot_product_attention(heads[0], heads[1], heads[2], mask, p, false, 0,
                                            m->rng, want_w ? &w : NULL);
        /* [B, H, L, Dh] -> [B, L, H, Dh] -> [B, L, E] (reshape copies the heads together). */
        o = tg_reshape(tg_transpose(o, 1, 2), 3, (int64_t[]){B, L, m->embed_dim});
    }
    o = tg_linear_forward(m->out_proj, o);
    if (want_w && opts->average_attn_weights)
        w = tg_mean(w, (int[]){1}, 1, false);
    if (unbatched) {
        o = tg_squeeze(o, 0);
        w = want_w ? tg_squeeze(w, 0) : NULL;
    }
    if (want_w && o)
        tg_retain(w);
    o = tg_scope_end_keep(o);
    if (want_w && o)
        *weights = tg_scope_adopt(w); /* to the caller's scope, like o */
    return o;
}

int tg_mha_params(const tg_mha *m, const char *prefix, tg_params *ps)
{
    TG_CHECK_ARG_STATUS(m);
    TG_CHECK_ARG_STATUS(ps);
    int start = ps->count;
    bool has = prefix && *prefix;
    size_t n = (has ? strlen(prefix) + 1 : 0) + sizeof "out_proj";
    char *sub = malloc(n);
    if (!sub) {
        tg_fail(TG_ERR_NOMEM, "tg_mha_params: out of memory");
        return -1;
    }
    snprintf(sub, n, "%s%sout_proj", has ? prefix : "", has ? "." : "");
    int rc = 0;
    bool sep = !packed(m);
    if ((!sep && tg_params_add(ps, prefix, "in_proj_weight", m->in_proj_weight) < 0) ||
        (sep && (tg_params_add(ps, prefix, "q_proj_weight", m->q_proj_weight) < 0 ||
                 tg_params_add(ps, prefix, "k_proj_weight", m->k_proj_weight) < 0 ||
                 tg_params_add(ps, prefix, "v_proj_weight", m->v_proj_weight) < 0)) ||
        (m->in_proj_bias && tg_params_add(ps, prefix, "in_proj_bias", m->in_proj_bias) < 0) ||
        tg_linear_params(m->out_proj, sub, ps) < 0) {
        /* All or nothing: take back what was added. */
        while (ps->count > start) {
            ps->count--;
            free(ps->names[ps->count]);
            tg_release(ps->tensors[ps->count]);
        }
        rc = -1;
    }
    free(sub);
    return rc;
}

void tg_mha_free(tg_mha *m)
{
    if (!m)
        return;
    tg_release(m->in_proj_weight);
    tg_release(m->q_proj_weight);
    tg_release(m->k_proj_weight);
    tg_release(m->v_proj_weight);
    tg_release(m->in_proj_bias);
    tg_linear_free(m->out_proj);
    free(m);
}
