/* Reading and writing gpt's checkpoints. A checkpoint is input like a command
 * line: each value is checked against the range its option accepts, and the
 * config and every parameter's shape are checked before a model is built. */
#include "gpt_checkpoint.h"

#include <limits.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const gpt_range gpt_steps_range = {"--steps", 1, 10000000, true};
const gpt_range gpt_batch_range = {"--batch", 1, 4096, true};
const gpt_range gpt_lr_range = {"--lr", 0, 10, false};
const gpt_range gpt_eval_every_range = {"--eval-every", 1, 10000000, true};

bool gpt_in_range(const gpt_range *r, double v)
{
    return v >= r->lo && v <= r->hi && (!r->integer || v == floor(v));
}

void gpt_range_error(const gpt_range *r, const char *where, const char *text)
{
    fprintf(stderr, "gpt: %s%s: '%s' is not a number in the allowed range %.15g..%.15g\n", r->option,
            where, text, r->lo, r->hi);
}

/* Bounds of a model this program will build from a file: a character
 * vocabulary, and shapes no larger than a CPU run of this example could use. */
enum { MAX_CONTEXT = 8192, MAX_LAYERS = 256, MAX_HEADS = 256, MAX_WIDTH = 16384,
       MAX_HIDDEN = 4 * MAX_WIDTH };

__attribute__((format(printf, 2, 3))) static int bad(const char *path, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "gpt: %s is not a usable gpt checkpoint: ", path);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return 1;
}

/* The tensor called name, of dtype and of a shape with ndim dimensions (any
 * sizes), or NULL after printing why not. */
static tg_tensor *find(const char *path, const tg_params *ck, const char *name, tg_dtype dtype,
                       int ndim)
{
    tg_tensor *t = tg_params_find(ck, name);
    tg_error_clear();
    if (!t)
        return bad(path, "it has no %s", name), NULL;
    if (tg_dtype_of(t) != dtype || tg_ndim(t) != ndim)
        return bad(path, "%s is %s with %d dimensions, not %s with %d", name,
                   tg_dtype_name(tg_dtype_of(t)), tg_ndim(t), tg_dtype_name(dtype), ndim), NULL;
    return t;
}

/* model.arch = int64 [1]: 0 a GPT, 1 a Llama. A checkpoint without it is a
 * GPT's (as every checkpoint was before there was a choice). */
static int read_arch(const char *path, const tg_params *ck, lm_arch *arch)
{
    *arch = LM_GPT;
    if (!tg_params_find(ck, "model.arch"))
        return tg_error_clear(), 0;
    tg_tensor *t = find(path, ck, "model.arch", TG_INT64, 1);
    if (!t)
        return 1;
    if (tg_size(t, 0) != 1)
        return bad(path, "model.arch has %lld values, not 1", (long long)tg_size(t, 0));
    int64_t a = *(const int64_t *)tg_data(t);
    if (a != LM_GPT && a != LM_LLAMA)
        return bad(path, "its model.arch is %lld, not 0 (gpt) or 1 (llama)", (long long)a);
    *arch = (lm_arch)a;
    return 0;
}

/* gpt.vocab = int64 [vocab] of distinct bytes, as many as the config says. */
static int read_vocab(const char *path, const tg_params *ck, const char *config_name,
                      int64_t size, gpt_vocab *v)
{
    tg_tensor *voc = find(path, ck, "gpt.vocab", TG_INT64, 1);
    if (!voc)
        return 1;
    if (tg_size(voc, 0) != size)
        return bad(path, "gpt.vocab has %lld entries but %s says vocab %lld",
                   (long long)tg_size(voc, 0), config_name, (long long)size);
    const int64_t *chars = tg_data(voc);
    bool seen[256] = {false};
    for (int64_t i = 0; i < size; i++) {
        if (chars[i] < 0 || chars[i] > 255 || seen[chars[i]])
            return bad(path, "gpt.vocab[%lld] = %lld is %s", (long long)i, (long long)chars[i],
                       chars[i] < 0 || chars[i] > 255 ? "not a byte (0..255)" : "a repeat");
        seen[chars[i]] = true;
        v->chars[i] = (unsigned char)chars[i];
    }
    v->size = (int)size;
    return 0;
}

