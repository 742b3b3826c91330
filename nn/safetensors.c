/* safetensors checkpoints: save a tg_params list atomically, and load one
 * back after validating the whole file first (header and its keys, dtypes,
 * shapes, byte ranges, names), so a bad file changes nothing. The format is
 * in nn.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tensorgrad/tensorgrad.h>
#include "json.h"
#include <tensorgrad/module.h>
#include "save_path.h"

static const struct {
    const char *code;
    tg_dtype dtype;
} dtype_codes[] = {{"F32", TG_FLOAT32}, {"F64", TG_FLOAT64}, {"BF16", TG_BFLOAT16},
                   {"I64", TG_INT64},   {"BOOL", TG_BOOL}};

/* safetensors dtypes that tensorgrad has no type for: named as unsupported
 * rather than unknown, so the message says what to convert. */
static const char *const unsupported_codes[] = {"F16", "F8_E4M3", "F8_E5M2", "I8", "I16",
                                                "I32", "U8", "U16", "U32", "U64"};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* The format is little-endian; a big-endian host swaps element bytes on the
 * way out and on the way in. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define HOST_BIG_ENDIAN 1
#else
#define HOST_BIG_ENDIAN 0
#endif

/* Reverses the bytes of each of the n elements of size es at p. */
static void swap_elements(unsigned char *p, int64_t n, size_t es)
{
    for (int64_t i = 0; i < n; i++, p += es)
        for (size_t j = 0; j < es / 2; j++) {
            unsigned char c = p[j];
            p[j] = p[es - 1 - j];
            p[es - 1 - j] = c;
        }
}

static const char *dtype_code(tg_dtype dtype)
{
    for (size_t i = 0; i < COUNT(dtype_codes); i++)
        if (dtype_codes[i].dtype == dtype)
            return dtype_codes[i].code;
    return NULL;
}

/* ---- saving: arguments and bytes ------------------------------------------------ */

static int save_fail(tg_error code, const char *path, const char *what, const char *name)
{
    tg_fail(code, "tg_safetensors_save: %s: %s%s%s%s", path, what, name ? " '" : "",
             name ? name : "", name ? "'" : "");
    return -1;
}

/* Names and metadata must make a JSON object without duplicate keys. */
static int check_save_args(const char *path, const tg_params *ps, int n_meta,
                           const char *const *keys, const char *const *values)
{
    if (n_meta < 0 || (n_meta > 0 && (!keys || !values))) {
        tg_fail(n_meta < 0 ? TG_ERR_VALUE : TG_ERR_NULL,
                 "tg_safetensors_save: %s: n_meta is %d but keys or values is NULL or n_meta < 0",
                 path, n_meta);
        return -1;
    }
    for (int i = 0; i < n_meta; i++) {
        if (!keys[i] || !values[i])
            return save_fail(TG_ERR_NULL, path, "a metadata key or value is NULL", NULL);
        if (!tg__utf8_valid(keys[i]) || !tg__utf8_valid(values[i]))
            return save_fail(TG_ERR_VALUE, path, "metadata is not valid UTF-8 at key", keys[i]);
        for (int j = 0; j < i; j++)
            if (strcmp(keys[i], keys[j]) == 0)
                return save_fail(TG_ERR_VALUE, path, "duplicate metadata key", keys[i]);
    }
    for (int i = 0; i < ps->count; i++) {
        const char *name = ps->names[i];
        if (!name || !ps->tensors[i])
            return save_fail(TG_ERR_NULL, path, "NULL name or tensor in the list at", name);
        if (!*name || strcmp(name, "__metadata__") == 0 || !tg__utf8_valid(name))
            return save_fail(TG_ERR_VALUE, path,
                             "tensor name is empty, reserved or not UTF-8:", name);
        for (int j = 0; j < i; j++)
            if (strcmp(name, ps->names[j]) == 0)
                return save_fail(TG_ERR_VALUE, path, "duplicate tensor name", name);
    }
    return 0;
}

