/* The Llama decoder (nn/llama.c): parity with the plain-PyTorch Llama of
 * examples/llama_torch.py (tests/fixtures/llama_*.safetensors), Hugging Face
 * names and init, the KV cache against full forwards, generation, the
 * cache's memory beside GPT's, a training smoke test, and errors. */
#include <limits.h>

#include "testutil.h"

/* ---- small models ------------------------------------------------------------------ */

/* vocab 13, context 8, 2 layers, 4 query heads over 2 kv heads, width 16. */
static tg_llama_config small_config(void)
{
    return (tg_llama_config){.vocab_size = 13, .block_size = 8, .n_layer = 2, .n_head = 4,
                             .n_kv_head = 2, .n_embd = 16, .hidden_size = 24,
                             .rope_theta = 10000, .norm_eps = 1e-5, .tie_embeddings = false,
                             .rope_pairing = TG_ROPE_HALF};
}

static bool is_norm(const char *name)
{
    return strstr(name, "norm") != NULL;
}

/* Every parameter uniform in [-scale, scale] (norms around 1), so that
 * attention and the logits are far from uniform. */
static void randomize(const tg_llama *m, uint64_t seed, double scale)
{
    tg_rng *rng = tg_rng_new(seed);
    tg_params ps = {0};
    ck_assert_int_eq(tg_llama_params(m, &ps), 0);
    for (int k = 0; k < ps.count; k++) {
        int64_t n = tg_numel(ps.tensors[k]);
        double *v = malloc((size_t)n * sizeof *v);
        for (int64_t i = 0; i < n; i++)
            v[i] = (is_norm(ps.names[k]) ? 1 : 0) + scale * (2 * tg_rng_uniform01(rng) - 1);
        ck_assert_int_eq(tg_copy_from(ps.tensors[k], TG_FLOAT64, v, n), 0);
        free(v);
    }
    tg_params_clear(&ps);
    tg_rng_free(rng);
}

static tg_llama *small_model(tg_dtype dtype, tg_llama_config c, uint64_t seed)
{
    tg_rng *rng = tg_rng_new(seed);
    tg_llama *m = tg_llama_new(&c, dtype, rng);
    tg_rng_free(rng); /* the model keeps no reference to it */
    ck_assert_msg(m != NULL, "tg_llama_new: %s", tg_error_message());
    randomize(m, seed + 1, 0.5);
    return m;
}

/* The logits of seq[0..len) by one full forward, as doubles [len, V] (free them). */
static double *full_logits(const tg_llama *m, const int64_t *seq, int64_t len)
{
    tg_scope_begin();
    tg_tensor *idx = tg_from_data(TG_INT64, 2, SHAPE(1, len), seq);
    tg_tensor *logits = tg_llama_forward(m, idx, NULL, NULL);
    ck_assert_msg(logits != NULL, "tg_llama_forward: %s", tg_error_message());
    double *v = values_of(logits);
    tg_scope_end();
    return v;
}

static void assert_rows_close(const double *got, const double *want, int64_t n, double tol,
                              const char *what)
{
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i])),
                      "%s: element %lld is %.10g, expected %.10g", what, (long long)i, got[i],
                      want[i]);
}

/* ---- parity with PyTorch (tests/fixtures/llama_reference.py) ---------------------- */

/* The fixture's JSON header (malloc'd, NUL-terminated). */
static char *fixture_header(const char *path)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    unsigned char len8[8];
    ck_assert_int_eq(fread(len8, 1, 8, f), 8);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | len8[i];
    ck_assert(n > 0 && n < 1 << 20);
    char *h = malloc(n + 1);
    ck_assert_int_eq(fread(h, 1, n, f), n);
    h[n] = '\0';
    fclose(f);
    return h;
}

/* The string of __metadata__'s key (the header is compact JSON). */
static const char *meta(const char *header, const char *key, char *buf, size_t size)
{
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\":\"", key);
    const char *at = strstr(header, pattern);
    ck_assert_msg(at != NULL, "fixture metadata lacks %s", key);
    at += strlen(pattern);
    size_t n = strcspn(at, "\"");
    ck_assert(n < size);
    memcpy(buf, at, n);
    buf[n] = '\0';
    return buf;
}

static int64_t meta_int(const char *header, const char *key)
{
    char buf[64];
    return strtoll(meta(header, key, buf, sizeof buf), NULL, 10);
}

static tg_llama_config fixture_config(const char *header)
{
    char buf[64];
    return (tg_llama_config){
        .vocab_size = meta_int(header, "vocab_size"), .block_size = meta_int(header, "block_size"),
        .n_layer = meta_int(header, "n_layer"), .n_head = meta_int(header, "n_head"),
        .n_kv_head = meta_int(header, "n_kv_head"), .n_embd = meta_int(header, "n_embd"),
        .hidden_size = meta_int(header, "hidden"),
        .rope_theta = strtod(meta(header, "rope_theta", buf, sizeof buf), NULL),
        .norm_eps = strtod(meta(header, "norm_eps", buf, sizeof buf), NULL),
        .tie_embeddings = meta_int(header, "tie") == 1,
        .rope_pairing = strcmp(meta(header, "pairing", buf, sizeof buf), "half") == 0
                            ? TG_ROPE_HALF
                            : TG_ROPE_INTERLEAVED};
}

