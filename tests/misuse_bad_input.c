/* Part of the misuse suite (test_misuse.c): the bad-input catalogue, one
 * table entry per distinct misuse of the public API's arguments. Each entry
 * makes one bad call inside a scope and says whether the call reported
 * failure; the driver checks the code, that the message names the function
 * and the offending values, and that no tensor outlives the entry. */
#include "testutil.h"
#include "suite_parts.h"

#include "internal.h" /* only to plant a gradient the public API cannot make */

#include <unistd.h>

/* An entry's call: true when what the bad call returned signals failure
 * (NULL, a negative status or NaN). It runs inside a scope, so tensors made
 * by public functions need no release; module and optimizer objects do. */
typedef bool (*bad_call)(void);

typedef struct {
    const char *name;
    bad_call call;
    tg_error code;
    const char *frags[4]; /* the function's name first, then offending values */
} bad_input;

#define FAILS(t) return (t) == NULL
#define FAILS_STATUS(s) return (s) < 0

static tg_tensor *f32(int ndim, const int64_t *shape) { return tg_ones(TG_FLOAT32, ndim, shape); }
static tg_tensor *i64(int ndim, const int64_t *shape, int64_t v)
{
    return tg_full(TG_INT64, ndim, shape, (double)v);
}
static tg_tensor *param(int ndim, const int64_t *shape)
{
    tg_tensor *p = f32(ndim, shape);
    tg_set_requires_grad(p, true);
    return p;
}

/* ---- creation and accessors ------------------------------------------------- */

static bool zeros_too_many_dims(void) { FAILS(tg_zeros(TG_FLOAT32, 9, SHAPE(1, 1, 1, 1, 1, 1, 1, 1, 1))); }
static bool zeros_negative_size(void) { FAILS(tg_zeros(TG_FLOAT32, 2, SHAPE(2, -3))); }
static bool zeros_null_shape(void) { FAILS(tg_zeros(TG_FLOAT32, 2, NULL)); }
static bool zeros_absurd_shape(void) { FAILS(tg_zeros(TG_FLOAT32, 2, SHAPE(INT64_C(1) << 40, INT64_C(1) << 40))); }
static bool zeros_unknown_dtype(void) { FAILS(tg_zeros((tg_dtype)42, 1, SHAPE(2))); }
static bool from_data_null_data(void) { FAILS(tg_from_data(TG_FLOAT64, 1, SHAPE(3), NULL)); }
static bool arange_zero_step(void) { FAILS(tg_arange(TG_FLOAT32, 0, 5, 0)); }
static bool arange_nan_end(void) { FAILS(tg_arange(TG_FLOAT32, 0, NAN, 1)); }
static bool causal_mask_negative(void) { FAILS(tg_causal_mask(-4)); }
static bool uniform_low_above_high(void)
{
    tg_rng *rng = tg_rng_new(1);
    tg_tensor *t = tg_uniform(rng, TG_FLOAT32, 1, SHAPE(3), 2.0, 1.0);
    tg_rng_free(rng);
    FAILS(t);
}
static bool randn_int_dtype(void)
{
    tg_rng *rng = tg_rng_new(1);
    tg_tensor *t = tg_randn(rng, TG_INT64, 1, SHAPE(3));
    tg_rng_free(rng);
    FAILS(t);
}
static bool item_of_many(void) { return isnan(tg_item(f32(2, SHAPE(2, 3)))); }
static bool get_index_out_of_range(void) { return isnan(tg_get(f32(2, SHAPE(2, 3)), SHAPE(1, 5))); }
static bool size_dim_out_of_range(void) { return tg_size(f32(2, SHAPE(2, 3)), 4) < 0; }
static bool data_of_transposed(void) { FAILS(tg_data(tg_transpose(f32(2, SHAPE(2, 3)), 0, 1))); }
static bool copy_to_small_buffer(void)
{
    double buf[4];
    FAILS_STATUS(tg_copy_to(f32(2, SHAPE(2, 3)), TG_FLOAT64, buf, 4));
}
static bool rng_state_wrong_size(void)
{
    tg_rng *rng = tg_rng_new(1);
    int rc = tg_rng_set_state_tensor(rng, i64(1, SHAPE(3), 0));
    tg_rng_free(rng);
    FAILS_STATUS(rc);
}

/* ---- pointwise, reductions, matmul ----------------------------------------------- */

