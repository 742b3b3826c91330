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

/* Entries of dir other than . and .. */
static int count_entries(void)
{
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

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

int main(void)
{
    Suite *s = suite_create("atomic_save");
    TCase *tc = tcase_checked("atomic_save");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, killed_writer_leaves_previous_checkpoint_intact);
    tcase_add_test(tc, failed_save_removes_its_temporary_file);
    tcase_add_test(tc, check_writable_agrees_with_save);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
