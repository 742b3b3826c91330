/* Runs examples/attention_walkthrough and checks the numbers it prints
 * against the tutorials' values and a naive reference computed here, and the
 * claims it makes (masking, the Q/K/V experiments, backward agreement). */
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

enum { OUT_CAP = 1 << 16, MAXV = 64 };

/* Runs the example with args in a fresh temporary directory and returns its
 * stdout and stderr (static buffer) and its exit status. */
static const char *run(const char *args, int *status)
{
    static char out[OUT_CAP];
    char tmp[] = "/tmp/tg_walkthrough_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(tmp));
    *status = run_example_in(tmp, "attention_walkthrough", args, out, OUT_CAP);
    rmdir(tmp);
    return out;
}

/* A run that must succeed. */
static const char *run_ok(const char *args)
{
    int status;
    const char *out = run(args, &status);
    ck_assert_msg(status == 0, "exit status %d, output:\n%s", status, out);
    return out;
}

/* The text from "=== Example <n>" on. */
static const char *section(const char *out, int n)
{
    char head[32];
    snprintf(head, sizeof head, "=== Example %d", n);
    const char *s = strstr(out, head);
    ck_assert_msg(s != NULL, "no section '%s'", head);
    return s;
}

/* The text right after the first label at or after from. */
static const char *after(const char *from, const char *label)
{
    const char *s = strstr(from, label);
    ck_assert_msg(s != NULL, "label '%s' not printed", label);
    return s + strlen(label);
}

/* The number printed right after label ("... = 0.25"). */
static double number_after(const char *from, const char *label)
{
    char *end;
    const char *s = after(from, label);
    double v = strtod(s, &end);
    ck_assert_msg(end != s, "no number after '%s'", label);
    return v;
}

/* Parses the elements of the tensor printed after label (PyTorch's format:
 * fixed or scientific, "1." for whole numbers) into v; returns the count. */
static int tensor_after(const char *from, const char *label, double *v, int cap)
{
    const char *s = strstr(after(from, label), "tensor(");
    ck_assert_ptr_nonnull(s);
    s += strlen("tensor(");
    int depth = 0, n = 0;
    do {
        if (*s == '[') {
            depth++, s++;
        } else if (*s == ']') {
            depth--, s++;
        } else if (*s == '-' || (*s >= '0' && *s <= '9')) {
            char *end;
            ck_assert_int_lt(n, cap);
            v[n++] = strtod(s, &end);
            s = end;
        } else {
            ck_assert_msg(*s != '\0', "tensor after '%s' is cut off", label);
            s++;
        }
    } while (depth > 0);
    return n;
}

/* softmax(X Wq (X Wk)^T / sqrt(d)) X Wv with plain loops: the reference.
 * x [t, din], w* [din, d]; writes raw scores [t, t], weights and out [t, d]. */
static void reference(int t, int din, int d, const double *x, const double *wq,
                      const double *wk, const double *wv, double *raw, double *weights,
                      double *out)
{
    double q[16], k[16], v[16];
    for (int i = 0; i < t; i++)
        for (int j = 0; j < d; j++) {
            q[i * d + j] = k[i * d + j] = v[i * d + j] = 0;
            for (int c = 0; c < din; c++) {
                q[i * d + j] += x[i * din + c] * wq[c * d + j];
                k[i * d + j] += x[i * din + c] * wk[c * d + j];
                v[i * d + j] += x[i * din + c] * wv[c * d + j];
            }
        }
    for (int i = 0; i < t; i++) {
        double total = 0;
        for (int j = 0; j < t; j++) {
            raw[i * t + j] = 0;
            for (int c = 0; c < d; c++)
                raw[i * t + j] += q[i * d + c] * k[j * d + c];
            weights[i * t + j] = exp(raw[i * t + j] / sqrt(d));
            total += weights[i * t + j];
        }
        for (int j = 0; j < t; j++)
            weights[i * t + j] /= total;
        for (int c = 0; c < d; c++) {
            out[i * d + c] = 0;
            for (int j = 0; j < t; j++)
                out[i * d + c] += weights[i * t + j] * v[j * d + c];
        }
    }
}

/* Printed with 4 decimals or 5 significant digits. */
static void assert_printed(const double *got, const double *want, int n)
{
    for (int i = 0; i < n; i++)
        ck_assert_msg(fabs(got[i] - want[i]) <= 5.1e-5 * (1 + fabs(want[i])),
                      "element %d: printed %.6g, expected %.6g", i, got[i], want[i]);
}

