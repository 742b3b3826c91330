/* The BPE tokenizer's tables and its merge engine: ids to bytes, bytes to
 * ids and pairs to ranks in open-addressed hashes, and the merging of a
 * piece's tokens, lowest rank first, leftmost first among equal ranks. */
#include <stdlib.h>
#include <string.h>

#include "../tensor/internal.h"
#include "tokenizer_internal.h"

uint64_t tg__hash_bytes(const uint8_t *s, size_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
    }
    uint64_t w = 0;
    memcpy(&w, s + i, n - i);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    return h ^ (h >> 29);
}

static uint64_t hash_pair(int32_t a, int32_t b)
{
    uint64_t h = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) * 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 31);
}

/* A power of two at least twice n, so that probes stay short. */
static uint32_t table_size(size_t n)
{
    uint32_t size = 64;
    while (size < 2 * n)
        size *= 2;
    return size;
}

tg_tokenizer *tg__tok_new(tg__tok_kind kind, int32_t n_vocab, const char *fn)
{
    if (n_vocab <= 0 || n_vocab > 10000000)
        return tg__fail(TG_ERR_VALUE, "%s: a vocabulary of %d tokens", fn, (int)n_vocab);
    tg_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return tg__fail(TG_ERR_NOMEM, "%s: out of memory", fn);
    t->kind = kind;
    t->n_vocab = n_vocab;
    t->unk_id = -1;
    t->bytes = calloc((size_t)n_vocab, sizeof *t->bytes);
    t->len = calloc((size_t)n_vocab, sizeof *t->len);
    t->special = calloc((size_t)n_vocab, sizeof *t->special);
    if (!t->bytes || !t->len || !t->special) {
        tg_tokenizer_free(t);
        return tg__fail(TG_ERR_NOMEM, "%s: out of memory for %d tokens", fn, (int)n_vocab);
    }
    return t;
}

void tg_tokenizer_free(tg_tokenizer *t)
{
    if (!t)
        return;
    if (t->bytes)
        for (int32_t i = 0; i < t->n_vocab; i++)
            free(t->bytes[i]);
    free(t->bytes);
    free(t->len);
    free(t->special);
    free(t->vocab_slot);
    free(t->merge_slot);
    free(t->merges);
    free(t->specials);
    free(t);
}

int tg__tok_set(tg_tokenizer *t, int32_t id, const uint8_t *s, size_t n, const char *fn)
{
    if (id < 0 || id >= t->n_vocab) {
        tg__fail(TG_ERR_VALUE, "%s: id %d is outside the vocabulary of %d", fn, (int)id,
                 (int)t->n_vocab);
        return -1;
    }
    if (t->bytes[id]) {
        tg__fail(TG_ERR_VALUE, "%s: id %d is given to two tokens", fn, (int)id);
        return -1;
    }
    if (n == 0 || n > UINT32_MAX) {
        tg__fail(TG_ERR_VALUE, "%s: token %d is empty", fn, (int)id);
        return -1;
    }
    t->bytes[id] = malloc(n);
    if (!t->bytes[id]) {
        tg__fail(TG_ERR_NOMEM, "%s: out of memory", fn);
        return -1;
    }
    memcpy(t->bytes[id], s, n);
    t->len[id] = (uint32_t)n;
    return 0;
}

int32_t tg__tok_lookup(const tg_tokenizer *t, const uint8_t *s, size_t n)
{
    if (!t->vocab_slot)
        return -1;
    for (uint32_t i = (uint32_t)tg__hash_bytes(s, n) & t->vocab_mask;; i = (i + 1) & t->vocab_mask) {
        int32_t id = t->vocab_slot[i];
        if (id < 0)
            return -1;
        if (t->len[id] == n && memcmp(t->bytes[id], s, n) == 0)
            return id;
    }
}

/* SentencePiece's byte tokens are written <0xNN>. */
static int byte_token_value(const uint8_t *s, uint32_t n)
{
    static const char hex[] = "0123456789ABCDEF";
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
        return -1;
    const char *h1 = memchr(hex, s[3], 16), *h2 = memchr(hex, s[4], 16);
    if (!s[3] || !s[4] || !h1 || !h2)
        return -1;
    return (int)((h1 - hex) * 16 + (h2 - hex));
}

int tg__tok_insert(tg_tokenizer *t, int32_t id, const char *fn)
{
    int32_t other = tg__tok_lookup(t, t->bytes[id], t->len[id]);
    if (other >= 0) {
        tg__fail(TG_ERR_VALUE, "%s: token %d repeats the text of token %d", fn, (int)id,
                 (int)other);
        return -1;
    }
    uint32_t i = (uint32_t)tg__hash_bytes(t->bytes[id], t->len[id]) & t->vocab_mask;
    while (t->vocab_slot[i] >= 0)
        i = (i + 1) & t->vocab_mask;
    t->vocab_slot[i] = id;
    return 0;
}

