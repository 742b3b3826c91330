/* Encoding text into ids and decoding ids into text: special tokens cut
 * the text into segments, the pre-tokenizer cuts each segment into pieces,
 * and each piece's tokens merge by rank (tokenizer_bpe.c). A cache of the
 * pieces already seen in one call spares the merging of repeated words. */
#include <stdlib.h>
#include <string.h>

#include "../tensor/internal.h"
#include "tokenizer_internal.h"

typedef struct {
    int32_t *ids;
    size_t n, cap;
} idvec;

static bool reserve(idvec *v, size_t extra)
{
    if (v->n + extra <= v->cap)
        return true;
    size_t cap = v->cap ? v->cap : 256;
    while (cap < v->n + extra)
        cap *= 2;
    int32_t *ids = realloc(v->ids, cap * sizeof *ids);
    if (!ids)
        return false;
    v->ids = ids;
    v->cap = cap;
    return true;
}

/* Pieces of up to CACHE_PIECE bytes; keys point into the text being
 * encoded, values are runs of ids in `store`. */
enum { CACHE_PIECE = 48 };
typedef struct {
    const uint8_t *key;
    uint32_t klen, off, count;
} cache_entry;
typedef struct {
    cache_entry *slot;
    uint32_t mask;
    size_t used;
    idvec store;
} piece_cache;

static cache_entry *cache_find(piece_cache *c, const uint8_t *s, size_t n)
{
    uint32_t mask = c->mask;
    for (uint32_t i = (uint32_t)tg__hash_bytes(s, n) & mask;; i = (i + 1) & mask) {
        cache_entry *e = &c->slot[i];
        if (!e->key || (e->klen == n && memcmp(e->key, s, n) == 0))
            return e;
    }
}

/* Appends the ids of one piece of byte-level text to out. */
static bool encode_piece(const tg_tokenizer *t, piece_cache *c, const uint8_t *s, size_t n,
                         idvec *out)
{
    if (n == 1) {
        if (!reserve(out, 1))
            return false;
        out->ids[out->n++] = t->byte_id[s[0]];
        return true;
    }
    cache_entry *e = NULL;
    if (c->slot && n <= CACHE_PIECE) {
        e = cache_find(c, s, n);
        if (e->key) {
            if (!reserve(out, e->count))
                return false;
            memcpy(out->ids + out->n, c->store.ids + e->off, e->count * sizeof *out->ids);
            out->n += e->count;
            return true;
        }
    }
    if (!reserve(out, n))
        return false;
    int32_t *syms = out->ids + out->n;
    for (size_t i = 0; i < n; i++)
        syms[i] = t->byte_id[s[i]];
    size_t m = tg__bpe_merge(t, syms, n);
    if (m == (size_t)-1)
        return false;
    out->n += m;
    if (e && c->used < (size_t)c->mask / 4 * 3 && reserve(&c->store, m)) {
        memcpy(c->store.ids + c->store.n, syms, m * sizeof *syms);
        *e = (cache_entry){s, (uint32_t)n, (uint32_t)c->store.n, (uint32_t)m};
        c->store.n += m;
        c->used++;
    }
    return true;
}

static bool encode_byte_level(const tg_tokenizer *t, piece_cache *c, const uint8_t *s,
                              size_t len, idvec *out)
{
    for (size_t pos = 0; pos < len;) {
        size_t end = tg__pretok_gpt2(s, len, pos);
        if (!encode_piece(t, c, s + pos, end - pos, out))
            return false;
        pos = end;
    }
    return true;
}

/* add_prefix_space: the segment is encoded as if it began with a space,
 * from a copy that the cache must not point into. */
static bool encode_prefixed(const tg_tokenizer *t, const uint8_t *s, size_t len, idvec *out)
{
    uint8_t *p = malloc(len + 1);
    if (!p)
        return false;
    p[0] = ' ';
    memcpy(p + 1, s, len);
    bool ok = encode_byte_level(t, &(piece_cache){0}, p, len + 1, out);
    free(p);
    return ok;
}

enum { ENC_OK, ENC_NOMEM, ENC_BAD };
static const uint8_t META[3] = {0xE2, 0x96, 0x81}; /* U+2581, SentencePiece's space */

/* The ids of one piece of normalized SentencePiece text: its characters,
 * or their <0xNN> tokens, or the unknown token, then merged. */
