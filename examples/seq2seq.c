/* An encoder-decoder Transformer (tg_transformer) learns to translate numbers
 * between words and digits, both ways in one model: "three hundred and
 * seven" <-> "307", for 0..999999, then decodes held-out numbers greedily
 * and with beam search over the decoder's cache.
 * Run: build/examples/seq2seq [--steps N] [--seed S] [--out FILE] [--load FILE] [--beam K] */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tensorgrad/tensorgrad.h>

/* ---- the vocabulary: words, digits and four markers --------------------------- */

static const char *const WORDS[] = {
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
    "nineteen", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety",
    "hundred", "thousand", "and"};
enum {
    N_WORDS = sizeof WORDS / sizeof WORDS[0], /* tokens 0..30: WORDS[i] */
    W_TWENTY = 20, W_HUNDRED = 28, W_THOUSAND = 29, W_AND = 30,
    DIGIT0 = N_WORDS,      /* tokens 31..40: the digits 0..9 */
    TO_DIGITS = DIGIT0 + 10, /* the decoder's first token: which way to translate */
    TO_WORDS,
    EOS,                   /* ends every target */
    PAD,                   /* fills batches; never a target */
    VOCAB,
    MAX_SRC = 12,          /* the longest spelling: 11 words */
    MAX_TGT = 13,          /* direction token + 11 words + EOS */
    IGNORE = -100,         /* the target of a padded position */
};

/* Appends the words of n (0 <= n < 1000000) to out; the new length. British
 * usage: "and" before the last two digits after hundreds or thousands. */
static int spell(int n, int64_t *out, int len)
{
    if (n >= 1000) {
        len = spell(n / 1000, out, len);
        out[len++] = W_THOUSAND;
        if (n % 1000 == 0)
            return len;
        if (n % 1000 < 100)
            out[len++] = W_AND;
        return spell(n % 1000, out, len);
    }
    if (n >= 100) {
        out[len++] = n / 100;
        out[len++] = W_HUNDRED;
        if (n % 100 == 0)
            return len;
        out[len++] = W_AND;
        n %= 100;
    }
    if (n < 20) {
        out[len++] = n;
    } else {
        out[len++] = W_TWENTY + n / 10 - 2;
        if (n % 10)
            out[len++] = n % 10;
    }
    return len;
}

static int digits_of(int n, int64_t *out)
{
    char buf[8];
    int len = snprintf(buf, sizeof buf, "%d", n);
    for (int i = 0; i < len; i++)
        out[i] = DIGIT0 + (buf[i] - '0');
    return len;
}

/* The source and target tokens of n translated one way; the target without
 * the direction token and EOS. */
typedef struct {
    int n_src, n_tgt;
    int64_t src[MAX_SRC], tgt[MAX_TGT];
    bool to_words;
} pair;

static pair make_pair(int n, bool to_words)
{
    pair p = {.to_words = to_words};
    if (to_words) {
        p.n_src = digits_of(n, p.src);
        p.n_tgt = spell(n, p.tgt, 0);
    } else {
        p.n_src = spell(n, p.src, 0);
        p.n_tgt = digits_of(n, p.tgt);
    }
    return p;
}

static void print_tokens(const int64_t *t, int n)
{
    for (int i = 0; i < n; i++) {
        if (t[i] < N_WORDS)
            printf("%s%s", i ? " " : "", WORDS[t[i]]);
        else if (t[i] < DIGIT0 + 10)
            printf("%c", (char)('0' + t[i] - DIGIT0));
    }
}

/* ---- data: numbers with 1 to 6 digits, equally often; the held-out values never train */

enum { HELD_OUT = 300, HELD_OUT_SEED = 9001, BATCH = 64 };

/* A number of min_digits..6 digits, each count equally likely. */
static int draw_number(tg_rng *rng, int min_digits)
{
    static const int lo[6] = {0, 10, 100, 1000, 10000, 100000};
    int k = min_digits - 1 + (int)(tg_rng_uniform01(rng) * (7 - min_digits));
    return lo[k] + (int)(tg_rng_uniform01(rng) * (double)(lo[k] * 9 + (k == 0 ? 10 : 0)));
}

