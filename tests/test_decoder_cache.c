/* Incremental decoding (tg_decoder_cache): cached steps against a full
 * tg_decoder_forward with a causal mask, beam search's row selection, and
 * the errors of each call. */
#include "testutil.h"

enum { D = 8, NH = 2, DFF = 16, B = 2, T = 5, S = 4 };

static tg_decoder *make_decoder(bool norm_first, tg_activation act, tg_rng *rng)
{
    tg_decoder_config c = {.d_model = D, .nhead = NH, .dim_feedforward = DFF, .dropout = 0.1,
                           .layer_norm_eps = 1e-5, .activation = act, .norm_first = norm_first};
    tg_decoder *dec = tg_decoder_new(&c, 2, true, TG_FLOAT64, rng);
    ck_assert_ptr_nonnull(dec);
    tg_decoder_set_train(dec, false);
    return dec;
}

/* Row 1 of the batch has its last two source positions padded. */
static tg_tensor *padding_mask(void)
{
    tg_tensor *m = tg_zeros(TG_BOOL, 2, SHAPE(B, S));
    bool *p = tg_data(m);
    p[1 * S + 2] = p[1 * S + 3] = true;
    return m;
}

/* Full forward over tgt [B, T, D] with a causal mask: row i depends on the
 * prefix 0..i only, so it is what a cached step at position i must give. */
static tg_tensor *full_forward(const tg_decoder *dec, const tg_tensor *tgt, const tg_tensor *mem,
                               const tg_tensor *kpm)
{
    tg_decoder_masks masks = {.memory_key_padding_mask = kpm, .tgt_is_causal = true};
    tg_tensor *y = tg_decoder_forward(dec, tgt, mem, &masks);
    ck_assert_ptr_nonnull(y);
    return y;
}

/* Decodes tgt in chunks of the given lengths and compares each chunk with
 * the full forward's rows. */
static void check_chunks(bool norm_first, tg_activation act, const int *chunks, int n_chunks)
{
    tg_rng *rng = tg_rng_new(7);
    tg_decoder *dec = make_decoder(norm_first, act, rng);
    tg_tensor *tgt = tg_randn(rng, TG_FLOAT64, 3, SHAPE(B, T, D));
    tg_tensor *mem = tg_randn(rng, TG_FLOAT64, 3, SHAPE(B, S, D));
    tg_tensor *kpm = padding_mask();
    tg_tensor *full = full_forward(dec, tgt, mem, kpm);
    tg_decoder_cache *c = tg_decoder_cache_new(dec, B, T);
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(tg_decoder_cache_set_memory(c, mem, kpm), 0);
    int64_t pos = 0;
    for (int i = 0; i < n_chunks; i++) {
        tg_scope_begin();
        tg_tensor *x = tg_contiguous(tg_narrow(tgt, 1, pos, chunks[i]));
        tg_tensor *y = tg_decoder_forward_cached(dec, c, x);
        ck_assert_ptr_nonnull(y);
        ck_assert_shape(y, B, chunks[i], D);
        ck_assert(!tg_requires_grad(y));
        tg_tensor *want = tg_narrow(full, 1, pos, chunks[i]);
        double *w = values_of(want);
        assert_values(y, w, tg_numel(want), 1e-12);
        free(w);
        pos += chunks[i];
        ck_assert_int_eq(tg_decoder_cache_len(c), pos);
        tg_scope_end();
    }
    tg_decoder_cache_free(c);
    tg_release(tgt);
    tg_release(mem);
    tg_release(kpm);
    tg_release(full);
    tg_decoder_free(dec);
    tg_rng_free(rng);
}

START_TEST(post_norm_steps_one_by_one_match_full_forward)
{
    check_chunks(false, TG_ACT_RELU, (const int[]){1, 1, 1, 1, 1}, 5);
}
END_TEST

START_TEST(pre_norm_steps_one_by_one_match_full_forward)
{
    check_chunks(true, TG_ACT_GELU, (const int[]){1, 1, 1, 1, 1}, 5);
}
END_TEST