static int encode_sp_piece(const tg_tokenizer *t, const uint8_t *s, size_t n, idvec *out)
{
    if (!reserve(out, n))
        return ENC_NOMEM;
    int32_t *syms = out->ids + out->n;
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        int len = tg__utf8_len(s + i, n - i);
        if (len == 0) {
            tg__fail(TG_ERR_VALUE, "tg_tokenizer_encode: invalid UTF-8 at byte %zu for a "
                     "SentencePiece tokenizer", i);
            return ENC_BAD;
        }
        int32_t id = tg__tok_lookup(t, s + i, (size_t)len);
        bool bytes_ok = true;
        for (int k = 0; k < len && id < 0; k++)
            bytes_ok = bytes_ok && t->byte_id[s[i + k]] >= 0;
        if (id >= 0)
            syms[m++] = id;
        else if (bytes_ok)
            for (int k = 0; k < len; k++)
                syms[m++] = t->byte_id[s[i + k]];
        else if (t->unk_id >= 0) {
            if (m == 0 || syms[m - 1] != t->unk_id) /* unknowns in a row fuse */
                syms[m++] = t->unk_id;
        } else {
            tg__fail(TG_ERR_VALUE, "tg_tokenizer_encode: character at byte %zu has no token, "
                     "no byte fallback and no unknown token", i);
            return ENC_BAD;
        }
        i += (size_t)len;
    }
    m = tg__bpe_merge(t, syms, m);
    if (m == (size_t)-1)
        return ENC_NOMEM;
    out->n += m;
    return ENC_OK;
}

/* A segment of SentencePiece text: spaces become U+2581, one is prepended,
 * and with Metaspace's split each U+2581 starts a piece. */
static int encode_sp(const tg_tokenizer *t, const uint8_t *s, size_t len, bool first, idvec *out)
{
    if (len == 0)
        return ENC_OK;
    uint8_t *buf = malloc(3 * len + 3);
    if (!buf)
        return ENC_NOMEM;
    size_t n = 0;
    if (t->sp_prepend && (first || !t->sp_first_only)) {
        memcpy(buf, META, 3);
        n = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (s[i] == ' ') {
            memcpy(buf + n, META, 3);
            n += 3;
        } else
            buf[n++] = s[i];
    }
    int status = ENC_OK;
    for (size_t start = 0, i = 0; status == ENC_OK && start < n; start = i) {
        i = start + 1;
        while (i < n && !(t->sp_split && i + 3 <= n && memcmp(buf + i, META, 3) == 0))
            i++;
        status = encode_sp_piece(t, buf + start, i - start, out);
    }
    free(buf);
    return status;
}

/* The earliest special token at or after pos (the longest among those at
 * the same place); next[k] remembers where special k occurs next. */
static size_t find_special(const tg_tokenizer *t, const uint8_t *s, size_t len, size_t pos,
                           size_t *next, int32_t *id)
{
    size_t best = len;
    *id = -1;
    for (int k = 0; k < t->n_specials; k++) {
        int32_t sid = t->specials[k];
        const uint8_t *tok = t->bytes[sid];
        size_t tl = t->len[sid];
        if (next[k] == SIZE_MAX || next[k] < pos) {
            next[k] = len;
            for (size_t i = pos; i + tl <= len; i++) {
                const uint8_t *hit = memchr(s + i, tok[0], len - tl + 1 - i);
                if (!hit)
                    break;
                i = (size_t)(hit - s);
                if (memcmp(hit, tok, tl) == 0) {
                    next[k] = i;
                    break;
                }
            }
        }
        if (next[k] < best || (next[k] == best && *id >= 0 && tl > t->len[*id])) {
            best = next[k];
            *id = next[k] < len ? sid : -1;
        }
    }
    return best;
}

static int encode_segment(const tg_tokenizer *t, piece_cache *c, const uint8_t *s, size_t len,
                          bool first, idvec *out)
{
    if (t->kind == TG__TOK_SENTENCEPIECE)
        return encode_sp(t, s, len, first, out);
    bool ok = t->add_prefix_space && len > 0 && s[0] != ' ' ? encode_prefixed(t, s, len, out)
                                                             : encode_byte_level(t, c, s, len, out);
    return ok ? ENC_OK : ENC_NOMEM;
}

static int encode_all(const tg_tokenizer *t, const uint8_t *s, size_t len, bool allow,
                      piece_cache *c, idvec *out)
{
    size_t *next = NULL;
    if (allow && t->n_specials > 0) {
        next = malloc((size_t)t->n_specials * sizeof *next);
        if (!next)
            return ENC_NOMEM;
        for (int k = 0; k < t->n_specials; k++)
            next[k] = SIZE_MAX; /* not searched yet */
    }
    int status;
    int32_t sid;
    size_t pos = 0;
    do {
        size_t at = next ? find_special(t, s, len, pos, next, &sid) : (sid = -1, len);
        status = encode_segment(t, c, s + pos, at - pos, pos == 0, out);
        if (status == ENC_OK && sid >= 0) {
            if (reserve(out, 1))
                out->ids[out->n++] = sid;
            else
                status = ENC_NOMEM;
            pos = at + t->len[sid];
        }
    } while (status == ENC_OK && sid >= 0);
    free(next);
    return status;
}

