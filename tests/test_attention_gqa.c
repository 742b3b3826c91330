/* Grouped-query attention in the fused op: q [B, H, L, E] with k and v of
 * Hkv heads, each read in place by H / Hkv query heads, against the same
 * computation on k and v repeated by hand (Hugging Face's repeat_kv), in
 * values and gradients; the bits on one thread and two; and shapes refused. */
#include "testutil.h"

/* x [B, Hkv, S, E] with each head repeated g times in a row: [B, Hkv g, S,
 * E], built of expand and reshape. */
static tg_tensor *repeat_kv(const tg_tensor *x, int64_t g)
{
    const int64_t *s = tg_shape(x);
    tg_tensor *e = tg_expand(tg_unsqueeze(x, 2), 5, SHAPE(s[0], s[1], g, s[2], s[3]));
    return tg_reshape(e, 4, SHAPE(s[0], s[1] * g, s[2], s[3]));
}

/* One comparison: the shapes, the mask, dropout and the layout. */
typedef struct {
    tg_dtype dt;
    int64_t B, H, Hkv, L, S, E, Ev;
    bool causal;
    int mask;       /* 0: none, 1: bool key padding [B, 1, 1, S], 2: float [L, S] */
    double dropout; /* from one seed on both sides */
    bool strided;   /* q, k, v as transpose(1, 2) of [B, T, heads, E] */
    bool grad;      /* backpropagate and compare the gradients too */
} gqa_case;

/* The mask of c (scope-owned), or NULL: key padding leaves batch b its
 * first S - 1 - b keys (at least one); the float mask has normal values
 * with -inf where they pass 1. */
static tg_tensor *mask_of(const gqa_case *c, tg_rng *rng)
{
    if (c->mask == 1) {
        tg_tensor *m = tg_zeros(TG_BOOL, 4, SHAPE(c->B, 1, 1, c->S));
        bool *p = tg_data(m);
        for (int64_t b = 0; b < c->B; b++)
            for (int64_t j = c->S - 1 - b > 1 ? c->S - 1 - b : 1; j < c->S; j++)
                p[b * c->S + j] = true;
        return m;
    }
    if (c->mask == 2) {
        double *mv = malloc((size_t)(c->L * c->S) * sizeof *mv);
        tg_copy_to(tg_randn(rng, TG_FLOAT64, 2, SHAPE(c->L, c->S)), TG_FLOAT64, mv, c->L * c->S);
        for (int64_t i = 0; i < c->L * c->S; i++)
            mv[i] = mv[i] > 1 ? -INFINITY : mv[i];
        tg_tensor *m = make(c->dt, 2, SHAPE(c->L, c->S), mv);
        free(mv);
        return m;
    }
    return NULL;
}

/* The reference: matmul, mask, softmax, dropout and matmul on k and v
 * repeated by hand. */
static tg_tensor *composed(const gqa_case *c, const tg_tensor *q, const tg_tensor *k,
                           const tg_tensor *v, const tg_tensor *mask, tg_rng *rng)
{
    int64_t g = c->H / c->Hkv;
    tg_tensor *s = tg_mul_scalar(tg_matmul(q, tg_transpose(repeat_kv(k, g), -2, -1)),
                                 1.0 / sqrt((double)c->E));
    if (mask && tg_dtype_of(mask) == TG_BOOL)
        s = tg_masked_fill(s, mask, -INFINITY);
    else if (mask)
        s = tg_add(s, mask);
    if (c->causal)
        s = tg_masked_fill(s, tg_causal_mask_rect(c->L, c->S), -INFINITY);
    tg_tensor *w = tg_dropout(tg_softmax(s, -1), c->dropout, true, rng);
    return tg_matmul(w, repeat_kv(v, g));
}

/* A leaf [B, heads, T, cols] of normal values, or with strided its
 * transpose(1, 2) view of a leaf [B, T, heads, cols]: *leaf gets the leaf. */
static tg_tensor *input(const gqa_case *c, tg_rng *rng, int64_t heads, int64_t T, int64_t cols,
                        tg_tensor **leaf)
{
    *leaf = c->strided ? tg_randn(rng, c->dt, 4, SHAPE(c->B, T, heads, cols))
                       : tg_randn(rng, c->dt, 4, SHAPE(c->B, heads, T, cols));
    tg_set_requires_grad(*leaf, c->grad);
    return c->strided ? tg_transpose(*leaf, 1, 2) : *leaf;
}

