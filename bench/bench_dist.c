/* Data-parallel GPT steps over MPI, measured: `mpirun -np N bench_dist bench
 * CONFIG STEPS [BUCKET_KIB] [batch=B] [bf16]` times steps and their communication
 * at the library's default threads; `bench_dist grads FILE` writes one step's
 * averaged gradients for bench/torch_ddp.py to compare. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tensorgrad/dist.h>
#include <tensorgrad/tensorgrad.h>

/* The configs of bench/README.md, and gpt-task, the model `gpt train`
 * trains by default (its 13-character addition problems, 12 tokens a row):
 * batch is each rank's; T the row length (0: the context). */
typedef struct {
    const char *name;
    tg_gpt_config c;
    int64_t batch, T;
} config;

static const config configs[] = {
    {"gpt-small", {65, 64, 4, 4, 128, 0.0}, 32, 0},
    {"gpt-medium", {65, 256, 6, 6, 384, 0.0}, 8, 0},
    {"gpt-task", {13, 16, 2, 4, 128, 0.0}, 64, 12},
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The whole combined batch of step, drawn from one seed on every rank, so
 * that torch_ddp.py can split it as the ranks do: x, y int64 [world*B, T]. */
static void draw_batch(int64_t *x, int64_t *y, int64_t rows, int64_t T, int64_t V, int step)
{
    tg_rng *rng = tg_rng_new(1000 + (uint64_t)step);
    for (int64_t i = 0; i < rows * T; i++) {
        x[i] = (int64_t)(tg_rng_uniform01(rng) * (double)V);
        y[i] = (int64_t)(tg_rng_uniform01(rng) * (double)V);
    }
    tg_rng_free(rng);
}

typedef struct {
    tg_gpt *model;
    tg_params ps;
    tg_dist *dist;
    tg_optim *opt;
    int rank, world;
    int64_t B, T;
    int64_t *x, *y; /* [world*B, T] */
} run;

/* Forward on this rank's rows, averaged backward; 0 or -1. */
static int forward_backward(run *r, int step)
{
    int64_t V = tg_gpt_config_of(r->model)->vocab_size, rows = r->B * r->world;
    draw_batch(r->x, r->y, rows, r->T, V, step);
    int64_t off = r->B * r->T * r->rank;
    tg_scope_begin();
    tg_tensor *loss = NULL;
    tg_gpt_forward(r->model, tg_from_data(TG_INT64, 2, (int64_t[]){r->B, r->T}, r->x + off),
                   tg_from_data(TG_INT64, 2, (int64_t[]){r->B, r->T}, r->y + off), &loss);
    int rc = loss ? tg_dist_backward(r->dist, loss) : -1;
    tg_scope_end();
    return rc;
}

static int setup(run *r, const config *cfg, int64_t batch, int64_t bucket_bytes)
{
    MPI_Comm_rank(MPI_COMM_WORLD, &r->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &r->world);
    tg_rng *init = tg_rng_new(0);
    r->model = tg_gpt_new(&cfg->c, TG_FLOAT32, init);
    tg_rng_free(init);
    r->B = batch;
    r->T = cfg->T ? cfg->T : cfg->c.block_size;
    r->x = malloc(sizeof(int64_t) * (size_t)(2 * r->B * r->world * r->T));
    r->y = r->x ? r->x + r->B * r->world * r->T : NULL;
    if (!r->model || !r->x || tg_gpt_params(r->model, &r->ps) < 0 ||
        !(r->dist = tg_dist_new(MPI_COMM_WORLD, &r->ps,
                                &(tg_dist_options){.bucket_bytes = bucket_bytes})) ||
        tg_dist_broadcast_params(r->dist, 0) < 0 ||
        !(r->opt = tg_adamw_new(&r->ps, 1e-3, 0.9, 0.999, 1e-8, 0.1)))
        return fprintf(stderr, "bench_dist: %s\n", tg_error_message()), -1;
    return 0;
}

static void teardown(run *r)
{
    tg_optim_free(r->opt);
    tg_dist_free(r->dist);
    tg_params_clear(&r->ps);
    tg_gpt_free(r->model);
    free(r->x);
}

/* Rank 0 writes the initial weights (param.*), the combined batch (input.x,
 * input.y) and the averaged gradients after one step (grad.*). */
static int grads(const char *path)
{
    run r = {0};
    int rc = setup(&r, &configs[0], configs[0].batch / 2, 0);
    tg_params out = {0};
    tg_scope_begin();
    for (int i = 0; rc == 0 && i < r.ps.count; i++)
        rc = tg_params_add(&out, "param", r.ps.names[i], tg_detach(r.ps.tensors[i]));
    if (rc == 0)
        rc = forward_backward(&r, 0);
    int64_t rows = r.B * r.world;
    for (int i = 0; rc == 0 && i < r.ps.count; i++)
        rc = tg_params_add(&out, "grad", r.ps.names[i], tg_grad(r.ps.tensors[i]));
    if (rc == 0)
        rc = tg_params_add(&out, NULL, "input.x",
                           tg_from_data(TG_INT64, 2, (int64_t[]){rows, r.T}, r.x)) |
             tg_params_add(&out, NULL, "input.y",
                           tg_from_data(TG_INT64, 2, (int64_t[]){rows, r.T}, r.y));
    if (rc == 0 && r.rank == 0)
        rc = tg_safetensors_save(path, &out, 0, NULL, NULL);
    tg_scope_end();
    if (rc)
        fprintf(stderr, "bench_dist: %s\n", tg_error_message());
    tg_params_clear(&out);
    teardown(&r);
    return rc ? 1 : 0;
}

/* steps timed after two warm-up steps; rank 0 prints one JSON line. */
static int bench(const config *cfg, int steps, int64_t bucket_bytes, int64_t batch)
{
    run r = {0};
    if (setup(&r, cfg, batch, bucket_bytes))
        return teardown(&r), 1;
    double comm = 0, exposed = 0, t0 = 0;
    tg_dist_stats s = {0};
    int rc = 0;
    for (int i = 0; rc == 0 && i < steps + 2; i++) {
        if (i == 2) {
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = now();
        }
        rc = forward_backward(&r, i);
        if (rc == 0 && (tg_dist_clip_grad_norm(r.dist, 1.0) < 0 || tg_optim_step(r.opt) < 0))
            rc = -1;
        tg_optim_zero_grad(r.opt);
        s = tg_dist_last_stats(r.dist);
        if (i >= 2)
            comm += s.comm_seconds, exposed += s.exposed_seconds;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double dt = (now() - t0) / steps;
    tg_build_info info;
    tg_build_info_get(&info);
    if (rc == 0 && r.rank == 0)
        printf("{\"config\": \"%s\", \"ranks\": %d, \"batch_per_rank\": %lld, "
               "\"step_ms\": %.2f, \"tokens_per_s\": %.0f, \"comm_ms\": %.3f, "
               "\"exposed_ms\": %.3f, \"buckets\": %d, \"grad_mb\": %.2f, "
               "\"precision\": \"%s\", \"threads\": %d, \"threads_why\": \"%s\"}\n",
               cfg->name, r.world, (long long)r.B, 1e3 * dt,
               (double)(r.B * r.world * r.T) / dt, 1e3 * comm / steps, 1e3 * exposed / steps,
               s.buckets, (double)s.bytes / 1e6, tg_precision_name(tg_matmul_precision()),
               info.threads, info.threads_why);
    if (rc)
        fprintf(stderr, "bench_dist: %s\n", tg_error_message());
    teardown(&r);
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rc = 2;
    if (argc == 3 && !strcmp(argv[1], "grads")) {
        tg_set_num_threads(1);
        rc = grads(argv[2]);
    } else if (argc >= 4 && argc <= 7 && !strcmp(argv[1], "bench")) {
        /* a last argument "bf16" runs the products in bfloat16 */
        bool bf16 = !strcmp(argv[argc - 1], "bf16");
        if (bf16)
            tg_set_matmul_precision(TG_PRECISION_BF16), argc--;
        /* then "batch=B" sets each rank's batch: a single rank's step on
         * the combined batch of several is the baseline of their step */
        int64_t batch = 0;
        if (argc > 4 && !strncmp(argv[argc - 1], "batch=", 6))
            batch = atoll(argv[argc - 1] + 6), argc--;
        for (size_t i = 0; argc <= 5 && batch >= 0 && i < sizeof configs / sizeof configs[0]; i++)
            if (!strcmp(argv[2], configs[i].name))
                rc = bench(&configs[i], atoi(argv[3]) > 0 ? atoi(argv[3]) : 10,
                           argc > 4 ? 1024 * atoll(argv[4]) : 0,
                           batch > 0 ? batch : configs[i].batch);
    }
    if (rc == 2)
        fprintf(stderr, "usage: mpirun -np N bench_dist bench gpt-small|gpt-medium|gpt-task STEPS "
                        "[BUCKET_KIB] [batch=B] [bf16]\n"
                        "       mpirun -np 2 bench_dist grads FILE.safetensors\n");
    MPI_Finalize();
    return rc;
}
