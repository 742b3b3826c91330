/* The dist suite: data-parallel training over MPI (tensorgrad/dist.h), run
 * by meson under mpiexec at 1, 2 and 4 ranks. Every rank runs every test;
 * each compares what the ranks computed together with one process training
 * on the combined batch, which every rank also computes on its own. */
#include "testutil.h"

#include <mpi.h>
#include <tensorgrad/dist.h>

#include "dist_internal.h"

static int rank, world;

/* ---- a small model on a deterministic batch --------------------------------- */

#define IN 4
#define HID 16
#define OUT 3
#define ROWS 8 /* the combined batch: divisible by 1, 2 and 4 ranks */

typedef struct {
    tg_params ps;
    tg_tensor *w[6]; /* w1 [HID,IN], b1 [HID], w2 [HID,HID], b2 [HID], w3 [OUT,HID], b3 [OUT] */
} model;

static void model_init(model *m, tg_dtype dt, double seed)
{
    static const int64_t shapes[6][2] = {{HID, IN}, {HID, 0}, {HID, HID}, {HID, 0},
                                         {OUT, HID}, {OUT, 0}};
    static const char *names[6] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias",
                                   "fc3.weight", "fc3.bias"};
    *m = (model){0};
    for (int k = 0; k < 6; k++) {
        int nd = shapes[k][1] ? 2 : 1;
        int64_t n = shapes[k][0] * (nd == 2 ? shapes[k][1] : 1);
        double v[HID * HID];
        for (int64_t i = 0; i < n; i++)
            v[i] = 0.4 * sin(seed * 1.7 + 0.37 * (double)(i + 31 * k));
        tg_tensor *t = tg_zeros(dt, nd, shapes[k]);
        tg_copy_from(t, TG_FLOAT64, v, n);
        tg_set_requires_grad(t, true);
        tg_params_add(&m->ps, NULL, names[k], t);
        m->w[k] = t;
        tg_release(t);
    }
}

static void model_free(model *m) { tg_params_clear(&m->ps); }

static void model_zero_grad(model *m)
{
    for (int k = 0; k < 6; k++)
        tg_zero_grad(m->w[k]);
}

/* Rows [lo, hi) of the batch (x: [n, IN], y: [n, OUT]), held by the open scope. */
static tg_tensor *batch(tg_dtype dt, int lo, int hi, int cols, bool target)
{
    double v[ROWS * 16];
    int n = 0;
    for (int i = lo; i < hi; i++)
        for (int j = 0; j < cols; j++)
            v[n++] = target ? cos(0.5 * i - 0.9 * j) : sin(0.7 * i + 1.3 * j);
    tg_tensor *t = tg_zeros(dt, 2, SHAPE(hi - lo, cols));
    tg_copy_from(t, TG_FLOAT64, v, n);
    return t;
}

/* scale * (sum of squared errors over rows [lo, hi)); call inside a scope,
 * which holds the result and every intermediate. */
static tg_tensor *model_loss_gain(const model *m, tg_dtype dt, int lo, int hi, double scale,
                                  const tg_tensor *gain)
{
    tg_tensor *x = batch(dt, lo, hi, IN, false), *y = batch(dt, lo, hi, OUT, true);
    tg_tensor *h = tg_tanh(tg_affine(x, m->w[0], m->w[1]));
    h = tg_tanh(tg_affine(h, m->w[2], m->w[3]));
    tg_tensor *o = tg_affine(h, m->w[4], m->w[5]);
    if (gain) /* [OUT], of another dtype */
        o = tg_mul(o, tg_to_dtype(gain, dt));
    tg_tensor *d = tg_sub(o, y);
    return tg_mul_scalar(tg_sum(tg_mul(d, d), NULL, 0, false), scale);
}

static tg_tensor *model_loss(const model *m, tg_dtype dt, int lo, int hi, double scale)
{
    return model_loss_gain(m, dt, lo, hi, scale, NULL);
}

/* This rank's rows of the combined batch when split evenly. */
static void my_rows(int *lo, int *hi)
{
    *lo = rank * (ROWS / world);
    *hi = *lo + ROWS / world;
}

/* One process on the combined batch: the mean loss over all rows. */
static void reference_backward(model *m, tg_dtype dt)
{
    tg_scope_begin();
    ck_assert_int_eq(tg_backward(model_loss(m, dt, 0, ROWS, 1.0 / ROWS), NULL), 0);
    tg_scope_end();
}

