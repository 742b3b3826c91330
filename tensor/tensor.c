/* Tensor lifetime and geometry: reference counting of tensors and their
 * storage, views over shared storage, and the accessors. The storage
 * itself comes from tensor/storage.c. */
#include "bf16.h"
#include "internal.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static atomic_llong live_tensors;

static TG_TLS bool nomem_pending;

bool tg__take_nomem(void)
{
    bool was = nomem_pending;
    nomem_pending = false;
    return was;
}

int64_t tg_live_tensors(void) { return (int64_t)atomic_load(&live_tensors); }

size_t tg_dtype_size(tg_dtype dtype)
{
    switch (dtype) {
    case TG_FLOAT32: return 4;
    case TG_FLOAT64: return 8;
    case TG_INT64: return 8;
    case TG_BOOL: return 1;
    case TG_BFLOAT16: return 2;
    }
    return 0;
}

const char *tg_dtype_name(tg_dtype dtype)
{
    switch (dtype) {
    case TG_FLOAT32: return "float32";
    case TG_FLOAT64: return "float64";
    case TG_INT64: return "int64";
    case TG_BOOL: return "bool";
    case TG_BFLOAT16: return "bfloat16";
    }
    return "unknown";
}

bool tg__is_float(tg_dtype dtype) { return dtype == TG_FLOAT32 || dtype == TG_FLOAT64; }

bool tg_dtype_is_float(tg_dtype dtype) { return tg__is_float(dtype); }

static bool valid_dtype(tg_dtype dtype) { return tg_dtype_size(dtype) != 0; }

int64_t tg__numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    return n;
}

int tg__check_shape(const char *fn, int ndim, const int64_t *shape)
{
    if (ndim < 0 || ndim > TG_MAX_DIMS) {
        tg__fail(TG_ERR_SHAPE, "%s: ndim %d is outside [0, %d]", fn, ndim, TG_MAX_DIMS);
        return -1;
    }
    if (ndim > 0 && !shape) {
        tg__fail(TG_ERR_NULL, "%s: shape is NULL for ndim %d", fn, ndim);
        return -1;
    }
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) {
            tg__fail(TG_ERR_SHAPE, "%s: negative size %lld in dim %d of %s", fn,
                     (long long)shape[i], i, tg__shape_str((char[96]){0}, 96, ndim, shape));
            return -1;
        }
        /* Keep every byte count and stride representable: the product of
         * the non-zero sizes is at most 2^56, even when a 0 empties the
         * tensor (strides multiply the other sizes all the same). */
        if (shape[i] > 0 && n > (INT64_C(1) << 56) / shape[i]) {
            tg__fail(TG_ERR_NOMEM, "%s: shape %s has too many elements", fn,
                     tg__shape_str((char[96]){0}, 96, ndim, shape));
            return -1;
        }
        if (shape[i] > 0)
            n *= shape[i];
    }
    return 0;
}

int tg__wrap_dim(const char *fn, int dim, int ndim)
{
    int n = ndim > 0 ? ndim : 1;
    if (dim < -n || dim >= n) {
        tg__fail(TG_ERR_DIM, "%s: dim %d is out of range for a %d-dim tensor", fn, dim, ndim);
        return -1;
    }
    return dim < 0 ? dim + n : dim;
}

int tg__check_float(const char *fn, const tg_tensor *t)
{
    if (t->refcount <= 0) { /* the ops' common check: refuse a released input too */
        tg__report_released(fn, NULL, t, &(tg__site){.addr = __builtin_return_address(0)});
        return -1;
    }
    if (tg__is_float(t->dtype))
        return 0;
    tg__fail(TG_ERR_DTYPE, "%s: expected float32 or float64, got %s", fn, tg_dtype_name(t->dtype));
    return -1;
}

