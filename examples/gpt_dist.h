/* gpt's data parallelism: under mpirun (with the library built with MPI)
 * every rank trains a replica on its own share of each batch. Run plainly,
 * or built without MPI, the world is one process and every call is cheap. */
#ifndef GPT_DIST_H
#define GPT_DIST_H

#include <tensorgrad/tensorgrad.h>

#include "gpt_data.h"

/* Joins the job when mpirun (or another MPI launcher) started the process;
 * otherwise does nothing. 0, or 1 after printing why not. */
int gpt_par_init(int *argc, char ***argv);
/* Leaves the job (MPI_Finalize) if gpt_par_init joined one. */
void gpt_par_finish(void);
int gpt_par_rank(void);
int gpt_par_size(void);

/* Collective: true when ok is true on every rank. A rank that was fine but
 * sees another fail says which one failed, so that every rank's log ends
 * with the reason, and none waits for a partner that has given up. */
bool gpt_par_all_ok(bool ok);
/* Collective: values[0..n) summed over the ranks, in place. 0, or -1. */
int gpt_par_sum(double *values, int n);
/* Collective: the least of the ranks' v. */
int gpt_par_min(int v);
/* Collective: text, lines of "name value", is the same on every rank. When
 * not, every rank prints the first line that differs between rank 0 and the
 * first rank that differs from it ("gpt: --lr differs between ranks: rank 0
 * has 0.001, rank 1 has 0.002") and false is returned. */
bool gpt_par_agree(const char *text);

/* Collective: the ranks read the same text (d, NULL without --data) and the
 * same checkpoint (resume, loaded into ck; NULL when not resuming), compared
 * by content: each rank may read its own copy at its own path. As
 * gpt_par_agree, which prints what differs. */
bool gpt_par_inputs_agree(const dataset *d, const char *resume, const tg_params *ck);

/* An MPI launcher (mpirun, mpiexec, srun, hydra) started this process: its
 * environment says so, whether or not the library was built with MPI. */
bool gpt_par_launched(void);

/* The optimizer of a run: the library's AdamW on every rank, or with zero1
 * the sharded AdamW of <tensorgrad/dist.h> (each rank keeps the moments of
 * its slice of the parameters only). Made over ps (borrowed; outlives the
 * optimizer); under MPI it also makes the job's tg_dist over ps and copies
 * rank 0's parameters to every rank. NULL after printing why not. */
typedef struct gpt_opt gpt_opt;
gpt_opt *gpt_opt_new(tg_params *ps, bool zero1, double lr, double weight_decay);
void gpt_opt_free(gpt_opt *o);
void gpt_opt_set_lr(gpt_opt *o, double lr);
int64_t gpt_opt_steps(const gpt_opt *o);
/* Backward of loss with the gradients averaged over the ranks, clipped to
 * norm max_norm over the averaged gradient, one optimizer step, gradients
 * zeroed. 0, or -1 with the library's error set. */
int gpt_opt_train(gpt_opt *o, tg_tensor *loss, double max_norm);
/* Collective: the whole optimizer state (gathered from every rank with
 * zero1) added to out, under tg_optim_state's names. 0, or -1. */
int gpt_opt_state(const gpt_opt *o, tg_params *out);
/* The state a gpt_opt_state wrote (from a run of any world size); with zero1
 * each rank keeps its own slice. 0, or -1 with the library's error set. */
int gpt_opt_load_state(gpt_opt *o, const tg_params *state);

/* The communication of the steps since the last call: reduce time in all
 * (seconds), the part of it not hidden behind backward, and the steps. */
typedef struct {
    double comm_seconds, exposed_seconds;
    int64_t steps, bytes_per_step;
    int buckets;
} gpt_comm;
gpt_comm gpt_opt_comm(gpt_opt *o);

#endif
