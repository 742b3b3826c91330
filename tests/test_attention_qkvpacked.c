/* tg_attention_qkvpacked, attention on the heads of one packed [B, T, 3 H E]
 * projection: against the basic ops it replaces (split the heads out, score,
 * mask, softmax, dropout, weigh, merge them back), against tg_attention on
 * the split-out heads bit for bit, and its errors. */
#include "testutil.h"

/* Part i (0: q, 1: k, 2: v) of qkv [B, T, 3 H E] as heads [B, H, T, E]. */
static tg_tensor *part(const tg_tensor *qkv, int i, int64_t H)
{
    int64_t B = tg_shape(qkv)[0], T = tg_shape(qkv)[1], E = tg_shape(qkv)[2] / (3 * H);
    tg_tensor *x = tg_narrow(qkv, 2, i * H * E, H * E);
    return tg_transpose(tg_reshape(x, 4, SHAPE(B, T, H, E)), 1, 2);
}

/* Heads [B, H, T, E] merged back into [B, T, H E]. */
static tg_tensor *merge(const tg_tensor *y)
{
    const int64_t *s = tg_shape(y);
    return tg_reshape(tg_transpose(y, 1, 2), 3, SHAPE(s[0], s[2], s[1] * s[3]));
}

/* The reference from basic ops: matmul, masked_fill, softmax, dropout. */
static tg_tensor *composed(const tg_tensor *qkv, int64_t H, bool causal, double p, uint64_t seed)
{
    tg_tensor *q = part(qkv, 0, H), *k = part(qkv, 1, H), *v = part(qkv, 2, H);
    int64_t T = tg_shape(qkv)[1], E = tg_shape(q)[3];
    tg_tensor *s = tg_mul_scalar(tg_matmul(q, tg_transpose(k, -2, -1)), 1.0 / sqrt((double)E));
    if (causal) {
        tg_tensor *mask = tg_zeros(TG_BOOL, 2, SHAPE(T, T));
        bool *m = tg_data(mask);
        for (int64_t i = 0; i < T; i++)
            for (int64_t j = i + 1; j < T; j++)
                m[i * T + j] = true;
        s = tg_masked_fill(s, mask, -INFINITY);
    }
    tg_rng *rng = tg_rng_new(seed);
    tg_tensor *w = tg_dropout(tg_softmax(s, -1), p, true, rng);
    tg_rng_free(rng);
    return merge(tg_matmul(w, v));
}

/* kind 0: the packed op; 1: tg_attention on the split-out heads; 2: composed. */
static tg_tensor *attend(int kind, const tg_tensor *qkv, int64_t H, bool causal, double p,
                         uint64_t seed)
{
    if (kind == 2)
        return composed(qkv, H, causal, p, seed);
    tg_rng *rng = tg_rng_new(seed);
    tg_tensor *y = kind == 0 ? tg_attention_qkvpacked(qkv, H, causal, 0, p, rng)
                             : merge(tg_attention(part(qkv, 0, H), part(qkv, 1, H),
                                                  part(qkv, 2, H), NULL, causal, 0, p, rng));
    tg_rng_free(rng);
    return y;
}

/* Runs attend(kind) on qkv and backpropagates w: the output, and qkv's
 * gradient in *grad (both scope-owned). */
static tg_tensor *run(int kind, tg_tensor *qkv, int64_t H, bool causal, double p,
                      const tg_tensor *w, tg_tensor **grad)
{
    tg_zero_grad(qkv);
    tg_tensor *y = attend(kind, qkv, H, causal, p, 7);
    ck_assert_msg(y != NULL, "%s", tg_error_message());
    ck_assert_int_eq(tg_backward(y, w), 0);
    *grad = tg_grad(qkv);
    ck_assert_ptr_nonnull(*grad);
    return y;
}

static void assert_close(const char *what, const tg_tensor *a, const tg_tensor *b, double tol)
{
    ck_assert_int_eq(tg_ndim(a), tg_ndim(b));
    for (int d = 0; d < tg_ndim(a); d++)
        ck_assert_int_eq(tg_shape(a)[d], tg_shape(b)[d]);
    double *x = values_of(a), *y = values_of(b);
    for (int64_t i = 0; i < tg_numel(a); i++)
        ck_assert_msg(fabs(x[i] - y[i]) <= tol * (1 + fabs(y[i])), "%s[%lld]: %.17g vs %.17g",
                      what, (long long)i, x[i], y[i]);
    free(x);
    free(y);
}

