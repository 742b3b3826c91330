/* Optimizers against PyTorch 1.13 (numbers printed by
 * tests/fixtures/optim_reference.py), their state round trip, gradient
 * clipping, the warmup + cosine schedule, and every error case. The suite's
 * other part, optim_written_with_module_h.c: optimizers written on module.h. */
#include "testutil.h"
#include "suite_parts.h"

/* The parameter and loss coefficients of the reference script:
 * loss = sum(C * p * p), so grad = 2 * C * p. */
static const double P0[6] = {1.0, -2.0, 3.5, 0.25, -0.75, 1.5};
static const double C0[6] = {0.5, 1.5, 0.2, 2.0, 0.3, 1.0};

/* Fills p's gradient with that of sum(c * p * p). */
static void quad_backward(tg_tensor *p, const tg_tensor *c)
{
    tg_scope_begin();
    tg_tensor *loss = tg_sum(tg_mul(tg_mul(c, p), p), NULL, 0, false);
    ck_assert_int_eq(tg_backward(loss, NULL), 0);
    tg_scope_end();
}

/* A [2,3] parameter holding vals that requires grad. */
static tg_tensor *param(tg_dtype dt, const double *vals)
{
    tg_tensor *p = make(dt, 2, SHAPE(2, 3), vals);
    ck_assert_int_eq(tg_set_requires_grad(p, true), 0);
    return p;
}

typedef enum { SGD_PLAIN, SGD_MOMENTUM_WD, ADAM_WD, ADAMW, SGD_MOMENTUM } setup;

/* The hyperparameters of each scenario of the reference script. */
static tg_optim *make_opt(setup s, const tg_params *ps)
{
    switch (s) {
    case SGD_PLAIN: return tg_sgd_new(ps, 0.1, 0, 0);
    case SGD_MOMENTUM_WD: return tg_sgd_new(ps, 0.1, 0.9, 0.01);
    case SGD_MOMENTUM: return tg_sgd_new(ps, 0.1, 0.9, 0);
    case ADAM_WD: return tg_adam_new(ps, 0.05, 0.8, 0.95, 1e-3, 0.1);
    case ADAMW: return tg_adamw_new(ps, 0.05, 0.9, 0.99, 1e-6, 0.2);
    }
    return NULL;
}

/* Runs `steps` steps of the scenario from P0 and checks the parameter. */
static void check_scenario(setup s, tg_dtype dt, int steps, const double *want, double tol)
{
    tg_tensor *p = param(dt, P0), *c = make(dt, 2, SHAPE(2, 3), C0);
    tg_params ps = {0};
    ck_assert_int_eq(tg_params_add(&ps, NULL, "w", p), 0);
    tg_optim *opt = make_opt(s, &ps);
    ck_assert_ptr_nonnull(opt);
    for (int i = 0; i < steps; i++) {
        tg_optim_zero_grad(opt);
        quad_backward(p, c);
        ck_assert_int_eq(tg_optim_step(opt), 0);
    }
    ck_assert_int_eq(tg_optim_steps(opt), steps);
    assert_values(p, want, 6, tol);
    ck_assert_int_eq(tg_error_code(), TG_OK);
    tg_optim_free(opt);
    tg_params_clear(&ps);
    tg_release(p);
    tg_release(c);
}

/* float32 results agree with PyTorch's float32 to ~1e-7 relative; the
 * tolerance leaves room for its vectorised kernels' fused multiply-adds. */
#define TOL64 1e-13
#define TOL32 1e-6

START_TEST(sgd_matches_pytorch)
{
    const double plain[6] = {0.81, -0.98, 3.2256, 0.09, -0.6627, 0.96};
    check_scenario(SGD_PLAIN, TG_FLOAT64, 2, plain, TOL64);
    const double plain32[6] = {0.8100000023841858, -0.9799999594688416, 3.225600004196167,
                               0.09000000357627869, -0.6626999974250793, 0.9600000381469727};
    check_scenario(SGD_PLAIN, TG_FLOAT32, 2, plain32, TOL32);
}
END_TEST

START_TEST(sgd_momentum_and_weight_decay_match_pytorch)
{
    const double w64[6] = {0.22033187370099985, 1.2904873309980003, 2.2812309977134997,
                           -0.20273456377475005, -0.3734741273557501, -0.46931843384850014};
    check_scenario(SGD_MOMENTUM_WD, TG_FLOAT64, 4, w64, TOL64);
    const double w32[6] = {0.22033189237117767, 1.29048752784729, 2.281230926513672,
                           -0.20273457467556, -0.3734741806983948, -0.4693184196949005};
    check_scenario(SGD_MOMENTUM_WD, TG_FLOAT32, 4, w32, TOL32);
}
END_TEST

START_TEST(adam_matches_pytorch)
{
    const double w64[6] = {0.8013170842093854, -1.800542093129814, 3.3003935197275336,
                           0.05855164903428943, -0.5520087768871248, 1.3007678341993059};
    check_scenario(ADAM_WD, TG_FLOAT64, 4, w64, TOL64);
    const double w32[6] = {0.801317036151886, -1.8005419969558716, 3.300393581390381,
                           0.05855163559317589, -0.5520087480545044, 1.3007678985595703};
    check_scenario(ADAM_WD, TG_FLOAT32, 4, w32, TOL32);
}
END_TEST

