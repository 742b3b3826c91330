/* A character-level GPT that trains and writes. `gpt train` learns, with no
 * data file, to add three-digit numbers; `gpt train --data FILE` learns any
 * text; `gpt sample` writes from a checkpoint. Run: build/examples/gpt help */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tensorgrad/tensorgrad.h>

#include "gpt_checkpoint.h"
#include "gpt_data.h"
#include "gpt_dist.h"
#include "gpt_model.h"
#include "gpt_plot.h"
#include "gpt_stop.h"

enum { EXIT_USAGE = 2 };

static const char usage_text[] =
    "usage: gpt train [--arch gpt|llama] [--config task|tiny|small|medium]\n"
    "                 [--data FILE] [--steps N] [--batch N] [--lr X] [--seed N]\n"
    "                 [--eval-every N] [--out FILE] [--svg FILE] [--resume FILE]\n"
    "                 [--stop-at STEP] [--save-every N] [--zero1] [--precision fp32|bf16]\n"
    "       gpt sample --ckpt FILE [--prompt TEXT] [--tokens N] [--temperature T]\n"
    "                  [--top-k K] [--top-p P] [--seed N] [--greedy]\n"
    "       gpt [train|sample] --help\n"
    "Without --data, train learns 3-digit addition (a task it makes up itself) and\n"
    "reports exact-match accuracy on problems it never trained on. --data takes a\n"
    "text file of at most 1 GiB with no NUL bytes.\n"
    "--arch llama (default gpt) trains a Llama-style model instead: rotary positions,\n"
    "grouped-query attention, RMSNorm, a SwiGLU MLP, the head tied to the embedding;\n"
    "each config keeps its context, layers, heads and width, with kv heads and MLP\n"
    "widths task 2/384, tiny 1/96, small 2/384, medium 2/1024. Without position\n"
    "embeddings it learns the task more slowly: there its defaults are --steps 5000\n"
    "--batch 32 --lr 3e-3 (the GPT's 1500, 64 and 1e-3; 2000 and 32 for either\n"
    "with --data).\n"
    "A checkpoint records its architecture; --resume and sample read it there.\n"
    "--precision bf16 (default fp32) runs the model's matrix products on bfloat16\n"
    "operands with float32 sums, forward and backward; parameters, gradients, the\n"
    "optimizer, norms, softmax and the loss stay float32. The checkpoint records it\n"
    "and --resume keeps it unless given; sample always runs in float32.\n"
    "--out (default gpt.safetensors) is written every --save-every steps (default\n"
    "500: a save costs about one step, and a run killed or preempted loses at most\n"
    "500 steps; 0 saves only at the end) and at the end. Ctrl-C, SIGTERM or SIGUSR1\n"
    "stops after the current step, saves, and exits 130, 143 or 138; --resume FILE\n"
    "continues bit for bit. --out and --svg must not be --data, --resume (--svg)\n"
    "or each other. sample keeps, after --temperature and --top-k, the fewest most\n"
    "likely characters whose probabilities sum to at least --top-p (0 or 1 keeps\n"
    "all), and slides its window past the model's context.\n"
    "Under mpirun (with tensorgrad built with MPI), `mpirun -np N gpt train ...`\n"
    "trains data-parallel: --batch is each rank's batch (the step sees N times\n"
    "it), gradients are averaged over the ranks, rank 0 prints and saves. --zero1\n"
    "shards AdamW's state over the ranks. A checkpoint resumes at any world size\n"
    "(its batch is the combined one; each rank then takes its share). The ranks\n"
    "must be given the same options and inputs: they compare them first. To stop a\n"
    "job, send mpirun SIGUSR1 (it passes it on) or a rank SIGINT or SIGTERM; mpirun\n"
    "itself, sent SIGINT or SIGTERM, gives the ranks 1 s to save (more with --mca\n"
    "odls_base_sigkill_timeout S) and exits 1.\n"
    "Exit codes: 0 done, 1 failed, 2 bad command line (or ranks that differ in it),\n"
    "130, 143, 138 stopped by SIGINT, SIGTERM, SIGUSR1.\n";

/* ---- the command line -------------------------------------------------------- */

typedef struct {
    const char *arch, *data, *config, *out, *svg, *resume, *ckpt, *prompt, *precision;
    int64_t steps, batch, seed, eval_every, stop_at, save_every, tokens, top_k;
    double lr, temperature, top_p;
    bool greedy, zero1, set_steps, set_batch, set_lr, set_config;
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

/* s for a message: control characters and bytes past ASCII are written as
 * escapes (\n, \t, \x01), so that no input can break a line or drive a
 * terminal. Returns buf (cap >= 8; a long s is cut short). */
static const char *escaped(const char *s, char *buf, size_t cap)
{
    size_t n = 0;
    for (; *s && n + 5 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '\n' || c == '\t' || c == '\r' || c == '\\')
            n += (size_t)snprintf(buf + n, cap - n, "\\%c", c == '\n' ? 'n' : c == '\t' ? 't'
                                                         : c == '\r' ? 'r' : '\\');
        else if (c < 0x20 || c >= 0x7f)
            n += (size_t)snprintf(buf + n, cap - n, "\\x%02x", c);
        else
            buf[n++] = (char)c;
    }
    buf[n] = '\0';
    return buf;
}

