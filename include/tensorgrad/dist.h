/* tensorgrad distributed: data-parallel training over MPI, in a library of
 * its own, libtensorgrad-dist (pkg-config tensorgrad-dist, CMake component
 * dist). Installed only when tensorgrad is built with MPI (tg_build_info's
 * .mpi); tensorgrad.h does not include it, so programs without MPI never
 * need mpi.h nor link MPI.
 *
 * Every rank runs the same program on its own shard of the batch. The user
 * owns MPI (MPI_Init, MPI_Finalize) and hands tensorgrad a communicator:
 *
 *   MPI_Init(&argc, &argv);
 *   tg_params ps = {0};  ... build the model, fill ps ...
 *   tg_dist *d = tg_dist_new(MPI_COMM_WORLD, &ps, NULL);
 *   tg_dist_broadcast_params(d, 0);          // every replica starts as rank 0's
 *   tg_optim *opt = tg_adamw_new(&ps, 1e-3, 0.9, 0.999, 1e-8, 0.01);
 *   for (int step = 0; step < n; step++) {
 *       tg_optim_zero_grad(opt);
 *       tg_scope_begin();
 *       tg_tensor *loss = ... this rank's part of the batch ...;
 *       tg_dist_backward(d, loss);           // .grad: the mean over ranks
 *       tg_scope_end();
 *       tg_optim_step(opt);                  // the same step on every rank
 *   }
 *   tg_dist_free(d); tg_optim_free(opt); tg_params_clear(&ps);
 *   MPI_Finalize();
 *
 * Gradients travel in flat buckets (one MPI call per bucket, not per
 * tensor), filled in reverse parameter order; a bucket's reduce starts as
 * soon as backward has produced all its gradients, so communication
 * overlaps the rest of backward. Every rank ends with the same bits.
 *
 * All functions here are collective unless said otherwise: every rank of the
 * communicator calls them in the same order. Errors follow the library's
 * rules (NULL or -1, tg_error_message names the function); a failure that
 * one rank detects in a collective check (tg_dist_new's parameter check) is
 * reported on every rank. An MPI error inside a collective is reported on
 * the rank that saw it; MPI's default handler usually ends the job first. */
#ifndef TG_DIST_H
#define TG_DIST_H

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>

#include "nn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tg_dist tg_dist;

typedef struct {
    int64_t bucket_bytes; /* gradient bytes per all-reduce bucket; 0: 4 MiB */
    bool no_overlap;      /* true: reduce every bucket after backward, not during it */
    bool zero1;           /* shard the optimizer (ZeRO stage 1): gradients are reduce-scattered */
} tg_dist_options;

/* A data-parallel context over the parameters of ps. comm is duplicated (the
 * user's communicator never carries tensorgrad's messages); the user keeps
 * MPI_Init / MPI_Finalize, and must free d before MPI_Finalize. ps (borrowed,
 * must outlive d) must hold the same names, shapes and dtypes (float32 or
 * float64 leaves) in the same order on every rank: checked collectively, a
 * mismatch fails on every rank with a message naming the first difference,
 *   tg_dist_new: parameter 3 differs across ranks: rank 0 has "fc.bias"
 *   float32 [8], rank 1 has "fc.bias" float32 [9]
 * opts NULL means all defaults. Buckets are filled in reverse parameter
 * order (backward produces the last layers' gradients first); a parameter
 * larger than a bucket gets a bucket of its own. Installs a grad-ready hook
 * (tg_set_grad_ready_hook) on every parameter, replacing any, which
 * tg_dist_free removes: a parameter belongs to one tg_dist at a time. With
 * zero1 every parameter must be contiguous (it is updated in place by
 * slices).
 * Returns NULL with TG_ERR_NULL (ps), TG_ERR_VALUE (empty ps, a negative
 * bucket_bytes, a parameter too large for one MPI message, a mismatch
 * across ranks), TG_ERR_DTYPE (a parameter not float), TG_ERR_STATE (a
 * non-leaf parameter) or TG_ERR_NOMEM (out of memory, or MPI failed while
 * setting up). When one rank's own checks fail, the others fail too, with
 * TG_ERR_VALUE "tg_dist_new: rank 2 refused its parameters". */
TG_API tg_dist *tg_dist_new(MPI_Comm comm, const tg_params *ps, const tg_dist_options *opts);
/* This process's rank and the number of ranks (not collective); -1 for NULL. */
TG_API int tg_dist_rank(const tg_dist *d);
TG_API int tg_dist_world_size(const tg_dist *d);
/* Copies root's parameter values to every rank (replicas started from
 * different seeds become identical). Bumps each parameter's version. 0, or
 * -1 (TG_ERR_NULL, TG_ERR_VALUE for a root outside the world). */
