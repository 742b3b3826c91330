/* Printing tensors the way PyTorch 1.13's repr does: one number format for
 * all elements (integer-valued, fixed or scientific), right-aligned columns,
 * nested brackets, and the middle of large dims elided with "...". */
#include "bf16.h"
#include "internal.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* PyTorch's default print options. */
enum { LINE_WIDTH = 80, EDGE_ITEMS = 3, THRESHOLD = 1000, PRECISION = 4 };

/* ---- a growing string ---------------------------------------------------- */

typedef struct {
    char *p;
    size_t len, cap;
    bool failed; /* an allocation failed: everything after is dropped */
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_puts(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_repeat(sbuf *b, char c, int n)
{
    for (int i = 0; i < n; i++)
        sb_put(b, &c, 1);
}

/* ---- the number format ------------------------------------------------- */

/* PyTorch's _Formatter: chosen once from the printed elements, then every
 * element is written in that mode and right-aligned to width. */
typedef struct {
    const tg_tensor *t;
    bool int_mode; /* floats that are all integers: "3." */
    bool sci_mode; /* "1.2346e+05" */
    int width;
    /* statistics of the nonzero finite values, for choosing the mode */
    bool any;
    double min_abs, max_abs;
} formatter;

static bool has_float_values(tg_dtype dtype)
{
    return tg__is_float(dtype) || dtype == TG_BFLOAT16;
}

static double read_float(const tg_tensor *t, int64_t off)
{
    const char *p = (const char *)t->storage->data + (size_t)off * tg_dtype_size(t->dtype);
    if (t->dtype == TG_BFLOAT16)
        return tg__f32_from_bf16(*(const uint16_t *)p);
    return t->dtype == TG_FLOAT32 ? (double)*(const float *)p : *(const double *)p;
}

/* Writes the element at storage offset off, without padding; returns its length. */
static int format_element(const formatter *f, int64_t off, char *out, size_t size)
{
    const tg_tensor *t = f->t;
    const char *p = (const char *)t->storage->data + (size_t)off * tg_dtype_size(t->dtype);
    if (t->dtype == TG_INT64)
        return snprintf(out, size, "%lld", (long long)*(const int64_t *)p);
    if (t->dtype == TG_BOOL)
        return snprintf(out, size, "%s", *(const bool *)p ? "True" : "False");
    double v = read_float(t, off);
    if (isnan(v)) /* Python never prints glibc's "-nan" */
        return snprintf(out, size, "nan");
    if (f->sci_mode)
        return snprintf(out, size, "%.*e", PRECISION, v);
    if (f->int_mode)
        return snprintf(out, size, isfinite(v) ? "%.0f." : "%.0f", v);
    return snprintf(out, size, "%.*f", PRECISION, v);
}

typedef void (*visit_fn)(formatter *f, int64_t off);

/* Calls fn on the storage offset of every element that gets printed, in
 * row-major order: with summarize, dims longer than 2*EDGE_ITEMS keep only
 * their first and last EDGE_ITEMS entries. */
static void walk(formatter *f, int d, int64_t off, bool summarize, visit_fn fn)
{
    const tg_tensor *t = f->t;
    if (d == t->ndim) {
        fn(f, off);
        return;
    }
    int64_t n = t->shape[d];
    for (int64_t i = 0; i < n; i++) {
        if (summarize && n > 2 * EDGE_ITEMS && i == EDGE_ITEMS)
            i = n - EDGE_ITEMS;
        walk(f, d + 1, off + i * t->stride[d], summarize, fn);
    }
}

static void gather_stats(formatter *f, int64_t off)
{
    double v = read_float(f->t, off);
    if (!isfinite(v) || v == 0)
        return;
    double a = fabs(v);
    if (!f->any || a < f->min_abs)
        f->min_abs = a;
    if (!f->any || a > f->max_abs)
        f->max_abs = a;
    f->any = true;
    if (v != ceil(v))
        f->int_mode = false;
}

static void widen(formatter *f, int64_t off)
{
    if (has_float_values(f->t->dtype)) {
        double v = read_float(f->t, off);
        if (!isfinite(v) || v == 0) /* PyTorch sizes columns by these only */
            return;
    }
    char s[64];
    int n = format_element(f, off, s, sizeof s);
    if (n > f->width)
        f->width = n;
}

static void formatter_init(formatter *f, const tg_tensor *t, bool summarize)
{
    *f = (formatter){.t = t, .int_mode = true, .width = 1};
    if (has_float_values(t->dtype)) {
        walk(f, 0, t->offset, summarize, gather_stats);
        if (!f->any)
            return; /* only zeros, infs and nans: "0." style, width 1 */
        double ratio = f->max_abs / f->min_abs;
        f->sci_mode = ratio > 1000.0 || f->max_abs > 1e8 ||
                      (!f->int_mode && f->min_abs < 1e-4);
    }
    walk(f, 0, t->offset, summarize, widen);
}

/* ---- layout ---------------------------------------------------------------- */

static void put_element(sbuf *b, const formatter *f, int64_t off)
{
    char s[64];
    int n = format_element(f, off, s, sizeof s);
    sb_repeat(b, ' ', f->width - n);
    sb_puts(b, s);
}

/* The innermost dim: as many elements per line as fit in LINE_WIDTH after
 * indent, continuation lines indented under the first element. */
static void put_vector(sbuf *b, const formatter *f, int64_t off, int indent, bool summarize)
{
    const tg_tensor *t = f->t;
    int d = t->ndim - 1;
    int64_t n = t->shape[d];
    int per_line = (LINE_WIDTH - indent) / (f->width + 2);
    if (per_line < 1)
        per_line = 1;
    sb_puts(b, "[");
    int64_t item = 0; /* the " ..." marker counts as an item, as in PyTorch */
    for (int64_t i = 0; i < n; i++, item++) {
        if (item > 0 && item % per_line == 0) {
            sb_puts(b, ",\n");
            sb_repeat(b, ' ', indent + 1);
        } else if (item > 0) {
            sb_puts(b, ", ");
        }
        if (summarize && n > 2 * EDGE_ITEMS && i == EDGE_ITEMS) {
            sb_puts(b, " ...");
            i = n - EDGE_ITEMS - 1;
            continue;
        }
        put_element(b, f, off + i * t->stride[d]);
    }
    sb_puts(b, "]");
}

/* Dim d and everything inside it. Sub-blocks are separated by one newline
 * per dim they contain, so 3-d blocks get a blank line between them. */
static void put_block(sbuf *b, const formatter *f, int d, int64_t off, int indent,
                      bool summarize)
{
    const tg_tensor *t = f->t;
    if (d == t->ndim - 1) {
        put_vector(b, f, off, indent, summarize);
        return;
    }
    int64_t n = t->shape[d];
    sb_puts(b, "[");
    for (int64_t i = 0; i < n; i++) {
        if (i > 0) {
            sb_puts(b, ",");
            sb_repeat(b, '\n', t->ndim - d - 1);
            sb_repeat(b, ' ', indent + 1);
        }
        if (summarize && n > 2 * EDGE_ITEMS && i == EDGE_ITEMS) {
            sb_puts(b, "...");
            i = n - EDGE_ITEMS - 1;
            continue;
        }
        put_block(b, f, d + 1, off + i * t->stride[d], indent + 1, summarize);
    }
    sb_puts(b, "]");
}

/* PyTorch's _add_suffixes: ", suffix" unless the line would pass LINE_WIDTH,
 * then a new line indented under the first bracket. */
static void put_suffix(sbuf *b, const char *suffix, int indent, size_t *line_len)
{
    size_t n = strlen(suffix);
    if (*line_len + n + 2 > LINE_WIDTH) {
        sb_puts(b, ",\n");
        sb_repeat(b, ' ', indent);
        *line_len = (size_t)indent + n;
    } else {
        sb_puts(b, ", ");
        *line_len += n + 2;
    }
    sb_puts(b, suffix);
}

static void put_suffixes(sbuf *b, const tg_tensor *t, int indent)
{
    if (b->failed)
        return;
    /* PyTorch measures the last line as len - rfind('\n') + 1, which is two
     * more than its length; keep the quirk so lines break where it does. */
    const char *nl = strrchr(b->p, '\n');
    size_t line_len = nl ? b->len - (size_t)(nl - b->p) + 1 : b->len + 2;
    char s[160];
    if (tg__numel(t->ndim, t->shape) == 0) {
        if (t->ndim != 1) {
            size_t n = (size_t)snprintf(s, sizeof s, "size=(");
            for (int i = 0; i < t->ndim && n < sizeof s; i++)
                n += (size_t)snprintf(s + n, sizeof s - n, i ? ", %lld" : "%lld",
                                      (long long)t->shape[i]);
            if (n < sizeof s)
                snprintf(s + n, sizeof s - n, ")");
            put_suffix(b, s, indent, &line_len);
        }
        /* With no elements the dtype cannot be guessed, so only the default
         * float32 goes unnamed. */
        if (t->dtype != TG_FLOAT32) {
            snprintf(s, sizeof s, "dtype=torch.%s", tg_dtype_name(t->dtype));
            put_suffix(b, s, indent, &line_len);
        }
    } else if (t->dtype == TG_FLOAT64 || t->dtype == TG_BFLOAT16) {
        snprintf(s, sizeof s, "dtype=torch.%s", tg_dtype_name(t->dtype));
        put_suffix(b, s, indent, &line_len);
    }
    /* An op's output would show grad_fn=<...> in PyTorch; we show nothing. */
    if (t->requires_grad && !t->node)
        put_suffix(b, "requires_grad=True", indent, &line_len);
}

/* The whole text, malloc'd (the caller frees it); NULL and TG_ERR_NOMEM
 * when memory runs out. */
static char *render(const char *fn, const tg_tensor *t, size_t *len)
{
    static const char prefix[] = "tensor(";
    const int indent = (int)sizeof prefix - 1;
    sbuf b = {0};
    sb_puts(&b, prefix);
    int64_t numel = tg__numel(t->ndim, t->shape);
    if (numel == 0) {
        sb_puts(&b, "[]");
    } else {
        bool summarize = numel > THRESHOLD;
        formatter f;
        formatter_init(&f, t, summarize);
        if (t->ndim == 0)
            put_element(&b, &f, t->offset);
        else
            put_block(&b, &f, 0, t->offset, indent, summarize);
    }
    put_suffixes(&b, t, indent);
    sb_puts(&b, ")");
    if (b.failed) {
        free(b.p);
        return tg__fail(TG_ERR_NOMEM, "%s: out of memory printing a tensor of shape %s", fn,
                        TG_SHAPE_STR(t));
    }
    *len = b.len;
    return b.p;
}

/* ---- public ---------------------------------------------------------------- */

int tg_format(char *buf, size_t size, const tg_tensor *t)
{
    if (buf && size > 0)
        buf[0] = '\0';
    TG_CHECK_NULL_STATUS(t);
    if (!buf && size > 0) {
        tg__fail(TG_ERR_NULL, "tg_format: buf is NULL but size is %zu", size);
        return -1;
    }
    size_t len;
    char *s = render(__func__, t, &len);
    if (!s)
        return -1;
    if (len > INT_MAX) {
        free(s);
        tg__fail(TG_ERR_VALUE, "tg_format: text of %zu bytes does not fit in an int", len);
        return -1;
    }
    if (size > 0) {
        size_t n = len < size - 1 ? len : size - 1;
        memcpy(buf, s, n);
        buf[n] = '\0';
    }
    free(s);
    return (int)len;
}

static int print_to(const char *fn, FILE *f, const tg_tensor *t)
{
    if (!t || !f) {
        tg__fail(TG_ERR_NULL, "%s: %s is NULL", fn, t ? "file" : "tensor");
        return -1;
    }
    size_t len;
    char *s = render(fn, t, &len);
    if (!s)
        return -1;
    /* A trailing newline, as Python's print() adds to the repr. */
    bool ok = fwrite(s, 1, len, f) == len && fputc('\n', f) != EOF;
    free(s);
    if (!ok) {
        tg__fail(TG_ERR_IO, "%s: writing the tensor failed", fn);
        return -1;
    }
    return 0;
}

int tg_print_to(FILE *f, const tg_tensor *t) { return print_to(__func__, f, t); }

int tg_print(const tg_tensor *t) { return print_to(__func__, stdout, t); }