START_TEST(adamw_matches_pytorch)
{
    const double w64[6] = {0.7644547776780887, -1.7246144257697344, 3.165353819283998,
                           0.04987496732614196, -0.5246619198490211, 1.2444496989041534};
    check_scenario(ADAMW, TG_FLOAT64, 4, w64, TOL64);
    const double w32[6] = {0.7644547820091248, -1.7246146202087402, 3.1653542518615723,
                           0.04987497627735138, -0.5246619582176208, 1.2444498538970947};
    check_scenario(ADAMW, TG_FLOAT32, 4, w32, TOL32);
}
END_TEST

/* Two parameters a [3] and b [2]; b takes part in the loss only on the
 * steps where use_b[i] is set, as in the reference script's per_param. */
static void run_skipping(tg_optim *(*ctor)(const tg_params *), const bool *use_b, int steps,
                         const double *want_a, const double *want_b)
{
    tg_tensor *a = T64(SHAPE(3), 1, 1.0, -2.0, 3.0), *b = T64(SHAPE(2), 1, 0.5, -1.5);
    tg_tensor *ca = T64(SHAPE(3), 1, 0.5, 1.0, 2.0), *cb = T64(SHAPE(2), 1, 1.0, 3.0);
    tg_set_requires_grad(a, true);
    tg_set_requires_grad(b, true);
    tg_params ps = {0};
    tg_params_add(&ps, NULL, "a", a);
    tg_params_add(&ps, NULL, "b", b);
    tg_optim *opt = ctor(&ps);
    ck_assert_ptr_nonnull(opt);
    for (int i = 0; i < steps; i++) {
        tg_optim_zero_grad(opt);
        quad_backward(a, ca);
        if (use_b[i])
            quad_backward(b, cb);
        ck_assert_int_eq(tg_optim_step(opt), 0);
    }
    assert_values(a, want_a, 3, TOL64);
    assert_values(b, want_b, 2, TOL64);
    tg_optim_free(opt);
    tg_params_clear(&ps);
    tg_release(a);
    tg_release(b);
    tg_release(ca);
    tg_release(cb);
}

static tg_optim *adam_default(const tg_params *ps) { return tg_adam_new(ps, 0.1, 0.9, 0.999, 1e-8, 0); }
static tg_optim *sgd_momentum(const tg_params *ps) { return tg_sgd_new(ps, 0.1, 0.9, 0); }

START_TEST(adam_counts_steps_per_parameter)
{
    const bool use_b[3] = {true, false, true};
    run_skipping(adam_default, use_b, 3,
                 (const double[]){0.701586274504415, -1.700623392046465, 2.700381523197209},
                 (const double[]){0.3011874216591668, -1.3002390618415403});
}
END_TEST

START_TEST(sgd_momentum_buffer_starts_at_first_gradient)
{
    const bool use_b[3] = {false, true, true};
    run_skipping(sgd_momentum, use_b, 3,
                 (const double[]){0.486, -0.1239999999999998, -1.6200000000000003},
                 (const double[]){0.22999999999999998, 0.5700000000000001});
}
END_TEST

START_TEST(step_updates_a_transposed_parameter_in_its_storage)
{
    tg_tensor *base = make(TG_FLOAT64, 2, SHAPE(2, 3), P0);
    tg_tensor *pt = tg_transpose(base, 0, 1); /* [3,2] leaf view, strides (1,3) */
    ck_assert(!tg_is_contiguous(pt));
    ck_assert_int_eq(tg_set_requires_grad(pt, true), 0);
    tg_tensor *ct = T64(SHAPE(3, 2), 2, 0.5, 2.0, 1.5, 0.3, 0.2, 1.0);
    tg_params ps = {0};
    tg_params_add(&ps, NULL, "pt", pt);
    tg_optim *opt = tg_adam_new(&ps, 0.05, 0.9, 0.999, 1e-8, 0);
    for (int i = 0; i < 2; i++) {
        tg_optim_zero_grad(opt);
        quad_backward(pt, ct);
        ck_assert_int_eq(tg_optim_step(opt), 0);
    }
    ck_assert_values(base, TOL64, 0.9000832438159381, -1.900036997582032, 3.4000200464629735,
                     0.1505937108295834, -0.6501195330617852, 1.400051353875276);
    tg_optim_free(opt);
    tg_params_clear(&ps);
    tg_release(pt);
    tg_release(ct);
    tg_release(base);
}
END_TEST

START_TEST(parameter_without_grad_is_untouched)
{
    for (setup s = SGD_PLAIN; s <= ADAMW; s++) {
        tg_tensor *p = param(TG_FLOAT32, P0), *q = param(TG_FLOAT32, C0);
        tg_tensor *c = make(TG_FLOAT32, 2, SHAPE(2, 3), C0);
        tg_params ps = {0};
        tg_params_add(&ps, "m", "p", p);
        tg_params_add(&ps, "m", "q", q);
        tg_optim *opt = make_opt(s, &ps);
        for (int i = 0; i < 2; i++) {
            quad_backward(p, c);
            ck_assert_int_eq(tg_optim_step(opt), 0);
            tg_optim_zero_grad(opt);
        }
        /* q never had a gradient: bit for bit its old values, weight decay
         * included, and p moved. */
        float want[6];
        for (int i = 0; i < 6; i++)
            want[i] = (float)C0[i];
        ck_assert(memcmp(tg_data(q), want, sizeof want) == 0);
        ck_assert(((float *)tg_data(p))[0] != 1.0f);
        tg_optim_free(opt);
        tg_params_clear(&ps);
        tg_release(p);
        tg_release(q);
        tg_release(c);
    }
}
END_TEST

