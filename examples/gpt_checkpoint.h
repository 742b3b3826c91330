/* gpt's checkpoints: one safetensors file with the model, its vocabulary, the
 * optimizer and its generators, and the run's settings and loss history.
 * Every value read from a file is checked before anything is built from it. */
#ifndef GPT_CHECKPOINT_H
#define GPT_CHECKPOINT_H

#include <tensorgrad/tensorgrad.h>

#include "gpt_model.h"

/* A numeric setting: its command-line option and the values it accepts. A
 * value read from a checkpoint must lie in the same range. */
typedef struct {
    const char *option;
    double lo, hi;
    bool integer;
} gpt_range;

extern const gpt_range gpt_steps_range, gpt_batch_range, gpt_lr_range, gpt_eval_every_range;

/* v lies in r (and is a whole number if r->integer); false for NaN. */
bool gpt_in_range(const gpt_range *r, double v);
/* Prints "gpt: <option><where>: '<text>' is not a number in the allowed range
 * lo..hi": where is "" for the command line, " from FILE" for a checkpoint. */
void gpt_range_error(const gpt_range *r, const char *where, const char *text);

/* The model's vocabulary: token id -> byte, distinct bytes. */
typedef struct {
    int size;
    unsigned char chars[256];
} gpt_vocab;

/* The settings a run is trained with (train.settings in the file). */
typedef struct {
    int64_t steps, batch, eval_every;
    double lr;
    bool task; /* the built-in addition task rather than a --data file */
    bool bf16; /* trained with --precision bf16 */
} gpt_settings;

/* What a checkpoint records of a run (all borrowed): loss and val hold the
 * losses of steps 0..step-1 (val NAN where it was not measured). */
typedef struct {
    const lm *model;
    const tg_params *params;
    const tg_params *opt_state; /* tg_optim_state's names and tensors */
    const tg_rng *data_rng;
    const gpt_vocab *vocab;
    gpt_settings settings;
    const double *loss, *val;
    int64_t step;
} gpt_run;

/* Writes run to path atomically (through tg_safetensors_save). 0, or 1 after
 * printing why not. */
int gpt_checkpoint_save(const char *path, const gpt_run *run);

/* Reads path into ck (the caller clears it), checks the architecture
 * (model.arch: a Llama; none: a GPT), its config (gpt.config or
 * llama.config), gpt.vocab and the shape of every parameter the config
 * implies, and only then builds the model (*model, the caller frees it) and
 * copies the weights in. 0, or 1 after printing what is wrong. */
int gpt_checkpoint_load_model(const char *path, tg_params *ck, lm **model, gpt_vocab *vocab);

/* train.settings of a checkpoint read by gpt_checkpoint_load_model, each in
 * its command-line range. 0, or 1 after printing what is wrong. */
int gpt_checkpoint_load_settings(const char *path, const tg_params *ck, gpt_settings *s);

/* train.history: the losses of the done steps, into loss[0..done) and
 * val[0..done). 0, or 1 after printing what is wrong (a missing or misshapen
 * history, a loss that is not a finite number >= 0). */
int gpt_checkpoint_load_history(const char *path, const tg_params *ck, int64_t done, double *loss,
                                double *val);

/* a and b name the same file: one inode (symlinks followed) if either
 * exists, else the same resolved path (a dangling symlink followed to the
 * file a save would create). */
bool gpt_same_file(const char *a, const char *b);

#endif
