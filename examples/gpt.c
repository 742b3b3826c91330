/* A character-level GPT that trains and writes. `gpt train` learns, with no
 * data file, to add three-digit numbers; `gpt train --data FILE` learns any
 * text; `gpt sample` writes from a checkpoint. Run: build/examples/gpt help */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <tensorgrad/tensorgrad.h>

enum { EXIT_USAGE = 2 };

static const char usage_text[] =
    "usage: gpt train [--data FILE] [--config task|tiny|small|medium] [--steps N]\n"
    "                 [--batch N] [--lr X] [--seed N] [--eval-every N] [--out FILE]\n"
    "                 [--svg FILE] [--resume FILE] [--stop-at STEP]\n"
    "       gpt sample --ckpt FILE [--prompt TEXT] [--tokens N] [--temperature T]\n"
    "                  [--top-k K] [--seed N] [--greedy]\n"
    "Without --data, train learns 3-digit addition (a task it makes up itself) and\n"
    "reports exact-match accuracy on problems it never trained on.\n";

/* ---- model shapes ------------------------------------------------------------ */

typedef struct {
    const char *name;
    int64_t block_size, n_layer, n_head, n_embd;
} shape;

/* small and medium are the gpt-small and gpt-medium shapes of BENCHMARKS.md;
 * task is sized to learn addition in under a minute on two cores; tiny
 * is for quick checks. */
static const shape shapes[] = {
    {"task", 16, 2, 4, 128},
    {"tiny", 16, 1, 2, 32},
    {"small", 64, 4, 4, 128},
    {"medium", 256, 6, 6, 384},
};

/* ---- the command line -------------------------------------------------------- */

typedef struct {
    const char *data, *config, *out, *svg, *resume, *ckpt, *prompt;
    int64_t steps, batch, seed, eval_every, stop_at, tokens, top_k;
    double lr, temperature;
    bool greedy, set_steps, set_batch, set_lr;
} options;

/* Prints "gpt: <message>" and the usage; the exit code for a bad command line. */
__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "gpt: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n%s", usage_text);
    va_end(ap);
    return EXIT_USAGE;
}

/* Whole-string integer in [lo, hi]. */
static bool parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

static bool parse_double(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi))
        return false;
    *out = v;
    return true;
}

/* Reads "--name value" pairs (and the flag --greedy). train and sample share
 * one table; options of the other command are refused. 0, or an exit code. */
static int parse_options(int argc, char **argv, bool train, options *o)
{
    static const char *const train_only[] = {"--data", "--config", "--steps", "--batch",
                                             "--lr", "--eval-every", "--out", "--svg",
                                             "--resume", "--stop-at", NULL};
    static const char *const sample_only[] = {"--ckpt", "--prompt", "--tokens",
                                              "--temperature", "--top-k", "--greedy", NULL};
    for (int i = 2; i < argc; i++) {
        const char *name = argv[i];
        bool known = !strcmp(name, "--seed");
        for (const char *const *p = train ? train_only : sample_only; *p; p++)
            known |= !strcmp(name, *p);
        if (!known)
            return usage_error("unknown option '%s' for %s", name, argv[1]);
        if (!strcmp(name, "--greedy")) {
            o->greedy = true;
            continue;
        }
        if (i + 1 >= argc)
            return usage_error("%s needs a value", name);
        const char *v = argv[++i];
        bool ok = true;
        if (!strcmp(name, "--data")) o->data = v;
        else if (!strcmp(name, "--config")) o->config = v;
        else if (!strcmp(name, "--out")) o->out = v;
        else if (!strcmp(name, "--svg")) o->svg = v;
        else if (!strcmp(name, "--resume")) o->resume = v;
        else if (!strcmp(name, "--ckpt")) o->ckpt = v;
        else if (!strcmp(name, "--prompt")) o->prompt = v;
        else if (!strcmp(name, "--steps")) ok = o->set_steps = parse_int(v, 1, 10000000, &o->steps);
        else if (!strcmp(name, "--batch")) ok = o->set_batch = parse_int(v, 1, 4096, &o->batch);
        else if (!strcmp(name, "--lr")) ok = o->set_lr = parse_double(v, 0, 10, &o->lr);
        else if (!strcmp(name, "--seed")) ok = parse_int(v, 0, INT64_MAX, &o->seed);
        else if (!strcmp(name, "--eval-every")) ok = parse_int(v, 1, 10000000, &o->eval_every);
        else if (!strcmp(name, "--stop-at")) ok = parse_int(v, 1, 10000000, &o->stop_at);
        else if (!strcmp(name, "--tokens")) ok = parse_int(v, 0, 1000000, &o->tokens);
        else if (!strcmp(name, "--top-k")) ok = parse_int(v, 0, 1000000, &o->top_k);
        else if (!strcmp(name, "--temperature")) ok = parse_double(v, 1e-6, 1e6, &o->temperature);
        if (!ok)
            return usage_error("%s: '%s' is not a number in the allowed range", name, v);
    }
    return 0;
}

