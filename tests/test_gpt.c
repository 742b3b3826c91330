/* The GPT (nn/gpt.c): logits, loss and gradients against PyTorch
 * (tests/fixtures/gpt_reference.py), parameter names, GPT-2 init, a float64
 * finite-difference check, training mode and errors (generation is in
 * test_gpt_generate.c). */
#include "testutil.h"

#include "gpt_testutil.h"

/* The tiny config of gpt_reference.py. */
static const tg_gpt_config TINY = {11, 8, 2, 2, 8, 0.0};

static const char *const TORCH_NAMES[] = {
    "transformer.wte.weight", "transformer.wpe.weight",
    "transformer.h.0.ln_1.weight", "transformer.h.0.ln_1.bias",
    "transformer.h.0.attn.c_attn.weight", "transformer.h.0.attn.c_attn.bias",
    "transformer.h.0.attn.c_proj.weight", "transformer.h.0.attn.c_proj.bias",
    "transformer.h.0.ln_2.weight", "transformer.h.0.ln_2.bias",
    "transformer.h.0.mlp.c_fc.weight", "transformer.h.0.mlp.c_fc.bias",
    "transformer.h.0.mlp.c_proj.weight", "transformer.h.0.mlp.c_proj.bias",
    "transformer.h.1.ln_1.weight", "transformer.h.1.ln_1.bias",
    "transformer.h.1.attn.c_attn.weight", "transformer.h.1.attn.c_attn.bias",
    "transformer.h.1.attn.c_proj.weight", "transformer.h.1.attn.c_proj.bias",
    "transformer.h.1.ln_2.weight", "transformer.h.1.ln_2.bias",
    "transformer.h.1.mlp.c_fc.weight", "transformer.h.1.mlp.c_fc.bias",
    "transformer.h.1.mlp.c_proj.weight", "transformer.h.1.mlp.c_proj.bias",
    "transformer.ln_f.weight", "transformer.ln_f.bias",
};
#define N_TORCH_NAMES ((int)(sizeof TORCH_NAMES / sizeof TORCH_NAMES[0]))

/* gpt_reference.py's value(name, k, i). */
typedef struct {
    int k;
    bool ln_weight;
} formula_ctx;

static double formula(int64_t i, void *ctx)
{
    const formula_ctx *f = ctx;
    return (f->ln_weight ? 1.0 : 0.0) + 0.1 * sin(0.7 * (double)i + 1.3 * f->k);
}

static void set_reference_values(tg_gpt *m)
{
    tg_params ps = {0};
    ck_assert_int_eq(tg_gpt_params(m, &ps), 0);
    for (int k = 0; k < N_TORCH_NAMES; k++) {
        tg_tensor *t = tg_params_find(&ps, TORCH_NAMES[k]);
        ck_assert_ptr_nonnull(t);
        formula_ctx f = {k, is_ln_weight(TORCH_NAMES[k])};
        fill(t, formula, &f);
    }
    tg_params_clear(&ps);
}

/* The reference batch: idx[b][t] = (3b + 5t + 1) % 11, targets (7b + 2t + 3) % 11
 * with targets[1][2] = -1 (ignored). */
static void reference_batch(tg_tensor **idx, tg_tensor **targets)
{
    int64_t ix[10], tg[10];
    for (int b = 0; b < 2; b++)
        for (int t = 0; t < 5; t++) {
            ix[b * 5 + t] = (3 * b + 5 * t + 1) % 11;
            tg[b * 5 + t] = (7 * b + 2 * t + 3) % 11;
        }
    tg[1 * 5 + 2] = -1;
    *idx = tg_from_data(TG_INT64, 2, SHAPE(2, 5), ix);
    *targets = tg_from_data(TG_INT64, 2, SHAPE(2, 5), tg);
}

