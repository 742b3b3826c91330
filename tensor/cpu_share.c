/* The default thread count's inputs: the ranks of this job on this node and
 * whether the launcher bound them (its variables), the affinity mask and the
 * cgroup's CPU quota; and the count they give. Nothing here is cached or fails loudly:
 * what cannot be read is left out of the choice. */
#define _GNU_SOURCE
#include "cpu_share.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Larger counts are taken for garbage: no node has a million cores. */
#define COUNT_MAX (1 << 20)

/* s as a count in 1..COUNT_MAX, else 0; *end past the digits. */
static int parse_count(const char *s, const char **end)
{
    if (!s || *s < '0' || *s > '9')
        return 0;
    errno = 0;
    char *e;
    long v = strtol(s, &e, 10);
    if (end)
        *end = e;
    return errno || v < 1 || v > COUNT_MAX ? 0 : (int)v;
}

/* The whole of s as a count, else 0. */
static int whole_count(const char *s)
{
    const char *end = NULL;
    int v = parse_count(s, &end);
    return v && *end == '\0' ? v : 0;
}

/* Slurm's per-node list, "2(x3),1": the entry of node `node`, else 0. */
static int slurm_tasks_on_node(const char *list, int node)
{
    const char *p = list;
    while (p && *p) {
        const char *end;
        int tasks = parse_count(p, &end), repeat = 1;
        if (!tasks)
            return 0;
        if (*end == '(') {
            if (end[1] != 'x' || !(repeat = parse_count(end + 2, &end)) || *end != ')')
                return 0;
            end++;
        }
        if (*end != ',' && *end != '\0')
            return 0;
        if (node < repeat)
            return tasks;
        node -= repeat;
        if (*end != ',')
            return 0;
        p = end + 1;
    }
    return 0;
}

int tg__local_ranks(tg__getenv_fn get, const char **from)
{
    static const char *const counts[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "PMIX_LOCAL_SIZE",
                                         "MPI_LOCALNRANKS", "MV2_COMM_WORLD_LOCAL_SIZE"};
    *from = NULL;
    for (size_t i = 0; i < sizeof counts / sizeof *counts; i++) {
        int n = whole_count(get(counts[i]));
        if (n)
            return *from = counts[i], n;
    }
    /* srun's tasks of this step, per node in node order */
    const char *node = get("SLURM_NODEID");
    int index = node && strcmp(node, "0") == 0 ? 0 : whole_count(node), n = 0;
    if ((index > 0 || (node && strcmp(node, "0") == 0)) &&
        (n = slurm_tasks_on_node(get("SLURM_STEP_TASKS_PER_NODE"), index)))
        return *from = "SLURM_STEP_TASKS_PER_NODE", n;
    if ((n = whole_count(get("SLURM_NTASKS_PER_NODE"))))
        return *from = "SLURM_NTASKS_PER_NODE", n;
    return 0;
}

const char *tg__launcher_bound(tg__getenv_fn get)
{
    const char *ompi = get("OMPI_MCA_orte_bound_at_launch");
    if (ompi && strcmp(ompi, "1") == 0)
        return "OMPI_MCA_orte_bound_at_launch";
    const char *slurm = get("SLURM_CPU_BIND_TYPE");
    if (slurm && *slurm && strncmp(slurm, "none", 4) != 0)
        return "SLURM_CPU_BIND_TYPE";
    return NULL;
}

int tg__cpus_per_task(tg__getenv_fn get)
{
    return whole_count(get("SLURM_CPUS_PER_TASK"));
}

/* The first line of the file dir/name into buf; false when unreadable. */
static bool read_line(const char *dir, const char *name, char *buf, size_t size)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return false;
    FILE *f = fopen(path, "re");
    if (!f)
        return false;
    bool ok = fgets(buf, (int)size, f) != NULL;
    fclose(f);
    return ok;
}

/* The cgroup path of the hierarchy whose controller list holds `ctl` ("" for
 * v2's "0::") in the text of /proc/self/cgroup, into path; false when absent. */
static bool cgroup_path(const char *self_cgroup, const char *ctl, char *path, size_t size)
{
    for (const char *line = self_cgroup; line && *line;) {
        const char *eol = strchr(line, '\n'), *c1 = strchr(line, ':');
        const char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        if (c2 && c2 < line + len) {
            bool match = false;
            if (!*ctl)
                match = c2 == c1 + 1 && strncmp(line, "0:", 2) == 0;
            for (const char *t = c1 + 1; *ctl && t < c2;) {
                size_t n = strcspn(t, ",:");
                match |= n == strlen(ctl) && strncmp(t, ctl, n) == 0;
                t += n + (t[n] == ',');
            }
            size_t plen = (size_t)(line + len - (c2 + 1));
            if (match && plen < size) {
                memcpy(path, c2 + 1, plen);
                path[plen] = '\0';
                return true;
            }
        }
        line = eol ? eol + 1 : NULL;
    }
    return false;
}

/* The quota in cores set in dir, 0 without one. */
static double quota_in(const char *dir, bool v2)
{
    char a[64], b[64];
    if (v2) {
        if (!read_line(dir, "cpu.max", a, sizeof a) || strncmp(a, "max", 3) == 0)
            return 0;
        double q, period;
        return sscanf(a, "%lf %lf", &q, &period) == 2 && q > 0 && period > 0 ? q / period : 0;
    }
    if (!read_line(dir, "cpu.cfs_quota_us", a, sizeof a) ||
        !read_line(dir, "cpu.cfs_period_us", b, sizeof b))
        return 0;
    double q = atof(a), period = atof(b);
    return q > 0 && period > 0 ? q / period : 0;
}

