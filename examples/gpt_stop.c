/* Stopping gpt train cleanly (gpt_stop.h). Open MPI's mpiexec, when it is
 * sent SIGINT or SIGTERM itself, sends its ranks SIGCONT, then SIGTERM a
 * second later, then SIGKILL a second after that (odls_base_sigkill_timeout),
 * and exits 1 whatever the ranks do: a rank has that second to save. */
#include "gpt_stop.h"

#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpt_dist.h"

/* The signal that asked to stop, with FROM_PARENT when the process that
 * started this one sent it; 0 for none. One atomic word: the threads of the
 * OpenMP team can take two signals at once, and the first must win. */
enum { FROM_PARENT = 256 };
static atomic_int first_signal;

/* /dev/null under Open MPI's mpiexec, which stops reading its ranks' output
 * once it is told to stop the job: a rank writing a line then blocks on the
 * full pipe until SIGKILL comes, and never saves. Its SIGINT or SIGTERM
 * points the rank's output there instead; a write blocked at that moment is
 * restarted (SA_RESTART) on the same descriptor number, now /dev/null. */
static int quiet_fd = -1;

static void on_signal(int sig, siginfo_t *info, void *context)
{
    (void)context;
    int none = 0, mine = sig | (info && info->si_pid == getppid() ? FROM_PARENT : 0);
    if ((mine & FROM_PARENT) && sig != SIGUSR1 && quiet_fd >= 0) {
        dup2(quiet_fd, STDOUT_FILENO);
        dup2(quiet_fd, STDERR_FILENO);
    }
    if (!atomic_compare_exchange_strong(&first_signal, &none, mine) && none % FROM_PARENT == sig) {
        signal(sig, SIG_DFL); /* asked twice: stop now */
        raise(sig);
    }
}

void gpt_stop_watch(void)
{
    const char *world = getenv("OMPI_COMM_WORLD_SIZE");
    if (world && *world && quiet_fd < 0)
        quiet_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
}

int gpt_stop_requested(bool *launcher)
{
    /* rank r's signal as 128 r + 64 (not from the parent) + sig: the least
     * value is the lowest rank's; signal numbers are below 64 */
    const int none = 0x7fffffff;
    int first = atomic_load(&first_signal), sig = first % FROM_PARENT;
    int least = gpt_par_min(sig ? 128 * gpt_par_rank() + (first & FROM_PARENT ? 0 : 64) + sig
                                : none);
    if (least == none)
        return 0;
    *launcher = least % 128 < 64 && gpt_par_launched();
    return least % 64;
}

const char *gpt_stop_reason(int sig, bool launcher)
{
    static char reason[64];
    snprintf(reason, sizeof reason, " by %s%s", sig == SIGINT ? "SIGINT" : sig == SIGTERM
             ? "SIGTERM" : "SIGUSR1", launcher ? " from the MPI launcher" : "");
    return sig ? reason : "";
}