static bool add_null(void) { FAILS(tg_add(f32(1, SHAPE(3)), NULL)); }
static bool add_no_broadcast(void) { FAILS(tg_add(f32(2, SHAPE(2, 3)), f32(1, SHAPE(4)))); }
static bool add_mixed_dtypes(void) { FAILS(tg_add(f32(1, SHAPE(3)), tg_ones(TG_FLOAT64, 1, SHAPE(3)))); }
static bool exp_of_int(void) { FAILS(tg_exp(i64(1, SHAPE(3), 1))); }
static bool gelu_unknown_kind(void) { FAILS(tg_gelu(f32(1, SHAPE(3)), (tg_gelu_kind)7)); }
static bool to_unknown_dtype(void) { FAILS(tg_to_dtype(f32(1, SHAPE(3)), (tg_dtype)42)); }
static bool sum_dim_out_of_range(void) { FAILS(tg_sum(f32(2, SHAPE(2, 3)), (int[]){5}, 1, false)); }
static bool sum_dim_repeated(void) { FAILS(tg_sum(f32(2, SHAPE(2, 3)), (int[]){1, -1}, 2, false)); }
static bool max_of_empty_dim(void) { FAILS_STATUS(tg_max(f32(2, SHAPE(0, 3)), 0, false, NULL, NULL)); }
static bool max_of_scalar(void) { FAILS_STATUS(tg_max(tg_scalar(TG_FLOAT32, 1), 0, false, NULL, NULL)); }
static bool matmul_inner_mismatch(void) { FAILS(tg_matmul(f32(2, SHAPE(2, 3)), f32(2, SHAPE(4, 5)))); }
static bool matmul_of_scalar(void) { FAILS(tg_matmul(tg_scalar(TG_FLOAT32, 2), f32(1, SHAPE(3)))); }
static bool matmul_batch_mismatch(void) { FAILS(tg_matmul(f32(3, SHAPE(2, 2, 3)), f32(3, SHAPE(4, 3, 5)))); }
static bool matmul_of_int(void) { FAILS(tg_matmul(i64(2, SHAPE(2, 2), 1), i64(2, SHAPE(2, 2), 1))); }
static bool affine_null_weight(void) { FAILS(tg_affine(f32(2, SHAPE(3, 4)), NULL, NULL)); }
static bool affine_in_mismatch(void) { FAILS(tg_affine(f32(2, SHAPE(3, 4)), f32(2, SHAPE(5, 6)), NULL)); }
static bool affine_weight_not_2d(void) { FAILS(tg_affine(f32(2, SHAPE(3, 4)), f32(1, SHAPE(4)), NULL)); }
static bool affine_bias_wrong_size(void)
{
    FAILS(tg_affine(f32(2, SHAPE(3, 4)), f32(2, SHAPE(5, 4)), f32(1, SHAPE(6))));
}
static bool affine_dtypes_differ(void)
{
    FAILS(tg_affine(f32(2, SHAPE(3, 4)), tg_ones(TG_FLOAT64, 2, SHAPE(5, 4)), NULL));
}
static bool affine_of_scalar(void) { FAILS(tg_affine(tg_scalar(TG_FLOAT32, 2), f32(2, SHAPE(5, 4)), NULL)); }
static bool gelu_affine_unknown_kind(void)
{
    FAILS(tg_gelu_affine(f32(2, SHAPE(3, 4)), (tg_gelu_kind)7, f32(2, SHAPE(5, 4)), NULL));
}
static bool gelu_affine_in_mismatch(void)
{
    FAILS(tg_gelu_affine(f32(2, SHAPE(3, 4)), TG_GELU_TANH, f32(2, SHAPE(5, 6)), NULL));
}
static bool gelu_affine_of_int(void)
{
    FAILS(tg_gelu_affine(i64(2, SHAPE(3, 4), 1), TG_GELU_TANH, f32(2, SHAPE(5, 4)), NULL));
}
static bool ln_affine_null_weight(void)
{
    FAILS(tg_layer_norm_affine(f32(2, SHAPE(3, 4)), NULL, NULL, 1e-5, NULL, NULL));
}
static bool ln_affine_in_mismatch(void)
{
    FAILS(tg_layer_norm_affine(f32(2, SHAPE(3, 4)), NULL, NULL, 1e-5, f32(2, SHAPE(5, 6)), NULL));
}
static bool ln_affine_norm_weight_wrong_size(void)
{
    FAILS(tg_layer_norm_affine(f32(2, SHAPE(3, 4)), f32(1, SHAPE(3)), NULL, 1e-5,
                               f32(2, SHAPE(5, 4)), NULL));
}
static bool ln_affine_norm_bias_dtype(void)
{
    FAILS(tg_layer_norm_affine(f32(2, SHAPE(3, 4)), NULL, tg_ones(TG_FLOAT64, 1, SHAPE(4)), 1e-5,
                               f32(2, SHAPE(5, 4)), NULL));
}
static bool ln_affine_eps_zero(void)
{
    FAILS(tg_layer_norm_affine(f32(2, SHAPE(3, 4)), NULL, NULL, 0, f32(2, SHAPE(5, 4)), NULL));
}
static bool ln_affine_bias_wrong_size(void)
{
    FAILS(tg_layer_norm_affine(f32(2, SHAPE(3, 4)), NULL, NULL, 1e-5, f32(2, SHAPE(5, 4)),
                               f32(1, SHAPE(4))));
}
static bool ln_affine_of_scalar(void)
{
    FAILS(tg_layer_norm_affine(tg_scalar(TG_FLOAT32, 2), NULL, NULL, 1e-5, f32(2, SHAPE(5, 4)),
                               NULL));
}
static bool ln_affine_of_int(void)
{
    FAILS(tg_layer_norm_affine(i64(2, SHAPE(3, 4), 1), NULL, NULL, 1e-5, f32(2, SHAPE(5, 4)),
                               NULL));
}

/* ---- views and joins ------------------------------------------------------------- */

static bool transpose_dim_out_of_range(void) { FAILS(tg_transpose(f32(2, SHAPE(2, 3)), 0, 2)); }
static bool permute_repeated_dim(void) { FAILS(tg_permute(f32(2, SHAPE(2, 3)), (int[]){0, 0})); }
static bool permute_null_perm(void) { FAILS(tg_permute(f32(2, SHAPE(2, 3)), NULL)); }
static bool reshape_wrong_numel(void) { FAILS(tg_reshape(f32(2, SHAPE(2, 3)), 1, SHAPE(4))); }
static bool reshape_two_inferred(void) { FAILS(tg_reshape(f32(2, SHAPE(2, 3)), 2, SHAPE(-1, -1))); }
static bool narrow_past_end(void) { FAILS(tg_narrow(f32(2, SHAPE(2, 3)), 1, 2, 4)); }
static bool expand_non_unit_dim(void) { FAILS(tg_expand(f32(2, SHAPE(2, 3)), 2, SHAPE(2, 4))); }
static bool squeeze_non_unit_dim(void) { FAILS(tg_squeeze(f32(2, SHAPE(2, 3)), 1)); }
static bool unsqueeze_dim_out_of_range(void) { FAILS(tg_unsqueeze(f32(2, SHAPE(2, 3)), 4)); }
static bool concat_nothing(void) { FAILS(tg_concat((const tg_tensor *[]){NULL}, 0, 0)); }
static bool concat_mismatched_dims(void)
{
    FAILS(tg_concat((const tg_tensor *[]){f32(2, SHAPE(2, 3)), f32(2, SHAPE(2, 4))}, 2, 0));
}
static bool concat_null_element(void)
{
    FAILS(tg_concat((const tg_tensor *[]){f32(2, SHAPE(2, 3)), NULL}, 2, 0));
}

/* ---- neural-network ops ---------------------------------------------------------- */

