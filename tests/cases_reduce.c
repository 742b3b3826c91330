/* Gradient-check cases for sum, mean and max over chosen dims. */
#include "cases.h"

static int one_2x3x4(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 3, (int64_t[]){2, 3, 4});
    return 1;
}

static tg_tensor *f_sum_all(tg_tensor *const *x, int n, void *c) { (void)n; (void)c; return tg_sum(x[0], NULL, 0, false); }
static tg_tensor *f_sum_dims(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    return tg_sum(x[0], (int[]){0, -1}, 2, false);
}
static tg_tensor *f_sum_keepdim(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    return tg_sum(x[0], (int[]){1}, 1, true);
}
static tg_tensor *f_mean_dims(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    return tg_mean(x[0], (int[]){1}, 1, false);
}
static tg_tensor *f_mean_all_keepdim(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    return tg_mean(x[0], NULL, 0, true);
}
static tg_tensor *f_max_values(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    tg_tensor *v = NULL;
    tg_max(x[0], -1, false, &v, NULL);
    return v;
}
static tg_tensor *f_max_keepdim_middle(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    tg_tensor *v = NULL, *i = NULL;
    tg_max(x[0], 1, true, &v, &i);
    return v;
}

const gc_case cases_reduce[] = {
    {"sum_all", f_sum_all, one_2x3x4, 0, 0},
    {"sum_two_dims", f_sum_dims, one_2x3x4, 0, 0},
    {"sum_keepdim", f_sum_keepdim, one_2x3x4, 0, 0},
    {"mean_one_dim", f_mean_dims, one_2x3x4, 0, 0},
    {"mean_all_keepdim", f_mean_all_keepdim, one_2x3x4, 0, 0},
    {"max_last_dim", f_max_values, one_2x3x4, 0, 0},
    {"max_keepdim_middle_dim", f_max_keepdim_middle, one_2x3x4, 0, 0},
};
const int n_cases_reduce = sizeof cases_reduce / sizeof cases_reduce[0];