START_TEST(zero_grad_forgets_every_gradient)
{
    tg_tensor *p = param(TG_FLOAT64, P0), *q = param(TG_FLOAT64, C0);
    tg_params ps = {0};
    tg_params_add(&ps, NULL, "p", p);
    tg_params_add(&ps, NULL, "q", q);
    tg_optim *opt = tg_sgd_new(&ps, 0.1, 0, 0);
    quad_backward(p, q);
    tg_tensor *gp = tg_grad(p), *gq = tg_grad(q);
    ck_assert_ptr_nonnull(gp);
    ck_assert_ptr_nonnull(gq);
    tg_release(gp);
    tg_release(gq);
    tg_optim_zero_grad(opt);
    ck_assert_ptr_null(tg_grad(p));
    ck_assert_ptr_null(tg_grad(q));
    ck_assert_int_eq(tg_error_code(), TG_OK);
    tg_optim_zero_grad(NULL); /* a no-op */
    tg_optim_free(opt);
    tg_params_clear(&ps);
    tg_release(p);
    tg_release(q);
}
END_TEST

START_TEST(lr_can_be_read_and_changed)
{
    tg_tensor *p = param(TG_FLOAT64, P0), *c = make(TG_FLOAT64, 2, SHAPE(2, 3), C0);
    tg_params ps = {0};
    tg_params_add(&ps, NULL, "p", p);
    tg_optim *opt = tg_sgd_new(&ps, 0.1, 0, 0);
    ck_assert_double_eq(tg_optim_lr(opt), 0.1);
    tg_optim_set_lr(opt, 0.5);
    ck_assert_double_eq(tg_optim_lr(opt), 0.5);
    quad_backward(p, c);
    tg_optim_step(opt);
    /* p - 0.5 * 2 * c * p */
    double want[6];
    for (int i = 0; i < 6; i++)
        want[i] = P0[i] - 0.5 * (2 * C0[i] * P0[i]);
    assert_values(p, want, 6, TOL64);
    tg_optim_set_lr(opt, -1);
    ck_assert_error(TG_ERR_VALUE, "tg_optim_set_lr", "learning rate", "-1");
    ck_assert_double_eq(tg_optim_lr(opt), 0.5);
    tg_optim_free(opt);
    tg_params_clear(&ps);
    tg_release(p);
    tg_release(c);
}
END_TEST

/* ---- state ------------------------------------------------------------------- */

static bool same_bytes(const tg_tensor *a, const tg_tensor *b)
{
    return tg_dtype_of(a) == tg_dtype_of(b) && tg_numel(a) == tg_numel(b) &&
           memcmp(tg_data(a), tg_data(b), (size_t)tg_numel(a) * tg_dtype_size(tg_dtype_of(a))) == 0;
}

static void steps_on(tg_optim *opt, tg_tensor *p, const tg_tensor *c, int n)
{
    for (int i = 0; i < n; i++) {
        tg_optim_zero_grad(opt);
        quad_backward(p, c);
        ck_assert_int_eq(tg_optim_step(opt), 0);
    }
}

START_TEST(state_round_trip_resumes_bit_for_bit)
{
    for (setup s = SGD_PLAIN; s <= SGD_MOMENTUM; s++) {
        tg_tensor *p = param(TG_FLOAT32, P0), *c = make(TG_FLOAT32, 2, SHAPE(2, 3), C0);
        tg_params ps = {0}, state = {0};
        tg_params_add(&ps, "layer", "w", p);
        tg_optim *opt = make_opt(s, &ps);
        steps_on(opt, p, c, 3);
        ck_assert_int_eq(tg_optim_state(opt, &state), 0);
        float saved[6];
        tg_copy_to(p, TG_FLOAT32, saved, 6);
        steps_on(opt, p, c, 2);

        /* A fresh parameter and optimizer resume from the saved state. */
        tg_tensor *p2 = tg_from_data(TG_FLOAT32, 2, SHAPE(2, 3), saved);
        tg_set_requires_grad(p2, true);
        tg_params ps2 = {0};
        tg_params_add(&ps2, "layer", "w", p2);
        tg_optim *opt2 = make_opt(s, &ps2);
        ck_assert_int_eq(tg_optim_load_state(opt2, &state), 0);
        ck_assert_int_eq(tg_optim_steps(opt2), 3);
        steps_on(opt2, p2, c, 2);
        ck_assert_msg(same_bytes(p, p2), "setup %d did not resume bit for bit", (int)s);
        ck_assert_int_eq(tg_optim_steps(opt2), 5);

        tg_optim_free(opt);
        tg_optim_free(opt2);
        tg_params_clear(&ps);
        tg_params_clear(&ps2);
        tg_params_clear(&state);
        tg_release(p);
        tg_release(p2);
        tg_release(c);
    }
}
END_TEST

/* Every optimizer made, stepped, clipped and exported inside an open scope:
 * ending the scope takes none of its state nor the exported copies, so the
 * run goes on bit for bit as the same run made outside any scope. */
