/* Checkpoint writes never lose or mangle the user's files: a writer killed
 * at any moment leaves the previous file whole, a failed save leaves no
 * temporary file, and symlinks, modes and odd paths are respected. */
#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

/* 4M floats: a 16 MB checkpoint, slow enough to write that kills land in
 * the middle of it. */
#define BIG (4 * 1024 * 1024)

static char dir[256];

/* SIGKILL tests the process dying, not the machine: the page cache survives
 * it, so tmpfs (where fsync is free) shows the same thing in a fraction of
 * the time a disk takes. */
static void make_dir(void)
{
    const char *tmp = getenv("TMPDIR");
    if (access("/dev/shm", W_OK) == 0)
        tmp = "/dev/shm";
    snprintf(dir, sizeof dir, "%s/tg_atomic_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void remove_dir(void)
{
    DIR *d = opendir(dir);
    char path[600];
    for (struct dirent *e; d && (e = readdir(d));)
        if (e->d_name[0] != '.') {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            if (unlink(path) != 0)
                rmdir(path);
        }
    if (d)
        closedir(d);
    rmdir(dir);
}

static int count_entries(void) { return dir_entries(dir); }

/* Version v of the checkpoint: "big" [BIG] and "version" [] hold values
 * that differ in every element between versions. */
static void make_version(tg_params *ps, int v)
{
    float *x = malloc(BIG * sizeof *x);
    ck_assert_ptr_nonnull(x);
    for (int64_t i = 0; i < BIG; i++)
        x[i] = (float)(i % 1000) * 0.25f + (float)v * 1000.0f;
    tg_tensor *big = tg_from_data(TG_FLOAT32, 1, SHAPE(BIG), x);
    tg_tensor *ver = tg_scalar(TG_INT64, v);
    ck_assert_int_eq(tg_params_add(ps, NULL, "big", big), 0);
    ck_assert_int_eq(tg_params_add(ps, NULL, "version", ver), 0);
    tg_release(big);
    tg_release(ver);
    free(x);
}

static uint8_t *file_bytes(const char *path, size_t *size)
{
    FILE *fp = fopen(path, "rb");
    ck_assert_msg(fp, "cannot open %s", path);
    fseek(fp, 0, SEEK_END);
    *size = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *b = malloc(*size + 1);
    ck_assert(b && fread(b, 1, *size, fp) == *size);
    fclose(fp);
    return b;
}

/* The loaded file holds exactly the tensors of want (same bytes). */
static void assert_loads_as(const char *path, const tg_params *want)
{
    tg_params got = {0};
    ck_assert_msg(tg_safetensors_load(path, &got) == 0, "%s", tg_error_message());
    ck_assert_int_eq(got.count, want->count);
    for (int i = 0; i < want->count; i++) {
        const tg_tensor *g = tg_params_find(&got, want->names[i]), *w = want->tensors[i];
        ck_assert_ptr_nonnull(g);
        ck_assert_int_eq(tg_dtype_of(g), tg_dtype_of(w));
        ck_assert_int_eq(tg_numel(g), tg_numel(w));
        ck_assert(memcmp(tg_data(g), tg_data(w), (size_t)tg_numel(w) * tg_dtype_size(tg_dtype_of(w))) == 0);
    }
    tg_params_clear(&got);
}

/* Files in dir other than the named ones: the temporaries a killed writer
 * left. Asserts each is named <base>.tmp.<pid>.<n>. */
static int leftovers(const char *base, const char *other)
{
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    char prefix[300];
    snprintf(prefix, sizeof prefix, "%s.tmp.", base);
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.' || strcmp(e->d_name, base) == 0 || strcmp(e->d_name, other) == 0)
            continue;
        ck_assert_msg(strncmp(e->d_name, prefix, strlen(prefix)) == 0, "stray file %s", e->d_name);
        n++;
    }
    closedir(d);
    return n;
}

/* A one-tensor list for the tests that are about paths, not contents. */
static void small_list(tg_params *ps, float v)
{
    tg_tensor *t = tg_full(TG_FLOAT32, 1, SHAPE(3), v);
    ck_assert_int_eq(tg_params_add(ps, NULL, "t", t), 0);
    tg_release(t);
}

static void write_text(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    ck_assert_ptr_nonnull(fp);
    fputs(text, fp);
    fclose(fp);
}

static bool file_is(const char *path, const char *text)
{
    size_t n;
    uint8_t *b = file_bytes(path, &n);
    bool same = n == strlen(text) && memcmp(b, text, n) == 0;
    free(b);
    return same;
}

START_TEST(killed_writer_leaves_previous_checkpoint_intact)
{
    make_dir();
    char path[512], ref[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    snprintf(ref, sizeof ref, "%s/reference_a", dir);
    tg_params a = {0}, b = {0};
    make_version(&a, 1);
    make_version(&b, 2);
    ck_assert_int_eq(tg_safetensors_save(ref, &a, 0, NULL, NULL), 0);
    size_t ref_size;
    uint8_t *ref_bytes = file_bytes(ref, &ref_size);

    unsigned seed = (unsigned)time(NULL);
    int kept_a = 0, became_b = 0, rounds = 10;
    for (int r = 0; r < rounds; r++) {
        ck_assert_int_eq(tg_safetensors_save(path, &a, 0, NULL, NULL), 0);
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            for (;;) /* saves version b until killed */
                tg_safetensors_save(path, &b, 0, NULL, NULL);
        }
        /* 1..30 ms, early rounds early: round 0 kills before the first
         * save can finish, later ones after some saves completed. */
        usleep((useconds_t)(1000 + r * 2500 + rand_r(&seed) % 3000));
        kill(pid, SIGKILL);
        int status;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

        /* Either the old file, byte for byte, or a whole new one. */
        size_t size;
        uint8_t *now = file_bytes(path, &size);
        if (size == ref_size && memcmp(now, ref_bytes, size) == 0) {
            kept_a++;
            assert_loads_as(path, &a);
        } else {
            became_b++;
            assert_loads_as(path, &b);
        }
        free(now);
    }
    int left = leftovers("model.safetensors", "reference_a");
    printf("atomic_save: %d rounds, old file kept %d, new file complete %d, "
           "temporary files left by killed writers %d\n", rounds, kept_a, became_b, left);
    /* The next save clears what the killed writers left. */
    ck_assert_int_eq(tg_safetensors_save(path, &a, 0, NULL, NULL), 0);
    ck_assert_int_eq(leftovers("model.safetensors", "reference_a"), 0);
    ck_assert_int_eq(kept_a + became_b, rounds);
    ck_assert_int_ge(kept_a, 1); /* some kill must have landed mid-save */
    free(ref_bytes);
    tg_params_clear(&a);
    tg_params_clear(&b);
    remove_dir();
}
END_TEST

/* A save that cannot finish (a file size limit makes the write fail)
 * reports TG_ERR_IO, removes its temporary file and leaves the target
 * alone. The limit is set in a child, which reports by its exit status. */
START_TEST(failed_save_removes_its_temporary_file)
{
    make_dir();
    char path[512];
    snprintf(path, sizeof path, "%s/target", dir);
    write_text(path, "previous");
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit lim = {4096, 4096};
        tg_params big = {0};
        make_version(&big, 1);
        int rc = setrlimit(RLIMIT_FSIZE, &lim) == 0 ? tg_safetensors_save(path, &big, 0, NULL, NULL)
                                                   : 0;
        bool io = tg_error_code() == TG_ERR_IO &&
                  strstr(tg_error_message(), "cannot write temporary file");
        tg_params_clear(&big);
        _exit(rc == -1 && io ? 0 : 1);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the save did not fail with IO");
    ck_assert_int_eq(count_entries(), 1);
    ck_assert(file_is(path, "previous"));

    /* A missing directory: nothing is created anywhere. */
    tg_params ps = {0};
    small_list(&ps, 1);
    snprintf(path, sizeof path, "%s/missing/model.safetensors", dir);
    ck_assert_int_eq(tg_safetensors_save(path, &ps, 0, NULL, NULL), -1);
    ck_assert_error(TG_ERR_IO, "tg_safetensors_save", "cannot create temporary file");
    ck_assert_int_eq(count_entries(), 1);
    tg_params_clear(&ps);
    remove_dir();
}
END_TEST

/* check_writable answers as save would, and leaves nothing behind. Paths
 * that would fail even for root: under a regular file, a mode with no
 * write bits (refused by mode, not by access(2)). */
START_TEST(check_writable_agrees_with_save)
{
    make_dir();
    char path[512], file[512], link[512];
    snprintf(path, sizeof path, "%s/new.safetensors", dir);
    snprintf(file, sizeof file, "%s/file", dir);
    snprintf(link, sizeof link, "%s/link", dir);
    ck_assert_int_eq(tg_safetensors_check_writable(path), 0);
    ck_assert_int_eq(count_entries(), 0);
    write_text(file, "keep");
    ck_assert_int_eq(symlink("file", link), 0);
    ck_assert_int_eq(tg_safetensors_check_writable(file), 0);
    ck_assert_int_eq(tg_safetensors_check_writable(link), 0);
    ck_assert_int_eq(count_entries(), 2);
    ck_assert(file_is(file, "keep"));

    snprintf(path, sizeof path, "%s/missing/m.safetensors", dir);
    ck_assert_int_eq(tg_safetensors_check_writable(path), -1);
    ck_assert_error(TG_ERR_IO, "tg_safetensors_check_writable: ", path, "No such file");
    snprintf(path, sizeof path, "%s/file/m.safetensors", dir);
    ck_assert_int_eq(tg_safetensors_check_writable(path), -1);
    ck_assert_error(TG_ERR_IO, "tg_safetensors_check_writable: ", path, "Not a directory");
    ck_assert_int_eq(tg_safetensors_check_writable(""), -1);
    ck_assert_error(TG_ERR_IO, "tg_safetensors_check_writable: ", "path is empty");
    ck_assert_int_eq(tg_safetensors_check_writable(dir), -1);
    ck_assert_error(TG_ERR_IO, "tg_safetensors_check_writable: ", dir, "is a directory");
    snprintf(path, sizeof path, "%s/missing/", dir);
    ck_assert_int_eq(tg_safetensors_check_writable(path), -1);
    ck_assert_error(TG_ERR_IO, "tg_safetensors_check_writable: ", path, "names a directory");
    ck_assert_int_eq(tg_safetensors_check_writable(NULL), -1);
    ck_assert_error(TG_ERR_NULL, "tg_safetensors_check_writable", "path");

    /* Read-only: refused directly and through the link, as save refuses. */
    ck_assert_int_eq(chmod(file, 0444), 0);
    ck_assert_int_eq(tg_safetensors_check_writable(file), -1);
    ck_assert_error(TG_ERR_IO, "tg_safetensors_check_writable: ", file, "is read-only");
    ck_assert_int_eq(tg_safetensors_check_writable(link), -1);
    ck_assert_error(TG_ERR_IO, "tg_safetensors_check_writable: ", link, file, "is read-only");
    tg_params ps = {0};
    small_list(&ps, 1);
    ck_assert_int_eq(tg_safetensors_save(link, &ps, 0, NULL, NULL), -1);
    ck_assert_error(TG_ERR_IO, "tg_safetensors_save: ", link, file, "is read-only");
    ck_assert_int_eq(count_entries(), 2);
    ck_assert(file_is(file, "keep"));
    tg_params_clear(&ps);
    remove_dir();
}
END_TEST

/* The general check gives the checkpoint check's answers, in its own name,
 * for a picture or log as much as a checkpoint, and leaves nothing behind. */
START_TEST(path_check_writable_answers_as_the_checkpoint_check)
{
    make_dir();
    char path[512], file[512];
    snprintf(path, sizeof path, "%s/plot.svg", dir);
    snprintf(file, sizeof file, "%s/file", dir);
    ck_assert_int_eq(tg_path_check_writable(path), 0);
    ck_assert_int_eq(count_entries(), 0);
    write_text(file, "keep");
    ck_assert_int_eq(tg_path_check_writable(file), 0);
    ck_assert(file_is(file, "keep"));
    snprintf(path, sizeof path, "%s/missing/plot.svg", dir);
    ck_assert_int_eq(tg_path_check_writable(path), -1);
    ck_assert_error(TG_ERR_IO, "tg_path_check_writable: ", path, "No such file");
    ck_assert_int_eq(tg_path_check_writable(dir), -1);
    ck_assert_error(TG_ERR_IO, "tg_path_check_writable: ", dir, "is a directory");
    ck_assert_int_eq(tg_path_check_writable("."), -1);
    ck_assert_error(TG_ERR_IO, "tg_path_check_writable: .: names a directory");
    ck_assert_int_eq(chmod(file, 0444), 0);
    ck_assert_int_eq(tg_path_check_writable(file), -1);
    ck_assert_error(TG_ERR_IO, "tg_path_check_writable: ", file, "is read-only");
    ck_assert_int_eq(tg_path_check_writable(NULL), -1);
    ck_assert_error(TG_ERR_NULL, "tg_path_check_writable", "path");
    ck_assert_int_eq(count_entries(), 1);
    remove_dir();
}
END_TEST

/* A symlink stays a symlink: the file it names is replaced. Relative links
 * resolve from the link's directory, chains are followed, a dangling link
 * creates the file it names, and a loop is a clear error. */
START_TEST(save_through_symlink_replaces_target_and_keeps_link)
{
    make_dir();
    char real[512], sub[512], link[512], chain[512], dangle[512], loop[512], made[512];
    snprintf(real, sizeof real, "%s/real.safetensors", dir);
    snprintf(sub, sizeof sub, "%s/links", dir);
    snprintf(link, sizeof link, "%s/links/link", dir);
    snprintf(chain, sizeof chain, "%s/chain", dir);
    ck_assert_int_eq(mkdir(sub, 0700), 0);
    write_text(real, "old");
    ck_assert_int_eq(symlink("../real.safetensors", link), 0); /* relative to links/ */
    ck_assert_int_eq(symlink("links/link", chain), 0);
    tg_params one = {0}, two = {0};
    small_list(&one, 1);
    small_list(&two, 2);
    ck_assert_msg(tg_safetensors_save(link, &one, 0, NULL, NULL) == 0, "%s", tg_error_message());
    assert_loads_as(real, &one);
    ck_assert_msg(tg_safetensors_save(chain, &two, 0, NULL, NULL) == 0, "%s", tg_error_message());
    assert_loads_as(real, &two);
    char text[64];
    ssize_t n = readlink(link, text, sizeof text - 1);
    ck_assert_int_eq(n, 19);
    text[n] = '\0';
    ck_assert_str_eq(text, "../real.safetensors");
    n = readlink(chain, text, sizeof text - 1);
    ck_assert_int_eq(n, 10);
    ck_assert_int_eq(count_entries(), 3); /* real, links/, chain: no temporaries */

    snprintf(dangle, sizeof dangle, "%s/dangle", dir);
    snprintf(made, sizeof made, "%s/made.safetensors", dir);
    ck_assert_int_eq(symlink("made.safetensors", dangle), 0);
    ck_assert_msg(tg_safetensors_save(dangle, &one, 0, NULL, NULL) == 0, "%s", tg_error_message());
    assert_loads_as(made, &one);
    struct stat st;
    ck_assert(lstat(dangle, &st) == 0 && S_ISLNK(st.st_mode));

    snprintf(loop, sizeof loop, "%s/loop", dir);
    ck_assert_int_eq(symlink("loop", loop), 0);
    ck_assert_int_eq(tg_safetensors_save(loop, &one, 0, NULL, NULL), -1);
    ck_assert_error(TG_ERR_IO, "tg_safetensors_save: ", loop, "too many levels of symbolic links");
    ck_assert_int_eq(count_entries(), 6);
    tg_params_clear(&one);
    tg_params_clear(&two);
    remove_dir();
}
END_TEST

static mode_t mode_of(const char *path)
{
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    return st.st_mode & 07777;
}

/* A file with no write bits is refused and left as it was; a replaced file
 * keeps its mode, even one the umask would narrow; a new file gets
 * 0666 & ~umask. */
START_TEST(save_keeps_permissions_and_refuses_read_only_files)
{
    make_dir();
    char path[512];
    tg_params ps = {0};
    small_list(&ps, 1);
    snprintf(path, sizeof path, "%s/ro.safetensors", dir);
    write_text(path, "read-only");
    ck_assert_int_eq(chmod(path, 0444), 0);
    ck_assert_int_eq(tg_safetensors_save(path, &ps, 0, NULL, NULL), -1);
    ck_assert_error(TG_ERR_IO, "tg_safetensors_save: ", path, "is read-only; not replacing it");
    ck_assert(file_is(path, "read-only"));
    ck_assert_uint_eq(mode_of(path), 0444);
    ck_assert_int_eq(count_entries(), 1);

    mode_t old_mask = umask(077);
    const mode_t modes[] = {0600, 0640, 0664, 0200};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        snprintf(path, sizeof path, "%s/m%zu.safetensors", dir, i);
        write_text(path, "old");
        ck_assert_int_eq(chmod(path, modes[i]), 0);
        ck_assert_int_eq(tg_safetensors_save(path, &ps, 0, NULL, NULL), 0);
        ck_assert_msg(mode_of(path) == modes[i], "mode %o became %o", (unsigned)modes[i],
                      (unsigned)mode_of(path));
    }
    umask(022);
    snprintf(path, sizeof path, "%s/new.safetensors", dir);
    ck_assert_int_eq(tg_safetensors_save(path, &ps, 0, NULL, NULL), 0);
    ck_assert_uint_eq(mode_of(path), 0644);
    umask(old_mask);
    tg_params_clear(&ps);
    remove_dir();
}
END_TEST

