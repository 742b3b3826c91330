/* gpt's data parallelism (gpt_dist.h): the job's ranks, their agreement on
 * errors, and the optimizer step with gradients averaged over the ranks.
 * Built without GPT_WITH_MPI (the library has no MPI) the world is one rank. */
#include "gpt_dist.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if GPT_WITH_MPI
#include <mpi.h>
#include <tensorgrad/dist.h>
#endif

struct gpt_opt {
    tg_params *ps;
    tg_optim *adamw; /* every rank's whole AdamW, or NULL with zero1 */
#if GPT_WITH_MPI
    tg_dist_adamw *shard; /* zero1: this rank's slice */
#endif
    gpt_comm comm;
};

/* One of vars (a NULL-terminated list) is set in the environment. */
static bool any_set(const char *const *vars)
{
    for (const char *const *v = vars; *v; v++)
        if (getenv(*v))
            return true;
    return false;
}

/* Open MPI's mpirun, MPICH's hydra, PMIx and Slurm's srun set one of these
 * in every process they start (Slurm's in a batch script too). */
bool gpt_par_launched(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
                                       "PMIX_RANK", "SLURM_PROCID", "MPI_LOCALRANKID", NULL};
    return any_set(vars);
}

/* The line of a and of b (texts of "name value" lines) that differ first,
 * printed as "NAME differs between ranks: rank 0 has A, rank R has B". */
static void print_difference(const char *a, const char *b, int rank_b, int differing)
{
    size_t na = strcspn(a, "\n"), nb = strcspn(b, "\n");
    while (na == nb && !memcmp(a, b, na) && a[na] && b[nb]) {
        a += na + 1, b += nb + 1;
        na = strcspn(a, "\n"), nb = strcspn(b, "\n");
    }
    size_t name = strcspn(a, " ");
    if (name >= na || name >= nb || memcmp(a, b, name + 1)) /* other lines altogether */
        fprintf(stderr, "gpt: the ranks' settings differ: rank 0 has '%.*s', rank %d has '%.*s'",
                (int)na, a, rank_b, (int)nb, b);
    else
        fprintf(stderr, "gpt: %.*s differs between ranks: rank 0 has %.*s, rank %d has %.*s",
                (int)name, a, (int)(na - name - 1), a + name + 1, rank_b,
                (int)(nb - name - 1), b + name + 1);
    if (differing > 1)
        fprintf(stderr, " (%d ranks differ from rank 0)", differing);
    fprintf(stderr, "; start every rank with the same options and inputs\n");
}

#if GPT_WITH_MPI
static bool joined;  /* gpt_par_init called MPI_Init */
static tg_dist *job; /* over the model's parameters, once gpt_opt_new made it */

int gpt_par_init(int *argc, char ***argv)
{
    /* what a process that MPI_Init can join has: not a Slurm batch script */
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", NULL};
    if (!any_set(vars))
        return 0;
    if (MPI_Init(argc, argv) != MPI_SUCCESS)
        return fprintf(stderr, "gpt: cannot join the MPI job\n"), 1;
    joined = true;
    return 0;
}

void gpt_par_finish(void)
{
    if (joined)
        MPI_Finalize();
}

