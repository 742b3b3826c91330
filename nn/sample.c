/* How generation picks each token, shared by every language model here:
 * the request's checks (prompt, options, the context policy) and the draw
 * from one row of logits. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <tensorgrad/module.h>

#include "sample.h"

/* A logit or a weight with the token it belongs to, for ranking. */
typedef struct {
    double value;
    int64_t token;
} ranked;

struct tg__sampler {
    const char *fn; /* the public function, named in messages */
    int64_t V;
    double *row;    /* [V] logits, then weights */
    ranked *order;  /* [V] scratch for top-k and top-p */
};

static int check_prompt(const char *fn, const int64_t *prompt, int64_t prompt_len, int64_t n,
                        int64_t V)
{
    if (prompt_len < 1 || n < 0 || n > INT64_MAX - prompt_len) {
        tg_fail(TG_ERR_VALUE, "%s: prompt_len = %lld must be >= 1 and n = %lld >= 0", fn,
                (long long)prompt_len, (long long)n);
        return -1;
    }
    for (int64_t i = 0; i < prompt_len; i++)
        if (prompt[i] < 0 || prompt[i] >= V) {
            tg_fail(TG_ERR_INDEX, "%s: prompt[%lld] = %lld is outside [0, vocab_size %lld)",
                    fn, (long long)i, (long long)prompt[i], (long long)V);
            return -1;
        }
    return 0;
}

static int check_options(const char *fn, const tg_sample_options *o, const tg_rng *rng)
{
    if (o->top_k < 0) {
        tg_fail(TG_ERR_VALUE, "%s: top_k = %lld is negative", fn, (long long)o->top_k);
        return -1;
    }
    if (!(o->top_p >= 0 && o->top_p <= 1)) {
        tg_fail(TG_ERR_VALUE, "%s: top_p = %g is outside [0, 1] (0 or 1 keeps every token)",
                fn, o->top_p);
        return -1;
    }
    if (!o->greedy && !(o->temperature > 0)) {
        tg_fail(TG_ERR_VALUE, "%s: temperature = %g must be positive", fn, o->temperature);
        return -1;
    }
    if (!o->greedy && !rng) {
        tg_fail(TG_ERR_NULL, "%s: rng is NULL (needed unless greedy)", fn);
        return -1;
    }
    return 0;
}

int tg__sample_check(const char *fn, const int64_t *prompt, int64_t prompt_len, int64_t n,
                     const tg_sample_options *o, const tg_rng *rng, int64_t vocab_size,
                     int64_t block_size)
{
    if (check_prompt(fn, prompt, prompt_len, n, vocab_size) < 0 ||
        check_options(fn, o, rng) < 0)
        return -1;
    if (!o->slide && prompt_len + n > block_size) {
        tg_fail(TG_ERR_VALUE, "%s: prompt_len = %lld plus n = %lld is %lld tokens, more than "
                "block_size = %lld; set slide to continue past the context (the window then "
                "slides to the last block_size tokens)", fn, (long long)prompt_len,
                (long long)n, (long long)(prompt_len + n), (long long)block_size);
        return -1;
    }
    return 0;
}

tg__sampler *tg__sampler_new(int64_t vocab_size, const char *fn)
{
    tg__sampler *s = calloc(1, sizeof *s);
    if (s) {
        s->fn = fn;
        s->V = vocab_size;
        s->row = malloc((size_t)vocab_size * sizeof *s->row);
        s->order = malloc((size_t)vocab_size * sizeof *s->order);
    }
    if (!s || !s->row || !s->order) {
        tg__sampler_free(s);
        return tg_fail(TG_ERR_NOMEM, "%s: out of memory for a row of %lld logits", fn,
                       (long long)vocab_size);
    }
    return s;
}

double *tg__sampler_row(tg__sampler *s) { return s->row; }

void tg__sampler_free(tg__sampler *s)
{
    if (!s)
        return;
    free(s->row);
    free(s->order);
    free(s);
}

