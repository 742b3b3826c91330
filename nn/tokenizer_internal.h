/* What the tokenizer's files share: the tokenizer struct, its hash maps,
 * the pre-tokenizer and the Unicode class tables. Internal; never
 * installed. */
#ifndef TG_TOKENIZER_INTERNAL_H
#define TG_TOKENIZER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensorgrad/tokenizer.h"

typedef struct { uint32_t lo, hi; } tg__cp_range;
extern const tg__cp_range tg__letter[], tg__number[], tg__space[];
extern const int tg__letter_count, tg__number_count, tg__space_count;

/* Character classes of the GPT-2 pattern; an invalid UTF-8 byte is OTHER. */
enum { TG__CH_LETTER, TG__CH_NUMBER, TG__CH_SPACE, TG__CH_OTHER };
/* The class and byte length of the character at s[0] (n > 0 bytes left). */
int tg__char_class(const uint8_t *s, size_t n, int *class_out);
/* The length in bytes of the valid UTF-8 character at s, or 0. */
int tg__utf8_len(const uint8_t *s, size_t n);
/* The end of the GPT-2 pattern's piece that starts at pos < len. */
size_t tg__pretok_gpt2(const uint8_t *s, size_t len, size_t pos);

uint64_t tg__hash_bytes(const uint8_t *s, size_t n);

typedef enum { TG__TOK_BYTE_LEVEL, TG__TOK_SENTENCEPIECE } tg__tok_kind;

/* One merge: the pair (a, b) becomes id, applied in order of rank. */
typedef struct {
    int32_t a, b, rank, id;
} tg__merge;

struct tg_tokenizer {
    tg__tok_kind kind;
    int32_t n_vocab;    /* ids are 0..n_vocab-1; an id may have no token */
    uint8_t **bytes;    /* [n_vocab] what each id decodes to (byte-level) or
                         * its vocabulary string (SentencePiece), or NULL */
    uint32_t *len;      /* [n_vocab] */
    bool *special;      /* [n_vocab] an added token, matched only when allowed */
    int32_t *vocab_slot; /* open-addressed ids hashed by their bytes, -1 empty */
    uint32_t vocab_mask;
    tg__merge *merge_slot; /* open-addressed by (a, b); a == -1 is empty */
    uint32_t merge_mask;
    tg__merge *merges;  /* [n_merges] in rank order, for saving */
    int32_t n_merges;
    int32_t byte_id[256]; /* the single-byte token (byte-level) or <0xNN>
                           * (SentencePiece byte fallback), or -1 */
    int32_t *specials;  /* [n_specials] ids of special tokens */
    int n_specials;
    int32_t unk_id;     /* SentencePiece: the unknown token or -1 */
    bool add_prefix_space; /* byte-level: a space before text not starting with one */
    bool sp_prepend;    /* SentencePiece: U+2581 before the text */
    bool sp_first_only; /* SentencePiece (Metaspace "first"): prepend to the first segment only */
    bool sp_split;      /* SentencePiece (Metaspace split): pieces start at U+2581 */
};

/* Building a tokenizer (tokenizer_bpe.c). Each returns 0, or -1 after
 * recording an error that names fn. */
tg_tokenizer *tg__tok_new(tg__tok_kind kind, int32_t n_vocab, const char *fn);
int tg__tok_set(tg_tokenizer *t, int32_t id, const uint8_t *s, size_t n, const char *fn);
/* After every tg__tok_set: fills the vocabulary hash and byte_id. */
int tg__tok_index(tg_tokenizer *t, const char *fn);
/* Adds id (already set) to the vocabulary hash that tg__tok_index made. */
int tg__tok_insert(tg_tokenizer *t, int32_t id, const char *fn);
int tg__tok_add_merge(tg_tokenizer *t, int32_t a, int32_t b, const char *fn);
int tg__tok_add_special(tg_tokenizer *t, int32_t id, const char *fn);
int32_t tg__tok_lookup(const tg_tokenizer *t, const uint8_t *s, size_t n);
/* Merges syms[0..n) in place by rank; returns the new count. */
size_t tg__bpe_merge(const tg_tokenizer *t, int32_t *syms, size_t n);

/* GPT-2's byte-to-unicode table: the code point that stands for byte b. */
uint32_t tg__byte_to_cp(uint8_t b);
size_t tg__put_utf8(uint8_t *o, uint32_t cp);

#endif
