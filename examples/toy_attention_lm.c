/* A toy language model with one attention head, trained on "ababab... abc
 * abc xyzxyz", then asked where it looks: the weights on "abababab" as a table,
 * a sentence per row, a summary, and an SVG heatmap.
 * Run: build/examples/toy_attention_lm [--steps N] [--seed S] [--svg FILE] */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tensorgrad/tensorgrad.h>

enum {
    D = 32,      /* embedding width */
    CTX = 16,    /* characters per training window */
    BATCH = 32,  /* windows per step */
    PROBE = 8,   /* length of the probe string "abababab" */
    MAX_VOCAB = 128,
};
static const char *const TEXT_UNIT = "ababababababab abc abc abc xyzxyzxyz";
static const int TEXT_REPEAT = 100;
static const char *const PROBE_TEXT = "abababab";

/* ---- command line ------------------------------------------------------- */

typedef struct {
    long steps;
    uint64_t seed;
    const char *svg_path;
} options;

static void usage(FILE *f, const char *prog)
{
    fprintf(f,
            "usage: %s [--steps N] [--seed S] [--svg FILE]\n"
            "  --steps N   training steps, 1 or more (default 800)\n"
            "  --seed S    seed for the initial weights and the batches (default 0)\n"
            "  --svg FILE  where to write the attention heatmap "
            "(default attention_heatmap.svg); one that cannot be written\n"
            "              is refused before training\n"
            "Exit codes: 0 done, 1 failed, 2 bad command line.\n",
            prog);
}

/* Whole non-negative number, nothing trailing; false otherwise. */
static bool parse_count(const char *s, unsigned long long *out)
{
    char *end = NULL;
    if (!s || *s < '0' || *s > '9')
        return false;
    errno = 0;
    *out = strtoull(s, &end, 10);
    return errno == 0 && *end == '\0';
}

/* 0 on success, 1 for --help, -1 (after a message) on a bad argument. */
static int parse_options(int argc, char **argv, options *o)
{
    *o = (options){.steps = 800, .seed = 0, .svg_path = "attention_heatmap.svg"};
    for (int i = 1; i < argc; i += 2) { /* every option takes a value */
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        unsigned long long n = 0;
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            return 1;
        if (!strcmp(a, "--steps")) {
            if (!parse_count(val, &n) || n < 1 || n > 10000000) {
                fprintf(stderr, "%s: --steps wants a whole number from 1 to 10000000, got '%s'\n",
                        argv[0], val ? val : "(nothing)");
                return -1;
            }
            o->steps = (long)n;
        } else if (!strcmp(a, "--seed")) {
            if (!parse_count(val, &n)) {
                fprintf(stderr, "%s: --seed wants a whole number >= 0, got '%s'\n", argv[0],
                        val ? val : "(nothing)");
                return -1;
            }
            o->seed = n;
        } else if (!strcmp(a, "--svg")) {
            if (!val || !*val) {
                fprintf(stderr, "%s: --svg wants a file name\n", argv[0]);
                return -1;
            }
            o->svg_path = val;
        } else {
            fprintf(stderr, "%s: unknown option '%s'\n", argv[0], a);
            return -1;
        }
    }
    return 0;
}

/* ---- the data: characters to token ids ------------------------------------ */

typedef struct {
    int vocab;                /* distinct characters, sorted */
    char chars[MAX_VOCAB];    /* id -> character */
    int64_t *ids;             /* the whole text as ids [len] */
    int64_t len;
} corpus;

static int corpus_build(corpus *c)
{
    int64_t unit = (int64_t)strlen(TEXT_UNIT);
    bool seen[MAX_VOCAB] = {false};
    int id_of[MAX_VOCAB] = {0};
    for (int64_t i = 0; i < unit; i++)
        seen[(unsigned char)TEXT_UNIT[i] & 127] = true;
    c->vocab = 0;
    for (int ch = 0; ch < MAX_VOCAB; ch++) /* ascending: the vocabulary comes out sorted */
        if (seen[ch]) {
            id_of[ch] = c->vocab;
            c->chars[c->vocab++] = (char)ch;
        }
    c->len = unit * TEXT_REPEAT;
    c->ids = malloc((size_t)c->len * sizeof *c->ids);
    if (!c->ids)
        return -1;
    for (int64_t i = 0; i < c->len; i++)
        c->ids[i] = id_of[(unsigned char)TEXT_UNIT[i % unit] & 127];
    return 0;
}

static int char_id(const corpus *c, char ch)
{
    for (int i = 0; i < c->vocab; i++)
        if (c->chars[i] == ch)
            return i;
    return -1;
}