/* The JSON header, tensors in list order with contiguous byte ranges,
 * padded with spaces to a multiple of 8 bytes as the reference writer does
 * (so the data section starts 8-aligned). */
static void build_header(tg__jbuf *b, const tg_params *ps, int n_meta, const char *const *keys,
                         const char *const *values)
{
    tg__jbuf_puts(b, "{");
    if (n_meta > 0) {
        tg__jbuf_puts(b, "\"__metadata__\":{");
        for (int i = 0; i < n_meta; i++) {
            tg__jbuf_puts(b, i ? "," : "");
            tg__jbuf_string(b, keys[i]);
            tg__jbuf_puts(b, ":");
            tg__jbuf_string(b, values[i]);
        }
        tg__jbuf_puts(b, ps->count ? "}," : "}");
    }
    int64_t offset = 0;
    for (int i = 0; i < ps->count; i++) {
        const tg_tensor *t = ps->tensors[i];
        int64_t nbytes = tg_numel(t) * (int64_t)tg_dtype_size(tg_dtype_of(t));
        tg__jbuf_puts(b, i ? "," : "");
        tg__jbuf_string(b, ps->names[i]);
        tg__jbuf_printf(b, ":{\"dtype\":\"%s\",\"shape\":[", dtype_code(tg_dtype_of(t)));
        for (int d = 0; d < tg_ndim(t); d++)
            tg__jbuf_printf(b, d ? ",%lld" : "%lld", (long long)tg_shape(t)[d]);
        tg__jbuf_printf(b, "],\"data_offsets\":[%lld,%lld]}", (long long)offset,
                        (long long)(offset + nbytes));
        offset += nbytes;
    }
    tg__jbuf_puts(b, "}");
    while (!b->failed && b->len % 8)
        tg__jbuf_puts(b, " ");
}

/* ---- saving ------------------------------------------------------------------- */

/* t's elements to fp, row-major and little-endian whatever t's layout: a
 * contiguous tensor straight from its data on a little-endian host, any
 * other through a copy. 0, or -1 with errno set. */
static int write_tensor(FILE *fp, const tg_tensor *t)
{
    tg_dtype dtype = tg_dtype_of(t);
    int64_t n = tg_numel(t);
    size_t es = tg_dtype_size(dtype), nbytes = (size_t)n * es;
    if (!nbytes)
        return 0;
    if (!HOST_BIG_ENDIAN && tg_is_contiguous(t))
        return fwrite(tg_data_const(t), 1, nbytes, fp) == nbytes ? 0 : -1;
    unsigned char *buf = malloc(nbytes);
    if (!buf) {
        errno = ENOMEM;
        return -1;
    }
    int rc = tg_copy_to(t, dtype, buf, n);
    if (rc == 0 && HOST_BIG_ENDIAN)
        swap_elements(buf, n, es);
    if (rc == 0)
        rc = fwrite(buf, 1, nbytes, fp) == nbytes ? 0 : -1;
    free(buf);
    return rc;
}

static int write_file(FILE *fp, const tg__jbuf *header, const tg_params *ps)
{
    unsigned char len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (unsigned char)((uint64_t)header->len >> (8 * i));
    if (fwrite(len, 1, 8, fp) != 8 || fwrite(header->data, 1, header->len, fp) != header->len)
        return -1;
    for (int i = 0; i < ps->count; i++)
        if (write_tensor(fp, ps->tensors[i]) < 0)
            return -1;
    return fflush(fp) == 0 && fsync(fileno(fp)) == 0 ? 0 : -1;
}

typedef struct {
    const tg__jbuf *header;
    const tg_params *ps;
} file_parts;

static int write_parts(FILE *fp, const void *ctx)
{
    const file_parts *f = ctx;
    return write_file(fp, f->header, f->ps);
}

/* Writes the checkpoint to a temporary file beside d's target and renames
 * it over the target; on failure the temporary file is gone. */
static int write_and_rename(const tg__save_dest *d, const tg__jbuf *header, const tg_params *ps)
{
    return tg__save_write(d, write_parts, &(file_parts){header, ps});
}

