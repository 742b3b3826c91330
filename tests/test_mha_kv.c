/* MultiheadAttention with keys and values of other widths than the queries
 * (PyTorch's kdim/vdim: q/k/v_proj_weight) and the train/eval switch; the
 * outputs and gradients against PyTorch are in test_parity.c (mha_kv). */
#include "testutil.h"

/* embed_dim 4, 2 heads, keys of width 3, values of width 5. */
enum { E = 4, H = 2, KD = 3, VD = 5, B = 2, L = 3, S = 4 };

START_TEST(kv_init_draws_q_k_v_from_xavier_then_out_proj)
{
    tg_rng *a = tg_rng_new(9), *b = tg_rng_new(9);
    tg_mha *m = tg_mha_new_kv(E, H, KD, VD, 0.0, true, TG_FLOAT64, a);
    ck_assert_ptr_nonnull(m);
    ck_assert_ptr_null(m->in_proj_weight);
    ck_assert_int_eq(m->kdim, KD);
    ck_assert_int_eq(m->vdim, VD);
    const int64_t cols[3] = {E, KD, VD};
    tg_tensor *got[3] = {m->q_proj_weight, m->k_proj_weight, m->v_proj_weight};
    for (int i = 0; i < 3; i++) {
        double x = sqrt(6.0 / (double)(E + cols[i]));
        tg_tensor *w = tg_uniform(b, TG_FLOAT64, 2, SHAPE(E, cols[i]), -x, x);
        ck_assert_shape(got[i], E, cols[i]);
        double *g = values_of(got[i]), *v = values_of(w);
        for (int64_t j = 0; j < E * cols[i]; j++)
            ck_assert_double_eq(g[j], v[j]);
        free(g);
        free(v);
        tg_release(w);
        ck_assert(tg_requires_grad(got[i]));
    }
    double lb = 1 / sqrt((double)E);
    tg_tensor *w = tg_uniform(b, TG_FLOAT64, 2, SHAPE(E, E), -lb, lb);
    ck_assert_double_eq(tg_get(m->out_proj->weight, SHAPE(1, 2)), tg_get(w, SHAPE(1, 2)));
    ck_assert_uint_eq(tg_rng_next(a), tg_rng_next(b));
    ck_assert_shape(m->in_proj_bias, 3 * E);
    ck_assert(m->train);
    tg_release(w);
    tg_mha_free(m);
    /* kdim == vdim == embed_dim is tg_mha_new: the packed weight. */
    m = tg_mha_new_kv(E, H, E, E, 0.0, false, TG_FLOAT32, a);
    ck_assert_shape(m->in_proj_weight, 3 * E, E);
    ck_assert_ptr_null(m->q_proj_weight);
    ck_assert_ptr_null(m->in_proj_bias);
    tg_mha_free(m);
    tg_rng_free(a);
    tg_rng_free(b);
}
END_TEST

START_TEST(kv_params_have_torch_names_in_torch_order)
{
    tg_rng *rng = tg_rng_new(1);
    tg_mha *m = tg_mha_new_kv(E, H, KD, VD, 0.0, true, TG_FLOAT32, rng);
    tg_params ps = {0};
    ck_assert_int_eq(tg_mha_params(m, "multihead_attn", &ps), 0);
    const char *want[] = {"q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias",
                          "out_proj.weight", "out_proj.bias"};
    ck_assert_int_eq(ps.count, 6);
    char name[64];
    for (int i = 0; i < 6; i++) {
        snprintf(name, sizeof name, "multihead_attn.%s", want[i]);
        ck_assert_str_eq(ps.names[i], name);
    }
    ck_assert_ptr_eq(ps.tensors[1], m->k_proj_weight);
    ck_assert_int_eq(tg_params_numel(&ps), E * E + E * KD + E * VD + 3 * E + E * E + E);
    tg_params_clear(&ps);
    tg_mha_free(m);
    m = tg_mha_new_kv(E, H, KD, E, 0.0, false, TG_FLOAT32, rng);
    ck_assert_int_eq(tg_mha_params(m, NULL, &ps), 0);
    ck_assert_int_eq(ps.count, 4);
    ck_assert_str_eq(ps.names[2], "v_proj_weight");
    ck_assert_str_eq(ps.names[3], "out_proj.weight");
    tg_params_clear(&ps);
    tg_mha_free(m);
    tg_rng_free(rng);
}
END_TEST