/* BATCH random windows: x [BATCH, CTX] and the next characters y [BATCH, CTX]. */
static void corpus_batch(const corpus *c, tg_rng *rng, int64_t *x, int64_t *y)
{
    int64_t starts = c->len - CTX - 1; /* as torch.randint(0, len - CTX - 1) */
    for (int b = 0; b < BATCH; b++) {
        int64_t s = (int64_t)(tg_rng_uniform01(rng) * (double)starts);
        memcpy(x + b * CTX, c->ids + s, CTX * sizeof *x);
        memcpy(y + b * CTX, c->ids + s + 1, CTX * sizeof *y);
    }
}

/* ---- the model ------------------------------------------------------------ */

typedef struct {
    tg_embedding_module *tok;     /* [vocab, D] */
    tg_embedding_module *pos;     /* [CTX, D] learned positions */
    tg_linear *wq, *wk, *wv, *wo; /* [D, D] each, no bias */
    tg_linear *head;              /* [vocab, D] + bias [vocab] */
} toy_model;

static void toy_free(toy_model *m)
{
    tg_embedding_module_free(m->tok);
    tg_embedding_module_free(m->pos);
    tg_linear_free(m->wq);
    tg_linear_free(m->wk);
    tg_linear_free(m->wv);
    tg_linear_free(m->wo);
    tg_linear_free(m->head);
}

/* Draws the weights in PyTorch's order (tok, pos, W_q, W_k, W_v, W_o, head),
 * with PyTorch's default initialisations, and lists them for the optimizer. */
static int toy_init(toy_model *m, int vocab, tg_rng *rng, tg_params *ps)
{
    m->tok = tg_embedding_module_new(vocab, D, TG_FLOAT32, rng);
    m->pos = tg_embedding_module_new(CTX, D, TG_FLOAT32, rng);
    m->wq = tg_linear_new(D, D, false, TG_FLOAT32, rng);
    m->wk = tg_linear_new(D, D, false, TG_FLOAT32, rng);
    m->wv = tg_linear_new(D, D, false, TG_FLOAT32, rng);
    m->wo = tg_linear_new(D, D, false, TG_FLOAT32, rng);
    m->head = tg_linear_new(D, vocab, true, TG_FLOAT32, rng);
    if (tg_embedding_module_params(m->tok, "tok", ps) < 0 ||
        tg_embedding_module_params(m->pos, "pos", ps) < 0 ||
        tg_linear_params(m->wq, "attn.W_q", ps) < 0 ||
        tg_linear_params(m->wk, "attn.W_k", ps) < 0 ||
        tg_linear_params(m->wv, "attn.W_v", ps) < 0 ||
        tg_linear_params(m->wo, "attn.W_o", ps) < 0 || tg_linear_params(m->head, "head", ps) < 0)
        return -1;
    return 0;
}

/* idx int64 [B, T] (T <= CTX) -> logits [B, T, vocab]; *weights (if asked)
 * gets the attention weights [B, T, T]. Call inside a scope: the scope owns
 * every tensor made here, the results included. */
static tg_tensor *toy_forward(const toy_model *m, const tg_tensor *idx, tg_tensor **weights)
{
    int64_t t = tg_size(idx, 1);
    tg_tensor *positions = tg_arange(TG_INT64, 0, (double)t, 1);                 /* [T] */
    tg_tensor *h = tg_add(tg_embedding_module_forward(m->tok, idx),              /* [B,T,D] */
                          tg_embedding_module_forward(m->pos, positions));       /* + [T,D] */
    tg_tensor *q = tg_linear_forward(m->wq, h);                                  /* [B,T,D] */
    tg_tensor *k = tg_linear_forward(m->wk, h);                                  /* [B,T,D] */
    tg_tensor *v = tg_linear_forward(m->wv, h);                                  /* [B,T,D] */
    tg_tensor *scores = tg_matmul(q, tg_transpose(k, -2, -1));                   /* [B,T,T] */
    scores = tg_mul_scalar(scores, 1.0 / sqrt((double)D));
    /* Query i may look at keys 0..i only: the future becomes -inf, so 0 after softmax. */
    scores = tg_masked_fill(scores, tg_causal_mask(t), -INFINITY);
    tg_tensor *w = tg_softmax(scores, -1);                                       /* [B,T,T] */
    tg_tensor *mixed = tg_linear_forward(m->wo, tg_matmul(w, v));                /* [B,T,D] */
    if (weights)
        *weights = w;
    return tg_linear_forward(m->head, mixed);                                    /* [B,T,V] */
}

