/* The JSON behind safetensors headers: a strict recursive-descent parser
 * (RFC 8259; UTF-8 checked, nesting bounded so hostile files cannot exhaust
 * the stack) and the escaping writer used when saving. */
#include "json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Deeper nesting than any header needs (safetensors uses 3 levels). */
#define MAX_DEPTH 64

typedef struct {
    const char *start, *p, *end;
    char *err;
    size_t errsize;
    bool *nomem;
    int depth;
} parser;

static int perr(parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int perr(parser *ps, const char *fmt, ...)
{
    char what[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(ps->err, ps->errsize, "%s at byte %zu", what, (size_t)(ps->p - ps->start));
    return -1;
}

static int oom(parser *ps)
{
    *ps->nomem = true;
    return perr(ps, "out of memory");
}

static void skip_ws(parser *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

size_t tg__utf8_seq(const unsigned char *p, const unsigned char *end)
{
    unsigned c = p[0];
    size_t n;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        n = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else
        return 0;
    if ((size_t)(end - p) < n || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if ((p[i] & 0xC0) != 0x80)
            return 0;
    return n;
}

bool tg__utf8_valid(const char *s)
{
    const unsigned char *p = (const unsigned char *)s, *end = p + strlen(s);
    while (p < end) {
        size_t n = tg__utf8_seq(p, end);
        if (!n)
            return false;
        p += n;
    }
    return true;
}

static int hex4(parser *ps, const char *q, unsigned *out)
{
    if (ps->end - q < 4)
        return perr(ps, "truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = q[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return perr(ps, "bad \\u escape");
        v = v * 16 + (unsigned)d;
    }
    *out = v;
    return 0;
}

static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | cp >> 6); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12); o[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18); o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* One escape after the backslash at ps->p; appends its UTF-8 to o. */
static int parse_escape(parser *ps, char *o, size_t *olen)
{
    const char *q = ps->p + 1;
    if (q >= ps->end)
        return perr(ps, "unterminated string");
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    const char *k = *q ? strchr(from, *q) : NULL;
    if (k) {
        o[(*olen)++] = to[k - from];
        ps->p = q + 1;
        return 0;
    }
    if (*q != 'u')
        return perr(ps, "bad escape '\\%c'", *q);
    unsigned cp = 0, lo = 0;
    if (hex4(ps, q + 1, &cp) < 0)
        return -1;
    q += 5;
    if (cp >= 0xDC00 && cp <= 0xDFFF)
        return perr(ps, "unpaired surrogate \\u%04X", cp);
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        /* UTF-16 pairs: a high surrogate must be followed by \u + low one. */
        if (ps->end - q < 2 || q[0] != '\\' || q[1] != 'u' || hex4(ps, q + 2, &lo) < 0 ||
            lo < 0xDC00 || lo > 0xDFFF)
            return perr(ps, "unpaired surrogate \\u%04X", cp);
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        q += 6;
    }
    if (cp == 0)
        return perr(ps, "NUL character in string");
    *olen += put_utf8(o + *olen, cp);
    ps->p = q;
    return 0;
}

/* A string at ps->p (on the opening quote) into a new NUL-terminated copy.
 * Decoded text is never longer than its source, so one allocation fits. */
static int parse_string(parser *ps, char **out)
{
    const char *q = ps->p + 1;
    while (q < ps->end && *q != '"')
        q += (*q == '\\' && q + 1 < ps->end) ? 2 : 1;
    if (q >= ps->end)
        return perr(ps, "unterminated string");
    char *o = malloc((size_t)(q - ps->p));
    if (!o)
        return oom(ps);
    size_t n = 0;
    ps->p++;
    while (*ps->p != '"') {
        unsigned char c = (unsigned char)*ps->p;
        size_t k;
        if (c == '\\') {
            if (parse_escape(ps, o, &n) < 0)
                goto fail;
        } else if (c < 0x20) {
            perr(ps, "control character 0x%02X in string", c);
            goto fail;
        } else if (!(k = tg__utf8_seq((const unsigned char *)ps->p, (const unsigned char *)ps->end))) {
            perr(ps, "invalid UTF-8 in string");
            goto fail;
        } else {
            memcpy(o + n, ps->p, k);
            n += k;
            ps->p += k;
        }
    }
    ps->p++;
    o[n] = '\0';
    *out = o;
    return 0;
fail:
    free(o);
    return -1;
}

static int parse_number(parser *ps, tg__json *v)
{
    const char *s = ps->p, *q = s;
    bool neg = q < ps->end && *q == '-', integral = true;
    q += neg;
    if (q >= ps->end || *q < '0' || *q > '9')
        return perr(ps, "unexpected character '%c'", q < ps->end ? *q : '?');
    uint64_t mag = 0;
    bool overflow = false;
    if (*q == '0' && q + 1 < ps->end && q[1] >= '0' && q[1] <= '9')
        return perr(ps, "number with a leading zero");
    for (; q < ps->end && *q >= '0' && *q <= '9'; q++) {
        if (mag > (UINT64_MAX - 9) / 10)
            overflow = true;
        mag = mag * 10 + (uint64_t)(*q - '0');
    }
    if (q < ps->end && *q == '.') {
        integral = false;
        if (++q >= ps->end || *q < '0' || *q > '9')
            return perr(ps, "digit expected after '.'");
        while (q < ps->end && *q >= '0' && *q <= '9')
            q++;
    }
    if (q < ps->end && (*q == 'e' || *q == 'E')) {
        integral = false;
        q++;
        if (q < ps->end && (*q == '+' || *q == '-'))
            q++;
        if (q >= ps->end || *q < '0' || *q > '9')
            return perr(ps, "digit expected in exponent");
        while (q < ps->end && *q >= '0' && *q <= '9')
            q++;
    }
    char *copy = malloc((size_t)(q - s) + 1);
    if (!copy)
        return oom(ps);
    memcpy(copy, s, (size_t)(q - s));
    copy[q - s] = '\0';
    v->type = TG_JSON_NUMBER;
    v->number = strtod(copy, NULL);
    free(copy);
    if (integral && !overflow && mag <= (uint64_t)INT64_MAX) {
        v->is_int = true;
        v->integer = neg ? -(int64_t)mag : (int64_t)mag;
    }
    ps->p = q;
    return 0;
}

static int parse_value(parser *ps, tg__json *v);

/* An array or object at ps->p: items separated by commas until close. */
static int parse_container(parser *ps, tg__json *v, bool object)
{
    char close = object ? '}' : ']';
    int cap = 0;
    v->type = object ? TG_JSON_OBJECT : TG_JSON_ARRAY;
    if (++ps->depth > MAX_DEPTH)
        return perr(ps, "nesting deeper than %d", MAX_DEPTH);
    ps->p++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
        ps->depth--;
        return 0;
    }
    for (;;) {
        if (v->count == cap) {
            cap = cap ? 2 * cap : 4;
            tg__json *items = realloc(v->items, (size_t)cap * sizeof *items);
            if (items)
                v->items = items;
            char **keys = object ? realloc(v->keys, (size_t)cap * sizeof *keys) : NULL;
            if (keys)
                v->keys = keys;
            if (!items || (object && !keys))
                return oom(ps);
        }
        skip_ws(ps);
        char *key = NULL;
        if (object) {
            if (ps->p >= ps->end || *ps->p != '"')
                return perr(ps, "object key expected");
            if (parse_string(ps, &key) < 0)
                return -1;
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != ':') {
                free(key);
                return perr(ps, "':' expected");
            }
            ps->p++;
            v->keys[v->count] = key;
        }
        memset(&v->items[v->count], 0, sizeof v->items[0]);
        v->count++; /* counted now so that a failure below frees the key */
        if (parse_value(ps, &v->items[v->count - 1]) < 0)
            return -1;
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == close) {
            ps->p++;
            ps->depth--;
            return 0;
        }
        return perr(ps, "',' or '%c' expected", close);
    }
}

