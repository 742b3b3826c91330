/* Reading tokenizers: GPT-2's encoder.json + vocab.bpe and Hugging Face's
 * tokenizer.json with a BPE model, byte-level or SentencePiece-style. Every
 * entry is checked before use; a load that fails frees what it built. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tensor/internal.h"
#include "json.h"
#include "tokenizer_internal.h"

/* The whole file, NUL-terminated, or NULL after recording an error. */
static char *read_all(const char *path, size_t *len, const char *fn)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return tg__fail(TG_ERR_IO, "%s: cannot open %s: %s", fn, path, strerror(errno));
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 65536 + 1 > cap) {
            cap = cap ? 2 * cap : 1 << 20;
            char *b = realloc(buf, cap);
            if (!b) {
                free(buf);
                fclose(f);
                return tg__fail(TG_ERR_NOMEM, "%s: out of memory reading %s", fn, path);
            }
            buf = b;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0)
            break;
    }
    bool bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return tg__fail(TG_ERR_IO, "%s: cannot read %s", fn, path);
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

static int parse_json(const char *path, tg__json *root, const char *fn)
{
    size_t len;
    char *text = read_all(path, &len, fn);
    if (!text)
        return -1;
    char err[160];
    bool nomem = false;
    int rc = tg__json_parse(text, len, root, err, sizeof err, &nomem);
    free(text);
    if (rc < 0)
        tg__fail(nomem ? TG_ERR_NOMEM : TG_ERR_VALUE, "%s: %s is not JSON: %s", fn, path,
                 nomem ? "out of memory" : err);
    return rc;
}

/* The byte that GPT-2's code point cp stands for, or -1: the inverse of
 * tg__byte_to_cp (bytes 0x00-0x20, 0x7F-0xA0 and 0xAD are U+0100-U+0143). */
static int cp_to_byte(uint32_t cp)
{
    if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF))
        return (int)cp;
    if (cp < 0x100 || cp > 0x143)
        return -1;
    uint32_t k = cp - 0x100;
    return k < 33 ? (int)k : k < 67 ? (int)(0x7F + k - 33) : 0xAD;
}

/* GPT-2's text form of a token back to its bytes; -1 when a character is
 * outside the byte-to-unicode table. */
/* How many bytes a UTF-8 sequence at p may read: up to its NUL. */
static size_t len_max(const uint8_t *p)
{
    size_t n = 1;
    while (n < 4 && p[n])
        n++;
    return n;
}

static long unmap_bytes(const char *s, uint8_t *out)
{
    long n = 0;
    const uint8_t *p = (const uint8_t *)s;
    while (*p) {
        int len = tg__utf8_len(p, len_max(p));
        uint32_t cp = len == 1 ? p[0] : len == 2 ? (uint32_t)(p[0] & 0x1F) << 6 | (p[1] & 0x3F)
                                                 : 0x144;
        int b = len == 0 ? -1 : cp_to_byte(cp);
        if (b < 0)
            return -1;
        out[n++] = (uint8_t)b;
        p += len;
    }
    return n;
}

/* Sets id's token from its text in the file: byte-level text is unmapped. */
static int set_token(tg_tokenizer *t, int32_t id, const char *s, const char *fn)
{
    size_t n = strlen(s);
    if (t->kind == TG__TOK_SENTENCEPIECE)
        return tg__tok_set(t, id, (const uint8_t *)s, n, fn);
    uint8_t stack[128], *b = n <= sizeof stack ? stack : malloc(n);
    if (!b) {
        tg__fail(TG_ERR_NOMEM, "%s: out of memory", fn);
        return -1;
    }
    long m = unmap_bytes(s, b);
    int rc = m < 0 ? -1 : tg__tok_set(t, id, b, (size_t)m, fn);
    if (m < 0)
        tg__fail(TG_ERR_VALUE, "%s: token %d \"%.40s\" is not byte-level text", fn, (int)id, s);
    if (b != stack)
        free(b);
    return rc;
}

/* The id of a token named in a merge, or -1 after an error. */
static int32_t merge_token(const tg_tokenizer *t, const char *s, size_t n, int32_t rank,
                           const char *fn)
{
    int32_t id = -1;
    uint8_t stack[128], *b = n <= sizeof stack ? stack : malloc(n + 1);
    if (b && t->kind == TG__TOK_SENTENCEPIECE)
        id = tg__tok_lookup(t, (const uint8_t *)s, n);
    else if (b) {
        char *z = malloc(n + 1);
        long m = -1;
        if (z) {
            memcpy(z, s, n);
            z[n] = 0;
            m = unmap_bytes(z, b);
            free(z);
        }
        id = m > 0 ? tg__tok_lookup(t, b, (size_t)m) : -1;
    }
    if (b != stack)
        free(b);
    if (id < 0)
        tg__fail(TG_ERR_VALUE, "%s: merge %d names \"%.*s\", not in the vocabulary", fn,
                 (int)rank, (int)(n < 40 ? n : 40), s);
    return id;
}

