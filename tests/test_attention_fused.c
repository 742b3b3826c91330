/* The fused attention op tg_attention against the composition of basic ops
 * it replaces, dropout(softmax(q k^T * scale + mask)) v, on many shapes
 * (outputs and all three gradients), plus hand-computed values, edge cases
 * and errors. */
#include "testutil.h"

/* A bool [L, S] mask, true where key j comes after query i. */
static tg_tensor *causal_bool(int64_t L, int64_t S)
{
    tg_tensor *m = tg_zeros(TG_BOOL, 2, SHAPE(L, S));
    bool *p = tg_data(m);
    for (int64_t i = 0; i < L; i++)
        for (int64_t j = i + 1; j < S; j++)
            p[i * S + j] = true;
    return m;
}

/* The unfused reference, from matmul, masked_fill / add, softmax and
 * dropout with p and a generator seeded with seed. */
static tg_tensor *composed_dropout(const tg_tensor *q, const tg_tensor *k, const tg_tensor *v,
                                   const tg_tensor *mask, bool causal, double scale, double p,
                                   uint64_t seed)
{
    int64_t L = tg_shape(q)[tg_ndim(q) - 2], S = tg_shape(k)[tg_ndim(k) - 2];
    tg_tensor *s = tg_mul_scalar(tg_matmul(q, tg_transpose(k, -2, -1)), scale);
    if (mask && tg_dtype_of(mask) == TG_BOOL)
        s = tg_masked_fill(s, mask, -INFINITY);
    else if (mask)
        s = tg_add(s, mask);
    if (causal)
        s = tg_masked_fill(s, causal_bool(L, S), -INFINITY);
    tg_rng *rng = tg_rng_new(seed);
    tg_tensor *w = tg_dropout(tg_softmax(s, -1), p, true, rng);
    tg_rng_free(rng);
    return tg_matmul(w, v);
}

static tg_tensor *composed(const tg_tensor *q, const tg_tensor *k, const tg_tensor *v,
                           const tg_tensor *mask, bool causal, double scale)
{
    return composed_dropout(q, k, v, mask, causal, scale, 0, 0);
}

/* tg_attention with dropout p from a generator seeded with seed. */
static tg_tensor *fused_dropout(const tg_tensor *q, const tg_tensor *k, const tg_tensor *v,
                                const tg_tensor *mask, bool causal, double scale, double p,
                                uint64_t seed)
{
    tg_rng *rng = tg_rng_new(seed);
    tg_tensor *out = tg_attention(q, k, v, mask, causal, scale, p, rng);
    tg_rng_free(rng);
    return out;
}

/* Asserts |a - b| <= tol (1 + |b|) elementwise, naming what is compared. */
static void assert_close(const char *what, const tg_tensor *a, const tg_tensor *b, double tol)
{
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(tg_numel(a), tg_numel(b));
    double *x = values_of(a), *y = values_of(b);
    for (int64_t i = 0; i < tg_numel(a); i++)
        ck_assert_msg(fabs(x[i] - y[i]) <= tol * (1 + fabs(y[i])), "%s[%lld]: fused %.17g, composed %.17g",
                      what, (long long)i, x[i], y[i]);
    free(x);
    free(y);
}

/* Leaf of dtype dt with normal values, requiring grad. */
static tg_tensor *leaf(tg_rng *rng, tg_dtype dt, int ndim, const int64_t *shape)
{
    tg_tensor *t = tg_randn(rng, dt, ndim, shape);
    tg_set_requires_grad(t, true);
    return t;
}

/* Runs f = fused or composed on (q, k, v), backpropagates the weights w and
 * returns the output; grads[] get the three gradients (scope-owned). */