/* Runs the fused op (fused) or the reference on fresh inputs from seed:
 * res[0] the output, res[1..3] the gradients of the leaves of q, k and v
 * (NULL without grad). Scope-owned. */
static void run(const gqa_case *c, bool fused, uint64_t seed, tg_tensor *res[4])
{
    tg_rng *rng = tg_rng_new(seed);
    tg_tensor *leaf[3];
    tg_tensor *q = input(c, rng, c->H, c->L, c->E, &leaf[0]);
    tg_tensor *k = input(c, rng, c->Hkv, c->S, c->E, &leaf[1]);
    tg_tensor *v = input(c, rng, c->Hkv, c->S, c->Ev, &leaf[2]);
    tg_tensor *w = tg_randn(rng, c->dt, 4, SHAPE(c->B, c->H, c->L, c->Ev));
    tg_tensor *mask = mask_of(c, rng);
    tg_rng_seed(rng, seed + 1); /* the dropout draw, the same on both sides */
    res[0] = fused ? tg_attention(q, k, v, mask, c->causal, 0, c->dropout, rng)
                   : composed(c, q, k, v, mask, rng);
    tg_rng_free(rng);
    ck_assert_msg(res[0] != NULL, "%s", tg_error_message());
    ck_assert_shape(res[0], c->B, c->H, c->L, c->Ev);
    for (int i = 0; i < 3; i++)
        res[i + 1] = NULL;
    if (!c->grad)
        return;
    ck_assert_int_eq(tg_backward(res[0], w), 0);
    for (int i = 0; i < 3; i++)
        res[i + 1] = tg_grad(leaf[i]);
}

/* The fused op against the reference, output and gradients within tol
 * (relative to 1 + |reference|). */
static void check(const gqa_case *c, double tol, uint64_t seed)
{
    tg_scope_begin();
    tg_tensor *f[4], *r[4];
    run(c, true, seed, f);
    run(c, false, seed, r);
    static const char *names[4] = {"out", "dq", "dk", "dv"};
    for (int i = 0; i < (c->grad ? 4 : 1); i++) {
        ck_assert_int_eq(tg_numel(f[i]), tg_numel(r[i]));
        double *x = values_of(f[i]), *y = values_of(r[i]);
        for (int64_t e = 0; e < tg_numel(f[i]); e++)
            ck_assert_msg(fabs(x[e] - y[e]) <= tol * (1 + fabs(y[e])),
                          "%s[%lld] %s H=%lld Hkv=%lld L=%lld S=%lld causal=%d mask=%d "
                          "dropout=%g strided=%d: fused %.17g, repeated %.17g",
                          names[i], (long long)e, tg_dtype_name(c->dt), (long long)c->H,
                          (long long)c->Hkv, (long long)c->L, (long long)c->S, c->causal,
                          c->mask, c->dropout, c->strided, x[e], y[e]);
        free(x), free(y);
    }
    tg_scope_end();
}

/* Every mask kind, causal or not, dropout or not, strided or not, for
 * H / Hkv = 3, multi-query (Hkv = 1) and Hkv = H, on odd L != S across the
 * 64-row tile edge. */
static void sweep(tg_dtype dt, double tol)
{
    static const int64_t heads[3][2] = {{6, 2}, {6, 1}, {4, 4}};
    static const int64_t sizes[3][2] = {{5, 7}, {67, 71}, {9, 3}};
    uint64_t seed = 10;
    for (int h = 0; h < 3; h++)
        for (int s = 0; s < 3; s++)
            for (int variant = 0; variant < 6; variant++) {
                gqa_case c = {dt, 2, heads[h][0], heads[h][1], sizes[s][0], sizes[s][1], 8, 5,
                              variant % 2 == 1, variant % 3, variant >= 4 ? 0.3 : 0,
                              variant == 3 || variant == 4, true};
                check(&c, c.dropout > 0 && dt == TG_FLOAT32 ? 2 * tol : tol, ++seed);
            }
}

START_TEST(gqa_matches_repeated_heads_float64)
{
    sweep(TG_FLOAT64, 1e-12);
}
END_TEST