/* One merge written "left right". */
static int add_merge_text(tg_tokenizer *t, const char *line, size_t n, const char *fn)
{
    const char *sp = memchr(line, ' ', n);
    if (!sp || sp == line || sp + 1 == line + n || memchr(sp + 1, ' ', (size_t)(line + n - sp - 1))) {
        tg__fail(TG_ERR_VALUE, "%s: merge %d \"%.*s\" is not two tokens", fn, (int)t->n_merges,
                 (int)(n < 40 ? n : 40), line);
        return -1;
    }
    int32_t a = merge_token(t, line, (size_t)(sp - line), t->n_merges, fn);
    int32_t b = a < 0 ? -1 : merge_token(t, sp + 1, (size_t)(line + n - sp - 1), t->n_merges, fn);
    return b < 0 ? -1 : tg__tok_add_merge(t, a, b, fn);
}

/* A vocabulary object {"token": id, ...}: ids checked, max id returned. */
static int32_t vocab_max_id(const tg__json *vocab, const char *what, const char *fn)
{
    if (!vocab || vocab->type != TG_JSON_OBJECT || vocab->count == 0) {
        tg__fail(TG_ERR_VALUE, "%s: %s is not an object of tokens", fn, what);
        return -1;
    }
    int32_t max = -1;
    for (int i = 0; i < vocab->count; i++) {
        const tg__json *v = &vocab->items[i];
        if (v->type != TG_JSON_NUMBER || !v->is_int || v->integer < 0 || v->integer >= 10000000) {
            tg__fail(TG_ERR_VALUE, "%s: %s gives \"%.40s\" the id %g", fn, what, vocab->keys[i],
                     v->type == TG_JSON_NUMBER ? v->number : -1.0);
            return -1;
        }
        if (v->integer > max)
            max = (int32_t)v->integer;
    }
    return max;
}

static int fill_vocab(tg_tokenizer *t, const tg__json *vocab, const char *fn)
{
    for (int i = 0; i < vocab->count; i++)
        if (set_token(t, (int32_t)vocab->items[i].integer, vocab->keys[i], fn) < 0)
            return -1;
    return 0;
}

static int load_merge_lines(tg_tokenizer *t, const char *path, const char *fn)
{
    size_t len;
    char *text = read_all(path, &len, fn);
    if (!text)
        return -1;
    int rc = 0;
    for (size_t pos = 0; rc == 0 && pos < len;) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - text) : len, n = end - pos;
        if (n > 0 && text[end - 1] == '\r')
            n--;
        bool version = pos == 0 && n >= 8 && memcmp(text, "#version", 8) == 0;
        if (n > 0 && !version)
            rc = add_merge_text(t, text + pos, n, fn);
        pos = end + 1;
    }
    free(text);
    return rc;
}

tg_tokenizer *tg_tokenizer_load_gpt2(const char *encoder_json, const char *vocab_bpe)
{
    static const char fn[] = "tg_tokenizer_load_gpt2";
    if (!encoder_json || !vocab_bpe)
        return tg__fail(TG_ERR_NULL, "%s: %s is NULL", fn, !encoder_json ? "encoder_json" : "vocab_bpe");
    tg__json root;
    if (parse_json(encoder_json, &root, fn) < 0)
        return NULL;
    tg_tokenizer *t = NULL;
    int32_t max = vocab_max_id(&root, encoder_json, fn);
    if (max >= 0)
        t = tg__tok_new(TG__TOK_BYTE_LEVEL, max + 1, fn);
    bool ok = t && fill_vocab(t, &root, fn) == 0 && tg__tok_index(t, fn) == 0 &&
              load_merge_lines(t, vocab_bpe, fn) == 0;
    tg__json_free(&root);
    int32_t eot = ok ? tg__tok_lookup(t, (const uint8_t *)"<|endoftext|>", 13) : -1;
    if (ok && eot >= 0)
        ok = tg__tok_add_special(t, eot, fn) == 0;
    if (!ok) {
        tg_tokenizer_free(t);
        return NULL;
    }
    return t;
}

static bool is_type(const tg__json *v, const char *type)
{
    const tg__json *ty = v && v->type == TG_JSON_OBJECT ? tg__json_get(v, "type") : NULL;
    return ty && ty->type == TG_JSON_STRING && strcmp(ty->string, type) == 0;
}

static const char *type_of(const tg__json *v)
{
    const tg__json *ty = v && v->type == TG_JSON_OBJECT ? tg__json_get(v, "type") : NULL;
    return ty && ty->type == TG_JSON_STRING ? ty->string : "?";
}