static bool softmax_dim_out_of_range(void) { FAILS(tg_softmax(f32(2, SHAPE(2, 3)), 2)); }
static bool log_softmax_of_bool(void) { FAILS(tg_log_softmax(tg_zeros(TG_BOOL, 1, SHAPE(3)), 0)); }
static bool masked_fill_float_mask(void) { FAILS(tg_masked_fill(f32(2, SHAPE(2, 3)), f32(2, SHAPE(2, 3)), 0)); }
static bool masked_fill_mask_wrong_shape(void)
{
    FAILS(tg_masked_fill(f32(2, SHAPE(2, 3)), tg_zeros(TG_BOOL, 2, SHAPE(3, 2)), 0));
}
static bool dropout_p_one(void) { FAILS(tg_dropout(f32(1, SHAPE(3)), 1.0, true, NULL)); }
static bool dropout_p_nan(void) { FAILS(tg_dropout(f32(1, SHAPE(3)), NAN, true, NULL)); }
static bool dropout_without_rng(void) { FAILS(tg_dropout(f32(1, SHAPE(3)), 0.5, true, NULL)); }
static bool layer_norm_eps_nan(void) { FAILS(tg_layer_norm(f32(2, SHAPE(2, 3)), 1, NULL, NULL, NAN)); }
static bool layer_norm_eps_negative(void) { FAILS(tg_layer_norm(f32(2, SHAPE(2, 3)), 1, NULL, NULL, -1e-5)); }
static bool layer_norm_weight_wrong_shape(void)
{
    FAILS(tg_layer_norm(f32(2, SHAPE(2, 3)), 1, f32(1, SHAPE(4)), NULL, 1e-5));
}
static bool layer_norm_too_many_dims(void) { FAILS(tg_layer_norm(f32(2, SHAPE(2, 3)), 3, NULL, NULL, 1e-5)); }
static bool embedding_index_too_big(void) { FAILS(tg_embedding(f32(2, SHAPE(4, 2)), i64(1, SHAPE(3), 7))); }
static bool embedding_index_negative(void) { FAILS(tg_embedding(f32(2, SHAPE(4, 2)), i64(1, SHAPE(3), -1))); }
static bool embedding_float_indices(void) { FAILS(tg_embedding(f32(2, SHAPE(4, 2)), f32(1, SHAPE(3)))); }
static bool cross_entropy_target_too_big(void)
{
    FAILS(tg_cross_entropy(f32(2, SHAPE(2, 3)), i64(1, SHAPE(2), 3), -100));
}
static bool cross_entropy_targets_wrong_shape(void)
{
    FAILS(tg_cross_entropy(f32(2, SHAPE(2, 3)), i64(1, SHAPE(5), 0), -100));
}
static bool cross_entropy_float_targets(void)
{
    FAILS(tg_cross_entropy(f32(2, SHAPE(2, 3)), f32(1, SHAPE(2)), -100));
}
static bool mse_shape_mismatch(void) { FAILS(tg_mse_loss(f32(2, SHAPE(2, 3)), f32(2, SHAPE(3, 2)))); }

/* ---- autograd misuse ------------------------------------------------------------- */

static bool backward_twice(void)
{
    tg_tensor *loss = tg_sum(tg_mul(param(1, SHAPE(3)), f32(1, SHAPE(3))), NULL, 0, false);
    if (tg_backward(loss, NULL) < 0)
        return false;
    FAILS_STATUS(tg_backward(loss, NULL));
}
static bool backward_non_scalar(void)
{
    FAILS_STATUS(tg_backward(tg_mul_scalar(param(2, SHAPE(2, 3)), 2), NULL));
}
static bool backward_without_grad(void) { FAILS_STATUS(tg_backward(tg_sum(f32(1, SHAPE(3)), NULL, 0, false), NULL)); }
static bool backward_grad_output_wrong_shape(void)
{
    FAILS_STATUS(tg_backward(tg_mul_scalar(param(2, SHAPE(2, 3)), 2), f32(2, SHAPE(3, 2))));
}
static bool backward_null(void) { FAILS_STATUS(tg_backward(NULL, NULL)); }
static bool requires_grad_on_int(void) { FAILS_STATUS(tg_set_requires_grad(i64(1, SHAPE(3), 1), true)); }
static bool requires_grad_on_non_leaf(void)
{
    FAILS_STATUS(tg_set_requires_grad(tg_exp(param(1, SHAPE(3))), false));
}

/* ---- attention --------------------------------------------------------------------- */

static bool sdpa_width_mismatch(void)
{
    FAILS(tg_scaled_dot_product_attention(f32(2, SHAPE(4, 8)), f32(2, SHAPE(5, 6)),
                                          f32(2, SHAPE(5, 6)), NULL, 0, false, 0, NULL, NULL));
}
static bool sdpa_mask_wrong_shape(void)
{
    FAILS(tg_scaled_dot_product_attention(f32(2, SHAPE(4, 8)), f32(2, SHAPE(5, 8)),
                                          f32(2, SHAPE(5, 8)), tg_zeros(TG_BOOL, 2, SHAPE(3, 5)),
                                          0, false, 0, NULL, NULL));
}
static bool sdpa_dropout_nan(void)
{
    FAILS(tg_scaled_dot_product_attention(f32(2, SHAPE(4, 8)), f32(2, SHAPE(5, 8)),
                                          f32(2, SHAPE(5, 8)), NULL, NAN, false, 0, NULL, NULL));
}
static bool sdpa_scale_nan(void)
{
    FAILS(tg_scaled_dot_product_attention(f32(2, SHAPE(4, 8)), f32(2, SHAPE(5, 8)),
                                          f32(2, SHAPE(5, 8)), NULL, 0, false, NAN, NULL, NULL));
}

/* ---- modules ----------------------------------------------------------------------- */

