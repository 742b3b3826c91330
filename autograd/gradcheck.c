/* The gradient checker: autograd against central differences in float64,
 * and the float32 code paths against the float64 ones. Works on any function
 * of tensors, so users can check their own layers as the tests check ops. */
#include "graph.h"

#include <stdio.h>
#include <string.h>

#define MAX_INPUTS 64

static int64_t coverage[TG_OP_COUNT][2];

void tg_gradcheck_coverage(int64_t seen[][2], int count)
{
    for (int op = 0; op < count && op < TG_OP_COUNT; op++) {
        seen[op][0] = coverage[op][0];
        seen[op][1] = coverage[op][1];
    }
}

static void count_op(tg_op op, void *user)
{
    coverage[op][*(int *)user]++;
}

typedef struct {
    double eps, atol, rtol;
    uint64_t seed;
} settings;

static settings settings_from(const tg_gradcheck_options *o, double atol, double rtol)
{
    settings s = {1e-6, atol, rtol, 0};
    if (o) {
        if (o->eps > 0) s.eps = o->eps;
        if (o->atol > 0) s.atol = o->atol;
        if (o->rtol > 0) s.rtol = o->rtol;
        s.seed = o->seed;
    }
    return s;
}

static int check_args(const char *fn, tg_gradcheck_fn f, tg_tensor *const *inputs, int n)
{
    if (!f || !inputs) {
        tg__fail(TG_ERR_NULL, "%s: %s is NULL", fn, f ? "inputs" : "f");
        return -1;
    }
    if (n < 1 || n > MAX_INPUTS) {
        tg__fail(TG_ERR_VALUE, "%s: %d inputs, expected 1 to %d", fn, n, MAX_INPUTS);
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (!inputs[i]) {
            tg__fail(TG_ERR_NULL, "%s: input %d is NULL", fn, i);
            return -1;
        }
    return 0;
}

/* Contiguous copies of the inputs, floats converted to dtype and requiring
 * grad; other dtypes shared as they are. */
static int copy_inputs(tg_tensor *const *inputs, int n, tg_dtype dtype, tg_tensor **out)
{
    for (int i = 0; i < n; i++) {
        if (!tg__is_float(inputs[i]->dtype)) {
            out[i] = tg_retain(inputs[i]);
            continue;
        }
        out[i] = tg__convert(inputs[i], dtype);
        if (!out[i] || tg_set_requires_grad(out[i], true) < 0)
            return -1;
    }
    return 0;
}

static void release_all(tg_tensor **ts, int n)
{
    for (int i = 0; i < n; i++) {
        tg_release(ts[i]);
        ts[i] = NULL;
    }
}

/* Runs f inside a scope; returns a reference of our own to its output. */
static tg_tensor *call(tg_gradcheck_fn f, void *ctx, tg_tensor **inputs, int n)
{
    tg_scope_begin();
    tg_tensor *y = f(inputs, n, ctx);
    if (!y)
        tg__fail(TG_ERR_STATE, "tg_gradcheck: the function under test returned NULL");
    else if (!tg__is_float(y->dtype))
        y = tg__fail(TG_ERR_DTYPE, "tg_gradcheck: the function returned a %s tensor",
                     tg_dtype_name(y->dtype));
    tg_retain(y);
    tg_scope_end();
    return y;
}

/* The scalar sum(y * w), in double. */
static double weighted_sum(const tg_tensor *y, const tg_tensor *w)
{
    tg_tensor *yc = tg__convert(y, TG_FLOAT64);
    if (!yc)
        return NAN;
    const double *py = tg__ptr(yc), *pw = tg__ptr(w);
    double s = 0;
    for (int64_t i = 0, n = tg__numel(y->ndim, y->shape); i < n; i++)
        s += py[i] * pw[i];
    tg_release(yc);
    return s;
}

/* Runs f, backpropagates sum(y * w) and returns, through ys and grads (new
 * references, zeros for an input backward never reached), f's output and
 * the gradient of every float input. The weights come from seed and y's
 * shape, so two calls with equal seeds use equal weights. */
static int analytic(tg_gradcheck_fn f, void *ctx, tg_tensor **x, int n, uint64_t seed,
                    int precision, tg_tensor **ys, tg_tensor **grads)
{
    bool was = tg_set_grad_enabled(true);
    tg__set_backward_observer(count_op, &precision);
    tg_scope_begin();
    int rc = -1;
    tg_tensor *y = call(f, ctx, x, n);
    if (y) {
        tg__ret(y);
        tg_rng *rng = tg_rng_new(seed);
        tg_tensor *w = tg_to_dtype(tg_randn(rng, TG_FLOAT64, y->ndim, y->shape), y->dtype);
        tg_rng_free(rng);
        tg_tensor *loss = tg_sum(tg_mul(y, w), NULL, 0, false);
        rc = !loss ? -1 : loss->requires_grad ? tg_backward(loss, NULL) : 0;
        *ys = tg_retain(y);
    }
    tg_scope_end();
    tg__set_backward_observer(NULL, NULL);
    tg_set_grad_enabled(was);
    for (int i = 0; i < n; i++) {
        grads[i] = NULL;
        if (rc == 0 && tg__is_float(x[i]->dtype))
            grads[i] = x[i]->grad ? tg_retain(x[i]->grad) : tg__empty_like(x[i]);
    }
    return rc;
}

typedef struct {
    double worst_ratio;
    tg_gradcheck_result r;
} tally;

/* Folds one comparison into the tally; NaN on either side always fails. */
static void compare(tally *t, const settings *s, int input, int64_t index, double a, double b)
{
    double err = fabs(a - b), tol = s->atol + s->rtol * fabs(b);
    double ratio = (isnan(a) || isnan(b)) ? INFINITY : err / tol;
    t->r.checked++;
    if (ratio > t->worst_ratio || t->r.checked == 1) {
        t->worst_ratio = ratio;
        t->r.input = input;
        t->r.index = index;
        t->r.analytic = a;
        t->r.numeric = b;
        t->r.error = err;
    }
}

static int finish(tally *t, const char *what, tg_gradcheck_result *result)
{
    t->r.passed = t->worst_ratio <= 1.0;
    snprintf(t->r.message, sizeof t->r.message,
             "%s: %s; worst element %lld of input %d: %.9g vs %.9g (error %.3g, %d compared)",
             what, t->r.passed ? "passed" : "FAILED", (long long)t->r.index, t->r.input,
             t->r.analytic, t->r.numeric, t->r.error, t->r.checked);
    if (result)
        *result = t->r;
    return t->r.passed ? 1 : 0;
}

int tg_gradcheck(tg_gradcheck_fn f, void *ctx, tg_tensor *const *inputs, int n,
                 const tg_gradcheck_options *opts, tg_gradcheck_result *result)
{
    if (result)
        memset(result, 0, sizeof *result);
    if (check_args(__func__, f, inputs, n) < 0)
        return -1;
    settings s = settings_from(opts, 1e-5, 1e-3);
    tg_tensor *x[MAX_INPUTS] = {0}, *grads[MAX_INPUTS] = {0}, *y = NULL, *w = NULL;
    int rc = -1;
    if (copy_inputs(inputs, n, TG_FLOAT64, x) < 0 ||
        analytic(f, ctx, x, n, s.seed, 0, &y, grads) < 0)
        goto out;
    tg_rng *rng = tg_rng_new(s.seed);
    tg_scope_begin();
    w = tg__convert(tg_randn(rng, TG_FLOAT64, y->ndim, y->shape), TG_FLOAT64);
    tg_scope_end();
    tg_rng_free(rng);
    if (!w)
        goto out;
    tally t = {0};
    bool was = tg_set_grad_enabled(false);
    for (int i = 0; i < n && rc != -2; i++) {
        if (!tg__is_float(x[i]->dtype))
            continue;
        double *p = tg__ptr(x[i]);
        const double *g = tg__ptr(grads[i]);
        for (int64_t j = 0, m = tg__numel(x[i]->ndim, x[i]->shape); j < m; j++) {
            /* Read each output before the input changes again: f may return
             * a view of its input. */
            double orig = p[j];
            p[j] = orig + s.eps;
            tg_tensor *yp = call(f, ctx, x, n);
            double fp = yp ? weighted_sum(yp, w) : NAN;
            p[j] = orig - s.eps;
            tg_tensor *ym = call(f, ctx, x, n);
            double fm = ym ? weighted_sum(ym, w) : NAN;
            p[j] = orig;
            tg_release(yp);
            tg_release(ym);
            if (!yp || !ym) {
                rc = -2;
                break;
            }
            compare(&t, &s, i, j, g[j], (fp - fm) / (2 * s.eps));
        }
    }
    tg_set_grad_enabled(was);
    if (rc != -2)
        rc = finish(&t, "tg_gradcheck", result);
out:
    tg_release(w);
    tg_release(y);
    release_all(x, n);
    release_all(grads, n);
    return rc < 0 ? -1 : rc;
}

/* Compares two tensors of one shape element by element. */
static void compare_tensors(tally *t, const settings *s, int input, const tg_tensor *a,
                            const tg_tensor *b)
{
    tg_tensor *ac = tg__convert(a, TG_FLOAT64), *bc = tg__convert(b, TG_FLOAT64);
    if (ac && bc) {
        const double *pa = tg__ptr(ac), *pb = tg__ptr(bc);
        for (int64_t j = 0, m = tg__numel(a->ndim, a->shape); j < m; j++)
            compare(t, s, input, j, pa[j], pb[j]);
    }
    tg_release(ac);
    tg_release(bc);
}

int tg_gradcheck_float32(tg_gradcheck_fn f, void *ctx, tg_tensor *const *inputs, int n,
                         const tg_gradcheck_options *opts, tg_gradcheck_result *result)
{
    if (result)
        memset(result, 0, sizeof *result);
    if (check_args(__func__, f, inputs, n) < 0)
        return -1;
    settings s = settings_from(opts, 1e-4, 1e-3);
    tg_tensor *x32[MAX_INPUTS] = {0}, *x64[MAX_INPUTS] = {0};
    tg_tensor *g32[MAX_INPUTS] = {0}, *g64[MAX_INPUTS] = {0}, *y32 = NULL, *y64 = NULL;
    int rc = -1;
    if (copy_inputs(inputs, n, TG_FLOAT32, x32) < 0 || copy_inputs(inputs, n, TG_FLOAT64, x64) < 0 ||
        analytic(f, ctx, x32, n, s.seed, 1, &y32, g32) < 0 ||
        analytic(f, ctx, x64, n, s.seed, 0, &y64, g64) < 0)
        goto out;
    if (y32->ndim != y64->ndim ||
        memcmp(y32->shape, y64->shape, (size_t)y32->ndim * sizeof y32->shape[0])) {
        tg__fail(TG_ERR_SHAPE, "tg_gradcheck_float32: float32 output %s, float64 output %s",
                 TG_SHAPE_STR(y32), TG_SHAPE_STR(y64));
        goto out;
    }
    tally t = {0};
    compare_tensors(&t, &s, -1, y32, y64); /* input -1: the output itself */
    for (int i = 0; i < n; i++)
        if (g32[i])
            compare_tensors(&t, &s, i, g32[i], g64[i]);
    rc = finish(&t, "tg_gradcheck_float32", result);
out:
    tg_release(y32);
    tg_release(y64);
    release_all(x32, n);
    release_all(x64, n);
    release_all(g32, n);
    release_all(g64, n);
    return rc;
}
