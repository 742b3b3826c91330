/* Optimizers (SGD, Adam, AdamW) with PyTorch 1.13's single-tensor update
 * formulas computed in the parameter's own dtype, their checkpointable state,
 * global gradient-norm clipping and the warmup + cosine learning-rate schedule. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "fastmath.h"
#include <tensorgrad/nn.h>
#include "tg_config.h"

#if TG_HAVE_OPENMP
#include <omp.h>
#define TG_THREAD_NUM() omp_get_thread_num()
#define TG_NUM_THREADS() omp_get_num_threads()
#else
#define TG_THREAD_NUM() 0
#define TG_NUM_THREADS() 1
#endif

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
};

/* The numbers one parameter's update needs, in double; the kernels round
 * each to the parameter's dtype, as PyTorch does with Python scalars. */
typedef struct {
    double l2;        /* weight decay added to the gradient (SGD, Adam) */
    double decay;     /* AdamW's 1 - lr * wd, multiplied into the parameter */
    double lr, momentum;
    bool first;       /* SGD: the momentum buffer starts as the gradient */
    double beta1, beta2, bc2_sqrt, eps, step_size;
} coefs;

/* ---- kernels ------------------------------------------------------------------ */
/* Operands of the iterator: 0 param, 1 grad, 2 m, 3 v (element offsets).
 * Each line mirrors one PyTorch tensor op, in its order of rounding. */

#define DEFINE_KERNELS(T, SQRT)                                                    \
    static void sgd_##T(T *p, const T *g, T *buf, tg__iter *it, const coefs *c)     \
    {                                                                              \
        const T l2 = (T)c->l2, mom = (T)c->momentum, neg_lr = (T)-c->lr;           \
        do {                                                                       \
            for (int64_t j = 0; j < it->len; j++) {                                \
                T *pj = p + it->off[0] + j * it->inner[0];                         \
                T d = g[it->off[1] + j * it->inner[1]];                            \
                if (c->l2 != 0)                                                    \
                    d = d + l2 * *pj;             /* grad.add(param, alpha=wd) */  \
                if (buf) {                                                         \
                    T *bj = buf + it->off[2] + j * it->inner[2];                   \
                    *bj = c->first ? d : *bj * mom + d;                            \
                    d = *bj;                                                       \
                }                                                                  \
                *pj = *pj + neg_lr * d;           /* param.add_(d, alpha=-lr) */   \
            }                                                                      \
        } while (tg__iter_next(it));                                               \
    }                                                                              \
                                                                                   \
    static void adam_##T(T *p, const T *g, T *m, T *v, tg__iter *it, const coefs *c) \
    {                                                                              \
        const T l2 = (T)c->l2, decay = (T)c->decay, b1 = (T)c->beta1,              \
                omb1 = (T)(1 - c->beta1), b2 = (T)c->beta2, omb2 = (T)(1 - c->beta2), \
                bc2 = (T)c->bc2_sqrt, eps = (T)c->eps, neg_step = (T)-c->step_size; \
        do {                                                                       \
            for (int64_t j = 0; j < it->len; j++) {                                \
                T *pj = p + it->off[0] + j * it->inner[0];                         \
                T *mj = m + it->off[2] + j * it->inner[2];                         \
                T *vj = v + it->off[3] + j * it->inner[3];                         \
                T gj = g[it->off[1] + j * it->inner[1]];                           \
                *pj = *pj * decay;                /* AdamW: param.mul_(1-lr*wd) */ \
                if (c->l2 != 0)                                                    \
                    gj = gj + l2 * *pj;                                            \
                *mj = *mj * b1 + omb1 * gj;                                        \
                *vj = *vj * b2 + omb2 * gj * gj;  /* addcmul_(g, g, 1-b2) */       \
                T denom = SQRT(*vj) / bc2 + eps;                                   \
                *pj = *pj + neg_step * *mj / denom; /* addcdiv_(m, denom) */       \
            }                                                                      \
        } while (tg__iter_next(it));                                               \
    }

DEFINE_KERNELS(float, sqrtf)
DEFINE_KERNELS(double, sqrt)

/* Adam(W) on contiguous float32 parameter and gradient: the same formula
 * as adam_float in the same order, on flat arrays so that it vectorises,
 * in blocks shared out to the OpenMP team. Each element's update is its own,
 * so any thread count gives the same result. */