/* The numeric options' ranges; the four that a checkpoint also records are
 * shared with gpt_checkpoint.c, which checks the checkpoint's values. */
static const gpt_range seed_range = {"--seed", 0, 9.2e18, true};
static const gpt_range stop_at_range = {"--stop-at", 1, 10000000, true};
static const gpt_range save_every_range = {"--save-every", 0, 10000000, true};
static const gpt_range tokens_range = {"--tokens", 0, 1000000, true};
static const gpt_range top_k_range = {"--top-k", 0, 1000000, true};
static const gpt_range temperature_range = {"--temperature", 1e-6, 1e6, false};
static const gpt_range top_p_range = {"--top-p", 0, 1, false};

/* The whole of s as a number in r; integers are read as integers, so that
 * a seed keeps all its digits. */
static bool parse_number(const char *s, const gpt_range *r, double *real, int64_t *integer)
{
    char *end;
    errno = 0;
    double v = r->integer ? (double)(*integer = strtoll(s, &end, 10)) : strtod(s, &end);
    if (errno || end == s || *end || !gpt_in_range(r, v))
        return false;
    if (!r->integer)
        *real = v;
    return true;
}

/* Reads "--name value" pairs (and the flags --greedy, --help). train and
 * sample share one table; options of the other command are refused. 0, an
 * exit code, or -1 when --help printed the usage (exit 0). */
static int parse_options(int argc, char **argv, bool train, options *o)
{
    static const char *const train_only[] = {"--arch", "--data", "--config", "--steps",
                                             "--batch", "--lr", "--eval-every", "--out", "--svg",
                                             "--resume", "--stop-at", "--save-every",
                                             "--zero1", "--precision", NULL};
    static const char *const sample_only[] = {"--ckpt", "--prompt", "--tokens",
                                              "--temperature", "--top-k", "--top-p",
                                              "--greedy", NULL};
    for (int i = 2; i < argc; i++) {
        const char *name = argv[i];
        if (!strcmp(name, "--help") || !strcmp(name, "-h"))
            return fputs(usage_text, stdout), -1;
        bool known = !strcmp(name, "--seed");
        for (const char *const *p = train ? train_only : sample_only; *p; p++)
            known |= !strcmp(name, *p);
        char e[96];
        if (!known)
            return usage_error("unknown option '%s' for %s", escaped(name, e, sizeof e), argv[1]);
        if (!strcmp(name, "--greedy") || !strcmp(name, "--zero1")) { /* the flags */
            o->greedy |= name[2] == 'g';
            o->zero1 |= name[2] == 'z';
            continue;
        }
        if (i + 1 >= argc)
            return usage_error("%s needs a value", name);
        const char *v = argv[++i];
        const gpt_range *r = NULL;
        int64_t *iv = NULL;
        double *dv = NULL;
        if (!strcmp(name, "--arch")) o->arch = v;
        else if (!strcmp(name, "--data")) o->data = v;
        else if (!strcmp(name, "--config")) o->config = v, o->set_config = true;
        else if (!strcmp(name, "--out")) o->out = v;
        else if (!strcmp(name, "--svg")) o->svg = v;
        else if (!strcmp(name, "--resume")) o->resume = v;
        else if (!strcmp(name, "--ckpt")) o->ckpt = v;
        else if (!strcmp(name, "--prompt")) o->prompt = v;
        else if (!strcmp(name, "--precision")) o->precision = v;
        else if (!strcmp(name, "--steps")) r = &gpt_steps_range, iv = &o->steps, o->set_steps = true;
        else if (!strcmp(name, "--batch")) r = &gpt_batch_range, iv = &o->batch, o->set_batch = true;
        else if (!strcmp(name, "--lr")) r = &gpt_lr_range, dv = &o->lr, o->set_lr = true;
        else if (!strcmp(name, "--seed")) r = &seed_range, iv = &o->seed;
        else if (!strcmp(name, "--eval-every")) r = &gpt_eval_every_range, iv = &o->eval_every;
        else if (!strcmp(name, "--stop-at")) r = &stop_at_range, iv = &o->stop_at;
        else if (!strcmp(name, "--save-every")) r = &save_every_range, iv = &o->save_every;
        else if (!strcmp(name, "--tokens")) r = &tokens_range, iv = &o->tokens;
        else if (!strcmp(name, "--top-k")) r = &top_k_range, iv = &o->top_k;
        else if (!strcmp(name, "--temperature")) r = &temperature_range, dv = &o->temperature;
        else if (!strcmp(name, "--top-p")) r = &top_p_range, dv = &o->top_p;
        int64_t parsed = 0;
        if (r && !parse_number(v, r, dv, &parsed)) {
            gpt_range_error(r, "", escaped(v, e, sizeof e));
            return fputs(usage_text, stderr), EXIT_USAGE;
        }
        if (iv)
            *iv = parsed;
    }
    return 0;
}

/* Every option as a line "--name value", for the ranks of a job to compare
 * (gpt_par_agree): numbers as parsed, with their defaults; strings escaped.
 * --data and --resume are compared by content (gpt_par_inputs_agree); the three
 * that a resumed run takes from its checkpoint when not given say so. NULL
 * when out of memory. Freed by the caller. */
