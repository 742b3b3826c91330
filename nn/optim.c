/* Optimizers (SGD, Adam, AdamW) after PyTorch 1.13: hyperparameters, state
 * and its export and import, gradient-norm clipping and the warmup + cosine
 * schedule, written on module.h's public updates as a user's optimizer is. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <tensorgrad/tensorgrad.h>
#include <tensorgrad/module.h>

typedef enum { KIND_SGD, KIND_ADAM, KIND_ADAMW } optim_kind;

/* One parameter and its state. steps counts the steps in which it had a
 * gradient: PyTorch keeps that per parameter, and Adam's bias correction and
 * SGD's "the buffer starts as the first gradient" both depend on it.
 * m is exp_avg (Adam) or momentum_buffer (SGD), v is exp_avg_sq; both are
 * contiguous, of the parameter's shape and dtype, or NULL when unused. */
typedef struct {
    char *name;
    tg_tensor *param;
    int64_t steps;
    tg_tensor *m, *v;
} slot;

struct tg_optim {
    optim_kind kind;
    const char *fn; /* the constructor's name, for messages */
    double lr, momentum, beta1, beta2, eps, weight_decay;
    int64_t steps;
    int n;
    slot *slots;
    tg_param_update *jobs; /* room for one per slot: a step's updates */
};

/* The coefficients of one parameter's update; s->steps already counts this
 * step. */
static tg_update_coefs slot_coefs(const tg_optim *opt, const slot *s)
{
    tg_update_coefs c = {.lr = opt->lr, .momentum = opt->momentum, .decay = 1};
    if (opt->kind == KIND_ADAMW)
        c.decay = 1 - opt->lr * opt->weight_decay;
    else
        c.l2 = opt->weight_decay;
    if (opt->kind == KIND_SGD) {
        c.first = s->steps == 1;
    } else {
        double t = (double)s->steps;
        c.beta1 = opt->beta1;
        c.beta2 = opt->beta2;
        c.eps = opt->eps;
        c.step_size = opt->lr / (1 - pow(opt->beta1, t));
        c.bc2_sqrt = sqrt(1 - pow(opt->beta2, t));
    }
    return c;
}

/* ---- construction ------------------------------------------------------------- */

static int check_hyper(const char *fn, const char *what, double value, bool below_one)
{
    /* written so that NaN fails too */
    if (value >= 0 && (!below_one || value < 1))
        return 0;
    tg_fail(TG_ERR_VALUE, "%s: invalid %s %g (need %s)", fn, what, value,
             below_one ? "0 <= value < 1" : "value >= 0");
    return -1;
}

/* Checks one parameter: present, float, a leaf, not listed twice. */
static int check_param(const char *fn, const tg_params *ps, int i)
{
    const tg_tensor *t = ps->tensors[i];
    const char *name = ps->names[i] ? ps->names[i] : "?";
    if (!t) {
        tg_fail(TG_ERR_NULL, "%s: parameter '%s' is NULL", fn, name);
        return -1;
    }
    if (!tg_dtype_is_float(tg_dtype_of(t))) {
        tg_fail(TG_ERR_DTYPE, "%s: parameter '%s' is %s; optimizers take float32 or float64",
                 fn, name, tg_dtype_name(tg_dtype_of(t)));
        return -1;
    }
    if (!tg_is_leaf(t)) {
        tg_fail(TG_ERR_STATE, "%s: parameter '%s' is not a leaf (an op made it); detach it",
                 fn, name);
        return -1;
    }
    for (int j = 0; j < i; j++) {
        if (ps->tensors[j] == t) {
            tg_fail(TG_ERR_VALUE, "%s: parameter '%s' is the same tensor as '%s'", fn, name,
                     ps->names[j] ? ps->names[j] : "?");
            return -1;
        }
    }
    return 0;
}

static char *copy_name(const char *s)
{
    size_t n = strlen(s) + 1;
    char *c = malloc(n);
    if (c)
        memcpy(c, s, n);
    return c;
}

/* A zeroed contiguous tensor of p's shape in dtype, a reference of the
 * caller's own whether or not a scope is open. */
static tg_tensor *zeros_like(const tg_tensor *p, tg_dtype dtype)
{
    tg_scope_begin();
    tg_tensor *t = tg_retain(tg_zeros(dtype, tg_ndim(p), tg_shape(p)));
    tg_scope_end();
    return t;
}

/* Takes a reference to every parameter and allocates its zeroed moments
 * (m when with_m, v when with_v). */
