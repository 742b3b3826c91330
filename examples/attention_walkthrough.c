/* The worked examples of the attention tutorials, computed by tensorgrad and
 * printed step by step in float64: two small hand examples, the causal mask,
 * what Q, K and V each do, and the backward pass derived by hand next to
 * autograd. Run: build/examples/attention_walkthrough [--seed N] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tensorgrad/tensorgrad.h>

enum { T = 5, D = 8 }; /* the random examples: 5 tokens of width 8 */

/* A float64 [rows, cols] matrix from row-major values. */
static tg_tensor *matrix(int64_t rows, int64_t cols, const double *values)
{
    return tg_from_data(TG_FLOAT64, 2, (const int64_t[]){rows, cols}, values);
}

/* Every matrix is printed under a label line ending in ':', so a reader (or a
 * test) finds it by its label. */
static void show(const char *label, const tg_tensor *t)
{
    printf("%s\n", label);
    tg_print(t);
}

static void heading(const char *title)
{
    printf("\n=== %s ===\n", title);
}

/* Largest |a - b| over all elements (b NULL: largest |a|); same shapes.
 * Plain C on copied values, so the check uses none of the ops it checks. */
static double max_abs_diff(const tg_tensor *a, const tg_tensor *b)
{
    int64_t n = tg_numel(a);
    double *x = calloc((size_t)(n > 0 ? n : 1), sizeof *x);
    double *y = calloc((size_t)(n > 0 ? n : 1), sizeof *y);
    double worst = NAN;
    if (x && y && tg_copy_to(a, TG_FLOAT64, x, n) == 0 &&
        (!b || (tg_numel(b) == n && tg_copy_to(b, TG_FLOAT64, y, n) == 0))) {
        worst = 0;
        for (int64_t i = 0; i < n; i++)
            worst = fmax(worst, fabs(x[i] - y[i]));
    }
    free(x);
    free(y);
    return worst;
}

/* Sums along the last dim: [T, T] -> [T]. */
static tg_tensor *row_sums(const tg_tensor *t)
{
    return tg_sum(t, (const int[]){-1}, 1, false);
}

/* softmax(q k^T / sqrt(d)) v with q, k [T, d], v [T, dv]; the mask (bool
 * [T, T], true = hidden) may be NULL. *weights gets the [T, T] weights.
 * The results belong to the open scope. */
static tg_tensor *attend(const tg_tensor *q, const tg_tensor *k, const tg_tensor *v,
                         const tg_tensor *mask, tg_tensor **weights)
{
    double d = (double)tg_size(q, -1);
    tg_tensor *scores = tg_mul_scalar(tg_matmul(q, tg_transpose(k, 0, 1)), 1 / sqrt(d));
    if (mask)
        scores = tg_masked_fill(scores, mask, -INFINITY);
    *weights = tg_softmax(scores, -1);
    return tg_matmul(*weights, v);
}

/* Prints every stage for X [T, D_in] and W_Q, W_K, W_V [D_in, d]: the
 * projections, the raw and scaled scores, the weights and the output
 * [T, d], which it returns (held by the open scope). */
static tg_tensor *walk_through(const tg_tensor *x, const tg_tensor *wq, const tg_tensor *wk,
                               const tg_tensor *wv)
{
    double d = (double)tg_size(wq, 1);
    tg_tensor *q = tg_matmul(x, wq), *k = tg_matmul(x, wk), *v = tg_matmul(x, wv);
    show("X:", x);
    show("Q = X W_Q:", q);
    show("K = X W_K:", k);
    show("V = X W_V:", v);
    tg_tensor *raw = tg_matmul(q, tg_transpose(k, 0, 1)); /* [T, T]: query i . key j */
    show("raw scores Q K^T:", raw);
    printf("(scaled by 1/sqrt(d) = 1/sqrt(%g) = %.4f so they do not grow with the width)\n", d,
           1 / sqrt(d));
    show("scaled scores:", tg_mul_scalar(raw, 1 / sqrt(d)));
    tg_tensor *weights;
    tg_tensor *out = attend(q, k, v, NULL, &weights);
    show("weights = softmax of each row of the scaled scores:", weights);
    show("output = weights V:", out);
    return out;
}