int tg_safetensors_save(const char *path, const tg_params *ps, int n_meta,
                        const char *const *keys, const char *const *values)
{
    TG_CHECK_ARG_STATUS(path);
    TG_CHECK_ARG_STATUS(ps);
    if (check_save_args(path, ps, n_meta, keys, values) < 0)
        return -1;
    tg__save_dest d;
    if (tg__save_prepare(&d, __func__, path) < 0) {
        free(d.target);
        return -1;
    }
    tg__jbuf header = {0};
    build_header(&header, ps, n_meta, keys, values);
    int rc = -1;
    if (header.failed) {
        save_fail(TG_ERR_NOMEM, path, "out of memory building the header", NULL);
    } else {
        tg__save_remove_stale(d.target);
        rc = write_and_rename(&d, &header, ps);
    }
    free(d.target);
    tg__jbuf_free(&header);
    return rc;
}

/* ---- loading: read and validate ------------------------------------------------ */

/* One tensor of the file, checked: its bytes are data[begin, end). */
typedef struct {
    const char *name; /* borrowed from the header tree */
    tg_dtype dtype;
    int ndim;
    int64_t shape[TG_MAX_DIMS];
    int64_t begin, end;
} entry;

typedef struct {
    const char *fn, *path;
    unsigned char *bytes; /* the whole file */
    size_t size;
    tg__json header;
    unsigned char *data; /* the data section, after the header, in host order once checked */
    int64_t data_size;
    entry *entries;
    entry **by_name; /* entries sorted by name, for lookups */
    int count;
} st_file;