static tg_optim *optim_new(const char *fn, optim_kind kind, const tg_params *ps, bool with_m,
                           bool with_v)
{
    if (!ps)
        return tg_fail(TG_ERR_NULL, "%s: ps is NULL", fn);
    if (ps->count <= 0)
        return tg_fail(TG_ERR_VALUE, "%s: the parameter list is empty", fn);
    for (int i = 0; i < ps->count; i++)
        if (check_param(fn, ps, i) < 0)
            return NULL;
    tg_optim *opt = calloc(1, sizeof *opt);
    slot *slots = calloc((size_t)ps->count, sizeof *slots);
    tg_param_update *jobs = calloc((size_t)ps->count, sizeof *jobs);
    if (!opt || !slots || !jobs) {
        free(opt);
        free(slots);
        free(jobs);
        return tg_fail(TG_ERR_NOMEM, "%s: out of memory", fn);
    }
    opt->kind = kind;
    opt->fn = fn;
    opt->slots = slots;
    opt->jobs = jobs;
    for (int i = 0; i < ps->count; i++, opt->n++) {
        tg_tensor *p = ps->tensors[i];
        slot *s = &slots[i];
        s->param = tg_retain(p);
        s->name = copy_name(ps->names[i] ? ps->names[i] : "");
        s->m = with_m ? zeros_like(p, tg_dtype_of(p)) : NULL;
        s->v = with_v ? zeros_like(p, tg_dtype_of(p)) : NULL;
        if (!s->name || (with_m && !s->m) || (with_v && !s->v)) {
            opt->n++;
            tg_optim_free(opt);
            return tg_fail(TG_ERR_NOMEM, "%s: out of memory for the state of '%s'", fn,
                            ps->names[i] ? ps->names[i] : "?");
        }
    }
    return opt;
}

tg_optim *tg_sgd_new(const tg_params *ps, double lr, double momentum, double weight_decay)
{
    const char *fn = __func__;
    if (check_hyper(fn, "learning rate", lr, false) < 0 ||
        check_hyper(fn, "momentum", momentum, false) < 0 ||
        check_hyper(fn, "weight_decay", weight_decay, false) < 0)
        return NULL;
    tg_optim *opt = optim_new(fn, KIND_SGD, ps, momentum != 0, false);
    if (opt) {
        opt->lr = lr;
        opt->momentum = momentum;
        opt->weight_decay = weight_decay;
    }
    return opt;
}

static tg_optim *adam_new(const char *fn, optim_kind kind, const tg_params *ps, double lr,
                          double beta1, double beta2, double eps, double weight_decay)
{
    if (check_hyper(fn, "learning rate", lr, false) < 0 ||
        check_hyper(fn, "beta1", beta1, true) < 0 || check_hyper(fn, "beta2", beta2, true) < 0 ||
        check_hyper(fn, "eps", eps, false) < 0 ||
        check_hyper(fn, "weight_decay", weight_decay, false) < 0)
        return NULL;
    tg_optim *opt = optim_new(fn, kind, ps, true, true);
    if (opt) {
        opt->lr = lr;
        opt->beta1 = beta1;
        opt->beta2 = beta2;
        opt->eps = eps;
        opt->weight_decay = weight_decay;
    }
    return opt;
}

tg_optim *tg_adam_new(const tg_params *ps, double lr, double beta1, double beta2, double eps,
                      double weight_decay)
{
    return adam_new(__func__, KIND_ADAM, ps, lr, beta1, beta2, eps, weight_decay);
}

tg_optim *tg_adamw_new(const tg_params *ps, double lr, double beta1, double beta2, double eps,
                       double weight_decay)
{
    return adam_new(__func__, KIND_ADAMW, ps, lr, beta1, beta2, eps, weight_decay);
}

void tg_optim_free(tg_optim *opt)
{
    if (!opt)
        return;
    for (int i = 0; i < opt->n; i++) {
        free(opt->slots[i].name);
        tg_release(opt->slots[i].param);
        tg_release(opt->slots[i].m);
        tg_release(opt->slots[i].v);
    }
    free(opt->slots);
    free(opt->jobs);
    free(opt);
}

/* ---- stepping ------------------------------------------------------------------ */

static bool same_shape(const tg_tensor *a, const tg_tensor *b)
{
    int n = tg_ndim(a);
    return n == tg_ndim(b) && !memcmp(tg_shape(a), tg_shape(b), (size_t)n * sizeof(int64_t));
}

/* Fills opt->jobs[i] with slot i's parameter, gradient (NULL when it has
 * none; the reference belongs to the open scope) and state, checking every
 * gradient before any parameter is touched. */