START_TEST(runs_cleanly_and_frees_every_tensor)
{
    const char *out = run_ok("");
    for (int i = 1; i <= 5; i++)
        section(out, i);
    ck_assert_double_eq(number_after(out, "tensors still alive:"), 0);
}
END_TEST

START_TEST(example1_output_is_the_tutorials)
{
    const double x[] = {1, 2, 0, 1, 3, 1}, wq[] = {1, 0, 0, 1}, wk[] = {1, 1, 0, 1},
                 wv[] = {1, 0, 1, 1};
    double raw[9], weights[9], want[6], got[MAXV];
    reference(3, 2, 2, x, wq, wk, wv, raw, weights, want);
    const char *s = section(run_ok(""), 1);

    ck_assert_int_eq(tensor_after(s, "weights = softmax", got, MAXV), 9);
    assert_printed(got, weights, 9);
    ck_assert_int_eq(tensor_after(s, "output = weights V:", got, MAXV), 6);
    assert_printed(got, want, 6);
    /* the tutorial's two-decimal values */
    const double tutorial[] = {3.94, 1.06, 3.47, 1.31, 3.99, 1.01};
    for (int i = 0; i < 6; i++)
        ck_assert_msg(fabs(got[i] - tutorial[i]) < 0.006, "element %d: %g", i, got[i]);
}
END_TEST

START_TEST(example1_notes_the_tutorials_rounded_middle_row)
{
    const char *s = section(run_ok(""), 1);
    const char *note = after(s, "Note: one tutorial prints 3.50, 1.30 for the middle row");
    double a, b;
    ck_assert_int_eq(sscanf(after(note, "the exact value is"), " %lf, %lf", &a, &b), 2);
    ck_assert_double_eq_tol(a, 3.471, 1e-9);
    ck_assert_double_eq_tol(b, 1.306, 1e-9);
}
END_TEST

START_TEST(example2_raw_scores_weights_and_output)
{
    const double x[] = {1, 0, 1, 0, 0, 2, 0, 2, 1, 1, 1, 1};
    const double wq[] = {1, 0, 1, 1, 0, 0, 0, 0, 1, 0, 1, 1};
    const double wk[] = {0, 0, 1, 1, 1, 0, 0, 1, 0, 1, 1, 0};
    const double wv[] = {0, 2, 0, 0, 3, 0, 1, 0, 3, 1, 1, 0};
    double raw[9], weights[9], want[9], got[MAXV];
    reference(3, 4, 3, x, wq, wk, wv, raw, weights, want);
    const char *s = section(run_ok(""), 2);

    const double tutorial[] = {2, 4, 4, 4, 16, 12, 4, 12, 10};
    ck_assert_int_eq(tensor_after(s, "raw scores Q K^T:", got, MAXV), 9);
    for (int i = 0; i < 9; i++)
        ck_assert_double_eq(got[i], tutorial[i]);
    ck_assert_int_eq(tensor_after(s, "scaled scores:", got, MAXV), 9);
    for (int i = 0; i < 9; i++)
        ck_assert_double_eq_tol(got[i], tutorial[i] / sqrt(3), 5.1e-5);
    ck_assert_int_eq(tensor_after(s, "weights = softmax", got, MAXV), 9);
    assert_printed(got, weights, 9);
    ck_assert_int_eq(tensor_after(s, "output = weights V:", got, MAXV), 9);
    assert_printed(got, want, 9);
}
END_TEST

/* Example 3's claims, for the output of any seed. */
static void check_causal(const char *out)
{
    const char *s = section(out, 3);
    double free_w[MAXV], masked[MAXV], sums[MAXV];
    ck_assert_int_eq(tensor_after(s, "weights without a mask:", free_w, MAXV), 25);
    ck_assert_int_eq(tensor_after(s, "weights with the causal mask:", masked, MAXV), 25);
    for (int i = 0; i < 5; i++) {
        double total = 0;
        for (int j = 0; j < 5; j++) {
            if (j > i)
                ck_assert_msg(masked[i * 5 + j] == 0, "weight [%d,%d] = %g", i, j,
                              masked[i * 5 + j]);
            total += masked[i * 5 + j];
        }
        ck_assert_double_eq_tol(total, 1, 3e-4); /* five values rounded to 4 decimals */
    }
    ck_assert_double_eq(masked[0], 1); /* the first query sees only itself */
    for (int j = 0; j < 5; j++)        /* the last query sees every key: no change */
        ck_assert_double_eq(masked[20 + j], free_w[20 + j]);
    ck_assert_double_eq(number_after(s, "largest masked weight above the diagonal:"), 0);
    const char *labels[] = {"row sums without a mask:", "row sums with the causal mask:"};
    for (int l = 0; l < 2; l++) {
        ck_assert_int_eq(tensor_after(s, labels[l], sums, MAXV), 5);
        for (int i = 0; i < 5; i++)
            ck_assert_double_eq_tol(sums[i], 1, 5.1e-5);
    }
}