/* Elements [start, start + n) of t in row-major order. */
static void assert_slice(const tg_tensor *t, int64_t start, const double *want, int n, double tol)
{
    int64_t total = tg_numel(t);
    double *v = malloc((size_t)total * sizeof *v);
    ck_assert_int_eq(tg_copy_to(t, TG_FLOAT64, v, total), 0);
    for (int i = 0; i < n; i++)
        ck_assert_msg(fabs(v[start + i] - want[i]) <= tol * (1 + fabs(want[i])),
                      "element %lld: %.10g, expected %.10g", (long long)(start + i),
                      v[start + i], want[i]);
    free(v);
}

static void check_against_pytorch(tg_dtype dtype, double tol)
{
    tg_rng *rng = tg_rng_new(1);
    tg_gpt *m = tg_gpt_new(&TINY, dtype, rng);
    ck_assert_ptr_nonnull(m);
    set_reference_values(m);
    tg_tensor *idx, *targets, *loss;
    reference_batch(&idx, &targets);
    tg_tensor *logits = tg_gpt_forward(m, idx, targets, &loss);
    ck_assert_shape(logits, 2, 5, 11);
    ck_assert_ptr_nonnull(loss);
    /* Printed by tests/fixtures/gpt_reference.py (PyTorch 1.13, float64). */
    assert_slice(logits, 0, (const double[]){0.0355013935, -0.1072675809, -0.2018875447,
        -0.2058866011, -0.1174697006, 0.0236756181, 0.1541937036, 0.2154991323, 0.1800738442,
        0.0638191259, -0.0810819712}, 11, tol);
    assert_slice(logits, 9 * 11, (const double[]){0.1678248851, 0.3047233751, 0.3048412191,
        0.1681255208, -0.0440563847, -0.2364627782, -0.3227285399, -0.2641317089,
        -0.0869745419, 0.1292227350, 0.2874160299}, 11, tol);
    ck_assert_values(loss, tol, 2.4437101118);
    ck_assert_int_eq(tg_backward(loss, NULL), 0);

    tg_params ps = {0};
    ck_assert_int_eq(tg_gpt_params(m, &ps), 0);
    static const struct {
        const char *name;
        double g[6];
    } grads[] = {
        /* wte's gradient sums the embedding lookup and the tied LM head. */
        {"transformer.wte.weight", {0.1316300602, -0.1431029997, 0.0768204391, -0.0863858282,
                                    -0.0077256774, 0.0169777403}},
        {"transformer.wpe.weight", {0.0844536927, 0.0907167739, 0.0602688850, 0.0014435425,
                                    -0.0419631181, -0.0874760014}},
        {"transformer.h.0.attn.c_attn.weight", {-0.0004898837, -0.0015938252, -0.0018161358,
                                                -0.0011960250, -0.0000164075, 0.0013146583}},
        {"transformer.h.1.mlp.c_proj.bias", {-0.0113316951, -0.0320972642, -0.0225739148,
                                             -0.0138213702, 0.0031847835, 0.0245438854}},
        {"transformer.ln_f.weight", {0.0228745688, -0.0044780607, -0.0120041326, 0.0368983628,
                                     -0.0131187884, -0.0118855818}},
    };
    for (size_t i = 0; i < sizeof grads / sizeof grads[0]; i++) {
        tg_tensor *g = tg_grad(tg_params_find(&ps, grads[i].name));
        ck_assert_msg(g != NULL, "%s has no gradient", grads[i].name);
        /* Gradients are small: compare on an absolute scale of 1e-2 of them. */
        int64_t n = tg_numel(g);
        double *v = malloc((size_t)n * sizeof *v);
        ck_assert_int_eq(tg_copy_to(g, TG_FLOAT64, v, n), 0);
        for (int j = 0; j < 6; j++)
            ck_assert_msg(fabs(v[j] - grads[i].g[j]) <= tol * 0.1, "%s[%d]: %.10g, expected %.10g",
                          grads[i].name, j, v[j], grads[i].g[j]);
        free(v);
        tg_release(g);
    }
    tg_params_clear(&ps);
    tg_release(logits);
    tg_release(loss);
    tg_release(idx);
    tg_release(targets);
    tg_gpt_free(m);
    tg_rng_free(rng);
}

