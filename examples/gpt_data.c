/* gpt's data (gpt_data.h): the made-up addition task and --data text files,
 * read with every limit checked before training starts, and the accuracy
 * a model reaches on the held-out problems. */
#include "gpt_data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* --data files larger than this are refused: the text is held in memory as
 * one byte per character, and a CPU run of these models reads far less. */
#define MAX_DATA_BYTES ((int64_t)1 << 30)

void dataset_set_vocab(dataset *d, const unsigned char *chars, int n)
{
    d->vocab.size = n;
    memset(d->ids, -1, sizeof d->ids);
    for (int i = 0; i < n; i++) {
        d->vocab.chars[i] = chars[i];
        d->ids[chars[i]] = i;
    }
}

static const char task_chars[] = "\n+0123456789=";

void dataset_use_task(dataset *d)
{
    d->task = true;
    dataset_set_vocab(d, (const unsigned char *)task_chars, (int)strlen(task_chars));
}

/* The problems whose hash ends in 0. */
static bool held_out(int64_t a, int64_t b)
{
    uint64_t h = (uint64_t)(a * 1000 + b) * 0x9E3779B97F4A7C15ull;
    return (h >> 32) % 10 == 0;
}

void make_problem(tg_rng *rng, bool want_held_out, char text[PROBLEM_LEN + 1])
{
    int64_t a, b;
    do {
        a = (int64_t)(tg_rng_uniform01(rng) * 1000);
        b = (int64_t)(tg_rng_uniform01(rng) * 1000);
    } while (held_out(a, b) != want_held_out);
    int64_t s = a + b;
    snprintf(text, PROBLEM_LEN + 1, "%03d+%03d=%c%c%c%c\n", (int)a, (int)b, '0' + (int)(s % 10),
             '0' + (int)(s / 10 % 10), '0' + (int)(s / 100 % 10), '0' + (int)(s / 1000));
}

void task_row(const dataset *d, tg_rng *rng, bool test, int64_t T, int64_t *x, int64_t *y)
{
    char p[PROBLEM_LEN + 1];
    make_problem(rng, test, p);
    for (int64_t t = 0; t < T; t++) {
        x[t] = t < PROBLEM_LEN - 1 ? d->ids[(unsigned char)p[t]] : 0;
        y[t] = t >= PROMPT_LEN - 1 && t < PROBLEM_LEN - 1 ? d->ids[(unsigned char)p[t + 1]] : -1;
    }
}

void text_row(const dataset *d, tg_rng *rng, int64_t T, int64_t *x, int64_t *y)
{
    int64_t at = (int64_t)(tg_rng_uniform01(rng) * (double)(d->n_train - T));
    for (int64_t t = 0; t < T; t++) {
        x[t] = d->text[at + t];
        y[t] = d->text[at + t + 1];
    }
}

/* Reads a --data file: its bytes, or NULL with *problem saying why. Stops
 * at the first chunk holding a NUL byte (binary data, or /dev/zero) and past
 * MAX_DATA_BYTES; a regular file's size is checked before anything is read. */
static unsigned char *read_text(const char *path, int64_t *size, const char **problem)
{
    FILE *f = fopen(path, "rb");
    struct stat st;
    if (!f || fstat(fileno(f), &st) < 0) {
        *problem = strerror(errno);
        return f ? fclose(f), NULL : NULL;
    }
    *problem = S_ISDIR(st.st_mode) ? "it is a directory"
               : S_ISREG(st.st_mode) && st.st_size > MAX_DATA_BYTES ? "it is larger than 1 GiB"
               : NULL;
    unsigned char *buf = NULL;
    int64_t n = 0, cap = 0;
    size_t got = 1;
    while (!*problem && got > 0) {
        if (n == cap) { /* room for one byte past the limit, to see that it is past */
            cap = cap == 0 ? 65536 : 2 * cap < MAX_DATA_BYTES + 1 ? 2 * cap : MAX_DATA_BYTES + 1;
            unsigned char *bigger = realloc(buf, (size_t)cap);
            if (!bigger) {
                *problem = "it does not fit in memory";
                break;
            }
            buf = bigger;
        }
        got = fread(buf + n, 1, (size_t)(cap - n), f);
        if (memchr(buf + n, 0, got))
            *problem = "it contains NUL bytes, so it is not text";
        else if ((n += (int64_t)got) > MAX_DATA_BYTES)
            *problem = "it is larger than 1 GiB";
    }
    if (!*problem && ferror(f))
        *problem = strerror(errno);
    fclose(f);
    if (*problem) {
        free(buf);
        return NULL;
    }
    *size = n;
    return buf;
}

