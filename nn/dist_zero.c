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

/* [lo, hi) of parameter p's elements inside rank r's shard (hi <= lo: none). */
static void shard_part(const tg_dist *d, const dist_param *p, int r, int64_t *lo, int64_t *hi)
{
    *lo = d->shard[r] - p->flat;
    *hi = d->shard[r + 1] - p->flat;
    *lo = *lo < 0 ? 0 : *lo;
    *hi = *hi > p->numel ? p->numel : *hi;
}

/* A 1-D view of elements [lo, lo + len) of the contiguous t. */
static tg_tensor *flat_view(const tg_tensor *t, int64_t lo, int64_t len)
{
    int64_t one = 1;
    return tg__view(t, 1, &len, &one, t->offset + lo);
}

static int check_hyper(const char *what, double value, bool below_one)
{
    if (value >= 0 && (!below_one || value < 1)) /* NaN fails too */
        return 0;
    tg__fail(TG_ERR_VALUE, "tg_dist_adamw_new: invalid %s %g (need %s)", what, value,
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
        shard_part(d, p, d->rank, &lo, &hi);
        if (hi <= lo)
            continue;
        shard_slice *s = &o->slices[o->n++];
        int64_t len = hi - lo;
        *s = (shard_slice){.param = i, .lo = lo, .len = len,
                           .m = tg_zeros(p->t->dtype, 1, &len), .v = tg_zeros(p->t->dtype, 1, &len)};
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
        return tg__fail(TG_ERR_NULL, "tg_dist_adamw_new: d is NULL");
    if (!d->zero1)
        return tg__fail(TG_ERR_STATE, "tg_dist_adamw_new: d was made without zero1 (its "
                                      "gradients are not reduce-scattered)");
    if (check_hyper("learning rate", lr, false) < 0 || check_hyper("beta1", beta1, true) < 0 ||
        check_hyper("beta2", beta2, true) < 0 || check_hyper("eps", eps, false) < 0 ||
        check_hyper("weight_decay", weight_decay, false) < 0)
        return NULL;
    tg_dist_adamw *o = calloc(1, sizeof *o);
    if (!o)
        return tg__fail(TG_ERR_NOMEM, "tg_dist_adamw_new: out of memory");
    *o = (tg_dist_adamw){.d = d, .lr = lr, .beta1 = beta1, .beta2 = beta2, .eps = eps,
                         .weight_decay = weight_decay};
    tg_scope_begin();
    int rc = make_slices(o);
    tg_scope_end();
    if (rc < 0) {
        tg_dist_adamw_free(o);
        return tg__fail(TG_ERR_NOMEM, "tg_dist_adamw_new: out of memory for the moments of "
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
        tg_tensor *pv = tg__ret(flat_view(p->t, s->lo, s->len));
        tg_tensor *gv = tg__ret(flat_view(p->t->grad, s->lo, s->len));
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
        tg__fail(TG_ERR_NULL, "tg_dist_adamw_step: o is NULL");
        return -1;
    }
    tg_dist *d = o->d;
    int missing = -1;
    for (int i = 0; i < d->n && missing < 0; i++) {
        const tg_tensor *g = d->params[i].t->grad;
        if (!g || g->dtype != d->params[i].t->dtype || !tg_is_contiguous(g))
            missing = i;
    }
    if (missing >= 0)
        tg__fail(TG_ERR_STATE, "tg_dist_adamw_step: parameter %d (\"%s\") has no gradient from "
                               "tg_dist_backward", missing, d->params[missing].name);
    bool ok = missing < 0 && update_shard(o) == 0;
    int bad = tg__dist_first_failed(d->comm, d->rank, ok);
    if (bad >= 0) {
        if (ok)
            tg__fail(TG_ERR_STATE, "tg_dist_adamw_step: the step failed on rank %d", bad);
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
            shard_part(d, p, d->rank, &lo, &hi);
            if (p->bucket == k && hi > lo)
                memcpy((char *)b->buf + (size_t)(p->at + lo) * es,
                       (const char *)tg_data_const(p->t) + (size_t)lo * es, (size_t)(hi - lo) * es);
        }
        if (MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, b->buf, b->counts, b->displs,
                           tg__mpi_type(b->dtype), d->gather) != MPI_SUCCESS) {
            tg__fail(TG_ERR_VALUE, "tg_dist_adamw_step: MPI_Allgatherv failed");
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
        tg__fail(TG_ERR_NULL, "tg_dist_adamw_set_lr: o is NULL");
        return;
    }
    if (!(lr >= 0)) {
        tg__fail(TG_ERR_VALUE, "tg_dist_adamw_set_lr: invalid learning rate %g (need value >= 0)",
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
        bytes += 2 * o->slices[k].len * (int64_t)tg_dtype_size(o->slices[k].m->dtype);
    return bytes;
}

int tg_dist_adamw_state(const tg_dist_adamw *o, tg_params *out)
{
    (void)o; (void)out;
    tg__fail(TG_ERR_STATE, "tg_dist_adamw_state: not yet");
    return -1;
}

int tg_dist_adamw_load_state(tg_dist_adamw *o, const tg_params *state)
{
    (void)o; (void)state;
    tg__fail(TG_ERR_STATE, "tg_dist_adamw_load_state: not yet");
    return -1;
}
