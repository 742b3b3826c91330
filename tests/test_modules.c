/* Named parameter lists and the basic modules (Linear, LayerNorm, Embedding):
 * forward values against loops written here or the op called directly,
 * PyTorch's initial distributions, gradients, names, errors and lifetimes.
 * The suite's other part, modules_written_with_module_h.c: a module written
 * on module.h, the header a module's author uses. */
#include "testutil.h"
#include "suite_parts.h"

/* a and b have the same shape and bit-for-bit the same values. */
static void assert_same(const tg_tensor *a, const tg_tensor *b)
{
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(tg_ndim(a), tg_ndim(b));
    for (int d = 0; d < tg_ndim(a); d++)
        ck_assert_int_eq(tg_shape(a)[d], tg_shape(b)[d]);
    double *va = values_of(a), *vb = values_of(b);
    for (int64_t i = 0; i < tg_numel(a); i++)
        ck_assert_msg(va[i] == vb[i], "element %lld: %.17g vs %.17g", (long long)i, va[i], vb[i]);
    free(va);
    free(vb);
}

/* y[r, o] = sum_i x[r, i] w[o, i] + b[o] over rows r of x [rows, in]. */
static void ref_linear(const double *x, const double *w, const double *b, int64_t rows,
                       int64_t in, int64_t out, double *y)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t o = 0; o < out; o++) {
            double s = b ? b[o] : 0;
            for (int64_t i = 0; i < in; i++)
                s += x[r * in + i] * w[o * in + i];
            y[r * out + o] = s;
        }
}

/* ---- tg_params ------------------------------------------------------------- */

START_TEST(params_add_find_and_numel)
{
    tg_params ps = {0};
    tg_tensor *a = tg_zeros(TG_FLOAT32, 2, SHAPE(3, 4)), *b = tg_zeros(TG_FLOAT64, 1, SHAPE(5));
    ck_assert_int_eq(tg_params_add(&ps, "fc", "weight", a), 0);
    ck_assert_int_eq(tg_params_add(&ps, NULL, "scale", b), 0);
    ck_assert_int_eq(tg_params_add(&ps, "", "shift", b), 0);
    ck_assert_int_eq(ps.count, 3);
    ck_assert_str_eq(ps.names[0], "fc.weight");
    ck_assert_str_eq(ps.names[1], "scale");
    ck_assert_str_eq(ps.names[2], "shift");
    ck_assert_ptr_eq(tg_params_find(&ps, "fc.weight"), a);
    ck_assert_ptr_eq(tg_params_find(&ps, "shift"), b);
    ck_assert_ptr_null(tg_params_find(&ps, "weight"));
    ck_assert_int_eq(tg_error_code(), TG_OK); /* a missing name is not an error */
    ck_assert_int_eq(tg_params_numel(&ps), 12 + 5 + 5);
    /* The list holds its own references. */
    int64_t live = tg_live_tensors();
    tg_release(a);
    tg_release(b);
    ck_assert_int_eq(tg_live_tensors(), live);
    ck_assert_int_eq(tg_numel(tg_params_find(&ps, "fc.weight")), 12);
    tg_params_clear(&ps);
}
END_TEST

START_TEST(params_rejects_duplicate_names)
{
    tg_params ps = {0};
    tg_tensor *a = tg_zeros(TG_FLOAT32, 1, SHAPE(2));
    ck_assert_int_eq(tg_params_add(&ps, "fc", "weight", a), 0);
    ck_assert_int_eq(tg_params_add(&ps, NULL, "fc.weight", a), -1);
    ck_assert_error(TG_ERR_VALUE, "tg_params_add", "duplicate", "fc.weight");
    ck_assert_int_eq(ps.count, 1);
    ck_assert_int_eq(tg_params_add(&ps, "fc", "", a), -1);
    ck_assert_error(TG_ERR_VALUE, "tg_params_add", "empty name");
    tg_release(a);
    tg_params_clear(&ps);
}
END_TEST

START_TEST(params_grow_past_any_initial_capacity)
{
    tg_params ps = {0};
    tg_tensor *t = tg_zeros(TG_FLOAT32, 1, SHAPE(3));
    char name[32];
    for (int i = 0; i < 300; i++) {
        snprintf(name, sizeof name, "%d", i);
        ck_assert_int_eq(tg_params_add(&ps, "layers", name, t), 0);
    }
    ck_assert_int_eq(ps.count, 300);
    ck_assert_int_ge(ps.capacity, 300);
    ck_assert_str_eq(ps.names[257], "layers.257");
    ck_assert_ptr_eq(tg_params_find(&ps, "layers.299"), t);
    ck_assert_int_eq(tg_params_numel(&ps), 900);
    tg_release(t);
    tg_params_clear(&ps);
}
END_TEST