int dataset_load_text(dataset *d, const char *path, int64_t min_train)
{
    int64_t n = 0;
    const char *problem = NULL;
    unsigned char *buf = read_text(path, &n, &problem);
    if (!problem && n == 0)
        problem = "it is empty";
    if (!problem && (n - n / 10 < min_train || n / 10 < 2)) /* and 2 to validate on */
        problem = "it is too short";
    if (problem) {
        fprintf(stderr, "gpt: cannot read --data %s: %s (--data takes a text file of "
                "1 GiB at most, with no NUL bytes, of which the model trains on 90%%, at least "
                "context + 1 = %lld bytes, and validates on 10%%, at least 2 bytes)\n", path,
                problem, (long long)min_train);
        free(buf);
        return 1;
    }
    bool seen[256] = {false};
    for (int64_t i = 0; i < n; i++)
        seen[buf[i]] = true;
    unsigned char chars[256];
    int v = 0;
    for (int c = 0; c < 256; c++)
        if (seen[c])
            chars[v++] = (unsigned char)c;
    dataset_set_vocab(d, chars, v);
    for (int64_t i = 0; i < n; i++)
        buf[i] = (unsigned char)d->ids[buf[i]];
    d->text = buf;
    d->n_val = n / 10;
    d->n_train = n - d->n_val;
    return 0;
}

/* Exact-match accuracy on held-out problems drawn with another seed: the
 * model completes "ddd+ddd=" greedily and every character must be right. */
double task_accuracy(lm *model, const dataset *d, uint64_t seed, int n, bool show)
{
    tg_rng *rng = tg_rng_new(seed);
    tg_sample_options greedy = {.temperature = 1, .greedy = true};
    int right = 0;
    for (int i = 0; i < n; i++) {
        char p[PROBLEM_LEN + 1], got[PROBLEM_LEN + 1] = {0};
        make_problem(rng, true, p);
        int64_t prompt[PROMPT_LEN], out[PROBLEM_LEN];
        for (int t = 0; t < PROMPT_LEN; t++)
            prompt[t] = d->ids[(unsigned char)p[t]];
        if (lm_generate_each(model, prompt, PROMPT_LEN, PROBLEM_LEN - PROMPT_LEN, &greedy, NULL,
                             out, NULL, NULL) < 0)
            break;
        for (int t = 0; t < PROBLEM_LEN; t++)
            got[t] = (char)d->vocab.chars[out[t]];
        right += strcmp(got, p) == 0;
        if (show && i < 5) /* the sum reads right to left */
            printf("  %.7s = %c%c%c%c  (model wrote %.4s, lowest digit first)  %s\n", p, got[11],
                   got[10], got[9], got[8], got + PROMPT_LEN, strcmp(got, p) ? "wrong" : "right");
    }
    tg_rng_free(rng);
    return (double)right / n;
}

/* FNV-1a over 8-byte words, then the tail's bytes: it only has to tell
 * copies apart, at memory speed for a 1 GiB text. */
uint64_t gpt_digest(uint64_t h, const void *p, size_t n)
{
    const uint64_t prime = 0x100000001b3ull;
    const unsigned char *b = p;
    h ^= 0xcbf29ce484222325ull ^ n;
    for (; n >= 8; n -= 8, b += 8) {
        uint64_t w;
        memcpy(&w, b, 8);
        h = (h ^ w) * prime;
        h ^= h >> 29;
    }
    for (; n > 0; n--, b++)
        h = (h ^ *b) * prime;
    return h;
}

uint64_t dataset_digest(const dataset *d)
{
    uint64_t h = gpt_digest(0, d->vocab.chars, (size_t)d->vocab.size);
    return d->text ? gpt_digest(h, d->text, (size_t)(d->n_train + d->n_val)) : h;
}

int gpt_digest_file(const char *path, uint64_t *h)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    static unsigned char chunk[1 << 16];
    size_t got;
    *h = 0;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0)
        *h = gpt_digest(*h, chunk, got);
    int rc = ferror(f) ? -1 : 0;
    fclose(f);
    return rc;
}