/* gpt.config = int64 [vocab, context, layers, heads, width]. */
static int read_gpt_config(const char *path, const tg_params *ck, lm_config *c)
{
    tg_tensor *cfg = find(path, ck, "gpt.config", TG_INT64, 1);
    if (!cfg)
        return 1;
    if (tg_size(cfg, 0) != 5)
        return bad(path, "gpt.config has %lld values, not 5", (long long)tg_size(cfg, 0));
    const int64_t *k = tg_data(cfg);
    *c = (lm_config){.arch = LM_GPT, .vocab_size = k[0], .block_size = k[1], .n_layer = k[2],
                     .n_head = k[3], .n_embd = k[4]};
    static const char *const names[] = {"vocab", "context", "layers", "heads", "width"};
    static const int64_t max[] = {256, MAX_CONTEXT, MAX_LAYERS, MAX_HEADS, MAX_WIDTH};
    for (int i = 0; i < 5; i++)
        if (k[i] < 1 || k[i] > max[i])
            return bad(path, "gpt.config's %s = %lld is outside 1..%lld", names[i],
                       (long long)k[i], (long long)max[i]);
    if (c->n_embd % c->n_head)
        return bad(path, "gpt.config's %lld heads do not divide its width %lld",
                   (long long)c->n_head, (long long)c->n_embd);
    return 0;
}

/* llama.config = float64 [vocab, context, layers, heads, kv heads, width,
 * hidden, rope theta, norm eps, tied head (0/1), rope pairing (0 half, 1
 * interleaved)]: whole numbers in their bounds, theta and eps finite > 0. */
static int read_llama_config(const char *path, const tg_params *ck, lm_config *c)
{
    tg_tensor *cfg = find(path, ck, "llama.config", TG_FLOAT64, 1);
    if (!cfg)
        return 1;
    if (tg_size(cfg, 0) != 11)
        return bad(path, "llama.config has %lld values, not 11", (long long)tg_size(cfg, 0));
    const double *k = tg_data(cfg);
    static const char *const names[] = {"vocab", "context", "layers", "heads", "kv heads",
                                        "width", "hidden", "rope theta", "norm eps",
                                        "tied head", "rope pairing"};
    static const double max[] = {256, MAX_CONTEXT, MAX_LAYERS, MAX_HEADS, MAX_HEADS, MAX_WIDTH,
                                 MAX_HIDDEN, INFINITY, INFINITY, 1, 1};
    for (int i = 0; i < 11; i++) {
        bool real = i == 7 || i == 8, flag = i >= 9;
        if (real ? !(k[i] > 0 && k[i] < INFINITY)
                 : !(k[i] >= (flag ? 0 : 1) && k[i] <= max[i] && k[i] == floor(k[i])))
            return real ? bad(path, "llama.config's %s = %g is not a finite number > 0",
                              names[i], k[i])
                        : bad(path, "llama.config's %s = %g is not a whole number in %d..%.0f",
                              names[i], k[i], flag ? 0 : 1, max[i]);
    }
    *c = (lm_config){LM_LLAMA, (int64_t)k[0], (int64_t)k[1], (int64_t)k[2], (int64_t)k[3],
                     (int64_t)k[5], (int64_t)k[4], (int64_t)k[6], k[7], k[8], k[9] != 0,
                     k[10] != 0 ? TG_ROPE_INTERLEAVED : TG_ROPE_HALF};
    if (c->n_embd % c->n_head)
        return bad(path, "llama.config's %lld heads do not divide its width %lld",
                   (long long)c->n_head, (long long)c->n_embd);
    if (c->n_head % c->n_kv_head)
        return bad(path, "llama.config's %lld kv heads do not divide its %lld heads",
                   (long long)c->n_kv_head, (long long)c->n_head);
    if (c->n_embd / c->n_head % 2)
        return bad(path, "llama.config's head size %lld (width %lld / %lld heads) is odd; "
                   "rotary embeddings turn pairs", (long long)(c->n_embd / c->n_head),
                   (long long)c->n_embd, (long long)c->n_head);
    return 0;
}