/* ---- training ------------------------------------------------------------- */

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One step: forward, cross-entropy, backward, Adam. The loss, or NAN on error. */
static double train_step(const toy_model *m, tg_optim *opt, const int64_t *x, const int64_t *y,
                         int vocab)
{
    tg_scope_begin();
    tg_tensor *xt = tg_from_data(TG_INT64, 2, (int64_t[]){BATCH, CTX}, x);
    tg_tensor *yt = tg_from_data(TG_INT64, 1, (int64_t[]){BATCH * CTX}, y);
    tg_tensor *logits = toy_forward(m, xt, NULL);                              /* [B,T,V] */
    logits = tg_reshape(logits, 2, (int64_t[]){BATCH * CTX, vocab});          /* [B*T,V] */
    tg_tensor *loss = tg_cross_entropy(logits, yt, -100);
    double value = NAN;
    if (loss && tg_backward(loss, NULL) == 0 && tg_optim_step(opt) == 0)
        value = tg_item(loss);
    tg_optim_zero_grad(opt);
    tg_scope_end();
    return value;
}

/* Trains for `steps` steps, printing the loss every 100 steps and at the end.
 * Returns the last step's loss (NAN on error) and the time in *seconds. */
static double train(const toy_model *m, tg_optim *opt, const corpus *c, tg_rng *rng, long steps,
                    double *seconds)
{
    int64_t x[BATCH * CTX], y[BATCH * CTX];
    double loss = NAN, window_sum = 0;
    long window = 0;
    double t0 = seconds_now();
    for (long step = 1; step <= steps; step++) {
        corpus_batch(c, rng, x, y);
        loss = train_step(m, opt, x, y, c->vocab);
        if (isnan(loss))
            return NAN;
        window_sum += loss;
        window++;
        if (step % 100 == 0 || step == steps) {
            printf("step %4ld  loss %.4f  (mean of the last %ld steps %.4f)\n", step, loss,
                   window, window_sum / (double)window);
            window_sum = 0;
            window = 0;
        }
    }
    *seconds = seconds_now() - t0;
    return loss;
}

/* ---- where the trained model looks ------------------------------------------ */

/* The attention weights of the probe string into w[PROBE][PROBE] (row =
 * query position, column = key position). 0, or -1 on error. */
static int probe_weights(const toy_model *m, const corpus *c, double w[PROBE][PROBE])
{
    int64_t ids[PROBE];
    for (int i = 0; i < PROBE; i++)
        ids[i] = char_id(c, PROBE_TEXT[i]);
    bool was = tg_set_grad_enabled(false); /* looking only: record no graph */
    tg_scope_begin();
    tg_tensor *weights = NULL;
    tg_tensor *idx = tg_from_data(TG_INT64, 2, (int64_t[]){1, PROBE}, ids);
    tg_tensor *logits = toy_forward(m, idx, &weights);
    int rc = logits ? tg_copy_to(weights, TG_FLOAT64, w, PROBE * PROBE) : -1;
    tg_scope_end();
    tg_set_grad_enabled(was);
    return rc;
}

/* Integer percentages, as printed and drawn. */
static void to_percent(double w[PROBE][PROBE], int pct[PROBE][PROBE])
{
    for (int i = 0; i < PROBE; i++)
        for (int j = 0; j < PROBE; j++)
            pct[i][j] = (int)lround(100.0 * w[i][j]);
}

static void print_matrix(int pct[PROBE][PROBE])
{
    printf("\nattention weights on \"%s\" in %% (row = the position looking, "
           "column = the position looked at):\n        ",
           PROBE_TEXT);
    for (int j = 0; j < PROBE; j++)
        printf(" %d '%c'", j, PROBE_TEXT[j]);
    printf("\n");
    for (int i = 0; i < PROBE; i++) {
        printf("  %d '%c' ", i, PROBE_TEXT[i]);
        for (int j = 0; j < PROBE; j++)
            printf(" %5d", pct[i][j]);
        printf("\n");
    }
}

typedef enum { LOOK_SELF, LOOK_PREVIOUS, LOOK_SAME_LETTER, LOOK_OTHER, LOOK_KINDS } look_kind;

/* What key j is to query i in the probe string. Self and previous come first:
 * the previous token is never the same letter in "abab...". */
static look_kind classify(int i, int j)
{
    if (j == i)
        return LOOK_SELF;
    if (j == i - 1)
        return LOOK_PREVIOUS;
    return PROBE_TEXT[j] == PROBE_TEXT[i] ? LOOK_SAME_LETTER : LOOK_OTHER;
}