/* 1. Three tokens of width 2, W_Q the identity. */
static void tutorial_width_two(void)
{
    heading("Example 1: three tokens of width 2");
    tg_scope_begin();
    tg_tensor *x = matrix(3, 2, (const double[]){1, 2, 0, 1, 3, 1});
    tg_tensor *wq = matrix(2, 2, (const double[]){1, 0, 0, 1});
    tg_tensor *wk = matrix(2, 2, (const double[]){1, 1, 0, 1});
    tg_tensor *wv = matrix(2, 2, (const double[]){1, 0, 1, 1});
    tg_tensor *out = walk_through(x, wq, wk, wv);
    printf("Note: one tutorial prints 3.50, 1.30 for the middle row of the output; "
           "the exact value is %.3f, %.3f.\n",
           tg_get(out, (const int64_t[]){1, 0}), tg_get(out, (const int64_t[]){1, 1}));
    tg_scope_end();
}

/* 2. Three tokens of width 4 projected to width 3. */
static void tutorial_width_four(void)
{
    heading("Example 2: three tokens of width 4, projected to width 3");
    tg_scope_begin();
    tg_tensor *x = matrix(3, 4, (const double[]){1, 0, 1, 0, 0, 2, 0, 2, 1, 1, 1, 1});
    tg_tensor *wq = matrix(4, 3, (const double[]){1, 0, 1, 1, 0, 0, 0, 0, 1, 0, 1, 1});
    tg_tensor *wk = matrix(4, 3, (const double[]){0, 0, 1, 1, 1, 0, 0, 1, 0, 1, 1, 0});
    tg_tensor *wv = matrix(4, 3, (const double[]){0, 2, 0, 0, 3, 0, 1, 0, 3, 1, 1, 0});
    show("W_Q:", wq);
    show("W_K:", wk);
    show("W_V:", wv);
    walk_through(x, wq, wk, wv);
    tg_scope_end();
}

/* 3. A causal mask hides the future: query i sees keys 0..i only. */
static void causal_mask(const tg_tensor *q, const tg_tensor *k, const tg_tensor *v)
{
    heading("Example 3: random Q, K, V [5, 8], without and with a causal mask");
    tg_scope_begin();
    tg_tensor *free_weights, *masked_weights;
    attend(q, k, v, NULL, &free_weights);
    show("weights without a mask:", free_weights);
    show("row sums without a mask:", row_sums(free_weights));
    tg_tensor *mask = tg_causal_mask(T);
    show("causal mask (true = hidden: a key after the query):", mask);
    attend(q, k, v, mask, &masked_weights);
    show("weights with the causal mask:", masked_weights);
    show("row sums with the causal mask:", row_sums(masked_weights));
    /* The masked scores were -inf, and exp(-inf) is exactly 0. */
    double above = 0;
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = i + 1; j < T; j++)
            above = fmax(above, fabs(tg_get(masked_weights, (const int64_t[]){i, j})));
    printf("largest masked weight above the diagonal: %g\n", above);
    tg_scope_end();
}

/* Every row of t [T, n] replaced by its first row: [T, n], a stride-0 view. */
static tg_tensor *first_row_everywhere(const tg_tensor *t)
{
    return tg_expand(tg_narrow(t, 0, 0, 1), 2, (const int64_t[]){T, -1});
}