/* The separate layout computes what the packed one does when its three
 * weights are the packed weight's row blocks (kdim = vdim = E, by hand). */
START_TEST(separate_projections_equal_the_packed_weight_split)
{
    tg_rng *rng = tg_rng_new(2);
    tg_mha *p = tg_mha_new(E, H, 0.0, true, TG_FLOAT64, rng);
    tg_mha_set_train(p, false);
    double *bias = tg_data(p->in_proj_bias);
    for (int i = 0; i < 3 * E; i++)
        bias[i] = 0.1 * i - 0.4;
    tg_tensor *q = tg_randn(rng, TG_FLOAT64, 3, SHAPE(B, L, E));
    tg_tensor *k = tg_randn(rng, TG_FLOAT64, 3, SHAPE(B, S, E));
    tg_tensor *v = tg_randn(rng, TG_FLOAT64, 3, SHAPE(B, S, E));
    tg_scope_begin();
    tg_mha sep = *p;
    sep.in_proj_weight = NULL;
    sep.q_proj_weight = tg_contiguous(tg_narrow(p->in_proj_weight, 0, 0, E));
    sep.k_proj_weight = tg_contiguous(tg_narrow(p->in_proj_weight, 0, E, E));
    sep.v_proj_weight = tg_contiguous(tg_narrow(p->in_proj_weight, 0, 2 * E, E));
    tg_mha_options o = {.is_causal = true};
    tg_tensor *want = tg_mha_forward(p, q, k, v, &o, NULL);
    tg_tensor *got = tg_mha_forward(&sep, q, k, v, &o, NULL);
    double *w = values_of(want);
    assert_values(got, w, B * L * E, 1e-13);
    free(w);
    /* self-attention too (one tensor for query, key and value) */
    want = tg_mha_forward(p, q, q, q, NULL, NULL);
    got = tg_mha_forward(&sep, q, q, q, NULL, NULL);
    w = values_of(want);
    assert_values(got, w, B * L * E, 1e-13);
    free(w);
    tg_scope_end();
    tg_release(q);
    tg_release(k);
    tg_release(v);
    tg_mha_free(p);
    tg_rng_free(rng);
}
END_TEST

/* ---- gradients ---------------------------------------------------------------- */

typedef struct {
    int64_t kdim, vdim;
    const tg_tensor *pad;
} kv_ctx;

/* inputs: query, key, value, q/k/v_proj_weight, in_proj_bias, out_proj.weight,
 * out_proj.bias; the module is a stack copy around the checker's tensors. */
static tg_tensor *kv_fn(tg_tensor *const *in, int n, void *ctx)
{
    (void)n;
    const kv_ctx *c = ctx;
    tg_linear out_proj = {E, E, in[7], in[8]};
    tg_mha m = {.embed_dim = E, .num_heads = H, .head_dim = E / H, .in_proj_bias = in[6],
                .out_proj = &out_proj, .kdim = c->kdim, .vdim = c->vdim,
                .q_proj_weight = in[3], .k_proj_weight = in[4], .v_proj_weight = in[5]};
    tg_mha_options o = {.key_padding_mask = c->pad};
    return tg_mha_forward(&m, in[0], in[1], in[2], &o, NULL);
}

