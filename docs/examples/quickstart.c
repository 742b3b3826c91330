/* The README's example: fit y = 2 x0 - x1 + 1 with a Linear layer and SGD.
 * Each step runs in a scope, and a chain of calls is checked once. */
#include <stdio.h>

#include <tensorgrad/tensorgrad.h>

int main(void)
{
    double xs[4][2] = {{0, 0}, {1, 0}, {0, 1}, {1, 1}}, ys[4] = {1, 3, 0, 2};
    tg_rng *rng = tg_rng_new(0);
    tg_linear *model = tg_linear_new(2, 1, true, TG_FLOAT64, rng);
    tg_params ps = {0};
    tg_linear_params(model, "model", &ps);
    tg_optim *opt = tg_sgd_new(&ps, 0.1, 0.0, 0.0);
    tg_tensor *x = tg_from_data(TG_FLOAT64, 2, (int64_t[]){4, 2}, xs);
    tg_tensor *y = tg_from_data(TG_FLOAT64, 2, (int64_t[]){4, 1}, ys);

    int rc = 0;
    double loss_value = 0;
    for (int step = 0; step < 500 && rc == 0; step++) {
        tg_scope_begin(); /* holds every tensor made in here */
        tg_tensor *loss = tg_mse_loss(tg_linear_forward(model, x), y);
        if (!loss || tg_backward(loss, NULL) < 0 || tg_optim_step(opt) < 0) {
            fprintf(stderr, "%s\n", tg_error_message()); /* names the failing call */
            rc = 1;
        }
        tg_optim_zero_grad(opt);
        loss_value = tg_item(loss);
        tg_scope_end(); /* releases loss and every intermediate */
    }
    printf("loss %.6f\n", loss_value);
    tg_print(tg_params_find(&ps, "model.weight")); /* close to [[2, -1]] */

    tg_release(x);
    tg_release(y);
    tg_optim_free(opt);
    tg_params_clear(&ps);
    tg_linear_free(model);
    tg_rng_free(rng);
    return rc == 0 && tg_live_tensors() == 0 ? 0 : 1;
}
