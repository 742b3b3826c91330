/* tg_rope and its table: values against PyTorch's formulas (pinned) and a
 * naive loop here, the layout of the result for a transposed heads view,
 * backward as the inverse rotation, a table built once and safe to free
 * before backward, and every error case. */
#define _GNU_SOURCE
#include "testutil.h"

#include <dlfcn.h>

/* ---- pow, counted: the table's angles come from pow, tg_rope's must not --- */

static long pow_calls;

double pow(double x, double y)
{
    static double (*real_pow)(double, double);
    if (!real_pow)
        real_pow = (double (*)(double, double))dlsym(RTLD_NEXT, "pow");
    pow_calls++;
    return real_pow(x, y);
}

/* ---- references ------------------------------------------------------------ */

/* Written by tests/fixtures/rope_reference.py (PyTorch, float64): x [3, 8]
 * with x[t][j] = 0.1 * (8t + j) - 1.1 rotated at positions 5, 6, 7 with
 * theta 10000 by Hugging Face's rotate_half and by Meta's complex product,
 * and at positions 100, 101, 102 with theta 500000 by rotate_half. */
static const double want_half[24] = {-0.98327539627374583, -0.58992723872785091, -0.87388564972013061, -0.79799000835415623, 0.85625317230519393, -1.0059750757384267, -0.54435638254109364, -0.40399498334377082, -0.2601095361752172, -0.27799561766094277, -0.11780925593735389, -0.0023999856000259195, 0.17984167812471447, 0.052138628302928466, 0.29346376133261681, 0.39999280002159987, -0.21433681167525781, -0.18531237486699803, 0.62134856810600958, 0.7915804686798652, 1.0070053282683686, 1.151372799627103, 1.1462660934148805, 1.2055705543868287};
static const double want_interleaved[24] = {-1.2709526786726872, 0.77115451666622614, -0.40628387481797312, -1.133549034256081, -0.66913768071406943, -0.63423557472645464, -0.49799375834634374, -0.40249498959376301, -0.34393418563489497, -0.10820940787039549, -0.082533561490967897, -0.056464247339503601, 0.087827252697631586, 0.20563650863498525, 0.29759461441617413, 0.40179278922161932, -0.017240832059621181, 0.78083465196537738, 0.020015381308988833, 1.0628261308939746, 0.82785305289041877, 1.060499562857059, 1.0915731187098776, 1.2076705372368708};
static const double want_half_theta_500000_at_100[24] = {-1.3030067082932835, 0.46631533100160905, -0.82053977855525917, -0.79786137798765044, -0.046621005380644065, 1.0689013107265142, -0.62186370838672245, -0.40424895982011838, -0.31280403965428322, 0.28050051799112152, -0.14168674609921747, -0.0021485812102390073, -0.046407249174689094, -0.036324363817037617, 0.28270986183685909, 0.3999942294568547, -0.84455126037425488, 0.17865726428033551, 0.53460476976272941, 0.79347866699489167, 0.58884052900616235, -1.1524242195996517, 1.1892004625574861, 1.204322052037581};

/* The fixed x of the references, in dtype. */
static tg_tensor *fixed_x(tg_dtype dtype)
{
    return ramp(dtype, 2, SHAPE(3, 8), -1.1, 0.1);
}

/* rows [rows, hd] of a contiguous x, row r at position pos0 + r % T,
 * rotated by angle sign * p * theta^(-2i/hd), straight from the formula. */
static void ref_rope(const double *x, double *out, int64_t rows, int64_t T, int64_t hd,
                     double theta, bool interleaved, int64_t pos0, double sign)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < hd / 2; i++) {
            double freq = exp(-log(theta) * (double)(2 * i) / (double)hd);
            double angle = sign * (double)(pos0 + r % T) * freq;
            int64_t a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + hd / 2;
            double xa = x[r * hd + a], xb = x[r * hd + b];
            out[r * hd + a] = xa * cos(angle) - xb * sin(angle);
            out[r * hd + b] = xb * cos(angle) + xa * sin(angle);
        }
}

/* ---- values ------------------------------------------------------------------ */

