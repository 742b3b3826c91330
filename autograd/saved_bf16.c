/* bfloat16 copies of the operands that an op keeps only to multiply them
 * in a backward bf16 product (the x of dW = dY^T x): such a product rounds
 * each element to bfloat16 as it packs it, and rounding is exact on a value
 * that is already bfloat16, so half the bytes give the same result. */
#include "saved_bf16.h"

#include "bf16.h"

static TG_TLS bool saving_off;

bool tg__set_bf16_saving(bool on)
{
    bool was = !saving_off;
    saving_off = !on;
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
    tg__bf16_from_f32_n(tg__ptr(c), tg__ptr(x), tg__numel(x->ndim, x->shape));
    c->storage->version = tg__version(x);
    tg_release(x->bf16_copy);
    x->bf16_copy = tg_retain(c);
    return c;
}

void tg__save_bf16_operand(tg_node *node, int i, int slot)
{
    tg_tensor *x = node ? node->inputs[i] : NULL;
    if (!x || saving_off || node->prec != TG_PRECISION_BF16 || x->dtype != TG_FLOAT32 ||
        !x->node || !tg_is_contiguous(x))
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

tg_tensor *tg__saved_operand(const tg_node *node, int i, int slot)
{
    const tg_tensor *c = node->saved[slot];
    if (!c || c->dtype != TG_BFLOAT16)
        return tg_retain(node->inputs[i]);
    tg_tensor *x = tg__empty_uninit(TG_FLOAT32, c->ndim, c->shape);
    if (x)
        tg__f32_from_bf16_n(tg__ptr(x), tg__ptr(c), tg__numel(c->ndim, c->shape));
    return x;
}