/* The mean loss over rows [lo, hi) through d. */
static void dist_backward_rows(tg_dist *d, model *m, tg_dtype dt, int lo, int hi)
{
    tg_scope_begin();
    ck_assert_int_eq(tg_dist_backward(d, model_loss(m, dt, lo, hi, 1.0 / (hi - lo))), 0);
    tg_scope_end();
}

/* This rank's share, the mean over its rows: the mean over ranks is the
 * combined batch's mean. */
static void dist_backward(tg_dist *d, model *m, tg_dtype dt)
{
    int lo, hi;
    my_rows(&lo, &hi);
    tg_scope_begin();
    ck_assert_int_eq(tg_dist_backward(d, model_loss(m, dt, lo, hi, 1.0 / (hi - lo))), 0);
    tg_scope_end();
}

/* ---- comparisons ------------------------------------------------------------ */

/* Largest |a - b| (relative to max(|b|, floor)) over the elements of a and b. */
static double max_diff(const tg_tensor *a, const tg_tensor *b, double floor)
{
    int64_t n = tg_numel(a);
    ck_assert_int_eq(tg_numel(b), n);
    double *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    tg_copy_to(a, TG_FLOAT64, x, n);
    tg_copy_to(b, TG_FLOAT64, y, n);
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs(x[i] - y[i]) / (floor > 0 ? fmax(fabs(y[i]), floor) : 1);
        worst = e > worst ? e : worst;
    }
    free(x);
    free(y);
    return worst;
}

static double model_diff(const model *a, const model *b)
{
    double worst = 0;
    for (int k = 0; k < 6; k++)
        worst = fmax(worst, max_diff(a->w[k], b->w[k], 0));
    return worst;
}