static void check_fixed(double theta, tg_rope_pairing pairing, int64_t max_pos, int64_t pos0,
                        const double *want)
{
    tg_rope_table *table = tg_rope_table_new(max_pos, 8, theta, pairing);
    ck_assert_ptr_nonnull(table);
    tg_dtype dts[2] = {TG_FLOAT64, TG_FLOAT32};
    for (int k = 0; k < 2; k++) {
        tg_scope_begin();
        tg_tensor *y = tg_rope(fixed_x(dts[k]), table, pos0);
        ck_assert_shape(y, 3, 8);
        ck_assert_int_eq(tg_dtype_of(y), dts[k]);
        assert_values(y, want, 24, k == 0 ? 1e-13 : 1e-6);
        tg_scope_end();
    }
    tg_rope_table_free(table);
}

START_TEST(rope_half_matches_hugging_face_rotate_half)
{
    check_fixed(10000, TG_ROPE_HALF, 8, 5, want_half);
}
END_TEST

START_TEST(rope_interleaved_matches_meta_complex_product)
{
    check_fixed(10000, TG_ROPE_INTERLEAVED, 8, 5, want_interleaved);
}
END_TEST

START_TEST(rope_with_theta_500000_matches_at_position_100)
{
    check_fixed(500000, TG_ROPE_HALF, 103, 100, want_half_theta_500000_at_100);
}
END_TEST

/* The fixed x read through a view whose hd runs along a stride of 3. */
START_TEST(rope_with_hd_strided_matches_both_formulas)
{
    const double *wants[2] = {want_half, want_interleaved};
    for (int pairing = 0; pairing < 2; pairing++) {
        tg_rope_table *table = tg_rope_table_new(8, 8, 10000, (tg_rope_pairing)pairing);
        tg_scope_begin();
        tg_tensor *columns = tg_contiguous(tg_transpose(fixed_x(TG_FLOAT64), 0, 1)); /* [8, 3] */
        tg_tensor *x = tg_transpose(columns, 0, 1);
        ck_assert_int_eq(tg_strides(x)[1], 3);
        assert_values(tg_rope(x, table, 5), wants[pairing], 24, 1e-13);
        assert_values(tg_rope(tg_to_dtype(x, TG_FLOAT32), table, 5), wants[pairing], 24, 1e-6);
        tg_scope_end();
        tg_rope_table_free(table);
    }
}
END_TEST

/* [2, 3, 40, 16]: enough rows for the OpenMP team, from position 9. */
START_TEST(rope_of_many_rows_matches_the_formula_in_both_dtypes)
{
    int64_t n = 2 * 3 * 40 * 16;
    for (int pairing = 0; pairing < 2; pairing++) {
        tg_rope_table *table = tg_rope_table_new(64, 16, 10000, (tg_rope_pairing)pairing);
        tg_scope_begin();
        tg_rng *rng = tg_rng_new(7);
        tg_tensor *x = tg_randn(rng, TG_FLOAT64, 4, SHAPE(2, 3, 40, 16));
        double *want = malloc((size_t)n * sizeof *want);
        ref_rope(tg_data_const(x), want, n / 16, 40, 16, 10000, pairing, 9, 1);
        assert_values(tg_rope(x, table, 9), want, n, 1e-12);
        assert_values(tg_rope(tg_to_dtype(x, TG_FLOAT32), table, 9), want, n, 1e-5);
        free(want);
        tg_rng_free(rng);
        tg_scope_end();
        tg_rope_table_free(table);
    }
}
END_TEST

/* q [B, T, H * hd] seen as heads [B, H, T, hd], as a model does: the result
 * has the view's values and its memory order, so merging the heads back
 * (transpose(1, 2)) is contiguous with no copy. */
START_TEST(rope_of_a_transposed_heads_view_keeps_its_memory_order)
{
    tg_rope_table *table = tg_rope_table_new(16, 8, 10000, TG_ROPE_HALF);
    tg_scope_begin();
    tg_tensor *q = ramp(TG_FLOAT32, 3, SHAPE(2, 5, 24), -3, 0.01);
    tg_tensor *heads = tg_transpose(tg_reshape(q, 4, SHAPE(2, 5, 3, 8)), 1, 2);
    tg_tensor *y = tg_rope(heads, table, 4);
    ck_assert_shape(y, 2, 3, 5, 8);
    ck_assert(!tg_is_contiguous(y));
    ck_assert(tg_is_contiguous(tg_transpose(y, 1, 2)));
    double *want = values_of(tg_rope(tg_contiguous(heads), table, 4));
    assert_values(y, want, tg_numel(y), 0);
    free(want);
    tg_scope_end();
    tg_rope_table_free(table);
}
END_TEST

/* Generation rotates one new position at a time: the same bits as that
 * row of the whole sequence; and no rows at all is no work. */