static tg_tensor *need(const tg_params *fx, const char *name)
{
    tg_tensor *t = tg_params_find(fx, name);
    ck_assert_msg(t != NULL, "the fixture has no %s", name);
    return t;
}

/* |got - want| <= atol + rtol |want| elementwise, shapes equal. */
static void assert_close(const tg_tensor *got, const tg_tensor *want, double rtol, double atol,
                         const char *what)
{
    ck_assert_msg(got != NULL, "%s: NULL (%s)", what, tg_error_message());
    ck_assert_int_eq(tg_ndim(got), tg_ndim(want));
    for (int d = 0; d < tg_ndim(got); d++)
        ck_assert_int_eq(tg_shape(got)[d], tg_shape(want)[d]);
    double *g = values_of(got), *w = values_of(want);
    int64_t bad = -1;
    for (int64_t i = 0; i < tg_numel(want) && bad < 0; i++)
        if (!(fabs(g[i] - w[i]) <= atol + rtol * fabs(w[i])))
            bad = i;
    double gb = bad >= 0 ? g[bad] : 0, wb = bad >= 0 ? w[bad] : 0;
    free(g);
    free(w);
    ck_assert_msg(bad < 0, "%s: element %lld is %.10g, torch has %.10g", what, (long long)bad, gb,
                  wb);
}

/* Tensors of the fixture that are not parameters. */
static bool is_parameter_entry(const char *name)
{
    static const char *const others[] = {"idx",    "targets", "logits",     "loss",
                                         "prompt", "greedy",  "offset_idx", "offset_logits"};
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
        if (strcmp(name, others[i]) == 0)
            return false;
    return strncmp(name, "grad.", 5) != 0;
}

/* Sets every parameter from the fixture by name; the name sets must be equal. */
static void load_parameters(const tg_params *fx, const tg_params *ps)
{
    int in_fixture = 0;
    for (int i = 0; i < fx->count; i++)
        if (is_parameter_entry(fx->names[i])) {
            in_fixture++;
            ck_assert_msg(tg_params_find(ps, fx->names[i]) != NULL,
                          "fixture tensor %s is not a parameter", fx->names[i]);
        }
    ck_assert_int_eq(in_fixture, ps->count);
    for (int i = 0; i < ps->count; i++) {
        tg_tensor *src = need(fx, ps->names[i]), *dst = ps->tensors[i];
        ck_assert_int_eq(tg_ndim(src), tg_ndim(dst));
        for (int d = 0; d < tg_ndim(src); d++)
            ck_assert_int_eq(tg_shape(src)[d], tg_shape(dst)[d]);
        double *v = values_of(src);
        ck_assert_int_eq(tg_copy_from(dst, TG_FLOAT64, v, tg_numel(src)), 0);
        free(v);
    }
}

/* Greedy generation from the fixture's prompt equals its continuation, and
 * its offset tokens through a cache holding the prompt give its logits. */
static void check_generation(const tg_llama *m, const tg_params *fx, const char *header,
                             double rtol, double atol)
{
    int64_t P = meta_int(header, "prompt_len"), N = meta_int(header, "new_tokens");
    int64_t prompt[64], want[64], got[64];
    ck_assert(P + N <= 64);
    ck_assert_int_eq(tg_copy_to(need(fx, "prompt"), TG_INT64, prompt, P), 0);
    ck_assert_int_eq(tg_copy_to(need(fx, "greedy"), TG_INT64, want, P + N), 0);
    tg_sample_options g = {.greedy = true};
    ck_assert_int_eq(tg_llama_generate((tg_llama *)m, prompt, P, N, &g, NULL, got), 0);
    for (int64_t i = 0; i < P + N; i++)
        ck_assert_msg(got[i] == want[i], "greedy token %lld: %lld, torch has %lld", (long long)i,
                      (long long)got[i], (long long)want[i]);

    tg_llama_cache *cache = tg_llama_cache_new(m);
    tg_scope_begin();
    tg_tensor *idx = tg_from_data(TG_INT64, 2, SHAPE(1, P), prompt);
    ck_assert_ptr_nonnull(tg_llama_forward_cached(m, cache, idx));
    tg_tensor *offset = tg_llama_forward_cached(m, cache, need(fx, "offset_idx"));
    assert_close(offset, need(fx, "offset_logits"), rtol, atol, "offset_logits");
    tg_scope_end();
    tg_llama_cache_free(cache);
}