START_TEST(params_clear_releases_and_leaves_an_empty_reusable_list)
{
    int64_t live = tg_live_tensors();
    tg_params ps = {0};
    tg_tensor *t = tg_ones(TG_FLOAT64, 1, SHAPE(4));
    ck_assert_int_eq(tg_params_add(&ps, "a", "w", t), 0);
    tg_release(t);
    ck_assert_int_eq(tg_live_tensors(), live + 1);
    tg_params_clear(&ps);
    ck_assert_int_eq(tg_live_tensors(), live);
    ck_assert_int_eq(ps.count, 0);
    ck_assert_int_eq(ps.capacity, 0);
    ck_assert_ptr_null(ps.names);
    ck_assert_int_eq(tg_params_numel(&ps), 0);
    t = tg_ones(TG_FLOAT64, 1, SHAPE(2));
    ck_assert_int_eq(tg_params_add(&ps, "a", "w", t), 0); /* the old name is free again */
    tg_release(t);
    tg_params_clear(&ps);
    tg_params_clear(&ps);
    tg_params_clear(NULL);
}
END_TEST

START_TEST(params_reject_null_arguments)
{
    tg_params ps = {0};
    tg_tensor *t = tg_zeros(TG_FLOAT32, 1, SHAPE(2));
    ck_assert_int_eq(tg_params_add(NULL, "a", "w", t), -1);
    ck_assert_error(TG_ERR_NULL, "tg_params_add", "ps");
    ck_assert_int_eq(tg_params_add(&ps, "a", NULL, t), -1);
    ck_assert_error(TG_ERR_NULL, "tg_params_add", "name");
    ck_assert_int_eq(tg_params_add(&ps, "a", "w", NULL), -1);
    ck_assert_error(TG_ERR_NULL, "tg_params_add", "t");
    ck_assert_ptr_null(tg_params_find(NULL, "w"));
    ck_assert_error(TG_ERR_NULL, "tg_params_find");
    ck_assert_ptr_null(tg_params_find(&ps, NULL));
    ck_assert_error(TG_ERR_NULL, "tg_params_find");
    ck_assert_int_eq(tg_params_numel(NULL), -1);
    ck_assert_error(TG_ERR_NULL, "tg_params_numel");
    ck_assert_int_eq(ps.count, 0);
    tg_release(t);
    tg_params_clear(&ps);
}
END_TEST

/* ---- Linear ---------------------------------------------------------------- */

/* Checks m's forward on x [rows..., in] against ref_linear. */
static void check_linear_forward(const tg_linear *m, const tg_tensor *x, double tol)
{
    tg_tensor *y = tg_linear_forward(m, x);
    ck_assert_ptr_nonnull(y);
    int nd = tg_ndim(x);
    ck_assert_int_eq(tg_ndim(y), nd);
    for (int d = 0; d < nd - 1; d++)
        ck_assert_int_eq(tg_shape(y)[d], tg_shape(x)[d]);
    ck_assert_int_eq(tg_shape(y)[nd - 1], m->out_features);
    int64_t rows = tg_numel(x) / m->in_features;
    double *xv = values_of(x), *wv = values_of(m->weight);
    double *bv = m->bias ? values_of(m->bias) : NULL;
    double *want = malloc((size_t)(rows * m->out_features) * sizeof *want);
    ref_linear(xv, wv, bv, rows, m->in_features, m->out_features, want);
    assert_values(y, want, rows * m->out_features, tol);
    free(xv);
    free(wv);
    free(bv);
    free(want);
    tg_release(y);
}

START_TEST(linear_forward_matches_hand_loop_on_3d_input)
{
    tg_rng *rng = tg_rng_new(7);
    tg_dtype dtypes[] = {TG_FLOAT64, TG_FLOAT32};
    for (int k = 0; k < 2; k++) {
        tg_linear *m = tg_linear_new(4, 3, true, dtypes[k], rng);
        ck_assert_ptr_nonnull(m);
        ck_assert_int_eq(m->in_features, 4);
        ck_assert_int_eq(m->out_features, 3);
        ck_assert_shape(m->weight, 3, 4);
        ck_assert_shape(m->bias, 3);
        tg_tensor *x = tg_randn(rng, dtypes[k], 3, SHAPE(2, 5, 4));
        check_linear_forward(m, x, dtypes[k] == TG_FLOAT64 ? 1e-12 : 1e-5);
        tg_release(x);
        tg_linear_free(m);
    }
    tg_rng_free(rng);
}
END_TEST

START_TEST(linear_forward_takes_1d_2d_and_transposed_input)
{
    tg_rng *rng = tg_rng_new(8);
    tg_linear *m = tg_linear_new(3, 2, true, TG_FLOAT64, rng);
    tg_tensor *x1 = tg_randn(rng, TG_FLOAT64, 1, SHAPE(3));
    tg_tensor *y1 = tg_linear_forward(m, x1);
    ck_assert_shape(y1, 2);
    check_linear_forward(m, x1, 1e-12);
    tg_tensor *x2 = tg_randn(rng, TG_FLOAT64, 2, SHAPE(6, 3));
    check_linear_forward(m, x2, 1e-12);
    tg_tensor *xt = tg_randn(rng, TG_FLOAT64, 2, SHAPE(3, 6));
    tg_tensor *xtt = tg_transpose(xt, 0, 1); /* [6, 3], not contiguous */
    ck_assert(!tg_is_contiguous(xtt));
    check_linear_forward(m, xtt, 1e-12);
    tg_release(y1);
    tg_release(x1);
    tg_release(x2);
    tg_release(xt);
    tg_release(xtt);
    tg_linear_free(m);
    tg_rng_free(rng);
}
END_TEST