/* An empty path names no file: refused, and nothing appears in the working
 * directory (it used to gain a ".tmp.<pid>.<n>" file). */
START_TEST(save_to_empty_path_is_refused_and_creates_nothing)
{
    make_dir();
    char cwd[1024];
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
    ck_assert_int_eq(chdir(dir), 0);
    tg_params ps = {0};
    small_list(&ps, 1);
    ck_assert_int_eq(tg_safetensors_save("", &ps, 0, NULL, NULL), -1);
    ck_assert_error(TG_ERR_IO, "tg_safetensors_save: ", "the path is empty");
    ck_assert_int_eq(count_entries(), 0);
    ck_assert_int_eq(chdir(cwd), 0);
    tg_params_clear(&ps);
    remove_dir();
}
END_TEST

/* A pid that no longer runs: a child's, after it was reaped. */
static long dead_pid(void)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0)
        _exit(0);
    ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
    return (long)pid;
}

/* A save removes the temporaries that dead writers left for its target, and
 * nothing else: not a live writer's (this process or another), not another
 * target's, not names that only look alike. */
START_TEST(save_removes_temporaries_of_dead_writers_only)
{
    make_dir();
    long dead = dead_pid(), self = (long)getpid(), parent = (long)getppid();
    const char *base = "m.safetensors";
    char stale[600], name[600], path[512];
    snprintf(stale, sizeof stale, "%s/%s.tmp.%ld.0", dir, base, dead);
    write_text(stale, "stale");
    const char *kept_fmt[] = {"%s.tmp.%ld.3", "%s.tmp.%ld.4", "%s.tmp.%ld.0.bak", "%s.tmp.%ld",
                              "%s.tmp.+%ld.0", "%s.tmp.%ld.x", "x%s.tmp.%ld.0", "%s.tmp.%ld.0 ",
                              "%s.tmp.0%ld.0", "%s.tmp.%ld."};
    const long kept_pid[] = {self, parent, dead, dead, dead, dead, dead, dead, dead, dead};
    int n_kept = (int)(sizeof kept_pid / sizeof kept_pid[0]);
    for (int i = 0; i < n_kept; i++) {
        int len = snprintf(name, sizeof name, "%s/", dir);
        snprintf(name + len, sizeof name - (size_t)len, kept_fmt[i], base, kept_pid[i]);
        write_text(name, "keep");
    }
    tg_params ps = {0};
    small_list(&ps, 1);
    snprintf(path, sizeof path, "%s/%s", dir, base);
    ck_assert_int_eq(tg_safetensors_save(path, &ps, 0, NULL, NULL), 0);
    ck_assert_int_eq(access(stale, F_OK), -1);
    ck_assert_int_eq(count_entries(), n_kept + 1);
    tg_params_clear(&ps);
    remove_dir();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("atomic_save");
    TCase *tc = tcase_checked("atomic_save");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, killed_writer_leaves_previous_checkpoint_intact);
    tcase_add_test(tc, failed_save_removes_its_temporary_file);
    tcase_add_test(tc, check_writable_agrees_with_save);
    tcase_add_test(tc, path_check_writable_answers_as_the_checkpoint_check);
    tcase_add_test(tc, save_through_symlink_replaces_target_and_keeps_link);
    tcase_add_test(tc, save_keeps_permissions_and_refuses_read_only_files);
    tcase_add_test(tc, save_to_empty_path_is_refused_and_creates_nothing);
    tcase_add_test(tc, save_removes_temporaries_of_dead_writers_only);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
