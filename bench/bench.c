/* The benchmark program: runs the configs of bench/README.md with
 * tensorgrad and prints one JSON line per config, with the keys, metric names
 * and warmup/repetition counts of bench/torch_ref.py, so that
 * bench/compare.py can join the two; a first line says what the library picked.
 * Each config runs at each --precision (fp32, then bf16: tg_set_matmul_precision
 * around the whole config), and its lines say which, as torch_ref.py's do.
 * Run: build/bench/bench [--threads N] [--precision fp32|bf16|both] [CONFIG ...] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <tensorgrad/tensorgrad.h>

#include "peak.h"

/* --quick shrinks every config to a smoke test (tests/test_bench.c): the
 * lines keep their keys, the numbers mean nothing. */
static int quick;

/* ---- timing and output ----------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Starts a new peak RSS for the config about to run: Linux (4.0 and later)
 * resets the VmHWM of /proc/self/status when "5" is written to clear_refs.
 * Where it cannot, peak_rss_mb falls back to the process's whole peak. */
static bool peak_reset;

static void reset_peak_rss(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    peak_reset = f && fputs("5", f) >= 0;
    if (f && fclose(f) != 0)
        peak_reset = false;
}

/* The peak RSS since reset_peak_rss, in MiB (as torch_ref.py's ru_maxrss /
 * 1024), or the process's since it started when the reset failed. */
static double peak_rss_mb(void)
{
    FILE *f = peak_reset ? fopen("/proc/self/status", "r") : NULL;
    char line[256];
    long kib = -1;
    while (f && kib < 0 && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kib) != 1)
            kib = -1;
    if (f)
        fclose(f);
    if (kib >= 0)
        return (double)kib / 1024.0;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0; /* ru_maxrss is in KiB on Linux */
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One timed unit of work: 0, or -1 after recording a tensorgrad error. */
typedef int (*bench_fn)(void *ctx);

/* torch_ref.py's timed(): warmup untimed calls, then the median of reps timed
 * calls (the upper median for an even count, as sorted[len // 2]). Seconds,
 * or -1 if a call failed. */
static double timed(bench_fn fn, void *ctx, int warmup, int reps)
{
    double t[64];
    if (reps > 64)
        reps = 64;
    for (int i = 0; i < warmup; i++)
        if (fn(ctx) != 0)
            return -1;
    for (int i = 0; i < reps; i++) {
        double t0 = now_s();
        if (fn(ctx) != 0)
            return -1;
        t[i] = now_s() - t0;
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp_double);
    return t[reps / 2];
}

/* Prints one line as Python's json.dumps does, keys in torch_ref.py's order:
 * config, threads, [extra_head], metric, value, unit, [extra_tail], precision,
 * peak_rss_mb; the precision is the thread's matmul precision.
 * The extras are preformatted '"key": value' fragments or NULL. */
static void emit(const char *config, int threads, const char *extra_head, const char *metric,
                 double value, int decimals, const char *unit, const char *extra_tail)
{
    printf("{\"config\": \"%s\", \"threads\": %d, ", config, threads);
    if (extra_head)
        printf("%s, ", extra_head);
    printf("\"metric\": \"%s\", \"value\": %.*f, \"unit\": \"%s\", ", metric, decimals, value,
           unit);
    if (extra_tail)
        printf("%s, ", extra_tail);
    printf("\"precision\": \"%s\", \"peak_rss_mb\": %.1f}\n",
           tg_precision_name(tg_matmul_precision()), peak_rss_mb());
    fflush(stdout);
}

/* Reports a failed benchmark on stderr; the caller moves on to the next one. */
static int fail(const char *config)
{
    fprintf(stderr, "bench: %s failed: %s\n", config, tg_error_message());
    tg_error_clear();
    return -1;
}

/* ---- peaks ------------------------------------------------------------------------ */

/* The CPU's peaks, measured at start: each matmul line says what share of
 * the one it is bound by it reached. */
static bench_peaks peaks;