/* The architecture, its config and the vocabulary. */
static int read_config(const char *path, const tg_params *ck, lm_config *c, gpt_vocab *v)
{
    lm_arch arch;
    if (read_arch(path, ck, &arch))
        return 1;
    const char *name = arch == LM_LLAMA ? "llama.config" : "gpt.config";
    if (!find(path, ck, name, arch == LM_LLAMA ? TG_FLOAT64 : TG_INT64, 1) ||
        !find(path, ck, "gpt.vocab", TG_INT64, 1))
        return 1;
    if (arch == LM_LLAMA ? read_llama_config(path, ck, c) : read_gpt_config(path, ck, c))
        return 1;
    return read_vocab(path, ck, name, c->vocab_size, v);
}

/* One parameter: float, and [d0] or [d0, d1] (d1 = 0 for one dimension). */
static int check_param(const char *path, const tg_params *ck, const char *config,
                       const char *name, int64_t d0, int64_t d1)
{
    tg_tensor *t = tg_params_find(ck, name);
    tg_error_clear();
    if (!t)
        return bad(path, "it has no %s", name);
    int nd = d1 ? 2 : 1;
    bool same = tg_ndim(t) == nd && tg_size(t, 0) == d0 && (nd == 1 || tg_size(t, 1) == d1);
    bool is_float = tg_dtype_of(t) == TG_FLOAT32 || tg_dtype_of(t) == TG_FLOAT64;
    if (!same || !is_float) {
        char want[48], got[96] = "";
        snprintf(want, sizeof want, d1 ? "[%lld, %lld]" : "[%lld]", (long long)d0, (long long)d1);
        for (int i = 0; i < tg_ndim(t) && strlen(got) < 64; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? ", " : "",
                     (long long)tg_size(t, i));
        return bad(path, "%s is %s [%s]; %s implies float %s", name,
                   tg_dtype_name(tg_dtype_of(t)), got, config, want);
    }
    return 0;
}

/* Every parameter gpt.config implies (the names of tg_gpt_params), by shape. */
static int check_gpt_params(const char *path, const tg_params *ck, const lm_config *c)
{
    int64_t d = c->n_embd;
    if (check_param(path, ck, "gpt.config", "transformer.wte.weight", c->vocab_size, d) ||
        check_param(path, ck, "gpt.config", "transformer.wpe.weight", c->block_size, d) ||
        check_param(path, ck, "gpt.config", "transformer.ln_f.weight", d, 0) ||
        check_param(path, ck, "gpt.config", "transformer.ln_f.bias", d, 0))
        return 1;
    static const struct {
        const char *name;
        int64_t out, in; /* multiples of d; in 0: a vector of out */
    } block[] = {
        {"ln_1.weight", 1, 0},     {"ln_1.bias", 1, 0},     {"attn.c_attn.weight", 3, 1},
        {"attn.c_attn.bias", 3, 0}, {"attn.c_proj.weight", 1, 1}, {"attn.c_proj.bias", 1, 0},
        {"ln_2.weight", 1, 0},     {"ln_2.bias", 1, 0},     {"mlp.c_fc.weight", 4, 1},
        {"mlp.c_fc.bias", 4, 0},   {"mlp.c_proj.weight", 1, 4}, {"mlp.c_proj.bias", 1, 0},
    };
    for (int64_t l = 0; l < c->n_layer; l++)
        for (size_t i = 0; i < sizeof block / sizeof block[0]; i++) {
            char name[96];
            snprintf(name, sizeof name, "transformer.h.%lld.%s", (long long)l, block[i].name);
            if (check_param(path, ck, "gpt.config", name, block[i].out * d, block[i].in * d))
                return 1;
        }
    return 0;
}