START_TEST(linear_forward_without_bias)
{
    tg_rng *rng = tg_rng_new(9);
    tg_linear *m = tg_linear_new(5, 2, false, TG_FLOAT64, rng);
    ck_assert_ptr_nonnull(m);
    ck_assert_ptr_null(m->bias);
    tg_tensor *x = tg_randn(rng, TG_FLOAT64, 3, SHAPE(2, 3, 5));
    check_linear_forward(m, x, 1e-12);
    tg_params ps = {0};
    ck_assert_int_eq(tg_linear_params(m, "proj", &ps), 0);
    ck_assert_int_eq(ps.count, 1);
    ck_assert_str_eq(ps.names[0], "proj.weight");
    tg_params_clear(&ps);
    tg_release(x);
    tg_linear_free(m);
    tg_rng_free(rng);
}
END_TEST

START_TEST(linear_init_stays_within_pytorch_bounds)
{
    tg_rng *rng = tg_rng_new(1234);
    tg_linear *m = tg_linear_new(64, 32, true, TG_FLOAT32, rng);
    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(tg_dtype_of(m->weight), TG_FLOAT32);
    ck_assert(tg_requires_grad(m->weight) && tg_requires_grad(m->bias));
    ck_assert(tg_is_leaf(m->weight) && tg_is_leaf(m->bias));
    double bound = 1.0 / 8.0;
    const tg_tensor *ts[] = {m->weight, m->bias};
    for (int k = 0; k < 2; k++) {
        int64_t n = tg_numel(ts[k]);
        double *v = values_of(ts[k]);
        double sum = 0, lo = INFINITY, hi = -INFINITY;
        for (int64_t i = 0; i < n; i++) {
            ck_assert_msg(fabs(v[i]) <= bound, "element %lld = %g", (long long)i, v[i]);
            sum += v[i];
            lo = fmin(lo, v[i]);
            hi = fmax(hi, v[i]);
        }
        /* The mean of n U(-b, b) draws has std b / sqrt(3n). */
        ck_assert_msg(fabs(sum / n) < 5 * bound / sqrt(3.0 * n), "mean %g", sum / n);
        ck_assert(hi > lo);
        if (k == 0) /* 2048 draws fill the interval */
            ck_assert(lo < -0.95 * bound && hi > 0.95 * bound);
        free(v);
    }
    tg_linear_free(m);
    tg_rng_free(rng);
}
END_TEST

START_TEST(linear_init_draws_weight_then_bias_from_rng)
{
    tg_rng *rng = tg_rng_new(42), *ref = tg_rng_new(42);
    tg_linear *m = tg_linear_new(9, 4, true, TG_FLOAT64, rng);
    double b = 1.0 / 3.0;
    tg_tensor *w = tg_uniform(ref, TG_FLOAT64, 2, SHAPE(4, 9), -b, b);
    tg_tensor *bias = tg_uniform(ref, TG_FLOAT64, 1, SHAPE(4), -b, b);
    assert_same(m->weight, w);
    assert_same(m->bias, bias);
    ck_assert_uint_eq(tg_rng_next(rng), tg_rng_next(ref)); /* nothing else drawn */
    tg_release(w);
    tg_release(bias);
    tg_linear_free(m);
    tg_rng_free(rng);
    tg_rng_free(ref);
}
END_TEST

START_TEST(linear_made_inside_a_scope_outlives_it)
{
    tg_rng *rng = tg_rng_new(3);
    int64_t live = tg_live_tensors();
    tg_scope_begin();
    tg_linear *m = tg_linear_new(3, 2, true, TG_FLOAT64, rng);
    tg_embedding_module *e = tg_embedding_module_new(4, 3, TG_FLOAT64, rng);
    tg_layer_norm_module *ln = tg_layer_norm_module_new(1, SHAPE(3), 1e-5, true, TG_FLOAT64);
    tg_scope_end();
    ck_assert_int_eq(tg_live_tensors(), live + 5);
    tg_tensor *x = tg_ones(TG_FLOAT64, 1, SHAPE(3));
    tg_tensor *y = tg_linear_forward(m, x);
    ck_assert_shape(y, 2);
    tg_release(y);
    tg_release(x);
    tg_linear_free(m);
    tg_embedding_module_free(e);
    tg_layer_norm_module_free(ln);
    ck_assert_int_eq(tg_live_tensors(), live);
    tg_rng_free(rng);
}
END_TEST

