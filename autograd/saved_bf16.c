/* bfloat16 copies of the inputs that an op keeps for its backward under the
 * bf16 precision. Those it keeps only to multiply them in a backward bf16
 * product (the x of dW = dY^T x) cost nothing: such a product rounds each
 * element to bfloat16 as it packs it, and rounding is exact on a value that
 * is already bfloat16, so half the bytes give the same result. The others
 * are rounded, as an autocast's bf16 activations are. */
#include "saved_bf16.h"

#include "bf16.h"

static TG_TLS tg__bf16_keeping keeping = TG__KEEP_BF16_ROUNDED;

tg__bf16_keeping tg__set_bf16_keeping(tg__bf16_keeping what)
{
    tg__bf16_keeping was = keeping;
    keeping = what;
    return was;
}

/* x's bfloat16 copy, shared with the ops that made it before (retained:
 * x keeps one reference, the caller gets another), or NULL. The copy's
 * storage version is x's when it was made: a later write to x leaves it
 * stale. */
static tg_tensor *copy_of(tg_tensor *x)
{
    if (x->bf16_copy && tg__version(x->bf16_copy) == tg__version(x))
        return tg_retain(x->bf16_copy);
    tg_tensor *c = tg__empty_uninit(TG_BFLOAT16, x->ndim, x->shape);
    if (!c)
        return NULL;
    uint16_t *to = tg__ptr(c);
    const float *from = tg__ptr(x);
    TG_FOR_BLOCKS(tg__numel(x->ndim, x->shape), lo, len, tg__bf16_from_f32_n(to + lo, from + lo, len));
    c->storage->version = tg__version(x);
    tg_release(x->bf16_copy);
    x->bf16_copy = tg_retain(c);
    return c;
}

/* Keeps input i of node in saved[slot] as bfloat16 when the setting
 * reaches at least `least` and the input qualifies. */
static void keep(tg_node *node, int i, int slot, tg__bf16_keeping least)
{
    tg_tensor *x = node ? node->inputs[i] : NULL;
    if (!x || keeping < least ||
        node->prec != TG_PRECISION_BF16 || x->dtype != TG_FLOAT32 || !x->node ||
        !tg_is_contiguous(x))
        return;
    /* A copy already made, or a tensor that only the caller (its scope)
     * and this node hold: anything else keeps the float32 data alive. */
    bool shared = x->bf16_copy && tg__version(x->bf16_copy) == tg__version(x);
    if (!shared && (x->refcount != 2 || x->storage->refcount != 1))
        return;
    bool clean = tg_error_code() == TG_OK;
    tg_tensor *husk = tg__husk(x);
    tg_tensor *c = husk ? copy_of(x) : NULL;
    if (c) {
        tg__save(node, slot, c);
        node->inputs[i] = husk;
        node->input_versions[i] = tg__version(husk);
        tg_release(x);
    } else {
        tg_release(husk);
        if (clean) /* out of memory: the float32 input stays, nothing is lost */
            tg_error_clear();
    }
    tg__take_nomem();
    tg_release(c);
}

tg_tensor *tg__rounded_output(const tg_node *node, tg_tensor *out)
{
    if (!node || !out || keeping < TG__KEEP_BF16_ROUNDED || node->prec != TG_PRECISION_BF16 ||
        out->dtype != TG_FLOAT32 || !tg_is_contiguous(out))
        return NULL;
    bool clean = tg_error_code() == TG_OK;
    tg_tensor *c = copy_of(out);
    if (!c && clean) /* out of memory: out itself is kept, nothing is lost */
        tg_error_clear();
    tg__take_nomem();
    return c;
}

void tg__save_bf16_operand(tg_node *node, int i, int slot)
{
    keep(node, i, slot, TG__KEEP_BF16_EXACT);
}

void tg__save_bf16_rounded(tg_node *node, int i, int slot)
{
    keep(node, i, slot, TG__KEEP_BF16_ROUNDED);
}

const tg_tensor *tg__saved_bf16(const tg_node *node, int slot)
{
    const tg_tensor *c = node->saved[slot];
    return c && c->dtype == TG_BFLOAT16 ? c : NULL;
}

/* dst[i] = src[i] widened, for i < n, on the team. */
static void widen(float *dst, const uint16_t *src, int64_t n)
{
    TG_FOR_BLOCKS(n, lo, len, tg__f32_from_bf16_n(dst + lo, src + lo, len));
}

tg_tensor *tg__widen_rows(const tg_tensor *c, int64_t r0, int64_t nr)
{
    int64_t last = c->ndim ? c->shape[c->ndim - 1] : 1;
    tg_tensor *x = tg__empty_uninit(TG_FLOAT32, 2, (int64_t[]){nr, last});
    if (x)
        widen(tg__ptr(x), (const uint16_t *)tg__ptr(c) + r0 * last, nr * last);
    return x;
}

tg_tensor *tg__widened(const tg_tensor *c)
{
    tg_tensor *x = tg__empty_uninit(TG_FLOAT32, c->ndim, c->shape);
    if (x)
        widen(tg__ptr(x), tg__ptr(c), tg__numel(c->ndim, c->shape));
    return x;
}

tg_tensor *tg__saved_operand(const tg_node *node, int i, int slot)
{
    const tg_tensor *c = tg__saved_bf16(node, slot);
    return c ? tg__widened(c) : tg_retain(node->inputs[i]);
}
