/* Shared by the test programs: a fixture that asserts no tensor outlives a
 * test, comparisons that print both sides, and tensor builders. */
#ifndef TG_TESTUTIL_H
#define TG_TESTUTIL_H

#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <tensorgrad/tensorgrad.h>

/* Every test starts and ends with the same number of live tensors and no
 * error left behind unchecked. */
static int64_t live_at_start;

static void leak_setup(void)
{
    tg_error_clear();
    live_at_start = tg_live_tensors();
}

static void leak_teardown(void)
{
    ck_assert_int_eq(tg_scope_depth(), 0);
    ck_assert_msg(tg_live_tensors() == live_at_start, "%lld tensors leaked",
                  (long long)(tg_live_tensors() - live_at_start));
}

/* A test case with the leak fixture attached. */
static inline TCase *tcase_checked(const char *name)
{
    TCase *tc = tcase_create(name);
    tcase_add_checked_fixture(tc, leak_setup, leak_teardown);
    return tc;
}

/* Runs a suite and returns the process exit status. */
static inline int run_suite(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}

/* The exit status meson counts as SKIP, not as a pass. */
#define TEST_SKIP 77

/* A program that tests several kernel paths runs one per meson test: with
 * no argument its path-independent cases (-1), with a path's name (one of
 * names[0..n)) that path's cases alone (its index). The caller forces the
 * path and, when the CPU lacks it, returns skip_path(): so a path this CPU
 * cannot run shows as SKIP under its own name, never as a pass that
 * checked nothing. An unknown name is a failure (exit 2). */
static inline int test_path_arg(int argc, char **argv, const char *const *names, int n)
{
    if (argc < 2)
        return -1;
    for (int i = 0; i < n; i++)
        if (strcmp(argv[1], names[i]) == 0)
            return i;
    fprintf(stderr, "%s: unknown path '%s'\n", argv[0], argv[1]);
    exit(2);
}

static inline int skip_path(const char *program, const char *path)
{
    printf("SKIP: %s: this CPU has no %s path\n", program, path);
    return TEST_SKIP;
}

/* Shapes as literals: SHAPE(2, 3) */
#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})
#define NDIM(...) ((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))

/* A float64 tensor from a literal list: T64(SHAPE(2,2), 2, 1.0, 2.0, 3.0, 4.0) */
#define T64(shape, ndim, ...) tg_from_data(TG_FLOAT64, ndim, shape, (const double[]){__VA_ARGS__})
#define T32(shape, ndim, ...) tg_from_data(TG_FLOAT32, ndim, shape, (const float[]){__VA_ARGS__})

/* Asserts that t has the given shape. */
#define ck_assert_shape(t, ...)                                                      \
    do {                                                                             \
        const int64_t want_[] = {__VA_ARGS__};                                       \
        int nd_ = (int)(sizeof want_ / sizeof want_[0]);                             \
        ck_assert_ptr_nonnull(t);                                                    \
        ck_assert_int_eq(tg_ndim(t), nd_);                                           \
        for (int i_ = 0; i_ < nd_; i_++)                                             \
            ck_assert_msg(tg_shape(t)[i_] == want_[i_], "dim %d: %lld, expected %lld", \
                          i_, (long long)tg_shape(t)[i_], (long long)want_[i_]);     \
    } while (0)

/* Asserts that t (any dtype and layout) holds the n expected values within tol. */
static inline void assert_values(const tg_tensor *t, const double *want, int64_t n, double tol)
{
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(tg_numel(t), n);
    double *got = malloc((size_t)(n > 0 ? n : 1) * sizeof *got);
    ck_assert_ptr_nonnull(got);
    ck_assert_int_eq(tg_copy_to(t, TG_FLOAT64, got, n), 0);
    for (int64_t i = 0; i < n; i++) {
        if (isinf(want[i]) || isnan(want[i])) {
            ck_assert_msg(isinf(want[i]) ? got[i] == want[i] : isnan(got[i]),
                          "element %lld: %g, expected %g", (long long)i, got[i], want[i]);
            continue;
        }
        ck_assert_msg(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i])),
                      "element %lld: %.10g, expected %.10g", (long long)i, got[i], want[i]);
    }
    free(got);
}
#define ck_assert_values(t, tol, ...)                                                 \
    assert_values(t, (const double[]){__VA_ARGS__},                                   \
                  (int64_t)(sizeof((double[]){__VA_ARGS__}) / sizeof(double)), tol)

