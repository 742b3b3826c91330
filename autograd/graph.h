/* The private side of the autograd graph: the node an op attaches to its
 * output, and what ops call to record themselves. Never installed. */
#ifndef TG_GRAPH_H
#define TG_GRAPH_H

#include <tensorgrad/autograd.h>
#include "internal.h"

typedef struct tg_node tg_node;

/* Computes the gradient of each input that needs one (node->needs[i]) from
 * grad, the gradient of the node's output (same shape and dtype as the
 * output, any layout), into grads[i]. It runs with grad mode off inside a
 * scope that owns the results: build them with public ops (or pass a tensor
 * made by internal helpers through tg__ret) and release nothing. A gradient
 * with the output's broadcast shape is summed back to the input's shape by
 * the engine. Returns 0, or -1 on error. */
typedef int (*tg_backward_fn)(tg_node *node, const tg_tensor *grad, tg_tensor **grads);

#define TG_NODE_SAVED 7
#define TG_NODE_ARGS 4
#define TG_NODE_IARGS (2 * TG_MAX_DIMS)

struct tg_node {
    /* First, so that a tensor's node pointer is this: its count is the
     * output tensor's, plus the engine's while it runs; the last release
     * frees the node (tensor/ sees only this header). */
    tg__owner owner;
    size_t bytes;     /* its allocation, inputs[] and needs[] included */
    tg_op op;
    tg_backward_fn backward;
    int n_inputs;
    tg_tensor **inputs;  /* retained: the op's operands */
    bool *needs;         /* needs[i]: inputs[i] requires grad */
    tg_tensor *saved[TG_NODE_SAVED]; /* retained: whatever else backward needs */
    /* The storage versions of inputs[] and saved[] when the op kept them:
     * backward refuses to run on data written in place since. */
    uint64_t *input_versions;
    uint64_t saved_versions[TG_NODE_SAVED];
    double args[TG_NODE_ARGS];       /* scalar arguments (p, eps, exponent...) */
    int64_t iargs[TG_NODE_IARGS];    /* integer arguments (dims, perm...) */
    /* The matmul precision when the op ran: the engine sets it again while
     * the op's backward runs, so its products use the forward's. */
    tg_precision prec;
    /* the output's geometry, to check upstream gradients */
    int out_ndim;
    int64_t out_shape[TG_MAX_DIMS];
    tg_dtype out_dtype;
    /* engine state */
    bool freed;        /* backward already ran through here */
    tg_tensor *grad;   /* upstream gradient accumulated during backward */
    bool grad_own;     /* grad is a buffer the engine made and alone holds */
    int64_t visit;     /* marks nodes during the topological sort */
};

/* The node that made t, NULL for a leaf. */
static inline tg_node *tg__node_of(const tg_tensor *t)
{
    return (tg_node *)t->node;
}

/* Drops a reference to node, freeing it and its links with the last one. */
static inline void tg__node_release(tg_node *node)
{
    tg__owner_release(node ? &node->owner : NULL);
}

/* True when grad mode is on and one of the n inputs requires grad. */
bool tg__needs_grad(int n, const tg_tensor *const *inputs);

/* Finishes an op: when out is not NULL and tg__needs_grad holds, attaches a
 * node recording op, backward and the inputs to out, and stores it in *node
 * (NULL otherwise; node itself may be NULL). Registers out in the open scope
 * and returns it, or NULL (releasing out) on failure. Every op returns
 * through this. */
tg_tensor *tg__finish(tg_tensor *out, tg_op op, tg_backward_fn backward, int n,
                      const tg_tensor *const *inputs, tg_node **node);

/* Keeps t (retained) for backward in node->saved[slot], with its version:
 * backward fails if t's data is written in place (tg_data, an optimizer
 * step) before it runs. Save the op's own output with tg__alias(out), never
 * out itself: out -> node -> out would be a cycle that is never freed. */
void tg__save(tg_node *node, int slot, tg_tensor *t);

/* For a backward that adds its gradient for input i in place rather than
 * handing a tensor back: the gradient input i has gathered so far, as a
 * contiguous buffer of its shape and dtype that only the engine holds
 * (zeros when none has arrived). NULL when out of memory. The backward adds
 * into it (tg__add_into) and sets grads[i] to TG_GRAD_ADDED. A slice's
 * gradient then costs the slice, not a zero-filled whole per slice. */
tg_tensor *tg__grad_target(tg_node *node, int i);
/* The gradient input i has gathered so far, when the engine alone holds it
 * (contiguous, of the input's shape and dtype), for a backward to add its
 * gradient into (then setting grads[i] to TG_GRAD_ADDED); NULL when there
 * is none yet or it is shared, and then nothing is made. */
tg_tensor *tg__grad_owned(tg_node *node, int i);
extern const char tg__grad_added;
#define TG_GRAD_ADDED ((tg_tensor *)(void *)&tg__grad_added)

/* dst += src, elementwise; same shape and float dtype, any layouts. */
void tg__add_into(tg_tensor *dst, const tg_tensor *src);

/* A gradient of the shape of the output broadcast from (ndim, shape),
 * summed back to that shape: new reference. */
tg_tensor *tg__sum_to(const tg_tensor *grad, int ndim, const int64_t *shape);

/* Grad-ready hooks (autograd/grad_hooks.c), for tg_backward. The leaves with
 * a hook among the inputs of order[0..n), each retained once, with
 * grad_pending set to the number of graph edges that will add to its .grad,
 * into *leaves (malloc'd; NULL when none) and *count. -1 when out of memory
 * (what was listed is still listed). */
int tg__count_hooked(tg_node **order, int64_t n, tg_tensor ***leaves, int64_t *count);
/* node's backward has run: each hooked leaf it fed has one contribution
 * fewer to wait for; the hook of one with none left is called. */
void tg__leaves_fed(tg_node *node);
/* Clears the counts of the listed leaves, releases them and frees the list. */
void tg__forget_hooked(tg_tensor **leaves, int64_t count);

/* Called by the engine with each op whose backward ran (for gradcheck's
 * coverage count); NULL turns it off. Per thread. */
typedef void (*tg_backward_observer)(tg_op op, void *user);
void tg__set_backward_observer(tg_backward_observer observer, void *user);

#endif
