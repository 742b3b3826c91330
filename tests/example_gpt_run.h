/* What the tests of examples/gpt share: running gpt in a temporary
 * directory with its output kept, the files it writes there, the "final:"
 * line, checkpoints with one tensor edited, and a small text to train on. */
#ifndef TG_EXAMPLE_GPT_RUN_H
#define TG_EXAMPLE_GPT_RUN_H

#include "testutil.h"

#include <sys/stat.h>

static char dir[64];
static char output[1 << 16];

/* Runs `gpt ARGS` in dir with stdout and stderr in output; the exit status. */
static inline int run(const char *args)
{
    int status = run_example_in(dir, "gpt", args, output, sizeof output);
    ck_assert_msg(!strstr(output, "leaked"), "%s", output);
    ck_assert_msg(status >= 0, "gpt %s crashed:\n%s", args, output);
    return status;
}

#define ck_assert_output(fragment) \
    ck_assert_msg(strstr(output, fragment) != NULL, "no '%s' in:\n%s", fragment, output)

static inline void write_file(const char *name, const void *data, size_t n)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

static inline long file_size(const char *name)
{
    char path[128];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* The loss printed on the "final:" line, as text (compared exactly). */
static inline void final_loss(char out[32])
{
    const char *at = strstr(output, "final: step");
    ck_assert_msg(at != NULL, "no final line in:\n%s", output);
    ck_assert_int_eq(sscanf(at, "final: step %*d loss %31s", out), 1);
}

static inline void make_dir(void) { make_temp_dir(dir, sizeof dir, "tg_gpt"); }

static inline void remove_dir(void) { remove_temp_dir(dir); }

/* Copies checkpoint `from` to `to` in dir with tensor `name` replaced by
 * value (taken over; NULL drops the tensor). */
static inline void write_edited(const char *from, const char *to, const char *name, tg_tensor *value)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, from);
    tg_params ck = {0}, edited = {0};
    ck_assert_int_eq(tg_safetensors_load(path, &ck), 0);
    for (int i = 0; i < ck.count; i++)
        if (strcmp(ck.names[i], name))
            ck_assert_int_eq(tg_params_add(&edited, NULL, ck.names[i], ck.tensors[i]), 0);
    if (value)
        ck_assert_int_eq(tg_params_add(&edited, NULL, name, value), 0);
    tg_release(value);
    snprintf(path, sizeof path, "%s/%s", dir, to);
    ck_assert_int_eq(tg_safetensors_save(path, &edited, 0, NULL, NULL), 0);
    tg_params_clear(&edited);
    tg_params_clear(&ck);
}

static const char text[] __attribute__((unused)) =
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\n"
    "All:\nSpeak, speak.\n\nFirst Citizen:\nYou are all resolved rather to die than to "
    "famish?\n\nAll:\nResolved. resolved.\n\nFirst Citizen:\nFirst, you know Caius Marcius "
    "is chief enemy to the people.\n\nAll:\nWe know't, we know't.\n\nFirst Citizen:\nLet us "
    "kill him, and we'll have corn at our own price.\nIs't a verdict?\n";

#endif
