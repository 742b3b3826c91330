/* One AdamW step written with tg_update_params, as docs/models.md shows it,
 * checked against tg_adamw_new's step on a copy of the same parameters:
 * the two must give the same bits. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <tensorgrad/module.h> /* tg_update_params */
#include <tensorgrad/tensorgrad.h>

enum { N = 2, SIZE = 6 };

/* Sets p's gradient to that of sum(p * p * 0.5 + p), the same for any copy. */
static int make_grad(tg_tensor *p)
{
    tg_scope_begin();
    tg_tensor *loss = tg_sum(tg_add(tg_mul_scalar(tg_mul(p, p), 0.5), p), NULL, 0, false);
    int rc = loss ? tg_backward(loss, NULL) : -1;
    tg_scope_end();
    return rc;
}

int main(void)
{
    const double lr = 1e-2, wd = 0.1, b1 = 0.9, b2 = 0.999, eps = 1e-8;
    const int t = 1;
    tg_rng *rng = tg_rng_new(9), *rng_q = tg_rng_new(9); /* q: the same values as p */
    tg_tensor *p[N], *m[N], *v[N], *q[N];
    tg_params ps = {0};
    int setup = 0;
    for (int i = 0; i < N; i++) {
        p[i] = tg_randn(rng, TG_FLOAT32, 1, (int64_t[]){SIZE});
        q[i] = tg_randn(rng_q, TG_FLOAT32, 1, (int64_t[]){SIZE});
        m[i] = tg_zeros(TG_FLOAT32, 1, (int64_t[]){SIZE});
        v[i] = tg_zeros(TG_FLOAT32, 1, (int64_t[]){SIZE});
        tg_set_requires_grad(p[i], true);
        tg_set_requires_grad(q[i], true);
        char name[8];
        snprintf(name, sizeof name, "q%d", i);
        setup |= tg_params_add(&ps, NULL, name, q[i]) | make_grad(p[i]) | make_grad(q[i]);
    }

    tg_scope_begin(); /* holds tg_grad's references */
    tg_param_update u[N];
    for (int i = 0; i < N; i++)
        u[i] = (tg_param_update){
            .param = p[i], .grad = tg_grad(p[i]), .m = m[i], .v = v[i],
            .rule = TG_UPDATE_ADAM,
            .c = {.decay = 1 - lr * wd, .beta1 = b1, .beta2 = b2, .eps = eps,
                  .step_size = lr / (1 - pow(b1, t)), .bc2_sqrt = sqrt(1 - pow(b2, t))}};
    int rc = tg_update_params(u, N); /* the bits of tg_adamw_new's step */
    tg_scope_end();

    tg_optim *opt = tg_adamw_new(&ps, lr, b1, b2, eps, wd);
    int same = setup == 0 && rc == 0 && opt && tg_optim_step(opt) == 0;
    for (int i = 0; same && i < N; i++) {
        float a[SIZE], b[SIZE];
        same = tg_copy_to(p[i], TG_FLOAT32, a, SIZE) == 0 &&
               tg_copy_to(q[i], TG_FLOAT32, b, SIZE) == 0 && memcmp(a, b, sizeof a) == 0;
    }
    printf("tg_update_params and tg_adamw_new: %s\n", same ? "the same bits" : "DIFFERENT");
    tg_optim_free(opt);
    tg_params_clear(&ps);
    for (int i = 0; i < N; i++) {
        tg_release(p[i]);
        tg_release(q[i]);
        tg_release(m[i]);
        tg_release(v[i]);
    }
    tg_rng_free(rng);
    tg_rng_free(rng_q);
    return same && tg_live_tensors() == 0 ? 0 : 1;
}
