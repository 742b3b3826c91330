/* A Transformer encoder learns to reverse digit sequences of length 3 to 10.
 * Sequences of different lengths share a batch, padded and hidden from the
 * attention by a key padding mask; it trains, saves and reloads a checkpoint.
 * Run: build/examples/encoder [--steps N] [--seed S] [--save FILE] [--eval FILE] */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tensorgrad/tensorgrad.h>

/* The task: the output at position i is the input at position len-1-i. Every
 * output needs the sequence's length and a token far away, so it cannot be
 * solved without attending across the whole (unpadded) sequence. */
enum {
    DIGITS = 10,           /* tokens 0..9 are digits */
    PAD = 10,              /* the padding token, never a target */
    VOCAB = 11,
    MIN_LEN = 3,
    MAX_LEN = 10,
    D_MODEL = 64,
    HEADS = 4,
    D_FF = 128,
    LAYERS = 2,
    BATCH = 64,
    HELD_OUT = 500,        /* sequences in the held-out set */
    HELD_OUT_SEED = 20240, /* fixed, so every run and --eval scores the same set */
    IGNORE = -100,         /* the target of a padded position: left out of the loss */
};

/* ---- data -------------------------------------------------------------------- */

/* n sequences padded to the longest of them, T. Row s holds len[s] digits, then
 * PAD; targets is the reversed row, IGNORE past len[s]; pad is true past len[s]. */
typedef struct {
    int n, T;
    int len[HELD_OUT];
    int64_t tokens[HELD_OUT * MAX_LEN];  /* [n, T] */
    int64_t targets[HELD_OUT * MAX_LEN]; /* [n, T] */
    bool pad[HELD_OUT * MAX_LEN];        /* [n, T], true = padding */
} batch;

/* One number per sequence, different for every (length, digits): the set of
 * held-out keys lets training skip those sequences. */
static int64_t sequence_key(const int64_t *digits, int len)
{
    int64_t key = len;
    for (int i = 0; i < len; i++)
        key = key * 10 + digits[i];
    return key;
}

