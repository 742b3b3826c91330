/* gpt's data: the addition task it makes up itself, or a text file, both
 * delivered as rows of (input, target) token ids. Tokens are bytes mapped
 * to 0..vocab-1; a target of -1 is not scored. */
#ifndef GPT_DATA_H
#define GPT_DATA_H

#include <tensorgrad/tensorgrad.h>

#include "gpt_checkpoint.h"

typedef struct {
    bool task;                  /* addition, or text */
    gpt_vocab vocab;            /* token id -> byte */
    int ids[256];               /* byte -> token id, or -1 */
    unsigned char *text;        /* the file's tokens, train split then validation */
    int64_t n_train, n_val;
} dataset;

/* The task: "ddd+ddd=ssss\n" with the sum written backwards (lowest digit
 * first), so that each digit needs only the digits before it and a carry, the
 * order in which people add. A row is one problem, PROBLEM_LEN - 1 tokens;
 * the model is given the first PROMPT_LEN characters and writes the rest. */
enum { PROBLEM_LEN = 13, PROMPT_LEN = 8 };

/* d's vocabulary becomes chars[0..n) (distinct bytes), ids its inverse. */
void dataset_set_vocab(dataset *d, const unsigned char *chars, int n);
/* d becomes the task: task set, and its vocabulary of 13 characters. */
void dataset_use_task(dataset *d);

/* One problem, held out or not (training never sees the held-out ones,
 * accuracy is measured on them), drawn from rng into text. */
void make_problem(tg_rng *rng, bool want_held_out, char text[PROBLEM_LEN + 1]);
/* One problem's row, T = PROBLEM_LEN - 1; only the answer is scored. */
void task_row(const dataset *d, tg_rng *rng, bool test, int64_t T, int64_t *x, int64_t *y);
/* A random window of T + 1 characters of the train split. */
void text_row(const dataset *d, tg_rng *rng, int64_t T, int64_t *x, int64_t *y);

/* Exact-match accuracy on n held-out problems drawn from seed: the model
 * completes "ddd+ddd=" greedily and every character must be right; show
 * prints the first five. */
double task_accuracy(lm *model, const dataset *d, uint64_t seed, int n, bool show);

/* Loads a --data file: vocabulary = its distinct bytes, 90% train, 10%
 * validation (d->text, freed by the caller). min_train is context + 1. 0, or
 * 1 after printing why not (unreadable, empty, too short, NUL bytes, larger
 * than 1 GiB). */
int dataset_load_text(dataset *d, const char *path, int64_t min_train);

/* A 64-bit digest of n bytes, continuing from h (start with 0), to tell
 * the ranks' copies of an input apart; and of d's vocabulary and text. */
uint64_t gpt_digest(uint64_t h, const void *p, size_t n);
uint64_t dataset_digest(const dataset *d);
/* The digest of a file's bytes into *h; 0, or -1 (errno set) if unreadable. */
int gpt_digest_file(const char *path, uint64_t *h);

#endif
