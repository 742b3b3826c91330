/* What gpt shows of a run: the progress lines as it trains, and the loss
 * curve as an SVG file, with no library to draw it. */
#ifndef GPT_PLOT_H
#define GPT_PLOT_H

#include <stdbool.h>
#include <stdint.h>

/* Seconds on a monotonic clock. */
double gpt_now(void);

/* A run after step `step` of `steps` (loss, val: per step, val NAN where not
 * measured), timed from step `first` at time `started`. */
typedef struct {
    const double *loss, *val;
    int64_t step, steps, first;
    double tokens_per_step, started;
    bool tty; /* one line that redraws itself; otherwise plain lines */
} gpt_progress;
/* On a terminal one line redraws itself every step; otherwise (a pipe, a
 * log file, a rank's pseudo-terminal under mpirun) a plain line is printed
 * at every evaluation. */
void gpt_print_progress(const gpt_progress *p);

/* Train loss (loss[0..n), every step) and validation loss (val[0..n), NAN
 * where not measured) against the step: 640x380, the loss on a log scale
 * labelled at each decade, the steps from 0 in five ticks. 0, or 1 after
 * printing why path cannot be written. */
int gpt_write_loss_svg(const char *path, const double *loss, const double *val, int64_t n);

#endif