/* ---- the data: a made-up task, or a text file -------------------------------- */

/* Both kinds deliver batches of (input, target) rows of token ids; a target
 * of -1 is not scored. Tokens are bytes mapped to 0..vocab-1. */
typedef struct {
    bool task;                  /* addition, or text */
    int vocab_size;
    unsigned char chars[256];   /* token id -> byte */
    int ids[256];               /* byte -> token id, or -1 */
    unsigned char *text;        /* the file's tokens, train split then validation */
    int64_t n_train, n_val;
} dataset;

static void set_vocab(dataset *d, const unsigned char *chars, int n)
{
    d->vocab_size = n;
    memset(d->ids, -1, sizeof d->ids);
    for (int i = 0; i < n; i++) {
        d->chars[i] = chars[i];
        d->ids[chars[i]] = i;
    }
}

/* The task: "ddd+ddd=ssss\n" with the sum written backwards (lowest digit
 * first), so that each digit needs only the digits before it and a carry, the
 * order in which people add. Problems whose hash ends in 0 are held out:
 * training never sees them, and accuracy is measured on them. */
enum { PROBLEM_LEN = 13, PROMPT_LEN = 8 };
static const char task_chars[] = "\n+0123456789=";

static bool held_out(int64_t a, int64_t b)
{
    uint64_t h = (uint64_t)(a * 1000 + b) * 0x9E3779B97F4A7C15ull;
    return (h >> 32) % 10 == 0;
}

static void make_problem(tg_rng *rng, bool want_held_out, char text[PROBLEM_LEN + 1])
{
    int64_t a, b;
    do {
        a = (int64_t)(tg_rng_uniform01(rng) * 1000);
        b = (int64_t)(tg_rng_uniform01(rng) * 1000);
    } while (held_out(a, b) != want_held_out);
    int64_t s = a + b;
    snprintf(text, PROBLEM_LEN + 1, "%03d+%03d=%c%c%c%c\n", (int)a, (int)b, '0' + (int)(s % 10),
             '0' + (int)(s / 10 % 10), '0' + (int)(s / 100 % 10), '0' + (int)(s / 1000));
}

/* One problem per row, T = PROBLEM_LEN - 1; only the answer is scored. */
static void task_row(const dataset *d, tg_rng *rng, bool test, int64_t T, int64_t *x, int64_t *y)
{
    char p[PROBLEM_LEN + 1];
    make_problem(rng, test, p);
    for (int64_t t = 0; t < T; t++) {
        x[t] = t < PROBLEM_LEN - 1 ? d->ids[(unsigned char)p[t]] : 0;
        y[t] = t >= PROMPT_LEN - 1 && t < PROBLEM_LEN - 1 ? d->ids[(unsigned char)p[t + 1]] : -1;
    }
}

/* A random window of T + 1 characters of the train split. */
static void text_row(const dataset *d, tg_rng *rng, int64_t T, int64_t *x, int64_t *y)
{
    int64_t at = (int64_t)(tg_rng_uniform01(rng) * (double)(d->n_train - T));
    for (int64_t t = 0; t < T; t++) {
        x[t] = d->text[at + t];
        y[t] = d->text[at + t + 1];
    }
}

static void *read_file(const char *path, int64_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    unsigned char *buf = NULL;
    int64_t n = 0, cap = 0;
    size_t got;
    do {
        if (n == cap) {
            unsigned char *bigger = realloc(buf, (size_t)(cap = cap ? 2 * cap : 65536));
            if (!bigger)
                break;
            buf = bigger;
        }
        got = fread(buf + n, 1, (size_t)(cap - n), f);
        n += (int64_t)got;
    } while (got > 0);
    bool failed = ferror(f) || (n < cap && got > 0);
    fclose(f);
    if (failed) {
        free(buf);
        return NULL;
    }
    *size = n;
    return buf;
}

/* Loads a text file: vocabulary = its distinct bytes, 90% train, 10%
 * validation. min_train is context + 1. 0, or 1 with a message. */
