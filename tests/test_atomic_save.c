/* Checkpoint writes are atomic: a writer killed at any moment of
 * tg_safetensors_save leaves the previous file whole, bit for bit, and a
 * save that fails leaves no temporary file behind. */
#include <dirent.h>
#include <signal.h>
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
            unlink(path);
        }
    if (d)
        closedir(d);
    rmdir(dir);
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

/* A save that cannot finish (the target is a directory, so the rename
 * fails) reports TG_ERR_IO, removes its temporary file and leaves the
 * target alone. */
START_TEST(failed_save_removes_its_temporary_file)
{
    make_dir();
    char path[512];
    snprintf(path, sizeof path, "%s/target", dir);
    ck_assert_int_eq(mkdir(path, 0700), 0);
    tg_params ps = {0};
    tg_tensor *t = tg_ones(TG_FLOAT32, 1, SHAPE(3));
    tg_params_add(&ps, NULL, "t", t);
    tg_release(t);
    ck_assert_int_eq(tg_safetensors_save(path, &ps, 0, NULL, NULL), -1);
    ck_assert_error(TG_ERR_IO, "tg_safetensors_save", path, "rename");
    ck_assert_int_eq(leftovers("target", "target"), 0);
    struct stat st;
    ck_assert(stat(path, &st) == 0 && S_ISDIR(st.st_mode));
    rmdir(path);

    /* A missing directory: nothing is created anywhere. */
    snprintf(path, sizeof path, "%s/missing/model.safetensors", dir);
    ck_assert_int_eq(tg_safetensors_save(path, &ps, 0, NULL, NULL), -1);
    ck_assert_error(TG_ERR_IO, "tg_safetensors_save", "cannot create temporary file");
    ck_assert_int_eq(leftovers("none", "none"), 0);
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
    suite_add_tcase(s, tc);
    return run_suite(s);
}