TG_API int tg_dist_broadcast_params(tg_dist *d, int root);
/* tg_backward(loss, NULL) with each bucket's reduce started as soon as all
 * its gradients are ready: an MPI_Ireduce_scatter (each element summed on
 * one rank and divided by the world size there) then, without zero1, an
 * MPI_Iallgatherv of the reduced parts; together an all-reduce that gives
 * every rank the same bits. On return every .grad holds the mean over ranks
 * (zero1: only this rank's own shard of the mean, which is what
 * tg_dist_adamw reads; the rest of .grad holds this rank's local gradient).
 *
 * What .grad held before is reduced with the new gradient, so zero the
 * gradients between steps. To accumulate over micro-batches, run plain
 * tg_backward for all but the last and tg_dist_backward for the last
 * (PyTorch DDP's no_sync): one reduce then carries the sum. With zero1 that
 * is the only way (a second tg_dist_backward would mix in the local values
 * outside the shard). A parameter that requires grad but got none on this
 * rank contributes zeros and gets a .grad (zeros where no rank had one).
 * loss must hold one element.
 *
 * A backward that fails on one rank cannot leave the others waiting: that
 * rank still joins every reduce (with its gradients as they are), and every
 * rank returns -1 (the others with TG_ERR_STATE "tg_dist_backward: backward
 * failed on rank 2"). 0, or -1. */
TG_API int tg_dist_backward(tg_dist *d, tg_tensor *loss);
/* values[0..n) summed over ranks in place, in double; the same bits on every
 * rank. For a loss averaged over uneven shards: sum (loss * count) and count,
 * then divide. 0, or -1 (TG_ERR_NULL, TG_ERR_VALUE for n < 0). */
TG_API int tg_dist_allreduce_sum(tg_dist *d, double *values, int n);
/* Clips the averaged gradient (after tg_dist_backward) to max_norm over all
 * parameters, as tg_clip_grad_norm does on one process, also when zero1
 * (then the norm is summed over the shards). Returns the norm before
 * clipping, the same on every rank, or -1 on error (TG_ERR_NULL,
 * TG_ERR_VALUE for max_norm < 0). */
TG_API double tg_dist_clip_grad_norm(tg_dist *d, double max_norm);

/* Communication of the last tg_dist_backward, on this rank: comm_seconds is
 * the time from each bucket's reduce being started to it being complete,
 * summed over buckets; exposed_seconds is the wait after backward's compute
 * ended (the communication not hidden behind backward); buckets and bytes
 * are what was reduced. Not collective; all zeros for NULL. */
typedef struct { double comm_seconds, exposed_seconds; int buckets; int64_t bytes; } tg_dist_stats;
TG_API tg_dist_stats tg_dist_last_stats(const tg_dist *d);
/* Removes the hooks, frees the duplicated communicator (collective). NULL:
 * no-op. The parameters stay as they are. */
TG_API void tg_dist_free(tg_dist *d);

/* ---- ZeRO stage 1 (nn/dist_zero.c) ------------------------------------------ */

/* AdamW over d's parameters (d made with zero1), sharded: the parameters,
 * flattened in order, are split into world_size contiguous slices (the
 * first numel % world_size ranks get one element more); each rank keeps
 * exp_avg / exp_avg_sq for its slice only, updates that slice with the same
 * arithmetic as tg_adamw (so one rank is tg_adamw bit for bit), then the
 * parameters are all-gathered, so every replica holds the same bits.
 * Hyperparameters as tg_adamw_new's; d is borrowed and must outlive the
 * optimizer. Not collective (no messages). Returns NULL with TG_ERR_NULL,
 * TG_ERR_STATE (d was made without zero1), TG_ERR_VALUE (a hyperparameter
 * out of range) or TG_ERR_NOMEM. */
typedef struct tg_dist_adamw tg_dist_adamw;
TG_API tg_dist_adamw *tg_dist_adamw_new(tg_dist *d, double lr, double beta1, double beta2,
                                        double eps, double weight_decay);
/* One step from the gradients tg_dist_backward left, for every parameter
 * (each must have a .grad of its dtype: TG_ERR_STATE otherwise). Collective:
 * when the step fails on one rank no rank changes anything, and all return
 * -1. 0, or -1. */
TG_API int tg_dist_adamw_step(tg_dist_adamw *o);
/* lr < 0 (or NaN) is TG_ERR_VALUE and keeps the old rate. Not collective. */
TG_API void tg_dist_adamw_set_lr(tg_dist_adamw *o, double lr);
/* Calls of tg_dist_adamw_step so far (not collective); -1 for NULL. */
TG_API int64_t tg_dist_adamw_steps(const tg_dist_adamw *o);
/* The full state, gathered (collective; every rank gets it), added to out
 * under tg_optim_state's names ("step", "step.<name>", "exp_avg.<name>",
 * "exp_avg_sq.<name>"), so that a checkpoint written at any world size
 * loads into tg_adamw, or into a tg_dist_adamw of any world size, which
 * keeps its own slice. Load is all or nothing on every rank (when one rank
 * cannot load, no rank changes anything), with tg_optim_load_state's
 * errors (TG_ERR_VALUE for a missing name, TG_ERR_SHAPE, TG_ERR_DTYPE).
 * Both are collective. 0, or -1. */
TG_API int tg_dist_adamw_state(const tg_dist_adamw *o, tg_params *out);
TG_API int tg_dist_adamw_load_state(tg_dist_adamw *o, const tg_params *state);
/* Bytes of moment state this rank holds (2 x its slice x the dtype size):
 * falls as 1 / world_size. Not collective; -1 for NULL. */
TG_API int64_t tg_dist_adamw_state_bytes(const tg_dist_adamw *o);
TG_API void tg_dist_adamw_free(tg_dist_adamw *o);

#ifdef __cplusplus
}
#endif

#endif