/* Larger value first; equal values in token order, so that a cut is the
 * same on every platform's qsort. */
static int by_value_descending(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->value != y->value)
        return x->value < y->value ? 1 : -1;
    return (x->token > y->token) - (x->token < y->token);
}

/* Sets every logit below the k-th largest to -inf (ties with it stay, as
 * nanoGPT's top-k does). */
static void keep_top_k(tg__sampler *s, int64_t k)
{
    for (int64_t i = 0; i < s->V; i++)
        s->order[i] = (ranked){s->row[i], i};
    qsort(s->order, (size_t)s->V, sizeof *s->order, by_value_descending);
    double kth = s->order[k - 1].value;
    for (int64_t i = 0; i < s->V; i++)
        if (s->row[i] < kth)
            s->row[i] = -INFINITY;
}

/* Weights w [V] (unnormalised probabilities, sum total) cut to the nucleus:
 * ranked from the most likely, a token stays while the probability of those
 * before it is below top_p, so the most likely one always stays (Hugging
 * Face's TopPLogitsWarper keeps the same set). */
static void keep_nucleus(tg__sampler *s, double total, double top_p)
{
    int64_t n = 0;
    for (int64_t i = 0; i < s->V; i++)
        if (s->row[i] > 0)
            s->order[n++] = (ranked){s->row[i], i};
    qsort(s->order, (size_t)n, sizeof *s->order, by_value_descending);
    double before = 0, limit = top_p * total;
    int64_t kept = 0;
    while (kept < n && (kept == 0 || before < limit))
        before += s->order[kept++].value;
    for (int64_t r = kept; r < n; r++)
        s->row[s->order[r].token] = 0;
}

/* A row that can be drawn from: no NaN or +inf (softmax of it is NaN, and
 * every comparison with NaN is false, so a draw would quietly be token 0 or
 * the last one) and not every logit -inf (no token is possible). The argmax
 * in *best; 0, or -1 with the position named. */
static int check_row(const tg__sampler *s, int64_t pos, int64_t *best)
{
    const double *w = s->row;
    int64_t V = s->V, top = 0;
    for (int64_t i = 0; i < V; i++) {
        if (isnan(w[i]) || w[i] == INFINITY) {
            tg_fail(TG_ERR_VALUE, "%s: the logits for position %lld hold %s at token %lld: "
                    "no token can be drawn (the model's weights or activations are not "
                    "finite)", s->fn, (long long)pos, isnan(w[i]) ? "nan" : "inf",
                    (long long)i);
            return -1;
        }
        if (w[i] > w[top])
            top = i;
    }
    if (w[top] == -INFINITY) {
        tg_fail(TG_ERR_VALUE, "%s: every logit for position %lld is -inf: no token can be "
                "drawn", s->fn, (long long)pos);
        return -1;
    }
    *best = top;
    return 0;
}

int64_t tg__sampler_pick(tg__sampler *s, const tg_sample_options *o, tg_rng *rng, int64_t pos)
{
    double *w = s->row;
    int64_t V = s->V, best;
    if (check_row(s, pos, &best) < 0)
        return -1;
    if (o->greedy)
        return best;
    for (int64_t i = 0; i < V; i++)
        w[i] /= o->temperature;
    if (o->top_k > 0 && o->top_k < V)
        keep_top_k(s, o->top_k);
    double top = w[best], total = 0;
    for (int64_t i = 0; i < V; i++)
        total += w[i] = exp(w[i] - top);
    if (o->top_p > 0 && o->top_p < 1) {
        keep_nucleus(s, total, o->top_p);
        total = 0;
        for (int64_t i = 0; i < V; i++)
            total += w[i];
    }
    double u = tg_rng_uniform01(rng) * total, cum = 0;
    int64_t last = best;
    for (int64_t i = 0; i < V; i++) {
        if (w[i] > 0)
            last = i;
        cum += w[i];
        if (u < cum)
            return i;
    }
    return last; /* rounding left u at the very top */
}