static int load_text(dataset *d, const char *path, int64_t min_train)
{
    int64_t n = 0;
    unsigned char *buf = read_file(path, &n);
    if (!buf)
        return fprintf(stderr, "gpt: cannot read --data %s: %s\n", path, strerror(errno)), 1;
    const char *problem = n == 0 ? "is empty"
                          : memchr(buf, 0, (size_t)n) ? "contains NUL bytes, so it is not text"
                          : NULL;
    if (!problem && (n - n / 10 < min_train || n / 10 < 2)) /* and 2 to validate on */
        problem = "is too short";
    if (problem) {
        fprintf(stderr, "gpt: --data %s %s (%lld bytes; the model needs context + 1 = %lld "
                "bytes to train on, 90%% of the file, and 2 to validate on, 10%%)\n", path, problem,
                (long long)n, (long long)min_train);
        free(buf);
        return 1;
    }
    bool seen[256] = {false};
    for (int64_t i = 0; i < n; i++)
        seen[buf[i]] = true;
    unsigned char chars[256];
    int v = 0;
    for (int c = 0; c < 256; c++)
        if (seen[c])
            chars[v++] = (unsigned char)c;
    set_vocab(d, chars, v);
    for (int64_t i = 0; i < n; i++)
        buf[i] = (unsigned char)d->ids[buf[i]];
    d->text = buf;
    d->n_val = n / 10;
    d->n_train = n - d->n_val;
    return 0;
}

/* ---- training ---------------------------------------------------------------- */

typedef struct {
    tg_gpt *model;
    tg_params params;
    tg_optim *opt;
    tg_rng *data_rng;
    int64_t T, batch, steps, eval_every, step; /* step: steps done */
    double lr;
    double *loss, *val;                        /* per step; val NAN when not measured */
} trainer;

/* Mean loss of one batch: x, y int64 [B, T]. Adds the graph only in grad mode. */
static tg_tensor *batch_loss(trainer *tr, const int64_t *x, const int64_t *y, int64_t B)
{
    tg_tensor *loss = NULL;
    tg_gpt_forward(tr->model, tg_from_data(TG_INT64, 2, (int64_t[]){B, tr->T}, x),
                   tg_from_data(TG_INT64, 2, (int64_t[]){B, tr->T}, y), &loss);
    return loss;
}

/* One AdamW step on a fresh batch: warmup + cosine rate, gradients clipped
 * to norm 1. The loss, or NAN on error. */
static double train_step(trainer *tr, const dataset *d)
{
    int64_t B = tr->batch, T = tr->T, warmup = tr->steps / 10 < 100 ? tr->steps / 10 : 100;
    tg_optim_set_lr(tr->opt, tg_lr_warmup_cosine(tr->step, warmup, tr->steps, tr->lr, tr->lr / 10));
    int64_t *x = malloc(sizeof(int64_t) * (size_t)(2 * B * T)), *y = x + B * T;
    for (int64_t b = 0; b < B; b++) {
        if (d->task)
            task_row(d, tr->data_rng, false, T, x + b * T, y + b * T);
        else
            text_row(d, tr->data_rng, T, x + b * T, y + b * T);
    }
    tg_scope_begin();
    tg_tensor *loss = batch_loss(tr, x, y, B);
    double value = NAN;
    if (loss && tg_backward(loss, NULL) == 0 && tg_clip_grad_norm(&tr->params, 1.0) >= 0 &&
        tg_optim_step(tr->opt) == 0)
        value = tg_item(loss);
    tg_optim_zero_grad(tr->opt);
    tg_scope_end();
    free(x);
    return value;
}

/* Validation loss on a fixed set (the same every time, and drawing nothing
 * from the training generator, so it cannot change the run): 256 held-out
 * problems, or up to 8 batches of windows spread evenly over the split. */
static double validation_loss(trainer *tr, const dataset *d)
{
    int64_t T = tr->T, rows = 256;
    if (!d->task) {
        int64_t windows = d->n_val > T ? d->n_val - T : 0;
        rows = windows < 8 * tr->batch ? windows : 8 * tr->batch;
    }
    int64_t wT = d->task ? T : (d->n_val - 1 < T ? d->n_val - 1 : T); /* short splits: short rows */
    if (rows < 1)
        rows = 1;
    int64_t *x = malloc(sizeof(int64_t) * (size_t)(2 * rows * wT)), *y = x + rows * wT;
    tg_rng *rng = tg_rng_new(12345);
    for (int64_t r = 0; r < rows; r++) {
        if (d->task) {
            task_row(d, rng, true, T, x + r * T, y + r * T);
            continue;
        }
        int64_t at = d->n_train + (d->n_val - wT - 1) * r / rows;
        for (int64_t t = 0; t < wT; t++) {
            x[r * wT + t] = d->text[at + t];
            y[r * wT + t] = d->text[at + t + 1];
        }
    }
    bool was = tg_set_grad_enabled(false);
    int64_t saved_T = tr->T;
    tr->T = wT;
    double sum = 0;
    int64_t chunk = 64;
    for (int64_t r = 0; r < rows; r += chunk) {
        int64_t n = rows - r < chunk ? rows - r : chunk;
        tg_scope_begin();
        sum += tg_item(batch_loss(tr, x + r * wT, y + r * wT, n)) * (double)n;
        tg_scope_end();
    }
    tr->T = saved_T;
    tg_set_grad_enabled(was);
    tg_rng_free(rng);
    free(x);
    return sum / (double)rows;
}

