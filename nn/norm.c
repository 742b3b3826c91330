/* nn.LayerNorm: normalises the trailing dims given at construction, with an
 * optional elementwise affine (weight ones, bias zeros, as in PyTorch); and
 * nn.RMSNorm over the last dim, weight ones. The arithmetic is the fused
 * ops tg_layer_norm and tg_rms_norm. */
#include <math.h>
#include <stdlib.h>

#include <tensorgrad/module.h>
#include <tensorgrad/nn.h>

/* A parameter the module owns outright (a private scope keeps an enclosing
 * one from taking the reference), filled with value and requiring grad. */
static tg_tensor *filled_param(tg_dtype dtype, int ndim, const int64_t *shape, double value)
{
    tg_scope_begin();
    tg_tensor *t = tg_retain(tg_full(dtype, ndim, shape, value));
    tg_scope_end();
    if (t && tg_set_requires_grad(t, true) < 0) {
        tg_release(t);
        return NULL;
    }
    return t;
}

static int check_new_args(int ndim, const int64_t *shape, double eps, tg_dtype dtype)
{
    if (ndim < 1 || ndim > TG_MAX_DIMS) {
        tg_fail(TG_ERR_VALUE, "tg_layer_norm_module_new: ndim %d is not in [1, %d]", ndim,
                TG_MAX_DIMS);
        return -1;
    }
    for (int i = 0; i < ndim; i++)
        if (shape[i] <= 0) {
            tg_fail(TG_ERR_VALUE, "tg_layer_norm_module_new: shape %s has a non-positive size",
                    tg_shape_string((char[96]){0}, 96, ndim, shape));
            return -1;
        }
    if (!(eps > 0)) {
        tg_fail(TG_ERR_VALUE, "tg_layer_norm_module_new: eps %g must be positive", eps);
        return -1;
    }
    if (dtype != TG_FLOAT32 && dtype != TG_FLOAT64) {
        tg_fail(TG_ERR_DTYPE, "tg_layer_norm_module_new: dtype %s is not a float dtype",
                tg_dtype_name(dtype));
        return -1;
    }
    return 0;
}

tg_layer_norm_module *tg_layer_norm_module_new(int ndim, const int64_t *shape, double eps,
                                               bool affine, tg_dtype dtype)
{
    TG_CHECK_ARG(shape);
    if (check_new_args(ndim, shape, eps, dtype) < 0)
        return NULL;
    tg_layer_norm_module *m = calloc(1, sizeof *m);
    if (!m)
        return tg_fail(TG_ERR_NOMEM, "tg_layer_norm_module_new: out of memory");
    m->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        m->shape[i] = shape[i];
    m->eps = eps;
    if (affine) {
        bool was = tg_set_grad_enabled(false);
        m->weight = filled_param(dtype, ndim, shape, 1.0);
        m->bias = m->weight ? filled_param(dtype, ndim, shape, 0.0) : NULL;
        tg_set_grad_enabled(was);
        if (!m->bias) {
            tg_layer_norm_module_free(m);
            return NULL;
        }
    }
    return m;
}

/* x [..., *shape] -> the same shape */
tg_tensor *tg_layer_norm_module_forward(const tg_layer_norm_module *m, const tg_tensor *x)
{
    TG_CHECK_ARG(m);
    TG_CHECK_ARG(x);
    bool fits = tg_ndim(x) >= m->ndim;
    for (int i = 0; fits && i < m->ndim; i++)
        fits = tg_shape(x)[tg_ndim(x) - m->ndim + i] == m->shape[i];
    if (!fits)
        return tg_fail(TG_ERR_SHAPE, "tg_layer_norm_module_forward: input %s does not end in %s",
                       TG_SHAPE_STRING(x), tg_shape_string((char[96]){0}, 96, m->ndim, m->shape));
    return tg_layer_norm(x, m->ndim, m->weight, m->bias, m->eps);
}

int tg_layer_norm_module_params(const tg_layer_norm_module *m, const char *prefix, tg_params *ps)
{
    TG_CHECK_ARG_STATUS(m);
    TG_CHECK_ARG_STATUS(ps);
    if (!m->weight && !m->bias)
        return 0;
    if (m->weight && tg_params_add(ps, prefix, "weight", m->weight) < 0)
        return -1;
    if (m->bias && tg_params_add(ps, prefix, "bias", m->bias) < 0) {
        if (m->weight) {
            /* All or nothing: take the weight entry back out. */
            ps->count--;
            free(ps->names[ps->count]);
            tg_release(ps->tensors[ps->count]);
        }
        return -1;
    }
    return 0;
}

void tg_layer_norm_module_free(tg_layer_norm_module *m)
{
    if (!m)
        return;
    tg_release(m->weight);
    tg_release(m->bias);
    free(m);
}

/* ---- RMSNorm ----------------------------------------------------------------- */

tg_rms_norm_module *tg_rms_norm_module_new(int64_t dim, double eps, tg_dtype dtype)
{
    if (dim < 1)
        return tg_fail(TG_ERR_VALUE, "tg_rms_norm_module_new: dim %lld must be at least 1",
                       (long long)dim);
    if (!(eps > 0) || !isfinite(eps))
        return tg_fail(TG_ERR_VALUE, "tg_rms_norm_module_new: eps %g must be positive and finite",
                       eps);
    if (dtype != TG_FLOAT32 && dtype != TG_FLOAT64)
        return tg_fail(TG_ERR_DTYPE, "tg_rms_norm_module_new: dtype %s is not a float dtype",
                       tg_dtype_name(dtype));
    tg_rms_norm_module *m = calloc(1, sizeof *m);
    if (!m)
        return tg_fail(TG_ERR_NOMEM, "tg_rms_norm_module_new: out of memory");
    m->dim = dim;
    m->eps = eps;
    bool was = tg_set_grad_enabled(false);
    m->weight = filled_param(dtype, 1, &dim, 1.0);
    tg_set_grad_enabled(was);
    if (!m->weight) {
        free(m);
        return NULL;
    }
    return m;
}

tg_tensor *tg_rms_norm_module_forward(const tg_rms_norm_module *m, const tg_tensor *x)
{
    TG_CHECK_ARG(m);
    TG_CHECK_ARG(x);
    if (tg_ndim(x) < 1 || tg_shape(x)[tg_ndim(x) - 1] != m->dim)
        return tg_fail(TG_ERR_SHAPE, "tg_rms_norm_module_forward: input %s does not end in [%lld]",
                       TG_SHAPE_STRING(x), (long long)m->dim);
    return tg_rms_norm(x, m->weight, m->eps);
}

int tg_rms_norm_module_params(const tg_rms_norm_module *m, const char *prefix, tg_params *ps)
{
    TG_CHECK_ARG_STATUS(m);
    TG_CHECK_ARG_STATUS(ps);
    return tg_params_add(ps, prefix, "weight", m->weight);
}

void tg_rms_norm_module_free(tg_rms_norm_module *m)
{
    if (!m)
        return;
    tg_release(m->weight);
    free(m);
}