START_TEST(optimizer_used_inside_a_scope_keeps_its_state)
{
    for (setup s = SGD_PLAIN; s <= SGD_MOMENTUM; s++) {
        tg_tensor *p = param(TG_FLOAT32, P0), *q = param(TG_FLOAT32, P0);
        tg_tensor *c = make(TG_FLOAT32, 2, SHAPE(2, 3), C0);
        tg_params ps = {0}, qs = {0}, ps_state = {0}, qs_state = {0};
        tg_params_add(&ps, NULL, "w", p);
        tg_params_add(&qs, NULL, "w", q);
        tg_optim *opt = make_opt(s, &ps);
        steps_on(opt, p, c, 2);
        ck_assert(tg_clip_grad_norm(&ps, 1.0) > 0);
        ck_assert_int_eq(tg_optim_state(opt, &ps_state), 0);

        tg_scope_begin();
        tg_optim *opt_q = make_opt(s, &qs);
        steps_on(opt_q, q, c, 2);
        ck_assert(tg_clip_grad_norm(&qs, 1.0) > 0);
        ck_assert_int_eq(tg_optim_state(opt_q, &qs_state), 0);
        ck_assert_int_eq(tg_scope_end(), 0);

        steps_on(opt, p, c, 2);
        steps_on(opt_q, q, c, 2);
        ck_assert_msg(same_bytes(p, q), "setup %d: the run inside a scope differs", (int)s);
        ck_assert_int_eq(qs_state.count, ps_state.count);
        for (int i = 0; i < ps_state.count; i++)
            ck_assert_msg(same_bytes(ps_state.tensors[i], qs_state.tensors[i]),
                          "setup %d: %s differs", (int)s, ps_state.names[i]);
        ck_assert_int_eq(tg_error_code(), TG_OK);
        tg_optim_free(opt);
        tg_optim_free(opt_q);
        tg_params_clear(&ps);
        tg_params_clear(&qs);
        tg_params_clear(&ps_state);
        tg_params_clear(&qs_state);
        tg_release(p);
        tg_release(q);
        tg_release(c);
    }
}
END_TEST

/* The version backward saw and the one it found, from its message. */
static void versions_in_error(unsigned long long *kept, unsigned long long *now)
{
    const char *m = strstr(tg_error_message(), "(version ");
    ck_assert_msg(m && sscanf(m, "(version %llu, now %llu)", kept, now) == 2,
                  "no versions in: %s", tg_error_message());
}

/* A step writes each parameter with a gradient once, whichever kernel
 * takes it (flat float32 Adam, strided Adam, SGD): a graph that read it
 * before the step refuses to backpropagate, one version on. */
START_TEST(step_counts_one_write_per_parameter)
{
    for (setup s = SGD_PLAIN; s <= SGD_MOMENTUM; s++) {
        for (int strided = 0; strided < 2; strided++) {
            /* strided: a [2,3] leaf view of a [3,2] base, strides (1,2) */
            tg_tensor *base = make(TG_FLOAT32, 2, strided ? SHAPE(3, 2) : SHAPE(2, 3), P0);
            tg_tensor *p = strided ? tg_transpose(base, 0, 1) : tg_retain(base);
            tg_set_requires_grad(p, true);
            tg_tensor *c = make(TG_FLOAT32, 2, SHAPE(2, 3), C0);
            tg_params ps = {0};
            tg_params_add(&ps, NULL, "w", p);
            tg_optim *opt = make_opt(s, &ps);
            quad_backward(p, c);
            tg_scope_begin();
            tg_tensor *loss = tg_sum(tg_mul(tg_mul(c, p), p), NULL, 0, false);
            ck_assert_int_eq(tg_optim_step(opt), 0);
            ck_assert_int_eq(tg_backward(loss, NULL), -1);
            unsigned long long kept, now;
            versions_in_error(&kept, &now);
            ck_assert_msg(now == kept + 1, "setup %d strided %d: version %llu, now %llu",
                          (int)s, strided, kept, now);
            tg_scope_end();
            tg_error_clear();
            tg_optim_free(opt);
            tg_params_clear(&ps);
            tg_release(p);
            tg_release(base);
            tg_release(c);
        }
    }
}
END_TEST