START_TEST(forward_loss_and_grads_match_pytorch_float64)
{
    check_against_pytorch(TG_FLOAT64, 1e-8);
}
END_TEST

START_TEST(forward_loss_and_grads_match_pytorch_float32)
{
    check_against_pytorch(TG_FLOAT32, 1e-4);
}
END_TEST

START_TEST(params_are_the_torch_state_dict_minus_lm_head)
{
    tg_rng *rng = tg_rng_new(2);
    tg_gpt *m = tg_gpt_new(&TINY, TG_FLOAT32, rng);
    tg_params ps = {0};
    ck_assert_int_eq(tg_gpt_params(m, &ps), 0);
    ck_assert_int_eq(ps.count, N_TORCH_NAMES);
    for (int i = 0; i < N_TORCH_NAMES; i++)
        ck_assert_str_eq(ps.names[i], TORCH_NAMES[i]);
    int64_t d = 8, V = 11, blk = 8;
    int64_t per_layer = 2 * d + (3 * d * d + 3 * d) + (d * d + d) + 2 * d + (4 * d * d + 4 * d) +
                        (4 * d * d + d);
    ck_assert_int_eq(tg_params_numel(&ps), V * d + blk * d + 2 * per_layer + 2 * d);
    ck_assert_shape(tg_params_find(&ps, "transformer.h.1.attn.c_attn.weight"), 24, 8);
    ck_assert_shape(tg_params_find(&ps, "transformer.h.1.mlp.c_proj.weight"), 8, 32);
    for (int i = 0; i < ps.count; i++)
        ck_assert(tg_requires_grad(ps.tensors[i]));
    /* Names come after what is already in the list. */
    ck_assert_int_eq(tg_gpt_params(m, &ps), -1);
    ck_assert_error(TG_ERR_VALUE, "duplicate");
    ck_assert_int_eq(ps.count, N_TORCH_NAMES); /* all or nothing */
    tg_params_clear(&ps);
    tg_gpt_free(m);
    tg_rng_free(rng);
}
END_TEST

/* Sample mean and standard deviation of t. */
static void moments(const tg_tensor *t, double *mean, double *std)
{
    int64_t n = tg_numel(t);
    double *v = malloc((size_t)n * sizeof *v), s = 0, ss = 0;
    ck_assert_int_eq(tg_copy_to(t, TG_FLOAT64, v, n), 0);
    for (int64_t i = 0; i < n; i++)
        s += v[i];
    *mean = s / (double)n;
    for (int64_t i = 0; i < n; i++)
        ss += (v[i] - *mean) * (v[i] - *mean);
    *std = sqrt(ss / (double)n);
    free(v);
}