static int compare_ints(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* HELD_OUT distinct numbers of 3 to 6 digits from their own seed, sorted.
 * Shorter ones stay in training: every word must be seen alone somewhere
 * ("zero" only is zero), and there are too few of them to spare. */
static void make_held_out(int *held)
{
    tg_rng *rng = tg_rng_new(HELD_OUT_SEED);
    for (int i = 0; i < HELD_OUT;) {
        int n = draw_number(rng, 3), dup = 0;
        for (int j = 0; j < i; j++)
            dup |= held[j] == n;
        if (!dup)
            held[i++] = n;
    }
    tg_rng_free(rng);
    qsort(held, HELD_OUT, sizeof *held, compare_ints);
}

/* A batch of pairs padded to its longest source and target:
 *   src [n, S], src_pad [n, S];  tgt_in = direction, y... [n, T];
 *   tgt_out = y..., EOS [n, T] (IGNORE past it);  tgt_pad [n, T]. */
typedef struct {
    int n, S, T;
    int64_t src[BATCH * MAX_SRC], tgt_in[BATCH * MAX_TGT], tgt_out[BATCH * MAX_TGT];
    bool src_pad[BATCH * MAX_SRC], tgt_pad[BATCH * MAX_TGT];
} batch;

static void fill_batch(batch *b, const pair *p, int n)
{
    b->n = n, b->S = 0, b->T = 0;
    for (int i = 0; i < n; i++) {
        b->S = p[i].n_src > b->S ? p[i].n_src : b->S;
        b->T = p[i].n_tgt + 1 > b->T ? p[i].n_tgt + 1 : b->T;
    }
    for (int i = 0; i < n; i++) {
        for (int s = 0; s < b->S; s++) {
            b->src[i * b->S + s] = s < p[i].n_src ? p[i].src[s] : PAD;
            b->src_pad[i * b->S + s] = s >= p[i].n_src;
        }
        for (int t = 0; t < b->T; t++) {
            int len = p[i].n_tgt, at = i * b->T + t;
            b->tgt_in[at] = t == 0 ? (p[i].to_words ? TO_WORDS : TO_DIGITS)
                                   : t <= len ? p[i].tgt[t - 1] : PAD;
            b->tgt_out[at] = t < len ? p[i].tgt[t] : t == len ? EOS : IGNORE;
            b->tgt_pad[at] = t > len;
        }
    }
}

static void training_batch(batch *b, tg_rng *rng, const int *held)
{
    pair p[BATCH];
    for (int i = 0; i < BATCH; i++) {
        int n;
        do
            n = draw_number(rng, 1);
        while (bsearch(&n, held, HELD_OUT, sizeof n, compare_ints));
        p[i] = make_pair(n, i % 2 == 1);
    }
    fill_batch(b, p, BATCH);
}

/* ---- the model: shared embedding + sinusoidal positions, tg_transformer, a Linear head */

enum { D_MODEL = 64, HEADS = 4, D_FF = 256, LAYERS = 2 };

typedef struct {
    tg_embedding_module *embed; /* [VOCAB, D_MODEL], source and target share it */
    tg_tensor *positions;       /* [MAX_TGT, D_MODEL], sinusoidal, constant */
    tg_transformer *tr;         /* LAYERS + LAYERS pre-norm layers, both final norms */
    tg_linear *head;            /* D_MODEL -> VOCAB */
    tg_params params;
} model;

static void model_free(model *m)
{
    tg_params_clear(&m->params);
    tg_linear_free(m->head);
    tg_transformer_free(m->tr);
    tg_release(m->positions);
    tg_embedding_module_free(m->embed);
    *m = (model){0};
}

/* PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(the same). */
static tg_tensor *sinusoids(void)
{
    float pe[MAX_TGT * D_MODEL];
    for (int p = 0; p < MAX_TGT; p++)
        for (int i = 0; i < D_MODEL; i += 2) {
            double angle = p / pow(10000.0, (double)i / D_MODEL);
            pe[p * D_MODEL + i] = (float)sin(angle);
            pe[p * D_MODEL + i + 1] = (float)cos(angle);
        }
    return tg_from_data(TG_FLOAT32, 2, (int64_t[]){MAX_TGT, D_MODEL}, pe);
}

static int model_init(model *m, tg_rng *rng)
{
    tg_transformer_config c = {.d_model = D_MODEL, .nhead = HEADS, .dim_feedforward = D_FF,
                               .num_encoder_layers = LAYERS, .num_decoder_layers = LAYERS,
                               .dropout = 0.0, .layer_norm_eps = 1e-5,
                               .activation = TG_ACT_RELU, .norm_first = true};
    *m = (model){0};
    m->embed = tg_embedding_module_new(VOCAB, D_MODEL, TG_FLOAT32, rng);
    m->positions = sinusoids();
    m->tr = tg_transformer_new(&c, TG_FLOAT32, rng);
    m->head = tg_linear_new(D_MODEL, VOCAB, true, TG_FLOAT32, rng);
    if (!m->embed || !m->positions || !m->tr || !m->head ||
        tg_embedding_module_params(m->embed, "embed", &m->params) < 0 ||
        tg_transformer_params(m->tr, "transformer", &m->params) < 0 ||
        tg_linear_params(m->head, "head", &m->params) < 0) {
        model_free(m);
        return -1;
    }
    return 0;
}

/* tokens [n, L] from position pos0 -> embeddings [n, L, D_MODEL], in the open scope. */
static tg_tensor *embed(const model *m, const int64_t *tokens, int n, int L, int pos0)
{
    tg_tensor *idx = tg_from_data(TG_INT64, 2, (int64_t[]){n, L}, tokens);
    return tg_add(tg_embedding_module_forward(m->embed, idx),
                  tg_narrow(m->positions, 0, pos0, L)); /* [L, D] broadcasts */
}

/* The encoder's output for the batch's sources: memory [n, S, D_MODEL]. */
static tg_tensor *encode(const model *m, const batch *b, tg_tensor **src_pad)
{
    *src_pad = tg_from_data(TG_BOOL, 2, (int64_t[]){b->n, b->S}, b->src_pad);
    return tg_encoder_forward(m->tr->encoder, embed(m, b->src, b->n, b->S, 0), NULL, *src_pad);
}

/* Teacher forcing: the mean cross-entropy of every real target position. */
static tg_tensor *model_loss(const model *m, const batch *b)
{
    int64_t st[2] = {b->n, b->T}, flat[2] = {(int64_t)b->n * b->T, VOCAB};
    tg_tensor *src_pad = tg_from_data(TG_BOOL, 2, (int64_t[]){b->n, b->S}, b->src_pad);
    tg_tensor *tgt_pad = tg_from_data(TG_BOOL, 2, st, b->tgt_pad);
    tg_transformer_masks masks = {
        .src_key_padding_mask = src_pad,
        .tgt = {.tgt_key_padding_mask = tgt_pad, .memory_key_padding_mask = src_pad,
                .tgt_is_causal = true}};
    tg_tensor *h = tg_transformer_forward(m->tr, embed(m, b->src, b->n, b->S, 0),
                                          embed(m, b->tgt_in, b->n, b->T, 0), &masks);
    tg_tensor *logits = tg_reshape(tg_linear_forward(m->head, h), 2, flat);
    return tg_cross_entropy(logits, tg_from_data(TG_INT64, 1, flat, b->tgt_out), IGNORE);
}

/* ---- decoding -------------------------------------------------------------------- */

/* Log-probabilities of the next token after the cache's positions, given the
 * tokens last[n] at position pos: [n, VOCAB] into lp. 0 or -1. */
static int next_log_probs(const model *m, tg_decoder_cache *c, const int64_t *last, int n,
                          int pos, double *lp)
{
    tg_scope_begin();
    tg_tensor *y = tg_decoder_forward_cached(m->tr->decoder, c, embed(m, last, n, 1, pos));
    tg_tensor *p = tg_log_softmax(tg_linear_forward(m->head, y), 2); /* [n, 1, VOCAB] */
    int rc = p ? tg_copy_to(p, TG_FLOAT64, lp, (int64_t)n * VOCAB) : -1;
    tg_scope_end();
    return rc;
}

static int argmax(const double *row)
{
    int best = 0;
    for (int v = 1; v < VOCAB; v++)
        best = row[v] > row[best] ? v : best;
    return best;
}

/* Greedy decoding of a batch (at most BATCH rows) at once; out[i] gets row
 * i's tokens (without EOS), out_len[i] their count. 0 or -1. */
static int greedy(const model *m, const batch *b, const pair *p, int64_t (*out)[MAX_TGT],
                  int *out_len)
{
    tg_decoder_cache *c = tg_decoder_cache_new(m->tr->decoder, b->n, MAX_TGT);
    double *lp = malloc(sizeof(double) * (size_t)b->n * VOCAB);
    int64_t last[BATCH];
    bool done[BATCH] = {0};
    int rc = c && lp ? 0 : -1;
    tg_scope_begin();
    tg_tensor *pad, *memory = rc == 0 ? encode(m, b, &pad) : NULL;
    rc = memory && tg_decoder_cache_set_memory(c, memory, pad) == 0 ? 0 : -1;
    tg_scope_end();
    for (int i = 0; i < b->n; i++)
        last[i] = p[i].to_words ? TO_WORDS : TO_DIGITS, out_len[i] = 0;
    for (int pos = 0; rc == 0 && pos < MAX_TGT - 1; pos++) {
        if ((rc = next_log_probs(m, c, last, b->n, pos, lp)) < 0)
            break;
        int active = 0;
        for (int i = 0; i < b->n; i++) {
            last[i] = argmax(lp + (size_t)i * VOCAB);
            done[i] = done[i] || last[i] == EOS;
            if (!done[i])
                out[i][out_len[i]++] = last[i], active++;
        }
        if (!active)
            break;
    }
    tg_decoder_cache_free(c);
    free(lp);
    return rc;
}

/* A hypothesis of beam search: its tokens after the direction token. */
typedef struct {
    int len;
    int64_t tok[MAX_TGT];
    double logp; /* the sum of its tokens' log-probabilities */
} hypothesis;

/* Length-normalised score of a finished hypothesis (its EOS counted). */
static double normalised(const hypothesis *h) { return h->logp / (h->len + 1); }

typedef struct {
    double logp;
    int beam, token;
} candidate;

static int by_logp(const void *a, const void *b)
{
    double x = ((const candidate *)a)->logp, y = ((const candidate *)b)->logp;
    return (x < y) - (x > y);
}

/* Beam search's state: live[0..n_live) are the cache's rows in order; best
 * is the finished hypothesis of the highest normalised score so far. */
typedef struct {
    int k, n_live;
    hypothesis live[VOCAB], next[VOCAB];
    int64_t parents[VOCAB], last[VOCAB];
    candidate cand[VOCAB * VOCAB];
    hypothesis best;
    bool any_done;
} beam_state;

/* One step: of all one-token extensions of the live hypotheses, best first,
 * those ending with EOS are finished (the best kept), the first k others
 * become the live ones; parents[] says which row each came from. */
static void beam_step(beam_state *st, const double *lp)
{
    int n = 0, total = st->n_live * VOCAB;
    for (int i = 0; i < st->n_live; i++)
        for (int v = 0; v < VOCAB; v++)
            st->cand[i * VOCAB + v] = (candidate){st->live[i].logp + lp[i * VOCAB + v], i, v};
    qsort(st->cand, (size_t)total, sizeof *st->cand, by_logp);
    for (int j = 0; j < total && n < st->k; j++) {
        const candidate *c = &st->cand[j];
        hypothesis h = st->live[c->beam];
        h.logp = c->logp;
        if (c->token == EOS) {
            if (!st->any_done || normalised(&h) > normalised(&st->best))
                st->best = h, st->any_done = true;
        } else if (c->token < TO_DIGITS && h.len < MAX_TGT - 2) { /* no markers inside */
            h.tok[h.len++] = c->token;
            st->parents[n] = c->beam;
            st->last[n] = c->token;
            st->next[n++] = h;
        }
    }
    memcpy(st->live, st->next, sizeof *st->next * (size_t)n);
    st->n_live = n;
}

/* Beam search (k beams, length-normalised) for one source until no live
 * hypothesis remains; the best finished one (or the best live one, if none
 * finished) into best. 0 or -1. */
static int beam_search(const model *m, const pair *p, int k, hypothesis *best)
{
    batch *b = malloc(sizeof *b);
    beam_state *st = calloc(1, sizeof *st);
    tg_decoder_cache *c = tg_decoder_cache_new(m->tr->decoder, 1, MAX_TGT);
    double *lp = malloc(sizeof(double) * (size_t)k * VOCAB);
    int rc = b && st && c && lp ? 0 : -1;
    if (rc == 0) {
        fill_batch(b, p, 1);
        tg_scope_begin();
        tg_tensor *pad, *memory = encode(m, b, &pad);
        rc = memory && tg_decoder_cache_set_memory(c, memory, pad) == 0 ? 0 : -1;
        tg_scope_end();
        st->k = k, st->n_live = 1;
        st->last[0] = p->to_words ? TO_WORDS : TO_DIGITS;
    }
    for (int pos = 0; rc == 0 && st->n_live > 0 && pos < MAX_TGT - 1; pos++) {
        if ((rc = next_log_probs(m, c, st->last, st->n_live, pos, lp)) < 0)
            break;
        beam_step(st, lp);
        if (st->n_live > 0 && tg_decoder_cache_select(c, st->parents, st->n_live) < 0)
            rc = -1;
    }
    if (rc == 0)
        *best = st->any_done ? st->best : st->live[0];
    tg_decoder_cache_free(c);
    free(lp);
    free(st);
    free(b);
    return rc;
}

/* ---- evaluation ------------------------------------------------------------------- */

static bool same(const int64_t *a, int na, const int64_t *b, int nb)
{
    return na == nb && memcmp(a, b, sizeof *a * (size_t)na) == 0;
}

static void print_pair(const pair *p, const int64_t *got, int n_got, bool right)
{
    printf("  ");
    print_tokens(p->src, p->n_src);
    printf("  ->  ");
    print_tokens(got, n_got);
    if (!right) {
        printf("  WRONG, not ");
        print_tokens(p->tgt, p->n_tgt);
    }
    printf("\n");
}

/* Exact-match counts of greedy and beam decoding over the held-out numbers,
 * both directions; beam k < 2 skips the beam search. Prints a few
 * translations. 0 or -1. */
static int evaluate(const model *m, const int *held, int k, int *greedy_right, int *beam_right)
{
    tg_transformer_set_train(m->tr, false);
    bool was = tg_set_grad_enabled(false);
    pair p[BATCH];
    batch *b = malloc(sizeof *b);
    int64_t (*out)[MAX_TGT] = malloc(sizeof *out * BATCH);
    int out_len[BATCH], rc = b && out ? 0 : -1, shown = 0, wrong = 0;
    *greedy_right = *beam_right = 0;
    for (int start = 0; rc == 0 && start < 2 * HELD_OUT; start += BATCH) {
        int n = 2 * HELD_OUT - start < BATCH ? 2 * HELD_OUT - start : BATCH;
        for (int i = 0; i < n; i++) /* to digits, then to words */
            p[i] = make_pair(held[(start + i) % HELD_OUT], start + i >= HELD_OUT);
        fill_batch(b, p, n);
        if ((rc = greedy(m, b, p, out, out_len)) < 0)
            break;
        for (int i = 0; i < n; i++) {
            hypothesis best = {0};
            bool g = same(out[i], out_len[i], p[i].tgt, p[i].n_tgt), bm = g;
            if (k >= 2 && (rc = beam_search(m, &p[i], k, &best)) < 0)
                break;
            if (k >= 2)
                bm = same(best.tok, best.len, p[i].tgt, p[i].n_tgt);
            *greedy_right += g, *beam_right += bm;
            /* a few of each direction, and the first mistakes */
            if (((start + i) % (HELD_OUT / 3) == 0 && shown++ < 6) || (!g && wrong++ < 5))
                print_pair(&p[i], out[i], out_len[i], g);
        }
    }
    tg_set_grad_enabled(was);
    tg_transformer_set_train(m->tr, true);
    free(out);
    free(b);
    return rc;
}

/* ---- training ----------------------------------------------------------------------- */

typedef struct {
    long steps;
    int beam;
    unsigned long long seed;
    const char *out, *load;
} options;

static double seconds_since(const struct timespec *start)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - start->tv_sec) + 1e-9 * (double)(now.tv_nsec - start->tv_nsec);
}

