/* The public optimizer loops of module.h (tg_update_params, tg_sum_squares,
 * tg_scale_in_place): PyTorch 1.13's single-tensor formulas in the parameter's
 * own dtype, the contiguous float32 Adam(W) vectorised and shared out to the
 * OpenMP team; every argument checked once, before the loops. */
#include <stdio.h>
#include <string.h>

#include <tensorgrad/module.h>

#include "internal.h"
#include "fastmath.h"
#include "tg_config.h"

#if TG_HAVE_OPENMP
#include <omp.h>
#define TG_THREAD_NUM() omp_get_thread_num()
#define TG_NUM_THREADS() omp_get_num_threads()
#else
#define TG_THREAD_NUM() 0
#define TG_NUM_THREADS() 1
#endif

typedef tg_update_coefs coefs;

/* Operands of the iterator: 0 param, 1 grad, 2 m, 3 v (element offsets).
 * Each line mirrors one PyTorch tensor op, in its order of rounding. */

#define DEFINE_KERNELS(T, SQRT)                                                    \
    static void sgd_##T(T *p, const T *g, T *buf, tg__iter *it, const coefs *c)     \
    {                                                                              \
        const T l2 = (T)c->l2, mom = (T)c->momentum, neg_lr = (T)-c->lr;           \
        do {                                                                       \
            for (int64_t j = 0; j < it->len; j++) {                                \
                T *pj = p + it->off[0] + j * it->inner[0];                         \
                T d = g[it->off[1] + j * it->inner[1]];                            \
                if (c->l2 != 0)                                                    \
                    d = d + l2 * *pj;             /* grad.add(param, alpha=wd) */  \
                if (buf) {                                                         \
                    T *bj = buf + it->off[2] + j * it->inner[2];                   \
                    *bj = c->first ? d : *bj * mom + d;                            \
                    d = *bj;                                                       \
                }                                                                  \
                *pj = *pj + neg_lr * d;           /* param.add_(d, alpha=-lr) */   \
            }                                                                      \
        } while (tg__iter_next(it));                                               \
    }                                                                              \
                                                                                   \
    static void adam_##T(T *p, const T *g, T *m, T *v, tg__iter *it, const coefs *c) \
    {                                                                              \
        const T l2 = (T)c->l2, decay = (T)c->decay, b1 = (T)c->beta1,              \
                omb1 = (T)(1 - c->beta1), b2 = (T)c->beta2, omb2 = (T)(1 - c->beta2), \
                bc2 = (T)c->bc2_sqrt, eps = (T)c->eps, neg_step = (T)-c->step_size; \
        do {                                                                       \
            for (int64_t j = 0; j < it->len; j++) {                                \
                T *pj = p + it->off[0] + j * it->inner[0];                         \
                T *mj = m + it->off[2] + j * it->inner[2];                         \
                T *vj = v + it->off[3] + j * it->inner[3];                         \
                T gj = g[it->off[1] + j * it->inner[1]];                           \
                *pj = *pj * decay;                /* AdamW: param.mul_(1-lr*wd) */ \
                if (c->l2 != 0)                                                    \
                    gj = gj + l2 * *pj;                                            \
                *mj = *mj * b1 + omb1 * gj;                                        \
                *vj = *vj * b2 + omb2 * gj * gj;  /* addcmul_(g, g, 1-b2) */       \
                T denom = SQRT(*vj) / bc2 + eps;                                   \
                *pj = *pj + neg_step * *mj / denom; /* addcdiv_(m, denom) */       \
            }                                                                      \
        } while (tg__iter_next(it));                                               \
    }

DEFINE_KERNELS(float, sqrtf)
DEFINE_KERNELS(double, sqrt)

/* Adam(W) on contiguous float32 parameter and gradient: the same formula
 * as adam_float in the same order, on flat arrays so that it vectorises,
 * in blocks shared out to the OpenMP team. Each element's update is its own,
 * so any thread count gives the same result. */
TG_VECTOR_CLONES
static void adam_block_f32(float *restrict p, const float *restrict g, float *restrict m,
                           float *restrict v, int64_t n, const coefs *c)
{
    const float l2 = (float)c->l2, decay = (float)c->decay, b1 = (float)c->beta1,
                omb1 = (float)(1 - c->beta1), b2 = (float)c->beta2, omb2 = (float)(1 - c->beta2),
                bc2 = (float)c->bc2_sqrt, eps = (float)c->eps, neg_step = (float)-c->step_size;
    for (int64_t j = 0; j < n; j++) {
        float pj = p[j] * decay, gj = g[j];
        if (c->l2 != 0)
            gj = gj + l2 * pj;
        float mj = m[j] * b1 + omb1 * gj;
        float vj = v[j] * b2 + omb2 * gj * gj;
        m[j] = mj;
        v[j] = vj;
        float denom = sqrtf(vj) / bc2 + eps;
        p[j] = pj + neg_step * mj / denom;
    }
}