/* Every parameter llama.config implies (the Hugging Face names of
 * tg_llama_params), by shape: k and v project to kv heads * head size, and
 * the output head is there only when it is not the embedding. */
static int check_llama_params(const char *path, const tg_params *ck, const lm_config *c)
{
    int64_t d = c->n_embd, kv = c->n_kv_head * (d / c->n_head), f = c->hidden_size;
    if (check_param(path, ck, "llama.config", "model.embed_tokens.weight", c->vocab_size, d) ||
        check_param(path, ck, "llama.config", "model.norm.weight", d, 0) ||
        (!c->tie_embeddings &&
         check_param(path, ck, "llama.config", "lm_head.weight", c->vocab_size, d)))
        return 1;
    const struct {
        const char *name;
        int64_t out, in; /* in 0: a vector of out */
    } block[] = {
        {"input_layernorm.weight", d, 0},      {"self_attn.q_proj.weight", d, d},
        {"self_attn.k_proj.weight", kv, d},    {"self_attn.v_proj.weight", kv, d},
        {"self_attn.o_proj.weight", d, d},     {"post_attention_layernorm.weight", d, 0},
        {"mlp.gate_proj.weight", f, d},        {"mlp.up_proj.weight", f, d},
        {"mlp.down_proj.weight", d, f},
    };
    for (int64_t l = 0; l < c->n_layer; l++)
        for (size_t i = 0; i < sizeof block / sizeof block[0]; i++) {
            char name[96];
            snprintf(name, sizeof name, "model.layers.%lld.%s", (long long)l, block[i].name);
            if (check_param(path, ck, "llama.config", name, block[i].out, block[i].in))
                return 1;
        }
    return 0;
}

static int check_params(const char *path, const tg_params *ck, const lm_config *c)
{
    return c->arch == LM_LLAMA ? check_llama_params(path, ck, c) : check_gpt_params(path, ck, c);
}

/* ---- what else a checkpoint may hold, and its values ---- */

/* A name read from a file, for a message: as it is when it is printable
 * ASCII; one that could drive a terminal is not printed. */
static const char *shown(const char *name)
{
    for (const char *p = name; *p; p++)
        if (*p < 0x20 || *p > 0x7e)
            return "(a name with control or non-ASCII bytes)";
    return name;
}

/* name is a parameter of the model built from the config (mp) or a part of
 * its AdamW state (tg_optim_state's names: "step", and the parameter's name
 * after "step.", "exp_avg." or "exp_avg_sq."). */
static bool is_weight(const char *name, const tg_params *mp)
{
    static const char *const state[] = {"step.", "exp_avg.", "exp_avg_sq."};
    if (!strcmp(name, "step"))
        return true;
    for (size_t i = 0; i < sizeof state / sizeof state[0]; i++)
        if (!strncmp(name, state[i], strlen(state[i]))) {
            name += strlen(state[i]);
            break;
        }
    return tg_params_find(mp, name) != NULL;
}

/* name is the config, a record of the run (gpt_checkpoint_save's names) or
 * a weight. */
static bool accounted(const char *name, const char *config, const tg_params *mp)
{
    static const char *const records[] = {"model.arch", "gpt.vocab", "train.settings",
                                          "train.history", "train.rng_data",
                                          "train.rng_dropout"};
    if (!strcmp(name, config))
        return true;
    for (size_t i = 0; i < sizeof records / sizeof records[0]; i++)
        if (!strcmp(name, records[i]))
            return true;
    return is_weight(name, mp);
}

/* Every tensor of ck is accounted for: one the config does not (a layer past
 * its count, another architecture's) would be dropped without a word, its
 * optimizer state with it, so it is refused, the first few named. */
