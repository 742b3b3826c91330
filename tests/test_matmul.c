/* tg_matmul: values against a naive triple loop on odd shapes in both
 * dtypes, transposed / sliced / expanded operands, the torch.matmul shape
 * rules, every error, empty dims, gradients, and tg_affine's bias. The GEMM
 * kernels under them are tested in test_gemm.c. */
#include "testutil.h"

#include <stdlib.h>


/* out[m,n] = a[m,k] @ b[k,n], all contiguous row-major doubles. */
static void naive_matmul(int64_t m, int64_t n, int64_t k, const double *a, const double *b,
                         double *out)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t p = 0; p < k; p++)
                s += a[i * k + p] * b[p * n + j];
            out[i * n + j] = s;
        }
}

/* Asserts that c (any layout, [m,n] values) equals a @ b by the naive loop
 * on the operands' values (any layout) within tol relative to the scale. */
static void assert_naive_product(const tg_tensor *a, const tg_tensor *b, const tg_tensor *c,
                                 int64_t m, int64_t n, int64_t k, double tol)
{
    double *va = values_of(a), *vb = values_of(b), *vc = values_of(c);
    double *want = malloc((size_t)(m * n > 0 ? m * n : 1) * sizeof *want);
    naive_matmul(m, n, k, va, vb, want);
    for (int64_t i = 0; i < m * n; i++)
        ck_assert_msg(fabs(vc[i] - want[i]) <= tol * (1 + sqrt((double)k)),
                      "[%lld,%lld,%lld] element %lld: %.10g, expected %.10g", (long long)m,
                      (long long)k, (long long)n, (long long)i, vc[i], want[i]);
    free(va);
    free(vb);
    free(vc);
    free(want);
}

static const int64_t odd_shapes[][3] = {/* m, k, n */
    {1, 1, 1}, {7, 13, 5}, {65, 33, 17}, {1, 40, 1}, {3, 1, 9}, {130, 300, 70}, {2, 5, 2100}};
#define N_ODD (int)(sizeof odd_shapes / sizeof odd_shapes[0])

START_TEST(matmul_matches_naive_loop_on_odd_shapes)
{
    tg_dtype dtype = _i % 2 ? TG_FLOAT64 : TG_FLOAT32;
    const int64_t *s = odd_shapes[_i / 2];
    tg_rng *rng = tg_rng_new(7 + (uint64_t)_i);
    tg_scope_begin();
    tg_tensor *a = tg_randn(rng, dtype, 2, SHAPE(s[0], s[1]));
    tg_tensor *b = tg_randn(rng, dtype, 2, SHAPE(s[1], s[2]));
    tg_tensor *c = tg_matmul(a, b);
    ck_assert_shape(c, s[0], s[2]);
    ck_assert_int_eq(tg_dtype_of(c), dtype);
    assert_naive_product(a, b, c, s[0], s[2], s[1], dtype == TG_FLOAT32 ? 1e-5 : 1e-12);
    tg_scope_end();
    tg_rng_free(rng);
}
END_TEST

/* Each operand stored transposed ([k,m] and [n,k]) and viewed back through
 * tg_transpose gives the product of the contiguous copies. */
START_TEST(transposed_operands_match_contiguous_ones)
{
    tg_dtype dtype = _i % 2 ? TG_FLOAT64 : TG_FLOAT32;
    const int64_t *s = odd_shapes[_i / 2];
    tg_rng *rng = tg_rng_new(11);
    tg_scope_begin();
    tg_tensor *at = tg_transpose(tg_randn(rng, dtype, 2, SHAPE(s[1], s[0])), 0, 1);
    tg_tensor *bt = tg_transpose(tg_randn(rng, dtype, 2, SHAPE(s[2], s[1])), 0, 1);
    tg_tensor *ac = tg_contiguous(at), *bc = tg_contiguous(bt);
    tg_tensor *products[4] = {tg_matmul(at, bt), tg_matmul(at, bc), tg_matmul(ac, bt),
                              tg_matmul(ac, bc)};
    double *want = values_of(products[3]);
    for (int p = 0; p < 3; p++) {
        ck_assert_shape(products[p], s[0], s[2]);
        assert_values(products[p], want, s[0] * s[2], dtype == TG_FLOAT32 ? 1e-5 : 1e-12);
    }
    assert_naive_product(ac, bc, products[0], s[0], s[2], s[1],
                         dtype == TG_FLOAT32 ? 1e-5 : 1e-12);
    free(want);
    tg_scope_end();
    tg_rng_free(rng);
}
END_TEST

