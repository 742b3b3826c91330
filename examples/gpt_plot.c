/* The loss curve gpt train draws (gpt_plot.h): SVG written by hand, train
 * and validation loss against the step. */
#include "gpt_plot.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

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
