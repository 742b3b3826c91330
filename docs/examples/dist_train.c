/* Data-parallel training over MPI, as docs/distributed.md shows it: every
 * rank fits the same linear map to its own shard of the batch, and
 * tg_dist_backward keeps the replicas in step. Run under mpiexec -n N. */
#include <math.h>
#include <stdio.h>

#include <mpi.h>
#include <tensorgrad/dist.h>
#include <tensorgrad/tensorgrad.h>

enum { IN = 4, OUT = 2, ROWS = 8, STEPS = 50 };

/* This rank's shard: x [ROWS, IN] and y = x W* with a fixed W*. */
static tg_tensor *shard_loss(const tg_linear *model, tg_rng *rng)
{
    tg_tensor *x = tg_randn(rng, TG_FLOAT32, 2, (int64_t[]){ROWS, IN});
    tg_tensor *w_true = tg_full(TG_FLOAT32, 2, (int64_t[]){IN, OUT}, 0.5);
    return tg_mse_loss(tg_linear_forward(model, x), tg_matmul(x, w_true));
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    tg_rng *rng = tg_rng_new(1 + (unsigned long long)rank); /* each rank its own data */
    tg_linear *model = tg_linear_new(IN, OUT, true, TG_FLOAT32, rng);
    tg_params ps = {0};
    tg_linear_params(model, "model", &ps);
    tg_optim *opt = tg_adamw_new(&ps, 3e-2, 0.9, 0.999, 1e-8, 0.0);
    double loss = NAN;

    tg_dist *d = tg_dist_new(MPI_COMM_WORLD, &ps, NULL); /* checks ps matches on every rank */
    tg_dist_broadcast_params(d, 0);                      /* replicas start as rank 0's */
    for (int step = 0; d && step < STEPS; step++) {
        tg_optim_zero_grad(opt);
        tg_scope_begin();
        tg_tensor *my_loss = shard_loss(model, rng);
        if (tg_dist_backward(d, my_loss) < 0) /* .grad: the mean over ranks */
            fprintf(stderr, "rank %d: %s\n", rank, tg_error_message());
        loss = my_loss ? tg_item(my_loss) : NAN;
        tg_scope_end();
        tg_dist_clip_grad_norm(d, 1.0);
        tg_optim_step(opt); /* the same step everywhere */
    }
    int started = d != NULL;
    tg_dist_free(d);

    if (rank == 0)
        printf("rank 0: last loss %.4f\n", loss);
    tg_optim_free(opt);
    tg_params_clear(&ps);
    tg_linear_free(model);
    tg_rng_free(rng);
    int ok = started && loss < 0.5 && tg_live_tensors() == 0;
    MPI_Finalize();
    return ok ? 0 : 1;
}