static void check_kv_gradients(int64_t kdim, int64_t vdim)
{
    tg_rng *rng = tg_rng_new(11);
    tg_tensor *pad = make(TG_BOOL, 2, SHAPE(B, S), (const double[]){1, 0, 0, 0, 0, 0, 1, 1});
    kv_ctx c = {kdim, vdim, pad};
    tg_tensor *in[9] = {
        tg_randn(rng, TG_FLOAT64, 3, SHAPE(B, L, E)),
        tg_randn(rng, TG_FLOAT64, 3, SHAPE(B, S, kdim)),
        tg_randn(rng, TG_FLOAT64, 3, SHAPE(B, S, vdim)),
        tg_randn(rng, TG_FLOAT64, 2, SHAPE(E, E)),
        tg_randn(rng, TG_FLOAT64, 2, SHAPE(E, kdim)),
        tg_randn(rng, TG_FLOAT64, 2, SHAPE(E, vdim)),
        tg_randn(rng, TG_FLOAT64, 1, SHAPE(3 * E)),
        tg_randn(rng, TG_FLOAT64, 2, SHAPE(E, E)),
        tg_randn(rng, TG_FLOAT64, 1, SHAPE(E)),
    };
    tg_gradcheck_result r;
    ck_assert_msg(tg_gradcheck(kv_fn, &c, in, 9, NULL, &r) == 1, "%s", r.message);
    int64_t n = 0;
    for (int i = 0; i < 9; i++)
        n += tg_numel(in[i]);
    ck_assert_int_eq(r.checked, n);
    ck_assert_msg(tg_gradcheck_float32(kv_fn, &c, in, 9, NULL, &r) == 1, "%s", r.message);
    for (int i = 0; i < 9; i++)
        tg_release(in[i]);
    tg_release(pad);
    tg_rng_free(rng);
}

START_TEST(kv_passes_gradcheck_with_key_padding)
{
    check_kv_gradients(KD, VD);
    check_kv_gradients(E, VD); /* only the values differ */
}
END_TEST

/* ---- train / eval, errors ---------------------------------------------------------- */

START_TEST(set_train_switches_dropout_on_and_off)
{
    tg_rng *rng = tg_rng_new(3);
    tg_mha *m = tg_mha_new_kv(E, H, KD, VD, 0.5, true, TG_FLOAT64, rng);
    tg_tensor *q = tg_randn(rng, TG_FLOAT64, 3, SHAPE(B, L, E));
    tg_tensor *k = tg_randn(rng, TG_FLOAT64, 3, SHAPE(B, S, KD));
    tg_tensor *v = tg_randn(rng, TG_FLOAT64, 3, SHAPE(B, S, VD));
    tg_mha_set_train(m, false);
    ck_assert(!m->train);
    tg_scope_begin();
    double *e1 = values_of(tg_mha_forward(m, q, k, v, NULL, NULL));
    double *e2 = values_of(tg_mha_forward(m, q, k, v, NULL, NULL));
    tg_mha_set_train(m, true);
    ck_assert(m->train);
    double *t1 = values_of(tg_mha_forward(m, q, k, v, NULL, NULL));
    tg_scope_end();
    double diff = 0;
    for (int i = 0; i < B * L * E; i++) {
        ck_assert_double_eq(e1[i], e2[i]);
        diff += fabs(t1[i] - e1[i]);
    }
    ck_assert_double_gt(diff, 1e-3);
    free(e1);
    free(e2);
    free(t1);
    tg_mha_set_train(NULL, true);
    tg_release(q);
    tg_release(k);
    tg_release(v);
    tg_mha_free(m);
    tg_rng_free(rng);
}
END_TEST

START_TEST(kv_new_rejects_widths_that_are_not_positive)
{
    tg_rng *rng = tg_rng_new(1);
    ck_assert_ptr_null(tg_mha_new_kv(E, H, 0, VD, 0.0, true, TG_FLOAT32, rng));
    ck_assert_error(TG_ERR_VALUE, "tg_mha_new_kv", "kdim 0");
    ck_assert_ptr_null(tg_mha_new_kv(E, H, KD, -2, 0.0, true, TG_FLOAT32, rng));
    ck_assert_error(TG_ERR_VALUE, "tg_mha_new_kv", "vdim -2");
    ck_assert_ptr_null(tg_mha_new_kv(E, 3, KD, VD, 0.0, true, TG_FLOAT32, rng));
    ck_assert_error(TG_ERR_VALUE, "tg_mha_new_kv", "num_heads 3");
    ck_assert_ptr_null(tg_mha_new_kv(E, H, KD, VD, 0.0, true, TG_INT64, rng));
    ck_assert_error(TG_ERR_DTYPE, "tg_mha_new_kv", "int64");
    ck_assert_ptr_null(tg_mha_new_kv(E, H, KD, VD, 0.0, true, TG_FLOAT32, NULL));
    ck_assert_error(TG_ERR_NULL, "tg_mha_new_kv");
    tg_rng_free(rng);
}
END_TEST

