/* The attention computation, one op per line: project X into Q, K, V,
 * scale the scores, mask the future, softmax, dropout, weight V, layer-norm.
 * Then backward, the gradients of the weights, and the gradient checker's
 * verdict on the whole computation. Run: build/examples/attention */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <tensorgrad/tensorgrad.h>

enum { T = 5, D = 8 }; /* 5 tokens, width 8 */

/* One single-head attention block: X [T,D] -> [T,D]. inputs: X, W_q, W_k, W_v. */
static tg_tensor *attention(tg_tensor *const *in, int n, void *ctx)
{
    (void)n;
    double p = ctx ? *(double *)ctx : 0.0;
    tg_rng *rng = tg_rng_new(7); /* the same dropout mask on every call */
    tg_tensor *x = in[0], *wq = in[1], *wk = in[2], *wv = in[3];

    tg_tensor *q = tg_matmul(x, wq);                                  /* [T,D] */
    tg_tensor *k = tg_matmul(x, wk);                                  /* [T,D] */
    tg_tensor *v = tg_matmul(x, wv);                                  /* [T,D] */
    tg_tensor *scores = tg_matmul(q, tg_transpose(k, 0, 1));          /* [T,T] */
    scores = tg_mul_scalar(scores, 1.0 / sqrt((double)D));
    tg_tensor *mask = tg_causal_mask(T);                              /* true above the diagonal */
    tg_tensor *weights = tg_softmax(tg_masked_fill(scores, mask, -INFINITY), -1);
    weights = tg_dropout(weights, p, p > 0, rng);
    tg_tensor *out = tg_matmul(weights, v);                           /* [T,D] */
    out = tg_layer_norm(out, 1, NULL, NULL, 1e-5);
    tg_rng_free(rng);
    return out;
}

static int report(const char *what, tg_tensor *t)
{
    printf("%s ", what);
    return tg_print(t);
}

int main(int argc, char **argv)
{
    static const char usage[] = "usage: attention (no options)\n"
                                "Runs one attention block forward and backward, then the "
                                "gradient checker on it.\n";
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")))
        return fputs(usage, stdout), 0;
    if (argc > 1)
        return fprintf(stderr, "attention: unknown argument '%s'\n%s", argv[1], usage), 2;
    tg_rng *rng = tg_rng_new(42);
    int64_t xs[2] = {T, D}, ws[2] = {D, D};
    tg_tensor *in[4] = {
        tg_randn(rng, TG_FLOAT64, 2, xs), tg_randn(rng, TG_FLOAT64, 2, ws),
        tg_randn(rng, TG_FLOAT64, 2, ws), tg_randn(rng, TG_FLOAT64, 2, ws),
    };
    tg_tensor *target = tg_randn(rng, TG_FLOAT64, 2, xs); /* what the block should output */
    tg_rng_free(rng);
    for (int i = 1; i < 4; i++)
        tg_set_requires_grad(in[i], true);

    tg_scope_begin(); /* everything made in here is released at tg_scope_end */
    double p = 0.1;
    tg_tensor *out = attention(in, 4, &p);
    tg_tensor *loss = tg_mse_loss(out, target);
    if (!loss || tg_backward(loss, NULL) < 0) {
        fprintf(stderr, "attention failed: %s\n", tg_error_message());
        return 1;
    }
    report("output =", out);
    printf("loss = %.6f\n", tg_item(loss));
    report("dloss/dW_q =", tg_grad(in[1]));
    report("dloss/dW_v =", tg_grad(in[3]));
    tg_scope_end();

    tg_gradcheck_result r;
    int ok = tg_gradcheck(attention, &p, in, 4, NULL, &r);
    printf("gradient check (float64, every element of X, W_q, W_k, W_v): %s\n", r.message);
    int ok32 = tg_gradcheck_float32(attention, &p, in, 4, NULL, &r);
    printf("float32 against float64: %s\n", r.message);
    for (int i = 0; i < 4; i++)
        tg_release(in[i]);
    tg_release(target);
    printf("tensors still alive: %lld\n", (long long)tg_live_tensors());
    return ok == 1 && ok32 == 1 && tg_live_tensors() == 0 ? 0 : 1;
}