static int check_accounted(const char *path, const tg_params *ck, const char *config,
                           const tg_params *mp)
{
    char list[400] = "";
    int extra = 0;
    for (int i = 0; i < ck->count; i++) {
        if (accounted(ck->names[i], config, mp))
            continue;
        size_t n = strlen(list);
        if (extra < 3)
            snprintf(list + n, sizeof list - n, "%s%.100s", extra ? ", " : "",
                     shown(ck->names[i]));
        extra++;
    }
    if (extra > 3)
        snprintf(list + strlen(list), sizeof list - strlen(list), " and %d more", extra - 3);
    if (extra)
        return bad(path, "%s does not account for %d of its tensors: %s", config, extra, list);
    return 0;
}

/* Every value of the model and its optimizer state is a finite number (the
 * records have checks of their own; train.history marks unmeasured losses
 * with NaN). */
static int check_finite(const char *path, const tg_params *ck, const tg_params *mp)
{
    tg_params values = {0};
    int rc = 0;
    for (int i = 0; rc == 0 && i < ck->count; i++)
        if (is_weight(ck->names[i], mp))
            rc = tg_params_add(&values, NULL, ck->names[i], ck->tensors[i]);
    if (rc == 0)
        rc = tg_params_check_finite(&values);
    tg_params_clear(&values);
    if (rc && tg_error_code() == TG_ERR_VALUE)
        return bad(path, "not every value is a finite number (%s)", tg_error_message());
    if (rc)
        return fprintf(stderr, "gpt: cannot check %s: %s\n", path, tg_error_message()), 1;
    return 0;
}

int gpt_checkpoint_load_model(const char *path, tg_params *ck, lm **model, gpt_vocab *vocab)
{
    if (tg_safetensors_load(path, ck) < 0)
        return fprintf(stderr, "gpt: cannot load %s: %s\n", path, tg_error_message()), 1;
    lm_config config;
    if (read_config(path, ck, &config, vocab) || check_params(path, ck, &config))
        return 1;
    tg_rng *rng = tg_rng_new(0);
    *model = lm_new(&config, rng);
    tg_rng_free(rng);
    tg_params mp = {0};
    if (!*model || lm_params(*model, &mp) < 0) {
        tg_params_clear(&mp);
        return fprintf(stderr, "gpt: cannot build the model of %s: %s\n", path,
                       tg_error_message()), 1;
    }
    const char *config_name = config.arch == LM_LLAMA ? "llama.config" : "gpt.config";
    int rc = check_accounted(path, ck, config_name, &mp) || check_finite(path, ck, &mp) ? -1 : 0;
    for (int i = 0; rc == 0 && i < mp.count; i++) {
        tg_tensor *src = tg_params_find(ck, mp.names[i]), *dst = mp.tensors[i];
        bool same = src && tg_ndim(src) == tg_ndim(dst) &&
                    !memcmp(tg_shape(src), tg_shape(dst), sizeof(int64_t) * (size_t)tg_ndim(dst));
        rc = same ? tg_copy_to(src, TG_FLOAT32, tg_data(dst), tg_numel(dst)) : -1;
        if (rc)
            bad(path, "its %s does not match the model's", mp.names[i]);
    }
    tg_params_clear(&mp);
    return rc ? 1 : 0;
}

