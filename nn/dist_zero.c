/* ZeRO stage 1 (tensorgrad/dist.h): AdamW whose moments are sharded over the
 * ranks. Each rank updates its slice of the flat parameter space with
 * tg_adamw's arithmetic, then the slices are all-gathered bucket by bucket. */
#include "dist_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The part of one parameter that lies in this rank's shard, with its
 * moments: elements [lo, lo + len) of the flattened parameter. */
typedef struct {
    int param;
    int64_t lo, len;
    tg_tensor *m, *v; /* [len], the parameter's dtype */
} shard_slice;

struct tg_dist_adamw {
    tg_dist *d;
    double lr, beta1, beta2, eps, weight_decay;
    int64_t steps;      /* tg_dist_adamw_step calls */
    int64_t *param_steps; /* [d->n]: steps in which each parameter was updated */
    int n;
    shard_slice *slices;
    tg_param_update *jobs; /* [n] */
};

static int check_hyper(const char *what, double value, bool below_one)
{
    if (value >= 0 && (!below_one || value < 1)) /* NaN fails too */
        return 0;
    tg_fail(TG_ERR_VALUE, "tg_dist_adamw_new: invalid %s %g (need %s)", what, value,
             below_one ? "0 <= value < 1" : "value >= 0");
    return -1;
}

static int make_slices(tg_dist_adamw *o)
{
    const tg_dist *d = o->d;
    o->slices = calloc((size_t)d->n, sizeof *o->slices);
    o->jobs = calloc((size_t)d->n, sizeof *o->jobs);
    o->param_steps = calloc((size_t)d->n, sizeof *o->param_steps);
    if (!o->slices || !o->jobs || !o->param_steps)
        return -1;
    for (int i = 0; i < d->n; i++) {
        const dist_param *p = &d->params[i];
        int64_t lo, hi;
        tg__dist_shard_part(d, p, d->rank, &lo, &hi);
        if (hi <= lo)
            continue;
        shard_slice *s = &o->slices[o->n++];
        int64_t len = hi - lo;
        *s = (shard_slice){.param = i, .lo = lo, .len = len,
                           .m = tg_zeros(tg_dtype_of(p->t), 1, &len), .v = tg_zeros(tg_dtype_of(p->t), 1, &len)};
        /* tg_zeros's references belong to an open scope, if any: keep our own */
        if (s->m)
            tg_retain(s->m);
        if (s->v)
            tg_retain(s->v);
        if (!s->m || !s->v)
            return -1;
    }
    return 0;
}

tg_dist_adamw *tg_dist_adamw_new(tg_dist *d, double lr, double beta1, double beta2,
                                 double eps, double weight_decay)
{
    if (!d)
        return tg_fail(TG_ERR_NULL, "tg_dist_adamw_new: d is NULL");
    if (!d->zero1)
        return tg_fail(TG_ERR_STATE, "tg_dist_adamw_new: d was made without zero1 (its "
                                      "gradients are not reduce-scattered)");
    if (check_hyper("learning rate", lr, false) < 0 || check_hyper("beta1", beta1, true) < 0 ||
        check_hyper("beta2", beta2, true) < 0 || check_hyper("eps", eps, false) < 0 ||
        check_hyper("weight_decay", weight_decay, false) < 0)
        return NULL;
    tg_dist_adamw *o = calloc(1, sizeof *o);
    if (!o)
        return tg_fail(TG_ERR_NOMEM, "tg_dist_adamw_new: out of memory");
    *o = (tg_dist_adamw){.d = d, .lr = lr, .beta1 = beta1, .beta2 = beta2, .eps = eps,
                         .weight_decay = weight_decay};
    tg_scope_begin();
    int rc = make_slices(o);
    tg_scope_end();
    if (rc < 0) {
        tg_dist_adamw_free(o);
        return tg_fail(TG_ERR_NOMEM, "tg_dist_adamw_new: out of memory for the moments of "
                                      "%d parameters", d->n);
    }
    return o;
}

void tg_dist_adamw_free(tg_dist_adamw *o)
{
    if (!o)
        return;
    for (int i = 0; o->slices && i < o->n; i++) {
        tg_release(o->slices[i].m);
        tg_release(o->slices[i].v);
    }
    free(o->slices);
    free(o->jobs);
    free(o->param_steps);
    free(o);
}

/* The update of slice s at the parameter's step t, as tg_adamw's. */
static tg_update_coefs coefs(const tg_dist_adamw *o, double t)
{
    return (tg_update_coefs){.decay = 1 - o->lr * o->weight_decay, .beta1 = o->beta1,
                             .beta2 = o->beta2, .eps = o->eps,
                             .step_size = o->lr / (1 - pow(o->beta1, t)),
                             .bc2_sqrt = sqrt(1 - pow(o->beta2, t))};
}

