/* Inputs that an op keeps for its backward in bfloat16 under the bf16
 * matmul precision (autograd/saved_bf16.c): exactly, where the backward only
 * multiplies them in a bf16 product, or rounded, where it also reads them
 * in float32 arithmetic whose gradient a bf16 value serves as well (GELU's
 * input, attention's q, k and v). Never installed. */
#ifndef TG_SAVED_BF16_H
#define TG_SAVED_BF16_H

#include "graph.h"

/* What ops recorded on this thread from now on keep in bfloat16 under the
 * bf16 precision: nothing (every input kept as it is), the inputs whose
 * backward is the same bits either way, or those and the rounded ones (the
 * default). Returns the previous setting. The first two are the references
 * the tests compare the saving against. */
typedef enum {
    TG__KEEP_FLOAT32,
    TG__KEEP_BF16_EXACT,
    TG__KEEP_BF16_ROUNDED,
} tg__bf16_keeping;
tg__bf16_keeping tg__set_bf16_keeping(tg__bf16_keeping what);

/* Called by an op whose backward reads input i of node (node may be NULL)
 * only as an operand of products run at the node's precision: under bf16,
 * when that input is a float32 non-leaf, contiguous, and held by nothing
 * but the caller and this node (no view shares its storage), its values go
 * into saved[slot] as bfloat16 and inputs[i] becomes a husk, so that the
 * float32 data goes with the caller's reference. A copy that an earlier op
 * made of the same tensor, unchanged since, is shared. Otherwise, or when
 * out of memory, nothing changes. */
void tg__save_bf16_operand(tg_node *node, int i, int slot);

/* As tg__save_bf16_operand, for an op whose backward also reads input i in
 * float32 arithmetic of its own (GELU'(h), the softmax's gradient) and
 * takes the input rounded to bfloat16 there, as PyTorch's autocast, whose
 * products leave bfloat16 tensors, gives it: the gradients then differ
 * from float32's by about what the bf16 products make them differ anyway
 * (tests/test_saved_bf16.c measures it). Under TG__KEEP_BF16_ROUNDED only. */
void tg__save_bf16_rounded(tg_node *node, int i, int slot);

/* The values of input i for the backward: saved[slot] widened to a new
 * contiguous float32 tensor when tg__save_bf16_operand kept them there,
 * else the input itself, as it is (a new reference either way; NULL when
 * out of memory). The widened values are those a bf16 product rounds the
 * float32 ones to, so the product's result is the same bits. */
tg_tensor *tg__saved_operand(const tg_node *node, int i, int slot);

/* A bfloat16 copy of out, the output of node, for its backward to keep in
 * place of out (retained; NULL when it should keep out itself): under
 * TG__KEEP_BF16_ROUNDED and the bf16 precision, for a contiguous float32
 * out. The copy is also out's bf16_copy, so that the op reading out next
 * as a bf16 product's operand shares it (tg__save_bf16_operand) and out's
 * float32 data can go with its last reference. */
tg_tensor *tg__rounded_output(const tg_node *node, tg_tensor *out);

/* saved[slot] of node when it holds input i's values in bfloat16 (kept by
 * either function above), else NULL. */
const tg_tensor *tg__saved_bf16(const tg_node *node, int slot);

/* c, a bfloat16 tensor, widened to a new contiguous float32 tensor of its
 * shape; NULL when out of memory. */
tg_tensor *tg__widened(const tg_tensor *c);

/* Rows [r0, r0 + nr) of c, a bfloat16 tensor seen as rows of its last dim,
 * widened to a new contiguous float32 [nr, last] tensor; NULL when out of
 * memory. For a backward that reads a kept input a block at a time. */
tg_tensor *tg__widen_rows(const tg_tensor *c, int64_t r0, int64_t nr);

#endif