/* Output and gradient of kind a against kind b on qkv [B, T, 3 H E]. */
static void check_pair(int a, int b, tg_dtype dt, int64_t B, int64_t T, int64_t H, int64_t E,
                       bool causal, double p, double tol)
{
    tg_scope_begin();
    tg_rng *rng = tg_rng_new((uint64_t)(B * 1000 + T * 10 + H));
    tg_tensor *qkv = tg_randn(rng, dt, 3, SHAPE(B, T, 3 * H * E));
    tg_tensor *w = tg_randn(rng, dt, 3, SHAPE(B, T, H * E));
    tg_rng_free(rng);
    tg_set_requires_grad(qkv, true);
    tg_tensor *ga, *gb;
    tg_tensor *ya = run(a, qkv, H, causal, p, w, &ga), *yb = run(b, qkv, H, causal, p, w, &gb);
    char what[128];
    snprintf(what, sizeof what, "out %s B=%lld T=%lld H=%lld E=%lld causal=%d p=%g",
             tg_dtype_name(dt), (long long)B, (long long)T, (long long)H, (long long)E, causal, p);
    assert_close(what, ya, yb, tol);
    what[0] = 'd', what[1] = 'x', what[2] = ' ';
    assert_close(what, ga, gb, tol);
    tg_scope_end();
}

/* T across the 64-row tile (one tile keeps its weights, more recompute them). */
static const int64_t shapes[][4] = {{1, 1, 1, 1}, {2, 5, 2, 3}, {2, 64, 3, 8}, {1, 65, 2, 16},
                                    {2, 130, 3, 5}, {3, 7, 1, 33}};

START_TEST(packed_matches_composition_float64)
{
    for (int i = 0; i < 6; i++)
        for (int c = 0; c < 2; c++)
            for (int d = 0; d < 2; d++)
                check_pair(0, 2, TG_FLOAT64, shapes[i][0], shapes[i][1], shapes[i][2],
                           shapes[i][3], c, d ? 0.2 : 0, 1e-12);
}
END_TEST

START_TEST(packed_matches_composition_float32)
{
    for (int i = 0; i < 6; i++)
        check_pair(0, 2, TG_FLOAT32, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3],
                   i % 2, 0, 2e-5);
}
END_TEST

/* The same kernels on the same layouts: the same bits as tg_attention on
 * the heads split out with views, whose three gradients add into zeros. */
START_TEST(packed_gives_the_bits_of_split_heads)
{
    for (int i = 0; i < 6; i++)
        for (int d = 0; d < 2; d++)
            check_pair(0, 1, TG_FLOAT32, shapes[i][0], shapes[i][1], shapes[i][2],
                       shapes[i][3], true, d ? 0.25 : 0, 0);
}
END_TEST

START_TEST(packed_reads_a_strided_qkv)
{
    tg_scope_begin();
    tg_rng *rng = tg_rng_new(3);
    tg_tensor *stored = tg_randn(rng, TG_FLOAT64, 3, SHAPE(12, 70, 2)); /* qkv^T */
    tg_rng_free(rng);
    tg_tensor *qkv = tg_transpose(stored, 0, 2);
    ck_assert(!tg_is_contiguous(qkv));
    tg_tensor *y = tg_attention_qkvpacked(qkv, 2, true, 0, 0, NULL);
    assert_close("strided out", y, composed(tg_contiguous(qkv), 2, true, 0, 0), 1e-12);
    tg_scope_end();
}
END_TEST