static tg_tensor *run(bool fused, tg_tensor *q, tg_tensor *k, tg_tensor *v, const tg_tensor *mask,
                      bool causal, double scale, double dropout_p, const tg_tensor *w,
                      tg_tensor **grads)
{
    tg_tensor *in[3] = {q, k, v};
    for (int i = 0; i < 3; i++)
        tg_zero_grad(in[i]);
    enum { SEED = 99 }; /* both sides draw the same dropout mask */
    tg_tensor *out = fused ? fused_dropout(q, k, v, mask, causal, scale, dropout_p, SEED)
                           : composed_dropout(q, k, v, mask, causal, scale, dropout_p, SEED);
    ck_assert_msg(out != NULL, "%s", tg_error_message());
    ck_assert_int_eq(tg_backward(out, w), 0);
    for (int i = 0; i < 3; i++)
        grads[i] = tg_grad(in[i]);
    return out;
}

/* Fused vs composed on q [nb.., L, E], k [nb.., S, E], v [nb.., S, Ev] with
 * batch dims nb.. = [2] or, with heads, [2, 3]. mask_kind 0: none, 1: float
 * [L, S] with some -inf, 2: bool [L, S] with row 0 fully masked. Dropout p
 * on both sides, from one seed. Compares the output and the three gradients
 * within tol. */
static void check_parity_of(tg_dtype dt, int64_t L, int64_t S, int64_t E, int64_t Ev,
                            bool causal, int mask_kind, double dropout_p, bool heads, double tol,
                            uint64_t seed)
{
    tg_scope_begin();
    tg_rng *rng = tg_rng_new(seed);
    int nd = heads ? 4 : 3;
    int64_t sq[4] = {2, 3}, sk[4] = {2, 3}, sv[4] = {2, 3};
    sq[nd - 2] = L, sq[nd - 1] = E, sk[nd - 2] = S, sk[nd - 1] = E, sv[nd - 2] = S, sv[nd - 1] = Ev;
    if (!heads)
        sq[0] = sk[0] = sv[0] = 2;
    tg_tensor *q = leaf(rng, dt, nd, sq), *k = leaf(rng, dt, nd, sk), *v = leaf(rng, dt, nd, sv);
    int64_t sw[4];
    memcpy(sw, sq, sizeof sw);
    sw[nd - 1] = Ev;
    tg_tensor *w = tg_randn(rng, dt, nd, sw);
    tg_tensor *mask = NULL;
    if (mask_kind == 1) { /* normal values, -inf where above 1 */
        double *mv = malloc((size_t)(L * S) * sizeof *mv);
        tg_tensor *u = tg_randn(rng, TG_FLOAT64, 2, SHAPE(L, S));
        tg_copy_to(u, TG_FLOAT64, mv, L * S);
        for (int64_t i = 0; i < L * S; i++)
            mv[i] = mv[i] > 1 ? -INFINITY : mv[i];
        mask = make(dt, 2, SHAPE(L, S), mv);
        free(mv);
    } else if (mask_kind == 2) { /* about 30 % masked, row 0 entirely */
        double *mv = malloc((size_t)(L * S) * sizeof *mv);
        tg_tensor *u = tg_uniform(rng, TG_FLOAT64, 2, SHAPE(L, S), 0, 1);
        tg_copy_to(u, TG_FLOAT64, mv, L * S);
        for (int64_t i = 0; i < L * S; i++)
            mv[i] = i < S || mv[i] > 0.7;
        mask = make(TG_BOOL, 2, SHAPE(L, S), mv);
        free(mv);
    }
    tg_rng_free(rng);
    double scale = 1.0 / sqrt((double)E);
    tg_tensor *gf[3], *gc[3];
    tg_tensor *of = run(true, q, k, v, mask, causal, 0, dropout_p, w, gf);
    tg_tensor *oc = run(false, q, k, v, mask, causal, scale, dropout_p, w, gc);
    char what[96];
    const char *names[4] = {"out", "dq", "dk", "dv"};
    const tg_tensor *a[4] = {of, gf[0], gf[1], gf[2]}, *b[4] = {oc, gc[0], gc[1], gc[2]};
    for (int i = 0; i < 4; i++) {
        snprintf(what, sizeof what,
                 "%s %s L=%lld S=%lld E=%lld Ev=%lld causal=%d mask=%d dropout=%g heads=%d",
                 names[i], tg_dtype_name(dt), (long long)L, (long long)S, (long long)E,
                 (long long)Ev, causal, mask_kind, dropout_p, heads);
        assert_close(what, a[i], b[i], tol);
    }
    tg_scope_end();
}