START_TEST(sliced_and_expanded_operands_are_read_correctly)
{
    tg_rng *rng = tg_rng_new(3);
    tg_scope_begin();
    tg_tensor *wide = tg_randn(rng, TG_FLOAT64, 2, SHAPE(5, 9));
    tg_tensor *a = tg_narrow(wide, 1, 2, 6); /* [5,6], rows 9 apart */
    tg_tensor *col = tg_randn(rng, TG_FLOAT64, 2, SHAPE(6, 1));
    tg_tensor *b = tg_expand(col, 2, SHAPE(6, 4)); /* stride 0 along columns */
    tg_tensor *c = tg_matmul(a, b);
    ck_assert_shape(c, 5, 4);
    assert_naive_product(a, b, c, 5, 4, 6, 1e-12);
    /* a transposed slice: rows 1 apart, columns 9 apart */
    tg_tensor *at = tg_transpose(tg_narrow(wide, 0, 1, 3), 0, 1); /* [9,3] */
    tg_tensor *c2 = tg_matmul(at, tg_narrow(wide, 0, 0, 3));       /* [9,3]@[3,9] */
    ck_assert_shape(c2, 9, 9);
    assert_naive_product(at, tg_narrow(wide, 0, 0, 3), c2, 9, 9, 3, 1e-12);
    tg_scope_end();
    tg_rng_free(rng);
}
END_TEST

START_TEST(vector_operands_follow_torch_rules)
{
    tg_scope_begin();
    tg_tensor *u = T64(SHAPE(3), 1, 1.0, 2.0, 3.0);
    tg_tensor *v = T64(SHAPE(3), 1, 4.0, 5.0, 6.0);
    tg_tensor *m = T64(SHAPE(2, 3), 2, 1.0, 0.0, -1.0, 2.0, 1.0, 0.5);
    tg_tensor *dot = tg_matmul(u, v);
    ck_assert_int_eq(tg_ndim(dot), 0);
    ck_assert_values(dot, 1e-12, 32.0);
    tg_tensor *mv = tg_matmul(m, v); /* [2,3]@[3] -> [2] */
    ck_assert_shape(mv, 2);
    ck_assert_values(mv, 1e-12, -2.0, 16.0);
    tg_tensor *w = T64(SHAPE(2), 1, 1.0, -1.0);
    tg_tensor *vm = tg_matmul(w, m); /* [2]@[2,3] -> [3] */
    ck_assert_shape(vm, 3);
    ck_assert_values(vm, 1e-12, -1.0, -1.0, -1.5);
    /* 1-D against a batch: [3] @ [2,3,1] -> [2,1]; [2,2,3] @ [3] -> [2,2] */
    tg_tensor *batch = T64(SHAPE(2, 3, 1), 3, 1.0, 1.0, 1.0, 0.0, 1.0, 2.0);
    tg_tensor *vb = tg_matmul(u, batch);
    ck_assert_shape(vb, 2, 1);
    ck_assert_values(vb, 1e-12, 6.0, 8.0);
    tg_tensor *mb = tg_matmul(tg_expand(m, 3, SHAPE(2, 2, 3)), v);
    ck_assert_shape(mb, 2, 2);
    ck_assert_values(mb, 1e-12, -2.0, 16.0, -2.0, 16.0);
    tg_scope_end();
}
END_TEST

/* Reference for a batched product: sums tg_get over k at broadcast indices. */
static void assert_batched_product(const tg_tensor *a, const tg_tensor *b, const tg_tensor *c)
{
    int nc = tg_ndim(c), na = tg_ndim(a), nb = tg_ndim(b);
    const int64_t *sc = tg_shape(c);
    int64_t k = tg_shape(a)[na - 1], total = tg_numel(c);
    for (int64_t flat = 0; flat < total; flat++) {
        int64_t idx[TG_MAX_DIMS], rest = flat;
        for (int d = nc - 1; d >= 0; d--) {
            idx[d] = rest % sc[d];
            rest /= sc[d];
        }
        int64_t ia[TG_MAX_DIMS], ib[TG_MAX_DIMS];
        for (int d = 0; d < na - 2; d++) {
            int dc = d + (nc - na);
            ia[d] = tg_shape(a)[d] == 1 ? 0 : idx[dc];
        }
        for (int d = 0; d < nb - 2; d++) {
            int dc = d + (nc - nb);
            ib[d] = tg_shape(b)[d] == 1 ? 0 : idx[dc];
        }
        double want = 0;
        for (int64_t p = 0; p < k; p++) {
            ia[na - 2] = idx[nc - 2];
            ia[na - 1] = p;
            ib[nb - 2] = p;
            ib[nb - 1] = idx[nc - 1];
            want += tg_get(a, ia) * tg_get(b, ib);
        }
        double got = tg_get(c, idx);
        ck_assert_msg(fabs(got - want) <= 1e-5 * (1 + fabs(want)), "element %lld: %g, expected %g",
                      (long long)flat, got, want);
    }
}