static void check_fixture(const char *name, tg_dtype dtype, double rtol, double atol)
{
    char file[64], path[PATH_MAX];
    snprintf(file, sizeof file, "%s.safetensors", name);
    fixture_path(path, sizeof path, file);
    char *header = fixture_header(path);
    tg_params fx = {0}, ps = {0};
    ck_assert_msg(tg_safetensors_load(path, &fx) == 0, "%s: %s", path, tg_error_message());
    tg_llama_config c = fixture_config(header);
    tg_rng *rng = tg_rng_new(1);
    tg_llama *m = tg_llama_new(&c, dtype, rng);
    ck_assert_msg(m != NULL, "tg_llama_new: %s", tg_error_message());
    ck_assert_int_eq(tg_llama_params(m, &ps), 0);
    load_parameters(&fx, &ps);

    tg_scope_begin();
    tg_tensor *loss = NULL;
    tg_tensor *logits = tg_llama_forward(m, need(&fx, "idx"), need(&fx, "targets"), &loss);
    assert_close(logits, need(&fx, "logits"), rtol, atol, "logits");
    assert_close(loss, need(&fx, "loss"), rtol, atol, "loss");
    ck_assert_int_eq(tg_backward(loss, NULL), 0);
    tg_scope_end();
    for (int i = 0; i < ps.count; i++) {
        char gname[128];
        snprintf(gname, sizeof gname, "grad.%s", ps.names[i]);
        tg_tensor *g = tg_grad(ps.tensors[i]);
        assert_close(g, need(&fx, gname), rtol, atol, gname);
        tg_release(g);
    }
    check_generation(m, &fx, header, rtol, atol);

    tg_params_clear(&ps);
    tg_params_clear(&fx);
    tg_llama_free(m);
    tg_rng_free(rng);
    free(header);
}

START_TEST(gqa_untied_half_matches_pytorch_float64)
{
    check_fixture("llama_gqa", TG_FLOAT64, 1e-9, 1e-11);
}
END_TEST

START_TEST(gqa_untied_half_matches_pytorch_float32)
{
    check_fixture("llama_gqa", TG_FLOAT32, 1e-4, 1e-5);
}
END_TEST

START_TEST(mqa_tied_interleaved_matches_pytorch_float64)
{
    check_fixture("llama_mqa", TG_FLOAT64, 1e-9, 1e-11);
}
END_TEST

START_TEST(mqa_tied_interleaved_matches_pytorch_float32)
{
    check_fixture("llama_mqa", TG_FLOAT32, 1e-4, 1e-5);
}
END_TEST

/* ---- construction and parameters -------------------------------------------------- */

START_TEST(params_are_the_hugging_face_state_dict)
{
    tg_llama_config c = small_config();
    tg_llama *m = small_model(TG_FLOAT32, c, 1);
    tg_params ps = {0};
    ck_assert_int_eq(tg_llama_params(m, &ps), 0);
    ck_assert_int_eq(ps.count, 1 + 2 * 9 + 2);
    const struct {
        const char *name;
        int64_t rows, cols; /* cols 0: a vector */
    } want[] = {
        {"model.embed_tokens.weight", 13, 16},
        {"model.layers.0.self_attn.q_proj.weight", 16, 16},
        {"model.layers.0.self_attn.k_proj.weight", 8, 16},
        {"model.layers.0.self_attn.v_proj.weight", 8, 16},
        {"model.layers.0.self_attn.o_proj.weight", 16, 16},
        {"model.layers.0.mlp.gate_proj.weight", 24, 16},
        {"model.layers.0.mlp.up_proj.weight", 24, 16},
        {"model.layers.0.mlp.down_proj.weight", 16, 24},
        {"model.layers.0.input_layernorm.weight", 16, 0},
        {"model.layers.0.post_attention_layernorm.weight", 16, 0},
        {"model.layers.1.self_attn.k_proj.weight", 8, 16},
        {"model.layers.1.post_attention_layernorm.weight", 16, 0},
        {"model.norm.weight", 16, 0},
        {"lm_head.weight", 13, 16},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        tg_tensor *t = tg_params_find(&ps, want[i].name);
        ck_assert_msg(t != NULL, "no parameter %s", want[i].name);
        if (want[i].cols)
            ck_assert_shape(t, want[i].rows, want[i].cols);
        else
            ck_assert_shape(t, want[i].rows);
        ck_assert(tg_requires_grad(t));
    }
    ck_assert_str_eq(ps.names[0], "model.embed_tokens.weight");
    ck_assert_str_eq(ps.names[ps.count - 1], "lm_head.weight");
    tg_params_clear(&ps);
    tg_llama_free(m);

    /* tied: lm_head.weight is the embedding's and is not listed */
    c.tie_embeddings = true;
    m = small_model(TG_FLOAT32, c, 1);
    ck_assert_int_eq(tg_llama_params(m, &ps), 0);
    ck_assert_int_eq(ps.count, 1 + 2 * 9 + 1);
    ck_assert_ptr_null(tg_params_find(&ps, "lm_head.weight"));
    ck_assert_str_eq(ps.names[ps.count - 1], "model.norm.weight");
    tg_params_clear(&ps);
    tg_llama_free(m);
}
END_TEST