static char *options_text(const options *o)
{
    char *text = NULL, e[5][160];
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    if (!f)
        return NULL;
    const char *none = "(not given)", *saved = o->resume ? "(the checkpoint's)" : NULL;
    fprintf(f, "--arch %s\n--config %s\n--precision %s\n--out %s\n--svg %s\n--data %s\n"
            "--resume %s\n", o->arch ? escaped(o->arch, e[0], sizeof e[0]) : none,
            o->config ? escaped(o->config, e[1], sizeof e[1]) : none,
            o->precision ? escaped(o->precision, e[2], sizeof e[2]) : none,
            escaped(o->out, e[3], sizeof e[3]), escaped(o->svg, e[4], sizeof e[4]),
            o->data ? "given" : none, o->resume ? "given" : none);
    if (saved && !o->set_steps) fprintf(f, "--steps %s\n", saved);
    else fprintf(f, "--steps %lld\n", (long long)o->steps);
    if (saved && !o->set_batch) fprintf(f, "--batch %s\n", saved);
    else fprintf(f, "--batch %lld\n", (long long)o->batch);
    if (saved && !o->set_lr) fprintf(f, "--lr %s\n", saved);
    else fprintf(f, "--lr %.17g\n", o->lr);
    fprintf(f, "--seed %lld\n--eval-every %lld\n--stop-at %lld\n--save-every %lld\n--zero1 %s\n",
            (long long)o->seed, (long long)o->eval_every, (long long)o->stop_at,
            (long long)o->save_every, o->zero1 ? "on" : "off");
    return fclose(f) == 0 ? text : (free(text), NULL);
}

/* ---- training ---------------------------------------------------------------- */

typedef struct {
    lm *model;
    tg_params params;
    gpt_opt *opt;
    tg_rng *data_rng;                          /* the same stream on every rank */
    int64_t T, batch, steps, eval_every, step; /* batch: per rank; step: steps done */
    int rank, world;                           /* this process's place in the job */
    double lr;
    bool bf16;                                 /* --precision bf16 */
    double *loss, *val;                        /* per step; val NAN when not measured */
    const char *failure;                       /* why a step failed, if not the library */
} trainer;

/* Mean loss of one batch: x, y int64 [B, T]. Adds the graph only in grad mode. */
static tg_tensor *batch_loss(trainer *tr, const int64_t *x, const int64_t *y, int64_t B)
{
    tg_tensor *loss = NULL;
    lm_forward(tr->model, tg_from_data(TG_INT64, 2, (int64_t[]){B, tr->T}, x),
                   tg_from_data(TG_INT64, 2, (int64_t[]){B, tr->T}, y), &loss);
    return loss;
}

/* n int64 token ids for the rows of x and y, or NULL with tr->failure set. */
static int64_t *token_buffer(trainer *tr, int64_t n)
{
    int64_t *p = malloc(sizeof(int64_t) * (size_t)n);
    if (!p)
        tr->failure = "out of memory for a batch of tokens";
    return p;
}

/* One AdamW step on a fresh batch: warmup + cosine rate, gradients clipped
 * to norm 1. Every rank draws the whole combined batch of world x batch rows
 * from the one data stream and keeps its own rows (rank r: the r-th block),
 * so the step sees what one process with the combined batch would, at any
 * world size. This rank's loss, or NAN on error. */
static double train_step(trainer *tr, const dataset *d)
{
    int64_t B = tr->batch, T = tr->T, warmup = tr->steps / 10 < 100 ? tr->steps / 10 : 100;
    gpt_opt_set_lr(tr->opt, tg_lr_warmup_cosine(tr->step, warmup, tr->steps, tr->lr, tr->lr / 10));
    int64_t *x = token_buffer(tr, 2 * (B + 1) * T), *y = x + B * T, *skip = y + B * T;
    if (!x)
        return NAN;
    for (int64_t b = 0, mine = B * tr->rank; b < B * tr->world; b++) {
        bool keep = b >= mine && b < mine + B;
        int64_t *xr = keep ? x + (b - mine) * T : skip, *yr = keep ? y + (b - mine) * T : skip + T;
        if (d->task)
            task_row(d, tr->data_rng, false, T, xr, yr);
        else
            text_row(d, tr->data_rng, T, xr, yr);
    }
    tg_scope_begin();
    tg_tensor *loss = batch_loss(tr, x, y, B);
    double value = NAN;
    if (loss && gpt_opt_train(tr->opt, loss, 1.0) == 0)
        value = tg_item(loss);
    tg_scope_end();
    free(x);
    return value;
}

/* Validation loss on a fixed set (the same every time and at every world
 * size, and drawing nothing from the training generator, so it cannot change
 * the run): 256 held-out problems, or up to 8 combined batches of windows
 * spread evenly over the split. */