static tg_tensor *new_header(tg_storage *storage, tg_dtype dtype)
{
    tg_tensor *t = tg__small_alloc(sizeof *t);
    if (!t)
        return tg__fail(TG_ERR_NOMEM, "tensorgrad: out of memory for a tensor header");
    t->refcount = 1;
    t->storage = storage;
    storage->refcount++;
    t->dtype = dtype;
    atomic_fetch_add(&live_tensors, 1);
    return t;
}

void tg__contiguous_strides(int ndim, const int64_t *shape, int64_t *stride)
{
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        stride[i] = s;
        s *= shape[i];
    }
}

static void set_contiguous_strides(tg_tensor *t)
{
    tg__contiguous_strides(t->ndim, t->shape, t->stride);
}

static tg_tensor *new_tensor(tg_dtype dtype, int ndim, const int64_t *shape, bool zero)
{
    /* Ops pass shapes they computed, so what can fail is the size: the graph
     * rewords "tensorgrad:" with the op's name. */
    if (tg__check_shape("tensorgrad", ndim, shape) < 0) {
        nomem_pending = true;
        return NULL;
    }
    int64_t n = tg__numel(ndim, shape);
    size_t nbytes = (size_t)n * tg_dtype_size(dtype);
    /* Keep one byte for an empty tensor so that data is never NULL. */
    tg_storage *s = tg__storage_new(nbytes ? nbytes : 1, zero);
    if (!s) {
        nomem_pending = true;
        return tg__fail(TG_ERR_NOMEM, "tensorgrad: out of memory for %lld elements of %s %s",
                        (long long)n, tg_dtype_name(dtype),
                        tg__shape_str((char[96]){0}, 96, ndim, shape));
    }
    s->nbytes = nbytes;
    tg_tensor *t = new_header(s, dtype); /* holds the storage's only reference */
    if (!t) {
        nomem_pending = true;
        tg__storage_free(s);
        return NULL;
    }
    t->ndim = ndim;
    if (ndim)
        memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    set_contiguous_strides(t);
    return t;
}

tg_tensor *tg__empty(tg_dtype dtype, int ndim, const int64_t *shape)
{
    return new_tensor(dtype, ndim, shape, true);
}

tg_tensor *tg__empty_uninit(tg_dtype dtype, int ndim, const int64_t *shape)
{
    return new_tensor(dtype, ndim, shape, false);
}

tg_tensor *tg__empty_uninit_like(const tg_tensor *t)
{
    return tg__empty_uninit(t->dtype, t->ndim, t->shape);
}

tg_tensor *tg__empty_like(const tg_tensor *t)
{
    return tg__empty(t->dtype, t->ndim, t->shape);
}

tg_tensor *tg__view(const tg_tensor *t, int ndim, const int64_t *shape,
                    const int64_t *stride, int64_t offset)
{
    tg_tensor *v = new_header(t->storage, t->dtype);
    if (!v)
        return NULL;
    v->ndim = ndim;
    if (ndim) {
        memcpy(v->shape, shape, (size_t)ndim * sizeof *shape);
        memcpy(v->stride, stride, (size_t)ndim * sizeof *stride);
    }
    v->offset = offset;
    return v;
}

tg_tensor *tg__husk(const tg_tensor *t)
{
    tg_tensor *h = tg__small_alloc(sizeof *h);
    if (!h)
        return NULL;
    *h = (tg_tensor){.refcount = 1, .offset = t->offset, .ndim = t->ndim, .dtype = t->dtype,
                     .requires_grad = t->requires_grad, .node = t->node};
    memcpy(h->shape, t->shape, sizeof h->shape);
    memcpy(h->stride, t->stride, sizeof h->stride);
    if (h->node)
        tg__owner_retain(h->node);
    atomic_fetch_add(&live_tensors, 1);
    return h;
}

tg_tensor *tg__alias(const tg_tensor *t)
{
    return tg__view(t, t->ndim, t->shape, t->stride, t->offset);
}