/* The peak a product of this precision is bound by at threads threads (1
 * or the bench's count): float32 FMAs, or for bf16 the units the library
 * runs them on (tg_build_info's bf16_gemm; converting runs float32 FMAs). */
static double peak_for(bool bf16, int threads)
{
    int t = threads > 1;
    if (!bf16)
        return peaks.fp32[t];
    tg_build_info info;
    tg_build_info_get(&info);
    return strcmp(info.bf16_gemm, "amx") == 0           ? peaks.amx[t]
           : strcmp(info.bf16_gemm, "avx512_bf16") == 0 ? peaks.dpbf16[t]
                                                        : peaks.fp32[t];
}

/* ---- matmul ----------------------------------------------------------------------- */

typedef struct {
    tg_tensor *a, *b;
    int reps;
} matmul_ctx;

/* A batch of reps products, each released at once as PyTorch frees its own. */
static int matmul_batch(void *p)
{
    matmul_ctx *c = p;
    for (int i = 0; i < c->reps; i++) {
        tg_tensor *y = tg_matmul(c->a, c->b);
        if (!y)
            return -1;
        tg_release(y);
    }
    return 0;
}

/* The six shapes at the thread's matmul precision, as torch_ref.py's lines
 * plus the share of peak_for's peak (and, as every line, the precision). */
static int bench_matmul(int threads)
{
    bool bf16 = tg_matmul_precision() == TG_PRECISION_BF16;
    static const int64_t shapes[][3] = {{64, 64, 64},     {256, 256, 256},  {512, 512, 512},
                                        {1024, 1024, 1024}, {1024, 384, 128}, {2048, 1152, 384}};
    int nshapes = quick ? 2 : 6;
    tg_rng *rng = tg_rng_new(0);
    int status = 0;
    for (int s = 0; s < nshapes && status == 0; s++) {
        int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        double flops = 2.0 * (double)m * (double)n * (double)k;
        matmul_ctx c = {tg_randn(rng, TG_FLOAT32, 2, (int64_t[]){m, k}),
                        tg_randn(rng, TG_FLOAT32, 2, (int64_t[]){k, n}), (int)(2e9 / flops)};
        if (c.reps < 3 || quick)
            c.reps = 3;
        double dt = (c.a && c.b) ? timed(matmul_batch, &c, 1, quick ? 1 : 5) : -1;
        tg_release(c.a);
        tg_release(c.b);
        if (dt < 0) {
            status = fail("matmul");
            break;
        }
        char shape[96];
        snprintf(shape, sizeof shape, "\"shape\": [%lld, %lld, %lld]", (long long)m, (long long)n,
                 (long long)k);
        double gflops = flops / (dt / c.reps) / 1e9, peak = peak_for(bf16, threads);
        char tail[96];
        snprintf(tail, sizeof tail, "\"peak_share\": %.3f", peak > 0 ? gflops / peak : 0.0);
        emit("matmul", threads, shape, "gflops", gflops, 1, "GFLOP/s", tail);
    }
    tg_rng_free(rng);
    return status;
}

/* ---- attn-toy: the single-head attention LM of the attention tutorial --------------- */

enum { TOY_D = 32, TOY_CTX = 16, TOY_BATCH = 32, TOY_STEPS = 800 };

typedef struct {
    int64_t vocab;
    tg_embedding_module *tok, *pos;       /* [V, D], [CTX, D] */
    tg_linear *wq, *wk, *wv, *wo, *head;  /* D->D bias-free, head D->V with bias */
    tg_params ps;
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
    tg_params_clear(&m->ps);
}