static bool flag(const tg__json *obj, const char *key, bool dflt)
{
    const tg__json *v = tg__json_get(obj, key);
    return v && v->type == TG_JSON_BOOL ? v->boolean : dflt;
}

static bool is_null(const tg__json *v) { return !v || v->type == TG_JSON_NULL; }

/* The byte-level pre-tokenizer: ByteLevel with its regex, nothing else. */
static int byte_level_setup(tg_tokenizer *t, const tg__json *root, const char *fn)
{
    const tg__json *pre = tg__json_get(root, "pre_tokenizer"), *norm = tg__json_get(root, "normalizer");
    if (!is_null(norm)) {
        tg__fail(TG_ERR_VALUE, "%s: normalizer %s is not implemented for byte-level BPE", fn,
                 type_of(norm));
        return -1;
    }
    if (!is_type(pre, "ByteLevel") || !flag(pre, "use_regex", true)) {
        tg__fail(TG_ERR_VALUE, "%s: pre_tokenizer %s is not ByteLevel with GPT-2's pattern", fn,
                 is_null(pre) ? "null" : type_of(pre));
        return -1;
    }
    t->add_prefix_space = flag(pre, "add_prefix_space", false);
    return 0;
}

static bool is_meta_string(const tg__json *v)
{
    return v && v->type == TG_JSON_STRING && strcmp(v->string, "\xE2\x96\x81") == 0;
}

/* SentencePiece's normalizer: Prepend(U+2581) and Replace(" " -> U+2581). */
static int sp_normalizer(tg_tokenizer *t, const tg__json *norm, bool *replaces, const char *fn)
{
    const tg__json *list = is_type(norm, "Sequence") ? tg__json_get(norm, "normalizers") : NULL;
    int n = list && list->type == TG_JSON_ARRAY ? list->count : 1;
    for (int i = 0; i < n; i++) {
        const tg__json *step = list ? &list->items[i] : norm;
        const tg__json *pat = tg__json_get(step, "pattern");
        const tg__json *str = pat && pat->type == TG_JSON_OBJECT ? tg__json_get(pat, "String") : NULL;
        if (is_type(step, "Prepend") && is_meta_string(tg__json_get(step, "prepend")))
            t->sp_prepend = true;
        else if (is_type(step, "Replace") && str && str->type == TG_JSON_STRING &&
                 strcmp(str->string, " ") == 0 && is_meta_string(tg__json_get(step, "content")))
            *replaces = true;
        else {
            tg__fail(TG_ERR_VALUE, "%s: normalizer %s is not implemented for SentencePiece BPE",
                     fn, type_of(step));
            return -1;
        }
    }
    return 0;
}

static int sp_setup(tg_tokenizer *t, const tg__json *root, const char *fn)
{
    const tg__json *pre = tg__json_get(root, "pre_tokenizer"), *norm = tg__json_get(root, "normalizer");
    bool replaces = false;
    if (!is_null(norm) && sp_normalizer(t, norm, &replaces, fn) < 0)
        return -1;
    if (is_type(pre, "Metaspace")) {
        const tg__json *scheme = tg__json_get(pre, "prepend_scheme");
        const char *s = scheme && scheme->type == TG_JSON_STRING ? scheme->string : NULL;
        t->sp_prepend = s ? strcmp(s, "never") != 0 : flag(pre, "add_prefix_space", true);
        t->sp_first_only = s && strcmp(s, "first") == 0;
        t->sp_split = flag(pre, "split", true);
        replaces = is_meta_string(tg__json_get(pre, "replacement"));
    } else if (!is_null(pre)) {
        tg__fail(TG_ERR_VALUE, "%s: pre_tokenizer %s is not implemented for SentencePiece BPE",
                 fn, type_of(pre));
        return -1;
    }
    if (!replaces) {
        tg__fail(TG_ERR_VALUE, "%s: neither normalizer nor pre_tokenizer writes spaces as "
                 "U+2581", fn);
        return -1;
    }
    return 0;
}

