/* Where a checkpoint save writes: resolving the path through symlinks, what
 * a save refuses to replace, temporary files beside the target (and dead
 * writers'), and the checks that a path can be written (*_check_writable). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tensorgrad/module.h>
#include <tensorgrad/nn.h>
#include "save_path.h"

/* Symlink hops followed before a chain counts as a loop, as Linux counts. */
#define MAX_LINK_HOPS 40

int tg__save_fail(const tg__save_dest *d, const char *what, const char *tmp, int err)
{
    bool via = d->target && strcmp(d->target, d->path) != 0;
    tg_fail(TG_ERR_IO, "%s: %s%s%s: %s%s%s%s%s", d->fn, *d->path ? d->path : "\"\"",
             via ? " -> " : "", via ? d->target : "", what, tmp ? " " : "", tmp ? tmp : "",
             err ? ": " : "", err ? strerror(err) : "");
    return -1;
}

/* The directory holding path's last component ("." when it has none). */
static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
}

static const char *base_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* Where the symlink link points: its text, taken relative to link's own
 * directory unless it is absolute. NULL with errno set on failure. */
static char *follow_link(const char *link)
{
    char text[PATH_MAX];
    ssize_t n = readlink(link, text, sizeof text);
    if (n < 0)
        return NULL;
    if ((size_t)n == sizeof text) {
        errno = ENAMETOOLONG;
        return NULL;
    }
    text[n] = '\0';
    const char *slash = strrchr(link, '/');
    size_t dirlen = text[0] == '/' || !slash ? 0 : (size_t)(slash - link) + 1;
    char *out = malloc(dirlen + (size_t)n + 1);
    if (!out) {
        errno = ENOMEM;
        return NULL;
    }
    memcpy(out, link, dirlen);
    memcpy(out + dirlen, text, (size_t)n + 1);
    return out;
}

/* Follows path through any symlinks to the file a save replaces or, past a
 * dangling link, creates. */
static int resolve_dest(tg__save_dest *d)
{
    if (!*d->path)
        return tg__save_fail(d, "the path is empty", NULL, 0);
    if (!(d->target = strdup(d->path)))
        return tg_fail(TG_ERR_NOMEM, "%s: %s: out of memory", d->fn, d->path), -1;
    for (int hops = 0;; hops++) {
        if (lstat(d->target, &d->st) != 0) {
            if (errno != ENOENT)
                return tg__save_fail(d, "cannot stat", NULL, errno);
            d->exists = false;
            return 0;
        }
        if (!S_ISLNK(d->st.st_mode)) {
            d->exists = true;
            return 0;
        }
        if (hops == MAX_LINK_HOPS)
            return tg__save_fail(d, "too many levels of symbolic links (a loop?)", NULL,
                                 0);
        char *next = follow_link(d->target);
        if (!next)
            return tg__save_fail(d, "cannot read the symbolic link", NULL, errno);
        free(d->target);
        d->target = next;
    }
}

/* What a save never writes over: save and check_writable both ask here. */
static int refuse_dest(const tg__save_dest *d)
{
    const char *base = base_of(d->target);
    if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
        return tg__save_fail(d, "names a directory, not a file", NULL, 0);
    if (d->exists && S_ISDIR(d->st.st_mode))
        return tg__save_fail(d, "is a directory; not replacing it", NULL, 0);
    if (d->exists && !S_ISREG(d->st.st_mode))
        return tg__save_fail(d, "is not a regular file; not replacing it", NULL, 0);
    if (d->exists && !(d->st.st_mode & 0222))
        return tg__save_fail(d, "is read-only; not replacing it", NULL, 0);
    return 0;
}

/* Resolves and checks path for fn: 0, or -1 with the error recorded. The
 * caller frees d->target either way. */
int tg__save_prepare(tg__save_dest *d, const char *fn, const char *path)
{
    *d = (tg__save_dest){.fn = fn, .path = path};
    return resolve_dest(d) < 0 || refuse_dest(d) < 0 ? -1 : 0;
}

/* Parses ".tmp.<pid>.<n>" (digits only, as tg__save_create_temp writes them: no
 * sign, no leading zero in the pid, nothing after) into *pid. */
static bool temp_suffix(const char *s, long *pid)
{
    if (strncmp(s, ".tmp.", 5) != 0 || s[5] == '0')
        return false;
    s += 5;
    long p = 0;
    int digits = 0;
    for (; *s >= '0' && *s <= '9'; s++, digits++)
        p = digits < 9 ? p * 10 + (*s - '0') : -1;
    if (!digits || p <= 0 || *s++ != '.' || !(*s >= '0' && *s <= '9'))
        return false;
    while (*s >= '0' && *s <= '9')
        s++;
    *pid = p;
    return *s == '\0';
}