/* True on every rank when t holds the same bits on every rank. */
static bool same_on_every_rank(const tg_tensor *t)
{
    int64_t n = tg_numel(t);
    double *mine = malloc((size_t)n * sizeof *mine), *root = malloc((size_t)n * sizeof *root);
    tg_copy_to(t, TG_FLOAT64, mine, n);
    memcpy(root, mine, (size_t)n * sizeof *root);
    MPI_Bcast(root, (int)n, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    int same = memcmp(mine, root, (size_t)n * sizeof *root) == 0, all = 0;
    MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    free(mine);
    free(root);
    return all;
}

static bool model_same_on_every_rank(const model *m)
{
    bool all = true;
    for (int k = 0; k < 6; k++)
        all = same_on_every_rank(m->w[k]) && all;
    return all;
}

/* ---- training ---------------------------------------------------------------- */

START_TEST(data_parallel_float64_matches_the_combined_batch_after_10_steps)
{
    model ref, dp;
    model_init(&ref, TG_FLOAT64, 1);
    model_init(&dp, TG_FLOAT64, 1);
    tg_optim *ro = tg_adamw_new(&ref.ps, 1e-2, 0.9, 0.999, 1e-8, 0.01);
    tg_optim *po = tg_adamw_new(&dp.ps, 1e-2, 0.9, 0.999, 1e-8, 0.01);
    tg_dist *d = tg_dist_new(MPI_COMM_WORLD, &dp.ps, &(tg_dist_options){.bucket_bytes = 512});
    ck_assert_ptr_nonnull(d);
    ck_assert_int_eq(tg_dist_world_size(d), world);
    for (int step = 0; step < 10; step++) {
        model_zero_grad(&ref);
        model_zero_grad(&dp);
        reference_backward(&ref, TG_FLOAT64);
        dist_backward(d, &dp, TG_FLOAT64);
        ck_assert_int_eq(tg_optim_step(ro), 0);
        ck_assert_int_eq(tg_optim_step(po), 0);
    }
    double diff = model_diff(&dp, &ref);
    /* one rank: the same bits as training without MPI */
    if (world == 1)
        ck_assert_msg(diff == 0, "1 rank differs from plain training by %g", diff);
    ck_assert_msg(diff <= 1e-12, "parameters differ from the combined batch's by %g", diff);
    ck_assert(model_same_on_every_rank(&dp));
    tg_dist_free(d);
    tg_optim_free(ro);
    tg_optim_free(po);
    model_free(&ref);
    model_free(&dp);
}
END_TEST

START_TEST(data_parallel_float32_gradients_match_within_relative_tolerance)
{
    model ref, dp;
    model_init(&ref, TG_FLOAT32, 2);
    model_init(&dp, TG_FLOAT32, 2);
    tg_dist *d = tg_dist_new(MPI_COMM_WORLD, &dp.ps, NULL);
    ck_assert_ptr_nonnull(d);
    reference_backward(&ref, TG_FLOAT32);
    dist_backward(d, &dp, TG_FLOAT32);
    /* the collectives first: an assertion that fails leaves no rank waiting */
    tg_scope_begin();
    double worst = 0;
    bool same = true;
    for (int k = 0; k < 6; k++) {
        worst = fmax(worst, max_diff(tg_grad(dp.w[k]), tg_grad(ref.w[k]), 1e-3));
        same = same_on_every_rank(tg_grad(dp.w[k])) && same;
    }
    tg_scope_end();
    ck_assert_msg(worst <= 1e-4, "relative gradient difference %g", worst);
    ck_assert(same);
    tg_dist_free(d);
    model_free(&ref);
    model_free(&dp);
}
END_TEST

/* Rank r holds r + 1 rows: each rank's loss is its sum of squared errors
 * over the combined count, times world (the reduce averages over ranks). */
START_TEST(uneven_shards_weighted_by_the_summed_counts_match_the_combined_batch)
{
    model ref, dp;
    model_init(&ref, TG_FLOAT64, 3);
    model_init(&dp, TG_FLOAT64, 3);
    tg_dist *d = tg_dist_new(MPI_COMM_WORLD, &dp.ps, NULL);
    ck_assert_ptr_nonnull(d);
    int lo = rank * (rank + 1) / 2, hi = lo + rank + 1;
    double count = hi - lo;
    ck_assert_int_eq(tg_dist_allreduce_sum(d, &count, 1), 0);
    ck_assert_double_eq(count, world * (world + 1) / 2);
    tg_scope_begin();
    ck_assert_int_eq(tg_backward(model_loss(&ref, TG_FLOAT64, 0, (int)count, 1 / count), NULL), 0);
    tg_tensor *loss = model_loss(&dp, TG_FLOAT64, lo, hi, world / count);
    double mine = tg_item(loss) / world;
    ck_assert_int_eq(tg_dist_backward(d, loss), 0);
    ck_assert_int_eq(tg_dist_allreduce_sum(d, &mine, 1), 0);
    ck_assert_double_eq_tol(mine, tg_item(model_loss(&ref, TG_FLOAT64, 0, (int)count, 1 / count)),
                            1e-13);
    for (int k = 0; k < 6; k++)
        ck_assert_double_le(max_diff(tg_grad(dp.w[k]), tg_grad(ref.w[k]), 0), 1e-14);
    tg_scope_end();
    tg_dist_free(d);
    model_free(&ref);
    model_free(&dp);
}
END_TEST

/* A float32 gain on the float64 model's output: its gradient travels in a
 * float32 bucket; plain and ZeRO-1 both train as one process does. */
START_TEST(float32_and_float64_parameters_reduce_in_buckets_of_their_own)
{
    for (int zero1 = 0; zero1 < 2; zero1++) {
        model ref, dp;
        tg_tensor *gains[2];
        model *ms[2] = {&ref, &dp};
        for (int k = 0; k < 2; k++) {
            model_init(ms[k], TG_FLOAT64, 15);
            gains[k] = T32(SHAPE(OUT), 1, 1.5f, 0.5f, -1.0f);
            tg_set_requires_grad(gains[k], true);
            tg_params_add(&ms[k]->ps, NULL, "gain", gains[k]);
            tg_release(gains[k]);
        }
        tg_dist *d = tg_dist_new(MPI_COMM_WORLD, &dp.ps,
                                 &(tg_dist_options){.bucket_bytes = 256, .zero1 = zero1});
        tg_optim *ro = tg_adamw_new(&ref.ps, 1e-2, 0.9, 0.999, 1e-8, 0.01);
        tg_optim *po = zero1 ? NULL : tg_adamw_new(&dp.ps, 1e-2, 0.9, 0.999, 1e-8, 0.01);
        tg_dist_adamw *zo = zero1 ? tg_dist_adamw_new(d, 1e-2, 0.9, 0.999, 1e-8, 0.01) : NULL;
        int lo, hi;
        my_rows(&lo, &hi);
        for (int step = 0; step < 3; step++) {
            tg_optim_zero_grad(ro);
            model_zero_grad(&dp);
            tg_zero_grad(gains[1]);
            tg_scope_begin();
            ck_assert_int_eq(tg_backward(model_loss_gain(&ref, TG_FLOAT64, 0, ROWS, 1.0 / ROWS,
                                                         gains[0]), NULL), 0);
            ck_assert_int_eq(tg_dist_backward(d, model_loss_gain(&dp, TG_FLOAT64, lo, hi,
                                                                 1.0 / (hi - lo), gains[1])), 0);
            tg_scope_end();
            ck_assert_int_eq(tg_optim_step(ro), 0);
            ck_assert_int_eq(zero1 ? tg_dist_adamw_step(zo) : tg_optim_step(po), 0);
        }
        tg_dist_stats st = tg_dist_last_stats(d);
        double diff = fmax(model_diff(&dp, &ref), max_diff(gains[1], gains[0], 0));
        bool same = model_same_on_every_rank(&dp) && same_on_every_rank(gains[1]);
        ck_assert_int_ge(st.buckets, 2);
        ck_assert_int_eq(st.bytes, (tg_params_numel(&dp.ps) - OUT) * 8 + OUT * 4);
        /* float32 sums grouped another way round differently */
        ck_assert_msg(diff <= 1e-6, "zero1 %d: %g from one process", zero1, diff);
        ck_assert(same);
        tg_dist_adamw_free(zo);
        tg_optim_free(ro);
        tg_optim_free(po);
        tg_dist_free(d);
        model_free(&ref);
        model_free(&dp);
    }
}
END_TEST

START_TEST(allreduce_sum_gives_every_rank_the_same_sum)
{
    model m;
    model_init(&m, TG_FLOAT64, 1);
    tg_dist *d = tg_dist_new(MPI_COMM_WORLD, &m.ps, NULL);
    double v[3] = {rank + 1, 0.1 * (rank + 1), -1};
    ck_assert_int_eq(tg_dist_allreduce_sum(d, v, 3), 0);
    ck_assert_double_eq(v[0], world * (world + 1) / 2);
    ck_assert_double_eq_tol(v[1], 0.1 * world * (world + 1) / 2, 1e-15);
    ck_assert_double_eq(v[2], -world);
    double all[3 * 4];
    MPI_Allgather(v, 3, MPI_DOUBLE, all, 3, MPI_DOUBLE, MPI_COMM_WORLD);
    for (int r = 0; r < world; r++)
        ck_assert_mem_eq(&all[3 * r], v, sizeof v);
    ck_assert_int_eq(tg_dist_allreduce_sum(d, v, -1), -1);
    ck_assert_int_eq(tg_error_code(), TG_ERR_VALUE);
    tg_error_clear();
    tg_dist_free(d);
    model_free(&m);
}
END_TEST

START_TEST(broadcast_makes_replicas_from_different_seeds_identical)
{
    model m, want;
    model_init(&m, TG_FLOAT64, 10 + rank);
    int root = world - 1;
    model_init(&want, TG_FLOAT64, 10 + root);
    tg_dist *d = tg_dist_new(MPI_COMM_WORLD, &m.ps, NULL);
    ck_assert_int_eq(world == 1 || !model_same_on_every_rank(&m), 1);
    ck_assert_int_eq(tg_dist_broadcast_params(d, root), 0);
    ck_assert_double_eq(model_diff(&m, &want), 0);
    ck_assert_int_eq(tg_dist_broadcast_params(d, world), -1);
    ck_assert_int_eq(tg_error_code(), TG_ERR_VALUE);
    tg_error_clear();
    tg_dist_free(d);
    model_free(&m);
    model_free(&want);
}
END_TEST

START_TEST(clip_grad_norm_clips_the_averaged_gradient)
{
    for (int zero1 = 0; zero1 < 2; zero1++) {
        model ref, dp;
        model_init(&ref, TG_FLOAT64, 4);
        model_init(&dp, TG_FLOAT64, 4);
        tg_dist *d = tg_dist_new(MPI_COMM_WORLD, &dp.ps, &(tg_dist_options){.zero1 = zero1});
        reference_backward(&ref, TG_FLOAT64);
        dist_backward(d, &dp, TG_FLOAT64);
        double want = tg_clip_grad_norm(&ref.ps, 0.1), got = tg_dist_clip_grad_norm(d, 0.1);
        ck_assert_double_eq_tol(got, want, 1e-13);
        ck_assert(want > 0.1);
        double norm = got;
        ck_assert_int_eq(tg_dist_allreduce_sum(d, &norm, 1), 0);
        ck_assert_double_eq(norm, world * got); /* every rank returned the same norm */
        /* the shard tg_dist_adamw reads is clipped like the whole */
        if (!zero1) {
            tg_scope_begin();
            for (int k = 0; k < 6; k++)
                ck_assert_double_le(max_diff(tg_grad(dp.w[k]), tg_grad(ref.w[k]), 0), 1e-14);
            tg_scope_end();
        }
        ck_assert_double_eq(tg_dist_clip_grad_norm(d, -1), -1);
        tg_error_clear();
        tg_dist_free(d);
        model_free(&ref);
        model_free(&dp);
    }
}
END_TEST

/* ---- overlap ------------------------------------------------------------------ */

START_TEST(overlap_starts_reduces_while_backward_runs)
{
    model a, b;
    model_init(&a, TG_FLOAT64, 5);
    model_init(&b, TG_FLOAT64, 5);
    /* 512 bytes: fc3, fc2's bias, fc2's weight, fc1 each in their own buckets */
    tg_dist *on = tg_dist_new(MPI_COMM_WORLD, &a.ps, &(tg_dist_options){.bucket_bytes = 512});
    tg_dist *off = tg_dist_new(MPI_COMM_WORLD, &b.ps,
                               &(tg_dist_options){.bucket_bytes = 512, .no_overlap = true});
    dist_backward(on, &a, TG_FLOAT64);
    dist_backward(off, &b, TG_FLOAT64);
    tg_dist_stats s = tg_dist_last_stats(on), t = tg_dist_last_stats(off);
    ck_assert_int_gt(s.buckets, 1);
    ck_assert_int_eq(s.buckets, t.buckets);
    ck_assert_int_eq(s.bytes, tg_params_numel(&a.ps) * 8);
    ck_assert(s.comm_seconds >= 0 && s.exposed_seconds >= 0);
    /* with overlap the hooks started every bucket before backward returned
     * (the last one as backward's last node ran); none did without it */
    ck_assert_int_eq(tg__dist_early_buckets(on), s.buckets);
    ck_assert_int_eq(tg__dist_early_buckets(off), 0);
    tg_scope_begin();
    for (int k = 0; k < 6; k++)
        ck_assert_double_eq(max_diff(tg_grad(a.w[k]), tg_grad(b.w[k]), 0), 0);
    tg_scope_end();
    tg_dist_free(on);
    tg_dist_free(off);
    model_free(&a);
    model_free(&b);
}
END_TEST

START_TEST(a_parameter_no_rank_reaches_gets_a_zero_gradient)
{
    model m;
    model_init(&m, TG_FLOAT64, 6);
    tg_tensor *extra = tg_ones(TG_FLOAT64, 1, SHAPE(5));
    tg_set_requires_grad(extra, true);
    tg_params_add(&m.ps, NULL, "unused", extra);
    tg_release(extra);
    tg_dist *d = tg_dist_new(MPI_COMM_WORLD, &m.ps, NULL);
    dist_backward(d, &m, TG_FLOAT64);
    tg_scope_begin();
    tg_tensor *g = tg_grad(extra);
    ck_assert_ptr_nonnull(g);
    ck_assert_double_eq(tg_sum_squares(g), 0);
    tg_scope_end();
    tg_dist_free(d);
    model_free(&m);
}
END_TEST

/* ---- mistakes ------------------------------------------------------------------ */

START_TEST(a_parameter_mismatch_fails_on_every_rank_naming_it)
{
    model m;
    model_init(&m, TG_FLOAT64, 7);
    tg_tensor *odd = tg_zeros(TG_FLOAT64, 1, SHAPE(rank == world - 1 ? 9 : 8));
    tg_set_requires_grad(odd, true);
    tg_params_add(&m.ps, NULL, "head.bias", odd);
    tg_release(odd);
    tg_dist *d = tg_dist_new(MPI_COMM_WORLD, &m.ps, NULL);
    if (world == 1) { /* nothing to differ from */
        ck_assert_ptr_nonnull(d);
    } else {
        ck_assert_ptr_null(d);
        ck_assert_int_eq(tg_error_code(), TG_ERR_VALUE);
        char want[160];
        snprintf(want, sizeof want, "tg_dist_new: parameter 6 differs across ranks: rank 0 has "
                 "\"head.bias\" float64 [8], rank %d has \"head.bias\" float64 [9]", world - 1);
        ck_assert_str_eq(tg_error_message(), want);
    }
    tg_error_clear();
    tg_dist_free(d);
    model_free(&m);
}
END_TEST

START_TEST(a_rank_refusing_its_parameters_fails_every_rank)
{
    model m;
    model_init(&m, TG_FLOAT64, 8);
    tg_tensor *odd = tg_zeros(rank == world - 1 ? TG_INT64 : TG_FLOAT64, 1, SHAPE(2));
    tg_params_add(&m.ps, NULL, "steps", odd);
    tg_release(odd);
    ck_assert_ptr_null(tg_dist_new(MPI_COMM_WORLD, &m.ps, NULL));
    if (rank == world - 1) {
        ck_assert_int_eq(tg_error_code(), TG_ERR_DTYPE);
    } else {
        char want[80];
        snprintf(want, sizeof want, "tg_dist_new: rank %d refused its parameters", world - 1);
        ck_assert_str_eq(tg_error_message(), want);
    }
    tg_error_clear();
    ck_assert_ptr_null(tg_dist_new(MPI_COMM_WORLD, NULL, NULL));
    ck_assert_int_eq(tg_error_code(), TG_ERR_NULL);
    tg_error_clear();
    model_free(&m);
}
END_TEST

START_TEST(a_failed_backward_on_one_rank_fails_every_rank)
{
    model m;
    model_init(&m, TG_FLOAT64, 9);
    tg_dist *d = tg_dist_new(MPI_COMM_WORLD, &m.ps, NULL);
    tg_scope_begin();
    int lo, hi;
    my_rows(&lo, &hi);
    tg_tensor *loss = model_loss(&m, TG_FLOAT64, lo, hi, 1);
    /* the last rank's loss has no graph (it is detached) */
    if (rank == world - 1)
        loss = tg_detach(loss);
    ck_assert_int_eq(tg_dist_backward(d, loss), -1);
    ck_assert_int_eq(tg_error_code(), TG_ERR_STATE);
    if (rank != world - 1) {
        char want[80];
        snprintf(want, sizeof want, "tg_dist_backward: backward failed on rank %d", world - 1);
        ck_assert_str_eq(tg_error_message(), want);
    }
    tg_error_clear();
    tg_scope_end();
    tg_dist_free(d);
    model_free(&m);
}
END_TEST

/* ---- ZeRO stage 1 ----------------------------------------------------------------- */

static void model_copy(model *dst, const model *src)
{
    for (int k = 0; k < 6; k++) {
        double v[HID * HID];
        int64_t n = tg_numel(src->w[k]);
        tg_copy_to(src->w[k], TG_FLOAT64, v, n);
        tg_copy_from(dst->w[k], TG_FLOAT64, v, n);
    }
}

START_TEST(zero1_equals_plain_data_parallelism_after_10_steps)
{
    model plain, zero;
    model_init(&plain, TG_FLOAT64, 11);
    model_init(&zero, TG_FLOAT64, 11);
    tg_dist *dp = tg_dist_new(MPI_COMM_WORLD, &plain.ps, &(tg_dist_options){.bucket_bytes = 512});
    tg_dist *dz = tg_dist_new(MPI_COMM_WORLD, &zero.ps,
                              &(tg_dist_options){.bucket_bytes = 512, .zero1 = true});
    tg_optim *po = tg_adamw_new(&plain.ps, 1e-2, 0.9, 0.999, 1e-8, 0.01);
    tg_dist_adamw *zo = tg_dist_adamw_new(dz, 1e-2, 0.9, 0.999, 1e-8, 0.01);
    ck_assert_ptr_nonnull(zo);
    for (int step = 0; step < 10; step++) {
        model_zero_grad(&plain);
        model_zero_grad(&zero);
        dist_backward(dp, &plain, TG_FLOAT64);
        dist_backward(dz, &zero, TG_FLOAT64);
        ck_assert_int_eq(tg_optim_step(po), 0);
        ck_assert_int_eq(tg_dist_adamw_step(zo), 0);
    }
    ck_assert_int_eq(tg_dist_adamw_steps(zo), 10);
    double diff = model_diff(&zero, &plain);
    bool same = model_same_on_every_rank(&zero);
    if (world == 1) /* one rank: tg_adamw's bits */
        ck_assert_msg(diff == 0, "1 rank differs from tg_adamw by %g", diff);
    ck_assert_msg(diff <= 1e-12, "ZeRO-1 differs from plain data parallelism by %g", diff);
    ck_assert(same);
    tg_dist_adamw_free(zo);
    tg_optim_free(po);
    tg_dist_free(dp);
    tg_dist_free(dz);
    model_free(&plain);
    model_free(&zero);
}
END_TEST

START_TEST(zero1_state_bytes_fall_as_one_over_world_size)
{
    model m;
    model_init(&m, TG_FLOAT64, 12);
    tg_dist *d = tg_dist_new(MPI_COMM_WORLD, &m.ps, &(tg_dist_options){.zero1 = true});
    tg_dist_adamw *o = tg_dist_adamw_new(d, 1e-3, 0.9, 0.999, 1e-8, 0);
    int64_t whole = 2 * tg_params_numel(&m.ps) * 8, mine = tg_dist_adamw_state_bytes(o);
    double sum = (double)mine;
    ck_assert_int_eq(tg_dist_allreduce_sum(d, &sum, 1), 0);
    ck_assert_double_eq(sum, (double)whole);
    /* an even split, to one element */
    ck_assert_int_le(llabs(mine * world - whole), 16 * world);
    tg_dist_adamw_free(o);
    tg_dist_free(d);
    model_free(&m);
}
END_TEST

/* Continues training from `from` for 3 steps on rows [lo, hi) of a dist on
 * comm with a tg_dist_adamw loaded from state, into m. */
static void resume_sharded(model *m, const model *from, const tg_params *state, MPI_Comm comm,
                           int lo, int hi)
{
    model_copy(m, from);
    tg_dist *d = tg_dist_new(comm, &m->ps, &(tg_dist_options){.bucket_bytes = 256, .zero1 = true});
    tg_dist_adamw *o = tg_dist_adamw_new(d, 1e-2, 0.9, 0.999, 1e-8, 0.01);
    ck_assert_int_eq(tg_dist_adamw_load_state(o, state), 0);
    ck_assert_int_eq(tg_dist_adamw_steps(o), 3);
    for (int step = 0; step < 3; step++) {
        model_zero_grad(m);
        dist_backward_rows(d, m, TG_FLOAT64, lo, hi);
        ck_assert_int_eq(tg_dist_adamw_step(o), 0);
    }
    tg_dist_adamw_free(o);
    tg_dist_free(d);
}

/* Saved at the suite's world size (4 at most), resumed in tg_adamw, at one
 * rank, at half the world and at the whole. */
START_TEST(zero1_state_resumes_in_tg_adamw_and_at_any_world_size)
{
    model m, ref, alone, half, here;
    model_init(&m, TG_FLOAT64, 13);
    tg_dist *d = tg_dist_new(MPI_COMM_WORLD, &m.ps, &(tg_dist_options){.zero1 = true});
    tg_dist_adamw *o = tg_dist_adamw_new(d, 1e-2, 0.9, 0.999, 1e-8, 0.01);
    for (int step = 0; step < 3; step++) {
        model_zero_grad(&m);
        dist_backward(d, &m, TG_FLOAT64);
        ck_assert_int_eq(tg_dist_adamw_step(o), 0);
    }
    tg_params state = {0};
    ck_assert_int_eq(tg_dist_adamw_state(o, &state), 0);
    ck_assert_int_eq(state.count, 1 + 3 * 6);
    ck_assert_int_eq(tg_dist_adamw_state(o, &state), -1); /* "step" is there already */
    ck_assert_int_eq(tg_error_code(), TG_ERR_VALUE);
    tg_error_clear();
    /* one process with tg_adamw on the combined batch */
    model_init(&ref, TG_FLOAT64, 0);
    model_copy(&ref, &m);
    tg_optim *ro = tg_adamw_new(&ref.ps, 1e-2, 0.9, 0.999, 1e-8, 0.01);
    ck_assert_int_eq(tg_optim_load_state(ro, &state), 0);
    for (int step = 0; step < 3; step++) {
        model_zero_grad(&ref);
        reference_backward(&ref, TG_FLOAT64);
        ck_assert_int_eq(tg_optim_step(ro), 0);
    }
    /* a world of one (each rank alone), half the world (the first half of
     * the ranks) and the world it was saved at */
    model_init(&alone, TG_FLOAT64, 0);
    model_init(&half, TG_FLOAT64, 0);
    model_init(&here, TG_FLOAT64, 0);
    resume_sharded(&alone, &m, &state, MPI_COMM_SELF, 0, ROWS);
    int halves = world > 1 ? world / 2 : 1;
    MPI_Comm sub;
    MPI_Comm_split(MPI_COMM_WORLD, rank < halves ? 0 : MPI_UNDEFINED, rank, &sub);
    double half_diff = 0;
    if (sub != MPI_COMM_NULL) {
        int per = ROWS / halves;
        resume_sharded(&half, &m, &state, sub, rank * per, rank * per + per);
        half_diff = model_diff(&half, &ref);
        MPI_Comm_free(&sub);
    }
    int lo, hi;
    my_rows(&lo, &hi);
    resume_sharded(&here, &m, &state, MPI_COMM_WORLD, lo, hi);
    bool same = model_same_on_every_rank(&here);
    ck_assert_double_le(half_diff, 1e-12);
    ck_assert_msg(model_diff(&alone, &ref) == 0, "1 rank differs from tg_adamw by %g",
                  model_diff(&alone, &ref));
    ck_assert_double_le(model_diff(&here, &ref), 1e-12);
    ck_assert(same);
    tg_optim_free(ro);
    tg_params_clear(&state);
    tg_dist_adamw_free(o);
    tg_dist_free(d);
    model_free(&m);
    model_free(&ref);
    model_free(&alone);
    model_free(&half);
    model_free(&here);
}
END_TEST

START_TEST(zero1_refuses_misuse_on_every_rank)
{
    model m;
    model_init(&m, TG_FLOAT64, 14);
    tg_dist *plain = tg_dist_new(MPI_COMM_WORLD, &m.ps, NULL);
    ck_assert_ptr_null(tg_dist_adamw_new(plain, 1e-3, 0.9, 0.999, 1e-8, 0));
    ck_assert_int_eq(tg_error_code(), TG_ERR_STATE);
    tg_error_clear();
    tg_dist_free(plain);
    tg_dist *d = tg_dist_new(MPI_COMM_WORLD, &m.ps, &(tg_dist_options){.zero1 = true});
    ck_assert_ptr_null(tg_dist_adamw_new(d, 1e-3, 1.5, 0.999, 1e-8, 0));
    ck_assert_int_eq(tg_error_code(), TG_ERR_VALUE);
    tg_error_clear();
    tg_dist_adamw *o = tg_dist_adamw_new(d, 1e-3, 0.9, 0.999, 1e-8, 0);
    /* no gradients yet: nothing moves, on any rank */
    double before[HID * HID];
    tg_copy_to(m.w[2], TG_FLOAT64, before, HID * HID);
    ck_assert_int_eq(tg_dist_adamw_step(o), -1);
    ck_assert_int_eq(tg_error_code(), TG_ERR_STATE);
    tg_error_clear();
    double after[HID * HID];
    tg_copy_to(m.w[2], TG_FLOAT64, after, HID * HID);
    ck_assert_mem_eq(before, after, sizeof before);
    ck_assert_int_eq(tg_dist_adamw_steps(o), 0);
    tg_params bad = {0};
    ck_assert_int_eq(tg_dist_adamw_load_state(o, &bad), -1);
    ck_assert_int_eq(tg_error_code(), TG_ERR_VALUE);
    tg_error_clear();
    tg_dist_adamw_free(o);
    tg_dist_free(d);
    model_free(&m);
}
END_TEST

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    tg_set_num_threads(1);
    Suite *s = suite_create("dist");
    TCase *train = tcase_checked("train");
    tcase_add_test(train, data_parallel_float64_matches_the_combined_batch_after_10_steps);
    tcase_add_test(train, data_parallel_float32_gradients_match_within_relative_tolerance);
    tcase_add_test(train, uneven_shards_weighted_by_the_summed_counts_match_the_combined_batch);
    tcase_add_test(train, float32_and_float64_parameters_reduce_in_buckets_of_their_own);
    tcase_add_test(train, allreduce_sum_gives_every_rank_the_same_sum);
    tcase_add_test(train, broadcast_makes_replicas_from_different_seeds_identical);
    tcase_add_test(train, clip_grad_norm_clips_the_averaged_gradient);
    tcase_add_test(train, overlap_starts_reduces_while_backward_runs);
    tcase_add_test(train, a_parameter_no_rank_reaches_gets_a_zero_gradient);
    suite_add_tcase(s, train);
    TCase *bad = tcase_checked("mistakes");
    tcase_add_test(bad, a_parameter_mismatch_fails_on_every_rank_naming_it);
    tcase_add_test(bad, a_rank_refusing_its_parameters_fails_every_rank);
    tcase_add_test(bad, a_failed_backward_on_one_rank_fails_every_rank);
    suite_add_tcase(s, bad);
    TCase *zero = tcase_checked("zero1");
    tcase_add_test(zero, zero1_equals_plain_data_parallelism_after_10_steps);
    tcase_add_test(zero, zero1_state_bytes_fall_as_one_over_world_size);
    tcase_add_test(zero, zero1_state_resumes_in_tg_adamw_and_at_any_world_size);
    tcase_add_test(zero, zero1_refuses_misuse_on_every_rank);
    suite_add_tcase(s, zero);
    /* no fork: the children of a forked test could not use MPI */
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    /* every rank learns whether any rank failed */
    int any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any ? 1 : 0;
}