static void check_parity(tg_dtype dt, int64_t L, int64_t S, int64_t E, int64_t Ev, bool causal,
                         int mask_kind, double tol, uint64_t seed)
{
    check_parity_of(dt, L, S, E, Ev, causal, mask_kind, 0, false, tol, seed);
}

/* Shapes with L, S in 1..70 (across the 64-row tile edge), E, Ev in 1..33. */
static void parity_sweep(tg_dtype dt, double tol)
{
    static const int64_t fixed[][4] = {{1, 1, 1, 1}, {64, 64, 16, 16}, {65, 64, 8, 5},
                                       {64, 65, 5, 8}, {70, 70, 33, 33}, {70, 1, 3, 2},
                                       {1, 70, 2, 3}, {63, 66, 32, 1}};
    int n = 0;
    for (int i = 0; i < 8; i++)
        for (int c = 0; c < 2; c++)
            check_parity(dt, fixed[i][0], fixed[i][1], fixed[i][2], fixed[i][3], c, i % 3, tol,
                         (uint64_t)(++n));
    for (int i = 0; i < 36; i++) {
        int64_t L = 1 + (i * 37) % 70, S = 1 + (i * 53 + 11) % 70;
        int64_t E = 1 + (i * 7) % 33, Ev = 1 + (i * 13 + 4) % 33;
        check_parity(dt, L, S, E, Ev, i % 2, (i / 2) % 3, tol, (uint64_t)(100 + i));
    }
}

START_TEST(fused_matches_composition_float64)
{
    parity_sweep(TG_FLOAT64, 1e-12);
}
END_TEST

START_TEST(fused_matches_composition_float32)
{
    parity_sweep(TG_FLOAT32, 1e-5);
}
END_TEST

/* Work above the threading threshold: several query blocks per head. */
START_TEST(fused_matches_composition_on_a_large_causal_problem)
{
    check_parity(TG_FLOAT32, 200, 200, 64, 64, true, 0, 1e-5, 7);
    check_parity(TG_FLOAT64, 150, 130, 40, 24, false, 1, 1e-12, 8);
}
END_TEST

/* With [B, H] heads, whose output the fused op stores head-interleaved:
 * float32 rows whose keys fit one tile (normalised in the tile, written
 * straight to the output) and rows that span several, causal or masked. */
START_TEST(fused_float32_heads_match_composition)
{
    static const int64_t shapes[][4] = {{16, 16, 32, 32}, {64, 64, 16, 16}, {65, 64, 8, 5},
                                        {70, 70, 33, 17}, {3, 40, 7, 9}};
    for (int i = 0; i < 5; i++)
        for (int c = 0; c < 2; c++)
            check_parity_of(TG_FLOAT32, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3],
                            c, (i + c) % 3, 0, true, 1e-5, (uint64_t)(700 + 2 * i + c));
}
END_TEST

/* q [2,3,L,E], k [3,S,E] and v [1,3,S,Ev] broadcast over the first dim; k's
 * and v's gradients are summed over it. */
START_TEST(fused_broadcasts_batch_dims)
{
    tg_scope_begin();
    tg_rng *rng = tg_rng_new(3);
    tg_tensor *q = leaf(rng, TG_FLOAT64, 4, SHAPE(2, 3, 5, 4));
    tg_tensor *k = leaf(rng, TG_FLOAT64, 3, SHAPE(3, 6, 4));
    tg_tensor *v = leaf(rng, TG_FLOAT64, 4, SHAPE(1, 3, 6, 2));
    tg_tensor *w = tg_randn(rng, TG_FLOAT64, 4, SHAPE(2, 3, 5, 2));
    tg_rng_free(rng);
    tg_tensor *gf[3], *gc[3];
    tg_tensor *of = run(true, q, k, v, NULL, true, 0.3, 0, w, gf);
    tg_tensor *oc = run(false, q, k, v, NULL, true, 0.3, 0, w, gc);
    ck_assert_shape(of, 2, 3, 5, 2);
    ck_assert_shape(gf[1], 3, 6, 4);
    ck_assert_shape(gf[2], 1, 3, 6, 2);
    assert_close("out", of, oc, 1e-12);
    for (int i = 0; i < 3; i++)
        assert_close("grad", gf[i], gc[i], 1e-12);
    tg_scope_end();
}
END_TEST

