/* Scaled dot-product attention, the formula MultiheadAttention and the GPT
 * share: values and weights against a naive loop, masks, causality,
 * gradients and errors. */
#include "testutil.h"

/* ---- tg_scaled_dot_product_attention ------------------------------------------------ */

/* out[b, i] = sum_j w[b, i, j] v[b, j] with w[b, i] = softmax_j(scale q[b, i].k[b, j]
 * + mask[i, j]) (mask [l, s] or NULL; a row of -inf gets zero weights).
 * q [nb, l, e], k [nb, s, e], v [nb, s, ev]. */
static void ref_sdpa(const double *q, const double *k, const double *v, const double *mask,
                     int64_t nb, int64_t l, int64_t s, int64_t e, int64_t ev, double scale,
                     double *out, double *w)
{
    for (int64_t b = 0; b < nb; b++)
        for (int64_t i = 0; i < l; i++) {
            double *wr = w + (b * l + i) * s, mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < s; j++) {
                double d = 0;
                for (int64_t c = 0; c < e; c++)
                    d += q[(b * l + i) * e + c] * k[(b * s + j) * e + c];
                wr[j] = scale * d + (mask ? mask[i * s + j] : 0);
                mx = fmax(mx, wr[j]);
            }
            for (int64_t j = 0; j < s; j++) {
                wr[j] = mx == -INFINITY ? 0 : exp(wr[j] - mx);
                sum += wr[j];
            }
            for (int64_t j = 0; j < s; j++)
                wr[j] = sum > 0 ? wr[j] / sum : 0;
            for (int64_t c = 0; c < ev; c++) {
                double acc = 0;
                for (int64_t j = 0; j < s; j++)
                    acc += wr[j] * v[(b * s + j) * ev + c];
                out[(b * l + i) * ev + c] = acc;
            }
        }
}

/* Runs sdpa on q [2,3,4], k [2,5,4] (a transposed view), v [2,5,3] and
 * compares with ref_sdpa under the given float mask [3, 5] (or none). */
static void check_sdpa(tg_dtype dt, const double *mask_vals, double scale, double tol)
{
    tg_rng *rng = tg_rng_new(21);
    tg_tensor *q = tg_randn(rng, dt, 3, SHAPE(2, 3, 4));
    tg_tensor *kt = tg_randn(rng, dt, 3, SHAPE(2, 4, 5));
    tg_tensor *k = tg_transpose(kt, 1, 2);
    tg_tensor *v = tg_randn(rng, dt, 3, SHAPE(2, 5, 3));
    tg_tensor *mask = mask_vals ? make(dt, 2, SHAPE(3, 5), mask_vals) : NULL;
    double *qv = values_of(q), *kv = values_of(k), *vv = values_of(v);
    double want[2 * 3 * 3], want_w[2 * 3 * 5];
    ref_sdpa(qv, kv, vv, mask_vals, 2, 3, 5, 4, 3, scale > 0 ? scale : 0.5, want, want_w);
    tg_tensor *w = NULL;
    tg_tensor *out = tg_scaled_dot_product_attention(q, k, v, mask, 0, false, scale, NULL, &w);
    ck_assert_shape(out, 2, 3, 3);
    ck_assert_shape(w, 2, 3, 5);
    assert_values(out, want, 18, tol);
    assert_values(w, want_w, 30, tol);
    free(qv);
    free(kv);
    free(vv);
    tg_release(out);
    tg_release(w);
    tg_release(q);
    tg_release(kt);
    tg_release(k);
    tg_release(v);
    tg_release(mask);
    tg_rng_free(rng);
}

START_TEST(sdpa_matches_softmax_of_scaled_scores_times_v)
{
    check_sdpa(TG_FLOAT64, NULL, 0, 1e-12); /* scale 0: 1/sqrt(4) */
    check_sdpa(TG_FLOAT32, NULL, 0, 1e-5);
    check_sdpa(TG_FLOAT64, NULL, 0.8, 1e-12);
}
END_TEST