static double validation_loss(trainer *tr, const dataset *d)
{
    int64_t T = tr->T, rows = 256;
    if (!d->task) {
        int64_t windows = d->n_val > T ? d->n_val - T : 0;
        int64_t combined = tr->batch * tr->world; /* the same windows at every world size */
        rows = windows < 8 * combined ? windows : 8 * combined;
    }
    int64_t wT = d->task ? T : (d->n_val - 1 < T ? d->n_val - 1 : T); /* short splits: short rows */
    if (rows < 1)
        rows = 1;
    int64_t *x = token_buffer(tr, 2 * rows * wT), *y = x + rows * wT;
    if (!x)
        return NAN;
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
    int64_t chunk = 64; /* the ranks take turns with the chunks, and add up at the end */
    for (int64_t r = chunk * tr->rank; r < rows; r += chunk * tr->world) {
        int64_t n = rows - r < chunk ? rows - r : chunk;
        tg_scope_begin();
        sum += tg_item(batch_loss(tr, x + r * wT, y + r * wT, n)) * (double)n;
        tg_scope_end();
    }
    tr->T = saved_T;
    tg_set_grad_enabled(was);
    tg_rng_free(rng);
    free(x);
    return gpt_par_sum(&sum, 1) == 0 ? sum / (double)rows : NAN;
}

/* ---- progress ------------------------------------------------------------------ */

/* The progress line after tr's last step (gpt_plot.c prints it). */
static void progress(const trainer *tr, int64_t first, double started, bool tty)
{
    gpt_progress p = {tr->loss, tr->val, tr->step, tr->steps, first,
                      (double)(tr->batch * tr->world * tr->T), started, tty};
    gpt_print_progress(&p);
}

/* ---- checkpoints ------------------------------------------------------------------ */
/* One safetensors file holds everything a resumed run needs to continue bit
 * for bit (gpt_checkpoint.c reads and writes it). Every rank takes part (the
 * sharded optimizer's state is gathered); rank 0 alone writes the file, with
 * the combined batch, so that a run of any world size can take it up. */

static int save_run(const char *path, const trainer *tr, const dataset *d)
{
    tg_params state = {0};
    int rc = gpt_opt_state(tr->opt, &state) ? 1 : 0;
    if (rc)
        fprintf(stderr, "gpt: cannot gather the optimizer state: %s\n", tg_error_message());
    gpt_run run = {tr->model, &tr->params, &state, tr->data_rng, &d->vocab,
                   {tr->steps, tr->batch * tr->world, tr->eval_every, tr->lr, d->task, tr->bf16},
                   tr->loss, tr->val, tr->step};
    if (!rc && tr->rank == 0)
        rc = gpt_checkpoint_save(path, &run);
    tg_params_clear(&state);
    return rc;
}

/* Per-step loss arrays for a run of tr->steps, or 1 after saying why not. */
static int alloc_history(trainer *tr)
{
    tr->loss = calloc((size_t)tr->steps, sizeof(double));
    tr->val = calloc((size_t)tr->steps, sizeof(double));
    if (!tr->loss || !tr->val)
        return fprintf(stderr, "gpt: out of memory for the losses of %lld steps\n",
                       (long long)tr->steps), 1;
    return 0;
}

/* Restores everything else a run needs; settings not given on the command
 * line come from the checkpoint, checked as the command line is. */
static int resume(const char *path, const tg_params *ck, trainer *tr, const options *o)
{
    gpt_settings s;
    if (gpt_checkpoint_load_settings(path, ck, &s))
        return 1;
    const char *what = "optimizer state";
    int rc = gpt_opt_load_state(tr->opt, ck);
    if (rc == 0 && (what = "train.rng_data",
                    tg_rng_set_state_tensor(tr->data_rng, tg_params_find(ck, what)) < 0))
        rc = -1;
    if (rc == 0 && lm_rng(tr->model) && (what = "train.rng_dropout",
                    tg_rng_set_state_tensor(lm_rng(tr->model), tg_params_find(ck, what)) < 0))
        rc = -1;
    if (rc)
        return fprintf(stderr, "gpt: %s cannot be resumed: its %s is not usable: %s\n", path,
                       what, tg_error_code() ? tg_error_message() : "missing or malformed"), 1;
    if (!o->set_batch && s.batch % tr->world)
        return fprintf(stderr, "gpt: %s was trained with a combined batch of %lld, which %d ranks "
                       "cannot share evenly; give --batch\n", path, (long long)s.batch,
                       tr->world), 1;
    tr->steps = o->set_steps ? o->steps : s.steps;
    tr->batch = o->set_batch ? o->batch : s.batch / tr->world;
    tr->lr = o->set_lr ? o->lr : s.lr;
    tr->eval_every = o->eval_every ? o->eval_every : s.eval_every;
    tr->bf16 = o->precision ? !strcmp(o->precision, "bf16") : s.bf16;
    tr->step = gpt_opt_steps(tr->opt);
    if (tr->step >= tr->steps)
        return fprintf(stderr, "gpt: %s already ran %lld of %lld steps; give more --steps\n",
                       path, (long long)tr->step, (long long)tr->steps), 1;
    if (alloc_history(tr))
        return 1;
    return gpt_checkpoint_load_history(path, ck, tr->step, tr->loss, tr->val);
}

/* ---- where the outputs go ------------------------------------------------------ */
/* An output must not be an input, nor the other output: --out over --data
 * would destroy the text, --svg over --out the checkpoint (gpt_same_file
 * compares inodes, or resolved paths for files not made yet). */