START_TEST(state_holds_the_step_and_moments_by_name)
{
    tg_tensor *p = param(TG_FLOAT64, P0), *c = make(TG_FLOAT64, 2, SHAPE(2, 3), C0);
    tg_params ps = {0}, st = {0};
    tg_params_add(&ps, "fc", "weight", p);
    tg_optim *adam = tg_adam_new(&ps, 0.05, 0.9, 0.999, 1e-8, 0);
    steps_on(adam, p, c, 1);
    ck_assert_int_eq(tg_optim_state(adam, &st), 0);
    ck_assert_int_eq(st.count, 4);
    tg_tensor *step = tg_params_find(&st, "step");
    ck_assert_int_eq(tg_ndim(step), 0);
    ck_assert_double_eq(tg_item(step), 1);
    ck_assert_double_eq(tg_item(tg_params_find(&st, "step.fc.weight")), 1);
    /* After one step exp_avg = 0.1 g and exp_avg_sq = 0.001 g^2, g = 2 c p0. */
    double m[6], v[6];
    for (int i = 0; i < 6; i++) {
        double g = 2 * C0[i] * P0[i];
        m[i] = (1 - 0.9) * g;
        v[i] = (1 - 0.999) * g * g;
    }
    assert_values(tg_params_find(&st, "exp_avg.fc.weight"), m, 6, 1e-12);
    assert_values(tg_params_find(&st, "exp_avg_sq.fc.weight"), v, 6, 1e-12);
    /* The exported tensors are copies: stepping on does not change them. */
    steps_on(adam, p, c, 1);
    assert_values(tg_params_find(&st, "exp_avg.fc.weight"), m, 6, 1e-12);
    /* Exporting twice into the same list is refused and leaves it as it was. */
    ck_assert_int_eq(tg_optim_state(adam, &st), -1);
    ck_assert_error(TG_ERR_VALUE, "tg_optim_state", "step");
    ck_assert_int_eq(st.count, 4);
    tg_params_clear(&st);

    tg_optim *sgd = tg_sgd_new(&ps, 0.1, 0.9, 0);
    ck_assert_int_eq(tg_optim_state(sgd, &st), 0);
    ck_assert_int_eq(st.count, 3);
    ck_assert_ptr_nonnull(tg_params_find(&st, "momentum_buffer.fc.weight"));
    tg_params_clear(&st);
    tg_optim *plain = tg_sgd_new(&ps, 0.1, 0, 0);
    ck_assert_int_eq(tg_optim_state(plain, &st), 0);
    ck_assert_int_eq(st.count, 2); /* step and step.fc.weight: no buffer without momentum */
    tg_params_clear(&st);

    tg_optim_free(adam);
    tg_optim_free(sgd);
    tg_optim_free(plain);
    tg_params_clear(&ps);
    tg_release(p);
    tg_release(c);
}
END_TEST

/* A copy of state with `name` replaced by t (or dropped when t is NULL). */
static tg_params state_with(const tg_params *state, const char *name, tg_tensor *t)
{
    tg_params out = {0};
    for (int i = 0; i < state->count; i++) {
        bool hit = strcmp(state->names[i], name) == 0;
        if (!hit)
            tg_params_add(&out, NULL, state->names[i], state->tensors[i]);
        else if (t)
            tg_params_add(&out, NULL, name, t);
    }
    return out;
}