START_TEST(sdpa_float_mask_is_added_and_minus_inf_rows_give_zeros)
{
    const double mask[15] = {0, -1, 0.5, 0, -INFINITY, -2, 0, 0, 1, 0,
                             -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    check_sdpa(TG_FLOAT64, mask, 0, 1e-12);
    check_sdpa(TG_FLOAT32, mask, 0, 1e-5);
}
END_TEST

START_TEST(sdpa_is_causal_equals_the_bool_causal_mask)
{
    tg_rng *rng = tg_rng_new(4);
    tg_tensor *q = tg_randn(rng, TG_FLOAT64, 3, SHAPE(2, 4, 3));
    tg_tensor *k = tg_randn(rng, TG_FLOAT64, 3, SHAPE(2, 4, 3));
    tg_tensor *v = tg_randn(rng, TG_FLOAT64, 3, SHAPE(2, 4, 2));
    double mask_vals[16];
    for (int i = 0; i < 16; i++)
        mask_vals[i] = i % 4 > i / 4 ? -INFINITY : 0;
    double *qv = values_of(q), *kv = values_of(k), *vv = values_of(v);
    double want[16], want_w[32];
    ref_sdpa(qv, kv, vv, mask_vals, 2, 4, 4, 3, 2, 1 / sqrt(3.0), want, want_w);
    tg_tensor *w = NULL;
    tg_tensor *out = tg_scaled_dot_product_attention(q, k, v, NULL, 0, true, 0, NULL, &w);
    assert_values(out, want, 16, 1e-12);
    assert_values(w, want_w, 32, 1e-12);
    ck_assert_double_eq(tg_get(w, SHAPE(1, 0, 0)), 1.0);
    tg_release(out);
    tg_release(w);
    tg_tensor *cm = tg_causal_mask(4);
    out = tg_scaled_dot_product_attention(q, k, v, cm, 0, false, 0, NULL, NULL);
    assert_values(out, want, 16, 1e-12);
    tg_release(out);
    tg_release(cm);
    free(qv);
    free(kv);
    free(vv);
    tg_release(q);
    tg_release(k);
    tg_release(v);
    tg_rng_free(rng);
}
END_TEST

typedef struct {
    bool causal;
    const tg_tensor *mask;
} sdpa_ctx;

/* inputs: q, k, v, and optionally a float mask. */
static tg_tensor *sdpa_fn(tg_tensor *const *in, int n, void *ctx)
{
    const sdpa_ctx *c = ctx;
    return tg_scaled_dot_product_attention(in[0], in[1], in[2], n > 3 ? in[3] : c->mask, 0,
                                           c->causal, 0, NULL, NULL);
}

START_TEST(sdpa_passes_gradcheck)
{
    tg_rng *rng = tg_rng_new(9);
    tg_tensor *in[4] = {tg_randn(rng, TG_FLOAT64, 4, SHAPE(2, 2, 3, 4)),
                        tg_randn(rng, TG_FLOAT64, 4, SHAPE(2, 2, 5, 4)),
                        tg_randn(rng, TG_FLOAT64, 4, SHAPE(2, 2, 5, 3)),
                        tg_randn(rng, TG_FLOAT64, 2, SHAPE(3, 5))};
    tg_gradcheck_result r;
    sdpa_ctx c = {true, NULL};
    ck_assert_msg(tg_gradcheck(sdpa_fn, &c, in, 3, NULL, &r) == 1, "%s", r.message);
    ck_assert_msg(tg_gradcheck_float32(sdpa_fn, &c, in, 3, NULL, &r) == 1, "%s", r.message);
    /* A float mask that broadcasts over the batch dims gets its gradient too. */
    c.causal = false;
    ck_assert_msg(tg_gradcheck(sdpa_fn, &c, in, 4, NULL, &r) == 1, "%s", r.message);
    ck_assert_int_eq(r.checked, 48 + 80 + 60 + 15);
    /* A bool mask with a fully masked query. */
    tg_tensor *bm = make(TG_BOOL, 2, SHAPE(3, 5),
                         (const double[]){0, 1, 0, 1, 0, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1});
    c.mask = bm;
    ck_assert_msg(tg_gradcheck(sdpa_fn, &c, in, 3, NULL, &r) == 1, "%s", r.message);
    for (int i = 0; i < 4; i++)
        tg_release(in[i]);
    tg_release(bm);
    tg_rng_free(rng);
}
END_TEST

START_TEST(sdpa_rejects_bad_arguments)
{
    tg_tensor *q = tg_zeros(TG_FLOAT32, 3, SHAPE(2, 3, 4)), *k = tg_zeros(TG_FLOAT32, 3, SHAPE(2, 5, 4));
    tg_tensor *v6 = tg_zeros(TG_FLOAT32, 3, SHAPE(2, 6, 3)), *k3 = tg_zeros(TG_FLOAT32, 3, SHAPE(2, 5, 3));
    tg_tensor *w = q;
    ck_assert_ptr_null(tg_scaled_dot_product_attention(NULL, k, k, NULL, 0, false, 0, NULL, &w));
    ck_assert_ptr_null(w);
    ck_assert_error(TG_ERR_NULL, "tg_scaled_dot_product_attention", "q");
    ck_assert_ptr_null(tg_scaled_dot_product_attention(q, k, v6, NULL, 0, false, 0, NULL, NULL));
    ck_assert_error(TG_ERR_SHAPE, "tg_scaled_dot_product_attention", "[2,5,4]", "[2,6,3]");
    ck_assert_ptr_null(tg_scaled_dot_product_attention(q, k3, k3, NULL, 0, false, 0, NULL, NULL));
    ck_assert_error(TG_ERR_SHAPE, "tg_scaled_dot_product_attention", "[2,3,4]", "[2,5,3]");
    ck_assert_ptr_null(tg_scaled_dot_product_attention(q, k, k, NULL, 1.0, false, 0, NULL, NULL));
    ck_assert_error(TG_ERR_VALUE, "tg_scaled_dot_product_attention", "dropout_p");
    tg_release(q);
    tg_release(k);
    tg_release(v6);
    tg_release(k3);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sdpa");
    TCase *tc = tcase_checked("sdpa");
    tcase_add_test(tc, sdpa_matches_softmax_of_scaled_scores_times_v);
    tcase_add_test(tc, sdpa_float_mask_is_added_and_minus_inf_rows_give_zeros);
    tcase_add_test(tc, sdpa_is_causal_equals_the_bool_causal_mask);
    tcase_add_test(tc, sdpa_passes_gradcheck);
    tcase_add_test(tc, sdpa_rejects_bad_arguments);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