static bool literal(parser *ps, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0)
        return false;
    ps->p += n;
    return true;
}

static int parse_value(parser *ps, tg__json *v)
{
    skip_ws(ps);
    if (ps->p >= ps->end)
        return perr(ps, "unexpected end of text");
    switch (*ps->p) {
    case '{': return parse_container(ps, v, true);
    case '[': return parse_container(ps, v, false);
    case '"':
        v->type = TG_JSON_STRING;
        return parse_string(ps, &v->string);
    }
    if (literal(ps, "true") || literal(ps, "false")) {
        v->type = TG_JSON_BOOL;
        v->boolean = ps->p[-4] == 't'; /* "true" or "fals(e)" */
        return 0;
    }
    if (literal(ps, "null")) {
        v->type = TG_JSON_NULL;
        return 0;
    }
    return parse_number(ps, v);
}

int tg__json_parse(const char *text, size_t len, tg__json *out, char *err, size_t errsize,
                   bool *nomem)
{
    parser ps = {text, text, text + len, err, errsize, nomem, 0};
    *nomem = false;
    memset(out, 0, sizeof *out);
    if (parse_value(&ps, out) < 0) {
        tg__json_free(out);
        return -1;
    }
    skip_ws(&ps);
    if (ps.p != ps.end) {
        tg__json_free(out);
        return perr(&ps, "unexpected text after the value");
    }
    return 0;
}