static void moments(const tg_tensor *t, double *mean, double *std)
{
    double *v = values_of(t), s = 0, s2 = 0;
    int64_t n = tg_numel(t);
    for (int64_t i = 0; i < n; i++) {
        s += v[i];
        s2 += v[i] * v[i];
    }
    free(v);
    *mean = s / (double)n;
    *std = sqrt(s2 / (double)n - *mean * *mean);
}

START_TEST(init_is_hugging_face_normal_002_and_norms_one)
{
    tg_llama_config c = {.vocab_size = 300, .block_size = 16, .n_layer = 2, .n_head = 4,
                         .n_kv_head = 1, .n_embd = 64, .hidden_size = 160, .rope_theta = 1e4,
                         .norm_eps = 1e-6, .rope_pairing = TG_ROPE_INTERLEAVED};
    tg_rng *rng = tg_rng_new(3);
    tg_llama *m = tg_llama_new(&c, TG_FLOAT64, rng);
    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(tg_llama_config_of(m)->n_kv_head, 1);
    tg_params ps = {0};
    ck_assert_int_eq(tg_llama_params(m, &ps), 0);
    for (int k = 0; k < ps.count; k++) {
        double mean, std;
        moments(ps.tensors[k], &mean, &std);
        if (is_norm(ps.names[k])) {
            ck_assert_msg(mean == 1 && std == 0, "%s: mean %g std %g", ps.names[k], mean, std);
        } else {
            ck_assert_msg(fabs(mean) < 0.004 && fabs(std - 0.02) < 0.002,
                          "%s: mean %g std %g", ps.names[k], mean, std);
        }
    }
    /* a second model from the same seed is the same model */
    tg_rng_seed(rng, 3);
    tg_llama *again = tg_llama_new(&c, TG_FLOAT64, rng);
    tg_params ps2 = {0};
    ck_assert_int_eq(tg_llama_params(again, &ps2), 0);
    for (int k = 0; k < ps.count; k++) {
        double *a = values_of(ps.tensors[k]), *b = values_of(ps2.tensors[k]);
        ck_assert_int_eq(memcmp(a, b, (size_t)tg_numel(ps.tensors[k]) * sizeof *a), 0);
        free(a);
        free(b);
    }
    tg_params_clear(&ps);
    tg_params_clear(&ps2);
    tg_llama_free(m);
    tg_llama_free(again);
    tg_rng_free(rng);
}
END_TEST

START_TEST(new_rejects_bad_config_naming_the_values)
{
    tg_rng *rng = tg_rng_new(1);
    const tg_llama_config good = small_config();
    tg_llama_config c;
#define REFUSED(field, value, code, ...)                                               \
    do {                                                                               \
        c = good;                                                                      \
        c.field = value;                                                               \
        ck_assert_ptr_null(tg_llama_new(&c, TG_FLOAT32, rng));                         \
        ck_assert_error(code, "tg_llama_new", __VA_ARGS__);                            \
    } while (0)
    REFUSED(vocab_size, 0, TG_ERR_VALUE, "vocab_size = 0");
    REFUSED(block_size, -3, TG_ERR_VALUE, "block_size = -3");
    REFUSED(n_layer, 0, TG_ERR_VALUE, "n_layer = 0");
    REFUSED(n_head, 0, TG_ERR_VALUE, "n_head = 0");
    REFUSED(n_kv_head, 0, TG_ERR_VALUE, "n_kv_head = 0");
    REFUSED(n_embd, -16, TG_ERR_VALUE, "n_embd = -16");
    REFUSED(hidden_size, 0, TG_ERR_VALUE, "hidden_size = 0");
    REFUSED(n_head, 3, TG_ERR_VALUE, "n_embd is not a multiple of n_head", "n_embd 16",
            "n_head 3");
    REFUSED(n_head, 16, TG_ERR_VALUE, "head_dim", "odd", "n_head 16");
    REFUSED(n_kv_head, 3, TG_ERR_VALUE, "n_kv_head does not divide n_head", "n_head 4",
            "n_kv_head 3");
    REFUSED(rope_theta, 0, TG_ERR_VALUE, "rope_theta = 0");
    REFUSED(rope_theta, INFINITY, TG_ERR_VALUE, "rope_theta = inf");
    REFUSED(norm_eps, -1e-5, TG_ERR_VALUE, "norm_eps = -1e-05");
    REFUSED(norm_eps, NAN, TG_ERR_VALUE, "norm_eps = nan");
    REFUSED(rope_pairing, (tg_rope_pairing)2, TG_ERR_VALUE, "rope_pairing = 2");
#undef REFUSED
    c = good;
    ck_assert_ptr_null(tg_llama_new(&c, TG_INT64, rng));
    ck_assert_error(TG_ERR_DTYPE, "tg_llama_new", "int64");
    ck_assert_ptr_null(tg_llama_new(NULL, TG_FLOAT32, rng));
    ck_assert_error(TG_ERR_NULL, "config");
    ck_assert_ptr_null(tg_llama_new(&c, TG_FLOAT32, NULL));
    ck_assert_error(TG_ERR_NULL, "rng");
    tg_rng_free(rng);
}
END_TEST

