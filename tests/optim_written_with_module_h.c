/* Part of the optim suite (test_optim.c): the optimizer writer's calls of
 * module.h. An optimizer written by hand on tg_update_params gives
 * tg_optim's bits, tg_sum_squares and tg_scale_in_place on views, and every
 * argument they refuse. */
#include "testutil.h"
#include "suite_parts.h"

#include <tensorgrad/module.h>

/* ---- a hand-written optimizer against tg_optim ------------------------------- */

/* Three parameters that take the three Adam paths: a float32 contiguous one
 * of more than one parallel span (76800 elements), a float32 transposed
 * view and a float64 one. make_set builds one copy, from the same values. */
#define NP 3
typedef struct {
    tg_tensor *base[NP]; /* what the parameters view */
    tg_tensor *p[NP];
    tg_tensor *c[NP];    /* the loss is sum(c * p * p) */
} param_set;

static void make_set(param_set *s)
{
    s->base[0] = ramp(TG_FLOAT32, 2, SHAPE(300, 256), -1.0, 2.0 / 76800);
    s->base[1] = ramp(TG_FLOAT32, 2, SHAPE(2, 3), 1.5, -0.75);
    s->base[2] = ramp(TG_FLOAT64, 1, SHAPE(4), 0.25, 0.5);
    s->p[0] = tg_retain(s->base[0]);
    s->p[1] = tg_transpose(s->base[1], 0, 1); /* [3,2], strides (1,3) */
    s->p[2] = tg_retain(s->base[2]);
    s->c[0] = ramp(TG_FLOAT32, 2, SHAPE(300, 256), 0.5, 1e-5);
    s->c[1] = ramp(TG_FLOAT32, 2, SHAPE(3, 2), 0.2, 0.3);
    s->c[2] = ramp(TG_FLOAT64, 1, SHAPE(4), 1.0, 0.25);
    for (int i = 0; i < NP; i++)
        ck_assert_int_eq(tg_set_requires_grad(s->p[i], true), 0);
}

static void free_set(param_set *s)
{
    for (int i = 0; i < NP; i++) {
        tg_release(s->p[i]);
        tg_release(s->base[i]);
        tg_release(s->c[i]);
    }
}

/* Fresh gradients of sum(c * p * p) for every parameter of s. */
static void set_backward(param_set *s)
{
    tg_scope_begin();
    for (int i = 0; i < NP; i++) {
        tg_zero_grad(s->p[i]);
        tg_tensor *loss = tg_sum(tg_mul(tg_mul(s->c[i], s->p[i]), s->p[i]), NULL, 0, false);
        ck_assert_int_eq(tg_backward(loss, NULL), 0);
    }
    tg_scope_end();
}

/* Asserts that the two sets' parameters hold the same bits. */
static void assert_same_bits(const param_set *a, const param_set *b)
{
    for (int i = 0; i < NP; i++) {
        int64_t n = tg_numel(a->p[i]);
        size_t bytes = (size_t)n * tg_dtype_size(tg_dtype_of(a->p[i]));
        char *x = malloc(bytes), *y = malloc(bytes);
        ck_assert_int_eq(tg_copy_to(a->p[i], tg_dtype_of(a->p[i]), x, n), 0);
        ck_assert_int_eq(tg_copy_to(b->p[i], tg_dtype_of(b->p[i]), y, n), 0);
        ck_assert_msg(memcmp(x, y, bytes) == 0, "parameter %d differs", i);
        free(x);
        free(y);
    }
}

/* The optimizer of the example in module.h: AdamW with its own state. */
typedef struct {
    double lr, beta1, beta2, eps, wd;
    int64_t t;
    tg_tensor *m[NP], *v[NP];
} my_adamw;

static int my_adamw_step(my_adamw *o, const param_set *s)
{
    o->t++;
    tg_scope_begin(); /* holds tg_grad's references */
    tg_param_update u[NP];
    for (int i = 0; i < NP; i++) {
        u[i] = (tg_param_update){.param = s->p[i], .grad = tg_grad(s->p[i]), .m = o->m[i],
                                 .v = o->v[i], .rule = TG_UPDATE_ADAM};
        u[i].c = (tg_update_coefs){.decay = 1 - o->lr * o->wd, .beta1 = o->beta1,
                                   .beta2 = o->beta2, .eps = o->eps,
                                   .step_size = o->lr / (1 - pow(o->beta1, (double)o->t)),
                                   .bc2_sqrt = sqrt(1 - pow(o->beta2, (double)o->t))};
    }
    int rc = tg_update_params(u, NP);
    tg_scope_end();
    return rc;
}

