/* The private side of tg_dist, shared by nn/dist.c (buckets, reduces) and
 * nn/dist_zero.c (the sharded AdamW): what a bucket and a parameter hold
 * and how the flat parameter space is split into shards. Never installed. */
#ifndef TG_DIST_INTERNAL_H
#define TG_DIST_INTERNAL_H

#include <tensorgrad/dist.h>
#include <tensorgrad/module.h>

typedef struct dist_param dist_param;

/* A contiguous buffer of one dtype holding the gradients of some
 * consecutive parameters (in increasing parameter order, so its elements
 * follow the flat parameter space upwards). Rank r reduces the segment
 * [displs[r], displs[r] + counts[r]) of it. */
typedef struct {
    tg_dtype dtype;
    int64_t numel;
    void *buf;                /* [numel] */
    int first, last;          /* its parameters: first..last, inclusive */
    int pending;              /* parameters whose gradient is not in buf yet */
    int *counts, *displs;     /* [world size] each, in elements */
    MPI_Request scatter, gather;
    int state;                /* BUCKET_IDLE ... BUCKET_DONE (dist.c) */
    bool early;               /* its reduce started before backward ended */
    double t_start, t_done;
} dist_bucket;

struct dist_param {
    tg_dist *d;
    tg_tensor *t;  /* borrowed from the user's tg_params */
    const char *name;
    int64_t numel;
    int64_t flat;  /* where it starts in the flat parameter space */
    int bucket;
    int64_t at;    /* where it starts in its bucket, in elements */
    bool ready;    /* its gradient is in the bucket (this backward) */
};

struct tg_dist {
    MPI_Comm comm;   /* reduce-scatters and the blocking collectives */
    MPI_Comm gather; /* all-gathers: their own order, beside the reduce-scatters */
    int rank, size;
    bool overlap, zero1;
    int n;           /* parameters */
    dist_param *params;
    int n_buckets;
    dist_bucket *buckets;
    int64_t total;   /* elements over all parameters */
    int64_t *shard;  /* [size + 1]: rank r owns the flat elements [shard[r], shard[r+1]) */
    /* the backward in progress */
    bool in_backward;
    int next_scatter, next_gather;
    tg_dist_stats stats;
};

static inline MPI_Datatype tg__mpi_type(tg_dtype dtype)
{
    return dtype == TG_FLOAT32 ? MPI_FLOAT : MPI_DOUBLE;
}

/* [lo, hi) of parameter p's elements inside rank r's shard (hi <= lo: none). */
void tg__dist_shard_part(const tg_dist *d, const dist_param *p, int r, int64_t *lo, int64_t *hi);

/* Elements [lo, lo + len) of the contiguous t, flattened: a view (grad mode
 * off) held by the open scope. */
tg_tensor *tg__dist_slice(const tg_tensor *t, int64_t lo, int64_t len);

/* Collective: the lowest rank whose ok is false, or -1 when every rank is ok. */
int tg__dist_first_failed(MPI_Comm comm, int rank, bool ok);

/* Buckets whose reduce started while backward was still running, in the
 * last tg_dist_backward (for tests of the overlap). */
int tg__dist_early_buckets(const tg_dist *d);

/* Packs this rank's segment of every bucket from the parameters' values and
 * all-gathers them, so that every rank holds the parameters the owners of
 * each segment hold. 0, or -1. */
int tg__dist_gather_params(tg_dist *d);

#endif