/* Example 4's three experiments. */
static void check_experiments(const char *out)
{
    const char *s = section(out, 4);
    double w[MAXV];
    ck_assert_double_le(number_after(s, "largest |row i - row 0| ="), 1e-12);
    ck_assert_int_eq(tensor_after(s, "weights with every query = query 0:", w, MAXV), 25);
    for (int i = 5; i < 25; i++)
        ck_assert_double_eq(w[i], w[i % 5]);
    ck_assert_double_eq(number_after(s, "largest |output| ="), 0);
    ck_assert_int_eq(tensor_after(s, "output with V = 0:", w, MAXV), 40);
    for (int i = 0; i < 40; i++)
        ck_assert_double_eq(w[i], 0);
    ck_assert_double_le(number_after(s, "largest |weight - 0.2| ="), 1e-12);
    ck_assert_int_eq(tensor_after(s, "weights with every key = key 0:", w, MAXV), 25);
    for (int i = 0; i < 25; i++)
        ck_assert_double_eq(w[i], 0.2);
}

/* Example 5: autograd and the formulas agree, and print the same matrices. */
static void check_backward(const char *out)
{
    const char *s = section(out, 5);
    const char *names[] = {"dX", "dW_Q", "dW_K", "dW_V"};
    const int sizes[] = {16, 12, 12, 12};
    for (int g = 0; g < 4; g++) {
        char label[64];
        double a[MAXV], b[MAXV];
        snprintf(label, sizeof label, "%s from autograd:", names[g]);
        ck_assert_int_eq(tensor_after(s, label, a, MAXV), sizes[g]);
        snprintf(label, sizeof label, "%s from the formula:", names[g]);
        ck_assert_int_eq(tensor_after(s, label, b, MAXV), sizes[g]);
        double nonzero = 0;
        for (int i = 0; i < sizes[g]; i++) {
            ck_assert_double_eq(a[i], b[i]);
            nonzero = fmax(nonzero, fabs(a[i]));
        }
        ck_assert_double_gt(nonzero, 1e-3); /* a real gradient, not zeros on both sides */
        snprintf(label, sizeof label, "max |autograd - formula| for %s:", names[g]);
        ck_assert_double_lt(number_after(s, label), 1e-10);
    }
}

START_TEST(causal_weights_are_lower_triangular_and_rows_sum_to_one)
{
    check_causal(run_ok(""));
}
END_TEST

START_TEST(experiments_show_equal_rows_zero_output_uniform_weights)
{
    check_experiments(run_ok(""));
}
END_TEST

START_TEST(backward_formulas_agree_with_autograd)
{
    check_backward(run_ok(""));
}
END_TEST

START_TEST(claims_hold_for_another_seed)
{
    const char *out = run_ok("--seed 12345");
    ck_assert_ptr_nonnull(strstr(out, "(seed 12345)"));
    check_causal(out);
    check_experiments(out);
    check_backward(out);
}
END_TEST

START_TEST(rejects_bad_arguments_with_a_message)
{
    int status;
    const char *out = run("--bogus", &status);
    ck_assert_int_eq(status, 2);
    ck_assert_ptr_nonnull(strstr(out, "unknown argument '--bogus'"));
    ck_assert_ptr_nonnull(strstr(out, "usage:"));
    out = run("--seed abc", &status);
    ck_assert_int_eq(status, 2);
    ck_assert_ptr_nonnull(strstr(out, "--seed needs a non-negative integer"));
    out = run("--seed", &status);
    ck_assert_int_eq(status, 2);
    ck_assert_ptr_nonnull(strstr(out, "--seed needs a non-negative integer, got ''"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("example_walkthrough");
    TCase *tc = tcase_checked("walkthrough");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, runs_cleanly_and_frees_every_tensor);
    tcase_add_test(tc, example1_output_is_the_tutorials);
    tcase_add_test(tc, example1_notes_the_tutorials_rounded_middle_row);
    tcase_add_test(tc, example2_raw_scores_weights_and_output);
    tcase_add_test(tc, causal_weights_are_lower_triangular_and_rows_sum_to_one);
    tcase_add_test(tc, experiments_show_equal_rows_zero_output_uniform_weights);
    tcase_add_test(tc, backward_formulas_agree_with_autograd);
    tcase_add_test(tc, claims_hold_for_another_seed);
    tcase_add_test(tc, rejects_bad_arguments_with_a_message);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