START_TEST(load_state_rejects_bad_states_and_changes_nothing)
{
    tg_tensor *a = param(TG_FLOAT32, P0), *b = param(TG_FLOAT32, C0);
    tg_tensor *c = make(TG_FLOAT32, 2, SHAPE(2, 3), C0);
    tg_params ps = {0}, good = {0}, before = {0}, after = {0};
    tg_params_add(&ps, NULL, "a", a);
    tg_params_add(&ps, NULL, "b", b);
    tg_optim *opt = tg_adam_new(&ps, 0.05, 0.9, 0.999, 1e-8, 0);
    steps_on(opt, a, c, 1);
    ck_assert_int_eq(tg_optim_state(opt, &good), 0);
    steps_on(opt, a, c, 1); /* now the optimizer differs from `good` */
    ck_assert_int_eq(tg_optim_state(opt, &before), 0);

    tg_tensor *wrong_shape = tg_zeros(TG_FLOAT32, 1, SHAPE(6));
    tg_tensor *half = tg_scalar(TG_FLOAT64, 1.5), *ints = tg_zeros(TG_INT64, 2, SHAPE(2, 3));
    struct { const char *name; tg_tensor *t; tg_error code; const char *frag; } bad[] = {
        {"step", NULL, TG_ERR_VALUE, "'step'"},
        {"exp_avg_sq.b", NULL, TG_ERR_VALUE, "'exp_avg_sq.b'"},
        {"step.b", NULL, TG_ERR_VALUE, "'step.b'"},
        {"exp_avg.b", wrong_shape, TG_ERR_SHAPE, "[6]"},
        {"step.b", half, TG_ERR_VALUE, "1.5"},
        {"step", wrong_shape, TG_ERR_SHAPE, "'step'"},
        {"exp_avg.a", ints, TG_ERR_DTYPE, "int64"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tg_params st = state_with(&good, bad[i].name, bad[i].t);
        ck_assert_int_eq(tg_optim_load_state(opt, &st), -1);
        ck_assert_error(bad[i].code, "tg_optim_load_state", bad[i].frag);
        tg_params_clear(&st);
    }
    ck_assert_int_eq(tg_optim_load_state(opt, NULL), -1);
    ck_assert_error(TG_ERR_NULL, "tg_optim_load_state");
    ck_assert_int_eq(tg_optim_load_state(NULL, &good), -1);
    ck_assert_error(TG_ERR_NULL, "tg_optim_load_state");

    /* Nothing changed: the same state as before the failed loads. */
    ck_assert_int_eq(tg_optim_steps(opt), 2);
    ck_assert_int_eq(tg_optim_state(opt, &after), 0);
    ck_assert_int_eq(after.count, before.count);
    for (int i = 0; i < after.count; i++) {
        ck_assert_str_eq(after.names[i], before.names[i]);
        ck_assert_msg(same_bytes(after.tensors[i], before.tensors[i]), "%s changed",
                      after.names[i]);
    }
    /* Names the optimizer does not know are ignored, so a checkpoint may
     * hold the model's tensors too; and the good state loads. */
    tg_params_add(&good, NULL, "a", a);
    ck_assert_int_eq(tg_optim_load_state(opt, &good), 0);
    ck_assert_int_eq(tg_optim_steps(opt), 1);

    tg_release(wrong_shape);
    tg_release(half);
    tg_release(ints);
    tg_params_clear(&good);
    tg_params_clear(&before);
    tg_params_clear(&after);
    tg_optim_free(opt);
    tg_params_clear(&ps);
    tg_release(a);
    tg_release(b);
    tg_release(c);
}
END_TEST

START_TEST(load_state_converts_float64_moments)
{
    tg_tensor *p = param(TG_FLOAT64, P0), *p32 = param(TG_FLOAT32, P0);
    tg_tensor *c = make(TG_FLOAT64, 2, SHAPE(2, 3), C0);
    tg_params ps = {0}, ps32 = {0}, st = {0}, st32 = {0};
    tg_params_add(&ps, NULL, "w", p);
    tg_params_add(&ps32, NULL, "w", p32);
    tg_optim *opt = tg_adam_new(&ps, 0.05, 0.9, 0.999, 1e-8, 0);
    tg_optim *opt32 = tg_adam_new(&ps32, 0.05, 0.9, 0.999, 1e-8, 0);
    steps_on(opt, p, c, 1);
    tg_optim_state(opt, &st);
    ck_assert_int_eq(tg_optim_load_state(opt32, &st), 0);
    ck_assert_int_eq(tg_optim_state(opt32, &st32), 0);
    tg_tensor *m32 = tg_params_find(&st32, "exp_avg.w");
    ck_assert_int_eq(tg_dtype_of(m32), TG_FLOAT32);
    double m[6];
    tg_copy_to(tg_params_find(&st, "exp_avg.w"), TG_FLOAT64, m, 6);
    assert_values(m32, m, 6, 1e-7);
    tg_params_clear(&st);
    tg_params_clear(&st32);
    tg_optim_free(opt);
    tg_optim_free(opt32);
    tg_params_clear(&ps);
    tg_params_clear(&ps32);
    tg_release(p);
    tg_release(p32);
    tg_release(c);
}
END_TEST

/* ---- construction errors ----------------------------------------------------- */

START_TEST(constructors_validate_hyperparameters)
{
    tg_tensor *p = param(TG_FLOAT64, P0);
    tg_params ps = {0};
    tg_params_add(&ps, NULL, "w", p);
    ck_assert_ptr_null(tg_sgd_new(&ps, -0.1, 0, 0));
    ck_assert_error(TG_ERR_VALUE, "tg_sgd_new", "learning rate", "-0.1");
    ck_assert_ptr_null(tg_sgd_new(&ps, NAN, 0, 0));
    ck_assert_error(TG_ERR_VALUE, "tg_sgd_new", "learning rate", "nan");
    ck_assert_ptr_null(tg_sgd_new(&ps, 0.1, -0.5, 0));
    ck_assert_error(TG_ERR_VALUE, "tg_sgd_new", "momentum", "-0.5");
    ck_assert_ptr_null(tg_sgd_new(&ps, 0.1, 0, -1e-4));
    ck_assert_error(TG_ERR_VALUE, "tg_sgd_new", "weight_decay", "-0.0001");
    ck_assert_ptr_null(tg_adam_new(&ps, -1, 0.9, 0.999, 1e-8, 0));
    ck_assert_error(TG_ERR_VALUE, "tg_adam_new", "learning rate");
    ck_assert_ptr_null(tg_adam_new(&ps, 1e-3, 1.0, 0.999, 1e-8, 0));
    ck_assert_error(TG_ERR_VALUE, "tg_adam_new", "beta1", "1");
    ck_assert_ptr_null(tg_adam_new(&ps, 1e-3, -0.1, 0.999, 1e-8, 0));
    ck_assert_error(TG_ERR_VALUE, "tg_adam_new", "beta1", "-0.1");
    ck_assert_ptr_null(tg_adamw_new(&ps, 1e-3, 0.9, 1.5, 1e-8, 0));
    ck_assert_error(TG_ERR_VALUE, "tg_adamw_new", "beta2", "1.5");
    ck_assert_ptr_null(tg_adamw_new(&ps, 1e-3, 0.9, 0.999, -1e-8, 0));
    ck_assert_error(TG_ERR_VALUE, "tg_adamw_new", "eps", "-1e-08");
    ck_assert_ptr_null(tg_adamw_new(&ps, 1e-3, 0.9, 0.999, 1e-8, -0.01));
    ck_assert_error(TG_ERR_VALUE, "tg_adamw_new", "weight_decay", "-0.01");
    /* The edges PyTorch accepts. */
    tg_optim *ok = tg_adam_new(&ps, 0, 0, 0, 0, 0);
    ck_assert_ptr_nonnull(ok);
    tg_optim_free(ok);
    tg_params_clear(&ps);
    tg_release(p);
}
END_TEST

START_TEST(constructors_validate_parameters)
{
    tg_params empty = {0};
    ck_assert_ptr_null(tg_sgd_new(NULL, 0.1, 0, 0));
    ck_assert_error(TG_ERR_NULL, "tg_sgd_new");
    ck_assert_ptr_null(tg_adam_new(&empty, 0.1, 0.9, 0.999, 1e-8, 0));
    ck_assert_error(TG_ERR_VALUE, "tg_adam_new", "empty");

    tg_tensor *ints = tg_zeros(TG_INT64, 1, SHAPE(3));
    tg_params ps = {0};
    tg_params_add(&ps, NULL, "idx", ints);
    ck_assert_ptr_null(tg_adamw_new(&ps, 0.1, 0.9, 0.999, 1e-8, 0));
    ck_assert_error(TG_ERR_DTYPE, "tg_adamw_new", "idx", "int64");
    tg_params_clear(&ps);

    tg_tensor *p = param(TG_FLOAT64, P0);
    tg_tensor *q = tg_mul_scalar(p, 2.0); /* made by an op: not a leaf */
    tg_params_add(&ps, NULL, "p", p);
    tg_params_add(&ps, NULL, "q", q);
    ck_assert_ptr_null(tg_sgd_new(&ps, 0.1, 0, 0));
    ck_assert_error(TG_ERR_STATE, "tg_sgd_new", "'q'", "leaf");
    tg_params_clear(&ps);

    tg_params_add(&ps, NULL, "p", p);
    tg_params_add(&ps, NULL, "again", p);
    ck_assert_ptr_null(tg_sgd_new(&ps, 0.1, 0, 0));
    ck_assert_error(TG_ERR_VALUE, "tg_sgd_new", "'again'", "'p'");
    tg_params_clear(&ps);

    tg_release(ints);
    tg_release(p);
    tg_release(q);
}
END_TEST

START_TEST(null_optimizer_is_an_error_or_a_no_op)
{
    ck_assert_int_eq(tg_optim_step(NULL), -1);
    ck_assert_error(TG_ERR_NULL, "tg_optim_step");
    ck_assert(isnan(tg_optim_lr(NULL)));
    ck_assert_error(TG_ERR_NULL, "tg_optim_lr");
    ck_assert_int_eq(tg_optim_steps(NULL), -1);
    ck_assert_error(TG_ERR_NULL, "tg_optim_steps");
    tg_optim_set_lr(NULL, 0.1);
    ck_assert_error(TG_ERR_NULL, "tg_optim_set_lr");
    tg_params st = {0};
    ck_assert_int_eq(tg_optim_state(NULL, &st), -1);
    ck_assert_error(TG_ERR_NULL, "tg_optim_state");
    ck_assert_int_eq(st.count, 0);
    tg_optim_free(NULL);
    tg_optim_zero_grad(NULL);
    ck_assert_int_eq(tg_error_code(), TG_OK);
}
END_TEST

/* ---- clipping ------------------------------------------------------------------ */

/* Parameters a [2] and b [1] with gradients (3, 4) and (12): norm 13; and
 * z, which has no gradient. */
static void clip_case(tg_dtype dt, double max_norm, double want_scale)
{
    tg_tensor *a = make(dt, 1, SHAPE(2), (const double[]){1, 1});
    tg_tensor *b = make(dt, 1, SHAPE(1), (const double[]){1});
    tg_tensor *z = make(dt, 1, SHAPE(1), (const double[]){1});
    tg_tensor *ca = make(dt, 1, SHAPE(2), (const double[]){3, 4});
    tg_tensor *cb = make(dt, 1, SHAPE(1), (const double[]){12});
    tg_set_requires_grad(a, true);
    tg_set_requires_grad(b, true);
    tg_set_requires_grad(z, true);
    tg_scope_begin();
    tg_backward(tg_add(tg_sum(tg_mul(a, ca), NULL, 0, false),
                       tg_sum(tg_mul(b, cb), NULL, 0, false)), NULL);
    tg_scope_end();
    tg_params ps = {0};
    tg_params_add(&ps, NULL, "a", a);
    tg_params_add(&ps, NULL, "z", z);
    tg_params_add(&ps, NULL, "b", b);
    double norm = tg_clip_grad_norm(&ps, max_norm);
    ck_assert_double_eq_tol(norm, 13.0, 1e-12);
    tg_scope_begin();
    double tol = dt == TG_FLOAT32 ? 1e-6 : 1e-14;
    ck_assert_values(tg_grad(a), tol, 3 * want_scale, 4 * want_scale);
    ck_assert_values(tg_grad(b), tol, 12 * want_scale);
    ck_assert_ptr_null(tg_grad(z));
    tg_scope_end();
    tg_params_clear(&ps);
    tg_release(a);
    tg_release(b);
    tg_release(z);
    tg_release(ca);
    tg_release(cb);
}

START_TEST(clip_grad_norm_scales_gradients_above_max_norm)
{
    /* torch.nn.utils.clip_grad_norm_: scale = max_norm / (norm + 1e-6) */
    clip_case(TG_FLOAT64, 6.5, 6.5 / (13.0 + 1e-6));
    clip_case(TG_FLOAT32, 6.5, 6.5 / (13.0 + 1e-6));
    clip_case(TG_FLOAT64, 0.0, 0.0);
}
END_TEST

START_TEST(clip_grad_norm_leaves_small_gradients)
{
    clip_case(TG_FLOAT64, 100.0, 1.0);
    clip_case(TG_FLOAT32, 13.0, 1.0); /* 13 / (13 + 1e-6) < 1 scales by ~1 - 8e-8 */
}
END_TEST

START_TEST(clip_grad_norm_errors)
{
    tg_params ps = {0};
    ck_assert(tg_clip_grad_norm(NULL, 1.0) < 0);
    ck_assert_error(TG_ERR_NULL, "tg_clip_grad_norm");
    ck_assert(tg_clip_grad_norm(&ps, -1.0) < 0);
    ck_assert_error(TG_ERR_VALUE, "tg_clip_grad_norm", "max_norm", "-1");
    ck_assert(tg_clip_grad_norm(&ps, NAN) < 0);
    ck_assert_error(TG_ERR_VALUE, "tg_clip_grad_norm", "max_norm");
    ck_assert_double_eq(tg_clip_grad_norm(&ps, 1.0), 0.0); /* nothing to clip */
    ck_assert_int_eq(tg_error_code(), TG_OK);
}
END_TEST

/* ---- schedule ------------------------------------------------------------------ */

START_TEST(warmup_cosine_schedule_values)
{
    const double hi = 1e-3, lo = 1e-5;
#define LR(step) tg_lr_warmup_cosine(step, 10, 110, hi, lo)
    ck_assert_double_eq_tol(LR(0), 1e-4, 1e-18);   /* hi * (step + 1) / warmup */
    ck_assert_double_eq_tol(LR(4), 5e-4, 1e-18);
    ck_assert_double_eq_tol(LR(9), 1e-3, 1e-18);
    ck_assert_double_eq_tol(LR(10), 1e-3, 1e-18);  /* cosine from progress 0 */
    ck_assert_double_eq_tol(LR(35), 8.550178566873411e-4, 1e-15); /* progress 1/4 */
    ck_assert_double_eq_tol(LR(60), 5.05e-4, 1e-15);               /* halfway */
    ck_assert_double_eq_tol(LR(85), 1.5498214331265894e-4, 1e-15); /* progress 3/4 */
    ck_assert_double_eq_tol(LR(109), 1.0244252618962858e-5, 1e-15);
    ck_assert_double_eq(LR(110), lo);
    ck_assert_double_eq(LR(100000), lo);
#undef LR
    /* No warmup starts at lr_max; a warmup longer than the run ends in lr_min. */
    ck_assert_double_eq(tg_lr_warmup_cosine(0, 0, 100, hi, lo), hi);
    ck_assert_double_eq_tol(tg_lr_warmup_cosine(7, 10, 5, hi, lo), 8e-4, 1e-18);
    ck_assert_double_eq(tg_lr_warmup_cosine(10, 10, 5, hi, lo), lo);
    ck_assert_int_eq(tg_error_code(), TG_OK);
}
END_TEST

START_TEST(warmup_cosine_rejects_negative_arguments)
{
    ck_assert(isnan(tg_lr_warmup_cosine(-1, 10, 100, 1e-3, 0)));
    ck_assert_error(TG_ERR_VALUE, "tg_lr_warmup_cosine", "step -1");
    ck_assert(isnan(tg_lr_warmup_cosine(0, -10, 100, 1e-3, 0)));
    ck_assert_error(TG_ERR_VALUE, "tg_lr_warmup_cosine", "warmup -10");
    ck_assert(isnan(tg_lr_warmup_cosine(0, 10, -1, 1e-3, 0)));
    ck_assert_error(TG_ERR_VALUE, "tg_lr_warmup_cosine", "total -1");
    ck_assert(isnan(tg_lr_warmup_cosine(0, 10, 100, -1e-3, 0)));
    ck_assert_error(TG_ERR_VALUE, "tg_lr_warmup_cosine", "lr_max -0.001");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("optim");
    TCase *pt = tcase_checked("pytorch");
    tcase_add_test(pt, sgd_matches_pytorch);
    tcase_add_test(pt, sgd_momentum_and_weight_decay_match_pytorch);
    tcase_add_test(pt, adam_matches_pytorch);
    tcase_add_test(pt, adamw_matches_pytorch);
    tcase_add_test(pt, adam_counts_steps_per_parameter);
    tcase_add_test(pt, sgd_momentum_buffer_starts_at_first_gradient);
    tcase_add_test(pt, step_updates_a_transposed_parameter_in_its_storage);
    suite_add_tcase(s, pt);
    TCase *use = tcase_checked("use");
    tcase_add_test(use, parameter_without_grad_is_untouched);
    tcase_add_test(use, zero_grad_forgets_every_gradient);
    tcase_add_test(use, lr_can_be_read_and_changed);
    suite_add_tcase(s, use);
    TCase *state = tcase_checked("state");
    tcase_add_test(state, state_round_trip_resumes_bit_for_bit);
    tcase_add_test(state, state_holds_the_step_and_moments_by_name);
    tcase_add_test(state, optimizer_used_inside_a_scope_keeps_its_state);
    tcase_add_test(state, step_counts_one_write_per_parameter);
    tcase_add_test(state, load_state_rejects_bad_states_and_changes_nothing);
    tcase_add_test(state, load_state_converts_float64_moments);
    suite_add_tcase(s, state);
    TCase *errors = tcase_checked("errors");
    tcase_add_test(errors, constructors_validate_hyperparameters);
    tcase_add_test(errors, constructors_validate_parameters);
    tcase_add_test(errors, null_optimizer_is_an_error_or_a_no_op);
    suite_add_tcase(s, errors);
    TCase *clip = tcase_checked("clip_and_schedule");
    tcase_add_test(clip, clip_grad_norm_scales_gradients_above_max_norm);
    tcase_add_test(clip, clip_grad_norm_leaves_small_gradients);
    tcase_add_test(clip, clip_grad_norm_errors);
    tcase_add_test(clip, warmup_cosine_schedule_values);
    tcase_add_test(clip, warmup_cosine_rejects_negative_arguments);
    suite_add_tcase(s, clip);
    optim_written_with_module_h_cases(s);
    return run_suite(s);
}