/* A checkpoint of a model with other kv heads does not load, and says why. */
START_TEST(loading_another_kv_head_count_names_the_tensor_and_both_shapes)
{
    tg_llama_config c = small_config();
    tg_llama *two = small_model(TG_FLOAT32, c, 4);
    c.n_kv_head = 1;
    tg_llama *one = small_model(TG_FLOAT32, c, 5);
    char dir[64], path[128];
    make_temp_dir(dir, sizeof dir, "tg_llama");
    snprintf(path, sizeof path, "%s/one.safetensors", dir);
    tg_params ps1 = {0}, ps2 = {0};
    ck_assert_int_eq(tg_llama_params(one, &ps1), 0);
    ck_assert_int_eq(tg_llama_params(two, &ps2), 0);
    ck_assert_int_eq(tg_safetensors_save(path, &ps1, 0, NULL, NULL), 0);
    double *before = values_of(ps2.tensors[0]);
    ck_assert_int_eq(tg_safetensors_load_into(path, &ps2), -1);
    ck_assert_error(TG_ERR_VALUE, "model.layers.0.self_attn.k_proj.weight", "[4,16]", "[8,16]");
    double *after = values_of(ps2.tensors[0]); /* nothing was loaded */
    ck_assert_int_eq(memcmp(before, after, (size_t)tg_numel(ps2.tensors[0]) * sizeof *after), 0);
    free(before);
    free(after);
    /* and the same checkpoint loads into a model of its own config */
    ck_assert_int_eq(tg_safetensors_load_into(path, &ps1), 0);
    tg_params_clear(&ps1);
    tg_params_clear(&ps2);
    remove_temp_dir(dir);
    tg_llama_free(one);
    tg_llama_free(two);
}
END_TEST

/* ---- forward ------------------------------------------------------------------------ */

START_TEST(forward_rejects_bad_input)
{
    tg_llama *m = small_model(TG_FLOAT32, small_config(), 2);
    tg_scope_begin();
    tg_tensor *loss = (tg_tensor *)1;
    tg_tensor *idx = tg_from_data(TG_INT64, 2, SHAPE(1, 3), (int64_t[]){1, 2, 13});
    ck_assert_ptr_null(tg_llama_forward(m, idx, NULL, &loss));
    ck_assert_ptr_null(loss);
    ck_assert_error(TG_ERR_INDEX, "tg_llama_forward", "token 13", "vocab_size 13");
    idx = tg_zeros(TG_INT64, 2, SHAPE(1, 9));
    ck_assert_ptr_null(tg_llama_forward(m, idx, NULL, NULL));
    ck_assert_error(TG_ERR_SHAPE, "tg_llama_forward", "[1,9]", "block_size 8");
    ck_assert_ptr_null(tg_llama_forward(m, tg_zeros(TG_FLOAT32, 2, SHAPE(1, 2)), NULL, NULL));
    ck_assert_error(TG_ERR_DTYPE, "tg_llama_forward", "float32");
    idx = tg_zeros(TG_INT64, 2, SHAPE(2, 3));
    ck_assert_ptr_null(tg_llama_forward(m, idx, tg_zeros(TG_INT64, 2, SHAPE(2, 2)), &loss));
    ck_assert_error(TG_ERR_SHAPE, "targets [2,2] do not match idx [2,3]");
    ck_assert_ptr_null(tg_llama_forward(NULL, idx, NULL, NULL));
    ck_assert_error(TG_ERR_NULL, "m");
    tg_scope_end();
    tg_llama_free(m);
}
END_TEST

/* A few AdamW steps on one repeated sequence lower its loss well below the
 * start (about log 13 for a fresh model). */
START_TEST(training_steps_lower_the_loss)
{
    tg_llama_config c = small_config();
    c.tie_embeddings = true;
    tg_rng *rng = tg_rng_new(7);
    tg_llama *m = tg_llama_new(&c, TG_FLOAT32, rng);
    tg_rng_free(rng);
    tg_params ps = {0};
    ck_assert_int_eq(tg_llama_params(m, &ps), 0);
    tg_optim *opt = tg_adamw_new(&ps, 1e-2, 0.9, 0.99, 1e-8, 0.0);
    const int64_t seq[] = {1, 5, 2, 7, 1, 5, 2, 7, 1};
    tg_tensor *idx = tg_from_data(TG_INT64, 2, SHAPE(1, 8), seq);
    tg_tensor *targets = tg_from_data(TG_INT64, 2, SHAPE(1, 8), seq + 1);
    double first = 0, last = 0;
    for (int step = 0; step < 40; step++) {
        tg_scope_begin();
        tg_tensor *loss = NULL;
        ck_assert_ptr_nonnull(tg_llama_forward(m, idx, targets, &loss));
        ck_assert_int_eq(tg_backward(loss, NULL), 0);
        ck_assert_int_eq(tg_copy_to(loss, TG_FLOAT64, step ? &last : &first, 1), 0);
        tg_scope_end();
        ck_assert_int_eq(tg_optim_step(opt), 0);
        tg_optim_zero_grad(opt);
    }
    ck_assert_msg(first > 2.0 && last < 0.3 * first, "loss %g -> %g", first, last);
    tg_release(idx);
    tg_release(targets);
    tg_optim_free(opt);
    tg_params_clear(&ps);
    tg_llama_free(m);
}
END_TEST