/* Transposed views for q, k and v, and a sliced k. */
START_TEST(fused_reads_non_contiguous_inputs)
{
    tg_scope_begin();
    tg_rng *rng = tg_rng_new(4);
    tg_tensor *qb = leaf(rng, TG_FLOAT64, 3, SHAPE(2, 4, 7)), *kb = leaf(rng, TG_FLOAT64, 3, SHAPE(2, 4, 9));
    tg_tensor *vb = leaf(rng, TG_FLOAT64, 3, SHAPE(8, 2, 3));
    tg_tensor *w = tg_randn(rng, TG_FLOAT64, 3, SHAPE(2, 7, 3));
    tg_rng_free(rng);
    tg_tensor *leaves[3] = {qb, kb, vb}, *out[2], *grads[2][3];
    for (int r = 0; r < 2; r++) { /* fresh views each run: backward frees their graph */
        tg_tensor *q = tg_transpose(qb, 1, 2);                      /* [2, 7, 4] */
        tg_tensor *k = tg_narrow(tg_transpose(kb, 1, 2), 1, 1, 8); /* [2, 8, 4] */
        tg_tensor *v = tg_transpose(vb, 0, 1);                      /* [2, 8, 3] */
        ck_assert(!tg_is_contiguous(q) && !tg_is_contiguous(k) && !tg_is_contiguous(v));
        out[r] = r == 0 ? tg_attention(q, k, v, NULL, false, 0, 0, NULL)
                          : composed(q, k, v, NULL, false, 0.5);
        ck_assert_int_eq(tg_backward(out[r], w), 0);
        for (int i = 0; i < 3; i++) {
            grads[r][i] = tg_grad(leaves[i]);
            tg_zero_grad(leaves[i]);
        }
    }
    assert_close("out", out[0], out[1], 1e-12);
    for (int i = 0; i < 3; i++)
        assert_close("grad", grads[0][i], grads[1][i], 1e-12);
    tg_scope_end();
}
END_TEST

/* q = [1, 0], keys [1, 0] and [0, 1], scale 1: weights e/(1+e), 1/(1+e). */
START_TEST(fused_gives_hand_computed_values)
{
    tg_scope_begin();
    tg_tensor *q = T64(SHAPE(1, 2), 2, 1.0, 0.0);
    tg_tensor *k = T64(SHAPE(2, 2), 2, 1.0, 0.0, 0.0, 1.0);
    tg_tensor *v = T64(SHAPE(2, 2), 2, 1.0, 2.0, 3.0, 4.0);
    double e = exp(1.0), w0 = e / (1 + e), w1 = 1 / (1 + e);
    ck_assert_values(tg_attention(q, k, v, NULL, false, 1.0, 0, NULL), 1e-15, w0 + 3 * w1, 2 * w0 + 4 * w1);
    /* causal: the one query sees key 0 only */
    ck_assert_values(tg_attention(q, k, v, NULL, true, 1.0, 0, NULL), 1e-15, 1.0, 2.0);
    tg_scope_end();
}
END_TEST

/* Row 1 of 3 has every key masked: zeros out, and no gradient through it
 * even when the other rows pass some. */