START_TEST(several_positions_at_once_match_full_forward)
{
    check_chunks(false, TG_ACT_GELU, (const int[]){3, 1, 1}, 3);
    check_chunks(true, TG_ACT_RELU, (const int[]){2, 3}, 2);
    check_chunks(true, TG_ACT_RELU, (const int[]){5}, 1);
}
END_TEST

/* Beam search's reorder: rows {2, 0, 0, 1} of a batch of 3 after two steps
 * continue as the full forward of those rows (their memory included). */
START_TEST(select_reorders_and_duplicates_rows)
{
    tg_rng *rng = tg_rng_new(3);
    tg_decoder *dec = make_decoder(false, TG_ACT_RELU, rng);
    enum { B3 = 3, N = 4 };
    const int64_t rows[N] = {2, 0, 0, 1};
    tg_tensor *tgt = tg_randn(rng, TG_FLOAT64, 3, SHAPE(B3, 3, D));
    tg_tensor *mem = tg_randn(rng, TG_FLOAT64, 3, SHAPE(B3, S, D));
    tg_tensor *kpm = tg_zeros(TG_BOOL, 2, SHAPE(B3, S));
    ((bool *)tg_data(kpm))[2 * S + 1] = true; /* row 2 ignores source position 1 */
    tg_tensor *full = full_forward(dec, tgt, mem, kpm);
    tg_decoder_cache *c = tg_decoder_cache_new(dec, B3, 3);
    ck_assert_int_eq(tg_decoder_cache_set_memory(c, mem, kpm), 0);
    tg_scope_begin();
    tg_tensor *first = tg_retain(tg_contiguous(tg_narrow(tgt, 1, 0, 2)));
    tg_scope_end();
    tg_release(tg_decoder_forward_cached(dec, c, first));
    ck_assert_int_eq(tg_decoder_cache_select(c, rows, N), 0);
    ck_assert_int_eq(tg_decoder_cache_len(c), 2);
    /* the third position of each selected row, gathered by hand */
    double *t = values_of(tgt), *f = values_of(full), x[N * D], want[N * D];
    for (int i = 0; i < N; i++)
        for (int j = 0; j < D; j++) {
            x[i * D + j] = t[(rows[i] * 3 + 2) * D + j];
            want[i * D + j] = f[(rows[i] * 3 + 2) * D + j];
        }
    tg_tensor *step = tg_from_data(TG_FLOAT64, 3, SHAPE(N, 1, D), x);
    tg_tensor *y = tg_decoder_forward_cached(dec, c, step);
    assert_values(y, want, N * D, 1e-12);
    /* a batch of the old size is now refused: the cache holds N rows */
    ck_assert_ptr_null(tg_decoder_forward_cached(dec, c, first));
    ck_assert_error(TG_ERR_SHAPE, "tg_decoder_forward_cached", "batch 4");
    free(t);
    free(f);
    tg_release(y);
    tg_release(step);
    tg_release(first);
    tg_decoder_cache_free(c);
    tg_release(tgt);
    tg_release(mem);
    tg_release(kpm);
    tg_release(full);
    tg_decoder_free(dec);
    tg_rng_free(rng);
}
END_TEST

START_TEST(fully_padded_source_gives_finite_output)
{
    tg_rng *rng = tg_rng_new(5);
    tg_decoder *dec = make_decoder(true, TG_ACT_RELU, rng);
    tg_tensor *mem = tg_randn(rng, TG_FLOAT64, 3, SHAPE(1, S, D));
    tg_tensor *kpm = tg_ones(TG_BOOL, 2, SHAPE(1, S));
    tg_tensor *x = tg_randn(rng, TG_FLOAT64, 3, SHAPE(1, 2, D));
    tg_decoder_cache *c = tg_decoder_cache_new(dec, 1, 2);
    ck_assert_int_eq(tg_decoder_cache_set_memory(c, mem, kpm), 0);
    tg_tensor *y = tg_decoder_forward_cached(dec, c, x);
    ck_assert_ptr_nonnull(y);
    double *v = values_of(y);
    for (int64_t i = 0; i < tg_numel(y); i++)
        ck_assert_msg(isfinite(v[i]), "element %lld is %g", (long long)i, v[i]);
    free(v);
    tg_release(y);
    tg_release(x);
    tg_release(kpm);
    tg_release(mem);
    tg_decoder_cache_free(c);
    tg_decoder_free(dec);
    tg_rng_free(rng);
}
END_TEST