static bool linear_zero_features(void)
{
    tg_rng *rng = tg_rng_new(1);
    tg_linear *m = tg_linear_new(0, 4, true, TG_FLOAT32, rng);
    tg_rng_free(rng);
    bool failed = !m;
    tg_linear_free(m);
    return failed;
}
static bool linear_wrong_width(void)
{
    tg_rng *rng = tg_rng_new(1);
    tg_linear *m = tg_linear_new(3, 4, true, TG_FLOAT32, rng);
    tg_tensor *y = tg_linear_forward(m, f32(2, SHAPE(2, 5)));
    tg_linear_free(m);
    tg_rng_free(rng);
    FAILS(y);
}
static bool layer_norm_module_eps_nan(void)
{
    tg_layer_norm_module *m = tg_layer_norm_module_new(1, SHAPE(4), NAN, true, TG_FLOAT32);
    bool failed = !m;
    tg_layer_norm_module_free(m);
    return failed;
}
static bool embedding_module_no_rows(void)
{
    tg_rng *rng = tg_rng_new(1);
    tg_embedding_module *m = tg_embedding_module_new(-1, 4, TG_FLOAT32, rng);
    tg_rng_free(rng);
    bool failed = !m;
    tg_embedding_module_free(m);
    return failed;
}
static bool mha_heads_not_dividing(void)
{
    tg_rng *rng = tg_rng_new(1);
    tg_mha *m = tg_mha_new(10, 3, 0, true, TG_FLOAT32, rng);
    tg_rng_free(rng);
    bool failed = !m;
    tg_mha_free(m);
    return failed;
}
static bool mha_dropout_above_one(void)
{
    tg_rng *rng = tg_rng_new(1);
    tg_mha *m = tg_mha_new(8, 2, 1.5, true, TG_FLOAT32, rng);
    tg_rng_free(rng);
    bool failed = !m;
    tg_mha_free(m);
    return failed;
}
static bool mha_padding_mask_wrong_shape(void)
{
    tg_rng *rng = tg_rng_new(1);
    tg_mha *m = tg_mha_new(8, 2, 0, true, TG_FLOAT32, rng);
    tg_tensor *x = f32(3, SHAPE(2, 5, 8));
    tg_mha_options o = {.key_padding_mask = tg_zeros(TG_BOOL, 2, SHAPE(2, 4))};
    tg_tensor *y = tg_mha_forward(m, x, x, x, &o, NULL);
    tg_mha_free(m);
    tg_rng_free(rng);
    FAILS(y);
}
static bool mha_query_wrong_width(void)
{
    tg_rng *rng = tg_rng_new(1);
    tg_mha *m = tg_mha_new(8, 2, 0, true, TG_FLOAT32, rng);
    tg_tensor *x = f32(3, SHAPE(2, 5, 6));
    tg_tensor *y = tg_mha_forward(m, x, x, x, NULL, NULL);
    tg_mha_free(m);
    tg_rng_free(rng);
    FAILS(y);
}
static bool mha_int64_mask(void)
{
    tg_rng *rng = tg_rng_new(1);
    tg_mha *m = tg_mha_new(8, 2, 0, true, TG_FLOAT32, rng);
    tg_tensor *x = f32(3, SHAPE(2, 5, 8));
    tg_mha_options o = {.attn_mask = i64(2, SHAPE(5, 5), 0)};
    tg_tensor *y = tg_mha_forward(m, x, x, x, &o, NULL);
    tg_mha_free(m);
    tg_rng_free(rng);
    FAILS(y);
}
static const tg_encoder_config good_layer = {
    .d_model = 8, .nhead = 2, .dim_feedforward = 16, .dropout = 0.1, .layer_norm_eps = 1e-5};
static bool encoder_layer_with(tg_encoder_config c)
{
    tg_rng *rng = tg_rng_new(1);
    tg_encoder_layer *m = tg_encoder_layer_new(&c, TG_FLOAT32, rng);
    tg_rng_free(rng);
    bool failed = !m;
    tg_encoder_layer_free(m);
    return failed;
}
static bool encoder_heads_not_dividing(void)
{
    tg_encoder_config c = good_layer;
    c.nhead = 3;
    return encoder_layer_with(c);
}
static bool encoder_eps_zero(void)
{
    tg_encoder_config c = good_layer;
    c.layer_norm_eps = 0;
    return encoder_layer_with(c);
}
static bool encoder_dropout_nan(void)
{
    tg_encoder_config c = good_layer;
    c.dropout = NAN;
    return encoder_layer_with(c);
}
static bool encoder_no_layers(void)
{
    tg_rng *rng = tg_rng_new(1);
    tg_encoder *m = tg_encoder_new(&good_layer, 0, true, TG_FLOAT32, rng);
    tg_rng_free(rng);
    bool failed = !m;
    tg_encoder_free(m);
    return failed;
}
static const tg_gpt_config small_gpt = {
    .vocab_size = 11, .block_size = 4, .n_layer = 1, .n_head = 2, .n_embd = 8};
static bool gpt_heads_not_dividing(void)
{
    tg_gpt_config c = small_gpt;
    c.n_head = 3;
    tg_rng *rng = tg_rng_new(1);
    tg_gpt *m = tg_gpt_new(&c, TG_FLOAT32, rng);
    tg_rng_free(rng);
    bool failed = !m;
    tg_gpt_free(m);
    return failed;
}
/* Runs call on a fresh small GPT. */
static bool with_gpt(bool (*call)(tg_gpt *m, tg_rng *rng))
{
    tg_rng *rng = tg_rng_new(1);
    tg_gpt *m = tg_gpt_new(&small_gpt, TG_FLOAT32, rng);
    bool failed = m && call(m, rng);
    tg_gpt_free(m);
    tg_rng_free(rng);
    return failed;
}
static bool gpt_long_sequence(tg_gpt *m, tg_rng *rng)
{
    (void)rng;
    FAILS(tg_gpt_forward(m, i64(2, SHAPE(1, 5), 0), NULL, NULL));
}
static bool gpt_sequence_longer_than_context(void) { return with_gpt(gpt_long_sequence); }
static bool gpt_token_out_of_vocab(tg_gpt *m, tg_rng *rng)
{
    (void)rng;
    FAILS(tg_gpt_forward(m, i64(2, SHAPE(1, 3), 11), NULL, NULL));
}
static bool gpt_token_outside_vocab(void) { return with_gpt(gpt_token_out_of_vocab); }
static bool gpt_zero_temperature(tg_gpt *m, tg_rng *rng)
{
    int64_t out[4];
    tg_sample_options o = {.temperature = 0};
    FAILS_STATUS(tg_gpt_generate(m, (int64_t[]){1}, 1, 3, &o, rng, out));
}
static bool gpt_generate_zero_temperature(void) { return with_gpt(gpt_zero_temperature); }
static bool gpt_nan_temperature(tg_gpt *m, tg_rng *rng)
{
    int64_t out[4];
    tg_sample_options o = {.temperature = NAN};
    FAILS_STATUS(tg_gpt_generate(m, (int64_t[]){1}, 1, 3, &o, rng, out));
}
static bool gpt_generate_nan_temperature(void) { return with_gpt(gpt_nan_temperature); }
static bool gpt_prompt_token(tg_gpt *m, tg_rng *rng)
{
    int64_t out[4];
    tg_sample_options o = {.temperature = 1};
    FAILS_STATUS(tg_gpt_generate(m, (int64_t[]){12}, 1, 3, &o, rng, out));
}
static bool gpt_generate_prompt_outside_vocab(void) { return with_gpt(gpt_prompt_token); }
static bool gpt_top_p(tg_gpt *m, tg_rng *rng)
{
    int64_t out[4];
    tg_sample_options o = {.temperature = 1, .top_p = -0.5};
    FAILS_STATUS(tg_gpt_generate(m, (int64_t[]){1}, 1, 3, &o, rng, out));
}
static bool gpt_generate_negative_top_p(void) { return with_gpt(gpt_top_p); }
static bool gpt_past_context(tg_gpt *m, tg_rng *rng)
{
    int64_t out[5];
    tg_sample_options o = {.temperature = 1};
    FAILS_STATUS(tg_gpt_generate(m, (int64_t[]){1, 2}, 2, 3, &o, rng, out));
}
static bool gpt_generate_past_context_without_slide(void) { return with_gpt(gpt_past_context); }