/* One AdamW step on a fresh batch: the loss, or -1. */
static double train_step(const model *m, tg_optim *opt, tg_rng *rng, const int *held, batch *b)
{
    training_batch(b, rng, held);
    tg_scope_begin();
    tg_tensor *loss = model_loss(m, b);
    double value = -1;
    if (loss && tg_backward(loss, NULL) == 0 && tg_clip_grad_norm(&m->params, 1.0) >= 0 &&
        tg_optim_step(opt) == 0)
        value = tg_item(loss);
    tg_optim_zero_grad(opt);
    tg_scope_end();
    return value;
}

static int train(const model *m, const options *o, tg_rng *rng, const int *held)
{
    const double lr = 2e-3;
    const long warmup = o->steps < 1000 ? o->steps / 10 : 100, every = o->steps / 10 + 1;
    tg_optim *opt = tg_adamw_new(&m->params, lr, 0.9, 0.98, 1e-9, 0.01);
    batch *b = malloc(sizeof *b);
    if (!opt || !b) {
        tg_optim_free(opt);
        free(b);
        return -1;
    }
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    double loss = 0;
    for (long step = 0; step < o->steps && loss >= 0; step++) {
        tg_optim_set_lr(opt, tg_lr_warmup_cosine(step, warmup, o->steps, lr, lr / 20));
        loss = train_step(m, opt, rng, held, b);
        if ((step + 1) % every == 0 || step + 1 == o->steps)
            printf("step %5ld/%ld  loss %.4f  %6.1f s\n", step + 1, o->steps, loss,
                   seconds_since(&start));
        fflush(stdout);
    }
    if (loss >= 0)
        printf("trained %ld steps in %.1f s\n", o->steps, seconds_since(&start));
    tg_optim_free(opt);
    free(b);
    return loss < 0 ? -1 : 0;
}

