/* Data-parallel training over MPI (tensorgrad/dist.h): the context, the
 * parameter check across ranks, and gradients reduced in flat buckets whose
 * reduce the grad-ready hook starts while backward is still running. */
#include "dist_internal.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A bucket goes IDLE -> SCATTERING (its reduce-scatter is in flight) ->
 * GATHERING (plain data parallelism: the reduced segments are being
 * all-gathered) -> DONE. Reducing each element on exactly one rank, then
 * copying it, gives every rank the same bits whatever MPI's algorithms. */
enum { BUCKET_IDLE, BUCKET_SCATTERING, BUCKET_GATHERING, BUCKET_DONE };

#define DEFAULT_BUCKET_BYTES (4 << 20)

/* ---- agreeing across ranks --------------------------------------------- */

int tg__dist_first_failed(MPI_Comm comm, int rank, bool ok)
{
    int mine = ok ? INT_MAX : rank, first = INT_MAX;
    if (MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS)
        return rank;
    return first == INT_MAX ? -1 : first;
}

/* "name" float32 [2,3] */
static void describe(char *buf, size_t size, const char *name, const tg_tensor *t)
{
    snprintf(buf, size, "\"%s\" %s %s", name, tg_dtype_name(tg_dtype_of(t)),
             TG_SHAPE_STRING(t));
}