/* Exact-match accuracy on held-out problems drawn with another seed: the
 * model completes "ddd+ddd=" greedily and every character must be right. */
static double task_accuracy(tg_gpt *model, const dataset *d, uint64_t seed, int n, bool show)
{
    tg_rng *rng = tg_rng_new(seed);
    tg_sample_options greedy = {.temperature = 1, .greedy = true};
    int right = 0;
    for (int i = 0; i < n; i++) {
        char p[PROBLEM_LEN + 1], got[PROBLEM_LEN + 1] = {0};
        make_problem(rng, true, p);
        int64_t prompt[PROMPT_LEN], out[PROBLEM_LEN];
        for (int t = 0; t < PROMPT_LEN; t++)
            prompt[t] = d->ids[(unsigned char)p[t]];
        if (tg_gpt_generate(model, prompt, PROMPT_LEN, PROBLEM_LEN - PROMPT_LEN, &greedy, NULL,
                            out) < 0)
            break;
        for (int t = 0; t < PROBLEM_LEN; t++)
            got[t] = (char)d->chars[out[t]];
        right += strcmp(got, p) == 0;
        if (show && i < 5) /* the sum reads right to left */
            printf("  %.7s = %c%c%c%c  (model wrote %.4s, lowest digit first)  %s\n", p, got[11],
                   got[10], got[9], got[8], got + PROMPT_LEN, strcmp(got, p) ? "wrong" : "right");
    }
    tg_rng_free(rng);
    return (double)right / n;
}

/* ---- progress ------------------------------------------------------------------ */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *clock_text(double seconds, char buf[32])
{
    long s = (long)(seconds + 0.5);
    snprintf(buf, 32, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    return buf;
}

/* On a terminal one line redraws itself every step; otherwise (a pipe, a
 * log file) a plain line is printed at every evaluation. */
static void progress(const trainer *tr, int64_t first, double started, bool tty)
{
    int64_t s = tr->step;
    bool measured = !isnan(tr->val[s - 1]);
    if (!tty && !measured && s != tr->steps)
        return;
    double elapsed = now() - started, per_step = elapsed / (double)(s - first);
    double tokens = (double)(s - first) * (double)(tr->batch * tr->T);
    char e[32], eta[32], val[32] = "";
    double last_val = NAN;
    for (int64_t i = s - 1; i >= 0 && isnan(last_val); i--)
        last_val = tr->val[i];
    if (!isnan(last_val))
        snprintf(val, sizeof val, "  val %.6f", last_val);
    printf("%sstep %lld/%lld  loss %.6f%s  %.0f tok/s  elapsed %s  eta %s%s", tty ? "\r" : "",
           (long long)s, (long long)tr->steps, tr->loss[s - 1], val, tokens / elapsed,
           clock_text(elapsed, e), clock_text(per_step * (double)(tr->steps - s), eta),
           tty ? "\033[K" : "\n");
    if (tty && (measured || s == tr->steps))
        printf("\n"); /* keep the lines with a validation loss */
    fflush(stdout);
}

/* ---- the loss curve as SVG ----------------------------------------------------- */

static void svg_polyline(FILE *f, const double *v, int64_t n, double ymax, const char *color)
{
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", color);
    for (int64_t i = 0; i < n; i++)
        if (!isnan(v[i]))
            fprintf(f, "%.1f,%.1f ", 60 + 560.0 * (double)(i + 1) / (double)n,
                    330 - 300 * fmin(v[i], ymax) / ymax);
    fprintf(f, "\"/>\n");
}

/* Train loss (every step) and validation loss (when measured) against the
 * step: 640x380, axes from 0, five ticks each. */
static int write_svg(const char *path, const trainer *tr)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return fprintf(stderr, "gpt: cannot write %s: %s\n", path, strerror(errno)), 1;
    int64_t n = tr->step;
    double ymax = 0;
    for (int64_t i = 0; i < n; i++)
        ymax = fmax(ymax, fmax(tr->loss[i], isnan(tr->val[i]) ? 0 : tr->val[i]));
    ymax = ymax > 0 ? ceil(ymax) : 1;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"640\" height=\"380\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"640\" "
               "height=\"380\" fill=\"white\"/>\n<path d=\"M60,30 V330 H620\" stroke=\"black\" "
               "fill=\"none\"/>\n");
    for (int k = 0; k <= 5; k++) {
        double y = 330 - 60.0 * k, x = 60 + 112.0 * k;
        fprintf(f, "<text x=\"54\" y=\"%.0f\" text-anchor=\"end\">%.2f</text>\n", y + 4,
                ymax * k / 5);
        fprintf(f, "<text x=\"%.0f\" y=\"346\" text-anchor=\"middle\">%lld</text>\n", x,
                (long long)(n * k / 5));
    }
    svg_polyline(f, tr->loss, n, ymax, "#1f77b4");
    svg_polyline(f, tr->val, n, ymax, "#d62728");
    fprintf(f, "<text x=\"340\" y=\"372\" text-anchor=\"middle\">step</text>\n"
               "<text x=\"16\" y=\"180\" transform=\"rotate(-90 16 180)\" "
               "text-anchor=\"middle\">cross-entropy loss</text>\n"
               "<text x=\"440\" y=\"24\" fill=\"#1f77b4\">train</text>\n"
               "<text x=\"500\" y=\"24\" fill=\"#d62728\">validation</text>\n</svg>\n");
    return fclose(f) == 0 ? 0 : 1;
}