START_TEST(fused_fully_masked_row_gives_zeros_and_zero_gradient)
{
    tg_scope_begin();
    tg_rng *rng = tg_rng_new(5);
    tg_tensor *q = leaf(rng, TG_FLOAT64, 2, SHAPE(3, 4)), *k = leaf(rng, TG_FLOAT64, 2, SHAPE(5, 4));
    tg_tensor *v = leaf(rng, TG_FLOAT64, 2, SHAPE(5, 2));
    tg_rng_free(rng);
    tg_tensor *mask = tg_zeros(TG_BOOL, 2, SHAPE(3, 5));
    bool *m = tg_data(mask);
    for (int j = 0; j < 5; j++)
        m[5 + j] = true;
    m[2] = true;
    tg_tensor *out = tg_attention(q, k, v, mask, false, 0, 0, NULL);
    double *o = values_of(out);
    ck_assert(o[2] == 0 && o[3] == 0);
    ck_assert(o[0] != 0 && o[4] != 0);
    free(o);
    ck_assert_int_eq(tg_backward(out, tg_ones(TG_FLOAT64, 2, SHAPE(3, 2))), 0);
    double *dq = values_of(tg_grad(q));
    for (int c = 0; c < 4; c++)
        ck_assert(dq[4 + c] == 0);
    free(dq);
    tg_scope_end();
}
END_TEST

/* No keys: every row is empty, so zeros, like the composition's. */
START_TEST(fused_without_keys_gives_zeros)
{
    tg_scope_begin();
    tg_tensor *q = tg_ones(TG_FLOAT32, 2, SHAPE(3, 4)), *k = tg_ones(TG_FLOAT32, 2, SHAPE(0, 4));
    tg_tensor *v = tg_ones(TG_FLOAT32, 2, SHAPE(0, 2));
    tg_tensor *out = tg_attention(q, k, v, NULL, false, 0, 0, NULL);
    ck_assert_shape(out, 3, 2);
    ck_assert_values(out, 0, 0, 0, 0, 0, 0, 0);
    tg_scope_end();
}
END_TEST

/* tg_scaled_dot_product_attention without weights or dropout goes through
 * the fused op: bit-identical outputs. With weights it still agrees. */
START_TEST(sdpa_uses_the_fused_op_when_it_can)
{
    tg_scope_begin();
    tg_rng *rng = tg_rng_new(6);
    tg_tensor *q = tg_randn(rng, TG_FLOAT32, 4, SHAPE(2, 3, 70, 8));
    tg_tensor *k = tg_randn(rng, TG_FLOAT32, 4, SHAPE(2, 3, 70, 8));
    tg_tensor *v = tg_randn(rng, TG_FLOAT32, 4, SHAPE(2, 3, 70, 8));
    tg_rng_free(rng);
    tg_tensor *a = tg_scaled_dot_product_attention(q, k, v, NULL, 0, true, 0, NULL, NULL);
    tg_tensor *b = tg_attention(q, k, v, NULL, true, 0, 0, NULL);
    assert_close("sdpa", a, b, 0);
    tg_tensor *w;
    tg_tensor *c = tg_scaled_dot_product_attention(q, k, v, NULL, 0, true, 0, NULL, &w);
    ck_assert_shape(w, 2, 3, 70, 70);
    assert_close("sdpa with weights", a, c, 1e-5);
    tg_scope_end();
}
END_TEST

/* q, k or v's heads from a packed projection qkv [2, 70, 24] (E = 8, two
 * heads of 4): rows 24 elements apart, read in place by the fused op. 70
 * rows cross the 64-row tiles, so row offsets are taken. */
static tg_tensor *packed_heads(tg_tensor *qkv, int i)
{
    tg_tensor *x = tg_reshape(tg_narrow(qkv, 2, i * 8, 8), 4, SHAPE(2, 70, 2, 4));
    return tg_transpose(x, 1, 2); /* [2, 2, 70, 4] */
}