/* ---- optimizers and parameter lists ----------------------------------------------- */

static bool sgd_null_list(void) { FAILS(tg_sgd_new(NULL, 0.1, 0, 0)); }
static bool sgd_empty_list(void)
{
    tg_params ps = {0};
    FAILS(tg_sgd_new(&ps, 0.1, 0, 0));
}
/* Makes an optimizer over one tensor with make_opt and frees it. */
static bool optimizer_over(tg_tensor *t, tg_optim *(*make_opt)(const tg_params *ps))
{
    tg_params ps = {0};
    tg_params_add(&ps, NULL, "w", t);
    tg_optim *opt = make_opt(&ps);
    tg_params_clear(&ps);
    bool failed = !opt;
    tg_optim_free(opt);
    return failed;
}
static tg_optim *adam_nan_lr(const tg_params *ps) { return tg_adam_new(ps, NAN, 0.9, 0.999, 1e-8, 0); }
static tg_optim *adamw_beta_one(const tg_params *ps) { return tg_adamw_new(ps, 1e-3, 1.0, 0.999, 1e-8, 0); }
static tg_optim *sgd_negative_momentum(const tg_params *ps) { return tg_sgd_new(ps, 0.1, -0.5, 0); }
static tg_optim *sgd_plain(const tg_params *ps) { return tg_sgd_new(ps, 0.1, 0, 0); }
static bool adam_lr_nan(void) { return optimizer_over(param(1, SHAPE(3)), adam_nan_lr); }
static bool adamw_beta1_one(void) { return optimizer_over(param(1, SHAPE(3)), adamw_beta_one); }
static bool sgd_momentum_negative(void) { return optimizer_over(param(1, SHAPE(3)), sgd_negative_momentum); }
static bool optimizer_non_leaf(void) { return optimizer_over(tg_exp(param(1, SHAPE(3))), sgd_plain); }
static bool optimizer_int_param(void) { return optimizer_over(i64(1, SHAPE(3), 0), sgd_plain); }
static bool optimizer_same_tensor_twice(void)
{
    tg_tensor *w = param(1, SHAPE(3));
    tg_params ps = {0};
    tg_params_add(&ps, NULL, "a", w);
    tg_params_add(&ps, NULL, "b", w);
    tg_optim *opt = tg_sgd_new(&ps, 0.1, 0, 0);
    tg_params_clear(&ps);
    bool failed = !opt;
    tg_optim_free(opt);
    return failed;
}
static bool optimizer_grad_wrong_shape(void)
{
    tg_tensor *w = param(1, SHAPE(3));
    tg_params ps = {0};
    tg_params_add(&ps, NULL, "w", w);
    tg_optim *opt = tg_sgd_new(&ps, 0.1, 0, 0);
    /* No public call makes such a gradient; the step must still refuse it. */
    w->grad = tg_ones(TG_FLOAT32, 1, SHAPE(4));
    tg_retain(w->grad); /* the scope holds the other reference */
    int rc = tg_optim_step(opt);
    tg_optim_free(opt);
    tg_params_clear(&ps);
    FAILS_STATUS(rc);
}
static bool optim_step_null(void) { FAILS_STATUS(tg_optim_step(NULL)); }
static bool set_lr_nan(void)
{
    tg_params ps = {0};
    tg_params_add(&ps, NULL, "w", param(1, SHAPE(3)));
    tg_optim *opt = tg_sgd_new(&ps, 0.1, 0, 0);
    tg_optim_set_lr(opt, NAN);
    bool failed = tg_optim_lr(opt) == 0.1 && tg_error_code() != TG_OK;
    tg_optim_free(opt);
    tg_params_clear(&ps);
    return failed;
}
static bool clip_negative_norm(void)
{
    tg_params ps = {0};
    tg_params_add(&ps, NULL, "w", param(1, SHAPE(3)));
    double norm = tg_clip_grad_norm(&ps, -1);
    tg_params_clear(&ps);
    return norm < 0;
}
static bool warmup_cosine_negative(void) { return isnan(tg_lr_warmup_cosine(5, -1, 10, 1e-3, 0)); }
static bool params_duplicate_name(void)
{
    tg_params ps = {0};
    tg_params_add(&ps, "fc", "weight", f32(1, SHAPE(3)));
    int rc = tg_params_add(&ps, "fc", "weight", f32(1, SHAPE(3)));
    tg_params_clear(&ps);
    FAILS_STATUS(rc);
}

/* ---- safetensors ------------------------------------------------------------------ */