START_TEST(init_follows_gpt2)
{
    tg_gpt_config c = {50, 16, 2, 4, 32, 0.1};
    tg_rng *rng = tg_rng_new(3);
    tg_gpt *m = tg_gpt_new(&c, TG_FLOAT64, rng);
    tg_params ps = {0};
    ck_assert_int_eq(tg_gpt_params(m, &ps), 0);
    double proj_std = 0.02 / sqrt(4.0);
    for (int i = 0; i < ps.count; i++) {
        const char *name = ps.names[i];
        double mean, std;
        moments(ps.tensors[i], &mean, &std);
        if (is_ln_weight(name)) {
            ck_assert_msg(mean == 1 && std == 0, "%s is not all ones", name);
        } else if (strstr(name, ".bias")) {
            ck_assert_msg(mean == 0 && std == 0, "%s is not all zeros", name);
        } else {
            double want = strstr(name, "c_proj") ? proj_std : 0.02;
            ck_assert_msg(fabs(std - want) < 0.12 * want, "%s: std %g, expected %g", name, std,
                          want);
            ck_assert_msg(fabs(mean) < 0.15 * want, "%s: mean %g", name, mean);
        }
    }
    /* The same seed draws the same model. */
    tg_rng *rng2 = tg_rng_new(3);
    tg_gpt *m2 = tg_gpt_new(&c, TG_FLOAT64, rng2);
    tg_params ps2 = {0};
    ck_assert_int_eq(tg_gpt_params(m2, &ps2), 0);
    for (int i = 0; i < ps.count; i++) {
        tg_scope_begin();
        tg_tensor *diff = tg_sum(tg_pow_scalar(tg_sub(ps.tensors[i], ps2.tensors[i]), 2), NULL,
                                 0, false);
        ck_assert_msg(tg_item(diff) == 0, "%s differs between equal seeds", ps.names[i]);
        tg_scope_end();
    }
    ck_assert_ptr_eq(tg_gpt_config_of(m), tg_gpt_config_of(m)); /* stable pointer */
    ck_assert_int_eq(tg_gpt_config_of(m)->n_embd, 32);
    tg_params_clear(&ps);
    tg_params_clear(&ps2);
    tg_gpt_free(m);
    tg_gpt_free(m2);
    tg_rng_free(rng);
    tg_rng_free(rng2);
}
END_TEST

/* ---- gradient check ------------------------------------------------------------ */

static double loss_of(const tg_gpt *m, const tg_tensor *idx, const tg_tensor *targets)
{
    tg_scope_begin();
    tg_tensor *loss;
    ck_assert_ptr_nonnull(tg_gpt_forward(m, idx, targets, &loss));
    double v = tg_item(loss);
    tg_scope_end();
    return v;
}

/* Central differences in float64 against autograd: along one random
 * direction over several parameters at once, and element by element for a
 * few elements of each. */
START_TEST(float64_gradients_match_finite_differences)
{
    tg_gpt_config c = {7, 6, 2, 2, 4, 0.0};
    tg_rng *rng = tg_rng_new(4);
    tg_gpt *m = tg_gpt_new(&c, TG_FLOAT64, rng);
    randomize(m, 40, 0.5);
    tg_tensor *idx = tg_from_data(TG_INT64, 2, SHAPE(2, 6),
                                  (const int64_t[]){1, 4, 6, 0, 2, 2, 5, 3, 1, 6, 0, 4});
    tg_tensor *targets = tg_from_data(TG_INT64, 2, SHAPE(2, 6),
                                      (const int64_t[]){4, 6, 0, -1, 2, 5, 3, 1, 6, 0, 4, 2});
    tg_tensor *loss;
    tg_release(tg_gpt_forward(m, idx, targets, &loss));
    ck_assert_int_eq(tg_backward(loss, NULL), 0);
    tg_release(loss);

    const char *names[] = {"transformer.wte.weight", "transformer.wpe.weight",
                           "transformer.h.0.attn.c_attn.weight", "transformer.h.0.attn.c_proj.bias",
                           "transformer.h.1.ln_2.weight", "transformer.h.1.mlp.c_fc.weight",
                           "transformer.ln_f.bias"};
    enum { N = sizeof names / sizeof names[0] };
    tg_params ps = {0};
    ck_assert_int_eq(tg_gpt_params(m, &ps), 0);
    double *p[N], *g[N], *dir[N], analytic = 0;
    int64_t n[N];
    for (int i = 0; i < N; i++) {
        tg_tensor *t = tg_params_find(&ps, names[i]), *gt = tg_grad(t);
        ck_assert_ptr_nonnull(gt);
        p[i] = tg_data(t);
        n[i] = tg_numel(t);
        g[i] = malloc((size_t)n[i] * sizeof(double));
        dir[i] = malloc((size_t)n[i] * sizeof(double));
        ck_assert_int_eq(tg_copy_to(gt, TG_FLOAT64, g[i], n[i]), 0);
        tg_release(gt);
        for (int64_t j = 0; j < n[i]; j++) {
            dir[i][j] = 2 * tg_rng_uniform01(rng) - 1;
            analytic += g[i][j] * dir[i][j];
        }
    }
    const double eps = 1e-6;
    double side[2];
    for (int s = 0; s < 2; s++) {
        for (int i = 0; i < N; i++)
            for (int64_t j = 0; j < n[i]; j++)
                p[i][j] += (s == 0 ? eps : -2 * eps) * dir[i][j];
        side[s] = loss_of(m, idx, targets);
    }
    for (int i = 0; i < N; i++)
        for (int64_t j = 0; j < n[i]; j++)
            p[i][j] += eps * dir[i][j];
    double numeric = (side[0] - side[1]) / (2 * eps);
    ck_assert_msg(fabs(numeric - analytic) <= 1e-6 + 1e-5 * fabs(numeric),
                  "directional derivative: autograd %.10g, finite differences %.10g", analytic,
                  numeric);
    for (int i = 0; i < N; i++)
        for (int64_t j = 0; j < n[i]; j += n[i] / 3 + 1) {
            double keep = p[i][j];
            p[i][j] = keep + eps;
            double up = loss_of(m, idx, targets);
            p[i][j] = keep - eps;
            double down = loss_of(m, idx, targets);
            p[i][j] = keep;
            double fd = (up - down) / (2 * eps);
            ck_assert_msg(fabs(fd - g[i][j]) <= 1e-6 + 1e-4 * fabs(fd),
                          "%s[%lld]: autograd %.10g, finite differences %.10g", names[i],
                          (long long)j, g[i][j], fd);
        }
    for (int i = 0; i < N; i++) {
        free(g[i]);
        free(dir[i]);
    }
    tg_params_clear(&ps);
    tg_release(idx);
    tg_release(targets);
    tg_gpt_free(m);
    tg_rng_free(rng);
}
END_TEST