int gpt_checkpoint_load_settings(const char *path, const tg_params *ck, gpt_settings *s)
{
    tg_tensor *t = find(path, ck, "train.settings", TG_FLOAT64, 1);
    if (!t)
        return 1;
    /* a run from before --precision has 5: it was float32 */
    int64_t n = tg_size(t, 0);
    if (n != 5 && n != 6)
        return bad(path, "train.settings has %lld values, not 5 or 6", (long long)n);
    const double *v = tg_data(t); /* steps, batch, lr, task, eval_every[, bf16] */
    static const gpt_range *const ranges[] = {&gpt_steps_range, &gpt_batch_range, &gpt_lr_range,
                                              NULL, &gpt_eval_every_range, NULL};
    static const char *const flags[] = {NULL, NULL, NULL, "task", NULL, "precision"};
    char where[1100], text[40];
    snprintf(where, sizeof where, " from %s", path);
    for (int i = 0; i < n; i++) {
        snprintf(text, sizeof text, "%.17g", v[i]);
        if (ranges[i] && !gpt_in_range(ranges[i], v[i]))
            return gpt_range_error(ranges[i], where, text), 1;
        if (!ranges[i] && v[i] != 0 && v[i] != 1)
            return bad(path, "its %s flag (train.settings[%d]) is %s, not 0 or 1", flags[i], i,
                       text);
    }
    *s = (gpt_settings){(int64_t)v[0], (int64_t)v[1], (int64_t)v[4], v[2], v[3] != 0,
                        n == 6 && v[5] != 0};
    return 0;
}

int gpt_checkpoint_load_history(const char *path, const tg_params *ck, int64_t done, double *loss,
                                double *val)
{
    tg_tensor *t = find(path, ck, "train.history", TG_FLOAT64, 2);
    if (!t)
        return 1;
    int64_t rows = done > 0 ? done : 1;
    if (tg_size(t, 0) != rows || tg_size(t, 1) != 2)
        return bad(path, "train.history is [%lld, %lld], not [%lld, 2] for %lld steps done",
                   (long long)tg_size(t, 0), (long long)tg_size(t, 1), (long long)rows,
                   (long long)done);
    const double *h = tg_data(t); /* per step: loss, validation loss or NAN */
    for (int64_t i = 0; i < done; i++) {
        if (!(h[2 * i] >= 0 && h[2 * i] < INFINITY) ||
            !(isnan(h[2 * i + 1]) || (h[2 * i + 1] >= 0 && h[2 * i + 1] < INFINITY)))
            return bad(path, "train.history's step %lld holds losses %g and %g", (long long)i + 1,
                       h[2 * i], h[2 * i + 1]);
        loss[i] = h[2 * i];
        val[i] = h[2 * i + 1];
    }
    return 0;
}

static int add_owned(tg_params *ps, const char *name, tg_tensor *t)
{
    int rc = t ? tg_params_add(ps, NULL, name, t) : -1;
    tg_release(t);
    return rc;
}

/* gpt.config for a GPT; model.arch and llama.config for a Llama (the
 * layouts read_gpt_config and read_llama_config read). */
static int add_config(tg_params *ps, const lm_config *c)
{
    if (c->arch == LM_GPT) {
        int64_t cfg[5] = {c->vocab_size, c->block_size, c->n_layer, c->n_head, c->n_embd};
        return add_owned(ps, "gpt.config", tg_from_data(TG_INT64, 1, (int64_t[]){5}, cfg));
    }
    double cfg[11] = {(double)c->vocab_size, (double)c->block_size, (double)c->n_layer,
                      (double)c->n_head, (double)c->n_kv_head, (double)c->n_embd,
                      (double)c->hidden_size, c->rope_theta, c->norm_eps, c->tie_embeddings,
                      c->rope_pairing == TG_ROPE_INTERLEAVED};
    int64_t arch = c->arch;
    return add_owned(ps, "model.arch", tg_from_data(TG_INT64, 1, (int64_t[]){1}, &arch)) |
           add_owned(ps, "llama.config", tg_from_data(TG_FLOAT64, 1, (int64_t[]){11}, cfg));
}

