/* The seeded generator: its stream against an independent xoshiro256**
 * reference, its distributions, saved states, and the random tensors drawn
 * from it. */
#include "testutil.h"

#include <stdint.h>

/* An independent reference written from the published algorithms (Vigna,
 * prng.di.unimi.it): splitmix64 turns the seed into the four state words of
 * xoshiro256**. If tensor/rng.c ever drifts from it, seeds stop reproducing. */
typedef struct {
    uint64_t w[4];
} ref_rng;

static uint64_t ref_rotl(uint64_t x, unsigned k) { return (x << k) | (x >> (64u - k)); }

static void ref_seed(ref_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++) {
        seed += UINT64_C(0x9E3779B97F4A7C15);
        uint64_t z = seed;
        z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
        z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
        r->w[i] = z ^ (z >> 31);
    }
}

static uint64_t ref_next(ref_rng *r)
{
    uint64_t out = ref_rotl(r->w[1] * 5, 7) * 9;
    uint64_t shifted = r->w[1] << 17;
    r->w[2] ^= r->w[0];
    r->w[3] ^= r->w[1];
    r->w[1] ^= r->w[2];
    r->w[0] ^= r->w[3];
    r->w[2] ^= shifted;
    r->w[3] = ref_rotl(r->w[3], 45);
    return out;
}

START_TEST(rng_stream_is_xoshiro256starstar_seeded_by_splitmix64)
{
    /* Seed 42's first outputs, computed once outside C (big-int arithmetic
     * in Python) to pin the reference itself. */
    const uint64_t pinned[3] = {UINT64_C(0x15780b2e0c2ec716), UINT64_C(0x6104d9866d113a7e),
                                UINT64_C(0xae17533239e499a1)};
    ref_rng ref;
    ref_seed(&ref, 42);
    tg_rng *rng = tg_rng_new(42);
    for (int i = 0; i < 3; i++) {
        uint64_t want = ref_next(&ref);
        ck_assert_uint_eq(want, pinned[i]);
        ck_assert_uint_eq(tg_rng_next(rng), want);
    }
    const uint64_t seeds[3] = {0, 1, UINT64_MAX};
    for (int s = 0; s < 3; s++) {
        ref_seed(&ref, seeds[s]);
        tg_rng_seed(rng, seeds[s]);
        for (int i = 0; i < 1000; i++)
            ck_assert_uint_eq(tg_rng_next(rng), ref_next(&ref));
    }
    /* Doubles take the top 53 bits. */
    ref_seed(&ref, 7);
    tg_rng_seed(rng, 7);
    for (int i = 0; i < 100; i++)
        ck_assert_double_eq(tg_rng_uniform01(rng), (double)(ref_next(&ref) >> 11) * 0x1p-53);
    tg_rng_free(rng);
}
END_TEST

START_TEST(rng_same_seed_repeats_and_different_seeds_differ)
{
    tg_rng *a = tg_rng_new(123), *b = tg_rng_new(123), *c = tg_rng_new(124);
    int same = 0;
    for (int i = 0; i < 100; i++) {
        uint64_t x = tg_rng_next(a), z = tg_rng_next(c);
        ck_assert_uint_eq(tg_rng_next(b), x);
        same += x == z;
    }
    ck_assert_int_eq(same, 0);
    tg_rng_free(a);
    tg_rng_free(b);
    tg_rng_free(c);
    tg_rng_free(NULL);
}
END_TEST

START_TEST(rng_uniform_stays_in_the_unit_interval)
{
    tg_rng *rng = tg_rng_new(5);
    double sum = 0;
    for (int i = 0; i < 100000; i++) {
        double u = tg_rng_uniform01(rng);
        ck_assert(u >= 0.0 && u < 1.0);
        sum += u;
    }
    ck_assert_double_eq_tol(sum / 100000, 0.5, 0.005);
    tg_rng_free(rng);
}
END_TEST

START_TEST(rng_normal_has_zero_mean_and_unit_std)
{
    tg_rng *rng = tg_rng_new(2024);
    const int n = 100000;
    double sum = 0, sq = 0;
    for (int i = 0; i < n; i++) {
        double x = tg_rng_normal(rng);
        ck_assert(isfinite(x));
        sum += x;
        sq += x * x;
    }
    double mean = sum / n, std = sqrt(sq / n - mean * mean);
    ck_assert_double_eq_tol(mean, 0.0, 0.015); /* ~5 standard errors */
    ck_assert_double_eq_tol(std, 1.0, 0.015);
    tg_rng_free(rng);
}
END_TEST