/* Deletes the target.tmp.<pid>.<n> files of writers that no longer run
 * (killed mid-save). A live writer's file stays, this process's own
 * included (another thread may be saving), and so do names that only
 * look alike. Best effort: a failure here does not fail the save. */
void tg__save_remove_stale(const char *target)
{
    char *dir = dir_of(target);
    DIR *dp = dir ? opendir(dir) : NULL;
    const char *base = base_of(target);
    size_t blen = strlen(base);
    long pid;
    for (struct dirent *e; dp && (e = readdir(dp));) {
        if (strncmp(e->d_name, base, blen) != 0 || !temp_suffix(e->d_name + blen, &pid))
            continue;
        if (pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        unlinkat(dirfd(dp), e->d_name, 0);
    }
    if (dp)
        closedir(dp);
    free(dir);
}

/* Creates target.tmp.<pid>.<n> beside the target. pid and a per-process
 * count: two threads saving at once never share a temporary file, and
 * O_EXCL refuses a stale one. A replaced file's mode (and, where allowed,
 * owner) carries over; a new file gets 0666 & ~umask. The name goes in
 * *tmp (malloc'd); -1 with errno set on failure. */
int tg__save_create_temp(const tg__save_dest *d, char **tmp)
{
    static atomic_long count;
    size_t cap = strlen(d->target) + 48;
    if (!(*tmp = malloc(cap))) {
        errno = ENOMEM;
        return -1;
    }
    snprintf(*tmp, cap, "%s.tmp.%ld.%ld", d->target, (long)getpid(),
             (long)atomic_fetch_add(&count, 1));
    mode_t mode = d->exists ? d->st.st_mode & 0777 : 0666;
    int fd = open(*tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0 || !d->exists)
        return fd;
    if ((d->st.st_uid != geteuid() || d->st.st_gid != getegid()) &&
        fchown(fd, d->st.st_uid, d->st.st_gid) != 0) {
        /* not allowed to give it away: the new file stays ours */
    }
    if (fchmod(fd, mode) != 0) { /* the umask may have narrowed it at open */
        int err = errno;
        close(fd);
        unlink(*tmp);
        errno = err;
        return -1;
    }
    return fd;
}

/* Makes the rename itself durable; failures here cannot undo the save. */
void tg__save_sync_dir(const char *path)
{
    char *dir = dir_of(path);
    if (!dir)
        return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(dir);
}

/* The check both public names make, errors naming fn: prepare as a save
 * does, then create and remove a temporary file where the save would. */
static int check_writable(const char *fn, const char *path)
{
    tg__save_dest d;
    char *tmp = NULL;
    int rc = tg__save_prepare(&d, fn, path);
    if (rc == 0) {
        int fd = tg__save_create_temp(&d, &tmp);
        if (fd < 0) {
            rc = tg__save_fail(&d, "cannot create temporary file", tmp, errno);
        } else {
            close(fd);
            unlink(tmp);
        }
    }
    free(tmp);
    free(d.target);
    return rc;
}

int tg_path_check_writable(const char *path)
{
    TG_CHECK_ARG_STATUS(path);
    return check_writable(__func__, path);
}

int tg_safetensors_check_writable(const char *path)
{
    TG_CHECK_ARG_STATUS(path);
    return check_writable(__func__, path);
}

int tg__save_write(const tg__save_dest *d, int (*write)(FILE *fp, const void *ctx),
                   const void *ctx)
{
    char *tmp = NULL;
    const char *what = "cannot create temporary file";
    int err = 0;
    int fd = tg__save_create_temp(d, &tmp);
    FILE *fp = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!fp) {
        err = errno;
        if (fd >= 0)
            close(fd);
    } else {
        what = "cannot write temporary file";
        errno = 0;
        if (write(fp, ctx) < 0 || fflush(fp) != 0 || fsync(fileno(fp)) != 0)
            err = errno ? errno : EIO;
        if (fclose(fp) != 0 && !err)
            err = errno ? errno : EIO;
        if (!err && rename(tmp, d->target) != 0) {
            what = "cannot rename temporary file over it";
            err = errno;
        }
    }
    if (err) {
        if (fd >= 0)
            unlink(tmp);
        tg__save_fail(d, what, tmp, err);
    } else {
        tg__save_sync_dir(d->target);
    }
    free(tmp);
    return err ? -1 : 0;
}
