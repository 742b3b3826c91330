/* tensorgrad: the one header a program includes. It brings in the tensor
 * type (tensor.h), the differentiable ops with their graph (autograd.h),
 * modules, optimizers and checkpoints (nn.h), and tokenizers (tokenizer.h). */
#ifndef TENSORGRAD_H
#define TENSORGRAD_H

#include "tensor.h"
#include "autograd.h"
#include "nn.h"
#include "tokenizer.h"

#endif
