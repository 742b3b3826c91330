/* Training a byte-level BPE vocabulary on a corpus, as minbpe does: the
 * pairs of adjacent tokens are counted inside the pre-tokenizer's pieces,
 * each distinct piece once, weighted by how often it occurs. */
#include <stdlib.h>
#include <string.h>

#include "../tensor/internal.h"
#include "json.h"
#include "tokenizer_internal.h"

static const char train_fn[] = "tg_tokenizer_train";

/* The corpus as its distinct pieces: words[off[i] .. off[i] + n[i]) are
 * piece i's current ids, count[i] how often it occurs. */
typedef struct {
    int32_t *ids;
    size_t *off, *n;
    int64_t *count;
    size_t pieces;
} corpus;

static void corpus_free(corpus *c)
{
    free(c->ids), free(c->off), free(c->n), free(c->count);
}

/* Splits text and collects distinct pieces with a hash of their bytes. */
static int corpus_build(corpus *c, const uint8_t *s, size_t len)
{
    size_t cap = 64;
    while (cap < len / 2 + 64)
        cap *= 2;
    int32_t *slot = malloc(cap * sizeof *slot);
    const uint8_t **start = malloc((len + 1) * sizeof *start);
    c->ids = malloc((len + 1) * sizeof *c->ids);
    c->off = malloc((len + 1) * sizeof *c->off);
    c->n = malloc((len + 1) * sizeof *c->n);
    c->count = malloc((len + 1) * sizeof *c->count);
    if (!slot || !start || !c->ids || !c->off || !c->n || !c->count) {
        free(slot), free(start);
        return -1;
    }
    memset(slot, 0xFF, cap * sizeof *slot);
    size_t used = 0;
    for (size_t pos = 0; pos < len;) {
        size_t end = tg__pretok_gpt2(s, len, pos), n = end - pos;
        uint32_t i = (uint32_t)tg__hash_bytes(s + pos, n) & (uint32_t)(cap - 1);
        for (; slot[i] >= 0; i = (i + 1) & (uint32_t)(cap - 1))
            if (c->n[slot[i]] == n && memcmp(start[slot[i]], s + pos, n) == 0)
                break;
        if (slot[i] < 0) {
            slot[i] = (int32_t)c->pieces;
            start[c->pieces] = s + pos;
            c->off[c->pieces] = used;
            c->n[c->pieces] = n;
            c->count[c->pieces++] = 0;
            for (size_t k = 0; k < n; k++)
                c->ids[used++] = s[pos + k];
        }
        c->count[slot[i]]++;
        pos = end;
    }
    free(slot), free(start);
    return 0;
}

typedef struct { int32_t a, b; int64_t count; } pair_count;

/* The most frequent pair (ties: smaller a, then smaller b), or count 0.
 * table has room for every pair of the corpus; `touched` lists the slots
 * used, to clear them for the next round. */
static pair_count best_pair(const corpus *c, pair_count *table, uint32_t mask, uint32_t *touched)
{
    size_t nt = 0;
    for (size_t p = 0; p < c->pieces; p++) {
        const int32_t *w = c->ids + c->off[p];
        for (size_t k = 0; k + 1 < c->n[p]; k++) {
            uint64_t h = ((uint64_t)(uint32_t)w[k] << 32 | (uint32_t)w[k + 1]) * 0x9E3779B97F4A7C15ull;
            uint32_t i = (uint32_t)(h >> 32) & mask;
            while (table[i].count && (table[i].a != w[k] || table[i].b != w[k + 1]))
                i = (i + 1) & mask;
            if (!table[i].count) {
                table[i] = (pair_count){w[k], w[k + 1], 0};
                touched[nt++] = i;
            }
            table[i].count += c->count[p];
        }
    }
    pair_count best = {0, 0, 0};
    for (size_t k = 0; k < nt; k++) {
        pair_count x = table[touched[k]];
        if (x.count > best.count || (x.count == best.count &&
                                     (x.a < best.a || (x.a == best.a && x.b < best.b))))
            best = x;
        table[touched[k]].count = 0;
    }
    return best;
}

/* Replaces each (a, b) in the corpus, left to right, by id. */
static void apply_merge(corpus *c, int32_t a, int32_t b, int32_t id)
{
    for (size_t p = 0; p < c->pieces; p++) {
        int32_t *w = c->ids + c->off[p];
        size_t n = c->n[p], out = 0;
        for (size_t k = 0; k < n; k++) {
            if (k + 1 < n && w[k] == a && w[k + 1] == b) {
                w[out++] = id;
                k++;
            } else
                w[out++] = w[k];
        }
        c->n[p] = out;
    }
}