static uint64_t fnv(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t signature(const char *name, const tg_tensor *t)
{
    uint64_t h = fnv(0xcbf29ce484222325ull, name, strlen(name) + 1);
    tg_dtype dtype = tg_dtype_of(t);
    int ndim = tg_ndim(t);
    h = fnv(h, &dtype, sizeof dtype);
    h = fnv(h, &ndim, sizeof ndim);
    return fnv(h, tg_shape(t), (size_t)ndim * sizeof(int64_t));
}

/* Rank `from`'s description of its parameter i, on every rank. */
static void shared_description(MPI_Comm comm, int rank, int from, const tg_params *ps, int i,
                               char *buf, size_t size)
{
    if (rank == from)
        describe(buf, size, ps->names[i], ps->tensors[i]);
    MPI_Bcast(buf, (int)size, MPI_CHAR, from, comm);
    buf[size - 1] = '\0';
}

/* Collective: fails on every rank, naming the first difference, unless ps
 * lists the same names, dtypes and shapes in the same order everywhere. */
static int check_same_params(MPI_Comm comm, int rank, int size, const tg_params *ps)
{
    int *counts = malloc((size_t)size * sizeof *counts);
    int ok = counts && MPI_Allgather(&ps->count, 1, MPI_INT, counts, 1, MPI_INT, comm) ==
                       MPI_SUCCESS;
    int m = ps->count;
    for (int r = 0; ok && r < size; r++)
        m = counts[r] < m ? counts[r] : m;
    uint64_t *mine = ok ? malloc((size_t)(m ? m : 1) * sizeof *mine) : NULL;
    uint64_t *all = ok ? malloc((size_t)size * (size_t)(m ? m : 1) * sizeof *all) : NULL;
    for (int i = 0; mine && i < m; i++)
        mine[i] = signature(ps->names[i], ps->tensors[i]);
    ok = mine && all && MPI_Allgather(mine, m, MPI_UINT64_T, all, m, MPI_UINT64_T, comm) ==
                        MPI_SUCCESS;
    int at = -1, who = -1;
    for (int i = 0; ok && at < 0 && i < m; i++)
        for (int r = 1; r < size && at < 0; r++)
            if (all[(size_t)r * (size_t)m + (size_t)i] != all[i])
                at = i, who = r;
    int rc = ok ? 0 : -1;
    if (!ok) {
        tg_fail(TG_ERR_NOMEM, "tg_dist_new: out of memory comparing %d parameters", ps->count);
    } else if (at >= 0) {
        char a[256], b[256];
        shared_description(comm, rank, 0, ps, at, a, sizeof a);
        shared_description(comm, rank, who, ps, at, b, sizeof b);
        tg_fail(TG_ERR_VALUE, "tg_dist_new: parameter %d differs across ranks: rank 0 has %s, "
                               "rank %d has %s", at, a, who, b);
        rc = -1;
    } else {
        for (int r = 1; r < size && rc == 0; r++)
            if (counts[r] != counts[0]) {
                tg_fail(TG_ERR_VALUE, "tg_dist_new: the parameter lists differ across ranks: "
                                       "rank 0 has %d parameters, rank %d has %d (the first %d "
                                       "agree)", counts[0], r, counts[r], m);
                rc = -1;
            }
    }
    free(counts);
    free(mine);
    free(all);
    return rc;
}

/* This rank's own checks of ps, before anything collective. */
static int check_local(const tg_params *ps, const tg_dist_options *o)
{
    if (!ps) {
        tg_fail(TG_ERR_NULL, "tg_dist_new: ps is NULL");
        return -1;
    }
    if (ps->count == 0 || o->bucket_bytes < 0) {
        tg_fail(TG_ERR_VALUE, "tg_dist_new: %s", ps->count == 0 ? "ps is empty"
                                                                 : "bucket_bytes is negative");
        return -1;
    }
    for (int i = 0; i < ps->count; i++) {
        const tg_tensor *t = ps->tensors[i];
        if (!t) {
            tg_fail(TG_ERR_NULL, "tg_dist_new: parameter %d (\"%s\") is NULL", i, ps->names[i]);
            return -1;
        }
        if (tg_check_arg(t, true, "tg_dist_new", ps->names[i], TG__CALLER) < 0)
            return -1;
        if (!tg_dtype_is_float(tg_dtype_of(t)) || !tg_is_leaf(t)) {
            tg_fail(tg_is_leaf(t) ? TG_ERR_DTYPE : TG_ERR_STATE, "tg_dist_new: parameter %d "
                    "(\"%s\") is %s", i, ps->names[i],
                    tg_is_leaf(t) ? tg_dtype_name(tg_dtype_of(t)) : "not a leaf");
            return -1;
        }
        if (tg_numel(t) > INT_MAX || (o->zero1 && !tg_is_contiguous(t))) {
            tg_fail(TG_ERR_VALUE, "tg_dist_new: parameter %d (\"%s\" %s) is %s", i,
                     ps->names[i], TG_SHAPE_STRING(t),
                     tg_numel(t) > INT_MAX ? "too large for one MPI message"
                                           : "not contiguous (zero1 shards it in place)");
            return -1;
        }
        for (int j = 0; j < i; j++)
            if (ps->tensors[j] == t) {
                tg_fail(TG_ERR_VALUE, "tg_dist_new: parameters %d and %d are the same tensor",
                         j, i);
                return -1;
            }
    }
    return 0;
}

/* ---- planning buckets ---------------------------------------------------- */

/* Buckets in reverse parameter order, one dtype each, up to cap elements'
 * bytes (a larger parameter alone); each lists its parameters upwards. */
static int plan_buckets(tg_dist *d, int64_t cap_bytes)
{
    d->buckets = calloc((size_t)d->n, sizeof *d->buckets);
    if (!d->buckets)
        return -1;
    int open[2] = {-1, -1}; /* the bucket being filled, per dtype */
    for (int i = d->n - 1; i >= 0; i--) {
        dist_param *p = &d->params[i];
        int k = tg_dtype_of(p->t) == TG_FLOAT32 ? 0 : 1;
        int64_t bytes = p->numel * (int64_t)tg_dtype_size(tg_dtype_of(p->t));
        dist_bucket *b = open[k] >= 0 ? &d->buckets[open[k]] : NULL;
        if (!b || b->numel * (int64_t)tg_dtype_size(b->dtype) + bytes > cap_bytes ||
            b->numel + p->numel > INT_MAX) {
            open[k] = d->n_buckets++;
            b = &d->buckets[open[k]];
            *b = (dist_bucket){.dtype = tg_dtype_of(p->t), .first = i, .last = i};
        }
        b->first = i;
        b->numel += p->numel;
        p->bucket = open[k];
    }
    for (int k = 0; k < d->n_buckets; k++) {
        dist_bucket *b = &d->buckets[k];
        int64_t at = 0;
        for (int i = b->first; i <= b->last; i++)
            if (d->params[i].bucket == k) {
                d->params[i].at = at;
                at += d->params[i].numel;
            }
        b->buf = malloc((size_t)(b->numel ? b->numel : 1) * tg_dtype_size(b->dtype));
        b->counts = malloc((size_t)d->size * sizeof *b->counts);
        b->displs = malloc((size_t)d->size * sizeof *b->displs);
        if (!b->buf || !b->counts || !b->displs)
            return -1;
    }
    return 0;
}

/* Which part of each bucket each rank reduces: with zero1 its shard of the
 * flat parameter space; otherwise an even split. */
static void plan_segments(tg_dist *d)
{
    int64_t base = d->total / d->size, extra = d->total % d->size;
    for (int r = 0; r <= d->size; r++)
        d->shard[r] = r * base + (r < extra ? r : extra);
    for (int k = 0; k < d->n_buckets; k++) {
        dist_bucket *b = &d->buckets[k];
        int64_t displ = 0;
        for (int r = 0; r < d->size; r++) {
            int64_t c = b->numel / d->size + (r < b->numel % d->size);
            if (d->zero1) {
                c = 0;
                for (int i = b->first; i <= b->last; i++) {
                    const dist_param *p = &d->params[i];
                    int64_t lo = p->flat > d->shard[r] ? p->flat : d->shard[r];
                    int64_t hi = p->flat + p->numel < d->shard[r + 1] ? p->flat + p->numel
                                                                       : d->shard[r + 1];
                    if (p->bucket == k && hi > lo)
                        c += hi - lo;
                }
            }
            b->counts[r] = (int)c;
            b->displs[r] = (int)displ;
            displ += c;
        }
    }
}

static void on_grad_ready(tg_tensor *leaf, void *user);

static int setup(tg_dist *d, const tg_params *ps, const tg_dist_options *o)
{
    d->params = calloc((size_t)ps->count, sizeof *d->params);
    d->shard = calloc((size_t)d->size + 1, sizeof *d->shard);
    if (!d->params || !d->shard)
        return -1;
    d->n = ps->count;
    for (int i = 0; i < d->n; i++) {
        d->params[i] = (dist_param){.d = d, .t = ps->tensors[i], .name = ps->names[i],
                                    .numel = tg_numel(ps->tensors[i]), .flat = d->total};
        d->total += d->params[i].numel;
    }
    if (plan_buckets(d, o->bucket_bytes ? o->bucket_bytes : DEFAULT_BUCKET_BYTES) < 0)
        return -1;
    plan_segments(d);
    for (int i = 0; i < d->n; i++)
        tg_set_grad_ready_hook(d->params[i].t, on_grad_ready, &d->params[i]);
    return 0;
}

tg_dist *tg_dist_new(MPI_Comm comm, const tg_params *ps, const tg_dist_options *opts)
{
    tg_dist_options o = opts ? *opts : (tg_dist_options){0};
    int rank = 0, size = 0;
    if (comm == MPI_COMM_NULL || MPI_Comm_rank(comm, &rank) != MPI_SUCCESS ||
        MPI_Comm_size(comm, &size) != MPI_SUCCESS)
        return tg_fail(TG_ERR_VALUE, "tg_dist_new: comm is not a usable communicator");
    bool ok = check_local(ps, &o) == 0;
    int bad = tg__dist_first_failed(comm, rank, ok);
    if (bad >= 0) {
        if (ok)
            tg_fail(TG_ERR_VALUE, "tg_dist_new: rank %d refused its parameters", bad);
        return NULL;
    }
    if (check_same_params(comm, rank, size, ps) < 0)
        return NULL;
    tg_dist *d = calloc(1, sizeof *d);
    if (d) {
        *d = (tg_dist){.comm = MPI_COMM_NULL, .gather = MPI_COMM_NULL, .rank = rank,
                       .size = size, .overlap = !o.no_overlap, .zero1 = o.zero1};
    }
    ok = d && MPI_Comm_dup(comm, &d->comm) == MPI_SUCCESS &&
         MPI_Comm_dup(comm, &d->gather) == MPI_SUCCESS && setup(d, ps, &o) == 0;
    if (tg__dist_first_failed(comm, rank, ok) >= 0) {
        tg_dist_free(d);
        return tg_fail(TG_ERR_NOMEM, "tg_dist_new: out of memory (or MPI failed) setting up "
                                      "%d parameters", ps->count);
    }
    return d;
}

int tg_dist_rank(const tg_dist *d) { return d ? d->rank : -1; }

int tg_dist_world_size(const tg_dist *d) { return d ? d->size : -1; }

void tg_dist_free(tg_dist *d)
{
    if (!d)
        return;
    for (int i = 0; d->params && i < d->n; i++)
        tg_set_grad_ready_hook(d->params[i].t, NULL, NULL);
    for (int k = 0; d->buckets && k < d->n_buckets; k++) {
        free(d->buckets[k].buf);
        free(d->buckets[k].counts);
        free(d->buckets[k].displs);
    }
    if (d->comm != MPI_COMM_NULL)
        MPI_Comm_free(&d->comm);
    if (d->gather != MPI_COMM_NULL)
        MPI_Comm_free(&d->gather);
    free(d->buckets);
    free(d->params);
    free(d->shard);
    free(d);
}

/* ---- the reduce, bucket by bucket ----------------------------------------- */

static void scatter_start(tg_dist *d, dist_bucket *b)
{
    b->t_start = MPI_Wtime();
    b->early = d->in_backward;
    b->state = BUCKET_SCATTERING;
    MPI_Ireduce_scatter(MPI_IN_PLACE, b->buf, b->counts, tg__mpi_type(b->dtype), MPI_SUM,
                        d->comm, &b->scatter);
}

/* The reduce-scatter left this rank's segment summed at the front of buf:
 * move it to its place as the mean, then (plain) share it with every rank. */
static void scatter_done(tg_dist *d, dist_bucket *b)
{
    size_t es = tg_dtype_size(b->dtype);
    int c = b->counts[d->rank];
    char *seg = (char *)b->buf + (size_t)b->displs[d->rank] * es;
    memmove(seg, b->buf, (size_t)c * es);
    if (b->dtype == TG_FLOAT32) {
        float n = (float)d->size, *x = (float *)(void *)seg;
        for (int i = 0; i < c; i++)
            x[i] /= n;
    } else {
        double n = d->size, *x = (double *)(void *)seg;
        for (int i = 0; i < c; i++)
            x[i] /= n;
    }
    b->state = d->zero1 ? BUCKET_DONE : BUCKET_GATHERING;
    if (!d->zero1)
        MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, b->buf, b->counts, b->displs,
                        tg__mpi_type(b->dtype), d->gather, &b->gather);
}