START_TEST(batch_dims_broadcast)
{
    tg_dtype dtype = _i ? TG_FLOAT64 : TG_FLOAT32;
    tg_rng *rng = tg_rng_new(5);
    tg_scope_begin();
    tg_tensor *a = tg_randn(rng, dtype, 4, SHAPE(2, 1, 3, 4));
    tg_tensor *b = tg_randn(rng, dtype, 3, SHAPE(5, 4, 6));
    tg_tensor *c = tg_matmul(a, b);
    ck_assert_shape(c, 2, 5, 3, 6);
    assert_batched_product(a, b, c);
    /* a stack times one matrix, contiguous (one tall GEMM) and not */
    tg_tensor *x = tg_randn(rng, dtype, 3, SHAPE(4, 3, 5));
    tg_tensor *w = tg_randn(rng, dtype, 2, SHAPE(5, 2));
    tg_tensor *xw = tg_matmul(x, w);
    ck_assert_shape(xw, 4, 3, 2);
    assert_batched_product(x, w, xw);
    tg_tensor *xt = tg_transpose(x, 0, 1); /* [3,4,5]: batch stride 5 */
    tg_tensor *xtw = tg_matmul(xt, w);
    ck_assert_shape(xtw, 3, 4, 2);
    assert_batched_product(xt, w, xtw);
    /* many small products: the batch loop itself runs in parallel */
    tg_tensor *p = tg_randn(rng, dtype, 3, SHAPE(40, 3, 2));
    tg_tensor *q = tg_transpose(tg_randn(rng, dtype, 3, SHAPE(40, 4, 2)), 1, 2);
    tg_tensor *pq = tg_matmul(p, q);
    ck_assert_shape(pq, 40, 3, 4);
    assert_batched_product(p, q, pq);
    tg_scope_end();
    tg_rng_free(rng);
}
END_TEST

