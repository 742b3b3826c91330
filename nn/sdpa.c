/* Scaled dot-product attention composed of ops: the one place the attention
 * formula lives, shared by MultiheadAttention and the GPT's attention. */
#include <math.h>

#include <tensorgrad/module.h>
#include <tensorgrad/nn.h>

/* mask must broadcast to the scores [..., L, S] (batch dims of q and k
 * broadcast) without growing them; bool or float. */
static int check_mask(const char *fn, const tg_tensor *q, const tg_tensor *k,
                      const tg_tensor *mask)
{
    if (!tg_dtype_is_float(tg_dtype_of(mask)) && tg_dtype_of(mask) != TG_BOOL) {
        tg_fail(TG_ERR_DTYPE, "%s: mask is %s; it must be bool or float", fn,
                tg_dtype_name(tg_dtype_of(mask)));
        return -1;
    }
    int nd = tg_ndim(q) > tg_ndim(k) ? tg_ndim(q) : tg_ndim(k);
    int64_t scores[TG_MAX_DIMS];
    for (int i = 0; i < nd; i++) {
        int iq = tg_ndim(q) - nd + i, ik = tg_ndim(k) - nd + i;
        int64_t sq = iq >= 0 ? tg_shape(q)[iq] : 1, sk = ik >= 0 ? tg_shape(k)[ik] : 1;
        scores[i] = sq != 1 ? sq : sk;
    }
    scores[nd - 1] = tg_shape(k)[tg_ndim(k) - 2];
    bool fits = tg_ndim(mask) <= nd;
    for (int i = 1; fits && i <= tg_ndim(mask); i++) {
        int64_t m = tg_shape(mask)[tg_ndim(mask) - i];
        fits = m == 1 || m == scores[nd - i];
    }
    if (!fits) {
        tg_fail(TG_ERR_SHAPE, "%s: mask %s does not broadcast to the scores %s", fn,
                TG_SHAPE_STRING(mask), tg_shape_string((char[96]){0}, 96, nd, scores));
        return -1;
    }
    return 0;
}

/* Query heads per kv head, as tg_attention groups them (autograd.h): with
 * 4 dims or more in some input, k and v (3 dims or more) with Hkv heads
 * (dim -3) fewer than q's H, Hkv dividing H, give H / Hkv; any other shape
 * 1. -1, recorded, when k and v have fewer heads than q but not that form. */
static int64_t kv_group(const char *fn, const tg_tensor *q, const tg_tensor *k,
                        const tg_tensor *v)
{
    int nq = tg_ndim(q), nk = tg_ndim(k), nv = tg_ndim(v);
    if ((nq < 4 && nk < 4 && nv < 4) || nq < 3 || nk < 3 || nv < 3)
        return 1;
    int64_t H = tg_shape(q)[nq - 3], Hk = tg_shape(k)[nk - 3], Hv = tg_shape(v)[nv - 3];
    if (H <= 1 || Hk < 1 || Hv < 1 || Hk >= H || Hv >= H)
        return 1;
    if (Hk != Hv || H % Hk != 0) {
        tg_fail(TG_ERR_SHAPE, "%s: q %s has %lld heads, k %s %lld and v %s %lld; grouped-query "
                              "attention needs one count of kv heads dividing q's", fn,
                TG_SHAPE_STRING(q), (long long)H, TG_SHAPE_STRING(k), (long long)Hk,
                TG_SHAPE_STRING(v), (long long)Hv);
        return -1;
    }
    return H / Hk;
}

/* x [..., Hkv, S, E] with each head repeated g times in a row, [..., Hkv g,
 * S, E] (Hugging Face's repeat_kv): the composition's copy, which the fused
 * op never makes. */
static tg_tensor *repeat_heads(const tg_tensor *x, int64_t g)
{
    int n = tg_ndim(x);
    int64_t shape[TG_MAX_DIMS + 1];
    for (int d = 0; d < n; d++)
        shape[d + (d >= n - 2)] = tg_shape(x)[d];
    shape[n - 2] = g;
    tg_tensor *e = tg_expand(tg_unsqueeze(x, n - 2), n + 1, shape); /* [..., Hkv, g, S, E] */
    shape[n - 3] *= g;
    shape[n - 2] = shape[n - 1], shape[n - 1] = shape[n];
    return tg_reshape(e, n, shape);
}

