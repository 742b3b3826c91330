/* A program that uses an installed tensorgrad-dist the way another project
 * would: rank r's loss is sum(w) * (r + 1), so after tg_dist_backward every
 * rank's gradient of w is the mean over ranks, (size + 1) / 2. It exits 1
 * unless it is. Run it under mpiexec, or alone as a world of one. */
#include <math.h>
#include <stdio.h>

#include <mpi.h>
#include <tensorgrad/dist.h>
#include <tensorgrad/tensorgrad.h>

enum { N = 4 };

/* 1 if every element of w's gradient is `want`, else 0. */
static int grad_is(const tg_tensor *w, float want)
{
    tg_tensor *grad = tg_grad(w);
    const float *g = tg_data_const(grad); /* [N] */
    int ok = g != NULL;
    for (int i = 0; ok && i < N; i++)
        ok = fabsf(g[i] - want) <= 1e-6f;
    tg_release(grad);
    return ok;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    tg_tensor *w = tg_zeros(TG_FLOAT32, 1, (int64_t[]){N}); /* [N] */
    tg_params ps = {0};
    tg_set_requires_grad(w, true);
    tg_params_add(&ps, NULL, "w", w);
    tg_dist *d = tg_dist_new(MPI_COMM_WORLD, &ps, NULL);

    tg_scope_begin();
    tg_tensor *loss = tg_mul_scalar(tg_sum(w, NULL, 0, false), rank + 1);
    int rc = d ? tg_dist_backward(d, loss) : -1;
    tg_scope_end();

    float want = (float)(size + 1) / 2;
    int ok = rc == 0 && grad_is(w, want);
    if (rc < 0)
        fprintf(stderr, "averaged: %s\n", tg_error_message());
    tg_dist_free(d);
    tg_params_clear(&ps);
    tg_release(w);
    ok = ok && tg_live_tensors() == 0;
    printf("averaged: rank %d of %d: gradient %s %.1f: %s\n", rank, size,
           ok ? "is" : "is not", want, ok ? "ok" : "FAILED");
    MPI_Finalize();
    return ok ? 0 : 1;
}