static int toy_init(toy_model *m, int64_t vocab, tg_rng *rng)
{
    m->vocab = vocab;
    m->tok = tg_embedding_module_new(vocab, TOY_D, TG_FLOAT32, rng);
    m->pos = tg_embedding_module_new(TOY_CTX, TOY_D, TG_FLOAT32, rng);
    m->wq = tg_linear_new(TOY_D, TOY_D, false, TG_FLOAT32, rng);
    m->wk = tg_linear_new(TOY_D, TOY_D, false, TG_FLOAT32, rng);
    m->wv = tg_linear_new(TOY_D, TOY_D, false, TG_FLOAT32, rng);
    m->wo = tg_linear_new(TOY_D, TOY_D, false, TG_FLOAT32, rng);
    m->head = tg_linear_new(TOY_D, vocab, true, TG_FLOAT32, rng);
    if (tg_embedding_module_params(m->tok, "tok", &m->ps) ||
        tg_embedding_module_params(m->pos, "pos", &m->ps) ||
        tg_linear_params(m->wq, "attn.W_q", &m->ps) || tg_linear_params(m->wk, "attn.W_k", &m->ps) ||
        tg_linear_params(m->wv, "attn.W_v", &m->ps) || tg_linear_params(m->wo, "attn.W_o", &m->ps) ||
        tg_linear_params(m->head, "head", &m->ps))
        return -1;
    return 0;
}

/* x int64 [B, CTX] -> logits [B*CTX, V]. The causal softmax(q k^T / sqrt(D)) v
 * is tg_scaled_dot_product_attention, the library's own spelling of it. */
static tg_tensor *toy_forward(const toy_model *m, const tg_tensor *x)
{
    tg_tensor *h = tg_add(tg_embedding_module_forward(m->tok, x), m->pos->weight); /* [B, CTX, D] */
    tg_tensor *q = tg_linear_forward(m->wq, h);
    tg_tensor *k = tg_linear_forward(m->wk, h);
    tg_tensor *v = tg_linear_forward(m->wv, h);
    tg_tensor *a = tg_scaled_dot_product_attention(q, k, v, NULL, 0.0, true, 0.0, NULL, NULL);
    tg_tensor *logits = tg_linear_forward(m->head, tg_linear_forward(m->wo, a)); /* [B, CTX, V] */
    return tg_reshape(logits, 2, (int64_t[]){-1, m->vocab});
}

static int bench_attn_toy(int threads)
{
    static const char unit[] = "ababababababab abc abc abc xyzxyzxyz";
    int64_t n = (int64_t)strlen(unit) * 100;
    int64_t *data = malloc((size_t)n * sizeof *data);
    int stoi[256] = {0}, seen[256] = {0};
    int64_t vocab = 0;
    for (size_t i = 0; unit[i]; i++)
        seen[(unsigned char)unit[i]] = 1;
    for (int c = 0; c < 256; c++) /* sorted distinct characters, as sorted(set(text)) */
        if (seen[c])
            stoi[c] = (int)vocab++;
    for (int64_t i = 0; data && i < n; i++)
        data[i] = stoi[(unsigned char)unit[i % (int64_t)strlen(unit)]];

    tg_rng *rng = tg_rng_new(0);
    toy_model m = {0};
    tg_optim *opt = NULL;
    int ok = data && toy_init(&m, vocab, rng) == 0 &&
             (opt = tg_adam_new(&m.ps, 3e-3, 0.9, 0.999, 1e-8, 0.0)) != NULL;
    int64_t x[TOY_BATCH * TOY_CTX], y[TOY_BATCH * TOY_CTX];
    double loss_value = NAN, t0 = now_s();
    int steps = quick ? 20 : TOY_STEPS;
    for (int step = 0; ok && step < steps; step++) {
        for (int b = 0; b < TOY_BATCH; b++) { /* windows start in [0, n - CTX - 1) */
            int64_t start = (int64_t)(tg_rng_uniform01(rng) * (double)(n - TOY_CTX - 1));
            memcpy(x + b * TOY_CTX, data + start, TOY_CTX * sizeof *x);
            memcpy(y + b * TOY_CTX, data + start + 1, TOY_CTX * sizeof *y);
        }
        tg_scope_begin();
        tg_tensor *xt = tg_from_data(TG_INT64, 2, (int64_t[]){TOY_BATCH, TOY_CTX}, x);
        tg_tensor *yt = tg_from_data(TG_INT64, 1, (int64_t[]){TOY_BATCH * TOY_CTX}, y);
        tg_tensor *loss = tg_cross_entropy(toy_forward(&m, xt), yt, -100);
        ok = loss && tg_backward(loss, NULL) == 0 && tg_optim_step(opt) == 0;
        tg_optim_zero_grad(opt);
        if (ok)
            loss_value = tg_item(loss);
        tg_scope_end();
    }
    double dt = now_s() - t0;
    tg_optim_free(opt);
    toy_free(&m);
    tg_rng_free(rng);
    free(data);
    if (!ok)
        return fail("attn-toy");
    char extra[64];
    snprintf(extra, sizeof extra, "\"final_loss\": %.4f", loss_value);
    emit("attn-toy", threads, NULL, "train_800_steps", dt, 3, "s", extra);
    return 0;
}

