/* A small JSON reader and writer for safetensors headers: a strict parser
 * into an ordered tree (objects keep their key order), and an append-only
 * text buffer that escapes strings. Internal; never installed. */
#ifndef TG_JSON_H
#define TG_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    TG_JSON_NULL,
    TG_JSON_BOOL,
    TG_JSON_NUMBER,
    TG_JSON_STRING,
    TG_JSON_ARRAY,
    TG_JSON_OBJECT,
} tg__json_type;

typedef struct tg__json tg__json;
struct tg__json {
    tg__json_type type;
    bool boolean;
    double number;
    /* A number written without fraction or exponent that fits in int64:
     * offsets and dims must be these, so 3.0 or 1e2 is not a dim. */
    bool is_int;
    int64_t integer;
    char *string;  /* NUL-terminated, valid UTF-8, no NUL inside */
    int count;     /* items of an array or members of an object */
    tg__json *items;
    char **keys;   /* object member names, in the order of the text */
};

/* Parses len bytes of text (not NUL-terminated) as one JSON value followed
 * only by whitespace. 0 and a tree to free with tg__json_free, or -1 with a
 * description of the problem and its byte position in err (out is then
 * empty). An allocation failure is -1 with *nomem set. */
int tg__json_parse(const char *text, size_t len, tg__json *out, char *err, size_t errsize,
                   bool *nomem);
void tg__json_free(tg__json *v);
/* The member called key of an object, or NULL. */
const tg__json *tg__json_get(const tg__json *obj, const char *key);
const char *tg__json_type_name(tg__json_type type);
/* Length of the valid UTF-8 sequence at p (before end), or 0: rejects
 * overlong forms, surrogates and code points past U+10FFFF. */
size_t tg__utf8_seq(const unsigned char *p, const unsigned char *end);
/* JSON leaves a repeated key's meaning to the reader (the first wins in
 * one, the last in another), so a header is checked for them. The key of
 * obj's first member that repeats an earlier member's key, or NULL (also
 * when obj is not an object, or when memory ran out: then *nomem is set). */
const char *tg__json_repeated_key(const tg__json *obj, bool *nomem);
/* The same through v and every value nested in it, depth first: the
 * repeated key and in *where the object that holds it, or NULL. */
const char *tg__json_find_repeated(const tg__json *v, const tg__json **where, bool *nomem);
/* True when the NUL-terminated s is valid UTF-8 (what JSON text must be). */
bool tg__utf8_valid(const char *s);

/* Growable text; after an allocation failure `failed` is set and further
 * appends do nothing, so a writer checks once at the end. */
typedef struct {
    char *data;
    size_t len, cap;
    bool failed;
} tg__jbuf;
void tg__jbuf_puts(tg__jbuf *b, const char *s);
void tg__jbuf_printf(tg__jbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s as a quoted JSON string: quote, backslash and control bytes escaped. */
void tg__jbuf_string(tg__jbuf *b, const char *s);
void tg__jbuf_free(tg__jbuf *b);

#endif