/* ---- training mode, errors, lifetimes ------------------------------------------- */

START_TEST(dropout_acts_in_training_mode_only)
{
    tg_gpt_config c = TINY;
    c.dropout = 0.3;
    tg_rng *rng = tg_rng_new(8);
    tg_gpt *m = tg_gpt_new(&c, TG_FLOAT64, rng);
    set_reference_values(m);
    tg_tensor *idx, *targets;
    reference_batch(&idx, &targets);
    tg_scope_begin();
    tg_tensor *a = tg_gpt_forward(m, idx, NULL, NULL), *b = tg_gpt_forward(m, idx, NULL, NULL);
    tg_tensor *loss;
    tg_gpt_forward(m, idx, targets, &loss);
    ck_assert_int_eq(tg_backward(loss, NULL), 0);
    double diff = tg_item(tg_sum(tg_pow_scalar(tg_sub(a, b), 2), NULL, 0, false));
    ck_assert_msg(diff > 0, "two training forwards drew the same dropout masks");
    tg_gpt_set_train(m, false);
    tg_tensor *e = tg_gpt_forward(m, idx, targets, &loss);
    /* Without dropout the model is the reference one of gpt_reference.py. */
    ck_assert_values(loss, 1e-8, 2.4437101118);
    assert_slice(e, 0, (const double[]){0.0355013935, -0.1072675809}, 2, 1e-8);
    tg_scope_end();
    tg_params ps = {0};
    ck_assert_int_eq(tg_gpt_params(m, &ps), 0);
    for (int i = 0; i < ps.count; i++) {
        tg_tensor *g = tg_grad(ps.tensors[i]);
        ck_assert_msg(g != NULL, "%s got no gradient", ps.names[i]);
        tg_release(g);
    }
    tg_params_clear(&ps);
    tg_release(idx);
    tg_release(targets);
    tg_gpt_free(m);
    tg_rng_free(rng);
}
END_TEST