/* The token a then b; a new id unless some merge already made that text. */
static int32_t merged_token(tg_tokenizer *t, int32_t a, int32_t b, int32_t *next_id)
{
    size_t n = (size_t)t->len[a] + t->len[b];
    uint8_t *cat = malloc(n);
    if (!cat)
        return -1;
    memcpy(cat, t->bytes[a], t->len[a]);
    memcpy(cat + t->len[a], t->bytes[b], t->len[b]);
    int32_t id = tg__tok_lookup(t, cat, n);
    if (id < 0) {
        id = *next_id;
        if (tg__tok_set(t, id, cat, n, train_fn) < 0 || tg__tok_insert(t, id, train_fn) < 0)
            id = -1;
        else
            (*next_id)++;
    }
    free(cat);
    return id;
}

static int check_specials(const char *const *specials, int *count)
{
    *count = 0;
    for (int i = 0; specials && specials[i]; i++, (*count)++) {
        if (!specials[i][0] || !tg__utf8_valid(specials[i])) {
            tg__fail(TG_ERR_VALUE, "%s: special %d is empty or not UTF-8", train_fn, i);
            return -1;
        }
        for (int j = 0; j < i; j++)
            if (strcmp(specials[i], specials[j]) == 0) {
                tg__fail(TG_ERR_VALUE, "%s: special \"%.40s\" is given twice", train_fn, specials[i]);
                return -1;
            }
    }
    return 0;
}

/* The merges, learnt on c until the vocabulary holds vocab_size ids. */
static int learn(tg_tokenizer *t, corpus *c, int32_t vocab_size, int32_t *next_id)
{
    size_t symbols = 0;
    for (size_t p = 0; p < c->pieces; p++)
        symbols += c->n[p];
    uint32_t size = 64;
    while (size < 2 * symbols)
        size *= 2;
    pair_count *table = calloc(size, sizeof *table);
    uint32_t *touched = malloc((symbols + 1) * sizeof *touched);
    int rc = table && touched ? 0 : -1;
    if (rc < 0)
        tg__fail(TG_ERR_NOMEM, "%s: out of memory", train_fn);
    while (rc == 0 && *next_id < vocab_size) {
        pair_count best = best_pair(c, table, size - 1, touched);
        if (best.count == 0)
            break;
        int32_t id = merged_token(t, best.a, best.b, next_id);
        if (id < 0 || tg__tok_add_merge(t, best.a, best.b, train_fn) < 0)
            rc = -1;
        else
            apply_merge(c, best.a, best.b, id);
    }
    free(table), free(touched);
    return rc;
}

tg_tokenizer *tg_tokenizer_train(const char *text, size_t len, int32_t vocab_size,
                                 const char *const *specials)
{
    int n_specials;
    if (!text && len > 0)
        return tg__fail(TG_ERR_NULL, "%s: text is NULL", train_fn);
    if (vocab_size < 256 || vocab_size > 1000000)
        return tg__fail(TG_ERR_VALUE, "%s: vocab_size %d is outside [256, 1000000]", train_fn,
                        (int)vocab_size);
    if (check_specials(specials, &n_specials) < 0)
        return NULL;
    tg_tokenizer *t = tg__tok_new(TG__TOK_BYTE_LEVEL, vocab_size + n_specials, train_fn);
    if (!t)
        return NULL;
    for (int b = 0; b < 256; b++)
        if (tg__tok_set(t, b, &(uint8_t){(uint8_t)b}, 1, train_fn) < 0)
            goto fail;
    if (tg__tok_index(t, train_fn) < 0)
        goto fail;
    corpus c = {0};
    int32_t next_id = 256;
    if (corpus_build(&c, (const uint8_t *)(text ? text : ""), len) < 0) {
        corpus_free(&c);
        tg__fail(TG_ERR_NOMEM, "%s: out of memory for %zu bytes", train_fn, len);
        goto fail;
    }
    int rc = learn(t, &c, vocab_size, &next_id);
    corpus_free(&c);
    for (int i = 0; rc == 0 && i < n_specials; i++) {
        const char *sp = specials[i];
        int32_t id = next_id++;
        rc = tg__tok_set(t, id, (const uint8_t *)sp, strlen(sp), train_fn) < 0 ||
                     tg__tok_insert(t, id, train_fn) < 0 || tg__tok_add_special(t, id, train_fn) < 0
                 ? -1 : 0;
    }
    if (rc < 0)
        goto fail;
    t->n_vocab = next_id; /* fewer when the corpus ran out of pairs */
    return t;
fail:
    tg_tokenizer_free(t);
    return NULL;
}
