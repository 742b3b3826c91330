/* tensorgrad: the one header a program includes. It brings in the tensor
 * type (tensor.h) and the differentiable ops with their graph (autograd.h). */
#ifndef TENSORGRAD_H
#define TENSORGRAD_H

#include "tensor.h"
#include "autograd.h"

#endif