START_TEST(running_past_max_len_is_refused_and_keeps_the_cache)
{
    tg_rng *rng = tg_rng_new(1);
    tg_decoder *dec = make_decoder(false, TG_ACT_RELU, rng);
    tg_tensor *mem = tg_randn(rng, TG_FLOAT64, 3, SHAPE(1, S, D));
    tg_tensor *x2 = tg_randn(rng, TG_FLOAT64, 3, SHAPE(1, 2, D));
    tg_decoder_cache *c = tg_decoder_cache_new(dec, 1, 3);
    /* no memory yet */
    ck_assert_ptr_null(tg_decoder_forward_cached(dec, c, x2));
    ck_assert_error(TG_ERR_STATE, "tg_decoder_forward_cached", "set_memory");
    ck_assert_int_eq(tg_decoder_cache_set_memory(c, mem, NULL), 0);
    tg_release(tg_decoder_forward_cached(dec, c, x2));
    ck_assert_int_eq(tg_decoder_cache_len(c), 2);
    ck_assert_ptr_null(tg_decoder_forward_cached(dec, c, x2));
    ck_assert_error(TG_ERR_VALUE, "tg_decoder_forward_cached", "2 cached", "2 new", "max_len 3");
    ck_assert_int_eq(tg_decoder_cache_len(c), 2);
    /* set_memory starts over */
    ck_assert_int_eq(tg_decoder_cache_set_memory(c, mem, NULL), 0);
    ck_assert_int_eq(tg_decoder_cache_len(c), 0);
    tg_release(x2);
    tg_release(mem);
    tg_decoder_cache_free(c);
    tg_decoder_free(dec);
    tg_rng_free(rng);
}
END_TEST

START_TEST(select_rejects_bad_rows_and_keeps_the_cache)
{
    tg_rng *rng = tg_rng_new(2);
    tg_decoder *dec = make_decoder(false, TG_ACT_RELU, rng);
    tg_decoder_cache *c = tg_decoder_cache_new(dec, 2, 4);
    ck_assert_int_eq(tg_decoder_cache_select(c, (const int64_t[]){0, 2}, 2), -1);
    ck_assert_error(TG_ERR_INDEX, "tg_decoder_cache_select", "rows[1] = 2", "[0, 2)");
    ck_assert_int_eq(tg_decoder_cache_select(c, (const int64_t[]){-1}, 1), -1);
    ck_assert_error(TG_ERR_INDEX, "rows[0] = -1");
    ck_assert_int_eq(tg_decoder_cache_select(c, (const int64_t[]){0}, 0), -1);
    ck_assert_error(TG_ERR_VALUE, "tg_decoder_cache_select", "n 0");
    ck_assert_int_eq(tg_decoder_cache_select(c, NULL, 1), -1);
    ck_assert_error(TG_ERR_NULL, "tg_decoder_cache_select");
    /* still a batch of 2 */
    tg_tensor *mem = tg_randn(rng, TG_FLOAT64, 3, SHAPE(2, S, D));
    ck_assert_int_eq(tg_decoder_cache_set_memory(c, mem, NULL), 0);
    tg_release(mem);
    tg_decoder_cache_free(c);
    tg_decoder_free(dec);
    tg_rng_free(rng);
}
END_TEST

