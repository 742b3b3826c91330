/* Tensors as checkpoint bytes: row-major little-endian elements written
 * from any layout, and read into new tensors or over existing ones of any
 * layout (nn/safetensors.c holds the file format). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "tensor_io.h"

/* The format is little-endian; a big-endian host swaps element bytes. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define HOST_BIG_ENDIAN 1
#else
#define HOST_BIG_ENDIAN 0
#endif

static void swap_elements(void *p, int64_t n, size_t es)
{
    unsigned char *b = p;
    for (int64_t i = 0; i < n; i++, b += es)
        for (size_t j = 0; j < es / 2; j++) {
            unsigned char c = b[j];
            b[j] = b[es - 1 - j];
            b[es - 1 - j] = c;
        }
}

/* t's elements, row-major and little-endian, whatever its layout. */
int tg__tensor_write_le(FILE *fp, const tg_tensor *t)
{
    tg_tensor *c = tg__contiguous(t);
    if (!c)
        return -1;
    int64_t n = tg__numel(c->ndim, c->shape);
    size_t es = tg_dtype_size(c->dtype), nbytes = (size_t)n * es;
    int rc = 0;
    if (nbytes && HOST_BIG_ENDIAN) {
        unsigned char *tmp = malloc(nbytes);
        if (!tmp) {
            tg_release(c);
            errno = ENOMEM;
            return -1;
        }
        memcpy(tmp, tg__ptr(c), nbytes);
        swap_elements(tmp, n, es);
        rc = fwrite(tmp, 1, nbytes, fp) == nbytes ? 0 : -1;
        free(tmp);
    } else if (nbytes) {
        rc = fwrite(tg__ptr(c), 1, nbytes, fp) == nbytes ? 0 : -1;
    }
    tg_release(c);
    return rc;
}

/* Copies nbytes of bytes into the contiguous dst of that size. Bool bytes
 * other than 0 become true, since C's bool holds only 0 and 1. */
static void fill(tg_tensor *dst, const void *bytes, size_t nbytes)
{
    if (!nbytes)
        return;
    unsigned char *p = tg__ptr(dst);
    memcpy(p, bytes, nbytes);
    if (dst->dtype == TG_BOOL)
        for (size_t i = 0; i < nbytes; i++)
            p[i] = p[i] != 0;
    if (HOST_BIG_ENDIAN)
        swap_elements(p, (int64_t)(nbytes / tg_dtype_size(dst->dtype)), tg_dtype_size(dst->dtype));
}

tg_tensor *tg__tensor_read_le(tg_dtype dtype, int ndim, const int64_t *shape,
                              const void *bytes, size_t nbytes)
{
    tg_tensor *t = tg__empty(dtype, ndim, shape);
    if (t)
        fill(t, bytes, nbytes);
    return t;
}

void tg__tensor_load_le(tg_tensor *dst, tg_tensor *staged, const void *bytes, size_t nbytes)
{
    fill(staged ? staged : dst, bytes, nbytes);
    if (staged)
        tg__copy(dst, staged);
    tg__bump_version(dst); /* a graph that read it must not backpropagate now */
}