START_TEST(gqa_matches_repeated_heads_float32)
{
    sweep(TG_FLOAT32, 1e-5);
}
END_TEST

/* One query row against a longer cache (decoding), where a group's heads
 * share one pass over K and V: without gradients (the decoding path), and
 * with them; several key tiles, masks, dropout, a strided q, and a group
 * of more heads than one block holds (130 heads on one kv head). */
START_TEST(gqa_decode_row_matches_repeated_heads)
{
    static const int64_t shapes[][4] = {{6, 2, 37, 8}, {6, 1, 150, 16}, {8, 2, 1, 4},
                                        {6, 3, 64, 8}, {130, 1, 20, 4}};
    uint64_t seed = 300;
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < 5; i++)
            for (int variant = 0; variant < 4; variant++) {
                tg_dtype dt = d ? TG_FLOAT32 : TG_FLOAT64;
                gqa_case c = {dt, 2, shapes[i][0], shapes[i][1], 1, shapes[i][2], shapes[i][3],
                              shapes[i][3], false, variant % 3, variant == 3 ? 0.25 : 0,
                              variant == 2, variant == 1};
                check(&c, d ? 2e-5 : 1e-12, ++seed);
            }
}
END_TEST

/* The output and gradients of f's run at 1 and at 2 threads, compared bit
 * for bit. */
static void check_threads(const gqa_case *c, uint64_t seed)
{
    int before = tg_num_threads();
    tg_scope_begin();
    tg_tensor *a[4], *b[4];
    ck_assert_int_eq(tg_set_num_threads(1), 0);
    run(c, true, seed, a);
    ck_assert_int_eq(tg_set_num_threads(2), 0);
    run(c, true, seed, b);
    ck_assert_int_eq(tg_set_num_threads(before), 0);
    for (int i = 0; i < (c->grad ? 4 : 1); i++) {
        double *x = values_of(a[i]), *y = values_of(b[i]);
        for (int64_t e = 0; e < tg_numel(a[i]); e++)
            ck_assert_msg(memcmp(&x[e], &y[e], sizeof x[e]) == 0,
                          "result %d [%lld]: %.17g on one thread, %.17g on two", i,
                          (long long)e, x[e], y[e]);
        free(x), free(y);
    }
    tg_scope_end();
}

/* Training's shape scaled down (causal, several tiles, with dropout or a
 * padding mask) and decoding's: the same bits on one thread and two. */
START_TEST(gqa_gives_the_same_bits_on_one_and_two_threads)
{
    gqa_case train = {TG_FLOAT32, 2, 6, 2, 100, 100, 16, 16, true, 0, 0, true, true};
    check_threads(&train, 1);
    train.dropout = 0.2, train.mask = 1, train.dt = TG_FLOAT64;
    check_threads(&train, 2);
    gqa_case mqa = {TG_FLOAT32, 2, 6, 1, 70, 90, 16, 16, false, 2, 0, false, true};
    check_threads(&mqa, 3);
    gqa_case decode = {TG_FLOAT32, 2, 6, 2, 1, 300, 16, 16, false, 1, 0, true, false};
    check_threads(&decode, 4);
}
END_TEST

/* The gradients of k and v keep the kv heads: [B, Hkv, S, E], MQA's [B, 1,
 * S, E]. */
START_TEST(gqa_gradients_keep_the_kv_heads)
{
    tg_scope_begin();
    for (int64_t Hkv = 1; Hkv <= 2; Hkv++) {
        gqa_case c = {TG_FLOAT64, 2, 6, Hkv, 3, 4, 5, 2, true, 0, 0, false, true};
        tg_tensor *res[4];
        run(&c, true, 9, res);
        ck_assert_shape(res[1], 2, 6, 3, 5);
        ck_assert_shape(res[2], 2, Hkv, 4, 5);
        ck_assert_shape(res[3], 2, Hkv, 4, 2);
    }
    tg_scope_end();
}
END_TEST

/* tg_scaled_dot_product_attention on the grouped form: through the fused
 * op (the same bits), and through its composition when the weights are
 * asked for, which [B, H, L, S] they are. */