static int gather_jobs(tg_optim *opt)
{
    for (int i = 0; i < opt->n; i++) {
        const slot *s = &opt->slots[i];
        const tg_tensor *p = s->param, *g = tg_grad(p);
        if (g && (tg_dtype_of(g) != tg_dtype_of(p) || !same_shape(g, p))) {
            tg_fail(TG_ERR_STATE, "tg_optim_step: the gradient of '%s' is %s %s, the parameter "
                     "%s %s", s->name, tg_dtype_name(tg_dtype_of(g)), TG_SHAPE_STRING(g),
                     tg_dtype_name(tg_dtype_of(p)), TG_SHAPE_STRING(p));
            return -1;
        }
        opt->jobs[i] = (tg_param_update){
            .param = s->param, .grad = g, .m = s->m, .v = s->v,
            .rule = opt->kind == KIND_SGD ? TG_UPDATE_SGD : TG_UPDATE_ADAM};
    }
    return 0;
}

int tg_optim_step(tg_optim *opt)
{
    TG_CHECK_ARG_STATUS(opt);
    tg_scope_begin();
    if (gather_jobs(opt) < 0) {
        tg_scope_end();
        return -1;
    }
    bool was = tg_set_grad_enabled(false);
    /* The parameters with a gradient, in slot order, each with its
     * coefficients; s->steps counts this step first. */
    int n = 0;
    for (int i = 0; i < opt->n; i++) {
        slot *s = &opt->slots[i];
        if (!opt->jobs[i].grad)
            continue;
        s->steps++;
        opt->jobs[n] = opt->jobs[i];
        opt->jobs[n++].c = slot_coefs(opt, s);
    }
    int rc = tg_update_params(opt->jobs, n);
    /* A refused update writes nothing, so the step did not happen. */
    for (int i = 0; rc < 0 && i < opt->n; i++)
        if (tg_grad(opt->slots[i].param))
            opt->slots[i].steps--;
    if (rc == 0)
        opt->steps++;
    tg_set_grad_enabled(was);
    tg_scope_end();
    return rc;
}

void tg_optim_zero_grad(tg_optim *opt)
{
    if (!opt)
        return;
    for (int i = 0; i < opt->n; i++)
        tg_zero_grad(opt->slots[i].param);
}

void tg_optim_set_lr(tg_optim *opt, double lr)
{
    if (!opt) {
        tg_fail(TG_ERR_NULL, "tg_optim_set_lr: opt is NULL");
        return;
    }
    if (check_hyper("tg_optim_set_lr", "learning rate", lr, false) == 0)
        opt->lr = lr;
}

double tg_optim_lr(const tg_optim *opt)
{
    if (!opt) {
        tg_fail(TG_ERR_NULL, "tg_optim_lr: opt is NULL");
        return NAN;
    }
    return opt->lr;
}

int64_t tg_optim_steps(const tg_optim *opt)
{
    TG_CHECK_ARG_STATUS(opt);
    return opt->steps;
}

/* ---- state ---------------------------------------------------------------------- */

/* The state's names for slot i: "step.<name>", "exp_avg.<name>" (or
 * "momentum_buffer.<name>"), "exp_avg_sq.<name>"; an entry is NULL when the
 * optimizer has no such state. Returns -1 when out of memory. */
typedef struct { char *step, *m, *v; } state_names;

static char *join(const char *prefix, const char *name)
{
    size_t a = strlen(prefix), b = strlen(name);
    char *s = malloc(a + b + 2);
    if (s) {
        memcpy(s, prefix, a);
        s[a] = '.';
        memcpy(s + a + 1, name, b + 1);
    }
    return s;
}

static void free_names(state_names *n)
{
    free(n->step);
    free(n->m);
    free(n->v);
}

static int make_names(const tg_optim *opt, int i, state_names *n)
{
    const slot *s = &opt->slots[i];
    *n = (state_names){join("step", s->name), NULL, NULL};
    if (s->m)
        n->m = join(opt->kind == KIND_SGD ? "momentum_buffer" : "exp_avg", s->name);
    if (s->v)
        n->v = join("exp_avg_sq", s->name);
    if (!n->step || (s->m && !n->m) || (s->v && !n->v)) {
        free_names(n);
        tg_fail(TG_ERR_NOMEM, "tg_optim_state: out of memory");
        return -1;
    }
    return 0;
}

/* Adds a private copy of t to out under name (or a step count when t is
 * NULL). */