START_TEST(rope_of_one_position_matches_its_row_of_the_sequence)
{
    tg_rope_table *table = tg_rope_table_new(12, 8, 10000, TG_ROPE_HALF);
    tg_scope_begin();
    tg_tensor *x = ramp(TG_FLOAT32, 3, SHAPE(2, 12, 8), -1, 0.01);
    tg_tensor *all = tg_rope(x, table, 0);
    for (int64_t p = 0; p < 12; p++) {
        double *want = values_of(tg_narrow(all, 1, p, 1));
        assert_values(tg_rope(tg_narrow(x, 1, p, 1), table, p), want, 16, 0);
        free(want);
    }
    tg_tensor *none = tg_rope(tg_zeros(TG_FLOAT32, 3, SHAPE(2, 0, 8)), table, 12);
    ck_assert_shape(none, 2, 0, 8);
    tg_scope_end();
    tg_rope_table_free(table);
}
END_TEST

/* ---- backward ------------------------------------------------------------------ */

/* Backward of y = rope(x) given dy = y is rope(y, -angle) = x again. */
START_TEST(rope_backward_is_the_inverse_rotation)
{
    tg_dtype dts[2] = {TG_FLOAT64, TG_FLOAT32};
    for (int pairing = 0; pairing < 2; pairing++)
        for (int k = 0; k < 2; k++) {
            tg_rope_table *table = tg_rope_table_new(32, 8, 10000, (tg_rope_pairing)pairing);
            tg_scope_begin();
            tg_tensor *x = ramp(dts[k], 3, SHAPE(2, 3, 8), -2, 0.07);
            tg_set_requires_grad(x, true);
            tg_tensor *y = tg_rope(x, table, 20);
            ck_assert_int_eq(tg_backward(y, tg_detach(y)), 0);
            double *want = values_of(x);
            assert_values(tg_grad(x), want, 48, k == 0 ? 1e-13 : 1e-5);
            free(want);
            tg_scope_end();
            tg_rope_table_free(table);
        }
}
END_TEST

/* The graph keeps its own reference: backward after the owner freed the
 * table reads it still (ASan would see a read of freed memory). */
START_TEST(rope_table_may_be_freed_before_backward)
{
    tg_rope_table *table = tg_rope_table_new(8, 8, 10000, TG_ROPE_INTERLEAVED);
    tg_scope_begin();
    tg_tensor *x = fixed_x(TG_FLOAT64);
    tg_set_requires_grad(x, true);
    tg_tensor *y = tg_rope(x, table, 5);
    tg_rope_table_free(table);
    tg_tensor *g = ramp(TG_FLOAT64, 2, SHAPE(3, 8), 0.5, -0.03);
    ck_assert_int_eq(tg_backward(y, g), 0);
    double want[24];
    ref_rope(tg_data_const(g), want, 3, 3, 8, 10000, true, 5, -1);
    assert_values(tg_grad(x), want, 24, 1e-13);
    tg_scope_end();
}
END_TEST

/* The angles are computed once, by tg_rope_table_new (through pow, which
 * this program counts); tg_rope and its backward only read them. */
START_TEST(rope_table_is_built_once_not_per_call)
{
    long before = pow_calls;
    tg_rope_table *table = tg_rope_table_new(64, 16, 10000, TG_ROPE_HALF);
    ck_assert_int_gt(pow_calls - before, 0);
    before = pow_calls;
    tg_scope_begin();
    tg_tensor *x = ramp(TG_FLOAT32, 3, SHAPE(4, 64, 16), -1, 0.001);
    tg_set_requires_grad(x, true);
    for (int call = 0; call < 3; call++) {
        tg_tensor *y = tg_rope(x, table, 0);
        ck_assert_int_eq(tg_backward(tg_sum(y, NULL, 0, false), NULL), 0);
    }
    ck_assert_int_eq(pow_calls - before, 0);
    tg_scope_end();
    tg_rope_table_free(table);
}
END_TEST

/* ---- errors ---------------------------------------------------------------------- */