START_TEST(hand_written_adamw_gives_tg_optims_bits)
{
    param_set a, b;
    make_set(&a);
    make_set(&b);
    tg_params ps = {0};
    const char *names[NP] = {"big", "view", "f64"};
    for (int i = 0; i < NP; i++)
        ck_assert_int_eq(tg_params_add(&ps, NULL, names[i], a.p[i]), 0);
    tg_optim *opt = tg_adamw_new(&ps, 0.01, 0.9, 0.99, 1e-6, 0.1);
    my_adamw mine = {.lr = 0.01, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-6, .wd = 0.1};
    for (int i = 0; i < NP; i++) {
        mine.m[i] = tg_zeros(tg_dtype_of(b.p[i]), tg_ndim(b.p[i]), tg_shape(b.p[i]));
        mine.v[i] = tg_zeros(tg_dtype_of(b.p[i]), tg_ndim(b.p[i]), tg_shape(b.p[i]));
    }
    for (int step = 0; step < 3; step++) {
        set_backward(&a);
        set_backward(&b);
        ck_assert_int_eq(tg_optim_step(opt), 0);
        ck_assert_int_eq(my_adamw_step(&mine, &b), 0);
    }
    assert_same_bits(&a, &b);
    ck_assert_int_eq(tg_error_code(), TG_OK);
    for (int i = 0; i < NP; i++) {
        tg_release(mine.m[i]);
        tg_release(mine.v[i]);
    }
    tg_optim_free(opt);
    tg_params_clear(&ps);
    free_set(&a);
    free_set(&b);
}
END_TEST

START_TEST(hand_written_sgd_with_momentum_gives_tg_optims_bits)
{
    param_set a, b;
    make_set(&a);
    make_set(&b);
    tg_params ps = {0};
    const char *names[NP] = {"big", "view", "f64"};
    for (int i = 0; i < NP; i++)
        ck_assert_int_eq(tg_params_add(&ps, NULL, names[i], a.p[i]), 0);
    tg_optim *opt = tg_sgd_new(&ps, 0.05, 0.9, 0.01);
    tg_tensor *buf[NP];
    for (int i = 0; i < NP; i++)
        buf[i] = tg_zeros(tg_dtype_of(b.p[i]), tg_ndim(b.p[i]), tg_shape(b.p[i]));
    for (int step = 1; step <= 3; step++) {
        set_backward(&a);
        set_backward(&b);
        ck_assert_int_eq(tg_optim_step(opt), 0);
        tg_scope_begin();
        tg_param_update u[NP];
        for (int i = 0; i < NP; i++)
            u[i] = (tg_param_update){
                .param = b.p[i], .grad = tg_grad(b.p[i]), .m = buf[i], .rule = TG_UPDATE_SGD,
                .c = {.lr = 0.05, .momentum = 0.9, .l2 = 0.01, .first = step == 1}};
        ck_assert_int_eq(tg_update_params(u, NP), 0);
        tg_scope_end();
    }
    assert_same_bits(&a, &b);
    for (int i = 0; i < NP; i++)
        tg_release(buf[i]);
    tg_optim_free(opt);
    tg_params_clear(&ps);
    free_set(&a);
    free_set(&b);
}
END_TEST

/* ---- sum of squares and scale ---------------------------------------------------- */

START_TEST(sum_squares_reads_a_strided_view)
{
    /* base [3,4] = 0..11; the view is its columns 1..2, transposed: [2,3]
     * of 1,5,9 and 2,6,10, strides (1,4) */
    tg_tensor *base = ramp(TG_FLOAT32, 2, SHAPE(3, 4), 0, 1);
    tg_tensor *cols = tg_narrow(base, 1, 1, 2);
    tg_tensor *view = tg_transpose(cols, 0, 1);
    ck_assert(!tg_is_contiguous(view));
    double want = 1 + 25 + 81 + 4 + 36 + 100;
    ck_assert_double_eq(tg_sum_squares(view), want);
    tg_tensor *f64 = ramp(TG_FLOAT64, 1, SHAPE(3), 0.5, 1); /* 0.5, 1.5, 2.5 */
    ck_assert_double_eq(tg_sum_squares(f64), 0.25 + 2.25 + 6.25);
    tg_tensor *empty = tg_narrow(base, 0, 0, 0);
    ck_assert_double_eq(tg_sum_squares(empty), 0);
    ck_assert_int_eq(tg_error_code(), TG_OK);
    tg_release(empty);
    tg_release(f64);
    tg_release(view);
    tg_release(cols);
    tg_release(base);
}
END_TEST