static int bad(const st_file *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(const st_file *f, const char *fmt, ...)
{
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    tg_fail(TG_ERR_VALUE, "%s: %s: %s", f->fn, f->path, what);
    return -1;
}

static int read_fail(const st_file *f, const char *what, int err)
{
    tg_fail(TG_ERR_IO, "%s: %s: %s: %s", f->fn, f->path, what, strerror(err));
    return -1;
}

static const char *kind_of(mode_t m)
{
    return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ? "a character device"
         : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" : "of an unknown kind";
}

/* A read-only descriptor of f->path if it is a regular file. stat comes
 * first, so a FIFO or a device is never opened (a FIFO would wait for a
 * writer); O_NONBLOCK and fstat catch one swapped in between. */
static int open_regular(const st_file *f, struct stat *st)
{
    int fd = -1;
    if (stat(f->path, st) != 0)
        return read_fail(f, "cannot open", errno);
    if (S_ISREG(st->st_mode)) {
        fd = open(f->path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0)
            return read_fail(f, "cannot open", errno);
        if (fstat(fd, st) != 0) {
            int err = errno;
            close(fd);
            return read_fail(f, "cannot stat", err);
        }
    }
    if (!S_ISREG(st->st_mode)) {
        if (fd >= 0)
            close(fd);
        tg_fail(TG_ERR_IO, "%s: %s: is not a regular file (it is %s)", f->fn, f->path,
                 kind_of(st->st_mode));
        return -1;
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0)
        fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    return fd;
}

static int read_whole_file(st_file *f)
{
    struct stat st;
    int fd = open_regular(f, &st);
    if (fd < 0)
        return -1;
    f->size = (size_t)st.st_size;
    f->bytes = malloc(f->size ? f->size : 1);
    if (!f->bytes) {
        close(fd);
        tg_fail(TG_ERR_NOMEM, "%s: %s: out of memory reading %zu bytes", f->fn, f->path,
                 f->size);
        return -1;
    }
    size_t got = 0;
    ssize_t r = 1;
    while (got < f->size && (r = read(fd, f->bytes + got, f->size - got)) != 0) {
        if (r < 0 && errno != EINTR)
            break;
        got += r > 0 ? (size_t)r : 0;
    }
    int err = r < 0 ? errno : EIO;
    close(fd);
    if (got < f->size)
        return read_fail(f, r == 0 ? "file shrank while reading" : "cannot read", err);
    return 0;
}

/* A non-negative integer JSON value, described in *why when it is not. */
static bool get_count(const tg__json *v, int64_t *out, char *why, size_t size)
{
    if (v->type == TG_JSON_NUMBER && v->is_int && v->integer >= 0) {
        *out = v->integer;
        return true;
    }
    if (v->type == TG_JSON_NUMBER)
        snprintf(why, size, "%.17g", v->number);
    else
        snprintf(why, size, "%s", tg__json_type_name(v->type));
    return false;
}

static int parse_dtype(const st_file *f, const char *name, const tg__json *v, entry *e)
{
    if (!v)
        return bad(f, "tensor '%s' has no dtype", name);
    if (v->type != TG_JSON_STRING)
        return bad(f, "tensor '%s' has dtype %s, not a string", name, tg__json_type_name(v->type));
    for (size_t i = 0; i < COUNT(dtype_codes); i++)
        if (strcmp(v->string, dtype_codes[i].code) == 0) {
            e->dtype = dtype_codes[i].dtype;
            return 0;
        }
    for (size_t i = 0; i < COUNT(unsupported_codes); i++)
        if (strcmp(v->string, unsupported_codes[i]) == 0)
            return bad(f, "tensor '%s' has unsupported dtype '%s' (tensorgrad reads F32, F64, "
                       "BF16, I64 and BOOL)", name, v->string);
    return bad(f, "tensor '%s' has unknown dtype '%s'", name, v->string);
}

static int parse_entry(const st_file *f, const char *name, const tg__json *v, entry *e)
{
    char why[64];
    if (!*name)
        return bad(f, "a tensor has an empty name");
    if (v->type != TG_JSON_OBJECT)
        return bad(f, "tensor '%s' is %s, not an object", name, tg__json_type_name(v->type));
    e->name = name;
    if (parse_dtype(f, name, tg__json_get(v, "dtype"), e) < 0)
        return -1;
    const tg__json *shape = tg__json_get(v, "shape"), *offs = tg__json_get(v, "data_offsets");
    if (!shape || shape->type != TG_JSON_ARRAY)
        return bad(f, "tensor '%s' has %s shape, not an array", name,
                   shape ? tg__json_type_name(shape->type) : "no");
    if (shape->count > TG_MAX_DIMS)
        return bad(f, "tensor '%s' has %d dims, more than %d", name, shape->count, TG_MAX_DIMS);
    e->ndim = shape->count;
    for (int d = 0; d < e->ndim; d++)
        if (!get_count(&shape->items[d], &e->shape[d], why, sizeof why))
            return bad(f, "tensor '%s' has shape entry %s, not a non-negative integer", name, why);
    if (!offs || offs->type != TG_JSON_ARRAY || offs->count != 2)
        return bad(f, "tensor '%s' needs data_offsets as an array [begin, end]", name);
    for (int k = 0; k < 2; k++)
        if (!get_count(&offs->items[k], k ? &e->end : &e->begin, why, sizeof why))
            return bad(f, "tensor '%s' has data_offsets entry %s, not a non-negative integer",
                       name, why);
    if (e->begin > e->end)
        return bad(f, "tensor '%s' has data_offsets [%lld,%lld] with begin past end", name,
                   (long long)e->begin, (long long)e->end);
    if (e->end > f->data_size)
        return bad(f, "tensor '%s' has data_offsets [%lld,%lld] past the end of the data "
                   "(%lld bytes)", name, (long long)e->begin, (long long)e->end,
                   (long long)f->data_size);
    /* Overflow cannot hide a mismatch: the product is checked step by step.
     * A zero dim makes the tensor empty, but the other dims must still fit,
     * since the strides are their products ([0, 2^62, 2^62] is refused). */
    int64_t nbytes = (int64_t)tg_dtype_size(e->dtype);
    bool overflow = false, empty = false;
    for (int d = 0; d < e->ndim; d++) {
        if (!e->shape[d])
            empty = true;
        else if (nbytes > INT64_MAX / e->shape[d])
            overflow = true;
        else
            nbytes *= e->shape[d];
    }
    if (empty)
        nbytes = 0;
    if (overflow || nbytes != e->end - e->begin)
        return bad(f, "tensor '%s' has data_offsets [%lld,%lld] but shape %s %s needs %s%lld bytes",
                   name, (long long)e->begin, (long long)e->end,
                   tg_shape_string((char[96]){0}, 96, e->ndim, e->shape), tg_dtype_name(e->dtype),
                   overflow ? "more than " : "", (long long)(overflow ? INT64_MAX : nbytes));
    return 0;
}

static int check_metadata(const st_file *f, const tg__json *v)
{
    if (v->type != TG_JSON_OBJECT)
        return bad(f, "__metadata__ is %s, not an object of strings", tg__json_type_name(v->type));
    for (int i = 0; i < v->count; i++)
        if (v->items[i].type != TG_JSON_STRING)
            return bad(f, "__metadata__ entry '%s' is %s, not a string", v->keys[i],
                       tg__json_type_name(v->items[i].type));
    return 0;
}

/* Every key once, in every object of the header: a file that two readers
 * would read differently (the first "dtype" wins in one, the last in the
 * other) is refused, the key named. */
static int check_repeats(const st_file *f)
{
    bool nomem = false;
    const tg__json *where = NULL;
    const char *key = tg__json_repeated_key(&f->header, &nomem);
    if (key && strcmp(key, "__metadata__") == 0)
        return bad(f, "the header has __metadata__ twice");
    if (key)
        return bad(f, "duplicate tensor name '%s'", key);
    for (int i = 0; !nomem && i < f->header.count; i++) {
        const char *member = f->header.keys[i];
        bool meta = strcmp(member, "__metadata__") == 0;
        if (!(key = tg__json_find_repeated(&f->header.items[i], &where, &nomem)))
            continue;
        if (where == &f->header.items[i])
            return meta ? bad(f, "__metadata__ has key '%s' twice", key)
                        : bad(f, "tensor '%s' has key '%s' twice", member, key);
        return bad(f, "%s%s%s holds an object with key '%s' twice", meta ? "" : "tensor '",
                   member, meta ? "" : "'", key);
    }
    if (nomem)
        tg_fail(TG_ERR_NOMEM, "%s: %s: out of memory checking the header", f->fn, f->path);
    return nomem ? -1 : 0;
}

static int by_begin(const void *a, const void *b)
{
    const entry *x = *(entry *const *)a, *y = *(entry *const *)b;
    return x->begin != y->begin ? (x->begin < y->begin ? -1 : 1)
                                : (x->end != y->end ? (x->end < y->end ? -1 : 1) : 0);
}

static int by_name(const void *a, const void *b)
{
    return strcmp((*(entry *const *)a)->name, (*(entry *const *)b)->name);
}

/* No two non-empty byte ranges share a byte; by_name ends sorted by name
 * (check_repeats made the names unique). */
static int check_ranges(st_file *f)
{
    entry **sorted = f->by_name;
    for (int i = 0; i < f->count; i++)
        sorted[i] = &f->entries[i];
    qsort(sorted, (size_t)f->count, sizeof *sorted, by_begin);
    const entry *last = NULL; /* the non-empty range reaching furthest so far */
    for (int i = 0; i < f->count; i++) {
        const entry *e = sorted[i];
        if (e->begin == e->end)
            continue;
        if (last && e->begin < last->end)
            return bad(f, "tensors '%s' [%lld,%lld] and '%s' [%lld,%lld] overlap", last->name,
                       (long long)last->begin, (long long)last->end, e->name,
                       (long long)e->begin, (long long)e->end);
        if (!last || e->end > last->end)
            last = e;
    }
    qsort(sorted, (size_t)f->count, sizeof *sorted, by_name);
    return 0;
}

static void close_file(st_file *f)
{
    tg__json_free(&f->header);
    free(f->bytes);
    free(f->entries);
    free(f->by_name);
}

/* Turns each tensor's bytes, in place, into what its C type holds on this
 * host: bool bytes other than 0 become 1 (a C bool holds only 0 and 1), and
 * a big-endian host swaps element bytes. Ranges do not overlap (checked). */
static void to_host_order(st_file *f)
{
    for (int i = 0; i < f->count; i++) {
        const entry *e = &f->entries[i];
        unsigned char *p = f->data + e->begin;
        size_t nbytes = (size_t)(e->end - e->begin), es = tg_dtype_size(e->dtype);
        if (e->dtype == TG_BOOL)
            for (size_t j = 0; j < nbytes; j++)
                p[j] = p[j] != 0;
        if (HOST_BIG_ENDIAN)
            swap_elements(p, (int64_t)(nbytes / es), es);
    }
}

/* Reads path and checks all of it; on success f describes every tensor, its
 * bytes in host order. */
static int open_checked(st_file *f, const char *fn, const char *path)
{
    *f = (st_file){.fn = fn, .path = path};
    if (read_whole_file(f) < 0)
        return -1;
    if (f->size < 8)
        return bad(f, "file is %zu bytes, too short for the 8-byte header length", f->size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | f->bytes[i];
    if (n > f->size - 8)
        return bad(f, "header length %llu runs past the end of the file (%zu bytes)",
                   (unsigned long long)n, f->size);
    char err[200];
    bool nomem;
    if (tg__json_parse((const char *)f->bytes + 8, (size_t)n, &f->header, err, sizeof err,
                       &nomem) < 0) {
        if (nomem)
            tg_fail(TG_ERR_NOMEM, "%s: %s: out of memory parsing the header", fn, path);
        return nomem ? -1 : bad(f, "malformed JSON header: %s", err);
    }
    if (f->header.type != TG_JSON_OBJECT)
        return bad(f, "header is %s, not an object", tg__json_type_name(f->header.type));
    if (check_repeats(f) < 0)
        return -1;
    f->data = f->bytes + 8 + n;
    f->data_size = (int64_t)(f->size - 8 - n);
    int members = f->header.count;
    f->entries = calloc((size_t)members + 1, sizeof *f->entries);
    f->by_name = calloc((size_t)members + 1, sizeof *f->by_name);
    if (!f->entries || !f->by_name) {
        tg_fail(TG_ERR_NOMEM, "%s: %s: out of memory", fn, path);
        return -1;
    }
    for (int i = 0; i < members; i++) {
        const char *key = f->header.keys[i];
        const tg__json *v = &f->header.items[i];
        int rc = strcmp(key, "__metadata__") == 0 ? check_metadata(f, v)
                                                  : parse_entry(f, key, v, &f->entries[f->count++]);
        if (rc < 0)
            return -1;
    }
    if (check_ranges(f) < 0)
        return -1;
    to_host_order(f);
    return 0;
}

/* ---- loading: into a list or into existing tensors ------------------------------ */

/* A new tensor holding e's bytes, the caller's own reference whether or not
 * a scope is open. */
static tg_tensor *tensor_of(const st_file *f, const entry *e)
{
    tg_scope_begin();
    tg_tensor *t = tg_retain(tg_from_data(e->dtype, e->ndim, e->shape, f->data + e->begin));
    tg_scope_end();
    return t;
}

int tg_safetensors_load(const char *path, tg_params *out)
{
    TG_CHECK_ARG_STATUS(path);
    TG_CHECK_ARG_STATUS(out);
    st_file f;
    tg_tensor **made = NULL;
    int old_count = out->count, rc = -1;
    if (open_checked(&f, __func__, path) < 0)
        goto done;
    for (int i = 0; i < f.count; i++)
        if (tg_params_find(out, f.entries[i].name)) {
            bad(&f, "tensor '%s' is already in the output list", f.entries[i].name);
            goto done;
        }
    made = calloc((size_t)f.count + 1, sizeof *made);
    if (!made) {
        tg_fail(TG_ERR_NOMEM, "%s: %s: out of memory", __func__, path);
        goto done;
    }
    for (int i = 0; i < f.count; i++) {
        const entry *e = &f.entries[i];
        made[i] = tensor_of(&f, e);
        if (!made[i])
            goto done;
    }
    for (int i = 0; i < f.count; i++)
        if (tg_params_add(out, NULL, f.entries[i].name, made[i]) < 0) {
            tg_params_truncate(out, old_count); /* only memory can fail here */
            goto done;
        }
    rc = 0;
done:
    for (int i = 0; made && i < f.count; i++)
        tg_release(made[i]);
    free(made);
    close_file(&f);
    return rc;
}

static const entry *find_entry(const st_file *f, const char *name)
{
    entry key = {.name = name}, *pkey = &key;
    entry **hit = bsearch(&pkey, f->by_name, (size_t)f->count, sizeof *f->by_name, by_name);
    return hit ? *hit : NULL;
}

/* Every name in both, with equal dtypes and shapes. */
static int match_params(const st_file *f, const tg_params *ps)
{
    for (int i = 0; i < ps->count; i++) {
        const tg_tensor *t = ps->tensors[i];
        if (!ps->names[i] || !t) {
            tg_fail(TG_ERR_NULL, "%s: %s: NULL name or tensor in the list at index %d", f->fn,
                     f->path, i);
            return -1;
        }
        const entry *e = find_entry(f, ps->names[i]);
        if (!e)
            return bad(f, "parameter '%s' is missing from the file", ps->names[i]);
        if (e->dtype != tg_dtype_of(t))
            return bad(f, "tensor '%s' is %s in the file but %s in the parameters", e->name,
                       tg_dtype_name(e->dtype), tg_dtype_name(tg_dtype_of(t)));
        if (e->ndim != tg_ndim(t) ||
            memcmp(e->shape, tg_shape(t), (size_t)e->ndim * sizeof e->shape[0]))
            return bad(f, "tensor '%s' has shape %s in the file but %s in the parameters",
                       e->name, tg_shape_string((char[96]){0}, 96, e->ndim, e->shape),
                       TG_SHAPE_STRING(t));
    }
    for (int i = 0; i < f->count; i++) {
        bool found = false;
        for (int j = 0; j < ps->count && !found; j++)
            found = strcmp(ps->names[j], f->entries[i].name) == 0;
        if (!found)
            return bad(f, "tensor '%s' in the file is not among the parameters",
                       f->entries[i].name);
    }
    return 0;
}

/* The size of e's bytes when they do not start at a multiple of its element
 * size (a copy into a strided tensor reads whole elements, which must be
 * aligned), else 0. */
static size_t misaligned(const st_file *f, const entry *e)
{
    bool off = (uintptr_t)(f->data + e->begin) % tg_dtype_size(e->dtype) != 0;
    return off ? (size_t)(e->end - e->begin) : 0;
}

int tg_safetensors_load_into(const char *path, const tg_params *ps)
{
    TG_CHECK_ARG_STATUS(path);
    TG_CHECK_ARG_STATUS(ps);
    st_file f;
    unsigned char *scratch = NULL;
    int rc = -1;
    if (open_checked(&f, __func__, path) < 0 || match_params(&f, ps) < 0)
        goto done;
    /* room for the largest misaligned tensor, taken before any parameter is
     * written, so that a failure changes nothing */
    size_t room = 0;
    for (int i = 0; i < f.count; i++)
        if (misaligned(&f, &f.entries[i]) > room)
            room = misaligned(&f, &f.entries[i]);
    if (room && !(scratch = malloc(room))) {
        tg_fail(TG_ERR_NOMEM, "%s: %s: out of memory", __func__, path);
        goto done;
    }
    for (int i = 0; i < ps->count; i++) {
        const entry *e = find_entry(&f, ps->names[i]);
        const void *bytes = f.data + e->begin;
        if (misaligned(&f, e))
            bytes = memcpy(scratch, bytes, misaligned(&f, e));
        if (tg_copy_from(ps->tensors[i], e->dtype, bytes, tg_numel(ps->tensors[i])) < 0)
            goto done;
    }
    rc = 0;
done:
    free(scratch);
    close_file(&f);
    return rc;
}
