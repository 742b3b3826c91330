/* The default thread count: each rank's share of the cores, from made-up
 * launcher variables, masks and cgroup files, and end to end in a child
 * process started with a launcher's environment and a narrowed mask. */
#define _GNU_SOURCE
#include "testutil.h"

#include "cpu_share.h"
#include "tg_config.h"

#include <ftw.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#if TG_HAVE_BLAS
#include <cblas.h>
#endif

/* ---- a made-up environment ---------------------------------------------- */

static const char *const *fake_env;

static const char *fake_get(const char *name)
{
    size_t n = strlen(name);
    for (const char *const *e = fake_env; e && *e; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return *e + n + 1;
    return NULL;
}

static int ranks_in(const char *const *env, const char **from)
{
    fake_env = env;
    return tg__local_ranks(fake_get, from);
}

START_TEST(local_ranks_come_from_each_launchers_variable)
{
    const char *from;
    ck_assert_int_eq(ranks_in((const char *[]){"OMPI_COMM_WORLD_LOCAL_SIZE=2", NULL}, &from), 2);
    ck_assert_str_eq(from, "OMPI_COMM_WORLD_LOCAL_SIZE");
    ck_assert_int_eq(ranks_in((const char *[]){"PMIX_LOCAL_SIZE=8", NULL}, &from), 8);
    ck_assert_str_eq(from, "PMIX_LOCAL_SIZE");
    ck_assert_int_eq(ranks_in((const char *[]){"MPI_LOCALNRANKS=3", NULL}, &from), 3);
    ck_assert_str_eq(from, "MPI_LOCALNRANKS");
    ck_assert_int_eq(ranks_in((const char *[]){"SLURM_NTASKS_PER_NODE=4", NULL}, &from), 4);
    ck_assert_str_eq(from, "SLURM_NTASKS_PER_NODE");
    /* Open MPI's own count beats Slurm's allocation around it */
    ck_assert_int_eq(ranks_in((const char *[]){"SLURM_NTASKS_PER_NODE=16",
                                               "OMPI_COMM_WORLD_LOCAL_SIZE=2", NULL}, &from), 2);
    ck_assert_str_eq(from, "OMPI_COMM_WORLD_LOCAL_SIZE");
    ck_assert_int_eq(ranks_in((const char *[]){"PATH=/bin", NULL}, &from), 0);
    ck_assert_ptr_null(from);
}
END_TEST

START_TEST(srun_step_tasks_are_read_for_this_node)
{
    const char *from;
    /* nodes 0-2 run 2 tasks, node 3 runs 1 */
    static const int expect[] = {2, 2, 2, 1, 0};
    for (int node = 0; node < 5; node++) {
        char id[32];
        snprintf(id, sizeof id, "SLURM_NODEID=%d", node);
        int n = ranks_in((const char *[]){"SLURM_STEP_TASKS_PER_NODE=2(x3),1", id, NULL}, &from);
        ck_assert_msg(n == expect[node], "node %d: %d ranks", node, n);
        if (n)
            ck_assert_str_eq(from, "SLURM_STEP_TASKS_PER_NODE");
    }
    ck_assert_int_eq(ranks_in((const char *[]){"SLURM_STEP_TASKS_PER_NODE=2", NULL}, &from), 0);
}
END_TEST

START_TEST(counts_that_are_not_counts_are_ignored)
{
    static const char *const bad[] = {"", "0", "-2", "2x", " 2", "abc", "99999999999", "1e3"};
    const char *from;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char ompi[64], slurm[64], cpt[64];
        snprintf(ompi, sizeof ompi, "OMPI_COMM_WORLD_LOCAL_SIZE=%s", bad[i]);
        snprintf(slurm, sizeof slurm, "SLURM_STEP_TASKS_PER_NODE=%s", bad[i]);
        snprintf(cpt, sizeof cpt, "SLURM_CPUS_PER_TASK=%s", bad[i]);
        ck_assert_int_eq(ranks_in((const char *[]){ompi, NULL}, &from), 0);
        ck_assert_int_eq(ranks_in((const char *[]){slurm, "SLURM_NODEID=0", NULL}, &from), 0);
        fake_env = (const char *[]){cpt, NULL};
        ck_assert_int_eq(tg__cpus_per_task(fake_get), 0);
    }
    ck_assert_int_eq(ranks_in((const char *[]){"SLURM_STEP_TASKS_PER_NODE=2(x",
                                               "SLURM_NODEID=0", NULL}, &from), 0);
    ck_assert_int_eq(ranks_in((const char *[]){"SLURM_STEP_TASKS_PER_NODE=2(x3),1",
                                               "SLURM_NODEID=x", NULL}, &from), 0);
}
END_TEST