/* ---- the KV cache --------------------------------------------------------------------- */

/* Logits through the cache, fed position by position and in chunks at an
 * offset, equal the rows of one full forward. */
static void check_cached_equals_full(tg_dtype dtype, tg_rope_pairing pairing, double tol)
{
    tg_llama_config c = small_config();
    c.rope_pairing = pairing;
    tg_llama *m = small_model(dtype, c, 11);
    const int64_t seq[8] = {3, 9, 1, 12, 0, 7, 7, 4};
    int64_t V = c.vocab_size;
    double *want = full_logits(m, seq, 8);
    const int64_t chunks[][8] = {{1, 1, 1, 1, 1, 1, 1, 1}, {3, 2, 3}, {1, 4, 3}, {8}};
    for (size_t k = 0; k < sizeof chunks / sizeof chunks[0]; k++) {
        tg_llama_cache *cache = tg_llama_cache_new(m);
        ck_assert_ptr_nonnull(cache);
        int64_t pos = 0;
        for (int j = 0; j < 8 && chunks[k][j]; j++) {
            int64_t T = chunks[k][j];
            tg_scope_begin();
            tg_tensor *idx = tg_from_data(TG_INT64, 2, SHAPE(1, T), seq + pos);
            tg_tensor *logits = tg_llama_forward_cached(m, cache, idx);
            ck_assert_msg(logits != NULL, "forward_cached: %s", tg_error_message());
            ck_assert_shape(logits, 1, T, V);
            ck_assert(!tg_requires_grad(logits));
            double *got = values_of(logits);
            char what[64];
            snprintf(what, sizeof what, "chunking %zu, positions %lld..", k, (long long)pos);
            assert_rows_close(got, want + pos * V, T * V, tol, what);
            free(got);
            tg_scope_end();
            pos += T;
            ck_assert_int_eq(tg_llama_cache_len(cache), pos);
        }
        /* the window is full: one more position is refused, the cache as it was */
        tg_scope_begin();
        tg_tensor *idx = tg_zeros(TG_INT64, 2, SHAPE(1, 1));
        ck_assert_ptr_null(tg_llama_forward_cached(m, cache, idx));
        ck_assert_error(TG_ERR_SHAPE, "tg_llama_forward_cached", "block_size 8");
        ck_assert_int_eq(tg_llama_cache_len(cache), 8);
        tg_scope_end();
        tg_llama_cache_free(cache);
    }
    free(want);
    tg_llama_free(m);
}

START_TEST(cached_forward_equals_full_forward_float64)
{
    check_cached_equals_full(TG_FLOAT64, TG_ROPE_HALF, 1e-10);
    check_cached_equals_full(TG_FLOAT64, TG_ROPE_INTERLEAVED, 1e-10);
}
END_TEST

START_TEST(cached_forward_equals_full_forward_float32)
{
    check_cached_equals_full(TG_FLOAT32, TG_ROPE_HALF, 1e-4);
}
END_TEST

START_TEST(cache_rejects_another_model_and_bad_input)
{
    tg_llama *m = small_model(TG_FLOAT32, small_config(), 2);
    tg_llama *other = small_model(TG_FLOAT32, small_config(), 3);
    tg_llama_cache *cache = tg_llama_cache_new(m);
    tg_scope_begin();
    tg_tensor *idx = tg_zeros(TG_INT64, 2, SHAPE(1, 2));
    ck_assert_ptr_null(tg_llama_forward_cached(other, cache, idx));
    ck_assert_error(TG_ERR_VALUE, "tg_llama_forward_cached", "another model");
    ck_assert_ptr_null(tg_llama_forward_cached(m, cache, tg_zeros(TG_INT64, 2, SHAPE(2, 1))));
    ck_assert_error(TG_ERR_SHAPE, "tg_llama_forward_cached", "[2,1]");
    ck_assert_ptr_null(tg_llama_forward_cached(m, NULL, idx));
    ck_assert_error(TG_ERR_NULL, "c");
    ck_assert_int_eq(tg_llama_cache_len(cache), 0);
    ck_assert_ptr_nonnull(tg_llama_forward_cached(m, cache, idx));
    ck_assert_int_eq(tg_llama_cache_len(cache), 2);
    tg_llama_cache_reset(cache);
    ck_assert_int_eq(tg_llama_cache_len(cache), 0);
    tg_scope_end();
    tg_llama_cache_free(cache);
    tg_llama_cache_free(NULL);
    tg_llama_free(NULL);
    tg_llama_free(m);
    tg_llama_free(other);
}
END_TEST

/* llama-medium's cache beside gpt-medium's (same width, depth and context):
 * 2 kv heads of 6 hold a third. */