int tg__tok_index(tg_tokenizer *t, const char *fn)
{
    uint32_t size = table_size((size_t)t->n_vocab);
    t->vocab_slot = malloc(size * sizeof *t->vocab_slot);
    if (!t->vocab_slot) {
        tg__fail(TG_ERR_NOMEM, "%s: out of memory", fn);
        return -1;
    }
    memset(t->vocab_slot, 0xFF, size * sizeof *t->vocab_slot);
    t->vocab_mask = size - 1;
    for (int b = 0; b < 256; b++)
        t->byte_id[b] = -1;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        if (!t->bytes[id])
            continue;
        if (tg__tok_insert(t, id, fn) < 0)
            return -1;
        int b = t->kind == TG__TOK_BYTE_LEVEL ? (t->len[id] == 1 ? t->bytes[id][0] : -1)
                                              : byte_token_value(t->bytes[id], t->len[id]);
        if (b >= 0 && t->byte_id[b] < 0)
            t->byte_id[b] = id;
    }
    if (t->kind == TG__TOK_BYTE_LEVEL)
        for (int b = 0; b < 256; b++)
            if (t->byte_id[b] < 0) {
                tg__fail(TG_ERR_VALUE, "%s: byte 0x%02X has no token", fn, b);
                return -1;
            }
    return 0;
}

static tg__merge *merge_find(const tg_tokenizer *t, int32_t a, int32_t b)
{
    if (!t->merge_slot)
        return NULL;
    for (uint32_t i = (uint32_t)hash_pair(a, b) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        tg__merge *m = &t->merge_slot[i];
        if (m->a < 0)
            return NULL;
        if (m->a == a && m->b == b)
            return m;
    }
}

static int merge_grow(tg_tokenizer *t, const char *fn)
{
    uint32_t size = table_size((size_t)t->n_merges + 1);
    tg__merge *list = realloc(t->merges, ((size_t)t->n_merges + 1) * sizeof *list);
    if (list)
        t->merges = list;
    if (!list || (t->merge_slot && size <= t->merge_mask + 1))
        goto done;
    tg__merge *slots = malloc(size * sizeof *slots);
    if (!slots) {
        list = NULL;
        goto done;
    }
    for (uint32_t i = 0; i < size; i++)
        slots[i].a = -1;
    free(t->merge_slot);
    t->merge_slot = slots;
    t->merge_mask = size - 1;
    for (int32_t r = 0; r < t->n_merges; r++) {
        const tg__merge *m = &t->merges[r];
        uint32_t i = (uint32_t)hash_pair(m->a, m->b) & t->merge_mask;
        while (slots[i].a >= 0)
            i = (i + 1) & t->merge_mask;
        slots[i] = *m;
    }
done:
    if (!list)
        tg__fail(TG_ERR_NOMEM, "%s: out of memory", fn);
    return list ? 0 : -1;
}

/* The merge (a, b) makes the token whose text is a's then b's; it must be
 * in the vocabulary. A pair listed twice keeps its first rank. */
int tg__tok_add_merge(tg_tokenizer *t, int32_t a, int32_t b, const char *fn)
{
    if (merge_find(t, a, b))
        return 0;
    size_t n = (size_t)t->len[a] + t->len[b];
    uint8_t stack[256], *cat = n <= sizeof stack ? stack : malloc(n);
    if (!cat) {
        tg__fail(TG_ERR_NOMEM, "%s: out of memory", fn);
        return -1;
    }
    memcpy(cat, t->bytes[a], t->len[a]);
    memcpy(cat + t->len[a], t->bytes[b], t->len[b]);
    int32_t id = tg__tok_lookup(t, cat, n);
    if (cat != stack)
        free(cat);
    if (id < 0) {
        tg__fail(TG_ERR_VALUE, "%s: merge %d of tokens %d and %d makes a token not in the "
                 "vocabulary", fn, (int)t->n_merges, (int)a, (int)b);
        return -1;
    }
    if (merge_grow(t, fn) < 0)
        return -1;
    tg__merge m = {a, b, t->n_merges, id};
    t->merges[t->n_merges++] = m;
    uint32_t i = (uint32_t)hash_pair(a, b) & t->merge_mask;
    while (t->merge_slot[i].a >= 0)
        i = (i + 1) & t->merge_mask;
    t->merge_slot[i] = m;
    return 0;
}