static int update_shard(tg_dist_adamw *o)
{
    tg_dist *d = o->d;
    int rc = 0;
    tg_scope_begin(); /* holds the views */
    for (int k = 0; k < o->n && rc == 0; k++) {
        const shard_slice *s = &o->slices[k];
        const dist_param *p = &d->params[s->param];
        tg_tensor *pv = tg__dist_slice(p->t, s->lo, s->len);
        tg_tensor *gv = tg__dist_slice(tg_grad(p->t), s->lo, s->len);
        if (!pv || !gv)
            rc = -1;
        o->jobs[k] = (tg_param_update){.param = pv, .grad = gv, .m = s->m, .v = s->v,
                                       .rule = TG_UPDATE_ADAM,
                                       .c = coefs(o, (double)(o->param_steps[s->param] + 1))};
    }
    if (rc == 0)
        rc = tg_update_params(o->jobs, o->n);
    tg_scope_end();
    return rc;
}

int tg_dist_adamw_step(tg_dist_adamw *o)
{
    if (!o) {
        tg_fail(TG_ERR_NULL, "tg_dist_adamw_step: o is NULL");
        return -1;
    }
    tg_dist *d = o->d;
    int missing = -1;
    tg_scope_begin();
    for (int i = 0; i < d->n && missing < 0; i++) {
        const tg_tensor *g = tg_grad(d->params[i].t);
        if (!g || tg_dtype_of(g) != tg_dtype_of(d->params[i].t) || !tg_is_contiguous(g))
            missing = i;
    }
    tg_scope_end();
    if (missing >= 0)
        tg_fail(TG_ERR_STATE, "tg_dist_adamw_step: parameter %d (\"%s\") has no gradient from "
                               "tg_dist_backward", missing, d->params[missing].name);
    bool ok = missing < 0 && update_shard(o) == 0;
    int bad = tg__dist_first_failed(d->comm, d->rank, ok);
    if (bad >= 0) {
        if (ok)
            tg_fail(TG_ERR_STATE, "tg_dist_adamw_step: the step failed on rank %d", bad);
        return -1; /* no rank gathers: all keep their parameters as they were */
    }
    if (tg__dist_gather_params(d) < 0)
        return -1;
    o->steps++;
    for (int i = 0; i < d->n; i++)
        o->param_steps[i]++;
    return 0;
}

/* Every rank's segment of each bucket, taken from src(param) over the part
 * of the parameter in the rank's shard, gathered into the bucket; then
 * written back by put(param, bucket buffer) for each parameter. */
int tg__dist_gather_params(tg_dist *d)
{
    for (int k = 0; k < d->n_buckets; k++) {
        dist_bucket *b = &d->buckets[k];
        size_t es = tg_dtype_size(b->dtype);
        for (int i = b->first; i <= b->last; i++) {
            const dist_param *p = &d->params[i];
            int64_t lo, hi;
            tg__dist_shard_part(d, p, d->rank, &lo, &hi);
            if (p->bucket == k && hi > lo)
                memcpy((char *)b->buf + (size_t)(p->at + lo) * es,
                       (const char *)tg_data_const(p->t) + (size_t)lo * es, (size_t)(hi - lo) * es);
        }
        if (MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, b->buf, b->counts, b->displs,
                           tg__mpi_type(b->dtype), d->gather) != MPI_SUCCESS) {
            tg_fail(TG_ERR_VALUE, "tg_dist_adamw_step: MPI_Allgatherv failed");
            return -1;
        }
        for (int i = b->first; i <= b->last; i++)
            if (d->params[i].bucket == k)
                memcpy(tg_data(d->params[i].t), (char *)b->buf + (size_t)d->params[i].at * es,
                       (size_t)d->params[i].numel * es);
    }
    return 0;
}

void tg_dist_adamw_set_lr(tg_dist_adamw *o, double lr)
{
    if (!o) {
        tg_fail(TG_ERR_NULL, "tg_dist_adamw_set_lr: o is NULL");
        return;
    }
    if (!(lr >= 0)) {
        tg_fail(TG_ERR_VALUE, "tg_dist_adamw_set_lr: invalid learning rate %g (need value >= 0)",
                 lr);
        return;
    }
    o->lr = lr;
}

int64_t tg_dist_adamw_steps(const tg_dist_adamw *o) { return o ? o->steps : -1; }

int64_t tg_dist_adamw_state_bytes(const tg_dist_adamw *o)
{
    if (!o)
        return -1;
    int64_t bytes = 0;
    for (int k = 0; k < o->n; k++)
        bytes += 2 * o->slices[k].len * (int64_t)tg_dtype_size(tg_dtype_of(o->slices[k].m));
    return bytes;
}

/* ---- state: gathered on save, split on load ------------------------------------ */

