/* The storage cache (tensor/storage.c): released buffers serve the next
 * tensor of their size, or a smaller one, and go back to the C library
 * rather than let the cache and what is in use pass the high mark. */
#include "testutil.h"

#include "internal.h" /* the cache's account */

static tg_tensor *floats(int64_t n)
{
    tg_tensor *t = tg_zeros(TG_FLOAT32, 1, SHAPE(n));
    ck_assert_ptr_nonnull(t);
    return t;
}

/* The buffer of a tensor of n floats made and released: it now waits in
 * the cache (emptied first, so nothing else does). */
static void *released_buffer(int64_t n)
{
    tg_release_cached_memory();
    tg_tensor *t = floats(n);
    void *p = tg_data(t);
    tg_release(t);
    return p;
}

START_TEST(released_storage_serves_the_next_tensor_of_its_size)
{
    void *p = released_buffer(300000);
    tg_tensor *b = floats(300000);
    ck_assert_ptr_eq(tg_data(b), p);
    tg_release(b);
}
END_TEST

/* A buffer freed at one size serves a smaller request when none of that
 * size waits, and goes back to its own size afterwards. */
START_TEST(a_smaller_request_borrows_a_larger_buffer_and_returns_it)
{
    void *p = released_buffer(400000);
    tg_tensor *small = floats(250000);
    ck_assert_ptr_eq(tg_data(small), p);
    tg_release(small);
    tg_tensor *big = floats(400000);
    ck_assert_ptr_eq(tg_data(big), p);
    tg_release(big);
}
END_TEST

/* More than twice the request is too much to borrow: the small tensor gets
 * its own buffer and the large one still waits for its own size (a third
 * tensor, in use beside the large one at first, leaves the high mark room
 * for both, and is what goes back). */
START_TEST(a_request_under_half_the_size_does_not_borrow)
{
    tg_release_cached_memory();
    tg_tensor *big = floats(1000000), *filler = floats(600000);
    void *p = tg_data(big);
    tg_release(big);
    tg_release(filler);
    tg_tensor *small = floats(200000);
    ck_assert_ptr_ne(tg_data(small), p);
    tg_tensor *again = floats(1000000);
    ck_assert_ptr_eq(tg_data(again), p);
    tg_release(small);
    tg_release(again);
}
END_TEST

/* A request of the buffer's own size is served before a borrower's. */
START_TEST(a_request_takes_its_own_size_before_a_larger_one)
{
    tg_release_cached_memory();
    tg_tensor *big = floats(400000), *own = floats(250000);
    void *pbig = tg_data(big), *pown = tg_data(own);
    tg_release(big);
    tg_release(own);
    tg_tensor *again = floats(250000);
    ck_assert_ptr_eq(tg_data(again), pown);
    ck_assert_ptr_ne(tg_data(again), pbig);
    tg_release(again);
}
END_TEST

/* A buffer that has to come from the C library first sends cached ones
 * back: the cache and the buffers in use never pass together the most that
 * was ever in use at once. */
START_TEST(the_cache_gives_buffers_back_rather_than_pass_the_high_mark)
{
    tg_release_cached_memory();
    size_t used, high, cached;
    tg__storage_cache_bytes(&used, &high, &cached);
    ck_assert_uint_eq(cached, 0);
    /* a tensor that alone raises the mark, then waits in the cache */
    int64_t n = (int64_t)((high - used) / sizeof(float)) + 300000;
    tg_release(floats(n));
    tg__storage_cache_bytes(&used, &high, &cached);
    ck_assert_uint_ge(cached, (size_t)n * sizeof(float));
    ck_assert_uint_le(used + cached, high);
    /* one twice as large cannot borrow it, and beside it would pass the
     * mark: the cached buffer goes */
    tg_tensor *b = floats(2 * n);
    tg__storage_cache_bytes(&used, &high, &cached);
    ck_assert_uint_eq(cached, 0);
    ck_assert_uint_le(used, high);
    const float *d = tg_data(b); /* zeroed, whether mapped or malloc'd */
    for (int64_t i = 0; i < 2 * n; i += 1021)
        ck_assert(d[i] == 0.0f);
    ck_assert(d[2 * n - 1] == 0.0f);
    tg_release(b);
}
END_TEST

/* What goes back is the smallest cached buffer that covers the excess: a
 * small request costs a small buffer, not the large one beside it. */
START_TEST(a_small_request_over_the_mark_sends_back_a_small_buffer)
{
    tg_release_cached_memory();
    size_t used, high, cached;
    tg__storage_cache_bytes(&used, &high, &cached);
    int64_t n = (int64_t)((high - used) / sizeof(float)) + 300000;
    tg_tensor *large = floats(n), *mid = floats(1000); /* together they set the mark */
    tg_release(large);
    tg_release(mid);
    tg__storage_cache_bytes(&used, &high, &cached);
    size_t both = cached;
    /* 100 floats cannot borrow the 1000-float buffer (over twice the size) */
    tg_tensor *small = floats(100);
    tg__storage_cache_bytes(&used, &high, &cached);
    ck_assert_uint_le(used + cached, high);
    ck_assert_uint_ge(cached, (size_t)n * sizeof(float)); /* the large one stays */
    ck_assert_uint_lt(cached, both);
    tg_release(small);
}
END_TEST

static Suite *storage_suite(void)
{
    Suite *s = suite_create("storage");
    TCase *tc = tcase_checked("cache");
    tcase_add_test(tc, released_storage_serves_the_next_tensor_of_its_size);
    tcase_add_test(tc, a_smaller_request_borrows_a_larger_buffer_and_returns_it);
    tcase_add_test(tc, a_request_under_half_the_size_does_not_borrow);
    tcase_add_test(tc, a_request_takes_its_own_size_before_a_larger_one);
    tcase_add_test(tc, the_cache_gives_buffers_back_rather_than_pass_the_high_mark);
    tcase_add_test(tc, a_small_request_over_the_mark_sends_back_a_small_buffer);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return run_suite(storage_suite()); }