/* ---- the command line ---------------------------------------------------------------- */

static void usage(FILE *f, const char *prog)
{
    fprintf(f,
            "usage: %s [--steps N] [--seed S] [--out FILE] [--load FILE] [--beam K]\n"
            "  --steps N   training steps (default 2000)\n"
            "  --seed S    seed for the initial weights and the training data (default 1)\n"
            "  --out FILE  where to save the trained model (default seq2seq.safetensors)\n"
            "  --load FILE evaluate the model saved in FILE; no training\n"
            "  --beam K    beams of the beam search, 1..%d (default 4; 1 skips it)\n"
            "An --out that cannot be written is refused before training.\n"
            "Exit codes: 0 done, 1 failed, 2 bad command line.\n",
            prog, VOCAB);
}

static int parse_number(const char *s, unsigned long long max, unsigned long long *out)
{
    char *end;
    if (!s || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    *out = strtoull(s, &end, 10);
    return errno || *end || *out > max ? -1 : 0;
}

/* 0, 1 for --help, or -1 after naming the bad argument. */
static int parse_options(int argc, char **argv, options *o)
{
    *o = (options){.steps = 2000, .beam = 4, .seed = 1, .out = "seq2seq.safetensors"};
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
        unsigned long long n;
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0)
            return 1;
        if (strcmp(arg, "--beam") == 0 && parse_number(value, UINT64_MAX, &n) == 0) {
            if (n < 1 || n > VOCAB) {
                fprintf(stderr, "%s: --beam %llu is outside 1..%d (the vocabulary's size)\n",
                        argv[0], n, VOCAB);
                return -1;
            }
            o->beam = (int)n;
        } else if (strcmp(arg, "--steps") == 0 && parse_number(value, 10000000, &n) == 0 && n)
            o->steps = (long)n;
        else if (strcmp(arg, "--seed") == 0 && parse_number(value, UINT64_MAX, &n) == 0)
            o->seed = n;
        else if (strcmp(arg, "--out") == 0 && value && *value)
            o->out = value;
        else if (strcmp(arg, "--load") == 0 && value && *value)
            o->load = value;
        else {
            fprintf(stderr, "%s: bad argument '%s'%s%s\n", argv[0], arg, value ? " " : "",
                    value ? value : "");
            return -1;
        }
        i++;
    }
    return 0;
}

