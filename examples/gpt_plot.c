/* What gpt train shows (gpt_plot.h): its progress lines, and the loss curve
 * as SVG written by hand, train and validation loss against the step, the
 * loss on a log scale so that the late steps, which move it by a fraction of
 * its first value, stay visible. */
#include "gpt_plot.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

double gpt_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *clock_text(double seconds, char buf[32])
{
    long s = (long)(seconds + 0.5);
    snprintf(buf, 32, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    return buf;
}

void gpt_print_progress(const gpt_progress *p)
{
    int64_t s = p->step;
    bool measured = !isnan(p->val[s - 1]);
    if (!p->tty && !measured && s != p->steps)
        return;
    double elapsed = gpt_now() - p->started, per_step = elapsed / (double)(s - p->first);
    double tokens = (double)(s - p->first) * p->tokens_per_step;
    char e[32], eta[32], val[32] = "";
    double last_val = NAN;
    for (int64_t i = s - 1; i >= 0 && isnan(last_val); i--)
        last_val = p->val[i];
    if (!isnan(last_val))
        snprintf(val, sizeof val, "  val %.6f", last_val);
    printf("%sstep %lld/%lld  loss %.6f%s  %.0f tok/s  elapsed %s  eta %s%s", p->tty ? "\r" : "",
           (long long)s, (long long)p->steps, p->loss[s - 1], val, tokens / elapsed,
           clock_text(elapsed, e), clock_text(per_step * (double)(p->steps - s), eta),
           p->tty ? "\033[K" : "\n");
    if (p->tty && (measured || s == p->steps))
        printf("\n"); /* keep the lines with a validation loss */
    fflush(stdout);
}

/* A loss near 1e-8 is as good as learned; decades below it would squeeze
 * the rest of the curve. */
#define MAX_DECADES 8

/* The loss axis as powers of ten, [10^*lo, 10^*hi]: the decades that hold
 * every finite positive value of loss and val, at most MAX_DECADES. */
static void loss_decades(const double *loss, const double *val, int64_t n, int *lo, int *hi)
{
    double vmin = INFINITY, vmax = 0;
    for (int64_t i = 0; i < 2 * n; i++) {
        double v = i < n ? loss[i] : val[i - n];
        if (isfinite(v) && v > 0)
            vmin = fmin(vmin, v), vmax = fmax(vmax, v);
    }
    if (vmax == 0) { /* nothing to place: one decade from 1 */
        *lo = 0, *hi = 1;
        return;
    }
    *hi = (int)ceil(log10(vmax));
    *lo = (int)floor(log10(vmin));
    if (*lo == *hi)
        *hi = *lo + 1;
    if (*lo < *hi - MAX_DECADES)
        *lo = *hi - MAX_DECADES;
}

/* The picture's y of loss v: 330 at 10^lo, 30 at 10^hi; values outside
 * (0 and below, or past the cut-off) sit on the edge. */
static double loss_y(double v, int lo, int hi)
{
    double d = v > 0 ? fmin(fmax(log10(v), lo), hi) : lo;
    return 330 - 300 * (d - lo) / (hi - lo);
}

static void svg_polyline(FILE *f, const double *v, int64_t n, int lo, int hi, const char *color)
{
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", color);
    for (int64_t i = 0; i < n; i++)
        if (!isnan(v[i]))
            fprintf(f, "%.1f,%.1f ", 60 + 560.0 * (double)(i + 1) / (double)n,
                    loss_y(v[i], lo, hi));
    fprintf(f, "\"/>\n");
}

int gpt_write_loss_svg(const char *path, const double *loss, const double *val, int64_t n)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return fprintf(stderr, "gpt: cannot write %s: %s\n", path, strerror(errno)), 1;
    int lo, hi;
    loss_decades(loss, val, n, &lo, &hi);
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"640\" height=\"380\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"640\" "
               "height=\"380\" fill=\"white\"/>\n");
    for (int k = lo; k <= hi; k++) { /* a label and a faint line at each decade */
        double y = loss_y(pow(10, k), lo, hi);
        fprintf(f, "<path d=\"M60,%.1f H620\" stroke=\"#dddddd\"/>\n", y);
        fprintf(f, "<text x=\"54\" y=\"%.0f\" text-anchor=\"end\">%g</text>\n", y + 4,
                pow(10, k));
    }
    fprintf(f, "<path d=\"M60,30 V330 H620\" stroke=\"black\" fill=\"none\"/>\n");
    for (int k = 0; k <= 5; k++)
        fprintf(f, "<text x=\"%.0f\" y=\"346\" text-anchor=\"middle\">%lld</text>\n",
                60 + 112.0 * k, (long long)(n * k / 5));
    svg_polyline(f, loss, n, lo, hi, "#1f77b4");
    svg_polyline(f, val, n, lo, hi, "#d62728");
    fprintf(f, "<text x=\"340\" y=\"372\" text-anchor=\"middle\">step</text>\n"
               "<text x=\"16\" y=\"180\" transform=\"rotate(-90 16 180)\" "
               "text-anchor=\"middle\">cross-entropy loss (log scale)</text>\n"
               "<text x=\"440\" y=\"24\" fill=\"#1f77b4\">train</text>\n"
               "<text x=\"500\" y=\"24\" fill=\"#d62728\">validation</text>\n</svg>\n");
    return fclose(f) == 0 ? 0 : 1;
}