int64_t tg_tokenizer_encode(const tg_tokenizer *t, const char *text, size_t len, int flags,
                            int32_t **ids)
{
    if (ids)
        *ids = NULL;
    if (!t || !ids || (!text && len > 0)) {
        tg__fail(TG_ERR_NULL, "tg_tokenizer_encode: %s is NULL",
                 !t ? "tok" : !ids ? "ids" : "text");
        return -1;
    }
    if (flags & ~TG_TOKENIZER_ALLOW_SPECIAL) {
        tg__fail(TG_ERR_VALUE, "tg_tokenizer_encode: unknown flags 0x%x", (unsigned)flags);
        return -1;
    }
    piece_cache c = {0};
    if (len > 4096) { /* a slot for every 8 bytes, up to 2^18 (6 MB) */
        size_t slots = 1024;
        while (slots < len / 8 && slots < ((size_t)1 << 18))
            slots *= 2;
        c.slot = calloc(slots, sizeof *c.slot);
        c.mask = (uint32_t)slots - 1;
    }
    idvec out = {0};
    int status = encode_all(t, (const uint8_t *)(text ? text : ""), len,
                            flags & TG_TOKENIZER_ALLOW_SPECIAL, &c, &out);
    free(c.slot);
    free(c.store.ids);
    if (status == ENC_OK && !out.ids && !(out.ids = malloc(sizeof *out.ids)))
        status = ENC_NOMEM;
    if (status != ENC_OK) {
        if (status == ENC_NOMEM)
            tg__fail(TG_ERR_NOMEM, "tg_tokenizer_encode: out of memory for %zu bytes", len);
        free(out.ids);
        return -1;
    }
    *ids = out.ids;
    return (int64_t)out.n;
}

/* What id decodes to: SentencePiece writes U+2581 as a space and <0xNN> as
 * its byte. Returns the length written to o (room for t->len[id] bytes). */
static size_t decode_one(const tg_tokenizer *t, int32_t id, uint8_t *o)
{
    const uint8_t *s = t->bytes[id];
    uint32_t n = t->len[id];
    if (t->kind == TG__TOK_BYTE_LEVEL || t->special[id]) {
        memcpy(o, s, n);
        return n;
    }
    for (int b = 0; b < 256 && n == 6; b++)
        if (t->byte_id[b] == id) {
            o[0] = (uint8_t)b;
            return 1;
        }
    size_t w = 0;
    for (uint32_t i = 0; i < n;) {
        if (i + 3 <= n && memcmp(s + i, META, 3) == 0) {
            o[w++] = ' ';
            i += 3;
        } else
            o[w++] = s[i++];
    }
    return w;
}

char *tg_tokenizer_decode(const tg_tokenizer *t, const int32_t *ids, size_t n, size_t *len)
{
    if (len)
        *len = 0;
    if (!t || (!ids && n > 0))
        return tg__fail(TG_ERR_NULL, "tg_tokenizer_decode: %s is NULL", !t ? "tok" : "ids");
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab || !t->bytes[ids[i]])
            return tg__fail(TG_ERR_INDEX, "tg_tokenizer_decode: id %d at position %zu is not "
                            "in the vocabulary of %d", (int)ids[i], i, (int)t->n_vocab);
        total += t->len[ids[i]];
    }
    uint8_t *out = malloc(total + 1);
    if (!out)
        return tg__fail(TG_ERR_NOMEM, "tg_tokenizer_decode: out of memory for %zu bytes", total);
    size_t w = 0;
    for (size_t i = 0; i < n; i++)
        w += decode_one(t, ids[i], out + w);
    size_t skip = 0; /* SentencePiece's decoder strips the space it prepended */
    if (t->kind == TG__TOK_SENTENCEPIECE && t->sp_prepend && w > 0 && out[0] == ' ')
        skip = 1;
    memmove(out, out + skip, w - skip);
    out[w - skip] = 0;
    if (len)
        *len = w - skip;
    return (char *)out;
}

int32_t tg_tokenizer_vocab_size(const tg_tokenizer *t)
{
    if (!t) {
        tg__fail(TG_ERR_NULL, "tg_tokenizer_vocab_size: tok is NULL");
        return -1;
    }
    return t->n_vocab;
}

int32_t tg_tokenizer_token_id(const tg_tokenizer *t, const char *token)
{
    if (!t || !token) {
        tg__fail(TG_ERR_NULL, "tg_tokenizer_token_id: %s is NULL", !t ? "tok" : "token");
        return -1;
    }
    int32_t id = tg__tok_lookup(t, (const uint8_t *)token, strlen(token));
    if (id < 0)
        tg__fail(TG_ERR_VALUE, "tg_tokenizer_token_id: no token \"%.40s\"", token);
    return id;
}

/* GPT-2 writes each byte as a printable character: bytes that are printable
 * in Latin-1 stand for themselves, the others for U+0100 onwards in order. */
uint32_t tg__byte_to_cp(uint8_t b)
{
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE))
        return b;
    uint32_t k = 0;
    for (unsigned c = 0; c < b; c++)
        if (!((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE))
            k++;
    return 0x100 + k;
}

size_t tg__put_utf8(uint8_t *o, uint32_t cp)
{
    if (cp < 0x80) {
        o[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (uint8_t)(0xC0 | cp >> 6);
        o[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (uint8_t)(0xE0 | cp >> 12);
        o[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | cp >> 18);
    o[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}