START_TEST(empty_inner_dim_gives_zeros)
{
    tg_scope_begin();
    tg_tensor *c = tg_matmul(tg_zeros(TG_FLOAT32, 2, SHAPE(3, 0)),
                             tg_ones(TG_FLOAT32, 2, SHAPE(0, 4)));
    ck_assert_shape(c, 3, 4);
    ck_assert_values(c, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    tg_tensor *empty_rows = tg_matmul(tg_ones(TG_FLOAT64, 2, SHAPE(0, 3)),
                                      tg_ones(TG_FLOAT64, 2, SHAPE(3, 4)));
    ck_assert_shape(empty_rows, 0, 4);
    tg_tensor *empty_dot = tg_matmul(tg_ones(TG_FLOAT64, 1, SHAPE(0)),
                                     tg_ones(TG_FLOAT64, 1, SHAPE(0)));
    ck_assert_values(empty_dot, 0, 0.0);
    tg_tensor *empty_batch = tg_matmul(tg_ones(TG_FLOAT64, 3, SHAPE(0, 2, 3)),
                                       tg_ones(TG_FLOAT64, 2, SHAPE(3, 4)));
    ck_assert_shape(empty_batch, 0, 2, 4);
    ck_assert_int_eq(tg_error_code(), TG_OK);
    tg_scope_end();
}
END_TEST

START_TEST(matmul_rejects_mismatched_inner_dim)
{
    tg_scope_begin();
    ck_assert_ptr_null(tg_matmul(tg_ones(TG_FLOAT32, 2, SHAPE(2, 3)),
                                 tg_ones(TG_FLOAT32, 2, SHAPE(4, 5))));
    ck_assert_str_eq(tg_error_message(), "tg_matmul: inner dimensions differ: [2,3] @ [4,5]");
    ck_assert_error(TG_ERR_SHAPE, "inner dimensions differ");
    ck_assert_ptr_null(tg_matmul(tg_ones(TG_FLOAT32, 1, SHAPE(3)),
                                 tg_ones(TG_FLOAT32, 1, SHAPE(4))));
    ck_assert_error(TG_ERR_SHAPE, "tg_matmul: inner dimensions differ: [3] @ [4]");
    ck_assert_ptr_null(tg_matmul(tg_ones(TG_FLOAT32, 2, SHAPE(2, 3)),
                                 tg_ones(TG_FLOAT32, 1, SHAPE(2))));
    ck_assert_error(TG_ERR_SHAPE, "[2,3] @ [2]");
    tg_scope_end();
}
END_TEST

START_TEST(matmul_rejects_batch_dims_that_do_not_broadcast)
{
    tg_scope_begin();
    ck_assert_ptr_null(tg_matmul(tg_ones(TG_FLOAT64, 3, SHAPE(2, 3, 4)),
                                 tg_ones(TG_FLOAT64, 3, SHAPE(3, 4, 5))));
    ck_assert_error(TG_ERR_SHAPE, "tg_matmul", "batch", "[2,3,4] @ [3,4,5]");
    tg_scope_end();
}
END_TEST

START_TEST(matmul_rejects_scalars_dtypes_and_null)
{
    tg_scope_begin();
    tg_tensor *m = tg_ones(TG_FLOAT32, 2, SHAPE(2, 2));
    ck_assert_ptr_null(tg_matmul(tg_scalar(TG_FLOAT32, 2.0), m));
    ck_assert_error(TG_ERR_SHAPE, "tg_matmul", "[] @ [2,2]");
    ck_assert_ptr_null(tg_matmul(m, tg_scalar(TG_FLOAT32, 2.0)));
    ck_assert_error(TG_ERR_SHAPE, "tg_matmul");
    ck_assert_ptr_null(tg_matmul(m, tg_ones(TG_FLOAT64, 2, SHAPE(2, 2))));
    ck_assert_error(TG_ERR_DTYPE, "tg_matmul", "float32", "float64");
    ck_assert_ptr_null(tg_matmul(tg_zeros(TG_INT64, 2, SHAPE(2, 2)), m));
    ck_assert_error(TG_ERR_DTYPE, "tg_matmul", "int64");
    ck_assert_ptr_null(tg_matmul(NULL, m));
    ck_assert_error(TG_ERR_NULL, "tg_matmul", "a");
    ck_assert_ptr_null(tg_matmul(m, NULL));
    ck_assert_error(TG_ERR_NULL, "tg_matmul", "b");
    tg_scope_end();
}
END_TEST

/* ---- gradients --------------------------------------------------------------- */

START_TEST(matmul_gradients_match_hand_values)
{
    tg_tensor *a = T64(SHAPE(2, 2), 2, 1.0, 2.0, 3.0, 4.0);
    tg_tensor *v = T64(SHAPE(2), 1, 5.0, -1.0);
    tg_set_requires_grad(a, true);
    tg_set_requires_grad(v, true);
    tg_scope_begin();
    /* loss = sum(a @ v): d/da[i][j] = v[j], d/dv[j] = sum_i a[i][j] */
    ck_assert_int_eq(tg_backward(tg_sum(tg_matmul(a, v), NULL, 0, false), NULL), 0);
    ck_assert_values(tg_grad(a), 1e-12, 5.0, -1.0, 5.0, -1.0);
    ck_assert_shape(tg_grad(v), 2);
    ck_assert_values(tg_grad(v), 1e-12, 4.0, 6.0);
    tg_zero_grad(a);
    tg_zero_grad(v);
    /* loss = v . v through matmul: d/dv = 2v */
    ck_assert_int_eq(tg_backward(tg_matmul(v, v), NULL), 0);
    ck_assert_values(tg_grad(v), 1e-12, 10.0, -2.0);
    tg_zero_grad(v);
    /* loss = sum(v @ a): d/dv[i] = sum_j a[i][j], d/da[i][j] = v[i] */
    ck_assert_int_eq(tg_backward(tg_sum(tg_matmul(v, a), NULL, 0, false), NULL), 0);
    ck_assert_values(tg_grad(v), 1e-12, 3.0, 7.0);
    ck_assert_values(tg_grad(a), 1e-12, 5.0, 5.0, -1.0, -1.0);
    tg_scope_end();
    tg_release(a);
    tg_release(v);
}
END_TEST

/* [2,3,2] @ [2,2]: the weight's gradient sums over the batch. */
START_TEST(weight_gradient_sums_over_the_batch)
{
    tg_tensor *x = T64(SHAPE(2, 3, 2), 3, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0,
                       2.0, 0.0, 0.0, 2.0, 2.0, 2.0);
    tg_tensor *w = T64(SHAPE(2, 2), 2, 1.0, 2.0, 3.0, 4.0);
    tg_set_requires_grad(x, true);
    tg_set_requires_grad(w, true);
    tg_scope_begin();
    ck_assert_int_eq(tg_backward(tg_sum(tg_matmul(x, w), NULL, 0, false), NULL), 0);
    /* dW[p][j] = sum over all rows of x[., p] = 6 for p = 0 and 1 */
    ck_assert_shape(tg_grad(w), 2, 2);
    ck_assert_values(tg_grad(w), 1e-12, 6.0, 6.0, 6.0, 6.0);
    /* dX[b][i][p] = sum_j w[p][j] = 3, 7 */
    ck_assert_values(tg_grad(x), 1e-12, 3, 7, 3, 7, 3, 7, 3, 7, 3, 7, 3, 7);
    tg_scope_end();
    tg_release(x);
    tg_release(w);
}
END_TEST


/* tg_affine's bias reaches every row: 1000 rows of 3 outputs (more rows
 * than the bias copy's block, in both dtypes), 1 row, and no rows. */
START_TEST(affine_adds_the_bias_to_every_row)
{
    enum { IN = 6, OUT = 3 };
    const int64_t row_counts[3] = {1000, 1, 0};
    const tg_dtype dts[2] = {TG_FLOAT64, TG_FLOAT32};
    static double xv[1000 * IN], want[1000 * OUT];
    double wv[OUT * IN], bv[OUT] = {0.5, -2.0, 3.25};
    for (int i = 0; i < OUT * IN; i++)
        wv[i] = (double)(i % 5) - 2;
    for (int i = 0; i < 1000 * IN; i++)
        xv[i] = (double)((i * 7) % 11) / 4 - 1;
    for (int d = 0; d < 2; d++)
        for (int c = 0; c < 3; c++) {
            int64_t rows = row_counts[c];
            for (int64_t r = 0; r < rows; r++)
                for (int o = 0; o < OUT; o++) {
                    double acc = bv[o];
                    for (int i = 0; i < IN; i++)
                        acc += xv[r * IN + i] * wv[o * IN + i];
                    want[r * OUT + o] = acc;
                }
            tg_scope_begin();
            tg_tensor *x = tg_to_dtype(tg_from_data(TG_FLOAT64, 2, SHAPE(rows, IN), xv), dts[d]);
            tg_tensor *w = tg_to_dtype(tg_from_data(TG_FLOAT64, 2, SHAPE(OUT, IN), wv), dts[d]);
            tg_tensor *b = tg_to_dtype(tg_from_data(TG_FLOAT64, 1, SHAPE(OUT), bv), dts[d]);
            tg_tensor *y = tg_affine(x, w, b);
            ck_assert_shape(y, rows, OUT);
            assert_values(y, want, rows * OUT, d == 0 ? 1e-12 : 1e-5);
            tg_scope_end();
        }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("matmul");
    TCase *values = tcase_checked("values");
    tcase_add_loop_test(values, matmul_matches_naive_loop_on_odd_shapes, 0, 2 * N_ODD);
    tcase_add_loop_test(values, transposed_operands_match_contiguous_ones, 0, 2 * N_ODD);
    tcase_add_test(values, sliced_and_expanded_operands_are_read_correctly);
    tcase_add_test(values, vector_operands_follow_torch_rules);
    tcase_add_loop_test(values, batch_dims_broadcast, 0, 2);
    tcase_add_test(values, empty_inner_dim_gives_zeros);
    tcase_add_test(values, affine_adds_the_bias_to_every_row);
    suite_add_tcase(s, values);
    TCase *errors = tcase_checked("errors");
    tcase_add_test(errors, matmul_rejects_mismatched_inner_dim);
    tcase_add_test(errors, matmul_rejects_batch_dims_that_do_not_broadcast);
    tcase_add_test(errors, matmul_rejects_scalars_dtypes_and_null);
    suite_add_tcase(s, errors);
    TCase *grads = tcase_checked("gradients");
    tcase_add_test(grads, matmul_gradients_match_hand_values);
    tcase_add_test(grads, weight_gradient_sums_over_the_batch);
    suite_add_tcase(s, grads);
    return run_suite(s);
}