static bool load_missing_file(void)
{
    tg_params out = {0};
    FAILS_STATUS(tg_safetensors_load("/nonexistent/dir/model.safetensors", &out));
}
static bool load_null_path(void)
{
    tg_params out = {0};
    FAILS_STATUS(tg_safetensors_load(NULL, &out));
}
static bool load_directory(void)
{
    tg_params out = {0};
    FAILS_STATUS(tg_safetensors_load("/tmp", &out));
}
static bool load_device(void)
{
    tg_params out = {0};
    FAILS_STATUS(tg_safetensors_load("/dev/null", &out));
}
static bool save_empty_path(void)
{
    tg_params ps = {0};
    tg_params_add(&ps, NULL, "w", f32(1, SHAPE(3)));
    int rc = tg_safetensors_save("", &ps, 0, NULL, NULL);
    tg_params_clear(&ps);
    FAILS_STATUS(rc);
}
static bool check_writable_directory(void) { FAILS_STATUS(tg_safetensors_check_writable("/tmp")); }
static bool load_empty_file(void)
{
    char path[] = "/tmp/tg_bad_input_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return false;
    close(fd);
    tg_params out = {0};
    int rc = tg_safetensors_load(path, &out);
    unlink(path);
    FAILS_STATUS(rc);
}
static bool save_into_missing_dir(void)
{
    tg_params ps = {0};
    tg_params_add(&ps, NULL, "w", f32(1, SHAPE(3)));
    int rc = tg_safetensors_save("/nonexistent/dir/model.safetensors", &ps, 0, NULL, NULL);
    tg_params_clear(&ps);
    FAILS_STATUS(rc);
}
static bool load_into_missing_name(void)
{
    char path[] = "/tmp/tg_bad_input_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return false;
    close(fd);
    tg_params ps = {0};
    tg_params_add(&ps, NULL, "w", f32(1, SHAPE(3)));
    int rc = tg_safetensors_save(path, &ps, 0, NULL, NULL);
    tg_params_add(&ps, NULL, "bias", f32(1, SHAPE(3)));
    if (rc == 0)
        rc = tg_safetensors_load_into(path, &ps);
    tg_params_clear(&ps);
    unlink(path);
    FAILS_STATUS(rc);
}

/* ---- the table ---------------------------------------------------------------------- */