START_TEST(scale_in_place_on_a_view_writes_its_storage_and_bumps_the_version)
{
    tg_tensor *x = ramp(TG_FLOAT64, 2, SHAPE(2, 3), 1, 1);
    ck_assert_int_eq(tg_set_requires_grad(x, true), 0);
    tg_scope_begin();
    tg_tensor *loss = tg_sum(tg_mul(x, x), NULL, 0, false);
    tg_tensor *row = tg_narrow(x, 0, 1, 1); /* [1,3]: 4, 5, 6 */
    tg_tensor *view = tg_transpose(row, 0, 1);
    ck_assert_int_eq(tg_scale_in_place(view, 0.5), 0);
    ck_assert_values(x, 0, 1, 2, 3, 2, 2.5, 3);
    ck_assert_int_eq(tg_backward(loss, NULL), -1);
    unsigned long long kept, now; /* one write: one version on */
    const char *msg = strstr(tg_error_message(), "(version ");
    ck_assert_msg(msg && sscanf(msg, "(version %llu, now %llu)", &kept, &now) == 2 &&
                      now == kept + 1, "%s", tg_error_message());
    ck_assert_error(TG_ERR_STATE, "tg_backward", "modified in place");
    tg_scope_end();
    /* float32 rounds coef first, as PyTorch's mul_ does: 0.1f, not 0.1 */
    tg_tensor *f = T32(SHAPE(1), 1, 3.0f);
    ck_assert_int_eq(tg_scale_in_place(f, 0.1), 0);
    ck_assert_float_eq(*(const float *)tg_data_const(f), 3.0f * (float)0.1);
    tg_release(f);
    tg_release(x);
}
END_TEST

/* ---- errors ---------------------------------------------------------------------- */

/* One Adam update of a [2,3] float32 parameter, with its own grad and state;
 * the tests below break one field at a time. */
typedef struct {
    tg_tensor *p, *g, *m, *v;
} adam_parts;

static adam_parts parts_new(void)
{
    adam_parts a = {ramp(TG_FLOAT32, 2, SHAPE(2, 3), 1, 1), ramp(TG_FLOAT32, 2, SHAPE(2, 3), 1, 0),
                    tg_zeros(TG_FLOAT32, 2, SHAPE(2, 3)), tg_zeros(TG_FLOAT32, 2, SHAPE(2, 3))};
    return a;
}

static void parts_free(adam_parts *a)
{
    tg_release(a->p);
    tg_release(a->g);
    tg_release(a->m);
    tg_release(a->v);
}

static tg_param_update adam_of(const adam_parts *a)
{
    return (tg_param_update){.param = a->p, .grad = a->g, .m = a->m, .v = a->v,
                             .rule = TG_UPDATE_ADAM,
                             .c = {.decay = 1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                                   .step_size = 1.0, .bc2_sqrt = 1.0}};
}

/* Runs [good, bad] and asserts that the call fails and that good's
 * parameter and state are untouched: everything is checked first. */
static void refused(const adam_parts *good, tg_param_update bad)
{
    tg_param_update u[2] = {adam_of(good), bad};
    ck_assert_int_eq(tg_update_params(u, 2), -1);
    ck_assert_values(good->p, 0, 1, 2, 3, 4, 5, 6);
    ck_assert_values(good->m, 0, 0, 0, 0, 0, 0, 0);
}