/* Whether request r has completed: waits for it when wait, else only asks. */
static bool finished(MPI_Request *r, bool wait)
{
    int done = 1;
    if (wait)
        MPI_Wait(r, MPI_STATUS_IGNORE);
    else
        MPI_Test(r, &done, MPI_STATUS_IGNORE);
    return done != 0;
}

/* Advances what can advance, in bucket order on every rank (collectives
 * start in the same order everywhere). wait: block until all is done. */
static void progress(tg_dist *d, bool wait)
{
    while (d->next_scatter < d->n_buckets && d->buckets[d->next_scatter].pending == 0 &&
           (wait || d->overlap))
        scatter_start(d, &d->buckets[d->next_scatter++]);
    while (d->next_gather < d->next_scatter) {
        dist_bucket *b = &d->buckets[d->next_gather];
        if (b->state == BUCKET_SCATTERING) {
            if (!finished(&b->scatter, wait))
                break;
            scatter_done(d, b);
        }
        if (b->state == BUCKET_GATHERING) {
            if (!finished(&b->gather, wait))
                break;
            b->state = BUCKET_DONE;
        }
        b->t_done = MPI_Wtime();
        d->next_gather++;
    }
}

/* Copies p's gradient (zeros when it has none) into its bucket. */
static void pack(dist_param *p)
{
    tg_dist *d = p->d;
    dist_bucket *b = &d->buckets[p->bucket];
    size_t es = tg_dtype_size(b->dtype);
    char *dst = (char *)b->buf + (size_t)p->at * es;
    tg_scope_begin();
    tg_tensor *g = tg_grad(p->t);
    if (!g || tg_copy_to(g, b->dtype, dst, p->numel) < 0)
        memset(dst, 0, (size_t)p->numel * es);
    tg_scope_end();
    p->ready = true;
    b->pending--;
}