START_TEST(fused_reads_packed_heads_in_place)
{
    tg_scope_begin();
    tg_rng *rng = tg_rng_new(41);
    tg_tensor *qkv = leaf(rng, TG_FLOAT64, 3, SHAPE(2, 70, 24));
    tg_tensor *w = tg_randn(rng, TG_FLOAT64, 4, SHAPE(2, 2, 70, 4));
    tg_rng_free(rng);
    tg_tensor *out[2], *grad[2];
    for (int r = 0; r < 2; r++) {
        tg_tensor *q = packed_heads(qkv, 0), *k = packed_heads(qkv, 1), *v = packed_heads(qkv, 2);
        ck_assert(!tg_is_contiguous(q));
        out[r] = r == 0 ? fused_dropout(q, k, v, NULL, true, 0, 0.2, 5)
                        : composed_dropout(q, k, v, NULL, true, 0.5, 0.2, 5);
        ck_assert_int_eq(tg_backward(out[r], w), 0);
        grad[r] = tg_grad(qkv);
        tg_zero_grad(qkv);
    }
    assert_close("packed heads out", out[0], out[1], 1e-12);
    assert_close("packed heads dqkv", grad[0], grad[1], 1e-12);
    tg_scope_end();
}
END_TEST

/* Dropout inside the fused op drops the weights the composition's
 * tg_dropout drops, for the same seed: on both sides of the tile edges,
 * with masks, causal or not, and with [B, H] heads (whose output the fused
 * op stores head-interleaved). */
START_TEST(fused_dropout_matches_composition)
{
    static const int64_t shapes[][4] = {{1, 1, 1, 1}, {16, 16, 32, 32}, {65, 64, 8, 5},
                                        {64, 70, 5, 8}, {70, 70, 33, 17}};
    const tg_dtype dts[2] = {TG_FLOAT64, TG_FLOAT32};
    const double tols[2] = {1e-12, 2e-5};
    uint64_t seed = 500;
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < 5; i++)
            for (int heads = 0; heads < 2; heads++)
                check_parity_of(dts[d], shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3],
                                (i + heads) % 2, i % 3, i == 4 ? 0.5 : 0.2, heads, tols[d],
                                ++seed);
}
END_TEST

/* The dropout really drops: with p = 0.5 the output differs from p = 0, and
 * the same seed gives the same output twice. */
START_TEST(fused_dropout_is_seeded_and_changes_the_output)
{
    tg_scope_begin();
    tg_rng *rng = tg_rng_new(3);
    tg_tensor *q = tg_randn(rng, TG_FLOAT32, 3, SHAPE(2, 9, 4));
    tg_tensor *k = tg_randn(rng, TG_FLOAT32, 3, SHAPE(2, 9, 4));
    tg_tensor *v = tg_randn(rng, TG_FLOAT32, 3, SHAPE(2, 9, 4));
    tg_rng_free(rng);
    tg_tensor *plain = tg_attention(q, k, v, NULL, true, 0, 0, NULL);
    tg_tensor *a = fused_dropout(q, k, v, NULL, true, 0, 0.5, 17);
    tg_tensor *b = fused_dropout(q, k, v, NULL, true, 0, 0.5, 17);
    double *pv = values_of(plain), *av = values_of(a), *bv = values_of(b);
    int differ = 0;
    for (int64_t i = 0; i < tg_numel(a); i++) {
        ck_assert_msg(av[i] == bv[i], "element %lld differs between two runs", (long long)i);
        differ += av[i] != pv[i];
    }
    ck_assert_int_gt(differ, tg_numel(a) / 2);
    free(pv), free(av), free(bv);
    tg_scope_end();
}
END_TEST