/* Loss sum(y * g) for y = x @ w^T + b, x [3, 2], w [2, 2]: dW = g^T x,
 * db = column sums of g, dx = g w. */
START_TEST(linear_gradients_reach_weight_and_bias)
{
    tg_rng *rng = tg_rng_new(5);
    tg_linear *m = tg_linear_new(2, 2, true, TG_FLOAT64, rng);
    double wv[4] = {0.5, -1.0, 2.0, 0.25}, bv[2] = {0.1, -0.2};
    memcpy(tg_data(m->weight), wv, sizeof wv);
    memcpy(tg_data(m->bias), bv, sizeof bv);
    double xv[6] = {1, 2, -3, 0.5, 4, -1}, gv[6] = {1, -2, 0.5, 3, -1, 2};
    tg_tensor *x = T64(SHAPE(3, 2), 2, 1, 2, -3, 0.5, 4, -1);
    tg_set_requires_grad(x, true);
    tg_tensor *g = T64(SHAPE(3, 2), 2, 1, -2, 0.5, 3, -1, 2);
    tg_scope_begin();
    tg_tensor *y = tg_linear_forward(m, x);
    double yv[6];
    ref_linear(xv, wv, bv, 3, 2, 2, yv);
    assert_values(y, yv, 6, 1e-12);
    ck_assert_int_eq(tg_backward(tg_sum(tg_mul(y, g), NULL, 0, false), NULL), 0);
    tg_scope_end();
    double dw[4] = {0}, db[2] = {0}, dx[6] = {0};
    for (int n = 0; n < 3; n++)
        for (int o = 0; o < 2; o++) {
            db[o] += gv[n * 2 + o];
            for (int i = 0; i < 2; i++) {
                dw[o * 2 + i] += gv[n * 2 + o] * xv[n * 2 + i];
                dx[n * 2 + i] += gv[n * 2 + o] * wv[o * 2 + i];
            }
        }
    tg_tensor *gw = tg_grad(m->weight), *gb = tg_grad(m->bias), *gx = tg_grad(x);
    ck_assert_shape(gw, 2, 2);
    ck_assert_shape(gb, 2);
    ck_assert_shape(gx, 3, 2);
    assert_values(gw, dw, 4, 1e-12);
    assert_values(gb, db, 2, 1e-12);
    assert_values(gx, dx, 6, 1e-12);
    tg_release(gw);
    tg_release(gb);
    tg_release(gx);
    tg_release(x);
    tg_release(g);
    tg_linear_free(m);
    tg_rng_free(rng);
}
END_TEST

/* inputs: x, weight [out, in], bias [out] (optional); with ctx non-NULL, x is
 * given as [in, rows] and transposed first, to feed a strided input. */
static tg_tensor *linear_fn(tg_tensor *const *in, int n, void *ctx)
{
    tg_linear m = {.in_features = tg_size(in[1], 1), .out_features = tg_size(in[1], 0),
                   .weight = in[1], .bias = n > 2 ? in[2] : NULL};
    const tg_tensor *x = ctx ? tg_transpose(in[0], 0, 1) : in[0];
    return tg_linear_forward(&m, x);
}

START_TEST(linear_forward_passes_gradcheck)
{
    tg_rng *rng = tg_rng_new(11);
    tg_tensor *in[3] = {tg_randn(rng, TG_FLOAT64, 3, SHAPE(2, 3, 4)),
                        tg_randn(rng, TG_FLOAT64, 2, SHAPE(5, 4)),
                        tg_randn(rng, TG_FLOAT64, 1, SHAPE(5))};
    tg_gradcheck_result r;
    ck_assert_msg(tg_gradcheck(linear_fn, NULL, in, 3, NULL, &r) == 1, "%s", r.message);
    ck_assert_int_eq(r.checked, 24 + 20 + 5);
    ck_assert_msg(tg_gradcheck_float32(linear_fn, NULL, in, 3, NULL, &r) == 1, "%s", r.message);
    ck_assert_msg(tg_gradcheck(linear_fn, NULL, in, 2, NULL, &r) == 1, "%s", r.message);
    tg_tensor *xt = tg_randn(rng, TG_FLOAT64, 2, SHAPE(4, 6));
    tg_tensor *in_t[3] = {xt, in[1], in[2]};
    ck_assert_msg(tg_gradcheck(linear_fn, "transposed", in_t, 3, NULL, &r) == 1, "%s", r.message);
    for (int i = 0; i < 3; i++)
        tg_release(in[i]);
    tg_release(xt);
    tg_rng_free(rng);
}
END_TEST