static void on_grad_ready(tg_tensor *leaf, void *user)
{
    dist_param *p = user;
    (void)leaf;
    if (!p->d->in_backward || p->ready)
        return;
    pack(p);
    progress(p->d, false);
}

/* p's .grad, held by the open scope; a parameter that requires grad but has
 * none yet gets zeros (the gradient of 0 * sum(p)), so that it can take the
 * other ranks' mean. NULL for a parameter that does not require grad. */
static tg_tensor *grad_or_zeros(dist_param *p)
{
    tg_tensor *g = tg_grad(p->t);
    if (g || !tg_requires_grad(p->t))
        return g;
    bool was = tg_set_grad_enabled(true);
    tg_backward(tg_mul_scalar(tg_sum(p->t, NULL, 0, false), 0.0), NULL);
    tg_set_grad_enabled(was);
    return tg_grad(p->t);
}

/* Writes elements [lo, hi) of the bucket's copy of p into p's gradient g. */
static int write_grad(dist_param *p, tg_tensor *g, int64_t lo, int64_t hi)
{
    const dist_bucket *b = &p->d->buckets[p->bucket];
    size_t es = tg_dtype_size(b->dtype);
    const char *src = (const char *)b->buf + (size_t)p->at * es;
    if (tg_dtype_of(g) != b->dtype || tg_numel(g) != p->numel) {
        tg_fail(TG_ERR_STATE, "tg_dist_backward: the gradient of \"%s\" is %s %s, not %s %s",
                p->name, tg_dtype_name(tg_dtype_of(g)), TG_SHAPE_STRING(g),
                tg_dtype_name(b->dtype), TG_SHAPE_STRING(p->t));
        return -1;
    }
    if (tg_is_contiguous(g)) { /* tg_data marks the write (a new version) */
        memcpy((char *)tg_data(g) + (size_t)lo * es, src + (size_t)lo * es,
               (size_t)(hi - lo) * es);
        return 0;
    }
    /* any other layout: the whole gradient, with [lo, hi) replaced */
    char *all = malloc((size_t)p->numel * es);
    int rc = all && tg_copy_to(g, b->dtype, all, p->numel) == 0 ? 0 : -1;
    if (rc == 0) {
        memcpy(all + (size_t)lo * es, src + (size_t)lo * es, (size_t)(hi - lo) * es);
        rc = tg_copy_from(g, b->dtype, all, p->numel);
    }
    free(all);
    return rc;
}