START_TEST(sdpa_takes_grouped_heads)
{
    tg_scope_begin();
    tg_rng *rng = tg_rng_new(12);
    tg_tensor *q = tg_randn(rng, TG_FLOAT32, 4, SHAPE(2, 6, 9, 8));
    tg_tensor *k = tg_randn(rng, TG_FLOAT32, 4, SHAPE(2, 2, 11, 8));
    tg_tensor *v = tg_randn(rng, TG_FLOAT32, 4, SHAPE(2, 2, 11, 4));
    tg_rng_free(rng);
    tg_tensor *a = tg_scaled_dot_product_attention(q, k, v, NULL, 0, true, 0, NULL, NULL);
    tg_tensor *b = tg_attention(q, k, v, NULL, true, 0, 0, NULL);
    ck_assert_msg(a && b, "%s", tg_error_message());
    double *x = values_of(a), *y = values_of(b);
    for (int64_t i = 0; i < tg_numel(a); i++)
        ck_assert(x[i] == y[i]);
    tg_tensor *w;
    tg_tensor *c = tg_scaled_dot_product_attention(q, k, v, NULL, 0, true, 0, NULL, &w);
    ck_assert_msg(c != NULL, "%s", tg_error_message());
    ck_assert_shape(w, 2, 6, 9, 11);
    double *z = values_of(c);
    for (int64_t i = 0; i < tg_numel(a); i++)
        ck_assert_msg(fabs(x[i] - z[i]) <= 1e-5 * (1 + fabs(z[i])), "[%lld]: %g vs %g",
                      (long long)i, x[i], z[i]);
    free(x), free(y), free(z);
    tg_scope_end();
}
END_TEST

/* 5 query heads on 2 kv heads, and k and v with different head counts:
 * refused, naming the counts, by both entries. */
START_TEST(gqa_rejects_head_counts_that_do_not_group)
{
    tg_scope_begin();
    tg_tensor *q5 = tg_zeros(TG_FLOAT32, 4, SHAPE(1, 5, 3, 4));
    tg_tensor *k2 = tg_zeros(TG_FLOAT32, 4, SHAPE(1, 2, 3, 4));
    tg_tensor *v2 = tg_zeros(TG_FLOAT32, 4, SHAPE(1, 2, 3, 4));
    ck_assert_ptr_null(tg_attention(q5, k2, v2, NULL, false, 0, 0, NULL));
    ck_assert_error(TG_ERR_SHAPE, "tg_attention", "5 heads", "2 kv heads");
    ck_assert_ptr_null(tg_scaled_dot_product_attention(q5, k2, v2, NULL, 0, false, 0, NULL, NULL));
    ck_assert_error(TG_ERR_SHAPE, "tg_scaled_dot_product_attention", "5 heads", "k [1,2,3,4] 2");
    tg_tensor *q6 = tg_zeros(TG_FLOAT32, 4, SHAPE(1, 6, 3, 4));
    tg_tensor *v3 = tg_zeros(TG_FLOAT32, 4, SHAPE(1, 3, 3, 4));
    ck_assert_ptr_null(tg_attention(q6, k2, v3, NULL, false, 0, 0, NULL));
    ck_assert_error(TG_ERR_SHAPE, "tg_attention", "2 heads", "[1,3,3,4] 3");
    ck_assert_ptr_null(tg_scaled_dot_product_attention(q6, k2, v3, NULL, 0, false, 0, NULL, NULL));
    ck_assert_error(TG_ERR_SHAPE, "tg_scaled_dot_product_attention", "6 heads", "v [1,3,3,4] 3");
    /* with gradients wanted, nothing is built either */
    tg_set_requires_grad(q5, true);
    ck_assert_ptr_null(tg_attention(q5, k2, v2, NULL, true, 0, 0, NULL));
    ck_assert_error(TG_ERR_SHAPE, "tg_attention", "5 heads");
    tg_scope_end();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("attention_gqa");
    TCase *tc = tcase_checked("attention_gqa");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, gqa_matches_repeated_heads_float64);
    tcase_add_test(tc, gqa_matches_repeated_heads_float32);
    tcase_add_test(tc, gqa_decode_row_matches_repeated_heads);
    tcase_add_test(tc, gqa_gives_the_same_bits_on_one_and_two_threads);
    tcase_add_test(tc, gqa_gradients_keep_the_kv_heads);
    tcase_add_test(tc, sdpa_takes_grouped_heads);
    tcase_add_test(tc, gqa_rejects_head_counts_that_do_not_group);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