static int compare_keys(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Draws one sequence into digits; a sequence whose key is in the sorted
 * array avoid (n_avoid keys) is drawn again. Returns its length. */
static int draw_sequence(tg_rng *rng, int64_t *digits, const int64_t *avoid, int n_avoid)
{
    for (;;) {
        int len = MIN_LEN + (int)(tg_rng_uniform01(rng) * (MAX_LEN - MIN_LEN + 1));
        for (int i = 0; i < len; i++)
            digits[i] = (int64_t)(tg_rng_uniform01(rng) * DIGITS);
        int64_t key = sequence_key(digits, len);
        if (!avoid || !bsearch(&key, avoid, (size_t)n_avoid, sizeof key, compare_keys))
            return len;
    }
}

static void make_batch(batch *b, int n, tg_rng *rng, const int64_t *avoid, int n_avoid)
{
    int64_t digits[HELD_OUT][MAX_LEN];
    b->n = n;
    b->T = 0;
    for (int s = 0; s < n; s++) {
        b->len[s] = draw_sequence(rng, digits[s], avoid, n_avoid);
        b->T = b->len[s] > b->T ? b->len[s] : b->T;
    }
    for (int s = 0; s < n; s++) {
        for (int i = 0; i < b->T; i++) {
            int len = b->len[s], at = s * b->T + i;
            b->tokens[at] = i < len ? digits[s][i] : PAD;
            b->targets[at] = i < len ? digits[s][len - 1 - i] : IGNORE;
            b->pad[at] = i >= len;
        }
    }
}

/* ---- the model ------------------------------------------------------------- */

/* token embedding + learned position embedding -> encoder -> Linear per position */
typedef struct {
    tg_embedding_module *embed;    /* [VOCAB, D_MODEL] */
    tg_embedding_module *position; /* [MAX_LEN, D_MODEL] */
    tg_encoder *encoder;           /* LAYERS pre-norm layers and a final LayerNorm */
    tg_linear *head;               /* D_MODEL -> DIGITS */
    tg_params params;              /* every parameter, by name, for AdamW and checkpoints */
} model;

static void model_free(model *m)
{
    tg_params_clear(&m->params);
    tg_linear_free(m->head);
    tg_encoder_free(m->encoder);
    tg_embedding_module_free(m->position);
    tg_embedding_module_free(m->embed);
    *m = (model){0};
}

/* 0, or -1 with the library's error recorded. rng must outlive the model. */
static int model_init(model *m, tg_rng *rng)
{
    /* Pre-norm (norm_first) layers train steadily without a long warmup; the
     * task has endless fresh data, so no dropout. */
    tg_encoder_config layer = {.d_model = D_MODEL, .nhead = HEADS, .dim_feedforward = D_FF,
                               .dropout = 0.0, .layer_norm_eps = 1e-5,
                               .activation = TG_ACT_RELU, .norm_first = true};
    *m = (model){0};
    m->embed = tg_embedding_module_new(VOCAB, D_MODEL, TG_FLOAT32, rng);
    m->position = tg_embedding_module_new(MAX_LEN, D_MODEL, TG_FLOAT32, rng);
    m->encoder = tg_encoder_new(&layer, LAYERS, true, TG_FLOAT32, rng);
    m->head = tg_linear_new(D_MODEL, DIGITS, true, TG_FLOAT32, rng);
    if (!m->embed || !m->position || !m->encoder || !m->head ||
        tg_embedding_module_params(m->embed, "embed", &m->params) < 0 ||
        tg_embedding_module_params(m->position, "position", &m->params) < 0 ||
        tg_encoder_params(m->encoder, "encoder", &m->params) < 0 ||
        tg_linear_params(m->head, "head", &m->params) < 0) {
        model_free(m);
        return -1;
    }
    return 0;
}

/* The batch's logits [n, T, DIGITS], owned by the open scope. */
static tg_tensor *model_forward(const model *m, const batch *b)
{
    int64_t shape[2] = {b->n, b->T};
    tg_tensor *tokens = tg_from_data(TG_INT64, 2, shape, b->tokens);      /* [n, T] */
    tg_tensor *pad = tg_from_data(TG_BOOL, 2, shape, b->pad);             /* [n, T] */
    tg_tensor *positions = tg_arange(TG_INT64, 0, b->T, 1);               /* [T] */
    tg_tensor *x = tg_add(tg_embedding_module_forward(m->embed, tokens),  /* [n, T, D] */
                          tg_embedding_module_forward(m->position, positions)); /* [T, D] */
    tg_tensor *h = tg_encoder_forward(m->encoder, x, NULL, pad);          /* [n, T, D] */
    return tg_linear_forward(m->head, h);                                 /* [n, T, DIGITS] */
}

/* ---- evaluation ---------------------------------------------------------- */

/* Writes the predicted digit of every position into pred [n, T]; 0 or -1. */
static int predict(const model *m, const batch *b, int64_t *pred)
{
    tg_encoder_set_train(m->encoder, false);
    bool was = tg_set_grad_enabled(false); /* no graph needed: saves time and memory */
    tg_scope_begin();
    tg_tensor *logits = model_forward(m, b), *best = NULL;
    int rc = logits ? tg_max(logits, 2, false, NULL, &best) : -1;     /* [n, T] */
    if (rc == 0)
        rc = tg_copy_to(best, TG_INT64, pred, (int64_t)b->n * b->T);
    tg_scope_end();
    tg_set_grad_enabled(was);
    tg_encoder_set_train(m->encoder, true);
    return rc;
}

/* A sequence counts as right only when every one of its positions is. */
static bool sequence_right(const batch *b, const int64_t *pred, int s)
{
    for (int i = 0; i < b->len[s]; i++)
        if (pred[s * b->T + i] != b->targets[s * b->T + i])
            return false;
    return true;
}

static int count_correct(const batch *b, const int64_t *pred)
{
    int correct = 0;
    for (int s = 0; s < b->n; s++)
        correct += sequence_right(b, pred, s);
    return correct;
}

static void print_digits(const int64_t *row, int len)
{
    for (int i = 0; i < len; i++)
        putchar('0' + (int)row[i]);
    printf("%*s", MAX_LEN - len, "");
}

static void print_examples(const batch *b, const int64_t *pred, int count)
{
    printf("held-out examples (input -> predicted / expected):\n");
    for (int s = 0; s < count && s < b->n; s++) {
        const int64_t *in = b->tokens + s * b->T, *out = pred + s * b->T;
        const int64_t *want = b->targets + s * b->T;
        printf("  ");
        print_digits(in, b->len[s]);
        printf(" -> ");
        print_digits(out, b->len[s]);
        printf(" / ");
        print_digits(want, b->len[s]);
        printf("  %s\n", sequence_right(b, pred, s) ? "ok" : "WRONG");
    }
}

/* Sequence accuracy on b (0..1); *token_acc receives the per-position one. */
static double evaluate(const model *m, const batch *b, int64_t *pred, double *token_acc)
{
    if (predict(m, b, pred) < 0)
        return -1;
    int tokens = 0, right = 0;
    for (int s = 0; s < b->n; s++)
        for (int i = 0; i < b->len[s]; i++, tokens++)
            right += pred[s * b->T + i] == b->targets[s * b->T + i];
    *token_acc = (double)right / tokens;
    return (double)count_correct(b, pred) / b->n;
}

/* ---- training ------------------------------------------------------------ */

typedef struct {
    long steps;
    unsigned long long seed;
    const char *save, *eval;
} options;

static double seconds_since(const struct timespec *start)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - start->tv_sec) + 1e-9 * (double)(now.tv_nsec - start->tv_nsec);
}