static int row_argmax(double row[PROBE])
{
    int best = 0;
    for (int j = 1; j < PROBE; j++)
        if (row[j] > row[best])
            best = j;
    return best;
}

/* One sentence per row; counts[kind] gets how many rows with a choice (1..)
 * look most at each kind of position. */
static void print_rows(double w[PROBE][PROBE], int counts[LOOK_KINDS])
{
    printf("\nwhere each position looks most:\n");
    for (int i = 0; i < PROBE; i++) {
        int j = row_argmax(w[i]);
        look_kind kind = classify(i, j);
        if (i > 0)
            counts[kind]++;
        printf("  pos %d '%c' looks most at pos %d '%c' (%.0f%%, ", i, PROBE_TEXT[i], j,
               PROBE_TEXT[j], 100 * w[i][j]);
        if (i == 0)
            printf("itself: the only position it may see)\n");
        else if (kind == LOOK_SELF)
            printf("itself)\n");
        else if (kind == LOOK_PREVIOUS)
            printf("the previous token)\n");
        else
            printf("%s, %d back)\n", kind == LOOK_SAME_LETTER ? "same letter" : "other letter",
                   i - j);
    }
}

/* Average share of each row's weight (rows 1..) on each kind of position. */
static void mean_shares(double w[PROBE][PROBE], double share[LOOK_KINDS])
{
    for (int k = 0; k < LOOK_KINDS; k++)
        share[k] = 0;
    for (int i = 1; i < PROBE; i++)
        for (int j = 0; j <= i; j++)
            share[classify(i, j)] += w[i][j] / (PROBE - 1);
}

/* The paragraph: what the weights say, decided from the counts, not assumed. */
static void print_summary(double w[PROBE][PROBE], const int counts[LOOK_KINDS])
{
    double share[LOOK_KINDS];
    mean_shares(w, share);
    int rows = PROBE - 1;
    printf("\nwhat the model learned: of the %d positions that have a choice (1-%d), %d look "
           "most at the previous token, %d at an earlier position holding the same letter, "
           "%d at themselves and %d at the other letter further back. On average a row puts "
           "%.0f%% of its weight on the previous token, %.0f%% on earlier copies of its own "
           "letter, %.0f%% on itself and %.0f%% on the other letter further back. ",
           rows, rows, counts[LOOK_PREVIOUS], counts[LOOK_SAME_LETTER], counts[LOOK_SELF],
           counts[LOOK_OTHER], 100 * share[LOOK_PREVIOUS], 100 * share[LOOK_SAME_LETTER],
           100 * share[LOOK_SELF], 100 * share[LOOK_OTHER]);
    int own = counts[LOOK_SELF] + counts[LOOK_SAME_LETTER];
    int other = counts[LOOK_PREVIOUS] + counts[LOOK_OTHER]; /* in "abab..." i-1 is the other letter */
    if (2 * counts[LOOK_PREVIOUS] > rows)
        printf("So this run mostly looks at the previous token, as the tutorial says.\n");
    else if (2 * own > rows)
        printf("So this run mostly looks at a position holding its own letter (an earlier "
               "copy in %d row%s, itself in %d), not at the previous token as the tutorial "
               "claims.\n",
               counts[LOOK_SAME_LETTER], counts[LOOK_SAME_LETTER] == 1 ? "" : "s",
               counts[LOOK_SELF]);
    else if (2 * other > rows)
        printf("So this run mostly looks at a position holding the other letter, but at the "
               "previous token in only %d of %d rows (further back in %d): only partly what "
               "the tutorial claims.\n",
               counts[LOOK_PREVIOUS], rows, counts[LOOK_OTHER]);
    else
        printf("So this run shows no single pattern: no kind of position wins most rows.\n");
}

/* ---- the heatmap picture ----------------------------------------------------- */

enum { CELL = 48, LEFT = 90, TOP = 90 };

/* The character as SVG text: XML's special characters escaped. */
static const char *svg_char(char ch)
{
    static char buf[2];
    switch (ch) {
    case '&': return "&amp;";
    case '<': return "&lt;";
    case '>': return "&gt;";
    case ' ': return "&#9251;"; /* an open box, so a space is visible */
    default: buf[0] = ch; buf[1] = '\0'; return buf;
    }
}

static void svg_labels(FILE *f)
{
    for (int k = 0; k < PROBE; k++) {
        int mid = k * CELL + CELL / 2;
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%d %s</text>\n", LEFT + mid,
                TOP - 10, k, svg_char(PROBE_TEXT[k]));
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%d %s</text>\n", LEFT - 10,
                TOP + mid + 5, k, svg_char(PROBE_TEXT[k]));
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">position looked at (key)</text>\n",
            LEFT + PROBE * CELL / 2, TOP - 35);
    fprintf(f, "<text transform=\"translate(%d,%d) rotate(-90)\" text-anchor=\"middle\">"
               "position looking (query)</text>\n",
            LEFT - 55, TOP + PROBE * CELL / 2);
}

