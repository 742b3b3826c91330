/* The thin bfloat16 products on cached weights (gemm_bf16_thin.h,
 * bf16_weights.h): the kernels on the path named by the program's argument
 * (one meson test a path, SKIP where the CPU lacks it) against
 * float64 products of the rounded operands; the copies made at the thin
 * threshold only, never read after the weight changed, gone with the
 * storage, absent at float32; and a Llama's bf16 greedy tokens the same
 * with and without them. */
#include <pthread.h>

#include "testutil.h"
#include "bf16_testutil.h"

#include <tensorgrad/module.h>

#include "bf16.h"
#include "bf16_weights.h"
#include "gemm_bf16_thin.h"

#include <stdlib.h>
#include <string.h>

#define END_PRECISION                                                         \
    do {                                                                      \
        tg_set_matmul_precision(TG_PRECISION_FLOAT32);                        \
        ck_assert_int_eq(tg_scope_end(), 0);                                  \
    } while (0)

/* The thin paths, one meson test each (tests/meson.build): the path cases
 * force the one the program was started for, which main has seen the CPU
 * has (widening and vdpbf16ps need the AVX-512 kernels). */
#define N_PATHS 3
static const char *const path_names[N_PATHS] = {"portable", "avx512", "avx512bf16"};
static const enum tg__bf16_thin_path paths[N_PATHS] = {TG_BF16_THIN_PORTABLE, TG_BF16_THIN_WIDEN,
                                                       TG_BF16_THIN_DPBF16};
static int the_path;


/* C = alpha A op(B) + beta C by tg__sgemm_bf16_thin, B given as bfloat16,
 * padded leading dims, against float64 of the rounded operands (float32
 * accumulation's tolerance on the sum of |products|); C's padding kept. */
static void check_thin(int64_t m, int64_t n, int64_t k, bool tb, float alpha, float beta)
{
    int64_t br = tb ? n : k, bc = tb ? k : n, lda = k + 3, ldb = bc + 5, ldc = n + 2;
    size_t na = (size_t)(m * lda), nb = (size_t)(br * ldb), nc = (size_t)(m * ldc);
    float *a = malloc(na * sizeof *a), *bf = malloc(nb * sizeof *bf);
    float *c = malloc(nc * sizeof *c), *c0 = malloc(nc * sizeof *c0);
    uint16_t *b = malloc(nb * sizeof *b);
    fill(a, na, (uint32_t)(m * 31 + k));
    fill(bf, nb, (uint32_t)(n * 17 + k));
    fill(c0, nc, 99);
    for (size_t i = 0; i < nb; i++)
        b[i] = tg__bf16_from_f32(bf[i]);
    memcpy(c, c0, nc * sizeof *c);
    ck_assert_int_eq(tg__sgemm_bf16_thin(tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), 0);
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            double s = 0, mag = 0;
            for (int64_t p = 0; p < k; p++) {
                double y = tg__f32_from_bf16(tb ? b[j * ldb + p] : b[p * ldb + j]);
                s += rounded(a[i * lda + p]) * y;
                mag += fabs(rounded(a[i * lda + p]) * y);
            }
            double old = beta == 0 ? 0 : beta * (double)c0[i * ldc + j];
            double want = alpha * s + old, got = c[i * ldc + j];
            double scale = fabs(alpha) * mag + fabs(old) + 1e-30;
            ck_assert_msg(fabs(got - want) <= 2e-6 * (1 + sqrt((double)k)) * scale,
                          "%lldx%lldx%lld tb=%d (%lld,%lld): %.9g vs %.9g", (long long)m,
                          (long long)n, (long long)k, tb, (long long)i, (long long)j, got, want);
        }
        for (int64_t j = n; j < ldc; j++)
            ck_assert(c[i * ldc + j] == c0[i * ldc + j]);
    }
    free(a), free(bf), free(b), free(c), free(c0);
}

/* Tiny; odd n and k around the 16- and 32-wide loads (short last pieces);
 * fewer columns than a block of 8 or 4; more rows than one group of four;
 * long enough a reduction and wide enough for two threads. */
static const int64_t shapes[][3] = {
    {1, 1, 1},   {1, 7, 15},  {2, 17, 16},  {3, 33, 17},  {4, 100, 33}, {1, 9, 385},
    {2, 3, 31},  {4, 5, 64},  {5, 19, 31},  {8, 40, 65},  {1, 1000, 384}, {3, 257, 1030},
};
#define N_SHAPES ((int)(sizeof shapes / sizeof shapes[0]))