/* ---- checkpoints ------------------------------------------------------------------ */
/* One safetensors file holds the model's parameters, the AdamW state, both
 * generators, the vocabulary, the config, the run's settings and its loss
 * history: everything a resumed run needs to continue bit for bit. */

static int add_owned(tg_params *ps, const char *name, tg_tensor *t)
{
    int rc = t ? tg_params_add(ps, NULL, name, t) : -1;
    tg_release(t);
    return rc;
}

static int save_checkpoint(const char *path, const trainer *tr, const dataset *d)
{
    const tg_gpt_config *c = tg_gpt_config_of(tr->model);
    int64_t cfg[5] = {c->vocab_size, c->block_size, c->n_layer, c->n_head, c->n_embd};
    int64_t vocab[256];
    for (int i = 0; i < d->vocab_size; i++)
        vocab[i] = d->chars[i];
    double settings[5] = {(double)tr->steps, (double)tr->batch, tr->lr, d->task,
                          (double)tr->eval_every};
    int64_t n = tr->step > 0 ? tr->step : 1;
    double *hist = malloc(sizeof(double) * (size_t)(2 * n));
    for (int64_t i = 0; i < n; i++) {
        hist[2 * i] = i < tr->step ? tr->loss[i] : NAN;
        hist[2 * i + 1] = i < tr->step ? tr->val[i] : NAN;
    }
    tg_params ps = {0};
    int rc = 0;
    for (int i = 0; i < tr->params.count; i++)
        rc |= tg_params_add(&ps, NULL, tr->params.names[i], tr->params.tensors[i]);
    rc |= tg_optim_state(tr->opt, &ps);
    rc |= add_owned(&ps, "gpt.config", tg_from_data(TG_INT64, 1, (int64_t[]){5}, cfg));
    rc |= add_owned(&ps, "gpt.vocab", tg_from_data(TG_INT64, 1, (int64_t[]){d->vocab_size}, vocab));
    rc |= add_owned(&ps, "train.settings", tg_from_data(TG_FLOAT64, 1, (int64_t[]){5}, settings));
    rc |= add_owned(&ps, "train.history", tg_from_data(TG_FLOAT64, 2, (int64_t[]){n, 2}, hist));
    rc |= add_owned(&ps, "train.rng_data", tg_rng_state_tensor(tr->data_rng));
    rc |= add_owned(&ps, "train.rng_dropout", tg_rng_state_tensor(tg_gpt_rng(tr->model)));
    char meta[160];
    snprintf(meta, sizeof meta, "vocab %lld, context %lld, %lld layers, %lld heads, d %lld",
             (long long)cfg[0], (long long)cfg[1], (long long)cfg[2], (long long)cfg[3],
             (long long)cfg[4]);
    if (rc == 0)
        rc = tg_safetensors_save(path, &ps, 1, (const char *[]){"gpt"}, (const char *[]){meta});
    tg_params_clear(&ps);
    free(hist);
    if (rc)
        fprintf(stderr, "gpt: cannot save %s: %s\n", path, tg_error_message());
    return rc ? 1 : 0;
}