/* ---- one training step: forward, loss, backward, optimizer ---------------------------- */

typedef tg_tensor *(*loss_fn)(void *model, const tg_tensor *x, const tg_tensor *y);

typedef struct {
    void *model;
    loss_fn loss;
    const tg_tensor *x, *y;
    tg_optim *opt;
} step_ctx;

static int train_step(void *p)
{
    step_ctx *c = p;
    tg_scope_begin();
    tg_tensor *loss = c->loss(c->model, c->x, c->y);
    int ok = loss && tg_backward(loss, NULL) == 0 && tg_optim_step(c->opt) == 0;
    tg_optim_zero_grad(c->opt);
    tg_scope_end();
    return ok ? 0 : -1;
}

/* ---- encoder: 2 stacked post-norm encoder layers ------------------------------------- */

static tg_tensor *encoder_loss(void *model, const tg_tensor *x, const tg_tensor *target)
{
    return tg_mse_loss(tg_encoder_forward(model, x, NULL, NULL), target);
}

static int bench_encoder(int threads)
{
    enum { B = 16, T = 64, D = 128, H = 4, FF = 512 };
    const tg_encoder_config cfg = {D, H, FF, 0.1, 1e-5, TG_ACT_RELU, false};
    tg_rng *rng = tg_rng_new(0);
    tg_encoder *enc = tg_encoder_new(&cfg, 2, false, TG_FLOAT32, rng);
    tg_params ps = {0};
    tg_optim *opt = NULL;
    tg_tensor *x = tg_randn(rng, TG_FLOAT32, 3, (int64_t[]){B, T, D});
    tg_tensor *target = tg_randn(rng, TG_FLOAT32, 3, (int64_t[]){B, T, D});
    double dt = -1;
    /* torch.optim.AdamW's defaults: betas (0.9, 0.999), eps 1e-8, weight_decay 0.01 */
    if (enc && x && target && tg_encoder_params(enc, NULL, &ps) == 0 &&
        (opt = tg_adamw_new(&ps, 1e-3, 0.9, 0.999, 1e-8, 0.01)) != NULL) {
        step_ctx c = {enc, encoder_loss, x, target, opt};
        dt = quick ? timed(train_step, &c, 1, 1) : timed(train_step, &c, 3, 20);
    }
    tg_optim_free(opt);
    tg_params_clear(&ps);
    tg_release(x);
    tg_release(target);
    tg_encoder_free(enc);
    tg_rng_free(rng);
    if (dt < 0)
        return fail("encoder");
    emit("encoder", threads, NULL, "train_step", dt * 1e3, 3, "ms", NULL);
    return 0;
}

/* ---- GPT: gpt-small, gpt-medium and generate ----------------------------------------- */

typedef struct {
    const char *name;
    tg_gpt_config config;
    int64_t batch;
    int reps; /* torch_ref.py: 10 steps for gpt-small, 5 for gpt-medium */
} gpt_bench;

static const gpt_bench gpt_small = {"gpt-small", {65, 64, 4, 4, 128, 0.0}, 32, 10};
static const gpt_bench gpt_medium = {"gpt-medium", {65, 256, 6, 6, 384, 0.0}, 8, 5};

