/* The cores this process may use and how many ranks of its job share them:
 * what the default thread count is made of (cpu_share.c). Pure functions of
 * their inputs, so that tests can hand them made-up environments and files. */
#ifndef TG_CPU_SHARE_H
#define TG_CPU_SHARE_H

#include <stddef.h>

/* What a process may run on, read from the machine or made up by a test. */
typedef struct {
    int mask_cpus;          /* CPUs in the affinity mask (sched_getaffinity) */
    const char *bound_by;   /* the variable by which the launcher says it bound each rank
                               to cores of its own (static), or NULL */
    double quota_cpus;      /* the cgroup's CPU quota in cores, 0 without one */
    int local_ranks;        /* ranks on this node as the launcher says, 0 without one */
    const char *ranks_from; /* the variable that said so (static), or NULL */
    int cpus_per_task;      /* SLURM_CPUS_PER_TASK, 0 when unset */
    int online_cpus;        /* the machine's CPUs, 0 when unknown */
    int others_running;     /* threads of other work running or ready to, -1 when unknown */
} tg__cpu_view;

/* A getenv: tests pass their own. */
typedef const char *(*tg__getenv_fn)(const char *name);

/* The ranks of this job on this node from the launcher's variables (Open MPI,
 * PMIx, MPICH, MVAPICH, then Slurm's srun), 0 when none holds a count; *from
 * names the variable. */
int tg__local_ranks(tg__getenv_fn get, const char **from);
/* The variable by which the launcher says it bound each rank to its own
 * cores (Open MPI 4's OMPI_MCA_orte_bound_at_launch=1, srun's
 * SLURM_CPU_BIND_TYPE other than none), or NULL: unbound ranks on a node
 * see the same mask and share it. */
const char *tg__launcher_bound(tg__getenv_fn get);
/* SLURM_CPUS_PER_TASK as a count, 0 when unset or not one. */
int tg__cpus_per_task(tg__getenv_fn get);
/* The CPU quota in cores of the cgroup that self_cgroup (the text of
 * /proc/self/cgroup) names under root (/sys/fs/cgroup), the smallest of it
 * and its ancestors': cgroup v2 cpu.max, or v1 cpu.cfs_quota_us over
 * cpu.cfs_period_us. 0 when none is set or none can be read. */
double tg__cgroup_quota(const char *root, const char *self_cgroup);
/* The threads running or ready to run besides the caller, from the text of
 * /proc/loadavg ("0.50 0.40 0.30 3/190 1234": 2), or -1. */
int tg__others_running(const char *loadavg);
/* Fills *v from this process's environment, affinity mask and cgroup. */
void tg__cpu_view_read(tg__cpu_view *v);
/* The threads each rank should take by default, >= 1, and why, as text
 * into why (always terminated), e.g. "2 cores in the affinity mask shared by
 * 2 ranks on this node, per OMPI_COMM_WORLD_LOCAL_SIZE". */
int tg__threads_pick(const tg__cpu_view *v, char *why, size_t size);

/* Why the calling thread has the count it has (threads.c): the default's
 * reason, or what set it ("OMP_NUM_THREADS=4", "tg_set_num_threads"). */
const char *tg__threads_origin(void);

#endif