/* "<what>.<name>", or NULL when out of memory (the caller frees it). */
static char *state_name(const char *what, const char *name)
{
    size_t n = strlen(what) + strlen(name) + 2;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s.%s", what, name);
    return s;
}

/* Collective: every parameter's whole moment (which 0: exp_avg, 1:
 * exp_avg_sq) into full[i], new tensors of the parameter's shape and dtype,
 * from the slices the ranks hold, bucket by bucket. */
static int gather_moments(const tg_dist_adamw *o, int which, tg_tensor **full)
{
    tg_dist *d = o->d;
    int rc = 0;
    for (int k = 0; k < d->n_buckets; k++) {
        dist_bucket *b = &d->buckets[k];
        size_t es = tg_dtype_size(b->dtype);
        for (int j = 0; j < o->n; j++) {
            const shard_slice *s = &o->slices[j];
            const dist_param *p = &d->params[s->param];
            if (p->bucket == k)
                memcpy((char *)b->buf + (size_t)(p->at + s->lo) * es,
                       tg_data_const(which ? s->v : s->m), (size_t)s->len * es);
        }
        if (MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, b->buf, b->counts, b->displs,
                           tg__mpi_type(b->dtype), d->gather) != MPI_SUCCESS)
            rc = -1;
        for (int i = b->first; full && i <= b->last; i++) {
            const dist_param *p = &d->params[i];
            if (p->bucket != k)
                continue;
            full[i] = tg_from_data(tg_dtype_of(p->t), tg_ndim(p->t), tg_shape(p->t),
                                   (char *)b->buf + (size_t)p->at * es);
            if (!full[i])
                rc = -1;
            tg_retain(full[i]); /* ours, past the open scope */
        }
    }
    return full ? rc : -1;
}

static int add_step(tg_params *out, const char *name, int64_t steps)
{
    tg_scope_begin();
    int rc = tg_params_add(out, NULL, name, tg_scalar(TG_INT64, (double)steps));
    tg_scope_end();
    return rc;
}

/* Adds "step", then per parameter "step.<name>", "exp_avg.<name>" and
 * "exp_avg_sq.<name>", in tg_optim_state's order. */
static int add_state(const tg_dist_adamw *o, tg_params *out, tg_tensor *const *m,
                     tg_tensor *const *v)
{
    if (add_step(out, "step", o->steps) < 0)
        return -1;
    for (int i = 0; i < o->d->n; i++) {
        const char *name = o->d->params[i].name;
        char *ns = state_name("step", name), *nm = state_name("exp_avg", name),
             *nv = state_name("exp_avg_sq", name);
        int rc = ns && nm && nv ? 0 : -1;
        if (rc == 0)
            rc = add_step(out, ns, o->param_steps[i]);
        if (rc == 0)
            rc = tg_params_add(out, NULL, nm, m[i]);
        if (rc == 0)
            rc = tg_params_add(out, NULL, nv, v[i]);
        free(ns);
        free(nm);
        free(nv);
        if (rc < 0)
            return -1;
    }
    return 0;
}

int tg_dist_adamw_state(const tg_dist_adamw *o, tg_params *out)
{
    if (!o || !out) {
        tg_fail(TG_ERR_NULL, "tg_dist_adamw_state: %s is NULL", o ? "out" : "o");
        return -1;
    }
    tg_dist *d = o->d;
    bool ok = !tg_params_find(out, "step");
    if (!ok)
        tg_fail(TG_ERR_VALUE, "tg_dist_adamw_state: out already holds 'step'");
    if (tg__dist_first_failed(d->comm, d->rank, ok) >= 0) {
        if (ok)
            tg_fail(TG_ERR_VALUE, "tg_dist_adamw_state: another rank's out already holds 'step'");
        return -1;
    }
    tg_tensor **full = calloc(2 * (size_t)d->n, sizeof *full);
    int start = out->count, rc = full ? 0 : -1;
    tg_scope_begin();
    /* every rank takes part in both gathers, whatever happened before */
    for (int which = 0; which < 2; which++)
        if (gather_moments(o, which, full ? full + which * d->n : NULL) < 0)
            rc = -1;
    tg_scope_end();
    if (rc == 0 && add_state(o, out, full, full + d->n) < 0)
        rc = -1;
    for (int i = 0; full && i < 2 * d->n; i++)
        tg_release(full[i]);
    free(full);
    if (rc < 0) {
        tg_params_truncate(out, start);
        tg_fail(TG_ERR_NOMEM, "tg_dist_adamw_state: out of memory (or MPI failed) gathering "
                               "the state of %d parameters", d->n);
    }
    return rc;
}