static tg_tensor *gpt_loss(void *model, const tg_tensor *x, const tg_tensor *y)
{
    tg_tensor *loss = NULL;
    tg_gpt_forward(model, x, y, &loss);
    return loss;
}

/* Random tokens in [0, vocab): int64 [b, t]. */
static tg_tensor *random_tokens(tg_rng *rng, int64_t vocab, int64_t b, int64_t t)
{
    int64_t *v = malloc((size_t)(b * t) * sizeof *v);
    if (!v)
        return NULL;
    for (int64_t i = 0; i < b * t; i++)
        v[i] = (int64_t)(tg_rng_next(rng) % (uint64_t)vocab);
    tg_tensor *out = tg_from_data(TG_INT64, 2, (int64_t[]){b, t}, v);
    free(v);
    return out;
}

/* Weights start as GPT-2's N(0, 0.02) where torch_ref.py keeps PyTorch's
 * module defaults: the work per step is the same. */
static int bench_gpt(const gpt_bench *g, int threads)
{
    const tg_gpt_config *cfg = &g->config;
    tg_rng *rng = tg_rng_new(0);
    tg_gpt *model = tg_gpt_new(cfg, TG_FLOAT32, rng);
    tg_params ps = {0};
    tg_optim *opt = NULL;
    int64_t t = quick ? 8 : cfg->block_size, b = quick ? 2 : g->batch;
    tg_tensor *x = random_tokens(rng, cfg->vocab_size, b, t);
    tg_tensor *y = random_tokens(rng, cfg->vocab_size, b, t);
    double dt = -1;
    if (model && x && y && tg_gpt_params(model, &ps) == 0 &&
        (opt = tg_adamw_new(&ps, 1e-3, 0.9, 0.999, 1e-8, 0.1)) != NULL) {
        step_ctx c = {model, gpt_loss, x, y, opt};
        dt = quick ? timed(train_step, &c, 1, 1) : timed(train_step, &c, 2, g->reps);
    }
    tg_optim_free(opt);
    tg_params_clear(&ps);
    tg_release(x);
    tg_release(y);
    tg_gpt_free(model);
    tg_rng_free(rng);
    if (dt < 0)
        return fail(g->name);
    char extra[64];
    snprintf(extra, sizeof extra, "\"tokens_per_s\": %.1f", (double)(b * t) / dt);
    emit(g->name, threads, NULL, "train_step", dt * 1e3, 2, "ms", extra);
    return 0;
}

/* 200 new tokens, greedy, batch 1, from the prompt {0}, gpt-medium shape,
 * random weights, in evaluation mode with grad off (torch.no_grad). */
static int bench_generate(int threads)
{
    enum { NEW = 200 };
    int64_t n = quick ? 10 : NEW, out[NEW + 1], prompt[1] = {0};
    tg_rng *rng = tg_rng_new(0);
    tg_gpt *model = tg_gpt_new(&gpt_medium.config, TG_FLOAT32, rng);
    tg_sample_options opts = {.temperature = 1.0, .greedy = true, .slide = true};
    bool was = tg_set_grad_enabled(false);
    double dt = -1;
    if (model) {
        tg_gpt_set_train(model, false);
        double t0 = now_s();
        if (tg_gpt_generate(model, prompt, 1, n, &opts, NULL, out) == 0)
            dt = now_s() - t0;
    }
    tg_set_grad_enabled(was);
    tg_gpt_free(model);
    tg_rng_free(rng);
    if (dt < 0)
        return fail("generate");
    emit("generate", threads, NULL, "tokens_per_s", (double)n / dt, 1, "tok/s", NULL);
    return 0;
}

/* ---- Llama: llama-medium and llama-generate ---------------------------------------- */

/* gpt-medium's width, depth and context with 6 heads sharing 2 kv heads,
 * SwiGLU hidden 1024, tied head: bench/torch_llama.py's model. */
static const tg_llama_config llama_medium = {
    .vocab_size = 65, .block_size = 256, .n_layer = 6, .n_head = 6, .n_kv_head = 2,
    .n_embd = 384, .hidden_size = 1024, .rope_theta = 10000, .norm_eps = 1e-5,
    .tie_embeddings = true, .rope_pairing = TG_ROPE_HALF};