int gpt_checkpoint_save(const char *path, const gpt_run *run)
{
    const lm_config *c = lm_config_of(run->model);
    int64_t vocab[256];
    for (int i = 0; i < run->vocab->size; i++)
        vocab[i] = run->vocab->chars[i];
    const gpt_settings *s = &run->settings;
    double settings[6] = {(double)s->steps, (double)s->batch, s->lr,
                          s->task,           (double)s->eval_every, s->bf16};
    int64_t n = run->step > 0 ? run->step : 1;
    tg_tensor *hist = tg_zeros(TG_FLOAT64, 2, (int64_t[]){n, 2});
    double *h = hist ? tg_data(hist) : NULL;
    for (int64_t i = 0; h && i < n; i++) {
        h[2 * i] = i < run->step ? run->loss[i] : NAN;
        h[2 * i + 1] = i < run->step ? run->val[i] : NAN;
    }
    tg_params ps = {0};
    int rc = 0;
    for (int i = 0; i < run->params->count; i++)
        rc |= tg_params_add(&ps, NULL, run->params->names[i], run->params->tensors[i]);
    for (int i = 0; i < run->opt_state->count; i++)
        rc |= tg_params_add(&ps, NULL, run->opt_state->names[i], run->opt_state->tensors[i]);
    rc |= add_config(&ps, c);
    rc |= add_owned(&ps, "gpt.vocab",
                    tg_from_data(TG_INT64, 1, (int64_t[]){run->vocab->size}, vocab));
    rc |= add_owned(&ps, "train.settings", tg_from_data(TG_FLOAT64, 1, (int64_t[]){6}, settings));
    rc |= add_owned(&ps, "train.history", hist);
    rc |= add_owned(&ps, "train.rng_data", tg_rng_state_tensor(run->data_rng));
    if (lm_rng(run->model)) /* a model with dropout */
        rc |= add_owned(&ps, "train.rng_dropout", tg_rng_state_tensor(lm_rng(run->model)));
    char meta[160];
    lm_config_describe(c, meta, sizeof meta);
    if (rc == 0)
        rc = tg_safetensors_save(path, &ps, 1, (const char *[]){"gpt"}, (const char *[]){meta});
    tg_params_clear(&ps);
    if (rc)
        fprintf(stderr, "gpt: cannot save %s: %s\n", path, tg_error_message());
    return rc ? 1 : 0;
}

/* ---- the files a run writes ---- */

/* The path path names with symlinks followed: realpath for a file that
 * exists; else its directory's real path and its name (a dangling symlink
 * is followed to the file it would create, as a save does). false if even
 * the directory does not resolve. */
static bool resolve(const char *path, char out[PATH_MAX])
{
    char cur[PATH_MAX], link[PATH_MAX];
    snprintf(cur, sizeof cur, "%s", path);
    for (int hops = 0; hops < 40 && !realpath(cur, out); hops++) {
        ssize_t n = readlink(cur, link, sizeof link - 1);
        if (n < 0) { /* no such file yet: resolve its directory */
            char *slash = strrchr(cur, '/');
            const char *name = slash ? slash + 1 : cur;
            if (slash == cur)
                snprintf(link, sizeof link, "/");
            else
                snprintf(link, sizeof link, "%.*s", slash ? (int)(slash - cur) : 1,
                         slash ? cur : ".");
            if (!*name || !realpath(link, out) || strlen(out) + strlen(name) + 2 > PATH_MAX)
                return false;
            strcat(strcmp(out, "/") ? strcat(out, "/") : out, name);
            return true;
        }
        link[n] = '\0';
        char *slash = strrchr(cur, '/');
        if (link[0] != '/' && slash) /* relative to the link's directory */
            snprintf(slash + 1, sizeof cur - (size_t)(slash + 1 - cur), "%s", link);
        else
            snprintf(cur, sizeof cur, "%s", link);
    }
    return true;
}

bool gpt_same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    bool ea = stat(a, &sa) == 0, eb = stat(b, &sb) == 0;
    if (ea || eb)
        return ea && eb && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    char ra[PATH_MAX], rb[PATH_MAX];
    return resolve(a, ra) && resolve(b, rb) && !strcmp(ra, rb);
}