static int load_merges(tg_tokenizer *t, const tg__json *merges, const char *fn)
{
    if (!merges || merges->type != TG_JSON_ARRAY) {
        tg__fail(TG_ERR_VALUE, "%s: model.merges is not an array", fn);
        return -1;
    }
    for (int i = 0; i < merges->count; i++) {
        const tg__json *m = &merges->items[i];
        int rc;
        if (m->type == TG_JSON_STRING)
            rc = add_merge_text(t, m->string, strlen(m->string), fn);
        else if (m->type == TG_JSON_ARRAY && m->count == 2 && m->items[0].type == TG_JSON_STRING &&
                 m->items[1].type == TG_JSON_STRING) {
            const char *l = m->items[0].string, *r = m->items[1].string;
            int32_t a = merge_token(t, l, strlen(l), t->n_merges, fn);
            int32_t b = a < 0 ? -1 : merge_token(t, r, strlen(r), t->n_merges, fn);
            rc = b < 0 ? -1 : tg__tok_add_merge(t, a, b, fn);
        } else {
            tg__fail(TG_ERR_VALUE, "%s: merge %d is neither \"a b\" nor [\"a\", \"b\"]", fn, i);
            rc = -1;
        }
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* added_tokens: [{"id": 50256, "content": "<|endoftext|>", ...}, ...] */
static int32_t added_max_id(const tg__json *added, const char *fn)
{
    int32_t max = -1;
    for (int i = 0; added && added->type == TG_JSON_ARRAY && i < added->count; i++) {
        const tg__json *id = tg__json_get(&added->items[i], "id");
        const tg__json *c = tg__json_get(&added->items[i], "content");
        if (!id || !id->is_int || id->integer < 0 || id->integer >= 10000000 || !c ||
            c->type != TG_JSON_STRING || !c->string[0]) {
            tg__fail(TG_ERR_VALUE, "%s: added_tokens[%d] has no id or content", fn, i);
            return -2;
        }
        if (id->integer > max)
            max = (int32_t)id->integer;
    }
    return max;
}

static int load_added(tg_tokenizer *t, const tg__json *added, const char *fn)
{
    for (int i = 0; added && added->type == TG_JSON_ARRAY && i < added->count; i++) {
        int32_t id = (int32_t)tg__json_get(&added->items[i], "id")->integer;
        const char *c = tg__json_get(&added->items[i], "content")->string;
        if (!t->bytes[id] && tg__tok_set(t, id, (const uint8_t *)c, strlen(c), fn) < 0)
            return -1;
        if (tg__tok_add_special(t, id, fn) < 0)
            return -1;
    }
    return 0;
}

static int load_model(tg_tokenizer *t, const tg__json *root, const tg__json *model, const char *fn)
{
    const tg__json *vocab = tg__json_get(model, "vocab"), *added = tg__json_get(root, "added_tokens");
    int rc = t->kind == TG__TOK_BYTE_LEVEL ? byte_level_setup(t, root, fn) : sp_setup(t, root, fn);
    if (rc < 0 || fill_vocab(t, vocab, fn) < 0 || load_added(t, added, fn) < 0 ||
        tg__tok_index(t, fn) < 0 || load_merges(t, tg__json_get(model, "merges"), fn) < 0)
        return -1;
    const tg__json *unk = tg__json_get(model, "unk_token");
    if (t->kind == TG__TOK_SENTENCEPIECE && unk && unk->type == TG_JSON_STRING) {
        t->unk_id = tg__tok_lookup(t, (const uint8_t *)unk->string, strlen(unk->string));
        if (t->unk_id < 0) {
            tg__fail(TG_ERR_VALUE, "%s: unk_token \"%.40s\" is not in the vocabulary", fn, unk->string);
            return -1;
        }
    }
    if (t->kind == TG__TOK_SENTENCEPIECE && !flag(model, "byte_fallback", false))
        for (int b = 0; b < 256; b++)
            t->byte_id[b] = -1;
    return 0;
}

tg_tokenizer *tg_tokenizer_load(const char *path)
{
    static const char fn[] = "tg_tokenizer_load";
    if (!path)
        return tg__fail(TG_ERR_NULL, "%s: path is NULL", fn);
    tg__json root;
    if (parse_json(path, &root, fn) < 0)
        return NULL;
    tg_tokenizer *t = NULL;
    const tg__json *model = root.type == TG_JSON_OBJECT ? tg__json_get(&root, "model") : NULL;
    const tg__json *pre = model ? tg__json_get(&root, "pre_tokenizer") : NULL;
    if (!model || model->type != TG_JSON_OBJECT || (tg__json_get(model, "type") && !is_type(model, "BPE")))
        tg__fail(TG_ERR_VALUE, "%s: %s has no BPE model (model.type %s)", fn, path,
                 model ? type_of(model) : "missing");
    else {
        int32_t max = vocab_max_id(tg__json_get(model, "vocab"), "model.vocab", fn);
        int32_t amax = max < 0 ? -2 : added_max_id(tg__json_get(&root, "added_tokens"), fn);
        bool byte_level = is_type(pre, "ByteLevel") || is_type(tg__json_get(&root, "decoder"), "ByteLevel");
        if (amax > -2)
            t = tg__tok_new(byte_level ? TG__TOK_BYTE_LEVEL : TG__TOK_SENTENCEPIECE,
                            (amax > max ? amax : max) + 1, fn);
        if (t && load_model(t, &root, model, fn) < 0) {
            tg_tokenizer_free(t);
            t = NULL;
        }
    }
    tg__json_free(&root);
    return t;
}