static tg_tensor *llama_loss(void *model, const tg_tensor *x, const tg_tensor *y)
{
    tg_tensor *loss = NULL;
    tg_llama_forward(model, x, y, &loss);
    return loss;
}

/* One training step at batch 8, median of 5 after 2 warm-up steps. */
static int bench_llama(int threads)
{
    const tg_llama_config *cfg = &llama_medium;
    tg_rng *rng = tg_rng_new(0);
    tg_llama *model = tg_llama_new(cfg, TG_FLOAT32, rng);
    tg_params ps = {0};
    tg_optim *opt = NULL;
    int64_t t = quick ? 8 : cfg->block_size, b = quick ? 2 : 8;
    tg_tensor *x = random_tokens(rng, cfg->vocab_size, b, t);
    tg_tensor *y = random_tokens(rng, cfg->vocab_size, b, t);
    double dt = -1;
    if (model && x && y && tg_llama_params(model, &ps) == 0 &&
        (opt = tg_adamw_new(&ps, 1e-3, 0.9, 0.999, 1e-8, 0.1)) != NULL) {
        step_ctx c = {model, llama_loss, x, y, opt};
        dt = quick ? timed(train_step, &c, 1, 1) : timed(train_step, &c, 2, 5);
    }
    tg_optim_free(opt);
    tg_params_clear(&ps);
    tg_release(x);
    tg_release(y);
    tg_llama_free(model);
    tg_rng_free(rng);
    if (dt < 0)
        return fail("llama-medium");
    char extra[64];
    snprintf(extra, sizeof extra, "\"tokens_per_s\": %.1f", (double)(b * t) / dt);
    emit("llama-medium", threads, NULL, "train_step", dt * 1e3, 2, "ms", extra);
    return 0;
}

/* As generate, at llama-medium's shape; the line also carries the bytes of
 * the KV cache generation holds, and the GPT's at the same width, depth and
 * context. */
static int bench_llama_generate(int threads)
{
    enum { NEW = 200 };
    int64_t n = quick ? 10 : NEW, out[NEW + 1], prompt[1] = {0};
    tg_rng *rng = tg_rng_new(0);
    tg_llama *model = tg_llama_new(&llama_medium, TG_FLOAT32, rng);
    tg_gpt *gpt = tg_gpt_new(&gpt_medium.config, TG_FLOAT32, rng);
    tg_sample_options opts = {.temperature = 1.0, .greedy = true, .slide = true};
    bool was = tg_set_grad_enabled(false);
    double dt = -1;
    int64_t bytes = model ? tg_llama_kv_cache_bytes(model) : -1;
    int64_t gpt_bytes = gpt ? tg_gpt_kv_cache_bytes(gpt) : -1;
    if (model && gpt) {
        double t0 = now_s();
        if (tg_llama_generate(model, prompt, 1, n, &opts, NULL, out) == 0)
            dt = now_s() - t0;
    }
    tg_set_grad_enabled(was);
    tg_gpt_free(gpt);
    tg_llama_free(model);
    tg_rng_free(rng);
    if (dt < 0)
        return fail("llama-generate");
    char extra[96];
    snprintf(extra, sizeof extra, "\"kv_cache_bytes\": %lld, \"kv_cache_bytes_gpt\": %lld",
             (long long)bytes, (long long)gpt_bytes);
    emit("llama-generate", threads, NULL, "tokens_per_s", (double)n / dt, 1, "tok/s", extra);
    return 0;
}

/* ---- seq2seq: torch.nn.Transformer's training step ------------------------------------ */

/* d_model 256, 4 heads, 3 encoder and 3 decoder layers, feed-forward 1024,
 * dropout 0.1 (nn.Transformer's defaults but the sizes), batch 16, source
 * and target 64 positions already embedded, a causal target mask, MSE
 * against a random target: bench/torch_seq2seq.py's step. */
