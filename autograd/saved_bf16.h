/* Operands that an op keeps for its backward in bfloat16 under the bf16
 * matmul precision, where the backward only multiplies them in a bf16
 * product (autograd/saved_bf16.c). Never installed. */
#ifndef TG_SAVED_BF16_H
#define TG_SAVED_BF16_H

#include "graph.h"

/* Turns the saving on (the default) or off for ops recorded on this thread
 * from now on; returns the previous setting. Off, every input is kept as
 * it is: the reference a test compares the saving against. */
bool tg__set_bf16_saving(bool on);

/* Called by an op whose backward reads input i of node (node may be NULL)
 * only as an operand of products run at the node's precision: under bf16,
 * when that input is a float32 non-leaf, contiguous, and held by nothing
 * but the caller and this node (no view shares its storage), its values go
 * into saved[slot] as bfloat16 and inputs[i] becomes a husk, so that the
 * float32 data goes with the caller's reference. A copy that an earlier op
 * made of the same tensor, unchanged since, is shared. Otherwise, or when
 * out of memory, nothing changes. */
void tg__save_bf16_operand(tg_node *node, int i, int slot);

/* The values of input i for the backward: saved[slot] widened to a new
 * contiguous float32 tensor when tg__save_bf16_operand kept them there,
 * else the input itself, as it is (a new reference either way; NULL when
 * out of memory). The widened values are those a bf16 product rounds the
 * float32 ones to, so the product's result is the same bits. */
tg_tensor *tg__saved_operand(const tg_node *node, int i, int slot);

#endif
