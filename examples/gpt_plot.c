/* What gpt train shows (gpt_plot.h): its progress lines, and the loss curve
 * as SVG written by hand, train and validation loss against the step. */
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

static void svg_polyline(FILE *f, const double *v, int64_t n, double ymax, const char *color)
{
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", color);
    for (int64_t i = 0; i < n; i++)
        if (!isnan(v[i]))
            fprintf(f, "%.1f,%.1f ", 60 + 560.0 * (double)(i + 1) / (double)n,
                    330 - 300 * fmin(v[i], ymax) / ymax);
    fprintf(f, "\"/>\n");
}

int gpt_write_loss_svg(const char *path, const double *loss, const double *val, int64_t n)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return fprintf(stderr, "gpt: cannot write %s: %s\n", path, strerror(errno)), 1;
    double ymax = 0;
    for (int64_t i = 0; i < n; i++)
        ymax = fmax(ymax, fmax(loss[i], isnan(val[i]) ? 0 : val[i]));
    ymax = ymax > 0 ? ceil(ymax) : 1;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"640\" height=\"380\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"640\" "
               "height=\"380\" fill=\"white\"/>\n<path d=\"M60,30 V330 H620\" stroke=\"black\" "
               "fill=\"none\"/>\n");
    for (int k = 0; k <= 5; k++) {
        double y = 330 - 60.0 * k, x = 60 + 112.0 * k;
        fprintf(f, "<text x=\"54\" y=\"%.0f\" text-anchor=\"end\">%.2f</text>\n", y + 4,
                ymax * k / 5);
        fprintf(f, "<text x=\"%.0f\" y=\"346\" text-anchor=\"middle\">%lld</text>\n", x,
                (long long)(n * k / 5));
    }
    svg_polyline(f, loss, n, ymax, "#1f77b4");
    svg_polyline(f, val, n, ymax, "#d62728");
    fprintf(f, "<text x=\"340\" y=\"372\" text-anchor=\"middle\">step</text>\n"
               "<text x=\"16\" y=\"180\" transform=\"rotate(-90 16 180)\" "
               "text-anchor=\"middle\">cross-entropy loss</text>\n"
               "<text x=\"440\" y=\"24\" fill=\"#1f77b4\">train</text>\n"
               "<text x=\"500\" y=\"24\" fill=\"#d62728\">validation</text>\n</svg>\n");
    return fclose(f) == 0 ? 0 : 1;
}