int gpt_par_rank(void)
{
    int r = 0;
    if (joined)
        MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

int gpt_par_size(void)
{
    int n = 1;
    if (joined)
        MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}

bool gpt_par_all_ok(bool ok)
{
    if (!joined)
        return ok;
    int mine = ok ? INT_MAX : gpt_par_rank(), first = INT_MAX;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (ok && first != INT_MAX)
        fprintf(stderr, "gpt: rank %d stops: rank %d failed (its message above says why)\n",
                gpt_par_rank(), first);
    return first == INT_MAX;
}

int gpt_par_sum(double *values, int n)
{
    if (job)
        return tg_dist_allreduce_sum(job, values, n);
    if (joined)
        return MPI_Allreduce(MPI_IN_PLACE, values, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD) ==
               MPI_SUCCESS ? 0 : -1;
    return 0;
}

int gpt_par_min(int v)
{
    if (joined)
        MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return v;
}

/* Collective: a copy of rank root's text on every rank (freed by the caller). */
static char *broadcast_text(const char *mine, int root)
{
    long long n = (long long)strlen(mine) + 1;
    MPI_Bcast(&n, 1, MPI_LONG_LONG, root, MPI_COMM_WORLD);
    char *text = malloc((size_t)n);
    if (!text) { /* a few hundred bytes: the job cannot go on without them */
        fprintf(stderr, "gpt: out of memory to compare the ranks' settings\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (gpt_par_rank() == root)
        memcpy(text, mine, (size_t)n);
    MPI_Bcast(text, (int)n, MPI_CHAR, root, MPI_COMM_WORLD);
    return text;
}

bool gpt_par_agree(const char *text)
{
    if (!joined)
        return true;
    char *first_text = broadcast_text(text, 0);
    int differs = strcmp(first_text, text) != 0, count = differs;
    int first = gpt_par_min(differs ? gpt_par_rank() : INT_MAX);
    if (first != INT_MAX) {
        MPI_Allreduce(MPI_IN_PLACE, &count, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        char *other = broadcast_text(text, first);
        print_difference(first_text, other, first, count);
        free(other);
    }
    free(first_text);
    return first == INT_MAX;
}

/* The job's tg_dist over ps with rank 0's parameters on every rank, and
 * with zero1 the sharded AdamW; collective. 0, or 1 after printing why. */
static int join_job(gpt_opt *o, bool zero1, double lr, double weight_decay)
{
    tg_dist_options opts = {.zero1 = zero1};
    job = tg_dist_new(MPI_COMM_WORLD, o->ps, &opts);
    bool ok = job && tg_dist_broadcast_params(job, 0) == 0;
    if (ok && zero1)
        ok = (o->shard = tg_dist_adamw_new(job, lr, 0.9, 0.99, 1e-8, weight_decay)) != NULL;
    if (!ok)
        fprintf(stderr, "gpt: cannot train data-parallel: %s\n", tg_error_message());
    return gpt_par_all_ok(ok) ? 0 : 1;
}
#else
int gpt_par_init(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    return 0;
}
void gpt_par_finish(void) {}
int gpt_par_rank(void) { return 0; }
int gpt_par_size(void) { return 1; }
bool gpt_par_all_ok(bool ok) { return ok; }
int gpt_par_sum(double *values, int n)
{
    (void)values, (void)n;
    return 0;
}
int gpt_par_min(int v) { return v; }
bool gpt_par_agree(const char *text)
{
    (void)text, (void)print_difference;
    return true;
}
#endif

bool gpt_par_inputs_agree(const dataset *d, const char *resume, const tg_params *ck)
{
    char text[256];
    size_t n = (size_t)(d ? snprintf(text, 128, "--data a text of %lld characters, digest %016llx\n",
                                     (long long)(d->n_train + d->n_val),
                                     (unsigned long long)dataset_digest(d))
                          : snprintf(text, 128, "--data (not given)\n"));
    uint64_t h = 0;
    tg_tensor *history = resume ? tg_params_find(ck, "train.history") : NULL;
    if (!resume)
        snprintf(text + n, sizeof text - n, "--resume (not given)\n");
    else if (gpt_digest_file(resume, &h) < 0)
        snprintf(text + n, sizeof text - n, "--resume unreadable (%s)\n", strerror(errno));
    else
        snprintf(text + n, sizeof text - n, "--resume a checkpoint at step %lld, digest %016llx\n",
                 history ? (long long)tg_size(history, 0) : -1LL, (unsigned long long)h);
    return gpt_par_agree(text);
}

gpt_opt *gpt_opt_new(tg_params *ps, bool zero1, double lr, double weight_decay)
{
    gpt_opt *o = calloc(1, sizeof *o);
    if (!o)
        return fprintf(stderr, "gpt: out of memory for the optimizer\n"), NULL;
    o->ps = ps;
#if GPT_WITH_MPI
    if (joined && join_job(o, zero1, lr, weight_decay))
        return gpt_opt_free(o), NULL;
    if (o->shard)
        return o;
#else
    (void)zero1; /* one process: the sharded AdamW is AdamW, bit for bit */
#endif
    bool ok = (o->adamw = tg_adamw_new(ps, lr, 0.9, 0.99, 1e-8, weight_decay)) != NULL;
    if (!ok)
        fprintf(stderr, "gpt: %s\n", tg_error_message());
    if (!gpt_par_all_ok(ok))
        return gpt_opt_free(o), NULL;
    return o;
}

void gpt_opt_free(gpt_opt *o)
{
    if (!o)
        return;
    tg_optim_free(o->adamw);
#if GPT_WITH_MPI
    tg_dist_adamw_free(o->shard);
    tg_dist_free(job);
    job = NULL;
#endif
    free(o);
}

void gpt_opt_set_lr(gpt_opt *o, double lr)
{
#if GPT_WITH_MPI
    if (o->shard)
        return tg_dist_adamw_set_lr(o->shard, lr);
#endif
    tg_optim_set_lr(o->adamw, lr);
}

int64_t gpt_opt_steps(const gpt_opt *o)
{
#if GPT_WITH_MPI
    if (o->shard)
        return tg_dist_adamw_steps(o->shard);
#endif
    return tg_optim_steps(o->adamw);
}

static void zero_grads(const tg_params *ps)
{
    for (int i = 0; i < ps->count; i++)
        tg_zero_grad(ps->tensors[i]);
}

int gpt_opt_train(gpt_opt *o, tg_tensor *loss, double max_norm)
{
    int rc = -1;
#if GPT_WITH_MPI
    if (job) {
        if (tg_dist_backward(job, loss) == 0 && tg_dist_clip_grad_norm(job, max_norm) >= 0)
            rc = o->shard ? tg_dist_adamw_step(o->shard) : tg_optim_step(o->adamw);
        tg_dist_stats s = tg_dist_last_stats(job);
        o->comm.comm_seconds += s.comm_seconds;
        o->comm.exposed_seconds += s.exposed_seconds;
        o->comm.bytes_per_step = s.bytes;
        o->comm.buckets = s.buckets;
        o->comm.steps++;
        zero_grads(o->ps);
        return rc;
    }
#endif
    if (tg_backward(loss, NULL) == 0 && tg_clip_grad_norm(o->ps, max_norm) >= 0)
        rc = tg_optim_step(o->adamw);
    zero_grads(o->ps);
    return rc;
}

int gpt_opt_state(const gpt_opt *o, tg_params *out)
{
#if GPT_WITH_MPI
    if (o->shard)
        return tg_dist_adamw_state(o->shard, out);
#endif
    return tg_optim_state(o->adamw, out);
}

int gpt_opt_load_state(gpt_opt *o, const tg_params *state)
{
#if GPT_WITH_MPI
    if (o->shard)
        return tg_dist_adamw_load_state(o->shard, state);
#endif
    return tg_optim_load_state(o->adamw, state);
}

gpt_comm gpt_opt_comm(gpt_opt *o)
{
    gpt_comm c = o->comm;
    o->comm.comm_seconds = o->comm.exposed_seconds = 0;
    o->comm.steps = 0;
    return c;
}