/* [lo, hi) of parameter p's elements inside rank r's shard (hi <= lo: none). */
void tg__dist_shard_part(const tg_dist *d, const dist_param *p, int r, int64_t *lo, int64_t *hi)
{
    *lo = d->shard[r] - p->flat;
    *hi = d->shard[r + 1] - p->flat;
    *lo = *lo < 0 ? 0 : *lo;
    *hi = *hi > p->numel ? p->numel : *hi;
}

/* Writes the reduced gradients back into .grad: everything (plain), or the
 * part of this rank's shard (zero1). */
static int unpack(tg_dist *d)
{
    int rc = 0;
    tg_scope_begin();
    for (int i = 0; i < d->n && rc == 0; i++) {
        dist_param *p = &d->params[i];
        tg_tensor *g = grad_or_zeros(p);
        int64_t lo = 0, hi = p->numel;
        if (d->zero1)
            tg__dist_shard_part(d, p, d->rank, &lo, &hi);
        if (g && hi > lo)
            rc = write_grad(p, g, lo, hi);
    }
    tg_scope_end();
    return rc;
}

static void begin(tg_dist *d)
{
    d->in_backward = true;
    d->next_scatter = d->next_gather = 0;
    d->stats = (tg_dist_stats){0};
    for (int k = 0; k < d->n_buckets; k++) {
        dist_bucket *b = &d->buckets[k];
        b->pending = 0;
        b->state = BUCKET_IDLE;
        b->early = false;
    }
    for (int i = 0; i < d->n; i++) {
        d->params[i].ready = false;
        d->buckets[d->params[i].bucket].pending++;
    }
}