/* The smallest quota of base/path and its ancestors up to base. */
static double quota_up(const char *base, const char *path, bool v2)
{
    char dir[PATH_MAX];
    if (snprintf(dir, sizeof dir, "%s%s", base, path) >= (int)sizeof dir)
        return 0;
    size_t stop = strlen(base);
    double best = 0;
    for (;;) {
        double q = quota_in(dir, v2);
        if (q > 0 && (best == 0 || q < best))
            best = q;
        char *slash = strrchr(dir, '/');
        if (!slash || (size_t)(slash - dir) < stop)
            return best;
        *slash = '\0';
    }
}

double tg__cgroup_quota(const char *root, const char *self_cgroup)
{
    char path[PATH_MAX], base[PATH_MAX];
    /* a hybrid layout lists an empty v2 hierarchy beside v1's cpu controller */
    if (cgroup_path(self_cgroup, "", path, sizeof path)) {
        double q = quota_up(root, path, true);
        if (q > 0)
            return q;
    }
    if (!cgroup_path(self_cgroup, "cpu", path, sizeof path))
        return 0;
    static const char *const mounts[] = {"cpu,cpuacct", "cpu", "cpuacct,cpu"};
    for (size_t i = 0; i < sizeof mounts / sizeof *mounts; i++) {
        snprintf(base, sizeof base, "%s/%s", root, mounts[i]);
        double q = quota_up(base, path, false);
        if (q > 0)
            return q;
    }
    return 0;
}

/* The text of /proc/self/cgroup into buf ("" when unreadable). */
static void read_self_cgroup(char *buf, size_t size)
{
    buf[0] = '\0';
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (!f)
        return;
    size_t n = fread(buf, 1, size - 1, f);
    buf[n] = '\0';
    fclose(f);
}

int tg__others_running(const char *loadavg)
{
    double avg[3];
    int running, total;
    if (!loadavg || sscanf(loadavg, "%lf %lf %lf %d/%d", &avg[0], &avg[1], &avg[2], &running,
                           &total) != 5 || running < 1 || total < running)
        return -1;
    return running - 1;
}

/* The fewest other threads running over a few samples a millisecond apart:
 * a count taken once catches the short-lived (a launcher's, a shell's). */
static int sample_others(void)
{
    int fewest = -1;
    for (int i = 0; i < 3; i++) {
        char line[128];
        int n = read_line("/proc", "loadavg", line, sizeof line) ? tg__others_running(line) : -1;
        if (n >= 0 && (fewest < 0 || n < fewest))
            fewest = n;
        if (i < 2)
            nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    return fewest;
}

static const char *process_env(const char *name)
{
    return getenv(name);
}

void tg__cpu_view_read(tg__cpu_view *v)
{
    *v = (tg__cpu_view){0};
    cpu_set_t mask;
    if (sched_getaffinity(0, sizeof mask, &mask) == 0)
        v->mask_cpus = CPU_COUNT(&mask);
    char self[4096];
    read_self_cgroup(self, sizeof self);
    v->quota_cpus = tg__cgroup_quota("/sys/fs/cgroup", self);
    v->local_ranks = tg__local_ranks(process_env, &v->ranks_from);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    v->online_cpus = online > 0 && online < COUNT_MAX ? (int)online : 0;
    v->others_running = sample_others();
    v->bound_by = tg__launcher_bound(process_env);
    v->cpus_per_task = tg__cpus_per_task(process_env);
}

int tg__threads_pick(const tg__cpu_view *v, char *why, size_t size)
{
    int n = v->mask_cpus > 0 ? v->mask_cpus : 1;
    int ranks = v->local_ranks > 1 ? v->local_ranks : 1;
    const char *from = v->ranks_from ? v->ranks_from : "the launcher";
    if (v->bound_by || ranks == 1)
        snprintf(why, size, "%d core%s in the affinity mask%s%s", n, n == 1 ? "" : "s",
                 v->bound_by ? ", this rank's own per " : "", v->bound_by ? v->bound_by : "");
    else {
        snprintf(why, size, "%d core%s in the affinity mask shared by %d ranks on this node, per %s",
                 n, n == 1 ? "" : "s", ranks, from);
        n = n / ranks > 0 ? n / ranks : 1;
    }
    if (v->cpus_per_task > 0 && v->cpus_per_task < n) {
        n = v->cpus_per_task;
        snprintf(why, size, "SLURM_CPUS_PER_TASK=%d", n);
    }
    /* the quota is the cgroup's, which holds every rank on the node */
    int quota = (int)(v->quota_cpus / ranks);
    quota = quota < 1 ? 1 : quota;
    if (v->quota_cpus > 0 && quota < n) {
        n = quota;
        int len = snprintf(why, size, "a cgroup CPU quota of %.3g cores", v->quota_cpus);
        if (ranks > 1 && len >= 0 && (size_t)len < size)
            snprintf(why + len, size - (size_t)len, " shared by %d ranks on this node, per %s",
                     ranks, from);
    }
    /* Other work running now takes its cores: a team larger than the cores
     * left would wait on its own threads, each waiting thread spinning on a
     * core another one needs. Others are taken to spread over the machine. */
    if (v->others_running > 0 && v->online_cpus > 0 && v->mask_cpus > 0) {
        int mask = v->mask_cpus, others = v->others_running;
        int busy = (int)(((long long)others * mask + v->online_cpus - 1) / v->online_cpus);
        int free_cpus = mask - busy > 1 ? mask - busy : 1;
        if (free_cpus < n) {
            n = free_cpus;
            snprintf(why, size, "%d core%s in the affinity mask, %d other thread%s running on "
                     "the machine's %d", mask, mask == 1 ? "" : "s", others,
                     others == 1 ? "" : "s", v->online_cpus);
        }
    }
    return n;
}