typedef struct {
    tg_transformer *tr;
    const tg_tensor *src;
} seq2seq_model;

static tg_tensor *seq2seq_loss(void *model, const tg_tensor *tgt, const tg_tensor *target)
{
    const seq2seq_model *m = model;
    tg_transformer_masks masks = {.tgt = {.tgt_is_causal = true}};
    return tg_mse_loss(tg_transformer_forward(m->tr, m->src, tgt, &masks), target);
}

static int bench_seq2seq(int threads)
{
    enum { B = 16, S = 64, T = 64, D = 256 };
    const tg_transformer_config cfg = {.d_model = D, .nhead = 4, .dim_feedforward = 1024,
                                       .num_encoder_layers = 3, .num_decoder_layers = 3,
                                       .dropout = 0.1, .layer_norm_eps = 1e-5,
                                       .activation = TG_ACT_RELU, .norm_first = false};
    int64_t b = quick ? 2 : B, s = quick ? 8 : S, t = quick ? 8 : T;
    tg_rng *rng = tg_rng_new(0);
    tg_transformer *tr = tg_transformer_new(&cfg, TG_FLOAT32, rng);
    tg_params ps = {0};
    tg_optim *opt = NULL;
    tg_tensor *src = tg_randn(rng, TG_FLOAT32, 3, (int64_t[]){b, s, D});
    tg_tensor *tgt = tg_randn(rng, TG_FLOAT32, 3, (int64_t[]){b, t, D});
    tg_tensor *target = tg_randn(rng, TG_FLOAT32, 3, (int64_t[]){b, t, D});
    double dt = -1;
    if (tr && src && tgt && target && tg_transformer_params(tr, NULL, &ps) == 0 &&
        (opt = tg_adamw_new(&ps, 1e-3, 0.9, 0.999, 1e-8, 0.01)) != NULL) {
        seq2seq_model m = {tr, src};
        step_ctx c = {&m, seq2seq_loss, tgt, target, opt};
        dt = quick ? timed(train_step, &c, 1, 1) : timed(train_step, &c, 2, 5);
    }
    tg_optim_free(opt);
    tg_params_clear(&ps);
    tg_release(src);
    tg_release(tgt);
    tg_release(target);
    tg_transformer_free(tr);
    tg_rng_free(rng);
    if (dt < 0)
        return fail("seq2seq");
    char extra[64];
    snprintf(extra, sizeof extra, "\"tokens_per_s\": %.1f", (double)(b * (s + t)) / dt);
    emit("seq2seq", threads, NULL, "train_step", dt * 1e3, 2, "ms", extra);
    return 0;
}

/* ---- command line ------------------------------------------------------------------ */

static int run_gpt_small(int threads) { return bench_gpt(&gpt_small, threads); }
static int run_gpt_medium(int threads) { return bench_gpt(&gpt_medium, threads); }

static const struct {
    const char *name;
    int (*run)(int threads);
} benches[] = {
    {"matmul", bench_matmul},       {"attn-toy", bench_attn_toy},     {"encoder", bench_encoder},
    {"gpt-small", run_gpt_small},   {"gpt-medium", run_gpt_medium},   {"generate", bench_generate},
    {"llama-medium", bench_llama},  {"llama-generate", bench_llama_generate},
    {"seq2seq", bench_seq2seq},
};
enum { NBENCH = sizeof benches / sizeof benches[0] };

static void usage(FILE *f)
{
    fprintf(f, "usage: bench [--threads N] [--precision fp32|bf16|both] [--quick] [CONFIG ...]\n"
               "  runs every config when none is named; configs:");
    for (int i = 0; i < NBENCH; i++)
        fprintf(f, " %s", benches[i].name);
    fprintf(f, "\n  --threads N  threads for the library and OpenBLAS (default 2)\n"
               "  --precision  the matmul precision of the runs: fp32, bf16 or both\n"
               "               (default: both, each config at fp32 then at bf16)\n"
               "  --quick      tiny sizes: a smoke test, not a measurement\n");
}

/* s as a JSON string, quotes included. */
static void print_json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