/* 4. Three experiments that each change one of Q, K, V. */
static void what_q_k_v_do(const tg_tensor *q, const tg_tensor *k, const tg_tensor *v)
{
    heading("Example 4: what Q, K and V each do");
    tg_scope_begin();
    tg_tensor *weights, *out;

    attend(first_row_everywhere(q), k, v, NULL, &weights);
    tg_tensor *row0 = tg_expand(tg_narrow(weights, 0, 0, 1), 2, (const int64_t[]){T, T});
    printf("(a) Every query replaced by the first query. The query decides where a token\n"
           "    looks, so every row of the weights is the same:\n"
           "    largest |row i - row 0| = %g.\n", max_abs_diff(weights, row0));
    show("weights with every query = query 0:", weights);

    out = attend(q, k, tg_mul_scalar(v, 0), NULL, &weights);
    printf("(b) V set to zero. The values are what gets mixed, so the output is zero\n"
           "    whatever the weights: largest |output| = %g.\n", max_abs_diff(out, NULL));
    show("output with V = 0:", out);

    attend(q, first_row_everywhere(k), v, NULL, &weights);
    tg_tensor *uniform = tg_full(TG_FLOAT64, 2, (const int64_t[]){T, T}, 1.0 / T);
    printf("(c) Every key replaced by the first key. Keys are what queries match against,\n"
           "    so every score in a row is equal and attention becomes plain averaging:\n"
           "    uniform weights 1/%d, largest |weight - %g| = %g.\n", T, 1.0 / T,
           max_abs_diff(weights, uniform));
    show("weights with every key = key 0:", weights);
    tg_scope_end();
}

/* The gradients of single-head attention worked out by hand, with plain ops
 * and grad mode off. x [T, D], w* [D, d], g = dLoss/dOutput [T, d]. grads
 * gets dX, dW_Q, dW_K, dW_V (held by the open scope). */
static void backward_by_hand(const tg_tensor *x, tg_tensor *const *w, const tg_tensor *g,
                             tg_tensor **grads)
{
    bool was = tg_set_grad_enabled(false);
    double scale = 1 / sqrt((double)tg_size(w[0], 1));
    tg_tensor *q = tg_matmul(x, w[0]), *k = tg_matmul(x, w[1]), *v = tg_matmul(x, w[2]);
    tg_tensor *a;
    attend(q, k, v, NULL, &a);                                         /* A [T, T] */
    tg_tensor *dv = tg_matmul(tg_transpose(a, 0, 1), g);               /* A^T dO */
    tg_tensor *da = tg_matmul(g, tg_transpose(v, 0, 1));               /* dO V^T */
    /* softmax backward, row by row: dS = A * (dA - sum_j dA_j A_j) */
    tg_tensor *dot = tg_sum(tg_mul(da, a), (const int[]){-1}, 1, true); /* [T, 1] */
    tg_tensor *ds = tg_mul(a, tg_sub(da, dot));
    tg_tensor *dq = tg_mul_scalar(tg_matmul(ds, k), scale);            /* dS K / sqrt(d) */
    tg_tensor *dk = tg_mul_scalar(tg_matmul(tg_transpose(ds, 0, 1), q), scale);
    tg_tensor *xt = tg_transpose(x, 0, 1);
    grads[1] = tg_matmul(xt, dq);                                      /* X^T dQ */
    grads[2] = tg_matmul(xt, dk);
    grads[3] = tg_matmul(xt, dv);
    grads[0] = tg_add(tg_add(tg_matmul(dq, tg_transpose(w[0], 0, 1)),  /* X feeds Q, K, V */
                             tg_matmul(dk, tg_transpose(w[1], 0, 1))),
                      tg_matmul(dv, tg_transpose(w[2], 0, 1)));
    tg_set_grad_enabled(was);
}

