/* Writing a tokenizer as a Hugging Face tokenizer.json: the BPE model's
 * vocabulary and merges, the added tokens, and the normalizer,
 * pre-tokenizer and decoder that make the file encode as this library does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tensor/internal.h"
#include "json.h"
#include "save_path.h"
#include "tokenizer_internal.h"

/* A token as the file writes it: byte-level text maps every byte through
 * GPT-2's table; SentencePiece text is written as it is. */
static void put_token(tg__jbuf *b, const tg_tokenizer *t, int32_t id)
{
    uint32_t n = t->len[id];
    char *s = malloc(4 * (size_t)n + 1);
    if (!s) {
        b->failed = true;
        return;
    }
    size_t w = 0;
    if (t->kind == TG__TOK_BYTE_LEVEL)
        for (uint32_t i = 0; i < n; i++)
            w += tg__put_utf8((uint8_t *)s + w, tg__byte_to_cp(t->bytes[id][i]));
    else {
        memcpy(s, t->bytes[id], n);
        w = n;
    }
    s[w] = 0;
    tg__jbuf_string(b, s);
    free(s);
}

static void put_added(tg__jbuf *b, const tg_tokenizer *t)
{
    tg__jbuf_puts(b, "  \"added_tokens\": [");
    for (int k = 0; k < t->n_specials; k++) {
        int32_t id = t->specials[k];
        char *s = malloc((size_t)t->len[id] + 1);
        if (!s) {
            b->failed = true;
            return;
        }
        memcpy(s, t->bytes[id], t->len[id]);
        s[t->len[id]] = 0;
        tg__jbuf_printf(b, "%s\n    {\"id\": %d, \"content\": ", k ? "," : "", (int)id);
        tg__jbuf_string(b, s);
        tg__jbuf_puts(b, ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, "
                         "\"normalized\": false, \"special\": true}");
        free(s);
    }
    tg__jbuf_puts(b, "\n  ],\n");
}

static void put_pipeline(tg__jbuf *b, const tg_tokenizer *t)
{
    if (t->kind == TG__TOK_BYTE_LEVEL) {
        tg__jbuf_puts(b, "  \"normalizer\": null,\n  \"pre_tokenizer\": {\"type\": \"ByteLevel\", ");
        tg__jbuf_printf(b, "\"add_prefix_space\": %s, \"trim_offsets\": true, \"use_regex\": true},\n",
                        t->add_prefix_space ? "true" : "false");
        tg__jbuf_puts(b, "  \"post_processor\": null,\n  \"decoder\": {\"type\": \"ByteLevel\", "
                         "\"add_prefix_space\": true, \"trim_offsets\": true, \"use_regex\": true},\n");
        return;
    }
    const char *scheme = !t->sp_prepend ? "never" : t->sp_first_only ? "first" : "always";
    tg__jbuf_puts(b, "  \"normalizer\": null,\n  \"pre_tokenizer\": {\"type\": \"Metaspace\", ");
    tg__jbuf_printf(b, "\"replacement\": \"\xE2\x96\x81\", \"prepend_scheme\": \"%s\", \"split\": %s},\n",
                    scheme, t->sp_split ? "true" : "false");
    tg__jbuf_puts(b, "  \"post_processor\": null,\n  \"decoder\": {\"type\": \"Sequence\", "
                     "\"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\": \"\xE2\x96\x81\"}, "
                     "\"content\": \" \"}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}");
    tg__jbuf_puts(b, t->sp_prepend ? ", {\"type\": \"Strip\", \"content\": \" \", \"start\": 1, "
                                     "\"stop\": 0}]},\n" : "]},\n");
}

static void put_model(tg__jbuf *b, const tg_tokenizer *t)
{
    bool fallback = false;
    for (int i = 0; i < 256 && t->kind == TG__TOK_SENTENCEPIECE; i++)
        fallback = fallback || t->byte_id[i] >= 0;
    tg__jbuf_puts(b, "  \"model\": {\n    \"type\": \"BPE\", \"dropout\": null, \"unk_token\": ");
    if (t->unk_id >= 0)
        put_token(b, t, t->unk_id);
    else
        tg__jbuf_puts(b, "null");
    tg__jbuf_puts(b, ", \"continuing_subword_prefix\": null, \"end_of_word_suffix\": null, ");
    tg__jbuf_printf(b, "\"fuse_unk\": %s, \"byte_fallback\": %s,\n    \"vocab\": {",
                    t->unk_id >= 0 ? "true" : "false", fallback ? "true" : "false");
    bool first = true;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        if (!t->bytes[id])
            continue;
        tg__jbuf_puts(b, first ? "\n      " : ",\n      ");
        put_token(b, t, id);
        tg__jbuf_printf(b, ": %d", (int)id);
        first = false;
    }
    tg__jbuf_puts(b, "\n    },\n    \"merges\": [");
    for (int32_t r = 0; r < t->n_merges; r++) {
        tg__jbuf_puts(b, r ? ",\n      [" : "\n      [");
        put_token(b, t, t->merges[r].a);
        tg__jbuf_puts(b, ", ");
        put_token(b, t, t->merges[r].b);
        tg__jbuf_puts(b, "]");
    }
    tg__jbuf_puts(b, "\n    ]\n  }\n}\n");
}

static int write_text(FILE *fp, const void *ctx)
{
    const tg__jbuf *b = ctx;
    return fwrite(b->data, 1, b->len, fp) == b->len ? 0 : -1;
}

int tg_tokenizer_save(const tg_tokenizer *t, const char *path)
{
    if (!t || !path) {
        tg__fail(TG_ERR_NULL, "tg_tokenizer_save: %s is NULL", !t ? "tok" : "path");
        return -1;
    }
    tg__save_dest d;
    if (tg__save_prepare(&d, "tg_tokenizer_save", path) < 0) {
        free(d.target);
        return -1;
    }
    tg__jbuf b = {0};
    tg__jbuf_puts(&b, "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n");
    put_added(&b, t);
    put_pipeline(&b, t);
    put_model(&b, t);
    int rc = -1;
    if (b.failed)
        tg__fail(TG_ERR_NOMEM, "tg_tokenizer_save: out of memory writing %s", path);
    else {
        tg__save_remove_stale(d.target);
        rc = tg__save_write(&d, write_text, &b);
    }
    free(d.target);
    tg__jbuf_free(&b);
    return rc;
}