START_TEST(rope_table_new_rejects_bad_arguments)
{
    ck_assert_ptr_null(tg_rope_table_new(16, 7, 10000, TG_ROPE_HALF));
    ck_assert_error(TG_ERR_VALUE, "tg_rope_table_new", "hd 7", "even");
    ck_assert_ptr_null(tg_rope_table_new(16, 0, 10000, TG_ROPE_HALF));
    ck_assert_error(TG_ERR_VALUE, "tg_rope_table_new", "hd 0");
    ck_assert_ptr_null(tg_rope_table_new(0, 8, 10000, TG_ROPE_HALF));
    ck_assert_error(TG_ERR_VALUE, "tg_rope_table_new", "max_positions", "got 0");
    double thetas[4] = {0, -10000, NAN, INFINITY};
    for (int i = 0; i < 4; i++) {
        ck_assert_ptr_null(tg_rope_table_new(16, 8, thetas[i], TG_ROPE_HALF));
        ck_assert_error(TG_ERR_VALUE, "tg_rope_table_new", "theta");
    }
    ck_assert_ptr_null(tg_rope_table_new(16, 8, 10000, (tg_rope_pairing)2));
    ck_assert_error(TG_ERR_VALUE, "tg_rope_table_new", "pairing", "got 2");
    ck_assert_ptr_null(tg_rope_table_new(INT64_MAX / 2, 8, 10000, TG_ROPE_HALF));
    ck_assert_error(TG_ERR_VALUE, "tg_rope_table_new", "too large");
    tg_rope_table_free(NULL);
}
END_TEST

START_TEST(rope_rejects_bad_arguments)
{
    tg_rope_table *table = tg_rope_table_new(8, 8, 10000, TG_ROPE_HALF);
    tg_scope_begin();
    tg_tensor *x = fixed_x(TG_FLOAT32);
    tg_set_requires_grad(x, true);
    ck_assert_ptr_null(tg_rope(NULL, table, 0));
    ck_assert_error(TG_ERR_NULL, "tg_rope", "x");
    ck_assert_ptr_null(tg_rope(x, NULL, 0));
    ck_assert_error(TG_ERR_NULL, "tg_rope", "table");
    ck_assert_ptr_null(tg_rope(tg_zeros(TG_INT64, 2, SHAPE(3, 8)), table, 0));
    ck_assert_error(TG_ERR_DTYPE, "tg_rope", "int64");
    ck_assert_ptr_null(tg_rope(tg_zeros(TG_FLOAT32, 1, SHAPE(8)), table, 0));
    ck_assert_error(TG_ERR_SHAPE, "tg_rope", "2-D", "[8]");
    ck_assert_ptr_null(tg_rope(tg_zeros(TG_FLOAT32, 2, SHAPE(3, 6)), table, 0));
    ck_assert_error(TG_ERR_SHAPE, "tg_rope", "hd 6", "hd 8");
    ck_assert_ptr_null(tg_rope(x, table, -1));
    ck_assert_error(TG_ERR_VALUE, "tg_rope", "positions past the table", "pos0 -1", "T 3",
                    "max_positions 8");
    ck_assert_ptr_null(tg_rope(x, table, 6));
    ck_assert_error(TG_ERR_VALUE, "tg_rope", "positions past the table", "pos0 6", "T 3",
                    "max_positions 8");
    ck_assert_ptr_null(tg_rope(x, table, INT64_MAX));
    ck_assert_error(TG_ERR_VALUE, "tg_rope", "positions past the table");
    /* the last positions fit */
    ck_assert_ptr_nonnull(tg_rope(x, table, 5));
    tg_scope_end();
    tg_rope_table_free(table);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("rope");
    TCase *values = tcase_checked("values");
    tcase_add_test(values, rope_half_matches_hugging_face_rotate_half);
    tcase_add_test(values, rope_interleaved_matches_meta_complex_product);
    tcase_add_test(values, rope_with_theta_500000_matches_at_position_100);
    tcase_add_test(values, rope_with_hd_strided_matches_both_formulas);
    tcase_add_test(values, rope_of_many_rows_matches_the_formula_in_both_dtypes);
    tcase_add_test(values, rope_of_a_transposed_heads_view_keeps_its_memory_order);
    tcase_add_test(values, rope_of_one_position_matches_its_row_of_the_sequence);
    suite_add_tcase(s, values);
    TCase *backward = tcase_checked("backward");
    tcase_add_test(backward, rope_backward_is_the_inverse_rotation);
    tcase_add_test(backward, rope_table_may_be_freed_before_backward);
    tcase_add_test(backward, rope_table_is_built_once_not_per_call);
    suite_add_tcase(s, backward);
    TCase *errors = tcase_checked("errors");
    tcase_add_test(errors, rope_table_new_rejects_bad_arguments);
    tcase_add_test(errors, rope_rejects_bad_arguments);
    suite_add_tcase(s, errors);
    return run_suite(s);
}