tg_tensor *tg_retain(const tg_tensor *t)
{
    tg_tensor *m = (tg_tensor *)t;
    if (m && m->refcount <= 0) {
        tg__report_released(__func__, "tensor", m,
                            &(tg__site){.addr = __builtin_return_address(0)});
        return NULL;
    }
    if (m)
        m->refcount++;
    return m;
}

void tg__release_at_site(tg_tensor *t, const tg__site *site)
{
    if (!t)
        return;
    if (t->refcount <= 0) { /* released before: the count must not go lower */
        tg__report_released("tg_release", "tensor", t, site);
        return;
    }
    if (--t->refcount > 0)
        return;
    tg__owner_release(t->node);
    tg_release(t->grad);
    tg_release(t->bf16_copy);
    if (t->storage && --t->storage->refcount == 0) /* a husk has none */
        tg__storage_free(t->storage);
    atomic_fetch_sub(&live_tensors, 1);
    if (tg__checked_on)
        tg__quarantine(t, site);
    else
        tg__small_free(t, sizeof *t);
}

#undef tg_release /* tensor.h's checked-mode macro, should the build define it */
void tg_release(tg_tensor *t)
{
    tg__release_at_site(t, &(tg__site){.addr = __builtin_return_address(0)});
}

void tg_release_at(tg_tensor *t, const char *file, int line)
{
    tg__release_at_site(t, &(tg__site){.addr = __builtin_return_address(0), .file = file,
                                       .line = line});
}

bool tg_is_contiguous(const tg_tensor *t)
{
    if (!t)
        return false;
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->stride[i] != s)
            return false;
        s *= t->shape[i];
    }
    return true;
}

#define COPY_ROW(T)                                                           \
    do {                                                                      \
        T *to = (T *)d + it.off[0];                                           \
        const T *from = (const T *)s + it.off[1];                             \
        for (int64_t j = 0; j < it.len; j++)                                  \
            to[j * it.inner[0]] = from[j * it.inner[1]];                      \
    } while (0)

static void copy_serial(tg_tensor *dst, const tg_tensor *src);

/* t's indices [i0, i0 + len) along dim d, as a header on the stack (no
 * reference taken). */
static tg_tensor slab_of(const tg_tensor *t, int d, int64_t i0, int64_t len)
{
    tg_tensor v = *t;
    v.offset += i0 * t->stride[d];
    v.shape[d] = len;
    return v;
}

void tg__copy(tg_tensor *dst, const tg_tensor *src)
{
    /* a large copy goes to the team in slabs along its first dim of two or
     * more (on one thread, while the other core waits, the copies cost a
     * small model several % of its step) */
    enum { SLABS = 8 };
    int d = 0;
    while (d < src->ndim && src->shape[d] < 2)
        d++;
    int64_t n = tg__numel(src->ndim, src->shape);
    if (n > 4 * TG_PAR_MIN && d < src->ndim) {
        int64_t size = src->shape[d], slabs = size < SLABS ? size : SLABS;
#pragma omp parallel for schedule(static)
        for (int64_t k = 0; k < slabs; k++) {
            int64_t i0 = size * k / slabs, len = size * (k + 1) / slabs - i0;
            tg_tensor ds = slab_of(dst, d, i0, len), ss = slab_of(src, d, i0, len);
            copy_serial(&ds, &ss);
        }
        return;
    }
    copy_serial(dst, src);
}