int main(int argc, char **argv)
{
    options o;
    int parsed = parse_options(argc, argv, &o);
    if (parsed != 0) {
        usage(parsed > 0 ? stdout : stderr, argv[0]);
        return parsed > 0 ? 0 : 2;
    }
    if (!o.load && tg_path_check_writable(o.out) < 0) /* now, not after the training */
        return fprintf(stderr, "seq2seq: cannot write --out %s: %s\n", o.out,
                       tg_error_message()), 1;
    int held[HELD_OUT];
    make_held_out(held);
    tg_rng *rng = tg_rng_new(o.seed);
    model m = {0};
    int failed = !rng || model_init(&m, rng) < 0;
    if (!failed && o.load) {
        failed = tg_safetensors_load_into(o.load, &m.params) < 0 ||
                 tg_params_check_finite(&m.params) < 0; /* NaN would score 0%, not fail */
        if (!failed)
            printf("loaded %s\n", o.load);
    } else if (!failed) {
        printf("numbers 0..999999, words <-> digits: %d+%d layers, d_model %d, %d heads, "
               "%lld parameters, batch %d\n", LAYERS, LAYERS, D_MODEL, HEADS,
               (long long)tg_params_numel(&m.params), BATCH);
        failed = train(&m, &o, rng, held) < 0 ||
                 tg_safetensors_save(o.out, &m.params, 0, NULL, NULL) < 0;
        if (!failed)
            printf("saved %s\n", o.out);
    }
    int g = 0, bm = 0;
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    if (!failed) {
        printf("held-out numbers (never trained on), greedy:\n");
        failed = evaluate(&m, held, o.beam, &g, &bm) < 0;
    }
    if (failed) {
        fprintf(stderr, "seq2seq: %s\n", tg_error_message());
    } else {
        printf("exact match on %d held-out translations: greedy %.1f%%", 2 * HELD_OUT,
               100.0 * g / (2 * HELD_OUT));
        if (o.beam >= 2)
            printf(", beam %d %.1f%%", o.beam, 100.0 * bm / (2 * HELD_OUT));
        printf("  (%.1f s)\n", seconds_since(&start));
    }
    if (m.tr)
        model_free(&m);
    tg_rng_free(rng);
    if (tg_live_tensors() != 0)
        fprintf(stderr, "seq2seq: %lld tensors still alive (leaked)\n",
                (long long)tg_live_tensors());
    return failed || tg_live_tensors() != 0 ? 1 : 0;
}
