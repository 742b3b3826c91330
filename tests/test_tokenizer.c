/* The tokenizers (include/tensorgrad/tokenizer.h): GPT-2's pre-tokenizing
 * split on edge cases, encode/decode round trips, training, tokenizer.json
 * written and read back, SentencePiece byte fallback, special tokens and
 * bad input. Every vocabulary here is made by the test itself. */
#include <unistd.h>

#include "testutil.h"
#include "../nn/tokenizer_internal.h"

/* The pieces of s joined by '|'. */
static char *split(const char *s, size_t len)
{
    static char out[512];
    size_t w = 0;
    for (size_t pos = 0; pos < len;) {
        size_t end = tg__pretok_gpt2((const uint8_t *)s, len, pos);
        ck_assert_uint_gt(end, pos);
        if (pos)
            out[w++] = '|';
        memcpy(out + w, s + pos, end - pos);
        w += end - pos;
        pos = end;
    }
    out[w] = 0;
    return out;
}
#define ck_assert_split(s, want) ck_assert_str_eq(split(s, sizeof(s) - 1), want)

START_TEST(split_keeps_contractions_and_leading_spaces)
{
    ck_assert_split("Hello world", "Hello| world");
    ck_assert_split("I'm can't we'll they're I've he'd it's", "I|'m| can|'t| we|'ll| they|'re| I|'ve| he|'d| it|'s");
    ck_assert_split("IT'S 'x", "IT|'|S| '|x"); /* upper case is not a contraction */
    ck_assert_split("abc123 4567 x", "abc|123| 4567| x");
    ck_assert_split("hi!? ...", "hi|!?| ...");
}
END_TEST

START_TEST(split_leaves_a_space_run_last_space_to_the_next_word)
{
    ck_assert_split("a   b", "a|  | b");
    ck_assert_split("  hello", " | hello");
    ck_assert_split("hi  ", "hi|  ");
    ck_assert_split("\n\n\nfoo", "\n\n|\n|foo");
    ck_assert_split("x \n y", "x| \n| y");
    ck_assert_split("\t", "\t");
}
END_TEST

START_TEST(split_uses_unicode_classes_for_emoji_cjk_and_white_space)
{
    ck_assert_split("hi \xF0\x9F\x98\x80\xF0\x9F\x98\x80!", "hi| \xF0\x9F\x98\x80\xF0\x9F\x98\x80!");
    ck_assert_split("\xE4\xBD\xA0\xE5\xA5\xBD ok", "\xE4\xBD\xA0\xE5\xA5\xBD| ok");
    ck_assert_split("caf\xC3\xA9 \xD9\xA3\xD9\xA4", "caf\xC3\xA9| \xD9\xA3\xD9\xA4"); /* é; Arabic-Indic 34 */
    /* U+0085 is White_Space; U+FEFF is not (a format character) */
    ck_assert_split("a\xC2\x85\xC2\x85" "b", "a|\xC2\x85|\xC2\x85|b");
    ck_assert_split("a\xEF\xBB\xBF" "b", "a|\xEF\xBB\xBF|b");
    ck_assert_split(" \xEF\xBB\xBF", " \xEF\xBB\xBF");
    ck_assert_split("a\xE3\x80\x80\xE3\x80\x80", "a|\xE3\x80\x80\xE3\x80\x80"); /* ideographic space */
}
END_TEST

START_TEST(split_treats_invalid_utf8_bytes_as_symbols)
{
    ck_assert_split("a\xFF\xFE" "b", "a|\xFF\xFE|b");
    ck_assert_split(" \xC3(", " \xC3(");       /* a lead byte without its continuation */
    ck_assert_split("x\xED\xA0\x80y", "x|\xED\xA0\x80|y"); /* a surrogate */
    ck_assert_split("\xE4\xBD", "\xE4\xBD");   /* truncated at the end */
}
END_TEST

static const char corpus_text[] =
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
    "First Citizen:\nYou are all resolved rather to die than to famish?\n\nAll:\nResolved. "
    "resolved.\n\nFirst Citizen:\nFirst, you know Caius Marcius is chief enemy to the people.\n"
    "We know't, we know't. 1234 12 \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x98\x80 caf\xC3\xA9\n";

static tg_tokenizer *trained(int32_t vocab_size)
{
    const char *specials[] = {"<|endoftext|>", NULL};
    tg_tokenizer *t = tg_tokenizer_train(corpus_text, sizeof corpus_text - 1, vocab_size, specials);
    ck_assert_msg(t != NULL, "%s", tg_error_message());
    return t;
}