TG_VECTOR_CLONES
static void adam_block_f32(float *restrict p, const float *restrict g, float *restrict m,
                           float *restrict v, int64_t n, const coefs *c)
{
    const float l2 = (float)c->l2, decay = (float)c->decay, b1 = (float)c->beta1,
                omb1 = (float)(1 - c->beta1), b2 = (float)c->beta2, omb2 = (float)(1 - c->beta2),
                bc2 = (float)c->bc2_sqrt, eps = (float)c->eps, neg_step = (float)-c->step_size;
    for (int64_t j = 0; j < n; j++) {
        float pj = p[j] * decay, gj = g[j];
        if (c->l2 != 0)
            gj = gj + l2 * pj;
        float mj = m[j] * b1 + omb1 * gj;
        float vj = v[j] * b2 + omb2 * gj * gj;
        m[j] = mj;
        v[j] = vj;
        float denom = sqrtf(vj) / bc2 + eps;
        p[j] = pj + neg_step * mj / denom;
    }
}

static void adam_flat_f32(float *p, const float *g, float *m, float *v, int64_t n,
                          const coefs *c)
{
    TG_FOR_BLOCKS(n, lo, len, adam_block_f32(p + lo, g + lo, m + lo, v + lo, len, c));
}

/* The coefficients of one parameter's update; s->steps already counts this
 * step. */