START_TEST(linear_params_are_named_weight_and_bias)
{
    tg_rng *rng = tg_rng_new(1);
    tg_linear *m = tg_linear_new(3, 2, true, TG_FLOAT32, rng);
    tg_params ps = {0};
    ck_assert_int_eq(tg_linear_params(m, "fc", &ps), 0);
    ck_assert_int_eq(ps.count, 2);
    ck_assert_str_eq(ps.names[0], "fc.weight");
    ck_assert_str_eq(ps.names[1], "fc.bias");
    ck_assert_ptr_eq(ps.tensors[0], m->weight);
    ck_assert_ptr_eq(ps.tensors[1], m->bias);
    ck_assert_int_eq(tg_params_numel(&ps), 8);
    ck_assert_int_eq(tg_linear_params(m, "fc", &ps), -1);
    ck_assert_error(TG_ERR_VALUE, "duplicate", "fc.weight");
    ck_assert_int_eq(tg_linear_params(m, NULL, &ps), 0);
    ck_assert_str_eq(ps.names[2], "weight");
    ck_assert_str_eq(ps.names[3], "bias");
    /* A clash on the bias leaves no weight entry behind. */
    tg_params_clear(&ps);
    ck_assert_int_eq(tg_params_add(&ps, "x", "bias", m->bias), 0);
    ck_assert_int_eq(tg_linear_params(m, "x", &ps), -1);
    ck_assert_error(TG_ERR_VALUE, "duplicate", "x.bias");
    ck_assert_int_eq(ps.count, 1);
    ck_assert_ptr_null(tg_params_find(&ps, "x.weight"));
    /* The list keeps the parameters alive after the module is gone. */
    tg_linear_free(m);
    ck_assert_int_eq(tg_numel(ps.tensors[0]), 2);
    tg_params_clear(&ps);
    tg_rng_free(rng);
}
END_TEST

START_TEST(linear_rejects_bad_arguments)
{
    tg_rng *rng = tg_rng_new(2);
    ck_assert_ptr_null(tg_linear_new(0, 3, true, TG_FLOAT32, rng));
    ck_assert_error(TG_ERR_VALUE, "tg_linear_new", "in_features 0");
    ck_assert_ptr_null(tg_linear_new(3, -2, true, TG_FLOAT32, rng));
    ck_assert_error(TG_ERR_VALUE, "tg_linear_new", "out_features -2");
    ck_assert_ptr_null(tg_linear_new(3, 2, true, TG_INT64, rng));
    ck_assert_error(TG_ERR_DTYPE, "tg_linear_new", "int64");
    ck_assert_ptr_null(tg_linear_new(3, 2, true, TG_FLOAT32, NULL));
    ck_assert_error(TG_ERR_NULL, "tg_linear_new", "rng");

    tg_linear *m = tg_linear_new(4, 3, true, TG_FLOAT32, rng);
    tg_tensor *x = tg_zeros(TG_FLOAT32, 2, SHAPE(2, 5));
    ck_assert_ptr_null(tg_linear_forward(m, x));
    ck_assert_error(TG_ERR_SHAPE, "tg_linear_forward: input [2,5] does not end in in_features 4");
    tg_tensor *s = tg_scalar(TG_FLOAT32, 1);
    ck_assert_ptr_null(tg_linear_forward(m, s));
    ck_assert_error(TG_ERR_SHAPE, "tg_linear_forward", "input []");
    tg_tensor *x64 = tg_zeros(TG_FLOAT64, 1, SHAPE(4));
    ck_assert_ptr_null(tg_linear_forward(m, x64));
    ck_assert_error(TG_ERR_DTYPE, "tg_linear_forward", "float64", "float32");
    tg_tensor *xi = tg_zeros(TG_INT64, 1, SHAPE(4));
    ck_assert_ptr_null(tg_linear_forward(m, xi));
    ck_assert_error(TG_ERR_DTYPE, "tg_linear_forward", "int64");
    ck_assert_ptr_null(tg_linear_forward(NULL, x));
    ck_assert_error(TG_ERR_NULL, "tg_linear_forward");
    ck_assert_ptr_null(tg_linear_forward(m, NULL));
    ck_assert_error(TG_ERR_NULL, "tg_linear_forward");
    /* A hand-built module whose sizes disagree with its weight. */
    tg_linear bad = {.in_features = 5, .out_features = 3, .weight = m->weight};
    ck_assert_ptr_null(tg_linear_forward(&bad, x));
    ck_assert_error(TG_ERR_SHAPE, "tg_linear_forward", "weight [3,4]");
    ck_assert_int_eq(tg_linear_params(NULL, "a", &(tg_params){0}), -1);
    ck_assert_error(TG_ERR_NULL, "tg_linear_params");
    ck_assert_int_eq(tg_linear_params(m, "a", NULL), -1);
    ck_assert_error(TG_ERR_NULL, "tg_linear_params");
    tg_release(x);
    tg_release(s);
    tg_release(x64);
    tg_release(xi);
    tg_linear_free(m);
    tg_rng_free(rng);
}
END_TEST

START_TEST(free_of_null_modules_is_harmless)
{
    tg_linear_free(NULL);
    tg_layer_norm_module_free(NULL);
    tg_embedding_module_free(NULL);
    ck_assert_int_eq(tg_error_code(), TG_OK);
}
END_TEST

