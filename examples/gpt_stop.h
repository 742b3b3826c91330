/* Stopping gpt train cleanly: SIGINT (Ctrl-C), SIGTERM and SIGUSR1 ask the
 * run to stop after its current step, save and exit 128 + the signal. Under
 * an MPI launcher every rank stops at the same step. */
#ifndef GPT_STOP_H
#define GPT_STOP_H

#include <stdbool.h>

/* Catches the three signals. The first one that arrives is the one reported;
 * a second of the same kind ends the process at once, as if not caught.
 * Under Open MPI's mpiexec, a SIGINT or SIGTERM from mpiexec (stopping the
 * job, no longer passing output on) sends the rank's output to /dev/null. */
void gpt_stop_watch(void);
/* Collective: the signal that reached the lowest-numbered rank that got one,
 * or 0 for none. *launcher: it was sent by this process's parent under an
 * MPI launcher (mpiexec stopping the job), as seen by that rank. */
int gpt_stop_requested(bool *launcher);
/* " by SIGTERM", " by SIGTERM from the MPI launcher", ... for sig (0: ""). */
const char *gpt_stop_reason(int sig, bool launcher);

#endif