START_TEST(launcher_binding_is_read_from_open_mpi_and_slurm)
{
    fake_env = (const char *[]){"OMPI_MCA_orte_bound_at_launch=1", NULL};
    ck_assert_str_eq(tg__launcher_bound(fake_get), "OMPI_MCA_orte_bound_at_launch");
    fake_env = (const char *[]){"SLURM_CPU_BIND_TYPE=mask_cpu:", NULL};
    ck_assert_str_eq(tg__launcher_bound(fake_get), "SLURM_CPU_BIND_TYPE");
    fake_env = (const char *[]){"SLURM_CPU_BIND_TYPE=none", "OMPI_MCA_orte_bound_at_launch=0",
                                NULL};
    ck_assert_ptr_null(tg__launcher_bound(fake_get));
}
END_TEST

/* ---- the choice ---------------------------------------------------------- */

START_TEST(unbound_ranks_split_the_mask_and_bound_ones_keep_theirs)
{
    char why[192];
    tg__cpu_view v = {.mask_cpus = 2, .local_ranks = 2, .ranks_from = "OMPI_COMM_WORLD_LOCAL_SIZE"};
    ck_assert_int_eq(tg__threads_pick(&v, why, sizeof why), 1);
    ck_assert_str_eq(why, "2 cores in the affinity mask shared by 2 ranks on this node, per "
                          "OMPI_COMM_WORLD_LOCAL_SIZE");
    v = (tg__cpu_view){.mask_cpus = 64, .local_ranks = 4, .ranks_from = "PMIX_LOCAL_SIZE"};
    ck_assert_int_eq(tg__threads_pick(&v, why, sizeof why), 16);
    v.local_ranks = 100; /* more ranks than cores: one thread each, never 0 */
    ck_assert_int_eq(tg__threads_pick(&v, why, sizeof why), 1);
    v = (tg__cpu_view){.mask_cpus = 8, .local_ranks = 4, .bound_by = "SLURM_CPU_BIND_TYPE"};
    ck_assert_int_eq(tg__threads_pick(&v, why, sizeof why), 8);
    ck_assert_str_eq(why, "8 cores in the affinity mask, this rank's own per SLURM_CPU_BIND_TYPE");
    v = (tg__cpu_view){.mask_cpus = 2};
    ck_assert_int_eq(tg__threads_pick(&v, why, sizeof why), 2);
    ck_assert_str_eq(why, "2 cores in the affinity mask");
    v.mask_cpus = 0; /* an unreadable mask: one thread */
    ck_assert_int_eq(tg__threads_pick(&v, why, sizeof why), 1);
}
END_TEST

START_TEST(cpus_per_task_and_the_quota_cap_the_share)
{
    char why[192];
    tg__cpu_view v = {.mask_cpus = 32, .cpus_per_task = 4};
    ck_assert_int_eq(tg__threads_pick(&v, why, sizeof why), 4);
    ck_assert_str_eq(why, "SLURM_CPUS_PER_TASK=4");
    v = (tg__cpu_view){.mask_cpus = 32, .quota_cpus = 2.5};
    ck_assert_int_eq(tg__threads_pick(&v, why, sizeof why), 2);
    ck_assert_str_eq(why, "a cgroup CPU quota of 2.5 cores");
    v = (tg__cpu_view){.mask_cpus = 32, .quota_cpus = 4, .local_ranks = 2,
                       .ranks_from = "MPI_LOCALNRANKS"};
    ck_assert_int_eq(tg__threads_pick(&v, why, sizeof why), 2);
    ck_assert_str_eq(why, "a cgroup CPU quota of 4 cores shared by 2 ranks on this node, per "
                          "MPI_LOCALNRANKS");
    v.quota_cpus = 0.5; /* less than a core a rank: still one thread */
    ck_assert_int_eq(tg__threads_pick(&v, why, sizeof why), 1);
    v.quota_cpus = 64; /* a quota above the mask changes nothing */
    ck_assert_int_eq(tg__threads_pick(&v, why, sizeof why), 16);
    char tiny[8];
    ck_assert_int_eq(tg__threads_pick(&v, tiny, sizeof tiny), 16);
    ck_assert_int_eq((int)strlen(tiny), 7);
}
END_TEST