/* ---- LayerNorm ---------------------------------------------------------------- */

START_TEST(layer_norm_module_starts_as_ones_and_zeros)
{
    tg_layer_norm_module *m = tg_layer_norm_module_new(2, SHAPE(2, 3), 1e-5, true, TG_FLOAT32);
    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(m->ndim, 2);
    ck_assert(m->shape[0] == 2 && m->shape[1] == 3);
    ck_assert_double_eq(m->eps, 1e-5);
    ck_assert_shape(m->weight, 2, 3);
    ck_assert_shape(m->bias, 2, 3);
    ck_assert_int_eq(tg_dtype_of(m->weight), TG_FLOAT32);
    ck_assert_values(m->weight, 0, 1, 1, 1, 1, 1, 1);
    ck_assert_values(m->bias, 0, 0, 0, 0, 0, 0, 0);
    ck_assert(tg_requires_grad(m->weight) && tg_requires_grad(m->bias));
    tg_params ps = {0};
    ck_assert_int_eq(tg_layer_norm_module_params(m, "ln_f", &ps), 0);
    ck_assert_int_eq(ps.count, 2);
    ck_assert_str_eq(ps.names[0], "ln_f.weight");
    ck_assert_str_eq(ps.names[1], "ln_f.bias");
    tg_params_clear(&ps);
    tg_layer_norm_module_free(m);
}
END_TEST

START_TEST(layer_norm_module_matches_op_called_directly)
{
    tg_rng *rng = tg_rng_new(21);
    tg_layer_norm_module *m = tg_layer_norm_module_new(1, SHAPE(4), 1e-3, true, TG_FLOAT64);
    double w[4] = {1.5, -0.5, 2, 1}, b[4] = {0.1, 0.2, -0.3, 0};
    memcpy(tg_data(m->weight), w, sizeof w);
    memcpy(tg_data(m->bias), b, sizeof b);
    tg_tensor *x = tg_randn(rng, TG_FLOAT64, 3, SHAPE(2, 3, 4));
    tg_tensor *y = tg_layer_norm_module_forward(m, x);
    tg_tensor *want = tg_layer_norm(x, 1, m->weight, m->bias, 1e-3);
    assert_same(y, want);
    /* Over two trailing dims. */
    tg_layer_norm_module *m2 = tg_layer_norm_module_new(2, SHAPE(3, 4), 1e-5, true, TG_FLOAT64);
    tg_tensor *y2 = tg_layer_norm_module_forward(m2, x);
    tg_tensor *want2 = tg_layer_norm(x, 2, m2->weight, m2->bias, 1e-5);
    assert_same(y2, want2);
    ck_assert(tg_requires_grad(y2));
    tg_release(x);
    tg_release(y);
    tg_release(want);
    tg_release(y2);
    tg_release(want2);
    tg_layer_norm_module_free(m);
    tg_layer_norm_module_free(m2);
    tg_rng_free(rng);
}
END_TEST

START_TEST(layer_norm_module_without_affine_has_no_params)
{
    tg_rng *rng = tg_rng_new(22);
    tg_layer_norm_module *m = tg_layer_norm_module_new(1, SHAPE(5), 1e-5, false, TG_FLOAT32);
    ck_assert_ptr_nonnull(m);
    ck_assert_ptr_null(m->weight);
    ck_assert_ptr_null(m->bias);
    tg_params ps = {0};
    ck_assert_int_eq(tg_layer_norm_module_params(m, "ln", &ps), 0);
    ck_assert_int_eq(ps.count, 0);
    tg_tensor *x = tg_randn(rng, TG_FLOAT32, 2, SHAPE(3, 5));
    tg_tensor *y = tg_layer_norm_module_forward(m, x);
    tg_tensor *want = tg_layer_norm(x, 1, NULL, NULL, 1e-5);
    assert_same(y, want);
    tg_release(x);
    tg_release(y);
    tg_release(want);
    tg_layer_norm_module_free(m);
    tg_rng_free(rng);
}
END_TEST