#define E(fn, code, ...) {#fn, fn, code, {__VA_ARGS__}}
static const bad_input catalogue[] = {
    E(zeros_too_many_dims, TG_ERR_SHAPE, "tg_zeros", "ndim 9"),
    E(zeros_negative_size, TG_ERR_SHAPE, "tg_zeros", "-3", "[2,-3]"),
    E(zeros_null_shape, TG_ERR_NULL, "tg_zeros", "shape"),
    E(zeros_absurd_shape, TG_ERR_NOMEM, "tg_zeros", "[1099511627776,1099511627776]"),
    E(zeros_unknown_dtype, TG_ERR_DTYPE, "tg_zeros", "42"),
    E(from_data_null_data, TG_ERR_NULL, "tg_from_data", "data"),
    E(arange_zero_step, TG_ERR_VALUE, "tg_arange", "step"),
    E(arange_nan_end, TG_ERR_VALUE, "tg_arange", "nan"),
    E(causal_mask_negative, TG_ERR_SHAPE, "tg_causal_mask", "-4"),
    E(uniform_low_above_high, TG_ERR_VALUE, "tg_uniform", "2", "1"),
    E(randn_int_dtype, TG_ERR_DTYPE, "tg_randn", "int64"),
    E(item_of_many, TG_ERR_SHAPE, "tg_item", "[2,3]"),
    E(get_index_out_of_range, TG_ERR_INDEX, "tg_get", "5", "[2,3]"),
    E(size_dim_out_of_range, TG_ERR_DIM, "tg_size", "dim 4"),
    E(data_of_transposed, TG_ERR_STATE, "tg_data", "[3,2]", "contiguous"),
    E(copy_to_small_buffer, TG_ERR_VALUE, "tg_copy_to", "4", "[2,3]"),
    E(rng_state_wrong_size, TG_ERR_SHAPE, "tg_rng_set_state_tensor", "[3]"),
    E(add_null, TG_ERR_NULL, "tg_add"),
    E(add_no_broadcast, TG_ERR_SHAPE, "tg_add", "[2,3]", "[4]"),
    E(add_mixed_dtypes, TG_ERR_DTYPE, "tg_add", "float32", "float64"),
    E(exp_of_int, TG_ERR_DTYPE, "tg_exp", "int64"),
    E(gelu_unknown_kind, TG_ERR_VALUE, "tg_gelu", "7"),
    E(to_unknown_dtype, TG_ERR_DTYPE, "tg_to_dtype", "42"),
    E(sum_dim_out_of_range, TG_ERR_DIM, "tg_sum", "5"),
    E(sum_dim_repeated, TG_ERR_DIM, "tg_sum", "1"),
    E(max_of_empty_dim, TG_ERR_SHAPE, "tg_max", "[0,3]"),
    E(max_of_scalar, TG_ERR_DIM, "tg_max", "0-dim"),
    E(matmul_inner_mismatch, TG_ERR_SHAPE, "tg_matmul", "[2,3]", "[4,5]"),
    E(matmul_of_scalar, TG_ERR_SHAPE, "tg_matmul", "[]"),
    E(matmul_batch_mismatch, TG_ERR_SHAPE, "tg_matmul", "[2,2,3]", "[4,3,5]"),
    E(matmul_of_int, TG_ERR_DTYPE, "tg_matmul", "int64"),
    E(affine_null_weight, TG_ERR_NULL, "tg_affine", "weight"),
    E(affine_in_mismatch, TG_ERR_SHAPE, "tg_affine", "[3,4]", "[5,6]"),
    E(affine_weight_not_2d, TG_ERR_SHAPE, "tg_affine", "[4]"),
    E(affine_bias_wrong_size, TG_ERR_SHAPE, "tg_affine", "[6]", "5"),
    E(affine_dtypes_differ, TG_ERR_DTYPE, "tg_affine", "float32", "float64"),
    E(affine_of_scalar, TG_ERR_SHAPE, "tg_affine", "[]"),
    E(gelu_affine_unknown_kind, TG_ERR_VALUE, "tg_gelu_affine", "7"),
    E(gelu_affine_in_mismatch, TG_ERR_SHAPE, "tg_gelu_affine", "[3,4]", "[5,6]"),
    E(gelu_affine_of_int, TG_ERR_DTYPE, "tg_gelu_affine", "int64"),
    E(ln_affine_null_weight, TG_ERR_NULL, "tg_layer_norm_affine", "weight"),
    E(ln_affine_in_mismatch, TG_ERR_SHAPE, "tg_layer_norm_affine", "[3,4]", "[5,6]"),
    E(ln_affine_norm_weight_wrong_size, TG_ERR_SHAPE, "tg_layer_norm_affine", "weight", "[3]",
      "[4]"),
    E(ln_affine_norm_bias_dtype, TG_ERR_DTYPE, "tg_layer_norm_affine", "bias", "float64"),
    E(ln_affine_eps_zero, TG_ERR_VALUE, "tg_layer_norm_affine", "eps"),
    E(ln_affine_bias_wrong_size, TG_ERR_SHAPE, "tg_layer_norm_affine", "[4]", "5"),
    E(ln_affine_of_scalar, TG_ERR_SHAPE, "tg_layer_norm_affine", "[]"),
    E(ln_affine_of_int, TG_ERR_DTYPE, "tg_layer_norm_affine", "int64"),
    E(transpose_dim_out_of_range, TG_ERR_DIM, "tg_transpose", "2"),
    E(permute_repeated_dim, TG_ERR_DIM, "tg_permute", "0"),
    E(permute_null_perm, TG_ERR_NULL, "tg_permute", "perm"),
    E(reshape_wrong_numel, TG_ERR_SHAPE, "tg_reshape", "[2,3]", "[4]"),
    E(reshape_two_inferred, TG_ERR_SHAPE, "tg_reshape", "-1"),
    E(narrow_past_end, TG_ERR_INDEX, "tg_narrow", "2", "4", "[2,3]"),
    E(expand_non_unit_dim, TG_ERR_SHAPE, "tg_expand", "[2,3]", "[2,4]"),
    E(squeeze_non_unit_dim, TG_ERR_SHAPE, "tg_squeeze", "[2,3]"),
    E(unsqueeze_dim_out_of_range, TG_ERR_DIM, "tg_unsqueeze", "4"),
    E(concat_nothing, TG_ERR_VALUE, "tg_concat", "0"),
    E(concat_mismatched_dims, TG_ERR_SHAPE, "tg_concat", "[2,3]", "[2,4]"),
    E(concat_null_element, TG_ERR_NULL, "tg_concat", "1"),
    E(softmax_dim_out_of_range, TG_ERR_DIM, "tg_softmax", "dim 2"),
    E(log_softmax_of_bool, TG_ERR_DTYPE, "tg_log_softmax", "bool"),
    E(masked_fill_float_mask, TG_ERR_DTYPE, "tg_masked_fill", "float32"),
    E(masked_fill_mask_wrong_shape, TG_ERR_SHAPE, "tg_masked_fill", "[3,2]", "[2,3]"),
    E(dropout_p_one, TG_ERR_VALUE, "tg_dropout", "1"),
    E(dropout_p_nan, TG_ERR_VALUE, "tg_dropout", "nan"),
    E(dropout_without_rng, TG_ERR_NULL, "tg_dropout", "rng"),
    E(layer_norm_eps_nan, TG_ERR_VALUE, "tg_layer_norm", "eps", "nan"),
    E(layer_norm_eps_negative, TG_ERR_VALUE, "tg_layer_norm", "eps", "-1e-05"),
    E(layer_norm_weight_wrong_shape, TG_ERR_SHAPE, "tg_layer_norm", "[4]", "[3]"),
    E(layer_norm_too_many_dims, TG_ERR_DIM, "tg_layer_norm", "3", "[2,3]"),
    E(embedding_index_too_big, TG_ERR_INDEX, "tg_embedding", "7", "4"),
    E(embedding_index_negative, TG_ERR_INDEX, "tg_embedding", "-1"),
    E(embedding_float_indices, TG_ERR_DTYPE, "tg_embedding", "float32"),
    E(cross_entropy_target_too_big, TG_ERR_INDEX, "tg_cross_entropy", "3"),
    E(cross_entropy_targets_wrong_shape, TG_ERR_SHAPE, "tg_cross_entropy", "[2,3]", "[5]"),
    E(cross_entropy_float_targets, TG_ERR_DTYPE, "tg_cross_entropy", "float32"),
    E(mse_shape_mismatch, TG_ERR_SHAPE, "tg_mse_loss", "[2,3]", "[3,2]"),
    E(backward_twice, TG_ERR_STATE, "tg_backward", "freed"),
    E(backward_non_scalar, TG_ERR_SHAPE, "tg_backward", "[2,3]"),
    E(backward_without_grad, TG_ERR_STATE, "tg_backward", "require grad"),
    E(backward_grad_output_wrong_shape, TG_ERR_SHAPE, "tg_backward", "[3,2]", "[2,3]"),
    E(backward_null, TG_ERR_NULL, "tg_backward"),
    E(requires_grad_on_int, TG_ERR_DTYPE, "tg_set_requires_grad", "int64"),
    E(requires_grad_on_non_leaf, TG_ERR_STATE, "tg_set_requires_grad", "exp"),
    E(sdpa_width_mismatch, TG_ERR_SHAPE, "tg_scaled_dot_product_attention", "[4,8]", "[5,6]"),
    E(sdpa_mask_wrong_shape, TG_ERR_SHAPE, "tg_scaled_dot_product_attention", "[3,5]", "[4,5]"),
    E(sdpa_dropout_nan, TG_ERR_VALUE, "tg_scaled_dot_product_attention", "nan"),
    E(sdpa_scale_nan, TG_ERR_VALUE, "tg_scaled_dot_product_attention", "scale", "nan"),
    E(linear_zero_features, TG_ERR_VALUE, "tg_linear_new", "0"),
    E(linear_wrong_width, TG_ERR_SHAPE, "tg_linear_forward", "[2,5]", "3"),
    E(layer_norm_module_eps_nan, TG_ERR_VALUE, "tg_layer_norm_module_new", "eps", "nan"),
    E(embedding_module_no_rows, TG_ERR_VALUE, "tg_embedding_module_new", "-1"),
    E(mha_heads_not_dividing, TG_ERR_VALUE, "tg_mha_new", "10", "3"),
    E(mha_dropout_above_one, TG_ERR_VALUE, "tg_mha_new", "1.5"),
    E(mha_padding_mask_wrong_shape, TG_ERR_SHAPE, "tg_mha_forward", "[2,4]"),
    E(mha_query_wrong_width, TG_ERR_SHAPE, "tg_mha_forward", "[2,5,6]", "8"),
    E(mha_int64_mask, TG_ERR_DTYPE, "tg_mha_forward", "int64"),
    E(encoder_heads_not_dividing, TG_ERR_VALUE, "tg_encoder_layer_new", "8", "3"),
    E(encoder_eps_zero, TG_ERR_VALUE, "tg_encoder_layer_new", "eps", "0"),
    E(encoder_dropout_nan, TG_ERR_VALUE, "tg_encoder_layer_new", "nan"),
    E(encoder_no_layers, TG_ERR_VALUE, "tg_encoder_new", "num_layers", "0"),
    E(gpt_heads_not_dividing, TG_ERR_VALUE, "tg_gpt_new", "n_embd = 8", "n_head = 3"),
    E(gpt_sequence_longer_than_context, TG_ERR_SHAPE, "tg_gpt_forward", "[1,5]", "4"),
    E(gpt_token_outside_vocab, TG_ERR_INDEX, "tg_gpt_forward", "11"),
    E(gpt_generate_zero_temperature, TG_ERR_VALUE, "tg_gpt_generate", "temperature = 0"),
    E(gpt_generate_nan_temperature, TG_ERR_VALUE, "tg_gpt_generate", "temperature = nan"),
    E(gpt_generate_prompt_outside_vocab, TG_ERR_INDEX, "tg_gpt_generate", "12", "11"),
    E(gpt_generate_negative_top_p, TG_ERR_VALUE, "tg_gpt_generate", "top_p = -0.5"),
    E(gpt_generate_past_context_without_slide, TG_ERR_VALUE, "tg_gpt_generate",
      "prompt_len = 2", "block_size = 4"),
    E(sgd_null_list, TG_ERR_NULL, "tg_sgd_new", "ps"),
    E(sgd_empty_list, TG_ERR_VALUE, "tg_sgd_new", "empty"),
    E(adam_lr_nan, TG_ERR_VALUE, "tg_adam_new", "learning rate", "nan"),
    E(adamw_beta1_one, TG_ERR_VALUE, "tg_adamw_new", "beta1", "1"),
    E(sgd_momentum_negative, TG_ERR_VALUE, "tg_sgd_new", "momentum", "-0.5"),
    E(optimizer_non_leaf, TG_ERR_STATE, "tg_sgd_new", "'w'", "leaf"),
    E(optimizer_int_param, TG_ERR_DTYPE, "tg_sgd_new", "'w'", "int64"),
    E(optimizer_same_tensor_twice, TG_ERR_VALUE, "tg_sgd_new", "'b'", "'a'"),
    E(optimizer_grad_wrong_shape, TG_ERR_STATE, "tg_optim_step", "'w'", "[4]", "[3]"),
    E(optim_step_null, TG_ERR_NULL, "tg_optim_step"),
    E(set_lr_nan, TG_ERR_VALUE, "tg_optim_set_lr", "nan"),
    E(clip_negative_norm, TG_ERR_VALUE, "tg_clip_grad_norm", "-1"),
    E(warmup_cosine_negative, TG_ERR_VALUE, "tg_lr_warmup_cosine", "warmup -1"),
    E(params_duplicate_name, TG_ERR_VALUE, "tg_params_add", "fc.weight"),
    E(load_missing_file, TG_ERR_IO, "tg_safetensors_load", "/nonexistent/dir/model.safetensors"),
    E(load_null_path, TG_ERR_NULL, "tg_safetensors_load", "path"),
    E(load_directory, TG_ERR_IO, "tg_safetensors_load", "/tmp", "is not a regular file"),
    E(load_empty_file, TG_ERR_VALUE, "tg_safetensors_load", "/tmp/tg_bad_input_"),
    E(load_device, TG_ERR_IO, "tg_safetensors_load", "/dev/null", "(it is a character device)"),
    E(save_empty_path, TG_ERR_IO, "tg_safetensors_save", "path is empty"),
    E(check_writable_directory, TG_ERR_IO, "tg_safetensors_check_writable", "/tmp", "directory"),
    E(save_into_missing_dir, TG_ERR_IO, "tg_safetensors_save", "/nonexistent/dir"),
    E(load_into_missing_name, TG_ERR_VALUE, "tg_safetensors_load_into", "'bias'"),
};
#define CATALOGUE_SIZE ((int)(sizeof catalogue / sizeof catalogue[0]))