START_TEST(packed_handles_empty_shapes)
{
    tg_scope_begin();
    const int64_t shapes0[][3] = {{0, 4, 6}, {2, 0, 6}, {2, 3, 0}};
    for (int i = 0; i < 3; i++) {
        tg_tensor *qkv = tg_zeros(TG_FLOAT32, 3, shapes0[i]);
        tg_set_requires_grad(qkv, true);
        tg_tensor *y = tg_attention_qkvpacked(qkv, 1, true, 0, 0, NULL);
        ck_assert_msg(y != NULL, "%s", tg_error_message());
        ck_assert_shape(y, shapes0[i][0], shapes0[i][1], shapes0[i][2] / 3);
        ck_assert_int_eq(tg_backward(tg_sum(y, NULL, 0, false), NULL), 0);
        ck_assert_shape(tg_grad(qkv), shapes0[i][0], shapes0[i][1], shapes0[i][2]);
    }
    tg_scope_end();
}
END_TEST

START_TEST(packed_rejects_bad_arguments)
{
    tg_scope_begin();
    const char *fn = "tg_attention_qkvpacked";
    tg_tensor *qkv = tg_zeros(TG_FLOAT32, 3, SHAPE(2, 3, 12));
    ck_assert_ptr_null(tg_attention_qkvpacked(NULL, 2, false, 0, 0, NULL));
    ck_assert_error(TG_ERR_NULL, fn);
    ck_assert_ptr_null(tg_attention_qkvpacked(tg_zeros(TG_INT64, 3, SHAPE(2, 3, 12)), 2, false,
                                              0, 0, NULL));
    ck_assert_error(TG_ERR_DTYPE, fn);
    ck_assert_ptr_null(tg_attention_qkvpacked(tg_zeros(TG_FLOAT32, 2, SHAPE(3, 12)), 2, false, 0,
                                              0, NULL));
    ck_assert_error(TG_ERR_SHAPE, fn, "[3,12]");
    ck_assert_ptr_null(tg_attention_qkvpacked(qkv, 3, false, 0, 0, NULL));
    ck_assert_error(TG_ERR_SHAPE, fn, "[2,3,12]", "3");
    ck_assert_ptr_null(tg_attention_qkvpacked(tg_zeros(TG_FLOAT32, 3, SHAPE(2, 3, 13)), 1, false,
                                              0, 0, NULL));
    ck_assert_error(TG_ERR_SHAPE, fn, "[2,3,13]");
    ck_assert_ptr_null(tg_attention_qkvpacked(qkv, 5, false, 0, 0, NULL));
    ck_assert_error(TG_ERR_SHAPE, fn, "heads = 5", "4 columns");
    ck_assert_ptr_null(tg_attention_qkvpacked(tg_zeros(TG_FLOAT32, 3, SHAPE(2, 3, 0)), INT64_MAX,
                                              false, 0, 0, NULL));
    ck_assert_error(TG_ERR_SHAPE, fn, "heads", "0 columns");
    ck_assert_ptr_null(tg_attention_qkvpacked(qkv, 0, false, 0, 0, NULL));
    ck_assert_error(TG_ERR_VALUE, fn, "heads");
    ck_assert_ptr_null(tg_attention_qkvpacked(qkv, -2, false, 0, 0, NULL));
    ck_assert_error(TG_ERR_VALUE, fn, "heads");
    ck_assert_ptr_null(tg_attention_qkvpacked(qkv, 2, false, NAN, 0, NULL));
    ck_assert_error(TG_ERR_VALUE, fn, "scale");
    tg_rng *rng = tg_rng_new(1);
    ck_assert_ptr_null(tg_attention_qkvpacked(qkv, 2, false, 0, 1.0, rng));
    ck_assert_error(TG_ERR_VALUE, fn, "dropout_p");
    tg_rng_free(rng);
    ck_assert_ptr_null(tg_attention_qkvpacked(qkv, 2, false, 0, 0.1, NULL));
    ck_assert_error(TG_ERR_NULL, fn, "rng");
    tg_scope_end();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("attention_qkvpacked");
    TCase *tc = tcase_checked("attention_qkvpacked");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, packed_matches_composition_float64);
    tcase_add_test(tc, packed_matches_composition_float32);
    tcase_add_test(tc, packed_gives_the_bits_of_split_heads);
    tcase_add_test(tc, packed_reads_a_strided_qkv);
    tcase_add_test(tc, packed_handles_empty_shapes);
    tcase_add_test(tc, packed_rejects_bad_arguments);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