/* One AdamW step on a fresh batch; the mean cross-entropy over real
 * (unpadded) positions, or -1. */
static double train_step(const model *m, tg_optim *opt, tg_rng *rng, const int64_t *avoid)
{
    batch *b = malloc(sizeof *b);
    if (!b)
        return -1;
    make_batch(b, BATCH, rng, avoid, HELD_OUT);
    tg_scope_begin();
    int64_t flat[2] = {(int64_t)b->n * b->T, DIGITS};
    tg_tensor *logits = tg_reshape(model_forward(m, b), 2, flat);               /* [n*T, 10] */
    tg_tensor *targets = tg_from_data(TG_INT64, 1, flat, b->targets);            /* [n*T] */
    tg_tensor *loss = tg_cross_entropy(logits, targets, IGNORE);
    double value = -1;
    if (loss && tg_backward(loss, NULL) == 0 && tg_clip_grad_norm(&m->params, 1.0) >= 0 &&
        tg_optim_step(opt) == 0)
        value = tg_item(loss);
    tg_optim_zero_grad(opt);
    tg_scope_end();
    free(b);
    return value;
}

/* Trains for o->steps steps, printing the held-out accuracy as it goes.
 * avoid: the held-out keys, sorted. 0, or -1 with the error recorded. */
static int train(const model *m, const options *o, tg_rng *rng, const batch *held,
                 const int64_t *avoid, int64_t *pred)
{
    const double lr = 3e-3;
    const long warmup = o->steps < 1000 ? o->steps / 10 : 100;
    const long every = o->steps >= 10 ? o->steps / 10 : 1; /* 10 points on the curve */
    tg_optim *opt = tg_adamw_new(&m->params, lr, 0.9, 0.98, 1e-9, 0.01);
    if (!opt)
        return -1;
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    long reached = 0;
    double reached_at = 0, loss = 0, eval_time = 0;
    for (long step = 0; step < o->steps; step++) {
        tg_optim_set_lr(opt, tg_lr_warmup_cosine(step, warmup, o->steps, lr, lr / 20));
        if ((loss = train_step(m, opt, rng, avoid)) < 0)
            break;
        if ((step + 1) % every == 0 || step + 1 == o->steps) {
            struct timespec eval_start;
            clock_gettime(CLOCK_MONOTONIC, &eval_start);
            double tok, acc = evaluate(m, held, pred, &tok);
            eval_time += seconds_since(&eval_start);
            double train_time = seconds_since(&start) - eval_time;
            if (acc >= 0.95 && !reached)
                reached = step + 1, reached_at = train_time;
            printf("step %5ld  loss %.4f  held-out: sequences %5.1f%%  positions %5.1f%%  "
                   "%6.1f s\n", step + 1, loss, 100 * acc, 100 * tok, train_time);
            fflush(stdout);
        }
    }
    double total = seconds_since(&start) - eval_time;
    tg_optim_free(opt);
    if (loss < 0)
        return -1;
    printf("trained %ld steps in %.1f s (%.1f ms a step; evaluations took %.1f s more)\n",
           o->steps, total, 1000 * total / (double)o->steps, eval_time);
    if (reached)
        printf("held-out sequence accuracy first reached 95%% at step %ld, after %.1f s\n",
               reached, reached_at);
    return 0;
}

/* ---- the command line ------------------------------------------------------- */