static void assert_round_trip(const tg_tokenizer *t, const char *s, size_t len)
{
    int32_t *ids;
    int64_t n = tg_tokenizer_encode(t, s, len, 0, &ids);
    ck_assert_msg(n >= 0, "%s", tg_error_message());
    size_t back_len;
    char *back = tg_tokenizer_decode(t, ids, (size_t)n, &back_len);
    ck_assert_ptr_nonnull(back);
    ck_assert_uint_eq(back_len, len);
    ck_assert(memcmp(back, s, len) == 0);
    free(ids);
    free(back);
}

START_TEST(encode_decode_round_trips_random_bytes)
{
    tg_tokenizer *t = trained(330);
    uint64_t state = 12345;
    char buf[3000];
    for (int trial = 0; trial < 40; trial++) {
        size_t len = (size_t)(trial * 73 % 3000);
        for (size_t i = 0; i < len; i++) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            /* half the trials draw from a small alphabet, so merges apply */
            buf[i] = trial % 2 ? (char)(state >> 56) : " etaoin\n'"[(state >> 33) % 9];
        }
        assert_round_trip(t, buf, len);
    }
    assert_round_trip(t, corpus_text, sizeof corpus_text - 1);
    assert_round_trip(t, "", 0);
    tg_tokenizer_free(t);
}
END_TEST

START_TEST(training_merges_the_most_frequent_pair_first_and_compresses)
{
    tg_tokenizer *t = trained(300);
    ck_assert_int_eq(tg_tokenizer_vocab_size(t), 301);  /* 44 merges and the special */
    ck_assert_int_eq(t->n_merges, 44);
    /* " s" (from " speak", " speak.", ...) outnumbers every other pair */
    ck_assert_int_eq(t->merges[0].a, ' ');
    int32_t *ids;
    int64_t n = tg_tokenizer_encode(t, corpus_text, sizeof corpus_text - 1, 0, &ids);
    ck_assert_int_lt(n, (int64_t)(sizeof corpus_text - 1) * 3 / 4);
    free(ids);
    tg_tokenizer_free(t);
}
END_TEST

static void assert_same_encoding(const tg_tokenizer *a, const tg_tokenizer *b, const char *s,
                                 size_t len, int flags)
{
    int32_t *ia, *ib;
    int64_t na = tg_tokenizer_encode(a, s, len, flags, &ia);
    int64_t nb = tg_tokenizer_encode(b, s, len, flags, &ib);
    ck_assert_int_eq(na, nb);
    ck_assert(memcmp(ia, ib, (size_t)na * sizeof *ia) == 0);
    free(ia);
    free(ib);
}

START_TEST(training_is_deterministic_and_survives_tokenizer_json)
{
    tg_tokenizer *a = trained(320), *b = trained(320);
    ck_assert_int_eq(a->n_merges, b->n_merges);
    for (int32_t r = 0; r < a->n_merges; r++)
        ck_assert(a->merges[r].a == b->merges[r].a && a->merges[r].b == b->merges[r].b);
    char path[] = "/tmp/tg_tok_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_int_eq(tg_tokenizer_save(a, path), 0);
    tg_tokenizer *c = tg_tokenizer_load(path);
    unlink(path);
    ck_assert_msg(c != NULL, "%s", tg_error_message());
    ck_assert_int_eq(tg_tokenizer_vocab_size(c), tg_tokenizer_vocab_size(a));
    ck_assert_int_eq(c->n_merges, a->n_merges);
    const char text[] = "Speak, speak. <|endoftext|>resolved \xFF\x80 you know't";
    assert_same_encoding(a, c, text, sizeof text - 1, 0);
    assert_same_encoding(a, c, text, sizeof text - 1, TG_TOKENIZER_ALLOW_SPECIAL);
    assert_same_encoding(a, b, corpus_text, sizeof corpus_text - 1, 0);
    tg_tokenizer_free(a);
    tg_tokenizer_free(b);
    tg_tokenizer_free(c);
}
END_TEST

START_TEST(special_tokens_are_matched_only_when_allowed)
{
    tg_tokenizer *t = trained(300);
    int32_t eot = tg_tokenizer_token_id(t, "<|endoftext|>");
    ck_assert_int_eq(eot, 300);
    const char text[] = "hear<|endoftext|> me";
    int32_t *ids;
    int64_t n = tg_tokenizer_encode(t, text, sizeof text - 1, TG_TOKENIZER_ALLOW_SPECIAL, &ids);
    int found = 0;
    for (int64_t i = 0; i < n; i++)
        found += ids[i] == eot;
    ck_assert_int_eq(found, 1);
    free(ids);
    n = tg_tokenizer_encode(t, text, sizeof text - 1, 0, &ids);
    for (int64_t i = 0; i < n; i++)
        ck_assert_int_ne(ids[i], eot);
    free(ids);
    assert_round_trip(t, text, sizeof text - 1);
    tg_tokenizer_free(t);
}
END_TEST