START_TEST(bad_memory_masks_and_inputs_are_clear_errors)
{
    tg_rng *rng = tg_rng_new(4);
    tg_decoder *dec = make_decoder(true, TG_ACT_RELU, rng);
    tg_decoder *other = make_decoder(true, TG_ACT_RELU, rng);
    tg_decoder_cache *c = tg_decoder_cache_new(dec, 2, 4);
    tg_tensor *wide = tg_zeros(TG_FLOAT64, 3, SHAPE(2, S, D + 1));
    tg_tensor *batch3 = tg_zeros(TG_FLOAT64, 3, SHAPE(3, S, D));
    tg_tensor *f32 = tg_zeros(TG_FLOAT32, 3, SHAPE(2, S, D));
    tg_tensor *mem = tg_zeros(TG_FLOAT64, 3, SHAPE(2, S, D));
    tg_tensor *mask_s = tg_zeros(TG_BOOL, 2, SHAPE(2, S + 1));
    tg_tensor *mask_i = tg_zeros(TG_INT64, 2, SHAPE(2, S));
    ck_assert_int_eq(tg_decoder_cache_set_memory(c, wide, NULL), -1);
    ck_assert_error(TG_ERR_SHAPE, "tg_decoder_cache_set_memory", "[2,4,9]", "d_model 8");
    ck_assert_int_eq(tg_decoder_cache_set_memory(c, batch3, NULL), -1);
    ck_assert_error(TG_ERR_SHAPE, "[3,4,8]", "batch 2");
    ck_assert_int_eq(tg_decoder_cache_set_memory(c, f32, NULL), -1);
    ck_assert_error(TG_ERR_DTYPE, "tg_decoder_cache_set_memory", "float32");
    ck_assert_int_eq(tg_decoder_cache_set_memory(c, mem, mask_s), -1);
    ck_assert_error(TG_ERR_SHAPE, "memory_key_padding_mask", "[2,5]", "[2,4]");
    ck_assert_int_eq(tg_decoder_cache_set_memory(c, mem, mask_i), -1);
    ck_assert_error(TG_ERR_DTYPE, "memory_key_padding_mask", "int64");
    ck_assert_int_eq(tg_decoder_cache_set_memory(c, mem, NULL), 0);
    tg_tensor *x = tg_zeros(TG_FLOAT64, 3, SHAPE(2, 1, D));
    ck_assert_ptr_null(tg_decoder_forward_cached(other, c, x));
    ck_assert_error(TG_ERR_VALUE, "tg_decoder_forward_cached", "another decoder");
    ck_assert_ptr_null(tg_decoder_forward_cached(dec, c, wide));
    ck_assert_error(TG_ERR_SHAPE, "tg_decoder_forward_cached", "[2,4,9]");
    ck_assert_ptr_null(tg_decoder_forward_cached(dec, c, NULL));
    ck_assert_error(TG_ERR_NULL, "tg_decoder_forward_cached");
    ck_assert_ptr_null(tg_decoder_cache_new(dec, 0, 4));
    ck_assert_error(TG_ERR_VALUE, "tg_decoder_cache_new", "batch 0");
    ck_assert_ptr_null(tg_decoder_cache_new(dec, 1, INT64_MAX / 2));
    ck_assert_error(TG_ERR_VALUE, "tg_decoder_cache_new", "overflow");
    ck_assert_ptr_null(tg_decoder_cache_new(NULL, 1, 4));
    ck_assert_error(TG_ERR_NULL, "tg_decoder_cache_new");
    ck_assert_int_eq(tg_decoder_cache_len(NULL), -1);
    ck_assert_error(TG_ERR_NULL, "tg_decoder_cache_len");
    ck_assert_int_eq(tg_decoder_cache_len(c), 0);
    tg_decoder_cache_free(NULL);
    tg_release(x);
    tg_release(wide);
    tg_release(batch3);
    tg_release(f32);
    tg_release(mem);
    tg_release(mask_s);
    tg_release(mask_i);
    tg_decoder_cache_free(c);
    tg_decoder_free(dec);
    tg_decoder_free(other);
    tg_rng_free(rng);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("decoder_cache");
    TCase *eq = tcase_checked("equals_full_forward");
    tcase_add_test(eq, post_norm_steps_one_by_one_match_full_forward);
    tcase_add_test(eq, pre_norm_steps_one_by_one_match_full_forward);
    tcase_add_test(eq, several_positions_at_once_match_full_forward);
    tcase_add_test(eq, select_reorders_and_duplicates_rows);
    tcase_add_test(eq, fully_padded_source_gives_finite_output);
    suite_add_tcase(s, eq);

    TCase *err = tcase_checked("errors");
    tcase_add_test(err, running_past_max_len_is_refused_and_keeps_the_cache);
    tcase_add_test(err, select_rejects_bad_rows_and_keeps_the_cache);
    tcase_add_test(err, bad_memory_masks_and_inputs_are_clear_errors);
    suite_add_tcase(s, err);
    return run_suite(s);
}
