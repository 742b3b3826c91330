/* The tiled passes of the fused attention (attention_tiles.c), which both
 * attention ops of autograd/op_attention.c run: the plan they read, the gradient
 * layout the backward writes, and the two passes. Never installed. */
#ifndef TG_ATTENTION_TILES_H
#define TG_ATTENTION_TILES_H

#include <tensorgrad/tensor.h>

#include <stdbool.h>
#include <stdint.h>

/* Everything the kernels read, on q [.., L, E], k [.., S, E] and v [.., S,
 * Ev] whose batch dims broadcast to bshape: unit steps along each row, any
 * row and batch strides. With group > 1 the last batch dim is q's heads H
 * and k and v hold H / group heads there (grouped-query attention): query
 * head h reads kv head h / group, so batch b = t group + m (m < group)
 * reads kv batch t, and kb, vb (and the gradients' dkb, dvb) step over kv
 * heads. */
typedef struct {
    tg_dtype dtype;
    int nbd;                        /* batch dims */
    int64_t bshape[TG_MAX_DIMS];    /* broadcast batch shape */
    int64_t nb;                     /* its product */
    int64_t group;                  /* query heads per kv head; 1 without grouping */
    int64_t L, S, E, Ev;
    double scale;
    bool causal;                    /* key j > query i is masked */
    const char *q, *k, *v;          /* element pointers (bytes) */
    int64_t qb[TG_MAX_DIMS], kb[TG_MAX_DIMS], vb[TG_MAX_DIMS]; /* batch strides */
    int64_t qrs, krs, vrs;          /* row strides (elements; >= the row's length) */
    const tg_tensor *mask;          /* NULL, or bool / float broadcast to [bshape, L, S] */
    int64_t mst[TG_MAX_DIMS];       /* mask strides over [bshape, L, S] */
    /* Dropout of the weights: element (b, i, j) is zeroed when
     * tg__dropped(key, (b L + i) S + j, drop_below), else scaled by keep. */
    bool dropout;
    uint64_t key, drop_below;
    double keep;
    /* [nb, L, wld] float32: the weights of a short problem (keeps_weights),
     * written by the forward and read back by the backward; else NULL. */
    float *weights;
    int64_t wld; /* its row stride: the keys rounded up to whole vectors */
} attn_plan;

/* Gradients of one batch b: dq [L, E], dk [S, E], dv [S, Ev] (this
 * batch's slices, every element of which the backward writes), from go
 * [L, Ev] and o [L, Ev] (this batch's upstream gradient and output) and lse. Each has its
 * own row stride (elements): the gradients may be written straight into the
 * packed or head-interleaved layouts that their users hold. dq, dk, dv may
 * be NULL when not needed, o when the weights were kept. */
typedef struct {
    const char *go, *o;
    const double *lse;
    char *dq, *dk, *dv;
    int64_t go_rs, o_rs, dq_rs, dk_rs, dv_rs;
} grad_slices;

/* Where the whole backward reads and writes: at, the slices of batch 0,
 * and the batch strides over bshape of go, o, dq, dk and dv. */
typedef struct {
    grad_slices at;
    int64_t gob[TG_MAX_DIMS], ob[TG_MAX_DIMS], dqb[TG_MAX_DIMS], dkb[TG_MAX_DIMS],
        dvb[TG_MAX_DIMS];
} grad_layout;

/* Whether the whole problem is one float32 tile without dropout per batch
 * (a short sequence): its weights, nb L wld floats, are then kept for the
 * backward, which reads them back instead of recomputing the scores and
 * their exps. */
bool tg__attn_keeps_weights(const attn_plan *p);

/* The row stride of the kept weights: the keys rounded up to whole vectors. */
int64_t tg__attn_weights_ld(const attn_plan *p);

/* The forward into out (with two batch dims [B, H], rows stored [B, L, H,
 * Ev], else contiguous) and lse [nb L], in parallel over (batch, query
 * block) pairs; p->weights, when set, gets a short problem's weights. One
 * query row (L = 1) with grouped heads takes a group's heads as the rows of
 * one block instead, which read their kv head's K and V in one pass.
 * Returns 0 or -1 (out of scratch memory). */
int tg__attn_forward_all(const attn_plan *p, char *out, double *lse);

/* The backward into g's gradients, in parallel over kv batches (batches
 * without grouping), each owning its slices of dk and dv: the group's
 * query heads add into them one after another, in order. Returns 0 or -1
 * (out of scratch memory). */
int tg__attn_backward_all(const attn_plan *p, const grad_layout *g);

#endif