START_TEST(kv_forward_rejects_keys_and_values_of_the_wrong_width)
{
    tg_rng *rng = tg_rng_new(1);
    tg_mha *m = tg_mha_new_kv(E, H, KD, VD, 0.0, true, TG_FLOAT32, rng);
    tg_tensor *q = tg_zeros(TG_FLOAT32, 3, SHAPE(B, L, E));
    tg_tensor *k = tg_zeros(TG_FLOAT32, 3, SHAPE(B, S, KD)), *v = tg_zeros(TG_FLOAT32, 3, SHAPE(B, S, VD));
    tg_tensor *kE = tg_zeros(TG_FLOAT32, 3, SHAPE(B, S, E));
    tg_tensor *v3 = tg_zeros(TG_FLOAT32, 3, SHAPE(B, S + 1, VD));
    ck_assert_ptr_null(tg_mha_forward(m, q, kE, v, NULL, NULL));
    ck_assert_error(TG_ERR_SHAPE, "tg_mha_forward", "key [2,4,4]", "kdim 3");
    ck_assert_ptr_null(tg_mha_forward(m, q, k, k, NULL, NULL));
    ck_assert_error(TG_ERR_SHAPE, "tg_mha_forward", "value [2,4,3]", "vdim 5");
    ck_assert_ptr_null(tg_mha_forward(m, q, k, v3, NULL, NULL));
    ck_assert_error(TG_ERR_SHAPE, "tg_mha_forward", "key [2,4,3]", "value [2,5,5]");
    ck_assert_ptr_null(tg_mha_forward(m, q, q, q, NULL, NULL)); /* self-attention needs kdim = E */
    ck_assert_error(TG_ERR_SHAPE, "tg_mha_forward", "kdim 3");
    /* a hand-made module whose k_proj_weight does not fit kdim */
    tg_mha bad = *m;
    bad.k_proj_weight = m->v_proj_weight;
    ck_assert_ptr_null(tg_mha_forward(&bad, q, k, v, NULL, NULL));
    ck_assert_error(TG_ERR_SHAPE, "tg_mha_forward", "k_proj_weight [4,5]", "[4,3]");
    bad.k_proj_weight = NULL;
    ck_assert_ptr_null(tg_mha_forward(&bad, q, k, v, NULL, NULL));
    ck_assert_error(TG_ERR_NULL, "tg_mha_forward", "in_proj_weight");
    tg_release(q);
    tg_release(k);
    tg_release(v);
    tg_release(kE);
    tg_release(v3);
    tg_mha_free(m);
    tg_rng_free(rng);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("mha_kv");
    TCase *mod = tcase_checked("module");
    tcase_add_test(mod, kv_init_draws_q_k_v_from_xavier_then_out_proj);
    tcase_add_test(mod, kv_params_have_torch_names_in_torch_order);
    tcase_add_test(mod, separate_projections_equal_the_packed_weight_split);
    tcase_add_test(mod, kv_passes_gradcheck_with_key_padding);
    tcase_add_test(mod, set_train_switches_dropout_on_and_off);
    suite_add_tcase(s, mod);
    TCase *err = tcase_checked("errors");
    tcase_add_test(err, kv_new_rejects_widths_that_are_not_positive);
    tcase_add_test(err, kv_forward_rejects_keys_and_values_of_the_wrong_width);
    suite_add_tcase(s, err);
    return run_suite(s);
}