/* 0, or the usage error for an output that is an input or the other output. */
static int check_outputs(const options *o)
{
    const struct {
        const char *out_name, *out, *in_name, *in;
    } pairs[] = {
        {"--out", o->out, "--data", o->data},   {"--out", o->out, "--svg", o->svg},
        {"--svg", o->svg, "--data", o->data},   {"--svg", o->svg, "--resume", o->resume},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        if (pairs[i].in && gpt_same_file(pairs[i].out, pairs[i].in))
            return usage_error("%s %s is the same file as %s %s; writing it would destroy %s",
                               pairs[i].out_name, pairs[i].out, pairs[i].in_name, pairs[i].in,
                               pairs[i].in_name[2] == 's' ? "the other output" : "the input");
    return 0;
}

/* ---- gpt train ---------------------------------------------------------------------- */

static int stop_signal;        /* the signal that stopped the run, as every rank agreed */
static bool stopped_by_launcher; /* ... sent by the MPI launcher */

/* The named config differs from a checkpoint's model c in a size. */
static bool config_differs(const lm_config *c, const char *name)
{
    lm_config named;
    lm_config_named(c->arch, name, c->vocab_size, &named);
    return named.block_size != c->block_size || named.n_layer != c->n_layer ||
           named.n_head != c->n_head || named.n_embd != c->n_embd ||
           named.n_kv_head != c->n_kv_head || named.hidden_size != c->hidden_size;
}

/* The data and a model for it: from the checkpoint when resuming (then a
 * --data file must have the checkpoint's vocabulary), else new from seed. */
static int setup(const options *o, dataset *d, trainer *tr, tg_params *ck)
{
    lm_arch arch = LM_GPT;
    lm_config c;
    char e[96];
    if (o->arch && !lm_arch_parse(o->arch, &arch))
        return usage_error("--arch: unknown '%s' (gpt or llama)", escaped(o->arch, e, sizeof e));
    if (!lm_config_named(arch, o->config, 0, &c))
        return usage_error("--config: unknown '%s' (task, tiny, small or medium)",
                           escaped(o->config, e, sizeof e));
    if (o->precision && strcmp(o->precision, "fp32") && strcmp(o->precision, "bf16"))
        return usage_error("--precision: unknown '%s' (fp32 or bf16)",
                           escaped(o->precision, e, sizeof e));
    d->task = !o->data;
    if (o->resume) {
        gpt_vocab saved;
        gpt_settings s;
        if (gpt_checkpoint_load_model(o->resume, ck, &tr->model, &saved) ||
            gpt_checkpoint_load_settings(o->resume, ck, &s))
            return 1;
        const char *saved_arch = lm_arch_name(lm_config_of(tr->model)->arch);
        if (o->arch && lm_config_of(tr->model)->arch != arch)
            return fprintf(stderr, "gpt: %s is a %s checkpoint; resume it with --arch %s or "
                           "without --arch\n", o->resume, saved_arch, saved_arch), 1;
        if (o->set_config && config_differs(lm_config_of(tr->model), o->config))
            return fprintf(stderr, "gpt: %s does not have the shape of --config %s; resume it "
                           "without --config\n", o->resume, escaped(o->config, e, sizeof e)), 1;
        if (s.task != d->task)
            return fprintf(stderr, "gpt: %s was trained %s; resume it the same way\n", o->resume,
                           s.task ? "on the built-in task, without --data" : "with --data"), 1;
        tr->T = d->task ? PROBLEM_LEN - 1 : lm_config_of(tr->model)->block_size;
        if (d->task && lm_config_of(tr->model)->block_size < tr->T)
            return fprintf(stderr, "gpt: %s has a context of %lld, shorter than the task's %lld\n",
                           o->resume, (long long)lm_config_of(tr->model)->block_size,
                           (long long)tr->T), 1;
        if (!d->task && dataset_load_text(d, o->data, tr->T + 1))
            return 1;
        if (!d->task && (d->vocab.size != saved.size ||
                         memcmp(d->vocab.chars, saved.chars, (size_t)saved.size)))
            return fprintf(stderr, "gpt: %s has other characters than the text %s was trained on\n",
                           o->data, o->resume), 1;
        *d = (dataset){.task = d->task, .text = d->text, .n_train = d->n_train, .n_val = d->n_val};
        dataset_set_vocab(d, saved.chars, saved.size);
        return 0;
    }
    tr->T = d->task ? PROBLEM_LEN - 1 : c.block_size;
    if (d->task)
        dataset_use_task(d);
    else if (dataset_load_text(d, o->data, tr->T + 1))
        return 1;
    c.vocab_size = d->vocab.size;
    tg_rng *init = tg_rng_new((uint64_t)o->seed);
    tr->model = lm_new(&c, init);
    tg_rng_free(init);
    if (!tr->model)
        return fprintf(stderr, "gpt: cannot build the model: %s\n", tg_error_message()), 1;
    return 0;
}

/* The run, ready on every rank or on none: after each step that can fail
 * on one rank alone (its data file, its copy of the checkpoint) the ranks
 * agree before going on, so that a failure ends the job, not hangs it. */
static int prepare(const options *o, dataset *d, trainer *tr, tg_params *ck)
{
    int rc = setup(o, d, tr, ck);
    if (!gpt_par_all_ok(rc == 0))
        return rc ? rc : 1;
    if (!gpt_par_inputs_agree(o->data ? d : NULL, o->resume, ck))
        return EXIT_USAGE;
    tr->data_rng = tg_rng_new((uint64_t)o->seed + 1);
    bool ok = tr->data_rng && lm_params(tr->model, &tr->params) == 0;
    if (!ok)
        fprintf(stderr, "gpt: %s\n", tg_error_message());
    if (!gpt_par_all_ok(ok) || !(tr->opt = gpt_opt_new(&tr->params, o->zero1, o->lr, 0.1)))
        return 1;
    if (o->resume) {
        rc = resume(o->resume, ck, tr, o);
    } else {
        tr->steps = o->steps;
        tr->batch = o->batch;
        tr->lr = o->lr;
        tr->bf16 = o->precision && !strcmp(o->precision, "bf16");
        tr->eval_every = o->eval_every ? o->eval_every : tr->steps / 20 > 100 ? 100
                         : tr->steps / 20 < 1 ? 1 : tr->steps / 20;
        rc = alloc_history(tr);
    }
    if (!rc && !gpt_in_range(&gpt_batch_range, (double)(tr->batch * tr->world)))
        rc = (fprintf(stderr, "gpt: --batch %lld on %d ranks is a combined batch of %lld, more "
                      "than %.0f\n", (long long)tr->batch, tr->world,
                      (long long)(tr->batch * tr->world), gpt_batch_range.hi), 1);
    return gpt_par_all_ok(rc == 0) ? rc : rc ? rc : 1;
}

/* Training on far less text than it reads (or on barely one context of it)
 * learns the file by heart, slowly: say so before spending the time. */
static void warn_if_data_is_small(const trainer *tr, const dataset *d)
{
    double reads = (double)(tr->steps - tr->step) * (double)(tr->batch * tr->world) * (double)tr->T;
    if (tr->rank != 0 || d->task || (reads <= 100 * (double)d->n_train && d->n_train >= 2 * (tr->T + 1)))
        return;
    fprintf(stderr, "gpt: warning: the run reads %.0f characters, %.0f times the %lld of the "
            "training split (%lld windows of context + 1); the model will learn this text by "
            "heart. A larger --data file, or fewer --steps, is a better use of the time.\n",
            reads, reads / (double)d->n_train, (long long)d->n_train,
            (long long)(d->n_train - tr->T));
}

/* Rank 0's step time, throughput and communication since the loop began. */
static void report_speed(const trainer *tr, int64_t steps, double secs)
{
    printf("trained %lld steps in %.1f s (%.2f steps/s, %.0f tok/s over %d rank%s)\n",
           (long long)steps, secs, (double)steps / secs,
           (double)(steps * tr->batch * tr->world * tr->T) / secs, tr->world,
           tr->world > 1 ? "s" : "");
    gpt_comm c = gpt_opt_comm(tr->opt);
    if (tr->world > 1 && c.steps > 0)
        printf("communication per step: %.2f ms in reduce calls, %.2f ms of it exposed after "
               "backward (%d buckets, %.2f MB of gradients); step %.2f ms\n",
               1e3 * c.comm_seconds / (double)c.steps, 1e3 * c.exposed_seconds / (double)c.steps,
               c.buckets, (double)c.bytes_per_step / 1e6, 1e3 * secs / (double)steps);
}

/* The loop: one step, a validation loss every eval_every steps, progress, a
 * checkpoint every save_every steps. Stops early at --stop-at or on SIGINT
 * or SIGTERM; the caller writes the final checkpoint. */
static int train_loop(trainer *tr, const dataset *d, const options *o)
{
    int64_t first = tr->step;
    double started = gpt_now();
    /* under mpirun a rank's stdout is a pseudo-terminal that ends in a log */
    bool tty = isatty(STDOUT_FILENO) && !gpt_par_launched();
    gpt_stop_watch();
    while (tr->step < tr->steps && !(o->stop_at && tr->step >= o->stop_at) && !stop_signal) {
        int64_t s = tr->step + 1;
        double loss = train_step(tr, d), val = NAN;
        if (gpt_par_sum(&loss, 1)) /* the combined batch's loss: the ranks' mean */
            loss = NAN;
        loss /= (double)tr->world;
        bool measure = s % tr->eval_every == 0 || s == tr->steps;
        if (!isnan(loss) && measure)
            val = validation_loss(tr, d);
        if (isnan(loss) || (measure && isnan(val)))
            return fprintf(stderr, "\ngpt: training failed at step %lld: %s\n", (long long)s,
                           tr->failure ? tr->failure : tg_error_code() ? tg_error_message()
                           : "the loss is NaN (try a lower --lr)"), 1;
        tr->loss[tr->step] = loss;
        tr->val[tr->step] = val;
        tr->step = s;
        progress(tr, first, started, tty);
        stop_signal = gpt_stop_requested(&stopped_by_launcher);
        if (o->save_every && tr->step % o->save_every == 0 && tr->step < tr->steps &&
            tr->step != o->stop_at && !stop_signal && save_run(o->out, tr, d) == 0 &&
            tr->rank == 0) {
            printf("%ssaved %s at step %lld\n", tty ? "\r\033[K" : "", o->out,
                   (long long)tr->step);
            fflush(stdout);
        }
    }
    if (tty && tr->step < tr->steps)
        printf("\n");
    report_speed(tr, tr->step - first, gpt_now() - started);
    return 0;
}

/* Prints what is about to be trained, and a warning when the text is small. */
static void describe(const trainer *tr, const dataset *d, const options *o)
{
    char shape[160];
    lm_config_describe(lm_config_of(tr->model), shape, sizeof shape);
    printf("training %son %s: %s, %lld parameters\n",
           lm_config_of(tr->model)->arch == LM_LLAMA ? "a Llama " : "",
           d->task ? "3-digit addition (built-in task)" : o->data, shape,
           (long long)tg_params_numel(&tr->params));
    printf("%sAdamW lr %g (warmup + cosine), batch %lld, steps %lld, precision %s%s\n",
           o->zero1 && tr->world > 1 ? "sharded " : "", tr->lr, (long long)tr->batch,
           (long long)tr->steps, tr->bf16 ? "bf16 (bfloat16 products, float32 sums)" : "fp32",
           o->resume ? ", resumed" : "");
    if (tr->world > 1)
        printf("data-parallel over %d ranks: batch %lld per rank, %lld combined\n", tr->world,
               (long long)tr->batch, (long long)(tr->batch * tr->world));
    if (!d->task)
        printf("text: %lld characters for training, %lld for validation\n",
               (long long)d->n_train, (long long)d->n_val);
    fflush(stdout);
    warn_if_data_is_small(tr, d);
}

/* The end of a run: the final line, the checkpoint and the picture, how to
 * go on if it stopped early, and the accuracy on the task. An exit code. */
static int finish(trainer *tr, const dataset *d, const options *o)
{
    double val = tr->val[tr->step - 1];
    if (isnan(val) && !stop_signal) /* a stopped job may have a second before SIGKILL */
        val = validation_loss(tr, d);
    printf("final: step %lld loss %.6f", (long long)tr->step, tr->loss[tr->step - 1]);
    printf(isnan(val) ? "\n" : " val %.6f\n", val);
    int rc = save_run(o->out, tr, d);
    if (!rc && tr->rank == 0)
        rc = gpt_write_loss_svg(o->svg, tr->loss, tr->val, tr->step);
    if (!gpt_par_all_ok(rc == 0))
        return 1;
    printf("saved %s and %s\n", o->out, o->svg);
    if (tr->step < tr->steps)
        printf("stopped at step %lld of %lld%s; continue with --resume %s\n", (long long)tr->step,
               (long long)tr->steps, gpt_stop_reason(stop_signal, stopped_by_launcher), o->out);
    if (stop_signal) /* before MPI_Finalize, which a stopping mpirun may cut short */
        return fflush(stdout), 128 + stop_signal;
    if (d->task && tr->step == tr->steps && tr->rank == 0) {
        printf("held-out problems (never trained on; greedy generation):\n");
        double acc = task_accuracy(tr->model, d, (uint64_t)o->seed + 2, 500, true);
        printf("exact-match accuracy: %.1f%% of 500\n", 100 * acc);
    }
    return 0;
}

static int cmd_train(int argc, char **argv)
{
    options o = {.config = NULL, .out = "gpt.safetensors", .svg = "loss_curve.svg", .steps = 1500,
                 .batch = 64, .lr = 1e-3, .seed = 1337, .save_every = 500};
    int rc = parse_options(argc, argv, true, &o);
    if (!gpt_par_all_ok(rc == 0)) /* a rank's bad command line ends every rank */
        return rc < 0 ? 0 : rc ? rc : EXIT_USAGE;
    if (!o.config)
        o.config = o.data ? "small" : "task";
    if (o.data && !o.set_batch)
        o.batch = 32;
    if (o.data && !o.set_steps)
        o.steps = 2000;
    /* With no position embedding the Llama works out where the answer's
     * digits are late, after a long plateau: the GPT's 1500 steps of 64 leave
     * it near 13% on the task, and at lr 1e-3 even 5000 steps may end on the
     * plateau, as the thread count changes the rounding; 5000 of 32 at 3e-3
     * leave it well behind. */
    lm_arch arch;
    bool llama_task = !o.data && o.arch && lm_arch_parse(o.arch, &arch) && arch == LM_LLAMA;
    if (llama_task && !o.set_steps)
        o.steps = 5000;
    if (llama_task && !o.set_batch)
        o.batch = 32;
    if (llama_task && !o.set_lr)
        o.lr = 3e-3;
    rc = check_outputs(&o);
    char *text = rc ? NULL : options_text(&o);
    if (!rc && !text)
        rc = (fprintf(stderr, "gpt: out of memory\n"), 1);
    if (!gpt_par_all_ok(rc == 0))
        return rc ? rc : 1;
    bool agree = gpt_par_agree(text);
    free(text);
    if (!agree)
        return EXIT_USAGE;
    if (gpt_par_rank() == 0 && tg_safetensors_check_writable(o.out) < 0)
        rc = (fprintf(stderr, "gpt: cannot write --out %s: %s\n", o.out, tg_error_message()), 1);
    if (!rc && gpt_par_rank() == 0 && tg_path_check_writable(o.svg) < 0)
        rc = (fprintf(stderr, "gpt: cannot write --svg %s: %s\n", o.svg, tg_error_message()), 1);
    if (!gpt_par_all_ok(rc == 0)) /* only rank 0 writes them */
        return rc ? rc : 1;
    dataset d = {0};
    trainer tr = {.rank = gpt_par_rank(), .world = gpt_par_size()};
    tg_params ck = {0};
    rc = prepare(&o, &d, &tr, &ck);
    tg_params_clear(&ck);
    if (!rc) {
        describe(&tr, &d, &o);
        /* the whole run on this thread: every step's forward and backward */
        tg_set_matmul_precision(tr.bf16 ? TG_PRECISION_BF16 : TG_PRECISION_FLOAT32);
        rc = train_loop(&tr, &d, &o);
    }
    if (!rc && tr.step > 0)
        rc = finish(&tr, &d, &o);
    gpt_opt_free(tr.opt);
    tg_params_clear(&tr.params);
    lm_free(tr.model);
    tg_rng_free(tr.data_rng);
    free(tr.loss);
    free(tr.val);
    free(d.text);
    return rc;
}

/* ---- gpt sample ------------------------------------------------------------------------ */

/* Prints each token as it is made, so that a long sample shows as it goes;
 * stops generation if stdout can no longer be written. */
static int print_token(int64_t token, void *ctx)
{
    const dataset *d = ctx;
    putchar(d->vocab.chars[token]);
    return fflush(stdout) != 0 || ferror(stdout);
}

/* The prompt as token ids (ids, prompt length), or 1 after naming the first
 * character the model does not know. */
static int encode_prompt(const dataset *d, const char *prompt, int64_t *ids)
{
    for (int64_t i = 0; prompt[i]; i++)
        if ((ids[i] = d->ids[(unsigned char)prompt[i]]) < 0) {
            char e[8];
            fprintf(stderr, "gpt: the prompt's character '%s' (byte %d, at %lld) is not in the "
                    "model's vocabulary\n", escaped((char[]){prompt[i], 0}, e, sizeof e),
                    (unsigned char)prompt[i], (long long)i);
            return 1;
        }
    return 0;
}

static int cmd_sample(int argc, char **argv)
{
    options o = {.prompt = "\n", .tokens = 200, .temperature = 1.0, .seed = 1337};
    int rc = parse_options(argc, argv, false, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (!o.ckpt)
        return usage_error("sample needs --ckpt FILE");
    int64_t len = (int64_t)strlen(o.prompt);
    if (len == 0)
        return usage_error("--prompt must not be empty");
    tg_params ck = {0};
    lm *model = NULL;
    dataset d = {0};
    rc = gpt_checkpoint_load_model(o.ckpt, &ck, &model, &d.vocab);
    tg_params_clear(&ck);
    dataset_set_vocab(&d, d.vocab.chars, d.vocab.size);
    int64_t *ids = malloc(sizeof(int64_t) * (size_t)len);
    int64_t *out = malloc(sizeof(int64_t) * (size_t)(len + o.tokens));
    if (!rc && (!ids || !out))
        rc = (fprintf(stderr, "gpt: out of memory for %lld tokens\n", (long long)(len + o.tokens)), 1);
    if (!rc)
        rc = encode_prompt(&d, o.prompt, ids);
    tg_rng *rng = tg_rng_new((uint64_t)o.seed);
    /* past the model's context the window slides, as nanoGPT's sample.py does */
    tg_sample_options so = {.temperature = o.temperature, .top_k = o.top_k, .top_p = o.top_p,
                            .greedy = o.greedy, .slide = true};
    if (!rc) {
        fputs(o.prompt, stdout);
        fflush(stdout);
        if (lm_generate_each(model, ids, len, o.tokens, &so, rng, out, print_token, &d) < 0)
            rc = (fprintf(stderr, "\ngpt: sampling failed: %s\n", tg_error_message()), 1);
        else if (putchar('\n') == EOF || fflush(stdout) != 0)
            rc = (fprintf(stderr, "gpt: cannot write the sample: %s\n", strerror(errno)), 1);
    }
    tg_rng_free(rng);
    free(ids);
    free(out);
    lm_free(model);
    return rc;
}

int main(int argc, char **argv)
{
    int rc;
    if (argc >= 2 && !strcmp(argv[1], "train")) {
        if (gpt_par_init(&argc, &argv))
            return 1;
        if (gpt_par_rank() != 0) /* rank 0 reports; every rank's errors go to stderr */
            (void)!freopen("/dev/null", "w", stdout);
        rc = cmd_train(argc, argv);
        gpt_par_finish();
    }
    else if (argc >= 2 && !strcmp(argv[1], "sample"))
        rc = cmd_sample(argc, argv);
    else if (argc >= 2 && (!strcmp(argv[1], "help") || !strcmp(argv[1], "--help") ||
                           !strcmp(argv[1], "-h")))
        return fputs(usage_text, stdout), 0;
    else {
        char e[96];
        return usage_error("unknown command '%s'",
                           argc >= 2 ? escaped(argv[1], e, sizeof e) : "(none)");
    }
    if (tg_live_tensors() != 0)
        fprintf(stderr, "gpt: %lld tensors leaked\n", (long long)tg_live_tensors());
    return rc;
}