START_TEST(layer_norm_module_rejects_bad_arguments)
{
    ck_assert_ptr_null(tg_layer_norm_module_new(0, SHAPE(4), 1e-5, true, TG_FLOAT32));
    ck_assert_error(TG_ERR_VALUE, "tg_layer_norm_module_new", "ndim 0");
    ck_assert_ptr_null(tg_layer_norm_module_new(9, SHAPE(1, 1, 1, 1, 1, 1, 1, 1, 1), 1e-5, true,
                                         TG_FLOAT32));
    ck_assert_error(TG_ERR_VALUE, "tg_layer_norm_module_new", "ndim 9");
    ck_assert_ptr_null(tg_layer_norm_module_new(1, NULL, 1e-5, true, TG_FLOAT32));
    ck_assert_error(TG_ERR_NULL, "tg_layer_norm_module_new", "shape");
    ck_assert_ptr_null(tg_layer_norm_module_new(2, SHAPE(3, 0), 1e-5, true, TG_FLOAT32));
    ck_assert_error(TG_ERR_VALUE, "tg_layer_norm_module_new", "[3,0]");
    ck_assert_ptr_null(tg_layer_norm_module_new(1, SHAPE(4), 0, true, TG_FLOAT32));
    ck_assert_error(TG_ERR_VALUE, "tg_layer_norm_module_new", "eps 0");
    ck_assert_ptr_null(tg_layer_norm_module_new(1, SHAPE(4), -1e-5, true, TG_FLOAT32));
    ck_assert_error(TG_ERR_VALUE, "tg_layer_norm_module_new", "eps");
    ck_assert_ptr_null(tg_layer_norm_module_new(1, SHAPE(4), NAN, true, TG_FLOAT32));
    ck_assert_error(TG_ERR_VALUE, "tg_layer_norm_module_new", "eps");
    ck_assert_ptr_null(tg_layer_norm_module_new(1, SHAPE(4), 1e-5, true, TG_BOOL));
    ck_assert_error(TG_ERR_DTYPE, "tg_layer_norm_module_new", "bool");

    tg_layer_norm_module *m = tg_layer_norm_module_new(2, SHAPE(3, 4), 1e-5, false, TG_FLOAT32);
    tg_tensor *x = tg_zeros(TG_FLOAT32, 2, SHAPE(4, 3));
    ck_assert_ptr_null(tg_layer_norm_module_forward(m, x));
    ck_assert_error(TG_ERR_SHAPE,
                    "tg_layer_norm_module_forward: input [4,3] does not end in [3,4]");
    tg_tensor *x1 = tg_zeros(TG_FLOAT32, 1, SHAPE(4));
    ck_assert_ptr_null(tg_layer_norm_module_forward(m, x1));
    ck_assert_error(TG_ERR_SHAPE, "tg_layer_norm_module_forward", "[4]");
    ck_assert_ptr_null(tg_layer_norm_module_forward(NULL, x));
    ck_assert_error(TG_ERR_NULL, "tg_layer_norm_module_forward");
    ck_assert_ptr_null(tg_layer_norm_module_forward(m, NULL));
    ck_assert_error(TG_ERR_NULL, "tg_layer_norm_module_forward");
    ck_assert_int_eq(tg_layer_norm_module_params(NULL, "a", &(tg_params){0}), -1);
    ck_assert_error(TG_ERR_NULL, "tg_layer_norm_module_params");
    tg_release(x);
    tg_release(x1);
    tg_layer_norm_module_free(m);
}
END_TEST

/* ---- Embedding ------------------------------------------------------------------ */

START_TEST(embedding_module_init_is_standard_normal_from_rng)
{
    tg_rng *rng = tg_rng_new(31), *ref = tg_rng_new(31);
    tg_embedding_module *m = tg_embedding_module_new(500, 8, TG_FLOAT64, rng);
    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(m->num_embeddings, 500);
    ck_assert_int_eq(m->embedding_dim, 8);
    ck_assert_shape(m->weight, 500, 8);
    ck_assert(tg_requires_grad(m->weight) && tg_is_leaf(m->weight));
    tg_tensor *want = tg_randn(ref, TG_FLOAT64, 2, SHAPE(500, 8));
    assert_same(m->weight, want);
    double *v = values_of(m->weight), s = 0, s2 = 0;
    for (int i = 0; i < 4000; i++) {
        s += v[i];
        s2 += v[i] * v[i];
    }
    double mean = s / 4000, var = s2 / 4000 - mean * mean;
    ck_assert_msg(fabs(mean) < 0.08 && fabs(var - 1) < 0.1, "mean %g var %g", mean, var);
    free(v);
    tg_release(want);
    tg_embedding_module_free(m);
    tg_rng_free(rng);
    tg_rng_free(ref);
}
END_TEST

START_TEST(embedding_module_matches_op_called_directly)
{
    tg_rng *rng = tg_rng_new(32);
    tg_embedding_module *m = tg_embedding_module_new(5, 3, TG_FLOAT32, rng);
    tg_tensor *idx = tg_from_data(TG_INT64, 2, SHAPE(2, 3), (const int64_t[]){4, 0, 2, 2, 1, 4});
    tg_tensor *y = tg_embedding_module_forward(m, idx);
    ck_assert_shape(y, 2, 3, 3);
    tg_tensor *want = tg_embedding(m->weight, idx);
    assert_same(y, want);
    /* Row 4 appears twice: its gradient under sum(y) is 2 per element. */
    tg_tensor *loss = tg_sum(y, NULL, 0, false);
    ck_assert_int_eq(tg_backward(loss, NULL), 0);
    tg_release(loss);
    tg_tensor *g = tg_grad(m->weight);
    ck_assert_values(g, 0, 1, 1, 1, 1, 1, 1, 2, 2, 2, 0, 0, 0, 2, 2, 2);
    tg_params ps = {0};
    ck_assert_int_eq(tg_embedding_module_params(m, "wte", &ps), 0);
    ck_assert_int_eq(ps.count, 1);
    ck_assert_str_eq(ps.names[0], "wte.weight");
    ck_assert_ptr_eq(ps.tensors[0], m->weight);
    tg_params_clear(&ps);
    tg_release(g);
    tg_release(y);
    tg_release(want);
    tg_release(idx);
    tg_embedding_module_free(m);
    tg_rng_free(rng);
}
END_TEST