START_TEST(thin_kernel_matches_float64_of_rounded_operands)
{
    ck_assert(tg__bf16_thin_force(paths[the_path]));
    for (int s = 0; s < N_SHAPES; s++)
        for (int tb = 0; tb < 2; tb++)
            check_thin(shapes[s][0], shapes[s][1], shapes[s][2], tb, 1.0f, 0.0f);
    check_thin(3, 45, 100, true, -0.75f, 0.5f);
    check_thin(4, 70, 37, false, 2.0f, -1.0f);
    ck_assert(tg__bf16_thin_force(TG_BF16_THIN_AUTO));
}
END_TEST

/* ---- through tg_affine ------------------------------------------------------ */

static tg_tensor *uniform(int ndim, const int64_t *shape, uint32_t seed)
{
    int64_t n = tg__numel(ndim, shape);
    float *v = malloc((size_t)n * sizeof *v);
    fill(v, (size_t)n, seed);
    tg_tensor *t = tg_from_data(TG_FLOAT32, ndim, shape, v);
    free(v);
    ck_assert_ptr_nonnull(t);
    return t;
}

/* y = x w^T (+ b) against float64 of the operands rounded (bf16) or not. */
static void check_affine(const tg_tensor *y, const tg_tensor *x, const tg_tensor *w,
                         const tg_tensor *b, bool bf16)
{
    int64_t n = tg_shape(w)[0], k = tg_shape(w)[1], rows = tg_numel(x) / k;
    double *xv = values_of(x), *wv = values_of(w), *yv = values_of(y);
    double *bv = b ? values_of(b) : NULL;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0, mag = 0;
            for (int64_t p = 0; p < k; p++) {
                double u = xv[i * k + p], v = wv[j * k + p];
                if (bf16)
                    u = rounded((float)u), v = rounded((float)v);
                s += u * v;
                mag += fabs(u * v);
            }
            s += bv ? bv[j] : 0;
            ck_assert_msg(fabs(yv[i * n + j] - s) <= 1e-5 * (mag + 1),
                          "(%lld, %lld): %.9g vs %.9g", (long long)i, (long long)j,
                          yv[i * n + j], s);
        }
    free(xv), free(wv), free(yv), free(bv);
}

START_TEST(affine_keeps_a_copy_at_the_thin_threshold_only)
{
    tg_scope_begin();
    tg_set_matmul_precision(TG_PRECISION_BF16);
    tg_tensor *w = uniform(2, SHAPE(37, 45), 1), *b = uniform(1, SHAPE(37), 2);
    /* five rows: past the thin kernel, rounded as the product runs */
    tg_tensor *x5 = uniform(2, SHAPE(5, 45), 3);
    check_affine(tg_affine(x5, w, b), x5, w, b, true);
    ck_assert_int_eq(tg__bf16_weights_count(NULL), 0);
    /* four rows ([2, 2] of them): a copy of w, half w's bytes */
    tg_tensor *x4 = uniform(3, SHAPE(2, 2, 45), 4);
    size_t bytes = 0;
    check_affine(tg_affine(x4, w, b), x4, w, b, true);
    ck_assert_int_eq(tg__bf16_weights_count(&bytes), 1);
    ck_assert_uint_eq(bytes, 37 * 45 * 2);
    /* read again, not made again; without a bias too */
    tg_tensor *x1 = uniform(1, SHAPE(45), 5);
    check_affine(tg_affine(x1, w, NULL), x1, w, NULL, true);
    ck_assert_int_eq(tg__bf16_weights_count(NULL), 1);
    END_PRECISION;
    ck_assert_int_eq(tg__bf16_weights_count(NULL), 0); /* gone with w's storage */
}
END_TEST

START_TEST(a_view_of_a_weight_reads_its_own_rows_of_the_copy)
{
    tg_scope_begin();
    tg_set_matmul_precision(TG_PRECISION_BF16);
    tg_tensor *whole = uniform(2, SHAPE(60, 33), 6);
    tg_tensor *top = tg_narrow(whole, 0, 0, 25), *rest = tg_narrow(whole, 0, 25, 35);
    tg_tensor *x = uniform(2, SHAPE(3, 33), 7);
    check_affine(tg_affine(x, top, NULL), x, top, NULL, true);
    check_affine(tg_affine(x, rest, NULL), x, rest, NULL, true);
    ck_assert_int_eq(tg__bf16_weights_count(NULL), 1); /* one storage, one copy */
    END_PRECISION;
}
END_TEST