START_TEST(other_running_work_takes_its_cores)
{
    ck_assert_int_eq(tg__others_running("0.50 0.40 0.30 3/190 1234\n"), 2);
    ck_assert_int_eq(tg__others_running("0.00 0.00 0.00 1/90 12"), 0);
    ck_assert_int_eq(tg__others_running("0.50 0.40 0.30 0/190 1234"), -1);
    ck_assert_int_eq(tg__others_running("garbage"), -1);
    ck_assert_int_eq(tg__others_running(NULL), -1);
    char why[192];
    /* a busy loop on one of two cores: one thread, which never waits for a second */
    tg__cpu_view v = {.mask_cpus = 2, .online_cpus = 2, .others_running = 1};
    ck_assert_int_eq(tg__threads_pick(&v, why, sizeof why), 1);
    ck_assert_str_eq(why, "2 cores in the affinity mask, 1 other thread running on the machine's 2");
    v.others_running = 20;
    ck_assert_int_eq(tg__threads_pick(&v, why, sizeof why), 1);
    v.others_running = -1; /* unknown: the mask alone */
    ck_assert_int_eq(tg__threads_pick(&v, why, sizeof why), 2);
    /* others spread over 64 CPUs leave most of an 8-CPU mask */
    v = (tg__cpu_view){.mask_cpus = 8, .online_cpus = 64, .others_running = 16};
    ck_assert_int_eq(tg__threads_pick(&v, why, sizeof why), 6);
    /* a rank's share already below what is free stays */
    v = (tg__cpu_view){.mask_cpus = 4, .online_cpus = 4, .others_running = 1, .local_ranks = 2,
                       .ranks_from = "PMIX_LOCAL_SIZE"};
    ck_assert_int_eq(tg__threads_pick(&v, why, sizeof why), 2);
    ck_assert_str_eq(why, "4 cores in the affinity mask shared by 2 ranks on this node, per "
                          "PMIX_LOCAL_SIZE");
}
END_TEST

/* ---- cgroup files under a temporary root --------------------------------- */

static char root[64];

