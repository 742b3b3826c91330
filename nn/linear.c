/* nn.Linear: y = x @ weight^T + bias over the last dim of x, with PyTorch's
 * default initialisation (kaiming_uniform with a = sqrt(5), which comes down
 * to U(-1/sqrt(in), 1/sqrt(in)) for weight and bias alike). */
#include <math.h>
#include <stdlib.h>

#include <tensorgrad/module.h>
#include <tensorgrad/nn.h>

/* Draws U(-bound, bound) of shape as a leaf the caller owns outright: the
 * private scope keeps an enclosing scope from taking the reference. */
static tg_tensor *draw_param(tg_rng *rng, tg_dtype dtype, int ndim, const int64_t *shape,
                             double bound)
{
    tg_scope_begin();
    tg_tensor *t = tg_retain(tg_uniform(rng, dtype, ndim, shape, -bound, bound));
    tg_scope_end();
    if (t && tg_set_requires_grad(t, true) < 0) {
        tg_release(t);
        return NULL;
    }
    return t;
}

tg_linear *tg_linear_new(int64_t in_features, int64_t out_features, bool bias, tg_dtype dtype,
                         tg_rng *rng)
{
    TG_CHECK_ARG(rng);
    if (in_features <= 0 || out_features <= 0)
        return tg_fail(TG_ERR_VALUE, "tg_linear_new: in_features %lld and out_features %lld "
                       "must be positive", (long long)in_features, (long long)out_features);
    if (dtype != TG_FLOAT32 && dtype != TG_FLOAT64)
        return tg_fail(TG_ERR_DTYPE, "tg_linear_new: dtype %s is not a float dtype",
                       tg_dtype_name(dtype));
    tg_linear *m = calloc(1, sizeof *m);
    if (!m)
        return tg_fail(TG_ERR_NOMEM, "tg_linear_new: out of memory");
    m->in_features = in_features;
    m->out_features = out_features;
    double bound = 1.0 / sqrt((double)in_features);
    bool was = tg_set_grad_enabled(false);
    /* PyTorch's order: weight [out, in] first, then bias [out]. */
    m->weight = draw_param(rng, dtype, 2, (int64_t[]){out_features, in_features}, bound);
    if (m->weight && bias)
        m->bias = draw_param(rng, dtype, 1, (int64_t[]){out_features}, bound);
    tg_set_grad_enabled(was);
    if (!m->weight || (bias && !m->bias)) {
        tg_linear_free(m);
        return NULL;
    }
    return m;
}

/* The module's own tensors must agree with its sizes: a struct built by
 * hand (as the gradient check does) is checked like one from _new. */
static int check_module(const tg_linear *m)
{
    const tg_tensor *w = m->weight, *b = m->bias;
    if (tg_ndim(w) != 2 || tg_shape(w)[0] != m->out_features ||
        tg_shape(w)[1] != m->in_features) {
        tg_fail(TG_ERR_SHAPE, "tg_linear_forward: weight %s is not [out_features %lld, "
                "in_features %lld]", TG_SHAPE_STRING(w), (long long)m->out_features,
                (long long)m->in_features);
        return -1;
    }
    if (b && (tg_ndim(b) != 1 || tg_shape(b)[0] != m->out_features)) {
        tg_fail(TG_ERR_SHAPE, "tg_linear_forward: bias %s is not [out_features %lld]",
                TG_SHAPE_STRING(b), (long long)m->out_features);
        return -1;
    }
    return 0;
}

/* x [..., in] -> [..., out] */
tg_tensor *tg_linear_forward(const tg_linear *m, const tg_tensor *x)
{
    TG_CHECK_ARG(m);
    TG_CHECK_ARG(m->weight);
    TG_CHECK_ARG(x);
    if (check_module(m) < 0)
        return NULL;
    if (tg_ndim(x) == 0 || tg_shape(x)[tg_ndim(x) - 1] != m->in_features)
        return tg_fail(TG_ERR_SHAPE, "tg_linear_forward: input %s does not end in in_features %lld",
                       TG_SHAPE_STRING(x), (long long)m->in_features);
    if (tg_dtype_of(x) != tg_dtype_of(m->weight))
        return tg_fail(TG_ERR_DTYPE, "tg_linear_forward: input dtype %s differs from weight "
                       "dtype %s", tg_dtype_name(tg_dtype_of(x)),
                       tg_dtype_name(tg_dtype_of(m->weight)));
    return tg_affine(x, m->weight, m->bias);
}

int tg_linear_params(const tg_linear *m, const char *prefix, tg_params *ps)
{
    TG_CHECK_ARG_STATUS(m);
    TG_CHECK_ARG_STATUS(ps);
    if (tg_params_add(ps, prefix, "weight", m->weight) < 0)
        return -1;
    if (m->bias && tg_params_add(ps, prefix, "bias", m->bias) < 0) {
        /* All or nothing: take the weight entry back out. */
        ps->count--;
        free(ps->names[ps->count]);
        tg_release(ps->tensors[ps->count]);
        return -1;
    }
    return 0;
}

void tg_linear_free(tg_linear *m)
{
    if (!m)
        return;
    tg_release(m->weight);
    tg_release(m->bias);
    free(m);
}