/* A checkpoint's tensors, and the model and vocabulary rebuilt from them. */
static int load_model(const char *path, tg_params *ck, tg_gpt **model, dataset *d)
{
    if (tg_safetensors_load(path, ck) < 0)
        return fprintf(stderr, "gpt: cannot load %s: %s\n", path, tg_error_message()), 1;
    tg_tensor *cfg = tg_params_find(ck, "gpt.config"), *vocab = tg_params_find(ck, "gpt.vocab");
    int64_t c[5] = {0}, v[256] = {0};
    if (!cfg || !vocab || tg_copy_to(cfg, TG_INT64, c, 5) < 0 ||
        tg_copy_to(vocab, TG_INT64, v, 256) < 0 || c[0] != tg_numel(vocab))
        return fprintf(stderr, "gpt: %s is not a gpt checkpoint (no gpt.config/gpt.vocab)\n",
                       path), 1;
    unsigned char chars[256];
    for (int64_t i = 0; i < c[0]; i++)
        chars[i] = (unsigned char)v[i];
    set_vocab(d, chars, (int)c[0]);
    tg_gpt_config config = {c[0], c[1], c[2], c[3], c[4], 0.0};
    tg_rng *rng = tg_rng_new(0);
    *model = tg_gpt_new(&config, TG_FLOAT32, rng);
    tg_rng_free(rng);
    tg_params mp = {0};
    int rc = *model ? tg_gpt_params(*model, &mp) : -1;
    for (int i = 0; rc == 0 && i < mp.count; i++) {
        tg_tensor *src = tg_params_find(ck, mp.names[i]), *dst = mp.tensors[i];
        rc = src && tg_numel(src) == tg_numel(dst)
                 ? tg_copy_to(src, TG_FLOAT32, tg_data(dst), tg_numel(dst)) : -1;
    }
    tg_params_clear(&mp);
    if (rc)
        fprintf(stderr, "gpt: %s does not hold the model its config describes\n", path);
    return rc ? 1 : 0;
}

/* Restores everything else a run needs; settings not given on the command
 * line come from the checkpoint. */
static int resume(const char *path, const tg_params *ck, trainer *tr, const options *o)
{
    double set[5];
    tg_tensor *hist = tg_params_find(ck, "train.history");
    if (tg_copy_to(tg_params_find(ck, "train.settings"), TG_FLOAT64, set, 5) < 0 || !hist ||
        tg_optim_load_state(tr->opt, ck) < 0 ||
        tg_rng_set_state_tensor(tr->data_rng, tg_params_find(ck, "train.rng_data")) < 0 ||
        tg_rng_set_state_tensor(tg_gpt_rng(tr->model), tg_params_find(ck, "train.rng_dropout")) < 0)
        return fprintf(stderr, "gpt: %s cannot be resumed: %s\n", path, tg_error_message()), 1;
    tr->steps = o->set_steps ? o->steps : (int64_t)set[0];
    tr->batch = o->set_batch ? o->batch : (int64_t)set[1];
    tr->lr = o->set_lr ? o->lr : set[2];
    tr->eval_every = o->eval_every ? o->eval_every : (int64_t)set[4];
    tr->step = tg_optim_steps(tr->opt);
    if (tr->step >= tr->steps)
        return fprintf(stderr, "gpt: %s already ran %lld of %lld steps; give more --steps\n",
                       path, (long long)tr->step, (long long)tr->steps), 1;
    tr->loss = calloc((size_t)tr->steps, sizeof(double));
    tr->val = calloc((size_t)tr->steps, sizeof(double));
    int64_t n = tg_size(hist, 0);
    double *h = malloc(sizeof(double) * (size_t)(2 * n));
    tg_copy_to(hist, TG_FLOAT64, h, 2 * n);
    for (int64_t i = 0; i < tr->step && i < n; i++) {
        tr->loss[i] = h[2 * i];
        tr->val[i] = h[2 * i + 1];
    }
    free(h);
    return 0;
}

/* ---- gpt train ---------------------------------------------------------------------- */

static volatile sig_atomic_t interrupted;
static void on_interrupt(int sig)
{
    (void)sig;
    interrupted = 1;
}

/* The data and a model for it: from the checkpoint when resuming (then a
 * --data file must have the checkpoint's vocabulary), else new from seed. */