static void copy_serial(tg_tensor *dst, const tg_tensor *src)
{
    int64_t strides[2][TG_MAX_DIMS];
    memcpy(strides[0], dst->stride, sizeof strides[0]);
    memcpy(strides[1], src->stride, sizeof strides[1]);
    tg__iter it;
    tg__iter_init(&it, src->ndim, src->shape, 2, (const int64_t(*)[TG_MAX_DIMS])strides);
    if (!it.len)
        return;
    char *d = tg__ptr(dst);
    const char *s = tg__ptr(src);
    size_t ds = tg_dtype_size(dst->dtype), ss = tg_dtype_size(src->dtype);
    if (dst->dtype == src->dtype) {
        if (tg_is_contiguous(dst) && tg_is_contiguous(src)) {
            memcpy(d, s, (size_t)tg__numel(src->ndim, src->shape) * ds);
            return;
        }
        do {
            if (it.inner[0] == 1 && it.inner[1] == 1) {
                memcpy(d + it.off[0] * ds, s + it.off[1] * ss, (size_t)it.len * ds);
                continue;
            }
            /* strided rows (a transpose, say): typed loads, not a memcpy call each */
            if (ds == 4)
                COPY_ROW(uint32_t);
            else if (ds == 2)
                COPY_ROW(uint16_t);
            else if (ds == 8)
                COPY_ROW(uint64_t);
            else
                COPY_ROW(uint8_t);
        } while (tg__iter_next(&it));
        return;
    }
    do {
        for (int64_t j = 0; j < it.len; j++) {
            const char *from = s + (it.off[1] + j * it.inner[1]) * ss;
            char *to = d + (it.off[0] + j * it.inner[0]) * ds;
            double v = 0;
            switch (src->dtype) {
            case TG_FLOAT32: v = *(const float *)from; break;
            case TG_FLOAT64: v = *(const double *)from; break;
            case TG_INT64: v = (double)*(const int64_t *)from; break;
            case TG_BOOL: v = *(const bool *)from; break;
            case TG_BFLOAT16: v = tg__f32_from_bf16(*(const uint16_t *)from); break;
            }
            switch (dst->dtype) {
            case TG_FLOAT32: *(float *)to = (float)v; break;
            case TG_FLOAT64: *(double *)to = v; break;
            case TG_INT64: *(int64_t *)to = (int64_t)v; break;
            case TG_BOOL: *(bool *)to = v != 0; break;
            /* through float32: exact from float32, the case that matters */
            case TG_BFLOAT16: *(uint16_t *)to = tg__bf16_from_f32((float)v); break;
            }
        }
    } while (tg__iter_next(&it));
}

tg_tensor *tg__convert(const tg_tensor *t, tg_dtype dtype)
{
    tg_tensor *out = tg__empty_uninit(dtype, t->ndim, t->shape);
    if (out)
        tg__copy(out, t);
    return out;
}

tg_tensor *tg__contiguous(const tg_tensor *t)
{
    if (tg_is_contiguous(t))
        return tg_retain(t);
    return tg__convert(t, t->dtype);
}

/* ---- accessors ---------------------------------------------------------- */

#define NULL_GUARD(t, value)                                                  \
    do {                                                                      \
        if (!(t)) {                                                           \
            tg__fail(TG_ERR_NULL, "%s: tensor is NULL", __func__);            \
            return value;                                                     \
        }                                                                     \
        if (TG__DEAD(t)) {                                                    \
            tg__report_released(__func__, "tensor", (const void *)(t),        \
                                &(tg__site){.addr = __builtin_return_address(0)}); \
            return value;                                                     \
        }                                                                     \
    } while (0)

int tg_ndim(const tg_tensor *t)
{
    NULL_GUARD(t, -1);
    return t->ndim;
}

int64_t tg_size(const tg_tensor *t, int d)
{
    NULL_GUARD(t, -1);
    if (t->ndim == 0 || d < -t->ndim || d >= t->ndim) {
        tg__fail(TG_ERR_DIM, "%s: dim %d is out of range for a %d-dim tensor", __func__, d,
                 t->ndim);
        return -1;
    }
    return t->shape[d < 0 ? d + t->ndim : d];
}

const int64_t *tg_shape(const tg_tensor *t)
{
    NULL_GUARD(t, NULL);
    return t->shape;
}

const int64_t *tg_strides(const tg_tensor *t)
{
    NULL_GUARD(t, NULL);
    return t->stride;
}