START_TEST(a_weight_written_in_place_is_never_read_stale)
{
    tg_scope_begin();
    tg_set_matmul_precision(TG_PRECISION_BF16);
    tg_tensor *w = uniform(2, SHAPE(20, 30), 8), *x = uniform(2, SHAPE(1, 30), 9);
    check_affine(tg_affine(x, w, NULL), x, w, NULL, true);
    ck_assert_int_eq(tg__bf16_weights_count(NULL), 1);
    /* through tg_data: the copy goes at once, the next product reads the new values */
    float *p = tg_data(w);
    ck_assert_int_eq(tg__bf16_weights_count(NULL), 0);
    for (int i = 0; i < 600; i++)
        p[i] = -2.0f * p[i] + 0.25f;
    check_affine(tg_affine(x, w, NULL), x, w, NULL, true);
    /* an optimizer step */
    tg_set_requires_grad(w, true);
    tg_params ps = {0};
    ck_assert_int_eq(tg_params_add(&ps, NULL, "w", w), 0);
    tg_optim *opt = tg_sgd_new(&ps, 0.5, 0.0, 0.0);
    ck_assert_ptr_nonnull(opt);
    double *before = values_of(w);
    ck_assert_int_eq(tg_backward(tg_sum(tg_affine(uniform(2, SHAPE(2, 30), 10), w, NULL), NULL,
                                        0, false), NULL), 0);
    ck_assert_int_eq(tg_optim_step(opt), 0);
    ck_assert_int_eq(tg__bf16_weights_count(NULL), 0);
    tg_set_grad_enabled(false);
    tg_tensor *y = tg_affine(x, w, NULL);
    tg_set_grad_enabled(true);
    check_affine(y, x, w, NULL, true);
    double *after = values_of(w), moved = 0;
    for (int i = 0; i < 600; i++)
        moved += fabs(after[i] - before[i]);
    ck_assert_double_gt(moved, 0.1);
    free(before), free(after);
    tg_optim_free(opt);
    tg_params_clear(&ps);
    END_PRECISION;
}
END_TEST

START_TEST(float32_precision_makes_no_copy)
{
    tg_scope_begin();
    tg_tensor *w = uniform(2, SHAPE(20, 30), 11), *x = uniform(2, SHAPE(1, 30), 12);
    check_affine(tg_affine(x, w, NULL), x, w, NULL, false);
    check_affine(tg_gelu_affine(tg_zeros(TG_FLOAT32, 2, SHAPE(2, 30)), TG_GELU_TANH, w, NULL),
                 tg_zeros(TG_FLOAT32, 2, SHAPE(2, 30)), w, NULL, false);
    ck_assert_int_eq(tg__bf16_weights_count(NULL), 0);
    END_PRECISION;
}
END_TEST

START_TEST(release_cached_memory_drops_the_copies)
{
    tg_scope_begin();
    tg_set_matmul_precision(TG_PRECISION_BF16);
    tg_tensor *w = uniform(2, SHAPE(20, 30), 13), *x = uniform(2, SHAPE(2, 30), 14);
    check_affine(tg_affine(x, w, NULL), x, w, NULL, true);
    ck_assert_int_eq(tg__bf16_weights_count(NULL), 1);
    tg_release_cached_memory();
    ck_assert_int_eq(tg__bf16_weights_count(NULL), 0);
    check_affine(tg_affine(x, w, NULL), x, w, NULL, true); /* made again */
    ck_assert_int_eq(tg__bf16_weights_count(NULL), 1);
    END_PRECISION;
}
END_TEST

/* Threads racing to make and read one weight's copy: one storage, a tensor
 * of it per thread (a tensor's reference count is one thread's at a time;
 * the copy is the storage's, shared). */
typedef struct {
    const tg_tensor *w;
    uint32_t seed;
    int bad;
} race_ctx;

static void *race(void *arg)
{
    race_ctx *r = arg;
    tg_set_matmul_precision(TG_PRECISION_BF16);
    int64_t k = tg_shape(r->w)[1], n = tg_shape(r->w)[0];
    for (int it = 0; it < 20; it++) {
        tg_scope_begin();
        tg_tensor *x = uniform(2, SHAPE(1, k), r->seed + (uint32_t)it);
        tg_tensor *y = tg_affine(x, r->w, NULL);
        double *xv = values_of(x), *wv = values_of(r->w), *yv = values_of(y);
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t p = 0; p < k; p++)
                s += rounded((float)xv[p]) * rounded((float)wv[j * k + p]);
            r->bad += fabs(yv[j] - s) > 1e-4;
        }
        free(xv), free(wv), free(yv);
        tg_scope_end();
        if (it % 5 == 4)
            tg_release_cached_memory(); /* drops the copy while others read it */
    }
    tg_set_matmul_precision(TG_PRECISION_FLOAT32);
    return NULL;
}