int tg__tok_add_special(tg_tokenizer *t, int32_t id, const char *fn)
{
    if (t->special[id])
        return 0;
    int32_t *s = realloc(t->specials, ((size_t)t->n_specials + 1) * sizeof *s);
    if (!s) {
        tg__fail(TG_ERR_NOMEM, "%s: out of memory", fn);
        return -1;
    }
    t->specials = s;
    s[t->n_specials++] = id;
    t->special[id] = true;
    return 0;
}

static int32_t pair_rank(const tg_tokenizer *t, int32_t a, int32_t b)
{
    const tg__merge *m = merge_find(t, a, b);
    return m ? m->rank : INT32_MAX;
}

/* Short pieces (most words): rescan the ranks of the few pairs each step. */
static size_t merge_short(const tg_tokenizer *t, int32_t *syms, size_t n)
{
    int32_t rank[64];
    for (size_t i = 0; i + 1 < n; i++)
        rank[i] = pair_rank(t, syms[i], syms[i + 1]);
    while (n > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < n; i++)
            if (rank[i] < rank[best])
                best = i;
        if (rank[best] == INT32_MAX)
            break;
        syms[best] = merge_find(t, syms[best], syms[best + 1])->id;
        memmove(syms + best + 1, syms + best + 2, (n - best - 2) * sizeof *syms);
        memmove(rank + best + 1, rank + best + 2, (n - best - 2 < 1 ? 0 : n - best - 3) * sizeof *rank);
        n--;
        if (best > 0)
            rank[best - 1] = pair_rank(t, syms[best - 1], syms[best]);
        if (best + 1 < n)
            rank[best] = pair_rank(t, syms[best], syms[best + 1]);
    }
    return n;
}

/* Long pieces: a heap of (rank, position) over a linked list of tokens;
 * an entry whose pair has changed since it was pushed is skipped. */
typedef struct { int32_t rank; uint32_t pos; int32_t a, b; } heap_item;

static bool item_less(heap_item x, heap_item y)
{
    return x.rank < y.rank || (x.rank == y.rank && x.pos < y.pos);
}

static void heap_push(heap_item *h, size_t *n, heap_item x)
{
    size_t i = (*n)++;
    while (i > 0 && item_less(x, h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = x;
}

static heap_item heap_pop(heap_item *h, size_t *n)
{
    heap_item top = h[0], x = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && item_less(h[c + 1], h[c]))
            c++;
        if (!item_less(h[c], x))
            break;
        h[i] = h[c];
        i = c;
    }
    h[i] = x;
    return top;
}

static void push_pair(const tg_tokenizer *t, heap_item *h, size_t *nh, const int32_t *syms,
                      uint32_t pos, uint32_t next)
{
    const tg__merge *m = merge_find(t, syms[pos], syms[next]);
    if (m)
        heap_push(h, nh, (heap_item){m->rank, pos, syms[pos], syms[next]});
}

static size_t merge_long(const tg_tokenizer *t, int32_t *syms, size_t n)
{
    uint32_t *next = malloc(n * sizeof *next), *prev = malloc(n * sizeof *prev);
    heap_item *h = malloc(3 * n * sizeof *h); /* n - 1 pairs, then two a merge */
    if (!next || !prev || !h) {
        free(next), free(prev), free(h);
        return (size_t)-1;
    }
    size_t nh = 0;
    for (size_t i = 0; i < n; i++) {
        next[i] = (uint32_t)i + 1;
        prev[i] = (uint32_t)i - 1;
    }
    for (size_t i = 0; i + 1 < n; i++)
        push_pair(t, h, &nh, syms, (uint32_t)i, (uint32_t)i + 1);
    while (nh > 0) {
        heap_item x = heap_pop(h, &nh);
        uint32_t p = x.pos, q = next[x.pos];
        if (syms[p] != x.a || q >= n || syms[q] != x.b)
            continue;  /* p was merged away (marked -1) or its pair changed */
        syms[p] = merge_find(t, x.a, x.b)->id;
        syms[q] = -1;
        next[p] = next[q];
        if (next[p] < n)
            prev[next[p]] = p;
        if (p > 0 && prev[p] != UINT32_MAX)
            push_pair(t, h, &nh, syms, prev[p], p);
        if (next[p] < n)
            push_pair(t, h, &nh, syms, p, next[p]);
    }
    size_t out = 0;
    for (size_t i = 0; i < n; i++)
        if (syms[i] >= 0)
            syms[out++] = syms[i];
    free(next), free(prev), free(h);
    return out;
}

size_t tg__bpe_merge(const tg_tokenizer *t, int32_t *syms, size_t n)
{
    if (n <= 1 || !t->merge_slot)
        return n;
    return n <= 64 ? merge_short(t, syms, n) : merge_long(t, syms, n);
}
