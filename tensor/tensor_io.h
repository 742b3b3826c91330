/* Tensors as the bytes of a checkpoint: row-major, little-endian elements
 * written from any layout and read back into new or existing tensors. For
 * nn/safetensors.c; speaks only of opaque tensors. Never installed. */
#ifndef TG_TENSOR_IO_H
#define TG_TENSOR_IO_H

#include <stdio.h>

#include <tensorgrad/tensor.h>

/* Writes t's elements to fp, row-major and little-endian, whatever t's
 * layout. 0, or -1 with errno set (memory running out also records an
 * error). */
int tg__tensor_write_le(FILE *fp, const tg_tensor *t);
/* A new contiguous tensor of dtype and shape (in no scope: the caller
 * releases it) from nbytes little-endian bytes, exactly its size. Bool
 * bytes other than 0 become true. NULL when out of memory (recorded). */
tg_tensor *tg__tensor_read_le(tg_dtype dtype, int ndim, const int64_t *shape,
                              const void *bytes, size_t nbytes);
/* Overwrites dst (any layout) with nbytes little-endian bytes, exactly its
 * size, through staged when dst is not contiguous: a contiguous tensor of
 * dst's shape and dtype (NULL when dst is contiguous). Then bumps dst's
 * version, so a graph that read it cannot backpropagate. */
void tg__tensor_load_le(tg_tensor *dst, tg_tensor *staged, const void *bytes, size_t nbytes);

#endif