static void adam_flat_f32(float *p, const float *g, float *m, float *v, int64_t n,
                          const coefs *c)
{
    TG_FOR_BLOCKS(n, lo, len, adam_block_f32(p + lo, g + lo, m + lo, v + lo, len, c));
}

/* True when job takes the flat float32 Adam(W) kernel. */
static bool flat_adam(const tg_param_update *job)
{
    const tg_tensor *p = job->param;
    return job->rule == TG_UPDATE_ADAM && p->dtype == TG_FLOAT32 && tg_is_contiguous(p) &&
           tg_is_contiguous(job->grad);
}

/* Updates one parameter with the kernel of its kind and dtype. */
static void update_one(const tg_param_update *job)
{
    const tg_tensor *p = job->param, *g = job->grad;
    const coefs c = job->c;
    int64_t strides[4][TG_MAX_DIMS];
    memcpy(strides[0], p->stride, sizeof strides[0]);
    memcpy(strides[1], g->stride, sizeof strides[1]);
    tg__contiguous_strides(p->ndim, p->shape, strides[2]);
    memcpy(strides[3], strides[2], sizeof strides[3]);
    tg__iter it;
    tg__iter_init(&it, p->ndim, p->shape, 4, (const int64_t(*)[TG_MAX_DIMS])strides);
    if (!it.len)
        return;
    bool f32 = p->dtype == TG_FLOAT32, sgd = job->rule == TG_UPDATE_SGD;
    if (sgd && f32)
        sgd_float(tg__ptr(p), tg__ptr(g), job->m ? tg__ptr(job->m) : NULL, &it, &c);
    else if (sgd)
        sgd_double(tg__ptr(p), tg__ptr(g), job->m ? tg__ptr(job->m) : NULL, &it, &c);
    else if (flat_adam(job))
        adam_flat_f32(tg__ptr(p), tg__ptr(g), tg__ptr(job->m), tg__ptr(job->v),
                      tg__numel(p->ndim, p->shape), &c);
    else if (f32)
        adam_float(tg__ptr(p), tg__ptr(g), tg__ptr(job->m), tg__ptr(job->v), &it, &c);
    else
        adam_double(tg__ptr(p), tg__ptr(g), tg__ptr(job->m), tg__ptr(job->v), &it, &c);
}

/* The spans of TG_PAR_MIN elements of every job that takes the flat
 * float32 Adam(W) kernel, numbered in job order; span j goes to thread
 * j % threads, so one parallel loop covers them all without a list: a
 * model of many small tensors would otherwise update most of them on one
 * thread, one team start per tensor. Each element's update is its own, so
 * the result is the same on any thread count. */
static int64_t flat_spans(const tg_param_update *jobs, int n)
{
    int64_t count = 0;
    for (int i = 0; i < n; i++)
        if (flat_adam(&jobs[i]))
            count += (tg_numel(jobs[i].param) + TG_PAR_MIN - 1) / TG_PAR_MIN;
    return count;
}

static void update_flat_spans(const tg_param_update *jobs, int count, int thread, int threads)
{
    int64_t j = 0;
    for (int i = 0; i < count; i++) {
        const tg_param_update *job = &jobs[i];
        if (!flat_adam(job))
            continue;
        const coefs c = job->c;
        float *p = tg__ptr(job->param), *m = tg__ptr(job->m), *v = tg__ptr(job->v);
        const float *g = tg__ptr(job->grad);
        int64_t n = tg_numel(job->param);
        for (int64_t lo = 0; lo < n; lo += TG_PAR_MIN, j++)
            if (j % threads == thread)
                adam_block_f32(p + lo, g + lo, m + lo, v + lo,
                               n - lo < TG_PAR_MIN ? n - lo : TG_PAR_MIN, &c);
    }
}

static void update_flat_together(const tg_param_update *jobs, int n)
{
    if (flat_spans(jobs, n) > 1) {
#pragma omp parallel
        update_flat_spans(jobs, n, TG_THREAD_NUM(), TG_NUM_THREADS());
    } else {
        update_flat_spans(jobs, n, 0, 1);
    }
}

/* ---- checks and entry points ------------------------------------------------------ */

/* Checks updates[i].<what> (t) against param p: present and alive, p's
 * dtype and shape, contiguous when it is a state (m or v). */
static int check_operand(const tg_tensor *t, const tg_tensor *p, int i, const char *what,
                         const void *caller)
{
    const char *fn = "tg_update_params";
    char name[48];
    snprintf(name, sizeof name, "updates[%d].%s", i, what);
    if (tg_check_arg(t, true, fn, name, caller) < 0)
        return -1;
    if (t->dtype != p->dtype) {
        tg__fail(TG_ERR_DTYPE, "%s: %s is %s, the param %s", fn, name, tg_dtype_name(t->dtype),
                 tg_dtype_name(p->dtype));
        return -1;
    }
    if (t->ndim != p->ndim || memcmp(t->shape, p->shape, (size_t)p->ndim * sizeof *p->shape)) {
        tg__fail(TG_ERR_SHAPE, "%s: %s has shape %s, the param %s", fn, name, TG_SHAPE_STR(t),
                 TG_SHAPE_STR(p));
        return -1;
    }
    if (what[0] != 'g' && !tg_is_contiguous(t)) {
        tg__fail(TG_ERR_SHAPE, "%s: %s (shape %s, strides %s) is not contiguous", fn, name,
                 TG_SHAPE_STR(t), tg__shape_str((char[96]){0}, 96, t->ndim, t->stride));
        return -1;
    }
    return 0;
}