START_TEST(update_params_refuses_each_bad_argument_before_writing)
{
    adam_parts good = parts_new(), a = parts_new();
    tg_tensor *f64 = tg_zeros(TG_FLOAT64, 2, SHAPE(2, 3));
    tg_tensor *i64 = tg_zeros(TG_INT64, 2, SHAPE(2, 3));
    tg_tensor *wide = tg_zeros(TG_FLOAT32, 2, SHAPE(3, 2));
    tg_tensor *wide_t = tg_transpose(wide, 0, 1); /* [2,3], not contiguous */
    tg_tensor *flat = tg_zeros(TG_FLOAT32, 1, SHAPE(6));
    tg_param_update u = adam_of(&a);

    ck_assert_int_eq(tg_update_params(NULL, 1), -1);
    ck_assert_error(TG_ERR_NULL, "tg_update_params: updates is NULL");
    ck_assert_int_eq(tg_update_params(&u, -1), -1);
    ck_assert_error(TG_ERR_VALUE, "tg_update_params", "n is -1");

    tg_param_update bad = u;
    bad.param = NULL;
    refused(&good, bad);
    ck_assert_error(TG_ERR_NULL, "tg_update_params: updates[1].param is NULL");
    bad = u;
    bad.param = i64;
    refused(&good, bad);
    ck_assert_error(TG_ERR_DTYPE, "updates[1].param is int64", "float32 or float64");
    bad = u;
    bad.grad = NULL;
    refused(&good, bad);
    ck_assert_error(TG_ERR_NULL, "updates[1].grad is NULL");
    bad = u;
    bad.grad = f64;
    refused(&good, bad);
    ck_assert_error(TG_ERR_DTYPE, "updates[1].grad is float64, the param float32");
    bad = u;
    bad.grad = flat;
    refused(&good, bad);
    ck_assert_error(TG_ERR_SHAPE, "updates[1].grad has shape [6], the param [2,3]");
    bad = u;
    bad.m = wide_t;
    refused(&good, bad);
    ck_assert_error(TG_ERR_SHAPE, "updates[1].m", "is not contiguous");
    bad = u;
    bad.v = wide;
    refused(&good, bad);
    ck_assert_error(TG_ERR_SHAPE, "updates[1].v has shape [3,2], the param [2,3]");
    bad = u;
    bad.v = NULL;
    refused(&good, bad);
    ck_assert_error(TG_ERR_NULL, "updates[1].v is NULL");
    bad = u;
    bad.m = f64;
    refused(&good, bad);
    ck_assert_error(TG_ERR_DTYPE, "updates[1].m is float64");
    bad = u;
    bad.rule = (tg_update_rule)7;
    refused(&good, bad);
    ck_assert_error(TG_ERR_VALUE, "updates[1].rule is 7");
    bad = (tg_param_update){.param = a.p, .grad = a.g, .rule = TG_UPDATE_SGD,
                            .c = {.lr = 0.1, .momentum = 0.9}};
    refused(&good, bad);
    ck_assert_error(TG_ERR_VALUE, "updates[1] has momentum 0.9 but no buffer m");

    /* SGD without momentum needs neither m nor v; n = 0 does nothing */
    bad.c.momentum = 0;
    ck_assert_int_eq(tg_update_params(&bad, 1), 0);
    ck_assert_values(a.p, 1e-6, 0.9, 1.9, 2.9, 3.9, 4.9, 5.9);
    ck_assert_int_eq(tg_update_params(&u, 0), 0);
    ck_assert_int_eq(tg_error_code(), TG_OK);

    tg_release(flat);
    tg_release(wide_t);
    tg_release(wide);
    tg_release(i64);
    tg_release(f64);
    parts_free(&a);
    parts_free(&good);
}
END_TEST

START_TEST(sum_squares_and_scale_refuse_null_and_non_float)
{
    tg_tensor *i64 = tg_zeros(TG_INT64, 1, SHAPE(2));
    ck_assert_double_eq(tg_sum_squares(NULL), -1);
    ck_assert_error(TG_ERR_NULL, "tg_sum_squares: t is NULL");
    ck_assert_double_eq(tg_sum_squares(i64), -1);
    ck_assert_error(TG_ERR_DTYPE, "tg_sum_squares: t is int64 [2]");
    ck_assert_int_eq(tg_scale_in_place(NULL, 2), -1);
    ck_assert_error(TG_ERR_NULL, "tg_scale_in_place: t is NULL");
    ck_assert_int_eq(tg_scale_in_place(i64, 2), -1);
    ck_assert_error(TG_ERR_DTYPE, "tg_scale_in_place: t is int64 [2]");
    tg_release(i64);
}
END_TEST

void optim_written_with_module_h_cases(Suite *s)
{
    TCase *hand = tcase_checked("hand_written");
    tcase_add_test(hand, hand_written_adamw_gives_tg_optims_bits);
    tcase_add_test(hand, hand_written_sgd_with_momentum_gives_tg_optims_bits);
    suite_add_tcase(s, hand);
    TCase *loops = tcase_checked("loops");
    tcase_add_test(loops, sum_squares_reads_a_strided_view);
    tcase_add_test(loops, scale_in_place_on_a_view_writes_its_storage_and_bumps_the_version);
    suite_add_tcase(s, loops);
    TCase *errors = tcase_checked("errors");
    tcase_add_test(errors, update_params_refuses_each_bad_argument_before_writing);
    tcase_add_test(errors, sum_squares_and_scale_refuse_null_and_non_float);
    suite_add_tcase(s, errors);
}