int tg_dist_backward(tg_dist *d, tg_tensor *loss)
{
    if (!d) {
        tg_fail(TG_ERR_NULL, "tg_dist_backward: d is NULL");
        return -1;
    }
    begin(d);
    int rc = tg_backward(loss, NULL);
    double compute_end = MPI_Wtime();
    d->in_backward = false;
    /* parameters backward did not reach (or a failed backward left) */
    for (int i = 0; i < d->n; i++)
        if (!d->params[i].ready)
            pack(&d->params[i]);
    progress(d, true);
    d->stats.exposed_seconds = MPI_Wtime() - compute_end;
    for (int k = 0; k < d->n_buckets; k++) {
        const dist_bucket *b = &d->buckets[k];
        d->stats.comm_seconds += b->t_done - b->t_start;
        d->stats.bytes += b->numel * (int64_t)tg_dtype_size(b->dtype);
    }
    d->stats.buckets = d->n_buckets;
    if (rc == 0 && unpack(d) < 0)
        rc = -1;
    int bad = tg__dist_first_failed(d->comm, d->rank, rc == 0);
    if (bad >= 0 && rc == 0)
        tg_fail(TG_ERR_STATE, "tg_dist_backward: backward failed on rank %d", bad);
    return bad >= 0 ? -1 : 0;
}

int tg__dist_early_buckets(const tg_dist *d)
{
    int n = 0;
    for (int k = 0; d && k < d->n_buckets; k++)
        n += d->buckets[k].early;
    return n;
}

tg_dist_stats tg_dist_last_stats(const tg_dist *d)
{
    return d ? d->stats : (tg_dist_stats){0};
}

/* ---- parameters and scalars ---------------------------------------------- */

int tg_dist_broadcast_params(tg_dist *d, int root)
{
    if (!d) {
        tg_fail(TG_ERR_NULL, "tg_dist_broadcast_params: d is NULL");
        return -1;
    }
    if (root < 0 || root >= d->size) {
        tg_fail(TG_ERR_VALUE, "tg_dist_broadcast_params: root %d is not a rank of %d", root,
                 d->size);
        return -1;
    }
    /* through the bucket buffers: one message per bucket */
    for (int k = 0; k < d->n_buckets; k++) {
        dist_bucket *b = &d->buckets[k];
        size_t es = tg_dtype_size(b->dtype);
        for (int i = b->first; d->rank == root && i <= b->last; i++)
            if (d->params[i].bucket == k)
                tg_copy_to(d->params[i].t, b->dtype, (char *)b->buf + (size_t)d->params[i].at * es,
                           d->params[i].numel);
        if (MPI_Bcast(b->buf, (int)b->numel, tg__mpi_type(b->dtype), root, d->comm) !=
            MPI_SUCCESS) {
            tg_fail(TG_ERR_VALUE, "tg_dist_broadcast_params: MPI_Bcast failed");
            return -1;
        }
        for (int i = b->first; i <= b->last; i++)
            if (d->params[i].bucket == k)
                tg_copy_from(d->params[i].t, b->dtype,
                             (char *)b->buf + (size_t)d->params[i].at * es, d->params[i].numel);
    }
    return 0;
}