START_TEST(kv_cache_is_n_kv_head_over_n_head_of_gpts)
{
    tg_rng *rng = tg_rng_new(1);
    tg_gpt_config g = {.vocab_size = 65, .block_size = 256, .n_layer = 6, .n_head = 6,
                       .n_embd = 384};
    tg_llama_config c = {.vocab_size = 65, .block_size = 256, .n_layer = 6, .n_head = 6,
                         .n_kv_head = 2, .n_embd = 384, .hidden_size = 1024,
                         .rope_theta = 1e4, .norm_eps = 1e-5, .tie_embeddings = true};
    tg_gpt *gpt = tg_gpt_new(&g, TG_FLOAT32, rng);
    tg_llama *m = tg_llama_new(&c, TG_FLOAT32, rng);
    int64_t gb = tg_gpt_kv_cache_bytes(gpt), lb = tg_llama_kv_cache_bytes(m);
    ck_assert_int_eq(gb, 2LL * 6 * 256 * 384 * 4);
    ck_assert_int_eq(lb * 3, gb);
    /* and it is what a cache holds */
    int64_t live = tg_live_tensors();
    tg_llama_cache *cache = tg_llama_cache_new(m);
    ck_assert_int_eq(tg_live_tensors() - live, 2 * 6); /* a key and a value tensor a layer */
    tg_llama_cache_free(cache);
    ck_assert_int_eq(tg_live_tensors(), live);
    ck_assert_int_eq(tg_llama_kv_cache_bytes(NULL), -1);
    ck_assert_error(TG_ERR_NULL, "tg_llama_kv_cache_bytes");
    tg_gpt_free(gpt);
    tg_llama_free(m);
    tg_rng_free(rng);
}
END_TEST

/* ---- generation ------------------------------------------------------------------------ */

static int64_t argmax(const double *v, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (v[i] > v[best])
            best = i;
    return best;
}

/* Greedy by a full forward over the last block_size tokens at every step. */
static void slow_greedy(const tg_llama *m, const int64_t *prompt, int64_t plen, int64_t n,
                        int64_t *out)
{
    int64_t block = tg_llama_config_of(m)->block_size, V = tg_llama_config_of(m)->vocab_size;
    memcpy(out, prompt, (size_t)plen * sizeof *out);
    for (int64_t i = 0; i < n; i++) {
        int64_t len = plen + i, ctx = len < block ? len : block;
        double *rows = full_logits(m, out + len - ctx, ctx);
        out[len] = argmax(rows + (ctx - 1) * V, V);
        free(rows);
    }
}

START_TEST(greedy_generation_equals_full_recomputation_and_slides)
{
    tg_llama *m = small_model(TG_FLOAT64, small_config(), 21);
    const int64_t prompt[] = {3, 7, 1};
    int64_t fast[3 + 14], slow[3 + 14];
    tg_sample_options o = {.greedy = true, .slide = true};
    ck_assert_int_eq(tg_llama_generate(m, prompt, 3, 14, &o, NULL, fast), 0);
    slow_greedy(m, prompt, 3, 14, slow);
    for (int i = 0; i < 17; i++)
        ck_assert_msg(fast[i] == slow[i], "token %d: %lld with the cache, %lld without", i,
                      (long long)fast[i], (long long)slow[i]);
    bool seen[13] = {false};
    int distinct = 0;
    for (int i = 3; i < 17; i++) {
        distinct += !seen[fast[i]];
        seen[fast[i]] = true;
    }
    ck_assert_int_ge(distinct, 3);
    tg_llama_free(m);
}
END_TEST

START_TEST(generation_past_block_size_without_slide_is_refused_up_front)
{
    tg_llama *m = small_model(TG_FLOAT32, small_config(), 21);
    const int64_t prompt[] = {3, 7, 1};
    int64_t out[3 + 6];
    for (int i = 0; i < 9; i++)
        out[i] = -5;
    tg_sample_options o = {.greedy = true, .slide = false};
    ck_assert_int_eq(tg_llama_generate(m, prompt, 3, 6, &o, NULL, out), -1);
    ck_assert_error(TG_ERR_VALUE, "tg_llama_generate", "block_size");
    ck_assert_int_eq(out[0], -5); /* nothing written */
    /* up to block_size is fine */
    ck_assert_int_eq(tg_llama_generate(m, prompt, 3, 5, &o, NULL, out), 0);
    tg_llama_free(m);
}
END_TEST

static int count_and_stop(int64_t token, void *ctx)
{
    int64_t *seen = ctx;
    seen[++seen[0]] = token;
    return seen[0] == 3;
}