/* Asserts that the last call failed with code and that its message contains
 * every one of the given fragments. */
#define ck_assert_error(code, ...)                                                   \
    do {                                                                             \
        ck_assert_msg(tg_error_code() == (code), "error %s, expected %s (%s)",       \
                      tg_error_name(tg_error_code()), tg_error_name(code),           \
                      tg_error_message());                                           \
        const char *frags_[] = {__VA_ARGS__};                                        \
        for (size_t i_ = 0; i_ < sizeof frags_ / sizeof frags_[0]; i_++)             \
            ck_assert_msg(strstr(tg_error_message(), frags_[i_]),                    \
                          "message \"%s\" lacks \"%s\"", tg_error_message(), frags_[i_]); \
        tg_error_clear();                                                            \
    } while (0)

/* The path of a committed fixture file: tests/meson.build sets TG_FIXTURES to
 * tests/fixtures; run by hand from the source root, the relative path works. */
static inline void fixture_path(char *buf, size_t size, const char *name)
{
    const char *dir = getenv("TG_FIXTURES");
    snprintf(buf, size, "%s/%s", dir ? dir : "tests/fixtures", name);
}

/* t's elements as doubles in a malloc'd array (free it). */
static inline double *values_of(const tg_tensor *t)
{
    int64_t n = tg_numel(t);
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    ck_assert_int_eq(tg_copy_to(t, TG_FLOAT64, v, n), 0);
    return v;
}

/* Runs the example program `name` (from TG_EXAMPLES, the build's examples/)
 * with args in directory dir, stdout and stderr into out (NUL-terminated,
 * at most cap - 1 bytes). Returns its exit status, or -1 when it could not
 * be started or did not exit normally (a crash). */
static inline int run_example_in(const char *dir, const char *name, const char *args, char *out,
                                 size_t cap)
{
    const char *bin_dir = getenv("TG_EXAMPLES");
    ck_assert_msg(bin_dir != NULL, "TG_EXAMPLES is not set");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s/%s' %s 2>&1", dir, bin_dir, name, args);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* A fresh directory /tmp/<prefix>_XXXXXX in dir (size bytes), for tests
 * that run an example; remove_temp_dir deletes it with what it holds. */
static inline void make_temp_dir(char *dir, size_t size, const char *prefix)
{
    snprintf(dir, size, "/tmp/%s_XXXXXX", prefix);
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

/* Entries of the directory path other than . and .. */
static inline int dir_entries(const char *path)
{
    DIR *d = opendir(path);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

static inline void remove_temp_dir(const char *dir)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* Tensors built value by value through tg_data, for tests of any dtype. */
static inline int64_t shape_numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    return n;
}

/* A tensor of any dtype from double values, written through tg_data. */
static inline tg_tensor *make(tg_dtype dtype, int ndim, const int64_t *shape, const double *vals)
{
    tg_tensor *t = tg_zeros(dtype, ndim, shape);
    ck_assert_ptr_nonnull(t);
    if (dtype == TG_BFLOAT16) { /* rounded to nearest even by the library */
        ck_assert_int_eq(tg_copy_from(t, TG_FLOAT64, vals, shape_numel(ndim, shape)), 0);
        return t;
    }
    void *p = tg_data(t);
    for (int64_t i = 0; i < shape_numel(ndim, shape); i++) {
        switch (dtype) {
        case TG_FLOAT32: ((float *)p)[i] = (float)vals[i]; break;
        case TG_FLOAT64: ((double *)p)[i] = vals[i]; break;
        case TG_INT64: ((int64_t *)p)[i] = (int64_t)vals[i]; break;
        case TG_BOOL: ((bool *)p)[i] = vals[i] != 0; break;
        case TG_BFLOAT16: break; /* done above */
        }
    }
    return t;
}

/* start, start+step, ... laid out in shape. */
static inline tg_tensor *ramp(tg_dtype dtype, int ndim, const int64_t *shape, double start, double step)
{
    int64_t n = shape_numel(ndim, shape);
    double *vals = malloc((size_t)(n ? n : 1) * sizeof *vals);
    for (int64_t i = 0; i < n; i++)
        vals[i] = start + (double)i * step;
    tg_tensor *t = make(dtype, ndim, shape, vals);
    free(vals);
    return t;
}

#endif