int tg_dist_allreduce_sum(tg_dist *d, double *values, int n)
{
    if (!d || (!values && n > 0)) {
        tg_fail(TG_ERR_NULL, "tg_dist_allreduce_sum: %s is NULL", d ? "values" : "d");
        return -1;
    }
    if (n < 0) {
        tg_fail(TG_ERR_VALUE, "tg_dist_allreduce_sum: n is %d", n);
        return -1;
    }
    /* every rank adds the same numbers in rank order: the same bits everywhere */
    double *all = malloc((size_t)d->size * (size_t)(n ? n : 1) * sizeof *all);
    int ok = all && MPI_Allgather(values, n, MPI_DOUBLE, all, n, MPI_DOUBLE, d->comm) ==
                    MPI_SUCCESS;
    for (int i = 0; ok && i < n; i++) {
        double s = 0;
        for (int r = 0; r < d->size; r++)
            s += all[(size_t)r * (size_t)n + (size_t)i];
        values[i] = s;
    }
    free(all);
    if (!ok)
        tg_fail(TG_ERR_NOMEM, "tg_dist_allreduce_sum: out of memory (or MPI failed) for %d "
                               "values over %d ranks", n, d->size);
    return ok ? 0 : -1;
}

tg_tensor *tg__dist_slice(const tg_tensor *t, int64_t lo, int64_t len)
{
    bool was = tg_set_grad_enabled(false);
    int64_t n = tg_numel(t);
    tg_tensor *v = tg_narrow(tg_reshape(t, 1, &n), 0, lo, len);
    tg_set_grad_enabled(was);
    return v;
}

/* The sum of squares of every gradient (zero1: of this rank's shard of it),
 * in double. */
static double grad_sum_squares(const tg_dist *d)
{
    double s = 0;
    tg_scope_begin();
    for (int i = 0; i < d->n; i++) {
        const dist_param *p = &d->params[i];
        int64_t lo = 0, hi = p->numel;
        if (d->zero1)
            tg__dist_shard_part(d, p, d->rank, &lo, &hi);
        tg_tensor *g = tg_grad(p->t);
        if (g && hi > lo)
            s += tg_sum_squares(d->zero1 ? tg__dist_slice(g, lo, hi - lo) : g);
    }
    tg_scope_end();
    return s;
}

double tg_dist_clip_grad_norm(tg_dist *d, double max_norm)
{
    if (!d) {
        tg_fail(TG_ERR_NULL, "tg_dist_clip_grad_norm: d is NULL");
        return -1;
    }
    if (!(max_norm >= 0)) {
        tg_fail(TG_ERR_VALUE, "tg_dist_clip_grad_norm: max_norm is %g", max_norm);
        return -1;
    }
    /* plain: every rank holds the same gradients, so the same norm */
    double sq = grad_sum_squares(d);
    if (d->zero1 && tg_dist_allreduce_sum(d, &sq, 1) < 0)
        return -1;
    double norm = sqrt(sq), scale = max_norm / (norm + 1e-6);
    if (scale < 1 || isnan(scale)) {
        tg_scope_begin();
        for (int i = 0; i < d->n; i++) {
            tg_tensor *g = tg_grad(d->params[i].t);
            if (g)
                tg_scale_in_place(g, scale);
        }
        tg_scope_end();
    }
    return norm;
}