static int add_copy(tg_params *out, const char *name, const tg_tensor *t, int64_t step)
{
    tg_scope_begin(); /* holds the copy; out takes its own reference */
    tg_tensor *c = t ? tg_from_data(tg_dtype_of(t), tg_ndim(t), tg_shape(t), tg_data_const(t))
                     : tg_scalar(TG_INT64, (double)step);
    int rc = c ? tg_params_add(out, NULL, name, c) : -1;
    tg_scope_end();
    return rc;
}

/* A contiguous copy of t converted to dtype, the caller's own reference. */
static tg_tensor *convert(const tg_tensor *t, tg_dtype dtype)
{
    tg_tensor *c = zeros_like(t, dtype);
    if (c && tg_copy_to(t, dtype, tg_data(c), tg_numel(c)) < 0) {
        tg_release(c);
        return NULL;
    }
    return c;
}

int tg_optim_state(const tg_optim *opt, tg_params *out)
{
    TG_CHECK_ARG_STATUS(opt);
    TG_CHECK_ARG_STATUS(out);
    if (tg_params_find(out, "step")) {
        tg_fail(TG_ERR_VALUE, "tg_optim_state: out already holds 'step'");
        return -1;
    }
    int start = out->count;
    if (add_copy(out, "step", NULL, opt->steps) < 0)
        return -1;
    for (int i = 0; i < opt->n; i++) {
        state_names n;
        if (make_names(opt, i, &n) < 0)
            goto fail;
        const slot *s = &opt->slots[i];
        int rc = add_copy(out, n.step, NULL, s->steps);
        if (rc == 0 && n.m)
            rc = add_copy(out, n.m, s->m, 0);
        if (rc == 0 && n.v)
            rc = add_copy(out, n.v, s->v, 0);
        free_names(&n);
        if (rc < 0)
            goto fail;
    }
    return 0;
fail:
    tg_params_truncate(out, start);
    return -1;
}

