/* What the language models share: their forwards' checks of a token batch,
 * and the sliding-window generation loop, in which each new token costs one
 * position of the model's cache until the window slides. */
#include <string.h>

#include <tensorgrad/module.h>

#include "lm.h"
#include "sample.h"

int tg__check_idx(const char *fn, const tg_tensor *idx, int64_t vocab_size, int64_t max_len,
                  int64_t block_size)
{
    if (tg_dtype_of(idx) != TG_INT64) {
        tg_fail(TG_ERR_DTYPE, "%s: idx dtype %s is not int64", fn,
                tg_dtype_name(tg_dtype_of(idx)));
        return -1;
    }
    if (tg_ndim(idx) != 2 || tg_shape(idx)[1] < 1 || tg_shape(idx)[1] > max_len) {
        tg_fail(TG_ERR_SHAPE, "%s: idx %s is not [B, T] with 1 <= T <= %lld (block_size %lld)",
                fn, TG_SHAPE_STRING(idx), (long long)max_len, (long long)block_size);
        return -1;
    }
    tg_scope_begin(); /* holds the contiguous copy */
    tg_tensor *c = tg_contiguous(idx);
    const int64_t *p = tg_data_const(c);
    int rc = p ? 0 : -1;
    for (int64_t i = 0; p && i < tg_numel(c) && rc == 0; i++)
        if (p[i] < 0 || p[i] >= vocab_size) {
            tg_fail(TG_ERR_INDEX, "%s: token %lld at flat position %lld is outside "
                    "[0, vocab_size %lld)", fn, (long long)p[i], (long long)i,
                    (long long)vocab_size);
            rc = -1;
        }
    tg_scope_end();
    return rc;
}

int tg__check_targets(const char *fn, const tg_tensor *idx, const tg_tensor *targets)
{
    if (tg_dtype_of(targets) != TG_INT64) {
        tg_fail(TG_ERR_DTYPE, "%s: targets dtype %s is not int64", fn,
                tg_dtype_name(tg_dtype_of(targets)));
        return -1;
    }
    if (tg_ndim(targets) != 2 || tg_shape(targets)[0] != tg_shape(idx)[0] ||
        tg_shape(targets)[1] != tg_shape(idx)[1]) {
        tg_fail(TG_ERR_SHAPE, "%s: targets %s do not match idx %s", fn,
                TG_SHAPE_STRING(targets), TG_SHAPE_STRING(idx));
        return -1;
    }
    return 0;
}

int tg__generate(const tg__gen_stepper *d, const int64_t *prompt, int64_t prompt_len, int64_t n,
                 const tg_sample_options *opts, tg_rng *rng, int64_t *out,
                 int (*on_token)(int64_t token, void *ctx), void *ctx)
{
    int64_t block = d->block_size;
    if (tg__sample_check(d->fn, prompt, prompt_len, n, opts, rng, d->vocab_size, block) < 0)
        return -1;
    memmove(out, prompt, (size_t)prompt_len * sizeof *out);
    if (n == 0)
        return 0;
    tg__sampler *s = tg__sampler_new(d->vocab_size, d->fn);
    if (!s)
        return -1;
    double *row = tg__sampler_row(s);
    bool was = tg_set_grad_enabled(false);
    /* the cache holds positions 0..cached-1 of the window out[w..len) */
    int64_t len = prompt_len, w = len > block ? len - block : 0, cached = 0;
    int rc = 0;
    for (int64_t i = 0; i < n && rc == 0; i++) {
        if (len - w > block) {
            w = len - block;
            cached = 0;
        }
        rc = d->step(d->model, out + w + cached, len - w - cached, cached, row);
        cached = len - w;
        int64_t token = rc == 0 ? tg__sampler_pick(s, opts, rng, len) : -1;
        if (token < 0)
            rc = -1;
        else
            out[len++] = token;
        if (rc == 0 && on_token && on_token(out[len - 1], ctx))
            break;
    }
    tg_set_grad_enabled(was);
    tg__sampler_free(s);
    return rc;
}

int tg__check_sizes(const char *fn, const tg__size *sizes, int n)
{
    for (int i = 0; i < n; i++)
        if (sizes[i].value <= 0) {
            tg_fail(TG_ERR_VALUE, "%s: %s = %lld must be positive", fn, sizes[i].name,
                    (long long)sizes[i].value);
            return -1;
        }
    for (int i = 0; i < n; i++)
        if (strcmp(sizes[i].name, "n_layer") == 0 && sizes[i].value > 1 << 20) {
            tg_fail(TG_ERR_VALUE, "%s: n_layer = %lld is too large", fn,
                    (long long)sizes[i].value);
            return -1;
        }
    return 0;
}