/* Checks update i before anything is written: what the kernels trust. */
static int check_update(const tg_param_update *u, int i, const void *caller)
{
    const char *fn = "tg_update_params";
    char name[48];
    snprintf(name, sizeof name, "updates[%d].param", i);
    if (tg_check_arg(u->param, true, fn, name, caller) < 0)
        return -1;
    const tg_tensor *p = u->param;
    if (p->dtype != TG_FLOAT32 && p->dtype != TG_FLOAT64) {
        tg__fail(TG_ERR_DTYPE, "%s: %s is %s; updates take float32 or float64", fn, name,
                 tg_dtype_name(p->dtype));
        return -1;
    }
    if (u->rule != TG_UPDATE_SGD && u->rule != TG_UPDATE_ADAM) {
        tg__fail(TG_ERR_VALUE, "%s: updates[%d].rule is %d, not TG_UPDATE_SGD or "
                 "TG_UPDATE_ADAM", fn, i, (int)u->rule);
        return -1;
    }
    if (u->rule == TG_UPDATE_SGD && !u->m && u->c.momentum != 0) {
        tg__fail(TG_ERR_VALUE, "%s: updates[%d] has momentum %g but no buffer m", fn, i,
                 u->c.momentum);
        return -1;
    }
    if (check_operand(u->grad, p, i, "grad", caller) < 0)
        return -1;
    if ((u->rule == TG_UPDATE_ADAM || u->m) && check_operand(u->m, p, i, "m", caller) < 0)
        return -1;
    if (u->rule == TG_UPDATE_ADAM && check_operand(u->v, p, i, "v", caller) < 0)
        return -1;
    return 0;
}

int tg_update_params(const tg_param_update *updates, int n)
{
    const void *caller = TG__CALLER;
    if (tg_check_arg(updates, false, __func__, "updates", caller) < 0)
        return -1;
    if (n < 0) {
        tg__fail(TG_ERR_VALUE, "%s: n is %d; need n >= 0", __func__, n);
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (check_update(&updates[i], i, caller) < 0)
            return -1;
    update_flat_together(updates, n);
    for (int i = 0; i < n; i++)
        if (!flat_adam(&updates[i]))
            update_one(&updates[i]);
    for (int i = 0; i < n; i++)
        tg__bump_version(updates[i].param);
    return 0;
}

/* A float tensor argument of fn: present, alive, float32 or float64. */
static int check_float(const tg_tensor *t, const char *fn, const void *caller)
{
    if (tg_check_arg(t, true, fn, "t", caller) < 0)
        return -1;
    if (t->dtype != TG_FLOAT32 && t->dtype != TG_FLOAT64) {
        tg__fail(TG_ERR_DTYPE, "%s: t is %s %s; need float32 or float64", fn,
                 tg_dtype_name(t->dtype), TG_SHAPE_STR(t));
        return -1;
    }
    return 0;
}

double tg_sum_squares(const tg_tensor *t)
{
    if (check_float(t, __func__, TG__CALLER) < 0)
        return -1;
    tg__iter it;
    tg__iter_init(&it, t->ndim, t->shape, 1, (const int64_t(*)[TG_MAX_DIMS])&t->stride);
    double acc = 0;
    if (!it.len)
        return 0;
    do {
        for (int64_t j = 0; j < it.len; j++) {
            int64_t k = it.off[0] + j * it.inner[0];
            double x = t->dtype == TG_FLOAT32 ? ((const float *)tg__ptr(t))[k]
                                              : ((const double *)tg__ptr(t))[k];
            acc += x * x;
        }
    } while (tg__iter_next(&it));
    return acc;
}

int tg_scale_in_place(tg_tensor *t, double coef)
{
    if (check_float(t, __func__, TG__CALLER) < 0)
        return -1;
    tg__iter it;
    tg__iter_init(&it, t->ndim, t->shape, 1, (const int64_t(*)[TG_MAX_DIMS])&t->stride);
    if (!it.len)
        return 0;
    float cf = (float)coef;
    tg__bump_version(t);
    do {
        for (int64_t j = 0; j < it.len; j++) {
            int64_t k = it.off[0] + j * it.inner[0];
            if (t->dtype == TG_FLOAT32)
                ((float *)tg__ptr(t))[k] *= cf;
            else
                ((double *)tg__ptr(t))[k] *= coef;
        }
    } while (tg__iter_next(&it));
    return 0;
}