static int setup(const options *o, dataset *d, trainer *tr, tg_params *ck)
{
    const shape *sh = NULL;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (!strcmp(o->config, shapes[i].name))
            sh = &shapes[i];
    if (!sh)
        return usage_error("--config: unknown '%s' (task, tiny, small or medium)", o->config);
    d->task = !o->data;
    if (o->resume) {
        dataset saved = {0};
        if (load_model(o->resume, ck, &tr->model, &saved))
            return 1;
        double set[5] = {0};
        tg_copy_to(tg_params_find(ck, "train.settings"), TG_FLOAT64, set, 5);
        if ((set[3] != 0) != d->task)
            return fprintf(stderr, "gpt: %s was trained %s; resume it the same way\n", o->resume,
                           set[3] != 0 ? "on the built-in task, without --data" : "with --data"), 1;
        tr->T = d->task ? PROBLEM_LEN - 1 : tg_gpt_config_of(tr->model)->block_size;
        if (!d->task && load_text(d, o->data, tr->T + 1))
            return 1;
        if (!d->task && (d->vocab_size != saved.vocab_size ||
                         memcmp(d->chars, saved.chars, (size_t)saved.vocab_size)))
            return fprintf(stderr, "gpt: %s has other characters than the text %s was trained on\n",
                           o->data, o->resume), 1;
        *d = (dataset){.task = d->task, .text = d->text, .n_train = d->n_train, .n_val = d->n_val};
        set_vocab(d, saved.chars, saved.vocab_size);
        return 0;
    }
    tr->T = d->task ? PROBLEM_LEN - 1 : sh->block_size;
    if (d->task)
        set_vocab(d, (const unsigned char *)task_chars, (int)strlen(task_chars));
    else if (load_text(d, o->data, tr->T + 1))
        return 1;
    tg_gpt_config c = {d->vocab_size, sh->block_size, sh->n_layer, sh->n_head, sh->n_embd, 0.0};
    tg_rng *init = tg_rng_new((uint64_t)o->seed);
    tr->model = tg_gpt_new(&c, TG_FLOAT32, init);
    tg_rng_free(init);
    if (!tr->model)
        return fprintf(stderr, "gpt: cannot build the model: %s\n", tg_error_message()), 1;
    return 0;
}

static int prepare(const options *o, dataset *d, trainer *tr, tg_params *ck)
{
    int rc = setup(o, d, tr, ck);
    if (rc)
        return rc;
    tr->data_rng = tg_rng_new((uint64_t)o->seed + 1);
    if (tg_gpt_params(tr->model, &tr->params) < 0 ||
        !(tr->opt = tg_adamw_new(&tr->params, o->lr, 0.9, 0.99, 1e-8, 0.1)))
        return fprintf(stderr, "gpt: %s\n", tg_error_message()), 1;
    if (o->resume)
        return resume(o->resume, ck, tr, o);
    tr->steps = o->steps;
    tr->batch = o->batch;
    tr->lr = o->lr;
    tr->eval_every = o->eval_every ? o->eval_every : tr->steps / 20 > 100 ? 100
                                                     : tr->steps / 20 < 1 ? 1 : tr->steps / 20;
    tr->loss = calloc((size_t)tr->steps, sizeof(double));
    tr->val = calloc((size_t)tr->steps, sizeof(double));
    return 0;
}

/* The loop: one step, a validation loss every eval_every steps, progress.
 * Stops early at --stop-at or on Ctrl-C (the checkpoint is still written). */
static int train_loop(trainer *tr, const dataset *d, const options *o)
{
    int64_t first = tr->step;
    double started = now();
    bool tty = isatty(STDOUT_FILENO);
    signal(SIGINT, on_interrupt);
    while (tr->step < tr->steps && !(o->stop_at && tr->step >= o->stop_at) && !interrupted) {
        double loss = train_step(tr, d);
        if (isnan(loss))
            return fprintf(stderr, "\ngpt: training failed at step %lld: %s\n",
                           (long long)tr->step + 1, tg_error_code() ? tg_error_message()
                                                    : "the loss is NaN (try a lower --lr)"), 1;
        tr->loss[tr->step] = loss;
        tr->val[tr->step] = NAN;
        tr->step++;
        if (tr->step % tr->eval_every == 0 || tr->step == tr->steps)
            tr->val[tr->step - 1] = validation_loss(tr, d);
        progress(tr, first, started, tty);
    }
    if (tr->step < tr->steps)
        printf("%sstopped at step %lld of %lld; continue with --resume %s\n", tty ? "\n" : "",
               (long long)tr->step, (long long)tr->steps, o->out);
    double secs = now() - started;
    printf("trained %lld steps in %.1f s (%.2f steps/s)\n", (long long)(tr->step - first), secs,
           (double)(tr->step - first) / secs);
    return 0;
}

