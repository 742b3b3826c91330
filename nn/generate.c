/* The sliding-window generation loop that tg_gpt_generate_each and
 * tg_llama_generate_each share: each new token costs one position of the
 * model's cache until the window slides, when the cache is rebuilt. */
#include <string.h>

#include <tensorgrad/module.h>

#include "generate.h"
#include "sample.h"

int tg__generate(const tg__decoder *d, const int64_t *prompt, int64_t prompt_len, int64_t n,
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
        if (rc == 0)
            out[len++] = tg__sampler_pick(s, opts, rng);
        if (rc == 0 && on_token && on_token(out[len - 1], ctx))
            break;
    }
    tg_set_grad_enabled(was);
    tg__sampler_free(s);
    return rc;
}