/* Writes text to a new temporary file; its path in path (room for 32). */
static void write_temp(char *path, const char *text)
{
    strcpy(path, "/tmp/tg_tok_XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

/* Llama 2's normalizer: a U+2581 prepended, spaces written U+2581. */
static const char llama2_pipeline[] =
    " \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": ["
    "{\"type\": \"Prepend\", \"prepend\": \"\xE2\x96\x81\"},"
    "{\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\xE2\x96\x81\"}]},"
    " \"pre_tokenizer\": null,";

/* A Llama-2-style tokenizer.json: U+2581 for spaces, <0xNN> byte tokens. */
static char *sp_json_with(const char *pipeline, const char *merges)
{
    static char buf[16384];
    int w = snprintf(buf, sizeof buf,
        "{\"added_tokens\": [{\"id\": 0, \"content\": \"<unk>\", \"special\": true},"
        " {\"id\": 1, \"content\": \"<s>\", \"special\": true}],%s"
        " \"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"byte_fallback\": true,"
        " \"fuse_unk\": true, \"vocab\": {\"<unk>\": 0, \"<s>\": 1", pipeline);
    for (int b = 0; b < 256; b++)
        w += snprintf(buf + w, sizeof buf - (size_t)w, ", \"<0x%02X>\": %d", b, 2 + b);
    snprintf(buf + w, sizeof buf - (size_t)w,
             ", \"\xE2\x96\x81\": 258, \"h\": 259, \"i\": 260, \"hi\": 261, \"\xE2\x96\x81hi\": 262},"
             " \"merges\": [%s]}}", merges);
    return buf;
}

static char *sp_json(const char *merges) { return sp_json_with(llama2_pipeline, merges); }

START_TEST(sentencepiece_falls_back_to_bytes_and_strips_its_space)
{
    char path[32];
    write_temp(path, sp_json("\"h i\", \"\xE2\x96\x81 hi\""));
    tg_tokenizer *t = tg_tokenizer_load(path);
    unlink(path);
    ck_assert_msg(t != NULL, "%s", tg_error_message());
    const char text[] = "hi hi\xE4\xBD\xA0";  /* 你 has no token */
    int32_t *ids;
    int64_t n = tg_tokenizer_encode(t, text, sizeof text - 1, 0, &ids);
    const int32_t want[] = {262, 262, 2 + 0xE4, 2 + 0xBD, 2 + 0xA0};
    ck_assert_int_eq(n, 5);
    ck_assert(memcmp(ids, want, sizeof want) == 0);
    char *back = tg_tokenizer_decode(t, ids, (size_t)n, NULL);
    ck_assert_str_eq(back, text);
    free(back);
    free(ids);
    n = tg_tokenizer_encode(t, "<s>hi", 5, TG_TOKENIZER_ALLOW_SPECIAL, &ids);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(ids[0], 1);
    ck_assert_int_eq(ids[1], 262);
    free(ids);
    ck_assert_int_eq(tg_tokenizer_encode(t, "\xFF", 1, 0, &ids), -1);
    ck_assert_ptr_null(ids);
    ck_assert_error(TG_ERR_VALUE, "tg_tokenizer_encode", "UTF-8");
    tg_tokenizer_free(t);
}
END_TEST

/* Newer files: a Metaspace pre-tokenizer that prepends to the first
 * segment only and starts a piece at each U+2581. */
START_TEST(sentencepiece_metaspace_prepends_first_and_saves_back)
{
    char path[32];
    write_temp(path, sp_json_with(" \"normalizer\": null, \"pre_tokenizer\": {\"type\": "
                                  "\"Metaspace\", \"replacement\": \"\xE2\x96\x81\", "
                                  "\"prepend_scheme\": \"first\", \"split\": true},",
                                  "\"h i\", \"\xE2\x96\x81 hi\""));
    tg_tokenizer *t = tg_tokenizer_load(path);
    unlink(path);
    ck_assert_msg(t != NULL, "%s", tg_error_message());
    int32_t *ids;
    int64_t n = tg_tokenizer_encode(t, "hi<s>hi hi", 10, TG_TOKENIZER_ALLOW_SPECIAL, &ids);
    const int32_t want[] = {262, 1, 261, 262}; /* no U+2581 after <s> */
    ck_assert_int_eq(n, 4);
    ck_assert(memcmp(ids, want, sizeof want) == 0);
    free(ids);
    char saved[] = "/tmp/tg_tok_XXXXXX";
    int fd = mkstemp(saved);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_int_eq(tg_tokenizer_save(t, saved), 0);
    tg_tokenizer *back = tg_tokenizer_load(saved);
    unlink(saved);
    ck_assert_msg(back != NULL, "%s", tg_error_message());
    const char text[] = "hi  hi\xE4\xBD\xA0<s>hi";
    assert_same_encoding(t, back, text, sizeof text - 1, TG_TOKENIZER_ALLOW_SPECIAL);
    assert_round_trip(back, text, sizeof text - 1);
    tg_tokenizer_free(t);
    tg_tokenizer_free(back);
}
END_TEST

START_TEST(a_merge_naming_an_unknown_token_fails_the_load)
{
    char path[32];
    write_temp(path, sp_json("\"h i\", \"\xE2\x96\x81 zz\""));
    ck_assert_ptr_null(tg_tokenizer_load(path));
    ck_assert_error(TG_ERR_VALUE, "tg_tokenizer_load", "merge 1", "zz", "not in the vocabulary");
    unlink(path);
    write_temp(path, sp_json("\"h hi\""));
    ck_assert_ptr_null(tg_tokenizer_load(path));
    ck_assert_error(TG_ERR_VALUE, "tg_tokenizer_load", "merge 0", "makes a token not in");
    unlink(path);
}
END_TEST

START_TEST(truncated_or_malformed_files_fail_cleanly)
{
    char path[32], *full = strdup(sp_json("\"h i\""));
    for (size_t cut = 0; cut < strlen(full); cut += 997) {
        full[cut] = 0;  /* the file cut short */
        write_temp(path, full);
        ck_assert_ptr_null(tg_tokenizer_load(path));
        ck_assert_error(TG_ERR_VALUE, "tg_tokenizer_load", "not JSON");
        unlink(path);
        strcpy(full, sp_json("\"h i\""));
    }
    free(full);
    write_temp(path, "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}");
    ck_assert_ptr_null(tg_tokenizer_load(path));
    ck_assert_error(TG_ERR_VALUE, "tg_tokenizer_load", "no BPE model", "WordPiece");
    unlink(path);
    write_temp(path, "{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\","
                     " \"vocab\": {\"a\": 0, \"b\": 0}, \"merges\": []}}");
    ck_assert_ptr_null(tg_tokenizer_load(path));
    ck_assert_error(TG_ERR_VALUE, "tg_tokenizer_load", "id 0 is given to two tokens");
    unlink(path);
    write_temp(path, "{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\","
                     " \"vocab\": {\"a\": 0}, \"merges\": []}}");
    ck_assert_ptr_null(tg_tokenizer_load(path));
    ck_assert_error(TG_ERR_VALUE, "tg_tokenizer_load", "byte 0x00 has no token");
    unlink(path);
    ck_assert_ptr_null(tg_tokenizer_load("/nonexistent/tokenizer.json"));
    ck_assert_error(TG_ERR_IO, "tg_tokenizer_load", "/nonexistent/tokenizer.json");
    ck_assert_ptr_null(tg_tokenizer_load_gpt2("/nonexistent/encoder.json", "vocab.bpe"));
    ck_assert_error(TG_ERR_IO, "tg_tokenizer_load_gpt2");
}
END_TEST

START_TEST(bad_arguments_are_refused_with_the_function_named)
{
    tg_tokenizer *t = trained(260);
    int32_t *ids = (int32_t *)1;
    ck_assert_int_eq(tg_tokenizer_encode(NULL, "a", 1, 0, &ids), -1);
    ck_assert_ptr_null(ids);
    ck_assert_error(TG_ERR_NULL, "tg_tokenizer_encode", "tok");
    ck_assert_int_eq(tg_tokenizer_encode(t, NULL, 1, 0, &ids), -1);
    ck_assert_error(TG_ERR_NULL, "tg_tokenizer_encode", "text");
    ck_assert_int_eq(tg_tokenizer_encode(t, "a", 1, 8, &ids), -1);
    ck_assert_error(TG_ERR_VALUE, "tg_tokenizer_encode", "flags");
    const int32_t bad[] = {65, 261};
    ck_assert_ptr_null(tg_tokenizer_decode(t, bad, 2, NULL));
    ck_assert_error(TG_ERR_INDEX, "tg_tokenizer_decode", "id 261 at position 1");
    const int32_t neg[] = {-1};
    ck_assert_ptr_null(tg_tokenizer_decode(t, neg, 1, NULL));
    ck_assert_error(TG_ERR_INDEX, "tg_tokenizer_decode", "id -1");
    ck_assert_ptr_null(tg_tokenizer_train("abc", 3, 255, NULL));
    ck_assert_error(TG_ERR_VALUE, "tg_tokenizer_train", "vocab_size 255");
    const char *twice[] = {"<a>", "<a>", NULL};
    ck_assert_ptr_null(tg_tokenizer_train("abc", 3, 300, twice));
    ck_assert_error(TG_ERR_VALUE, "tg_tokenizer_train", "twice");
    ck_assert_int_eq(tg_tokenizer_token_id(t, "<nope>"), -1);
    ck_assert_error(TG_ERR_VALUE, "tg_tokenizer_token_id", "<nope>");
    ck_assert_int_eq(tg_tokenizer_save(NULL, "/tmp/x.json"), -1);
    ck_assert_error(TG_ERR_NULL, "tg_tokenizer_save", "tok");
    ck_assert_int_eq(tg_tokenizer_save(t, "/nonexistent/dir/tokenizer.json"), -1);
    ck_assert_error(TG_ERR_IO, "tg_tokenizer_save");
    ck_assert_int_eq(tg_tokenizer_vocab_size(NULL), -1);
    ck_assert_error(TG_ERR_NULL, "tg_tokenizer_vocab_size");
    tg_tokenizer_free(NULL);
    tg_tokenizer_free(t);
}
END_TEST

/* BPE by its definition: merge the leftmost pair of lowest rank until none
 * is left, looking the ranks up in the merge list. */
static size_t naive_merge(const tg_tokenizer *t, int32_t *syms, size_t n)
{
    for (;;) {
        int32_t best_rank = INT32_MAX;
        size_t at = 0;
        for (size_t i = 0; i + 1 < n; i++)
            for (int32_t r = 0; r < best_rank && r < t->n_merges; r++)
                if (t->merges[r].a == syms[i] && t->merges[r].b == syms[i + 1]) {
                    best_rank = r;
                    at = i;
                }
        if (best_rank == INT32_MAX)
            return n;
        syms[at] = t->merges[best_rank].id;
        memmove(syms + at + 1, syms + at + 2, (n - at - 2) * sizeof *syms);
        n--;
    }
}

START_TEST(long_pieces_merge_as_the_definition_says)
{
    /* pieces past 64 bytes take the heap path, shorter ones a rescan */
    tg_tokenizer *t = trained(330);
    char run[300];
    int32_t syms[300];
    uint64_t state = 7;
    for (int len = 2; len < (int)sizeof run; len += 23) {
        for (int i = 0; i < len; i++) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            run[i] = "Speakresolvd"[(state >> 33) % (len % 2 ? 5 : 12)];
        }
        int32_t *ids;
        int64_t n = tg_tokenizer_encode(t, run, (size_t)len, 0, &ids);
        ck_assert_int_ge(n, 1);
        for (int i = 0; i < len; i++)
            syms[i] = (uint8_t)run[i];
        size_t want = naive_merge(t, syms, (size_t)len);
        ck_assert_int_eq(n, (int64_t)want);
        ck_assert(memcmp(ids, syms, want * sizeof *syms) == 0);
        free(ids);
    }
    tg_tokenizer_free(t);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tokenizer");
    TCase *tc = tcase_checked("tokenizer");
    tcase_add_test(tc, split_keeps_contractions_and_leading_spaces);
    tcase_add_test(tc, split_leaves_a_space_run_last_space_to_the_next_word);
    tcase_add_test(tc, split_uses_unicode_classes_for_emoji_cjk_and_white_space);
    tcase_add_test(tc, split_treats_invalid_utf8_bytes_as_symbols);
    tcase_add_test(tc, encode_decode_round_trips_random_bytes);
    tcase_add_test(tc, training_merges_the_most_frequent_pair_first_and_compresses);
    tcase_add_test(tc, training_is_deterministic_and_survives_tokenizer_json);
    tcase_add_test(tc, special_tokens_are_matched_only_when_allowed);
    tcase_add_test(tc, sentencepiece_falls_back_to_bytes_and_strips_its_space);
    tcase_add_test(tc, sentencepiece_metaspace_prepends_first_and_saves_back);
    tcase_add_test(tc, a_merge_naming_an_unknown_token_fails_the_load);
    tcase_add_test(tc, truncated_or_malformed_files_fail_cleanly);
    tcase_add_test(tc, bad_arguments_are_refused_with_the_function_named);
    tcase_add_test(tc, long_pieces_merge_as_the_definition_says);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
