/* The passes of the affine ops around their GEMMs: an output's rows set to
 * copies of the bias before the product adds onto them, and a bias
 * gradient's float64 sums stored in float32. */
#include "affine_kernels.h"

#include <string.h>

/* rows copies of the row b (row_bytes) one after another at y: the first
 * copied from b, then the rows done so far copied after themselves, up to
 * a block of about REPEAT_BYTES that stays in L1 and is copied from then
 * on: short rows cost a few long copies rather than a call each. */
#define REPEAT_BYTES 4096
static void repeat_row(char *y, const void *b, size_t row_bytes, int64_t rows)
{
    if (rows <= 0)
        return;
    memcpy(y, b, row_bytes);
    int64_t block = row_bytes < REPEAT_BYTES ? (int64_t)(REPEAT_BYTES / row_bytes) : 1;
    for (int64_t done = 1; done < rows;) {
        int64_t n = done < block ? done : block;
        n = n < rows - done ? n : rows - done;
        memcpy(y + (size_t)done * row_bytes, y, (size_t)n * row_bytes);
        done += n;
    }
}

/* The rows of y (out elements of es bytes each) start as copies of the
 * bias row b, one block of rows per thread when there are enough (on one
 * thread this copy costs a small model a few % of its step). */
void tg__fill_rows(void *y, const void *b, size_t es, int64_t out, int64_t rows)
{
    size_t row_bytes = (size_t)out * es;
    /* copying an element costs about a quarter of an add */
    TG_FOR_ROWS(rows, out / 4, r0, r1,
                repeat_row((char *)y + (size_t)r0 * row_bytes, b, row_bytes, r1 - r0));
}

void tg__f64_to_f32(float *dst, const double *src, int64_t n)
{
    for (int64_t j = 0; j < n; j++)
        dst[j] = (float)src[j];
}