START_TEST(forward_made_inside_a_scope_and_without_targets)
{
    tg_rng *rng = tg_rng_new(9);
    tg_gpt *m = tg_gpt_new(&TINY, TG_FLOAT32, rng);
    tg_tensor *idx, *targets;
    reference_batch(&idx, &targets);
    tg_tensor *loss = (tg_tensor *)idx; /* must be reset */
    tg_tensor *logits = tg_gpt_forward(m, idx, NULL, &loss);
    ck_assert_shape(logits, 2, 5, 11);
    ck_assert_ptr_null(loss);
    tg_release(logits);
    tg_scope_begin();
    logits = tg_gpt_forward(m, idx, targets, &loss);
    ck_assert_ptr_nonnull(loss);
    ck_assert_int_eq(tg_ndim(loss), 0);
    tg_scope_end(); /* the scope owns logits and loss */
    /* T = 1 and T = block_size are both fine. */
    tg_tensor *one = tg_from_data(TG_INT64, 2, SHAPE(1, 1), (const int64_t[]){10});
    tg_tensor *full = tg_zeros(TG_INT64, 2, SHAPE(3, 8));
    logits = tg_gpt_forward(m, one, NULL, NULL);
    ck_assert_shape(logits, 1, 1, 11);
    tg_release(logits);
    logits = tg_gpt_forward(m, full, NULL, NULL);
    ck_assert_shape(logits, 3, 8, 11);
    tg_release(logits);
    tg_release(one);
    tg_release(full);
    tg_release(idx);
    tg_release(targets);
    tg_gpt_free(m);
    tg_rng_free(rng);
}
END_TEST

START_TEST(forward_rejects_bad_input)
{
    tg_rng *rng = tg_rng_new(10);
    tg_gpt *m = tg_gpt_new(&TINY, TG_FLOAT32, rng);
    tg_tensor *oov = tg_from_data(TG_INT64, 2, SHAPE(1, 3), (const int64_t[]){1, 11, 2});
    tg_tensor *neg = tg_from_data(TG_INT64, 2, SHAPE(1, 2), (const int64_t[]){-1, 2});
    tg_tensor *longer = tg_zeros(TG_INT64, 2, SHAPE(1, 9));
    tg_tensor *flat = tg_zeros(TG_INT64, 1, SHAPE(4));
    tg_tensor *fl = tg_zeros(TG_FLOAT32, 2, SHAPE(1, 4));
    tg_tensor *idx = tg_zeros(TG_INT64, 2, SHAPE(2, 4)), *tg = tg_zeros(TG_INT64, 2, SHAPE(2, 3));
    tg_tensor *loss;
    ck_assert_ptr_null(tg_gpt_forward(m, oov, NULL, NULL));
    ck_assert_error(TG_ERR_INDEX, "tg_gpt_forward", "token 11", "vocab_size 11");
    ck_assert_ptr_null(tg_gpt_forward(m, neg, NULL, NULL));
    ck_assert_error(TG_ERR_INDEX, "token -1");
    ck_assert_ptr_null(tg_gpt_forward(m, longer, NULL, NULL));
    ck_assert_error(TG_ERR_SHAPE, "tg_gpt_forward", "[1,9]", "block_size 8");
    ck_assert_ptr_null(tg_gpt_forward(m, flat, NULL, NULL));
    ck_assert_error(TG_ERR_SHAPE, "[4]");
    ck_assert_ptr_null(tg_gpt_forward(m, fl, NULL, NULL));
    ck_assert_error(TG_ERR_DTYPE, "idx dtype float32");
    ck_assert_ptr_null(tg_gpt_forward(m, idx, tg, &loss));
    ck_assert_ptr_null(loss);
    ck_assert_error(TG_ERR_SHAPE, "targets [2,3]", "idx [2,4]");
    ck_assert_ptr_null(tg_gpt_forward(m, idx, fl, &loss));
    ck_assert_error(TG_ERR_DTYPE, "targets dtype float32");
    ck_assert_ptr_null(tg_gpt_forward(m, NULL, NULL, NULL));
    ck_assert_error(TG_ERR_NULL, "idx");
    ck_assert_ptr_null(tg_gpt_forward(NULL, idx, NULL, NULL));
    ck_assert_error(TG_ERR_NULL, "m");
    tg_tensor *objs[] = {oov, neg, longer, flat, fl, idx, tg};
    for (size_t i = 0; i < sizeof objs / sizeof objs[0]; i++)
        tg_release(objs[i]);
    tg_gpt_free(m);
    tg_rng_free(rng);
}
END_TEST