START_TEST(embedding_module_rejects_bad_arguments)
{
    tg_rng *rng = tg_rng_new(33);
    ck_assert_ptr_null(tg_embedding_module_new(0, 3, TG_FLOAT32, rng));
    ck_assert_error(TG_ERR_VALUE, "tg_embedding_module_new", "num_embeddings 0");
    ck_assert_ptr_null(tg_embedding_module_new(3, -1, TG_FLOAT32, rng));
    ck_assert_error(TG_ERR_VALUE, "tg_embedding_module_new", "embedding_dim -1");
    ck_assert_ptr_null(tg_embedding_module_new(3, 2, TG_INT64, rng));
    ck_assert_error(TG_ERR_DTYPE, "tg_embedding_module_new", "int64");
    ck_assert_ptr_null(tg_embedding_module_new(3, 2, TG_FLOAT32, NULL));
    ck_assert_error(TG_ERR_NULL, "tg_embedding_module_new", "rng");
    tg_embedding_module *m = tg_embedding_module_new(3, 2, TG_FLOAT32, rng);
    tg_tensor *idx = tg_from_data(TG_INT64, 1, SHAPE(2), (const int64_t[]){1, 3});
    ck_assert_ptr_null(tg_embedding_module_forward(m, idx));
    ck_assert_error(TG_ERR_INDEX, "tg_embedding");
    ck_assert_ptr_null(tg_embedding_module_forward(NULL, idx));
    ck_assert_error(TG_ERR_NULL, "tg_embedding_module_forward");
    ck_assert_ptr_null(tg_embedding_module_forward(m, NULL));
    ck_assert_error(TG_ERR_NULL, "tg_embedding_module_forward");
    ck_assert_int_eq(tg_embedding_module_params(m, "e", NULL), -1);
    ck_assert_error(TG_ERR_NULL, "tg_embedding_module_params", "ps");
    ck_assert_int_eq(tg_embedding_module_params(NULL, "e", &(tg_params){0}), -1);
    ck_assert_error(TG_ERR_NULL, "tg_embedding_module_params");
    tg_release(idx);
    tg_embedding_module_free(m);
    tg_rng_free(rng);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("modules");
    TCase *params = tcase_checked("params");
    tcase_add_test(params, params_add_find_and_numel);
    tcase_add_test(params, params_rejects_duplicate_names);
    tcase_add_test(params, params_grow_past_any_initial_capacity);
    tcase_add_test(params, params_clear_releases_and_leaves_an_empty_reusable_list);
    tcase_add_test(params, params_reject_null_arguments);
    suite_add_tcase(s, params);

    TCase *lin = tcase_checked("linear");
    tcase_add_test(lin, linear_forward_matches_hand_loop_on_3d_input);
    tcase_add_test(lin, linear_forward_takes_1d_2d_and_transposed_input);
    tcase_add_test(lin, linear_forward_without_bias);
    tcase_add_test(lin, linear_init_stays_within_pytorch_bounds);
    tcase_add_test(lin, linear_init_draws_weight_then_bias_from_rng);
    tcase_add_test(lin, linear_made_inside_a_scope_outlives_it);
    tcase_add_test(lin, linear_gradients_reach_weight_and_bias);
    tcase_add_test(lin, linear_forward_passes_gradcheck);
    tcase_add_test(lin, linear_params_are_named_weight_and_bias);
    tcase_add_test(lin, linear_rejects_bad_arguments);
    tcase_add_test(lin, free_of_null_modules_is_harmless);
    suite_add_tcase(s, lin);

    TCase *ln = tcase_checked("layer_norm");
    tcase_add_test(ln, layer_norm_module_starts_as_ones_and_zeros);
    tcase_add_test(ln, layer_norm_module_matches_op_called_directly);
    tcase_add_test(ln, layer_norm_module_without_affine_has_no_params);
    tcase_add_test(ln, layer_norm_module_rejects_bad_arguments);
    suite_add_tcase(s, ln);

    TCase *emb = tcase_checked("embedding");
    tcase_add_test(emb, embedding_module_init_is_standard_normal_from_rng);
    tcase_add_test(emb, embedding_module_matches_op_called_directly);
    tcase_add_test(emb, embedding_module_rejects_bad_arguments);
    suite_add_tcase(s, emb);
    modules_written_with_module_h_cases(s);
    return run_suite(s);
}