static void usage(FILE *f, const char *prog)
{
    fprintf(f,
            "usage: %s [--steps N] [--seed S] [--save FILE] [--eval FILE] [--quick]\n"
            "  --steps N    training steps (default 600)\n"
            "  --quick      150 steps: a short run that still beats chance by far\n"
            "  --seed S     seed for the initial weights and the training data (default 1)\n"
            "  --save FILE  where to write the trained weights (default encoder.safetensors)\n"
            "  --eval FILE  load weights from FILE and evaluate them; no training\n"
            "A --save that cannot be written is refused before training.\n"
            "Exit codes: 0 done, 1 failed, 2 bad command line.\n",
            prog);
}

/* Reads a whole decimal number in [min, max]; 0, or -1 if s is not one. */
static int parse_number(const char *s, unsigned long long min, unsigned long long max,
                        unsigned long long *out)
{
    char *end;
    if (!s || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    *out = strtoull(s, &end, 10);
    return errno || *end || *out < min || *out > max ? -1 : 0;
}

/* 0, 1 for --help, or -1 after naming the bad argument. */
static int parse_options(int argc, char **argv, options *o)
{
    *o = (options){.steps = 600, .seed = 1, .save = "encoder.safetensors"};
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
        unsigned long long n;
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0)
            return 1;
        if (strcmp(arg, "--quick") == 0) {
            o->steps = 150;
            continue;
        }
        if (strcmp(arg, "--steps") == 0 && parse_number(value, 1, 10000000, &n) == 0)
            o->steps = (long)n;
        else if (strcmp(arg, "--seed") == 0 && parse_number(value, 0, UINT64_MAX, &n) == 0)
            o->seed = n;
        else if (strcmp(arg, "--save") == 0 && value && *value)
            o->save = value;
        else if (strcmp(arg, "--eval") == 0 && value && *value)
            o->eval = value;
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
    if (!o.eval && tg_path_check_writable(o.save) < 0) /* now, not after the training */
        return fprintf(stderr, "encoder: cannot write --save %s: %s\n", o.save,
                       tg_error_message()), 1;

    /* The held-out set comes from its own seed and is never trained on. */
    batch *held = malloc(sizeof *held);
    int64_t *pred = malloc(sizeof(int64_t) * HELD_OUT * MAX_LEN), avoid[HELD_OUT];
    tg_rng *held_rng = tg_rng_new(HELD_OUT_SEED), *rng = tg_rng_new(o.seed);
    if (!held || !pred || !held_rng || !rng)
        return fprintf(stderr, "encoder: out of memory\n"), 1;
    make_batch(held, HELD_OUT, held_rng, NULL, 0);
    for (int s = 0; s < HELD_OUT; s++)
        avoid[s] = sequence_key(held->tokens + s * held->T, held->len[s]);
    qsort(avoid, HELD_OUT, sizeof *avoid, compare_keys);

    model m;
    int failed = model_init(&m, rng) < 0;
    if (!failed && o.eval) {
        failed = tg_safetensors_load_into(o.eval, &m.params) < 0;
        if (!failed)
            printf("loaded %s (%lld parameters)\n", o.eval, (long long)tg_params_numel(&m.params));
    } else if (!failed) {
        printf("reversing digit sequences of length %d..%d: %d-layer encoder, d_model %d, "
               "%d heads, %lld parameters, batch %d\n", MIN_LEN, MAX_LEN, LAYERS, D_MODEL, HEADS,
               (long long)tg_params_numel(&m.params), BATCH);
        failed = train(&m, &o, rng, held, avoid, pred) < 0 ||
                 tg_safetensors_save(o.save, &m.params, 0, NULL, NULL) < 0;
        if (!failed)
            printf("saved the weights to %s\n", o.save);
    }
    double tok = 0, acc = failed ? -1 : evaluate(&m, held, pred, &tok);
    if (acc < 0) {
        fprintf(stderr, "encoder: %s\n", tg_error_message());
    } else {
        printf("held-out sequence accuracy: %.2f%% (%d/%d), positions %.2f%%\n", 100 * acc,
               count_correct(held, pred), HELD_OUT, 100 * tok);
        print_examples(held, pred, 8);
    }
    model_free(&m);
    tg_rng_free(rng);
    tg_rng_free(held_rng);
    free(pred);
    free(held);
    if (tg_live_tensors() != 0)
        fprintf(stderr, "encoder: %lld tensors still alive\n", (long long)tg_live_tensors());
    return acc < 0 || tg_live_tensors() != 0 ? 1 : 0;
}