static int check_inputs(const tg_tensor *q, const tg_tensor *k, const tg_tensor *v,
                        const tg_tensor *mask, double dropout_p, double scale)
{
    const char *fn = "tg_scaled_dot_product_attention";
    if (!q || !k || !v) {
        tg_fail(TG_ERR_NULL, "%s: %s is NULL", fn, !q ? "q" : !k ? "k" : "v");
        return -1;
    }
    if (tg_ndim(q) < 2 || tg_ndim(k) < 2 || tg_ndim(v) < 2) {
        tg_fail(TG_ERR_SHAPE, "%s: q %s, k %s and v %s need at least 2 dims", fn,
                TG_SHAPE_STRING(q), TG_SHAPE_STRING(k), TG_SHAPE_STRING(v));
        return -1;
    }
    if (tg_shape(q)[tg_ndim(q) - 1] != tg_shape(k)[tg_ndim(k) - 1] ||
        tg_shape(k)[tg_ndim(k) - 2] != tg_shape(v)[tg_ndim(v) - 2]) {
        tg_fail(TG_ERR_SHAPE, "%s: q %s, k %s and v %s do not fit (q and k share the last "
                               "dim, k and v the key dim)",
                fn, TG_SHAPE_STRING(q), TG_SHAPE_STRING(k), TG_SHAPE_STRING(v));
        return -1;
    }
    if (!(dropout_p >= 0 && dropout_p < 1)) {
        tg_fail(TG_ERR_VALUE, "%s: dropout_p = %g is outside [0, 1)", fn, dropout_p);
        return -1;
    }
    if (!isfinite(scale)) {
        tg_fail(TG_ERR_VALUE, "%s: scale = %g is not finite (<= 0 means 1/sqrt(E))", fn, scale);
        return -1;
    }
    return mask ? check_mask(fn, q, k, mask) : 0;
}

/* Whether tg_attention (autograd/op_attention.c), which never holds the
 * [L, S] scores, computes exactly what the composition below would (its
 * dropout draws the same mask): no weights asked for, one float dtype, batch
 * dims that broadcast, and a mask that is bool or a constant float mask of
 * q's dtype (the fused op gives a mask no gradient). Anything else, errors
 * included, is left to the composition, which stays the reference. */
static bool fused_fits(const tg_tensor *q, const tg_tensor *k, const tg_tensor *v,
                       const tg_tensor *mask, int64_t group, tg_tensor **weights)
{
    if (weights || !tg_dtype_is_float(tg_dtype_of(q)) || tg_dtype_of(k) != tg_dtype_of(q) ||
        tg_dtype_of(v) != tg_dtype_of(q))
        return false;
    if (mask && tg_dtype_of(mask) != TG_BOOL &&
        (tg_dtype_of(mask) != tg_dtype_of(q) || tg_requires_grad(mask)))
        return false;
    const tg_tensor *in[3] = {q, k, v};
    for (int i = group > 1 ? 2 : 1; i <= TG_MAX_DIMS - 2; i++) { /* past grouped heads */
        int64_t size = 1;
        for (int t = 0; t < 3; t++) {
            int d = tg_ndim(in[t]) - 2 - i;
            int64_t s = d >= 0 ? tg_shape(in[t])[d] : 1;
            if (s != 1 && size != 1 && s != size)
                return false;
            size = s != 1 ? s : size;
        }
    }
    return true;
}

tg_tensor *tg_scaled_dot_product_attention(const tg_tensor *q, const tg_tensor *k,
                                           const tg_tensor *v, const tg_tensor *mask,
                                           double dropout_p, bool is_causal, double scale,
                                           tg_rng *rng, tg_tensor **weights)
{
    if (weights)
        *weights = NULL;
    if (check_inputs(q, k, v, mask, dropout_p, scale) < 0)
        return NULL;
    int64_t group = kv_group("tg_scaled_dot_product_attention", q, k, v);
    if (group < 0)
        return NULL;
    if (fused_fits(q, k, v, mask, group, weights) && (dropout_p == 0 || rng))
        return tg_attention(q, k, v, mask, is_causal && !mask, scale, dropout_p, rng);
    int nq = tg_ndim(q);
    int64_t L = tg_shape(q)[nq - 2], S = tg_shape(k)[tg_ndim(k) - 2], E = tg_shape(q)[nq - 1];
    if (scale <= 0)
        scale = 1.0 / sqrt((double)(E ? E : 1));
    tg_scope_begin();
    if (group > 1)
        k = repeat_heads(k, group), v = repeat_heads(v, group);
    tg_tensor *s = tg_mul_scalar(tg_matmul(q, tg_transpose(k, -2, -1)), scale); /* [..., L, S] */
    if (mask && tg_dtype_of(mask) == TG_BOOL)
        s = tg_masked_fill(s, mask, -INFINITY);
    else if (mask)
        s = tg_add(s, mask);
    else if (is_causal)
        s = tg_masked_fill(s, tg_causal_mask_rect(L, S), -INFINITY);
    tg_tensor *w = tg_softmax(s, -1);
    if (dropout_p > 0)
        w = tg_dropout(w, dropout_p, true, rng);
    tg_tensor *out = tg_matmul(w, v); /* [..., L, Ev] */
    if (weights && out)
        tg_retain(w);
    out = tg_scope_end_keep(out);
    if (weights && out)
        *weights = tg_scope_adopt(w); /* to the caller's scope, like out */
    return out;
}