/* One entry per loop iteration, so a failure names its entry. */
START_TEST(bad_input_fails_cleanly)
{
    const bad_input *e = &catalogue[_i];
    int64_t live = tg_live_tensors();
    tg_error_clear();
    tg_scope_begin();
    bool failed = e->call();
    tg_scope_end();
    ck_assert_msg(failed, "%s: the call did not report failure (%s)", e->name,
                  tg_error_message());
    ck_assert_msg(tg_error_code() == e->code, "%s: error %s, expected %s (%s)", e->name,
                  tg_error_name(tg_error_code()), tg_error_name(e->code), tg_error_message());
    for (int k = 0; k < 4 && e->frags[k]; k++)
        ck_assert_msg(strstr(tg_error_message(), e->frags[k]), "%s: message \"%s\" lacks \"%s\"",
                      e->name, tg_error_message(), e->frags[k]);
    /* The function's own name opens the message, not some helper's. */
    ck_assert_msg(!strncmp(tg_error_message(), e->frags[0], strlen(e->frags[0])),
                  "%s: message \"%s\" does not start with \"%s\"", e->name,
                  tg_error_message(), e->frags[0]);
    ck_assert_msg(tg_live_tensors() == live, "%s: %lld tensors leaked", e->name,
                  (long long)(tg_live_tensors() - live));
    tg_error_clear();
}
END_TEST

/* The catalogue holds distinct entries: no name twice, no call twice. */
START_TEST(catalogue_entries_are_distinct)
{
    ck_assert_int_ge(CATALOGUE_SIZE, 60);
    for (int i = 0; i < CATALOGUE_SIZE; i++)
        for (int j = i + 1; j < CATALOGUE_SIZE; j++) {
            ck_assert_str_ne(catalogue[i].name, catalogue[j].name);
            ck_assert_ptr_ne((void *)catalogue[i].call, (void *)catalogue[j].call);
        }
}
END_TEST

void misuse_bad_input_cases(Suite *s)
{
    TCase *tc = tcase_checked("catalogue");
    tcase_add_loop_test(tc, bad_input_fails_cleanly, 0, CATALOGUE_SIZE);
    tcase_add_test(tc, catalogue_entries_are_distinct);
    suite_add_tcase(s, tc);
}