START_TEST(rng_saved_state_resumes_the_same_stream)
{
    tg_rng *rng = tg_rng_new(9);
    for (int i = 0; i < 17; i++)
        tg_rng_next(rng);
    uint64_t state[4];
    tg_rng_get_state(rng, state);
    uint64_t want[10];
    for (int i = 0; i < 10; i++)
        want[i] = tg_rng_next(rng);
    tg_rng *other = tg_rng_new(1);
    tg_rng_set_state(other, state);
    for (int i = 0; i < 10; i++)
        ck_assert_uint_eq(tg_rng_next(other), want[i]);
    tg_rng_free(rng);
    tg_rng_free(other);
}
END_TEST

START_TEST(random_tensors_are_reproducible_and_in_range)
{
    tg_rng *a = tg_rng_new(77), *b = tg_rng_new(77);
    tg_tensor *u1 = tg_uniform(a, TG_FLOAT32, 2, SHAPE(10, 100), -2, 3);
    tg_tensor *u2 = tg_uniform(b, TG_FLOAT32, 2, SHAPE(10, 100), -2, 3);
    tg_tensor *n1 = tg_randn(a, TG_FLOAT64, 1, SHAPE(50));
    tg_tensor *n2 = tg_randn(b, TG_FLOAT64, 1, SHAPE(50));
    ck_assert_shape(u1, 10, 100);
    const float *p1 = tg_data(u1), *p2 = tg_data(u2);
    for (int i = 0; i < 1000; i++) {
        ck_assert(p1[i] >= -2.0f && p1[i] <= 3.0f);
        ck_assert_float_eq(p1[i], p2[i]);
    }
    /* randn draws one normal per element, in row-major order. */
    tg_rng *c = tg_rng_new(77);
    for (int i = 0; i < 1000; i++)
        tg_rng_uniform01(c);
    const double *q1 = tg_data(n1), *q2 = tg_data(n2);
    for (int i = 0; i < 50; i++) {
        ck_assert_double_eq(q1[i], q2[i]);
        ck_assert_double_eq(q1[i], tg_rng_normal(c));
    }
    tg_tensor *r = tg_rand(a, TG_FLOAT64, 1, SHAPE(100));
    for (int i = 0; i < 100; i++)
        ck_assert(((double *)tg_data(r))[i] >= 0 && ((double *)tg_data(r))[i] < 1);
    tg_release(u1);
    tg_release(u2);
    tg_release(n1);
    tg_release(n2);
    tg_release(r);
    tg_rng_free(a);
    tg_rng_free(b);
    tg_rng_free(c);
}
END_TEST

START_TEST(random_tensors_reject_bad_arguments)
{
    tg_rng *rng = tg_rng_new(1);
    ck_assert_ptr_null(tg_randn(NULL, TG_FLOAT32, 1, SHAPE(2)));
    ck_assert_error(TG_ERR_NULL, "tg_randn", "rng");
    ck_assert_ptr_null(tg_rand(rng, TG_INT64, 1, SHAPE(2)));
    ck_assert_error(TG_ERR_DTYPE, "tg_rand", "int64");
    ck_assert_ptr_null(tg_uniform(rng, TG_FLOAT32, 1, SHAPE(2), 3, 2));
    ck_assert_error(TG_ERR_VALUE, "tg_uniform");
    ck_assert_ptr_null(tg_randn(rng, TG_FLOAT32, 1, SHAPE(-2)));
    ck_assert_error(TG_ERR_SHAPE, "tg_randn", "-2");
    tg_rng_free(rng);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("rng");
    TCase *tc = tcase_checked("rng");
    tcase_add_test(tc, rng_stream_is_xoshiro256starstar_seeded_by_splitmix64);
    tcase_add_test(tc, rng_same_seed_repeats_and_different_seeds_differ);
    tcase_add_test(tc, rng_uniform_stays_in_the_unit_interval);
    tcase_add_test(tc, rng_normal_has_zero_mean_and_unit_std);
    tcase_add_test(tc, rng_saved_state_resumes_the_same_stream);
    tcase_add_test(tc, random_tensors_are_reproducible_and_in_range);
    tcase_add_test(tc, random_tensors_reject_bad_arguments);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