START_TEST(fused_rejects_bad_arguments)
{
    tg_scope_begin();
    tg_tensor *q = tg_zeros(TG_FLOAT32, 3, SHAPE(2, 3, 4)), *k = tg_zeros(TG_FLOAT32, 3, SHAPE(2, 5, 4));
    tg_tensor *v = tg_zeros(TG_FLOAT32, 3, SHAPE(2, 5, 3));
    ck_assert_ptr_null(tg_attention(NULL, k, v, NULL, false, 0, 0, NULL));
    ck_assert_error(TG_ERR_NULL, "tg_attention", "q");
    ck_assert_ptr_null(tg_attention(q, tg_zeros(TG_FLOAT64, 3, SHAPE(2, 5, 4)), v, NULL, false, 0, 0, NULL));
    ck_assert_error(TG_ERR_DTYPE, "tg_attention", "float64");
    ck_assert_ptr_null(tg_attention(tg_zeros(TG_INT64, 3, SHAPE(2, 3, 4)), k, v, NULL, false, 0, 0, NULL));
    ck_assert_error(TG_ERR_DTYPE, "tg_attention");
    ck_assert_ptr_null(tg_attention(q, tg_zeros(TG_FLOAT32, 3, SHAPE(2, 5, 3)), v, NULL, false, 0, 0, NULL));
    ck_assert_error(TG_ERR_SHAPE, "tg_attention", "[2,3,4]", "[2,5,3]");
    ck_assert_ptr_null(tg_attention(q, k, tg_zeros(TG_FLOAT32, 3, SHAPE(2, 6, 3)), NULL, false, 0, 0, NULL));
    ck_assert_error(TG_ERR_SHAPE, "tg_attention", "[2,6,3]");
    ck_assert_ptr_null(tg_attention(q, tg_zeros(TG_FLOAT32, 3, SHAPE(3, 5, 4)), v, NULL, false, 0, 0, NULL));
    ck_assert_error(TG_ERR_SHAPE, "tg_attention", "broadcast", "[3,5,4]");
    ck_assert_ptr_null(tg_attention(q, k, v, tg_zeros(TG_BOOL, 2, SHAPE(3, 4)), false, 0, 0, NULL));
    ck_assert_error(TG_ERR_SHAPE, "tg_attention", "mask [3,4]", "[2,3,5]");
    ck_assert_ptr_null(tg_attention(q, k, v, tg_zeros(TG_INT64, 2, SHAPE(3, 5)), false, 0, 0, NULL));
    ck_assert_error(TG_ERR_DTYPE, "tg_attention", "mask");
    ck_assert_ptr_null(tg_attention(q, k, v, NULL, false, INFINITY, 0, NULL));
    ck_assert_error(TG_ERR_VALUE, "tg_attention", "scale");
    tg_rng *rng = tg_rng_new(1);
    ck_assert_ptr_null(tg_attention(q, k, v, NULL, false, 0, 1.0, rng));
    ck_assert_error(TG_ERR_VALUE, "tg_attention", "dropout_p", "1");
    ck_assert_ptr_null(tg_attention(q, k, v, NULL, false, 0, NAN, rng));
    ck_assert_error(TG_ERR_VALUE, "tg_attention", "dropout_p");
    ck_assert_ptr_null(tg_attention(q, k, v, NULL, false, 0, -0.1, rng));
    ck_assert_error(TG_ERR_VALUE, "tg_attention", "dropout_p");
    ck_assert_ptr_null(tg_attention(q, k, v, NULL, false, 0, 0.1, NULL));
    ck_assert_error(TG_ERR_NULL, "tg_attention", "rng");
    tg_rng_free(rng);
    tg_scope_end();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("attention_fused");
    TCase *tc = tcase_checked("attention_fused");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, fused_matches_composition_float64);
    tcase_add_test(tc, fused_matches_composition_float32);
    tcase_add_test(tc, fused_float32_heads_match_composition);
    tcase_add_test(tc, fused_matches_composition_on_a_large_causal_problem);
    tcase_add_test(tc, fused_broadcasts_batch_dims);
    tcase_add_test(tc, fused_reads_non_contiguous_inputs);
    tcase_add_test(tc, fused_gives_hand_computed_values);
    tcase_add_test(tc, fused_fully_masked_row_gives_zeros_and_zero_gradient);
    tcase_add_test(tc, fused_without_keys_gives_zeros);
    tcase_add_test(tc, sdpa_uses_the_fused_op_when_it_can);
    tcase_add_test(tc, fused_reads_packed_heads_in_place);
    tcase_add_test(tc, fused_dropout_matches_composition);
    tcase_add_test(tc, fused_dropout_is_seeded_and_changes_the_output);
    tcase_add_test(tc, fused_rejects_bad_arguments);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