/* One square per weight, white (0) to dark blue (1), with its percentage. */
static void svg_cells(FILE *f, double w[PROBE][PROBE], int pct[PROBE][PROBE])
{
    for (int i = 0; i < PROBE; i++)
        for (int j = 0; j < PROBE; j++) {
            double s = w[i][j] < 0 ? 0 : w[i][j] > 1 ? 1 : w[i][j];
            int r = (int)lround(255 - s * (255 - 8)), g = (int)lround(255 - s * (255 - 48)),
                b = (int)lround(255 - s * (255 - 107));
            int x = LEFT + j * CELL, y = TOP + i * CELL;
            fprintf(f,
                    "<rect class=\"cell\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" "
                    "fill=\"rgb(%d,%d,%d)\" stroke=\"#ccc\"/>\n",
                    x, y, CELL, CELL, r, g, b);
            fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"%s\">%d%%</text>\n",
                    x + CELL / 2, y + CELL / 2 + 5, s > 0.5 ? "white" : "black", pct[i][j]);
        }
}

/* 0, or -1 with a message when the file cannot be written. */
static int write_svg(const char *path, double w[PROBE][PROBE], int pct[PROBE][PROBE])
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    int width = LEFT + PROBE * CELL + 20, height = TOP + PROBE * CELL + 20;
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "font-family=\"sans-serif\" font-size=\"14\">\n",
            width, height);
    fprintf(f, "<title>attention weights on \"%s\"</title>\n", PROBE_TEXT);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    svg_labels(f);
    svg_cells(f, w, pct);
    fprintf(f, "</svg>\n");
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* ---- main -------------------------------------------------------------------- */

/* After training: the table, the sentences, the summary and the picture. */
static int report(const toy_model *m, const corpus *c, const char *svg_path)
{
    double w[PROBE][PROBE];
    int pct[PROBE][PROBE], counts[LOOK_KINDS] = {0};
    if (probe_weights(m, c, w) < 0) {
        fprintf(stderr, "probing the attention failed: %s\n", tg_error_message());
        return -1;
    }
    to_percent(w, pct);
    print_matrix(pct);
    print_rows(w, counts);
    print_summary(w, counts);
    if (write_svg(svg_path, w, pct) < 0)
        return -1;
    printf("\nheatmap written to %s\n", svg_path);
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
    if (tg_path_check_writable(o.svg_path) < 0) { /* now, not after the training */
        fprintf(stderr, "%s: cannot write --svg %s: %s\n", argv[0], o.svg_path,
                tg_error_message());
        return 1;
    }
    corpus c;
    if (corpus_build(&c) < 0) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    printf("text: \"%s\" x %d = %" PRId64 " characters, vocabulary of %d\n", TEXT_UNIT,
           TEXT_REPEAT, c.len, c.vocab);

    tg_rng *rng = tg_rng_new(o.seed);
    toy_model m = {0};
    tg_params ps = {0};
    tg_optim *opt = NULL;
    int status = 1;
    if (toy_init(&m, c.vocab, rng, &ps) == 0)
        opt = tg_adam_new(&ps, 3e-3, 0.9, 0.999, 1e-8, 0.0);
    if (!opt) {
        fprintf(stderr, "building the model failed: %s\n", tg_error_message());
        goto done;
    }
    printf("model: %" PRId64 " parameters; training %ld steps of %d windows of %d characters\n",
           tg_params_numel(&ps), o.steps, BATCH, CTX);

    double seconds = 0;
    double loss = train(&m, opt, &c, rng, o.steps, &seconds);
    if (isnan(loss)) {
        fprintf(stderr, "training failed: %s\n", tg_error_message());
        goto done;
    }
    printf("final loss %.4f\ntraining time %.3f s for %ld steps (%.3f ms per step)\n", loss,
           seconds, o.steps, 1e3 * seconds / (double)o.steps);
    if (report(&m, &c, o.svg_path) == 0)
        status = 0;

done:
    tg_optim_free(opt);
    tg_params_clear(&ps);
    toy_free(&m);
    tg_rng_free(rng);
    free(c.ids);
    if (tg_live_tensors() != 0) {
        fprintf(stderr, "leak: %" PRId64 " tensors still alive\n", tg_live_tensors());
        status = 1;
    }
    return status;
}