static void put(const char *rel, const char *text)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    for (char *s = strchr(path + strlen(root) + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = '\0';
        mkdir(path, 0755);
        *s = '/';
    }
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void make_root(void)
{
    strcpy(root, "/tmp/tg_cgroupXXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(root));
}

static void drop_root(void)
{
    nftw(root, remove_one, 8, FTW_DEPTH | FTW_PHYS);
}

START_TEST(cgroup_v2_quota_is_the_smallest_up_the_tree)
{
    make_root();
    put("cpu.max", "max 100000\n");
    put("job/cpu.max", "300000 100000\n");
    put("job/step/cpu.max", "max 100000\n");
    put("job/step/task/cpu.max", "150000 100000\n");
    ck_assert_double_eq(tg__cgroup_quota(root, "0::/job/step/task\n"), 1.5);
    ck_assert_double_eq(tg__cgroup_quota(root, "0::/job/step\n"), 3.0);
    ck_assert_double_eq(tg__cgroup_quota(root, "0::/\n"), 0.0);
    /* a container sees its own cgroup at the root while its path is the host's */
    ck_assert_double_eq(tg__cgroup_quota(root, "0::/host/path/of/it\n"), 0.0);
    put("cpu.max", "200000 100000\n");
    ck_assert_double_eq(tg__cgroup_quota(root, "0::/host/path/of/it\n"), 2.0);
    put("job/cpu.max", "garbage\n");
    ck_assert_double_eq(tg__cgroup_quota(root, "0::/job\n"), 2.0);
    drop_root();
}
END_TEST

START_TEST(cgroup_v1_quota_is_quota_over_period)
{
    make_root();
    static const char self[] = "12:memory:/x\n4:cpu,cpuacct:/job\n0::/\n";
    put("cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
    put("cpu,cpuacct/cpu.cfs_period_us", "100000\n");
    put("cpu,cpuacct/job/cpu.cfs_quota_us", "-1\n");
    put("cpu,cpuacct/job/cpu.cfs_period_us", "100000\n");
    /* the hybrid layout's empty v2 line names no cpu.max: v1 is read */
    ck_assert_double_eq(tg__cgroup_quota(root, self), 0.0);
    put("cpu,cpuacct/job/cpu.cfs_quota_us", "250000\n");
    ck_assert_double_eq(tg__cgroup_quota(root, self), 2.5);
    put("cpu/cpu.cfs_quota_us", "50000\n");
    put("cpu/cpu.cfs_period_us", "100000\n");
    ck_assert_double_eq(tg__cgroup_quota(root, "3:cpu:/\n"), 0.5);
    ck_assert_double_eq(tg__cgroup_quota(root, "12:memory:/x\n"), 0.0);
    ck_assert_double_eq(tg__cgroup_quota(root, ""), 0.0);
    drop_root();
}
END_TEST

/* ---- end to end: a child with a launcher's environment -------------------- */

/* What the child prints: its thread count, OpenBLAS's, and why. */
static int report(void)
{
    tg_build_info info;
    tg_build_info_get(&info);
    int blas = info.threads;
#if TG_HAVE_BLAS
    blas = openblas_get_num_threads();
#endif
    printf("%d %d %s\n", info.threads, blas, info.threads_why);
    return 0;
}

static bool launcher_variable(const char *e)
{
    static const char *const prefixes[] = {"OMPI_", "PMIX_", "SLURM_", "MPI_LOCALNRANKS", "MV2_",
                                           "OMP_", "OPENBLAS_", "GOMP_"};
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++)
        if (strncmp(e, prefixes[i], strlen(prefixes[i])) == 0)
            return true;
    return false;
}

/* This program, by the path it was started with: under valgrind
 * /proc/self/exe is valgrind's own tool, which cannot be started alone. */
static char *self_path;

/* Runs this program's report on the first `cpus` CPUs of the real mask with
 * the environment less any launcher's variables plus `extra`. */
static void child_report(const char *const *extra, int cpus, int *threads, int *blas, char *why,
                         size_t size)
{
    extern char **environ;
    const char *env[512];
    int n = 0;
    for (char **e = environ; *e && n < 500; e++)
        if (!launcher_variable(*e))
            env[n++] = *e;
    for (; extra && *extra; extra++)
        env[n++] = *extra;
    env[n] = NULL;
    int fd[2];
    ck_assert_int_eq(pipe(fd), 0);
    pid_t pid = fork();
    if (pid == 0) {
        cpu_set_t mask, narrow;
        CPU_ZERO(&narrow);
        sched_getaffinity(0, sizeof mask, &mask);
        for (int c = 0, kept = 0; c < CPU_SETSIZE && kept < cpus; c++)
            if (CPU_ISSET(c, &mask))
                CPU_SET(c, &narrow), kept++;
        sched_setaffinity(0, sizeof narrow, &narrow);
        dup2(fd[1], 1);
        execve(self_path, (char *[]){self_path, "--report", NULL}, (char **)env);
        _exit(127);
    }
    close(fd[1]);
    char out[256] = {0};
    ssize_t got = read(fd[0], out, sizeof out - 1);
    close(fd[0]);
    int status;
    waitpid(pid, &status, 0);
    ck_assert_msg(got > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0, "child: %s", out);
    int used = 0;
    ck_assert_int_eq(sscanf(out, "%d %d %n", threads, blas, &used), 2);
    out[strcspn(out, "\n")] = '\0';
    snprintf(why, size, "%s", out + used);
}

static int mask_cpus(void)
{
    cpu_set_t mask;
    ck_assert_int_eq(sched_getaffinity(0, sizeof mask, &mask), 0);
    return CPU_COUNT(&mask);
}

/* The quota of the cgroup the test runs in, which caps every expectation. */
__attribute__((unused)) static int quota_cap(int n, int ranks)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    char self[4096] = {0};
    if (f) {
        size_t got = fread(self, 1, sizeof self - 1, f);
        self[got] = '\0';
        fclose(f);
    }
    double quota = tg__cgroup_quota("/sys/fs/cgroup", self);
    int q = (int)(quota / ranks);
    q = q < 1 ? 1 : q;
    return quota > 0 && q < n ? q : n;
}

START_TEST(two_local_ranks_on_a_two_cpu_mask_take_one_thread_each)
{
    int cpus = mask_cpus() < 2 ? mask_cpus() : 2, threads, blas;
    char why[192];
    child_report((const char *[]){"OMPI_COMM_WORLD_LOCAL_SIZE=2", NULL}, cpus, &threads, &blas,
                 why, sizeof why);
#if TG_HAVE_OPENMP
    ck_assert_int_eq(threads, 1);
    char expect[192];
    snprintf(expect, sizeof expect,
             "%d core%s in the affinity mask shared by 2 ranks on this node, per "
             "OMPI_COMM_WORLD_LOCAL_SIZE",
             cpus, cpus == 1 ? "" : "s");
    if (quota_cap(1, 2) == 1)
        ck_assert_str_eq(why, expect);
#else
    ck_assert_int_eq(threads, 1);
    ck_assert_str_eq(why, "built without OpenMP");
#endif
    ck_assert_int_eq(blas, 1); /* OpenBLAS follows */
}
END_TEST

START_TEST(one_process_takes_its_whole_mask)
{
    int cpus = mask_cpus() < 2 ? mask_cpus() : 2, threads, blas;
    char why[192];
    child_report(NULL, cpus, &threads, &blas, why, sizeof why);
#if TG_HAVE_OPENMP || TG_HAVE_BLAS /* without either, nothing runs a second thread */
    int expect = quota_cap(cpus, 1);
    /* other work running on the machine may take some of the cores */
    if (strstr(why, " other thread"))
        ck_assert_msg(blas >= 1 && blas <= expect, "%d threads: %s", blas, why);
    else
        ck_assert_int_eq(blas, expect);
#endif
#if TG_HAVE_OPENMP
    ck_assert_int_eq(threads, blas);
#else
    ck_assert_int_eq(threads, 1);
#endif
}
END_TEST

START_TEST(omp_num_threads_wins_over_the_share)
{
    int threads, blas;
    char why[192];
    child_report((const char *[]){"OMPI_COMM_WORLD_LOCAL_SIZE=2", "OMP_NUM_THREADS=3", NULL}, 2,
                 &threads, &blas, why, sizeof why);
#if TG_HAVE_OPENMP
    ck_assert_int_eq(threads, 3);
    ck_assert_str_eq(why, "OMP_NUM_THREADS=3");
#endif
    /* OpenBLAS reads it itself (and keeps to the cores it found) */
    child_report((const char *[]){"OMP_NUM_THREADS=1", NULL}, 2, &threads, &blas, why, sizeof why);
    ck_assert_int_eq(threads, 1);
    ck_assert_int_eq(blas, 1);
}
END_TEST

START_TEST(set_num_threads_wins_over_the_share_and_says_so)
{
    ck_assert_int_eq(tg_set_num_threads(3), 0);
    tg_build_info info;
    tg_build_info_get(&info);
#if TG_HAVE_OPENMP
    ck_assert_int_eq(info.threads, 3);
#endif
    ck_assert_str_eq(info.threads_why, "tg_set_num_threads");
    char line[1024];
    tg_build_info_format(line, sizeof line);
    ck_assert_msg(strstr(line, " (tg_set_num_threads); mpi: ") != NULL, "line: %s", line);
}
END_TEST

int main(int argc, char **argv)
{
    self_path = argv[0];
    if (argc == 2 && strcmp(argv[1], "--report") == 0)
        return report();
    Suite *s = suite_create("threads");
    TCase *tc = tcase_checked("threads");
    tcase_add_test(tc, local_ranks_come_from_each_launchers_variable);
    tcase_add_test(tc, srun_step_tasks_are_read_for_this_node);
    tcase_add_test(tc, counts_that_are_not_counts_are_ignored);
    tcase_add_test(tc, launcher_binding_is_read_from_open_mpi_and_slurm);
    tcase_add_test(tc, unbound_ranks_split_the_mask_and_bound_ones_keep_theirs);
    tcase_add_test(tc, cpus_per_task_and_the_quota_cap_the_share);
    tcase_add_test(tc, other_running_work_takes_its_cores);
    tcase_add_test(tc, cgroup_v2_quota_is_the_smallest_up_the_tree);
    tcase_add_test(tc, cgroup_v1_quota_is_quota_over_period);
    tcase_add_test(tc, two_local_ranks_on_a_two_cpu_mask_take_one_thread_each);
    tcase_add_test(tc, one_process_takes_its_whole_mask);
    tcase_add_test(tc, omp_num_threads_wins_over_the_share);
    tcase_add_test(tc, set_num_threads_wins_over_the_share_and_says_so);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
