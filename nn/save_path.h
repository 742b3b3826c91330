/* The path side of checkpoint saves, shared by tg_safetensors_save and
 * tg_safetensors_check_writable so the two can never disagree on a path.
 * Internal; never installed. */
#ifndef TG_SAVE_PATH_H
#define TG_SAVE_PATH_H

#include <stdbool.h>
#include <stdio.h>
#include <sys/stat.h>

/* A save's destination: the path as given and the file it finally names
 * (symlinks followed), with what lstat says of that file when it exists. */
typedef struct {
    const char *fn, *path; /* borrowed: the public function's name, its argument */
    char *target;          /* malloc'd; the caller frees it */
    bool exists;
    struct stat st;
} tg__save_dest;

/* Resolves path for the public function fn and refuses what a save must not
 * replace: 0, or -1 with TG_ERR_IO recorded. d->target needs freeing either
 * way. */
int tg__save_prepare(tg__save_dest *d, const char *fn, const char *path);
/* Records TG_ERR_IO "fn: path[ -> target]: what[ tmp][: strerror(err)]"
 * (tmp and err left out when NULL and 0); returns -1. */
int tg__save_fail(const tg__save_dest *d, const char *what, const char *tmp, int err);
/* Creates target.tmp.<pid>.<n> for writing, with the mode of the file it
 * will replace; its name in *tmp (malloc'd; NULL when memory ran out). The
 * descriptor, or -1 with errno set. */
int tg__save_create_temp(const tg__save_dest *d, char **tmp);
/* Deletes the temporary files of target left by writers no longer running. */
void tg__save_remove_stale(const char *target);
/* Writes a file through write(fp, ctx) (0, or -1 with errno set) into a
 * temporary file beside d's target, flushes and fsyncs it, and renames it
 * over the target; on failure the temporary file is gone and TG_ERR_IO is
 * recorded. 0 or -1. */
int tg__save_write(const tg__save_dest *d, int (*write)(FILE *fp, const void *ctx),
                   const void *ctx);
/* fsyncs the directory holding path, so a rename in it is durable. */
void tg__save_sync_dir(const char *path);

#endif