/* A whole number >= 0 from a one-element tensor. */
static int read_step(const tg_params *state, const char *name, int64_t *steps)
{
    const tg_tensor *t = tg_params_find(state, name);
    double v = t && tg_numel(t) == 1 ? tg_item(t) : -1;
    if (!(v >= 0 && v <= 9e15 && v == floor(v))) {
        tg_fail(TG_ERR_VALUE, "tg_dist_adamw_load_state: %s '%s'",
                 t ? "not a step count:" : "the state has no", name);
        return -1;
    }
    *steps = (int64_t)v;
    return 0;
}

/* The moment called what.<name> of parameter p: float, of p's shape. */
static const tg_tensor *find_moment(const tg_params *state, const char *what, const dist_param *p)
{
    char *name = state_name(what, p->name);
    const tg_tensor *t = name ? tg_params_find(state, name) : NULL;
    if (!name)
        tg_fail(TG_ERR_NOMEM, "tg_dist_adamw_load_state: out of memory");
    else if (!t)
        tg_fail(TG_ERR_VALUE, "tg_dist_adamw_load_state: the state has no '%s'", name);
    else if (!tg_dtype_is_float(tg_dtype_of(t)))
        tg_fail(TG_ERR_DTYPE, "tg_dist_adamw_load_state: '%s' is %s", name,
                tg_dtype_name(tg_dtype_of(t))), t = NULL;
    else if (tg_ndim(t) != tg_ndim(p->t) ||
             memcmp(tg_shape(t), tg_shape(p->t), (size_t)tg_ndim(t) * sizeof(int64_t)))
        tg_fail(TG_ERR_SHAPE, "tg_dist_adamw_load_state: '%s' has shape %s, the parameter %s",
                 name, TG_SHAPE_STRING(t), TG_SHAPE_STRING(p->t)), t = NULL;
    free(name);
    return t;
}

/* This rank's slices of every moment, read from state into new tensors
 * (moments[2 k], moments[2 k + 1] for slice k), and the step counts. */
static int read_state(const tg_dist_adamw *o, const tg_params *state, int64_t *steps,
                      int64_t *param_steps, tg_tensor **moments)
{
    const tg_dist *d = o->d;
    if (read_step(state, "step", steps) < 0)
        return -1;
    for (int i = 0; i < d->n; i++) {
        char *name = state_name("step", d->params[i].name);
        int rc = name ? read_step(state, name, &param_steps[i]) : -1;
        free(name);
        if (rc < 0 || !find_moment(state, "exp_avg", &d->params[i]) ||
            !find_moment(state, "exp_avg_sq", &d->params[i]))
            return -1;
    }
    for (int k = 0; k < o->n; k++) {
        const shard_slice *s = &o->slices[k];
        const dist_param *p = &d->params[s->param];
        for (int which = 0; which < 2; which++) {
            const tg_tensor *full = find_moment(state, which ? "exp_avg_sq" : "exp_avg", p);
            /* a contiguous copy in the parameter's dtype, then its slice */
            tg_tensor *c = tg_contiguous(tg_to_dtype(full, tg_dtype_of(p->t)));
            moments[2 * k + which] = c ? tg__dist_slice(c, s->lo, s->len) : NULL;
            if (!moments[2 * k + which])
                return -1;
        }
    }
    return 0;
}

int tg_dist_adamw_load_state(tg_dist_adamw *o, const tg_params *state)
{
    if (!o || !state) {
        tg_fail(TG_ERR_NULL, "tg_dist_adamw_load_state: %s is NULL", o ? "state" : "o");
        return -1;
    }
    tg_dist *d = o->d;
    int64_t steps = 0, *param_steps = calloc((size_t)d->n, sizeof *param_steps);
    tg_tensor **moments = calloc(2 * (size_t)(o->n ? o->n : 1), sizeof *moments);
    tg_scope_begin(); /* holds the slices read */
    bool ok = param_steps && moments && read_state(o, state, &steps, param_steps, moments) == 0;
    if (!param_steps || !moments)
        tg_fail(TG_ERR_NOMEM, "tg_dist_adamw_load_state: out of memory");
    int bad = tg__dist_first_failed(d->comm, d->rank, ok);
    if (bad < 0) { /* every rank can load: all do */
        o->steps = steps;
        memcpy(o->param_steps, param_steps, (size_t)d->n * sizeof *param_steps);
        for (int k = 0; k < o->n; k++) {
            size_t bytes = (size_t)o->slices[k].len * tg_dtype_size(tg_dtype_of(o->slices[k].m));
            memcpy(tg_data(o->slices[k].m), tg_data_const(moments[2 * k]), bytes);
            memcpy(tg_data(o->slices[k].v), tg_data_const(moments[2 * k + 1]), bytes);
        }
    } else if (ok) {
        tg_fail(TG_ERR_VALUE, "tg_dist_adamw_load_state: rank %d could not load the state", bad);
    }
    tg_scope_end();
    free(param_steps);
    free(moments);
    return bad < 0 ? 0 : -1;
}