static int cmd_train(int argc, char **argv)
{
    options o = {.config = NULL, .out = "gpt.safetensors", .svg = "loss_curve.svg", .steps = 1500,
                 .batch = 64, .lr = 1e-3, .seed = 1337};
    int rc = parse_options(argc, argv, true, &o);
    if (rc)
        return rc;
    if (!o.config)
        o.config = o.data ? "small" : "task";
    if (o.data && !o.set_batch)
        o.batch = 32;
    if (o.data && !o.set_steps)
        o.steps = 2000;
    dataset d = {0};
    trainer tr = {0};
    tg_params ck = {0};
    rc = prepare(&o, &d, &tr, &ck);
    tg_params_clear(&ck);
    if (!rc) {
        const tg_gpt_config *c = tg_gpt_config_of(tr.model);
        printf("training on %s: vocab %lld, context %lld, %lld layers, %lld heads, d %lld, "
               "%lld parameters\n", d.task ? "3-digit addition (built-in task)" : o.data,
               (long long)c->vocab_size, (long long)c->block_size, (long long)c->n_layer,
               (long long)c->n_head, (long long)c->n_embd, (long long)tg_params_numel(&tr.params));
        printf("AdamW lr %g (warmup + cosine), batch %lld, steps %lld%s\n", tr.lr,
               (long long)tr.batch, (long long)tr.steps, o.resume ? ", resumed" : "");
        if (!d.task)
            printf("text: %lld characters for training, %lld for validation\n",
                   (long long)d.n_train, (long long)d.n_val);
        fflush(stdout);
        rc = train_loop(&tr, &d, &o);
    }
    if (!rc && tr.step > 0) {
        double val = tr.val[tr.step - 1];
        printf("final: step %lld loss %.6f val %.6f\n", (long long)tr.step, tr.loss[tr.step - 1],
               isnan(val) ? validation_loss(&tr, &d) : val);
        rc = save_checkpoint(o.out, &tr, &d) || write_svg(o.svg, &tr);
        if (!rc)
            printf("saved %s and %s\n", o.out, o.svg);
    }
    if (!rc && d.task && tr.step == tr.steps) {
        printf("held-out problems (never trained on; greedy generation):\n");
        double acc = task_accuracy(tr.model, &d, (uint64_t)o.seed + 2, 500, true);
        printf("exact-match accuracy: %.1f%% of 500\n", 100 * acc);
    }
    tg_optim_free(tr.opt);
    tg_params_clear(&tr.params);
    tg_gpt_free(tr.model);
    tg_rng_free(tr.data_rng);
    free(tr.loss);
    free(tr.val);
    free(d.text);
    return rc;
}

/* ---- gpt sample ------------------------------------------------------------------------ */

static int cmd_sample(int argc, char **argv)
{
    options o = {.prompt = "\n", .tokens = 200, .temperature = 1.0, .seed = 1337};
    int rc = parse_options(argc, argv, false, &o);
    if (rc)
        return rc;
    if (!o.ckpt)
        return usage_error("sample needs --ckpt FILE");
    int64_t len = (int64_t)strlen(o.prompt);
    if (len == 0)
        return usage_error("--prompt must not be empty");
    tg_params ck = {0};
    tg_gpt *model = NULL;
    dataset d = {0};
    rc = load_model(o.ckpt, &ck, &model, &d);
    tg_params_clear(&ck);
    int64_t *ids = malloc(sizeof(int64_t) * (size_t)len);
    int64_t *out = malloc(sizeof(int64_t) * (size_t)(len + o.tokens));
    for (int64_t i = 0; !rc && i < len; i++)
        if ((ids[i] = d.ids[(unsigned char)o.prompt[i]]) < 0) {
            fprintf(stderr, "gpt: the prompt's character '%c' (byte %d, at %lld) is not in the "
                    "model's vocabulary\n", o.prompt[i], (unsigned char)o.prompt[i], (long long)i);
            rc = 1;
        }
    tg_rng *rng = tg_rng_new((uint64_t)o.seed);
    tg_sample_options so = {.temperature = o.temperature, .top_k = o.top_k, .greedy = o.greedy};
    if (!rc && tg_gpt_generate(model, ids, len, o.tokens, &so, rng, out) < 0) {
        fprintf(stderr, "gpt: sampling failed: %s\n", tg_error_message());
        rc = 1;
    }
    for (int64_t i = 0; !rc && i < len + o.tokens; i++)
        putchar(d.chars[out[i]]);
    if (!rc)
        putchar('\n');
    tg_rng_free(rng);
    free(ids);
    free(out);
    tg_gpt_free(model);
    return rc;
}

int main(int argc, char **argv)
{
    int rc;
    if (argc >= 2 && !strcmp(argv[1], "train"))
        rc = cmd_train(argc, argv);
    else if (argc >= 2 && !strcmp(argv[1], "sample"))
        rc = cmd_sample(argc, argv);
    else if (argc >= 2 && (!strcmp(argv[1], "help") || !strcmp(argv[1], "--help")))
        return fputs(usage_text, stdout), 0;
    else
        return usage_error("unknown command '%s'", argc >= 2 ? argv[1] : "(none)");
    if (tg_live_tensors() != 0)
        fprintf(stderr, "gpt: %lld tensors leaked\n", (long long)tg_live_tensors());
    return rc;
}