/* A step count from a one-element tensor: a whole number >= 0. */
static int read_step(const tg_tensor *t, const char *name, int64_t *out)
{
    if (tg_numel(t) != 1) {
        tg_fail(TG_ERR_SHAPE, "tg_optim_load_state: '%s' has shape %s; expected one element",
                 name, TG_SHAPE_STRING(t));
        return -1;
    }
    double v = tg_item(t);
    if (!(v >= 0 && v <= 9e15 && v == floor(v))) {
        tg_fail(TG_ERR_VALUE, "tg_optim_load_state: '%s' is %g; expected a whole number >= 0",
                 name, v);
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

/* The moment called name, checked against the parameter's shape. */
static const tg_tensor *find_moment(const tg_params *state, const char *name, const tg_tensor *p)
{
    const tg_tensor *t = tg_params_find(state, name);
    if (!t)
        return tg_fail(TG_ERR_VALUE, "tg_optim_load_state: the state has no '%s'", name);
    if (!same_shape(t, p))
        return tg_fail(TG_ERR_SHAPE, "tg_optim_load_state: '%s' has shape %s; the parameter "
                        "has %s", name, TG_SHAPE_STRING(t), TG_SHAPE_STRING(p));
    if (!tg_dtype_is_float(tg_dtype_of(t)))
        return tg_fail(TG_ERR_DTYPE, "tg_optim_load_state: '%s' is %s; expected a float dtype",
                        name, tg_dtype_name(tg_dtype_of(t)));
    return t;
}

/* What load_state found for one slot, before anything is changed. */
typedef struct {
    int64_t steps;
    const tg_tensor *m, *v;
} found_state;

static int find_slot_state(const tg_optim *opt, int i, const tg_params *state, found_state *f)
{
    state_names n;
    if (make_names(opt, i, &n) < 0)
        return -1;
    const tg_tensor *p = opt->slots[i].param, *st = tg_params_find(state, n.step);
    int rc = 0;
    if (!st) {
        tg_fail(TG_ERR_VALUE, "tg_optim_load_state: the state has no '%s'", n.step);
        rc = -1;
    }
    if (rc == 0)
        rc = read_step(st, n.step, &f->steps);
    if (rc == 0 && n.m && !(f->m = find_moment(state, n.m, p)))
        rc = -1;
    if (rc == 0 && n.v && !(f->v = find_moment(state, n.v, p)))
        rc = -1;
    free_names(&n);
    return rc;
}

int tg_optim_load_state(tg_optim *opt, const tg_params *state)
{
    TG_CHECK_ARG_STATUS(opt);
    TG_CHECK_ARG_STATUS(state);
    const tg_tensor *st = tg_params_find(state, "step");
    if (!st) {
        tg_fail(TG_ERR_VALUE, "tg_optim_load_state: the state has no 'step'");
        return -1;
    }
    int64_t steps;
    found_state *f = calloc((size_t)opt->n, sizeof *f);
    if (!f) {
        tg_fail(TG_ERR_NOMEM, "tg_optim_load_state: out of memory");
        return -1;
    }
    int rc = read_step(st, "step", &steps);
    for (int i = 0; rc == 0 && i < opt->n; i++)
        rc = find_slot_state(opt, i, state, &f[i]);
    /* Converted copies of the new moments first, so that running out of
     * memory half way changes nothing either. */
    tg_tensor **conv = rc == 0 ? calloc((size_t)opt->n * 2, sizeof *conv) : NULL;
    if (rc == 0 && !conv) {
        tg_fail(TG_ERR_NOMEM, "tg_optim_load_state: out of memory");
        rc = -1;
    }
    for (int i = 0; rc == 0 && i < opt->n; i++) {
        const slot *s = &opt->slots[i];
        if (f[i].m && !(conv[2 * i] = convert(f[i].m, tg_dtype_of(s->m))))
            rc = -1;
        if (rc == 0 && f[i].v && !(conv[2 * i + 1] = convert(f[i].v, tg_dtype_of(s->v))))
            rc = -1;
    }
    for (int i = 0; rc == 0 && i < opt->n; i++) {
        slot *s = &opt->slots[i];
        s->steps = f[i].steps;
        for (int k = 0; k < 2; k++) {
            tg_tensor *dst = k ? s->v : s->m, *src = conv[2 * i + k];
            if (src)
                memcpy(tg_data(dst), tg_data_const(src),
                       (size_t)tg_numel(dst) * tg_dtype_size(tg_dtype_of(dst)));
        }
    }
    if (rc == 0)
        opt->steps = steps;
    for (int i = 0; conv && i < 2 * opt->n; i++)
        tg_release(conv[i]);
    free(conv);
    free(f);
    return rc;
}

/* ---- clipping and schedules ------------------------------------------------------ */

double tg_clip_grad_norm(const tg_params *ps, double max_norm)
{
    if (!ps) {
        tg_fail(TG_ERR_NULL, "tg_clip_grad_norm: ps is NULL");
        return -1;
    }
    if (!(max_norm >= 0)) {
        tg_fail(TG_ERR_VALUE, "tg_clip_grad_norm: invalid max_norm %g (need >= 0)", max_norm);
        return -1;
    }
    for (int i = 0; i < ps->count; i++) {
        if (!ps->tensors[i]) {
            tg_fail(TG_ERR_NULL, "tg_clip_grad_norm: parameter '%s' is NULL",
                     ps->names[i] ? ps->names[i] : "?");
            return -1;
        }
    }
    tg_scope_begin(); /* holds the references tg_grad hands out */
    double sq = 0;
    for (int i = 0; i < ps->count; i++) {
        const tg_tensor *g = tg_grad(ps->tensors[i]);
        if (g && tg_dtype_is_float(tg_dtype_of(g)))
            sq += tg_sum_squares(g);
    }
    double norm = sqrt(sq);
    double coef = max_norm / (norm + 1e-6);
    /* NaN or inf norms scale too, as PyTorch's default (error_if_nonfinite=False) does. */
    if (!(coef >= 1))
        for (int i = 0; i < ps->count; i++) {
            tg_tensor *g = tg_grad(ps->tensors[i]);
            if (g && tg_dtype_is_float(tg_dtype_of(g)))
                tg_scale_in_place(g, coef);
        }
    tg_scope_end();
    return norm;
}

double tg_lr_warmup_cosine(int64_t step, int64_t warmup, int64_t total, double lr_max,
                           double lr_min)
{
    if (step < 0 || warmup < 0 || total < 0 || !(lr_max >= 0) || !(lr_min >= 0)) {
        tg_fail(TG_ERR_VALUE, "tg_lr_warmup_cosine: invalid arguments step %lld, warmup %lld, "
                 "total %lld, lr_max %g, lr_min %g (need counts >= 0 and rates >= 0)",
                 (long long)step, (long long)warmup, (long long)total, lr_max, lr_min);
        return NAN;
    }
    if (step < warmup)
        return lr_max * (double)(step + 1) / (double)warmup;
    if (step >= total)
        return lr_min;
    double progress = (double)(step - warmup) / (double)(total - warmup);
    return lr_min + 0.5 * (lr_max - lr_min) * (1 + cos(M_PI * progress));
}