/* 5. Autograd against the hand-derived backward pass. X [4, 4], W [4, 3]. */
static void backward_pass(tg_rng *rng)
{
    heading("Example 5: the backward pass, autograd against the formulas");
    printf("loss = sum(output * G) for a fixed random G, so dLoss/dOutput = G.\n"
           "By hand: dV = A^T G, dA = G V^T, dS = A * (dA - rowsum(dA * A)),\n"
           "dQ = dS K / sqrt(d), dK = dS^T Q / sqrt(d), dW_Q = X^T dQ (and so for K, V),\n"
           "dX = dQ W_Q^T + dK W_K^T + dV W_V^T.\n");
    const int64_t xs[2] = {4, 4}, ws[2] = {4, 3}, os[2] = {4, 3};
    tg_tensor *leaves[4] = {tg_randn(rng, TG_FLOAT64, 2, xs), tg_randn(rng, TG_FLOAT64, 2, ws),
                            tg_randn(rng, TG_FLOAT64, 2, ws), tg_randn(rng, TG_FLOAT64, 2, ws)};
    tg_tensor *g = tg_randn(rng, TG_FLOAT64, 2, os);
    for (int i = 0; i < 4; i++)
        tg_set_requires_grad(leaves[i], true);
    const char *names[4] = {"dX", "dW_Q", "dW_K", "dW_V"};

    tg_scope_begin();
    tg_tensor *x = leaves[0], *a;
    tg_tensor *out = attend(tg_matmul(x, leaves[1]), tg_matmul(x, leaves[2]),
                            tg_matmul(x, leaves[3]), NULL, &a);
    tg_backward(tg_sum(tg_mul(out, g), NULL, 0, false), NULL);
    tg_tensor *by_hand[4];
    backward_by_hand(x, leaves + 1, g, by_hand);
    for (int i = 0; i < 4; i++) {
        tg_tensor *auto_grad = tg_grad(leaves[i]); /* the scope holds this reference */
        char label[64];
        snprintf(label, sizeof label, "%s from autograd:", names[i]);
        show(label, auto_grad);
        snprintf(label, sizeof label, "%s from the formula:", names[i]);
        show(label, by_hand[i]);
        printf("max |autograd - formula| for %s: %.3g\n", names[i],
               max_abs_diff(auto_grad, by_hand[i]));
    }
    tg_scope_end();
    for (int i = 0; i < 4; i++)
        tg_release(leaves[i]);
    tg_release(g);
}

static const char usage[] = "usage: attention_walkthrough [--seed N]\n"
                            "  --seed N  seed of the random Q, K and V (default 0)\n";

/* Reads --seed N; 0 on success, 1 for --help, -1 (after a message) on
 * anything else. */
static int parse_args(int argc, char **argv, unsigned long long *seed)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return 1;
        if (strcmp(argv[i], "--seed") == 0) {
            const char *value = i + 1 < argc ? argv[++i] : "";
            char *end = NULL;
            *seed = strtoull(value, &end, 10);
            if (*end == '\0' && value[0] >= '0' && value[0] <= '9')
                continue;
            fprintf(stderr, "attention_walkthrough: --seed needs a non-negative integer, "
                            "got '%s'\n", value);
            return -1;
        }
        fprintf(stderr, "attention_walkthrough: unknown argument '%s'\n%s", argv[i], usage);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    unsigned long long seed = 0;
    int parsed = parse_args(argc, argv, &seed);
    if (parsed != 0)
        return parsed > 0 ? (fputs(usage, stdout), 0) : 2;
    printf("Attention, step by step: softmax(Q K^T / sqrt(d)) V, in float64 (seed %llu).\n",
           seed);
    tutorial_width_two();
    tutorial_width_four();

    tg_rng *rng = tg_rng_new(seed);
    const int64_t shape[2] = {T, D};
    tg_tensor *q = tg_randn(rng, TG_FLOAT64, 2, shape);
    tg_tensor *k = tg_randn(rng, TG_FLOAT64, 2, shape);
    tg_tensor *v = tg_randn(rng, TG_FLOAT64, 2, shape);
    causal_mask(q, k, v);
    what_q_k_v_do(q, k, v);
    backward_pass(rng);
    tg_release(q);
    tg_release(k);
    tg_release(v);
    tg_rng_free(rng);

    if (tg_error_code() != TG_OK) {
        fprintf(stderr, "attention_walkthrough: %s\n", tg_error_message());
        return 1;
    }
    printf("\ntensors still alive: %lld\n", (long long)tg_live_tensors());
    return tg_live_tensors() == 0 ? 0 : 1;
}