int64_t tg_numel(const tg_tensor *t)
{
    NULL_GUARD(t, -1);
    return tg__numel(t->ndim, t->shape);
}

tg_dtype tg_dtype_of(const tg_tensor *t)
{
    NULL_GUARD(t, TG_FLOAT32);
    return t->dtype;
}

bool tg_shares_storage(const tg_tensor *a, const tg_tensor *b)
{
    return a && b && a->storage == b->storage;
}

static double read_element(const tg_tensor *t, int64_t offset)
{
    const char *p = (const char *)t->storage->data + (size_t)offset * tg_dtype_size(t->dtype);
    switch (t->dtype) {
    case TG_FLOAT32: return *(const float *)p;
    case TG_FLOAT64: return *(const double *)p;
    case TG_INT64: return (double)*(const int64_t *)p;
    case TG_BOOL: return *(const bool *)p;
    case TG_BFLOAT16: return tg__f32_from_bf16(*(const uint16_t *)p);
    }
    return NAN;
}

double tg_item(const tg_tensor *t)
{
    NULL_GUARD(t, NAN);
    if (tg__numel(t->ndim, t->shape) != 1) {
        tg__fail(TG_ERR_SHAPE, "%s: expected one element, got shape %s", __func__,
                 TG_SHAPE_STR(t));
        return NAN;
    }
    return read_element(t, t->offset);
}

double tg_get(const tg_tensor *t, const int64_t *index)
{
    NULL_GUARD(t, NAN);
    if (t->ndim && !index) {
        tg__fail(TG_ERR_NULL, "%s: index is NULL", __func__);
        return NAN;
    }
    int64_t off = t->offset;
    for (int i = 0; i < t->ndim; i++) {
        if (index[i] < 0 || index[i] >= t->shape[i]) {
            tg__fail(TG_ERR_INDEX, "%s: index %lld is out of range for dim %d of shape %s",
                     __func__, (long long)index[i], i, TG_SHAPE_STR(t));
            return NAN;
        }
        off += index[i] * t->stride[i];
    }
    return read_element(t, off);
}

static void *data_of(const char *fn, const tg_tensor *t)
{
    if (!tg_is_contiguous(t))
        return tg__fail(TG_ERR_STATE, "%s: tensor of shape %s is not contiguous", fn,
                        TG_SHAPE_STR(t));
    return tg__ptr(t);
}

void *tg_data(const tg_tensor *t)
{
    NULL_GUARD(t, NULL);
    void *p = data_of(__func__, t);
    if (p) /* the caller may write: a graph that kept t must know */
        tg__bump_version(t);
    return p;
}

const void *tg_data_const(const tg_tensor *t)
{
    NULL_GUARD(t, NULL);
    return data_of(__func__, t);
}

int tg_copy_to(const tg_tensor *t, tg_dtype dtype, void *out, int64_t capacity)
{
    NULL_GUARD(t, -1);
    NULL_GUARD(out, -1);
    if (!valid_dtype(dtype)) {
        tg__fail(TG_ERR_DTYPE, "%s: unknown dtype %d", __func__, (int)dtype);
        return -1;
    }
    int64_t n = tg__numel(t->ndim, t->shape);
    if (capacity < n) {
        tg__fail(TG_ERR_VALUE, "%s: buffer holds %lld elements, tensor %s has %lld", __func__,
                 (long long)capacity, TG_SHAPE_STR(t), (long long)n);
        return -1;
    }
    tg_storage s = {.refcount = 1, .data = out, .nbytes = (size_t)n * tg_dtype_size(dtype)};
    tg_tensor dst = {.refcount = 1, .storage = &s, .ndim = t->ndim, .dtype = dtype};
    memcpy(dst.shape, t->shape, sizeof dst.shape);
    set_contiguous_strides(&dst);
    tg__copy(&dst, t);
    return 0;
}