START_TEST(sampling_with_top_p_runs_and_a_tiny_top_p_is_greedy)
{
    tg_llama *m = small_model(TG_FLOAT64, small_config(), 31);
    const int64_t prompt[] = {2, 5};
    int64_t greedy[2 + 6], nucleus[2 + 6], sampled[2 + 6];
    tg_sample_options g = {.greedy = true}, p = {.temperature = 1.5, .top_p = 1e-9};
    tg_rng *rng = tg_rng_new(9);
    ck_assert_int_eq(tg_llama_generate(m, prompt, 2, 6, &g, NULL, greedy), 0);
    ck_assert_int_eq(tg_llama_generate(m, prompt, 2, 6, &p, rng, nucleus), 0);
    ck_assert_int_eq(memcmp(greedy, nucleus, sizeof greedy), 0);
    p.top_p = 0.9;
    p.top_k = 5;
    ck_assert_int_eq(tg_llama_generate(m, prompt, 2, 6, &p, rng, sampled), 0);
    for (int i = 2; i < 8; i++)
        ck_assert(sampled[i] >= 0 && sampled[i] < 13);
    /* generate_each hands out the tokens in order and stops when asked */
    int64_t seen[8] = {0}, out[2 + 6];
    ck_assert_int_eq(tg_llama_generate_each(m, prompt, 2, 6, &g, NULL, out, count_and_stop,
                                            seen), 0);
    ck_assert_int_eq(seen[0], 3);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(seen[1 + i], greedy[2 + i]);
    p.top_p = -0.5;
    ck_assert_int_eq(tg_llama_generate(m, prompt, 2, 6, &p, rng, sampled), -1);
    ck_assert_error(TG_ERR_VALUE, "top_p");
    tg_rng_free(rng);
    tg_llama_free(m);
}
END_TEST

/* The cache and the copies made while filling it belong to generation
 * alone: a scope the caller has open and grad mode are left as they were. */
START_TEST(generation_leaves_an_open_scope_and_grad_mode_as_they_were)
{
    tg_llama *m = small_model(TG_FLOAT32, small_config(), 41);
    const int64_t prompt[] = {3, 7, 1};
    int64_t inside[3 + 12], outside[3 + 12];
    tg_sample_options o = {.greedy = true, .slide = true};
    ck_assert_int_eq(tg_llama_generate(m, prompt, 3, 12, &o, NULL, outside), 0);
    int64_t live = tg_live_tensors();
    tg_scope_begin();
    ck_assert_int_eq(tg_llama_generate(m, prompt, 3, 12, &o, NULL, inside), 0);
    ck_assert_int_eq(tg_live_tensors(), live);
    ck_assert_int_eq(tg_scope_depth(), 1);
    tg_scope_end();
    ck_assert_int_eq(memcmp(inside, outside, sizeof inside), 0);
    ck_assert(tg_grad_enabled());
    ck_assert_int_eq(tg_error_code(), TG_OK);
    /* n = 0 copies the prompt */
    int64_t same[3] = {0};
    ck_assert_int_eq(tg_llama_generate(m, prompt, 3, 0, &o, NULL, same), 0);
    ck_assert_int_eq(memcmp(same, prompt, sizeof same), 0);
    tg_llama_free(m);
}
END_TEST

/* ---- the suite ------------------------------------------------------------------------ */

int main(void)
{
    Suite *s = suite_create("llama");
    TCase *parity = tcase_checked("parity");
    tcase_set_timeout(parity, 60);
    tcase_add_test(parity, gqa_untied_half_matches_pytorch_float64);
    tcase_add_test(parity, gqa_untied_half_matches_pytorch_float32);
    tcase_add_test(parity, mqa_tied_interleaved_matches_pytorch_float64);
    tcase_add_test(parity, mqa_tied_interleaved_matches_pytorch_float32);
    suite_add_tcase(s, parity);
    TCase *model = tcase_checked("model");
    tcase_set_timeout(model, 60);
    tcase_add_test(model, params_are_the_hugging_face_state_dict);
    tcase_add_test(model, init_is_hugging_face_normal_002_and_norms_one);
    tcase_add_test(model, new_rejects_bad_config_naming_the_values);
    tcase_add_test(model, loading_another_kv_head_count_names_the_tensor_and_both_shapes);
    tcase_add_test(model, forward_rejects_bad_input);
    tcase_add_test(model, training_steps_lower_the_loss);
    suite_add_tcase(s, model);
    TCase *cache = tcase_checked("cache");
    tcase_set_timeout(cache, 60);
    tcase_add_test(cache, cached_forward_equals_full_forward_float64);
    tcase_add_test(cache, cached_forward_equals_full_forward_float32);
    tcase_add_test(cache, cache_rejects_another_model_and_bad_input);
    tcase_add_test(cache, kv_cache_is_n_kv_head_over_n_head_of_gpts);
    suite_add_tcase(s, cache);
    TCase *gen = tcase_checked("generation");
    tcase_set_timeout(gen, 60);
    tcase_add_test(gen, greedy_generation_equals_full_recomputation_and_slides);
    tcase_add_test(gen, generation_past_block_size_without_slide_is_refused_up_front);
    tcase_add_test(gen, sampling_with_top_p_runs_and_a_tiny_top_p_is_greedy);
    tcase_add_test(gen, generation_leaves_an_open_scope_and_grad_mode_as_they_were);
    suite_add_tcase(s, gen);
    return run_suite(s);
}
