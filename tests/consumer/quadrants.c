/* A program that uses an installed tensorgrad the way another project would:
 * a 2-layer MLP learns whether a point of the square [-1,1]^2 lies in the
 * first or third quadrant (x*y > 0). It exits 1 unless the loss falls. */
#include <stdio.h>

#include <tensorgrad/nn.h>
#include <tensorgrad/tensorgrad.h>

enum { BATCH = 64, HIDDEN = 32, STEPS = 400 };
static const double TARGET_LOSS = 0.15;

int main(void)
{
    tg_rng *rng = tg_rng_new(7);
    tg_linear *l1 = tg_linear_new(2, HIDDEN, true, TG_FLOAT32, rng);
    tg_linear *l2 = tg_linear_new(HIDDEN, 2, true, TG_FLOAT32, rng);
    tg_params ps = {0};
    tg_linear_params(l1, "l1", &ps);
    tg_linear_params(l2, "l2", &ps);
    tg_optim *opt = tg_adam_new(&ps, 1e-2, 0.9, 0.999, 1e-8, 0);

    double first = 0, last = 0;
    for (int step = 1; step <= STEPS; step++) {
        float points[BATCH * 2];  /* [B,2] */
        int64_t labels[BATCH];    /* [B] */
        for (int i = 0; i < BATCH; i++) {
            points[2 * i] = (float)(2 * tg_rng_uniform01(rng) - 1);
            points[2 * i + 1] = (float)(2 * tg_rng_uniform01(rng) - 1);
            labels[i] = points[2 * i] * points[2 * i + 1] > 0;
        }
        tg_scope_begin();
        tg_tensor *x = tg_from_data(TG_FLOAT32, 2, (int64_t[]){BATCH, 2}, points);
        tg_tensor *y = tg_from_data(TG_INT64, 1, (int64_t[]){BATCH}, labels);
        tg_tensor *logits = tg_linear_forward(l2, tg_relu(tg_linear_forward(l1, x))); /* [B,2] */
        tg_tensor *loss = tg_cross_entropy(logits, y, -100);
        if (!loss || tg_backward(loss, NULL) < 0 || tg_optim_step(opt) < 0) {
            fprintf(stderr, "quadrants: training failed: %s\n", tg_error_message());
            return 1;
        }
        tg_optim_zero_grad(opt);
        last = tg_item(loss);
        if (step == 1)
            first = last;
        tg_scope_end();
    }
    tg_optim_free(opt);
    tg_params_clear(&ps);
    tg_linear_free(l2);
    tg_linear_free(l1);
    tg_rng_free(rng);

    bool ok = last < TARGET_LOSS && tg_live_tensors() == 0;
    printf("quadrants: loss %.4f -> %.4f after %d steps (need < %.2f): %s\n", first, last,
           STEPS, TARGET_LOSS, ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