void tg__json_free(tg__json *v)
{
    if (!v)
        return;
    for (int i = 0; i < v->count; i++) {
        tg__json_free(&v->items[i]);
        if (v->keys)
            free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->string);
    memset(v, 0, sizeof *v);
}

const tg__json *tg__json_get(const tg__json *obj, const char *key)
{
    if (obj->type != TG_JSON_OBJECT)
        return NULL;
    for (int i = 0; i < obj->count; i++)
        if (strcmp(obj->keys[i], key) == 0)
            return &obj->items[i];
    return NULL;
}

/* ---- repeated keys ------------------------------------------------------------ */

typedef struct {
    const char *key;
    int index;
} keyed;

static int by_key_then_index(const void *a, const void *b)
{
    const keyed *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c ? c : (x->index > y->index) - (x->index < y->index);
}

const char *tg__json_repeated_key(const tg__json *obj, bool *nomem)
{
    if (obj->type != TG_JSON_OBJECT || obj->count < 2)
        return NULL;
    int second = -1; /* the first member whose key an earlier one has */
    if (obj->count <= 16) { /* a tensor's entry: no allocation */
        for (int i = 1; i < obj->count && second < 0; i++)
            for (int j = 0; j < i && second < 0; j++)
                if (strcmp(obj->keys[i], obj->keys[j]) == 0)
                    second = i;
        return second < 0 ? NULL : obj->keys[second];
    }
    keyed *k = malloc((size_t)obj->count * sizeof *k);
    if (!k) {
        *nomem = true;
        return NULL;
    }
    for (int i = 0; i < obj->count; i++)
        k[i] = (keyed){obj->keys[i], i};
    qsort(k, (size_t)obj->count, sizeof *k, by_key_then_index);
    for (int i = 1; i < obj->count; i++)
        if (strcmp(k[i - 1].key, k[i].key) == 0 && (second < 0 || k[i].index < second))
            second = k[i].index;
    free(k);
    return second < 0 ? NULL : obj->keys[second];
}

const char *tg__json_find_repeated(const tg__json *v, const tg__json **where, bool *nomem)
{
    const char *key = tg__json_repeated_key(v, nomem);
    if (key) {
        *where = v;
        return key;
    }
    for (int i = 0; (v->type == TG_JSON_ARRAY || v->type == TG_JSON_OBJECT) && i < v->count &&
                    !*nomem; i++)
        if ((key = tg__json_find_repeated(&v->items[i], where, nomem)))
            return key;
    return NULL;
}

const char *tg__json_type_name(tg__json_type type)
{
    switch (type) {
    case TG_JSON_NULL: return "null";
    case TG_JSON_BOOL: return "a boolean";
    case TG_JSON_NUMBER: return "a number";
    case TG_JSON_STRING: return "a string";
    case TG_JSON_ARRAY: return "an array";
    case TG_JSON_OBJECT: return "an object";
    }
    return "unknown";
}

/* ---- writing ------------------------------------------------------------------ */

static bool reserve(tg__jbuf *b, size_t extra)
{
    if (b->failed)
        return false;
    if (b->len + extra + 1 <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *d = realloc(b->data, cap);
    if (!d) {
        b->failed = true;
        return false;
    }
    b->data = d;
    b->cap = cap;
    return true;
}

void tg__jbuf_puts(tg__jbuf *b, const char *s)
{
    size_t n = strlen(s);
    if (!reserve(b, n))
        return;
    memcpy(b->data + b->len, s, n + 1);
    b->len += n;
}

void tg__jbuf_printf(tg__jbuf *b, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        b->failed = true; /* only used for short numeric fields */
        return;
    }
    tg__jbuf_puts(b, tmp);
}

void tg__jbuf_string(tg__jbuf *b, const char *s)
{
    tg__jbuf_puts(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"')
            tg__jbuf_puts(b, "\\\"");
        else if (*p == '\\')
            tg__jbuf_puts(b, "\\\\");
        else if (*p == '\n')
            tg__jbuf_puts(b, "\\n");
        else if (*p == '\t')
            tg__jbuf_puts(b, "\\t");
        else if (*p < 0x20)
            tg__jbuf_printf(b, "\\u%04x", *p);
        else if (reserve(b, 1)) {
            b->data[b->len++] = (char)*p;
            b->data[b->len] = '\0';
        }
    }
    tg__jbuf_puts(b, "\"");
}

void tg__jbuf_free(tg__jbuf *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}