START_TEST(threads_share_one_weight_safely)
{
    tg_tensor *w = uniform(2, SHAPE(300, 200), 15);
    tg_tensor *views[3] = {tg_detach(w), tg_detach(w), tg_detach(w)};
    race_ctx r[3] = {{views[0], 100, 0}, {views[1], 200, 0}, {views[2], 300, 0}};
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, race, &r[i]), 0);
    for (int i = 0; i < 3; i++) {
        pthread_join(t[i], NULL);
        ck_assert_int_eq(r[i].bad, 0);
        tg_release(views[i]);
    }
    tg_release(w);
    ck_assert_int_eq(tg__bf16_weights_count(NULL), 0);
}
END_TEST

/* ---- generation ---------------------------------------------------------------- */

static void llama_tokens(bool copies, int64_t *out, int64_t n)
{
    const tg_llama_config cfg = {.vocab_size = 13, .block_size = 16, .n_layer = 2, .n_head = 2,
                                 .n_kv_head = 1, .n_embd = 32, .hidden_size = 48,
                                 .rope_theta = 10000, .norm_eps = 1e-5,
                                 .tie_embeddings = true, .rope_pairing = TG_ROPE_HALF};
    tg_rng *rng = tg_rng_new(21);
    tg_llama *m = tg_llama_new(&cfg, TG_FLOAT32, rng);
    ck_assert_ptr_nonnull(m);
    tg_params ps = {0};
    ck_assert_int_eq(tg_llama_params(m, &ps), 0);
    for (int i = 0; i < ps.count; i++) /* weights large enough for confident logits */
        tg_scale_in_place(ps.tensors[i], strstr(ps.names[i], "norm") ? 1.0 : 8.0);
    tg_params_clear(&ps);
    bool was = tg__bf16_weights_enable(copies), grad = tg_set_grad_enabled(false);
    tg_set_matmul_precision(TG_PRECISION_BF16);
    const int64_t prompt[] = {1, 5, 2};
    tg_sample_options o = {.greedy = true, .slide = true};
    ck_assert_int_eq(tg_llama_generate(m, prompt, 3, n - 3, &o, NULL, out), 0);
    ck_assert_int_eq(tg__bf16_weights_count(NULL), copies ? 1 + 2 * 7 : 0);
    tg_set_matmul_precision(TG_PRECISION_FLOAT32);
    tg_set_grad_enabled(grad);
    tg__bf16_weights_enable(was);
    tg_llama_free(m);
    tg_rng_free(rng);
}

START_TEST(llama_bf16_greedy_tokens_are_the_same_with_the_copies)
{
    ck_assert(tg__bf16_thin_force(paths[the_path]));
    enum { N = 24 };
    int64_t with[N], without[N];
    llama_tokens(true, with, N);
    llama_tokens(false, without, N);
    bool seen[13] = {false};
    int distinct = 0;
    for (int i = 0; i < N; i++) {
        ck_assert_msg(with[i] == without[i], "token %d: %lld with the copies, %lld without", i,
                      (long long)with[i], (long long)without[i]);
        distinct += !seen[with[i]];
        seen[with[i]] = true;
    }
    ck_assert_int_ge(distinct, 3); /* so that the comparison means something */
    ck_assert_int_eq(tg__bf16_weights_count(NULL), 0);
    ck_assert(tg__bf16_thin_force(TG_BF16_THIN_AUTO));
}
END_TEST

int main(int argc, char **argv)
{
    the_path = test_path_arg(argc, argv, path_names, N_PATHS);
    if (the_path >= 0 && !tg__bf16_thin_force(paths[the_path]))
        return skip_path("bf16_weights", path_names[the_path]);
    tg__bf16_thin_force(TG_BF16_THIN_AUTO);
    Suite *s = suite_create("bf16_weights");
    if (the_path >= 0) {
        TCase *kern = tcase_checked(path_names[the_path]);
        tcase_set_timeout(kern, 60);
        tcase_add_test(kern, thin_kernel_matches_float64_of_rounded_operands);
        tcase_add_test(kern, llama_bf16_greedy_tokens_are_the_same_with_the_copies);
        suite_add_tcase(s, kern);
        return run_suite(s);
    }
    TCase *cache = tcase_create("copies");
    tcase_add_checked_fixture(cache, leak_setup, leak_teardown);
    tcase_add_test(cache, affine_keeps_a_copy_at_the_thin_threshold_only);
    tcase_add_test(cache, a_view_of_a_weight_reads_its_own_rows_of_the_copy);
    tcase_add_test(cache, a_weight_written_in_place_is_never_read_stale);
    tcase_add_test(cache, float32_precision_makes_no_copy);
    tcase_add_test(cache, release_cached_memory_drops_the_copies);
    tcase_add_test(cache, threads_share_one_weight_safely);
    suite_add_tcase(s, cache);
    return run_suite(s);
}