static coefs slot_coefs(const tg_optim *opt, const slot *s)
{
    coefs c = {.lr = opt->lr, .momentum = opt->momentum, .decay = 1};
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

/* True when slot s takes the flat float32 Adam(W) kernel. */
static bool flat_adam(const tg_optim *opt, const slot *s)
{
    const tg_tensor *p = s->param;
    return opt->kind != KIND_SGD && p->dtype == TG_FLOAT32 && tg_is_contiguous(p) &&
           tg_is_contiguous(p->grad);
}

/* Updates one parameter that has a gradient; s->steps already counts this step. */
static void update_slot(const tg_optim *opt, const slot *s)
{
    const tg_tensor *p = s->param, *g = p->grad;
    coefs c = slot_coefs(opt, s);
    int64_t strides[4][TG_MAX_DIMS];
    memcpy(strides[0], p->stride, sizeof strides[0]);
    memcpy(strides[1], g->stride, sizeof strides[1]);
    tg__contiguous_strides(p->ndim, p->shape, strides[2]);
    memcpy(strides[3], strides[2], sizeof strides[3]);
    tg__iter it;
    tg__iter_init(&it, p->ndim, p->shape, 4, (const int64_t(*)[TG_MAX_DIMS])strides);
    if (!it.len)
        return;
    bool f32 = p->dtype == TG_FLOAT32;
    if (opt->kind == KIND_SGD && f32)
        sgd_float(tg__ptr(p), tg__ptr(g), s->m ? tg__ptr(s->m) : NULL, &it, &c);
    else if (opt->kind == KIND_SGD)
        sgd_double(tg__ptr(p), tg__ptr(g), s->m ? tg__ptr(s->m) : NULL, &it, &c);
    else if (flat_adam(opt, s))
        adam_flat_f32(tg__ptr(p), tg__ptr(g), tg__ptr(s->m), tg__ptr(s->v),
                      tg__numel(p->ndim, p->shape), &c);
    else if (f32)
        adam_float(tg__ptr(p), tg__ptr(g), tg__ptr(s->m), tg__ptr(s->v), &it, &c);
    else
        adam_double(tg__ptr(p), tg__ptr(g), tg__ptr(s->m), tg__ptr(s->v), &it, &c);
}

/* ---- construction ------------------------------------------------------------- */

static int check_hyper(const char *fn, const char *what, double value, bool below_one)
{
    /* written so that NaN fails too */
    if (value >= 0 && (!below_one || value < 1))
        return 0;
    tg__fail(TG_ERR_VALUE, "%s: invalid %s %g (need %s)", fn, what, value,
             below_one ? "0 <= value < 1" : "value >= 0");
    return -1;
}

/* Checks one parameter: present, float, a leaf, not listed twice. */
static int check_param(const char *fn, const tg_params *ps, int i)
{
    const tg_tensor *t = ps->tensors[i];
    const char *name = ps->names[i] ? ps->names[i] : "?";
    if (!t) {
        tg__fail(TG_ERR_NULL, "%s: parameter '%s' is NULL", fn, name);
        return -1;
    }
    if (!tg__is_float(t->dtype)) {
        tg__fail(TG_ERR_DTYPE, "%s: parameter '%s' is %s; optimizers take float32 or float64",
                 fn, name, tg_dtype_name(t->dtype));
        return -1;
    }
    if (t->node) {
        tg__fail(TG_ERR_STATE, "%s: parameter '%s' is not a leaf (an op made it); detach it",
                 fn, name);
        return -1;
    }
    for (int j = 0; j < i; j++) {
        if (ps->tensors[j] == t) {
            tg__fail(TG_ERR_VALUE, "%s: parameter '%s' is the same tensor as '%s'", fn, name,
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

/* Takes a reference to every parameter and allocates its zeroed moments
 * (m when with_m, v when with_v). */
static tg_optim *optim_new(const char *fn, optim_kind kind, const tg_params *ps, bool with_m,
                           bool with_v)
{
    if (!ps)
        return tg__fail(TG_ERR_NULL, "%s: ps is NULL", fn);
    if (ps->count <= 0)
        return tg__fail(TG_ERR_VALUE, "%s: the parameter list is empty", fn);
    for (int i = 0; i < ps->count; i++)
        if (check_param(fn, ps, i) < 0)
            return NULL;
    tg_optim *opt = calloc(1, sizeof *opt);
    slot *slots = calloc((size_t)ps->count, sizeof *slots);
    if (!opt || !slots) {
        free(opt);
        free(slots);
        return tg__fail(TG_ERR_NOMEM, "%s: out of memory", fn);
    }
    opt->kind = kind;
    opt->fn = fn;
    opt->slots = slots;
    for (int i = 0; i < ps->count; i++, opt->n++) {
        tg_tensor *p = ps->tensors[i];
        slot *s = &slots[i];
        s->param = tg_retain(p);
        s->name = copy_name(ps->names[i] ? ps->names[i] : "");
        s->m = with_m ? tg__empty(p->dtype, p->ndim, p->shape) : NULL;
        s->v = with_v ? tg__empty(p->dtype, p->ndim, p->shape) : NULL;
        if (!s->name || (with_m && !s->m) || (with_v && !s->v)) {
            opt->n++;
            tg_optim_free(opt);
            return tg__fail(TG_ERR_NOMEM, "%s: out of memory for the state of '%s'", fn,
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
    free(opt);
}

/* ---- stepping ------------------------------------------------------------------ */

static bool same_shape(const tg_tensor *a, const tg_tensor *b)
{
    return a->ndim == b->ndim && !memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof *a->shape);
}

/* The spans of TG_PAR_MIN elements of every parameter that takes the flat
 * float32 Adam(W) kernel, numbered in slot order; span j goes to thread
 * j % threads, so one parallel loop covers them all without a list: a
 * model of many small tensors would otherwise update most of them on one
 * thread, one team start per tensor. Each element's update is its own, so
 * the result is the same on any thread count. */
static int64_t flat_spans(const tg_optim *opt)
{
    int64_t count = 0;
    for (int i = 0; i < opt->n; i++)
        if (opt->slots[i].param->grad && flat_adam(opt, &opt->slots[i]))
            count += (tg_numel(opt->slots[i].param) + TG_PAR_MIN - 1) / TG_PAR_MIN;
    return count;
}

static void update_flat_spans(const tg_optim *opt, int thread, int threads)
{
    int64_t j = 0;
    for (int i = 0; i < opt->n; i++) {
        const slot *s = &opt->slots[i];
        if (!s->param->grad || !flat_adam(opt, s))
            continue;
        coefs c = slot_coefs(opt, s);
        float *p = tg__ptr(s->param), *m = tg__ptr(s->m), *v = tg__ptr(s->v);
        const float *g = tg__ptr(s->param->grad);
        int64_t n = tg_numel(s->param);
        for (int64_t lo = 0; lo < n; lo += TG_PAR_MIN, j++)
            if (j % threads == thread)
                adam_block_f32(p + lo, g + lo, m + lo, v + lo,
                               n - lo < TG_PAR_MIN ? n - lo : TG_PAR_MIN, &c);
    }
}

static void update_flat_together(const tg_optim *opt)
{
    if (flat_spans(opt) > 1) {
#pragma omp parallel
        update_flat_spans(opt, TG_THREAD_NUM(), TG_NUM_THREADS());
    } else {
        update_flat_spans(opt, 0, 1);
    }
}

int tg_optim_step(tg_optim *opt)
{
    TG_CHECK_NULL_STATUS(opt);
    /* Check every gradient before touching any parameter. */
    for (int i = 0; i < opt->n; i++) {
        const tg_tensor *p = opt->slots[i].param, *g = p->grad;
        if (g && (g->dtype != p->dtype || !same_shape(g, p))) {
            tg__fail(TG_ERR_STATE, "tg_optim_step: the gradient of '%s' is %s %s, the parameter "
                     "%s %s", opt->slots[i].name, tg_dtype_name(g->dtype), TG_SHAPE_STR(g),
                     tg_dtype_name(p->dtype), TG_SHAPE_STR(p));
            return -1;
        }
    }
    bool was = tg_set_grad_enabled(false);
    for (int i = 0; i < opt->n; i++)
        if (opt->slots[i].param->grad)
            opt->slots[i].steps++;
    update_flat_together(opt);
    for (int i = 0; i < opt->n; i++)
        if (opt->slots[i].param->grad && !flat_adam(opt, &opt->slots[i]))
            update_slot(opt, &opt->slots[i]);
    for (int i = 0; i < opt->n; i++) /* a graph that read them must not run backward now */
        if (opt->slots[i].param->grad)
            tg__bump_version(opt->slots[i].param);
    opt->steps++;
    tg_set_grad_enabled(was);
    return 0;
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
        tg__fail(TG_ERR_NULL, "tg_optim_set_lr: opt is NULL");
        return;
    }
    if (check_hyper("tg_optim_set_lr", "learning rate", lr, false) == 0)
        opt->lr = lr;
}

double tg_optim_lr(const tg_optim *opt)
{
    if (!opt) {
        tg__fail(TG_ERR_NULL, "tg_optim_lr: opt is NULL");
        return NAN;
    }
    return opt->lr;
}

int64_t tg_optim_steps(const tg_optim *opt)
{
    TG_CHECK_NULL_STATUS(opt);
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
        tg__fail(TG_ERR_NOMEM, "tg_optim_state: out of memory");
        return -1;
    }
    return 0;
}

static tg_tensor *int_scalar(int64_t value)
{
    tg_tensor *t = tg__empty(TG_INT64, 0, NULL);
    if (t)
        *(int64_t *)tg__ptr(t) = value;
    return t;
}

/* Adds a private copy of t to out under name (or a step count when t is
 * NULL). */
static int add_copy(tg_params *out, const char *name, const tg_tensor *t, int64_t step)
{
    tg_tensor *c = t ? tg__convert(t, t->dtype) : int_scalar(step);
    int rc = c ? tg_params_add(out, NULL, name, c) : -1;
    tg_release(c);
    return rc;
}

int tg_optim_state(const tg_optim *opt, tg_params *out)
{
    TG_CHECK_NULL_STATUS(opt);
    TG_CHECK_NULL_STATUS(out);
    if (tg_params_find(out, "step")) {
        tg__fail(TG_ERR_VALUE, "tg_optim_state: out already holds 'step'");
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
        tg__fail(TG_ERR_SHAPE, "tg_optim_load_state: '%s' has shape %s; expected one element",
                 name, TG_SHAPE_STR(t));
        return -1;
    }
    double v = tg_item(t);
    if (!(v >= 0 && v <= 9e15 && v == floor(v))) {
        tg__fail(TG_ERR_VALUE, "tg_optim_load_state: '%s' is %g; expected a whole number >= 0",
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
        return tg__fail(TG_ERR_VALUE, "tg_optim_load_state: the state has no '%s'", name);
    if (!same_shape(t, p))
        return tg__fail(TG_ERR_SHAPE, "tg_optim_load_state: '%s' has shape %s; the parameter "
                        "has %s", name, TG_SHAPE_STR(t), TG_SHAPE_STR(p));
    if (!tg__is_float(t->dtype))
        return tg__fail(TG_ERR_DTYPE, "tg_optim_load_state: '%s' is %s; expected a float dtype",
                        name, tg_dtype_name(t->dtype));
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
        tg__fail(TG_ERR_VALUE, "tg_optim_load_state: the state has no '%s'", n.step);
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
    TG_CHECK_NULL_STATUS(opt);
    TG_CHECK_NULL_STATUS(state);
    const tg_tensor *st = tg_params_find(state, "step");
    if (!st) {
        tg__fail(TG_ERR_VALUE, "tg_optim_load_state: the state has no 'step'");
        return -1;
    }
    int64_t steps;
    found_state *f = calloc((size_t)opt->n, sizeof *f);
    if (!f) {
        tg__fail(TG_ERR_NOMEM, "tg_optim_load_state: out of memory");
        return -1;
    }
    int rc = read_step(st, "step", &steps);
    for (int i = 0; rc == 0 && i < opt->n; i++)
        rc = find_slot_state(opt, i, state, &f[i]);
    /* Converted copies of the new moments first, so that running out of
     * memory half way changes nothing either. */
    tg_tensor **conv = rc == 0 ? calloc((size_t)opt->n * 2, sizeof *conv) : NULL;
    if (rc == 0 && !conv) {
        tg__fail(TG_ERR_NOMEM, "tg_optim_load_state: out of memory");
        rc = -1;
    }
    for (int i = 0; rc == 0 && i < opt->n; i++) {
        const slot *s = &opt->slots[i];
        if (f[i].m && !(conv[2 * i] = tg__convert(f[i].m, s->m->dtype)))
            rc = -1;
        if (rc == 0 && f[i].v && !(conv[2 * i + 1] = tg__convert(f[i].v, s->v->dtype)))
            rc = -1;
    }
    for (int i = 0; rc == 0 && i < opt->n; i++) {
        slot *s = &opt->slots[i];
        s->steps = f[i].steps;
        for (int k = 0; k < 2; k++) {
            tg_tensor *dst = k ? s->v : s->m, *src = conv[2 * i + k];
            if (src)
                memcpy(tg__ptr(dst), tg__ptr(src),
                       (size_t)tg_numel(dst) * tg_dtype_size(dst->dtype));
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

/* The sum of squares of a gradient (any layout), accumulated in double. */
static double grad_sq_sum(const tg_tensor *g)
{
    tg__iter it;
    tg__iter_init(&it, g->ndim, g->shape, 1, (const int64_t(*)[TG_MAX_DIMS])&g->stride);
    double acc = 0;
    if (!it.len)
        return 0;
    do {
        for (int64_t j = 0; j < it.len; j++) {
            int64_t k = it.off[0] + j * it.inner[0];
            double x = g->dtype == TG_FLOAT32 ? ((const float *)tg__ptr(g))[k]
                                              : ((const double *)tg__ptr(g))[k];
            acc += x * x;
        }
    } while (tg__iter_next(&it));
    return acc;
}

/* g *= coef in place, rounding coef to g's dtype like PyTorch's mul_. */
static void grad_scale(tg_tensor *g, double coef)
{
    tg__iter it;
    tg__iter_init(&it, g->ndim, g->shape, 1, (const int64_t(*)[TG_MAX_DIMS])&g->stride);
    if (!it.len)
        return;
    float cf = (float)coef;
    tg__bump_version(g);
    do {
        for (int64_t j = 0; j < it.len; j++) {
            int64_t k = it.off[0] + j * it.inner[0];
            if (g->dtype == TG_FLOAT32)
                ((float *)tg__ptr(g))[k] *= cf;
            else
                ((double *)tg__ptr(g))[k] *= coef;
        }
    } while (tg__iter_next(&it));
}

double tg_clip_grad_norm(const tg_params *ps, double max_norm)
{
    if (!ps) {
        tg__fail(TG_ERR_NULL, "tg_clip_grad_norm: ps is NULL");
        return -1;
    }
    if (!(max_norm >= 0)) {
        tg__fail(TG_ERR_VALUE, "tg_clip_grad_norm: invalid max_norm %g (need >= 0)", max_norm);
        return -1;
    }
    double sq = 0;
    for (int i = 0; i < ps->count; i++) {
        const tg_tensor *p = ps->tensors[i];
        if (!p) {
            tg__fail(TG_ERR_NULL, "tg_clip_grad_norm: parameter '%s' is NULL",
                     ps->names[i] ? ps->names[i] : "?");
            return -1;
        }
        if (p->grad && tg__is_float(p->grad->dtype))
            sq += grad_sq_sum(p->grad);
    }
    double norm = sqrt(sq);
    double coef = max_norm / (norm + 1e-6);
    /* NaN or inf norms scale too, as PyTorch's default (error_if_nonfinite=False) does. */
    if (!(coef >= 1))
        for (int i = 0; i < ps->count; i++)
            if (ps->tensors[i]->grad && tg__is_float(ps->tensors[i]->grad->dtype))
                grad_scale(ps->tensors[i]->grad, coef);
    return norm;
}

double tg_lr_warmup_cosine(int64_t step, int64_t warmup, int64_t total, double lr_max,
                           double lr_min)
{
    if (step < 0 || warmup < 0 || total < 0 || !(lr_max >= 0) || !(lr_min >= 0)) {
        tg__fail(TG_ERR_VALUE, "tg_lr_warmup_cosine: invalid arguments step %lld, warmup %lld, "
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
