/* gpt's picture of a run: the loss curve as an SVG file, with no library
 * to draw it. */
#ifndef GPT_PLOT_H
#define GPT_PLOT_H

#include <stdint.h>

/* Train loss (loss[0..n), every step) and validation loss (val[0..n), NAN
 * where not measured) against the step: 640x380, the loss on a log scale
 * labelled at each decade, the steps from 0 in five ticks. 0, or 1 after
 * printing why path cannot be written. */
int gpt_write_loss_svg(const char *path, const double *loss, const double *val, int64_t n);

#endif