/* The first line: what the library was built with and picked on this
 * machine, and the CPU's peaks, as {"config": "info", ...}, so a saved run
 * says what it measured.
 * compare.py sets it aside; it is not a measurement. */
static void emit_info(void)
{
    tg_build_info info;
    tg_build_info_get(&info);
    const char *keys[] = {"version", "compiler", "gemm_isa", "blas", "blas_config", "blas_core"};
    const char *values[] = {info.version, info.compiler,    info.gemm_isa,
                            info.blas,    info.blas_config, info.blas_core};
    printf("{\"config\": \"info\", \"threads\": %d", info.threads);
    for (int i = 0; i < 6; i++) {
        printf(", \"%s\": ", keys[i]);
        print_json_string(values[i]);
    }
    printf(", \"avx512_bf16\": %s, \"openmp\": %s, \"bf16_gemm\": ",
           info.avx512_bf16 ? "true" : "false", info.openmp ? "true" : "false");
    print_json_string(info.bf16_gemm);
    /* GFLOP/s on 1 and on all threads; 0 where the CPU lacks them */
    printf(", \"fp32_peak_gflops\": [%.1f, %.1f], \"dpbf16_peak_gflops\": [%.1f, %.1f], "
           "\"amx_peak_gflops\": [%.1f, %.1f]}\n",
           peaks.fp32[0], peaks.fp32[1], peaks.dpbf16[0], peaks.dpbf16[1], peaks.amx[0],
           peaks.amx[1]);
    fflush(stdout);
}

static int find_bench(const char *name)
{
    for (int i = 0; i < NBENCH; i++)
        if (strcmp(benches[i].name, name) == 0)
            return i;
    return -1;
}

int main(int argc, char **argv)
{
    int threads = 2, chosen[NBENCH] = {0}, any = 0;
    bool precisions[2] = {true, true}; /* fp32, bf16 */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--quick") == 0) {
            quick = 1;
        } else if (strcmp(a, "--threads") == 0 || strncmp(a, "--threads=", 10) == 0) {
            val = a[9] == '=' ? a + 10 : (i + 1 < argc ? argv[++i] : NULL);
            char *end = NULL;
            long v = val ? strtol(val, &end, 10) : 0;
            if (!val || *end != '\0' || v < 1 || v > 1024) {
                fprintf(stderr, "bench: --threads needs a whole number from 1 to 1024\n");
                return 2;
            }
            threads = (int)v;
        } else if (strcmp(a, "--precision") == 0) {
            val = i + 1 < argc ? argv[++i] : "";
            bool both = strcmp(val, "both") == 0;
            precisions[0] = both || strcmp(val, "fp32") == 0;
            precisions[1] = both || strcmp(val, "bf16") == 0;
            if (!precisions[0] && !precisions[1]) {
                fprintf(stderr, "bench: --precision takes fp32, bf16 or both\n");
                return 2;
            }
        } else if (find_bench(a) >= 0) {
            chosen[find_bench(a)] = any = 1;
        } else {
            fprintf(stderr, "bench: unknown argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (tg_set_num_threads(threads) != 0) {
        fprintf(stderr, "bench: %s\n", tg_error_message());
        return 2;
    }
    bench_measure_peaks(threads, quick, &peaks);
    emit_info();
    int failed = 0;
    /* Each config and precision starts without the buffers the one before
     * left cached, and with the peak RSS reset, so that its peak is its own. */
    for (int i = 0; i < NBENCH; i++)
        for (int p = 0; p < 2; p++)
            if ((!any || chosen[i]) && precisions[p]) {
                tg_set_matmul_precision(p ? TG_PRECISION_BF16 : TG_PRECISION_FLOAT32);
                reset_peak_rss();
                failed |= benches[i].run(threads) != 0;
                tg_release_cached_memory();
            }
    if (tg_live_tensors() != 0)
        fprintf(stderr, "bench: %lld tensors still alive at exit\n",
                (long long)tg_live_tensors());
    return failed ? 1 : 0;
}