START_TEST(new_rejects_bad_config)
{
    tg_rng *rng = tg_rng_new(11);
    struct {
        tg_gpt_config c;
        const char *fragment;
    } bad[] = {
        {{0, 8, 2, 2, 8, 0}, "vocab_size = 0"},
        {{11, -1, 2, 2, 8, 0}, "block_size = -1"},
        {{11, 8, 0, 2, 8, 0}, "n_layer = 0"},
        {{11, 8, 2, 0, 8, 0}, "n_head = 0"},
        {{11, 8, 2, 2, 0, 0}, "n_embd = 0"},
        {{11, 8, 2, 3, 8, 0}, "n_embd = 8 is not a multiple of n_head = 3"},
        {{11, 8, 2, 2, 8, 1.0}, "dropout = 1"},
        {{11, 8, 2, 2, 8, -0.1}, "dropout = -0.1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_ptr_null(tg_gpt_new(&bad[i].c, TG_FLOAT32, rng));
        ck_assert_error(TG_ERR_VALUE, "tg_gpt_new", bad[i].fragment);
    }
    ck_assert_ptr_null(tg_gpt_new(&TINY, TG_INT64, rng));
    ck_assert_error(TG_ERR_DTYPE, "tg_gpt_new", "int64");
    ck_assert_ptr_null(tg_gpt_new(NULL, TG_FLOAT32, rng));
    ck_assert_error(TG_ERR_NULL, "config");
    ck_assert_ptr_null(tg_gpt_new(&TINY, TG_FLOAT32, NULL));
    ck_assert_error(TG_ERR_NULL, "rng");
    ck_assert_ptr_null(tg_gpt_config_of(NULL));
    ck_assert_error(TG_ERR_NULL, "m");
    tg_params ps = {0};
    ck_assert_int_eq(tg_gpt_params(NULL, &ps), -1);
    ck_assert_error(TG_ERR_NULL, "m");
    tg_gpt_free(NULL);
    tg_gpt_set_train(NULL, true);
    tg_rng_free(rng);
}
END_TEST

START_TEST(model_made_inside_a_scope_outlives_it)
{
    tg_rng *rng = tg_rng_new(12);
    tg_scope_begin();
    tg_gpt *m = tg_gpt_new(&TINY, TG_FLOAT32, rng);
    tg_scope_end();
    tg_params ps = {0};
    ck_assert_int_eq(tg_gpt_params(m, &ps), 0);
    for (int i = 0; i < ps.count; i++)
        ck_assert_int_gt(tg_numel(ps.tensors[i]), 0);
    tg_params_clear(&ps);
    tg_gpt_free(m);
    tg_rng_free(rng);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gpt");
    TCase *model = tcase_checked("model");
    tcase_add_test(model, forward_loss_and_grads_match_pytorch_float64);
    tcase_add_test(model, forward_loss_and_grads_match_pytorch_float32);
    tcase_add_test(model, params_are_the_torch_state_dict_minus_lm_head);
    tcase_add_test(model, init_follows_gpt2);
    tcase_add_test(model, float64_gradients_match_finite_differences);
    tcase_add_test(model, dropout_acts_in_training_mode_only);
    tcase_add_test(model, forward_made_inside_a_scope_and_without_targets);
    tcase_add_test(model, forward_rejects_bad_input);
    tcase_add_test(model, new_rejects_bad_config);
    tcase_add_test(model, model_made_inside_a_scope_outlives_it);
    suite_add_tcase(s, model);
    return run_suite(s);
}
