/* Pointwise ops: arithmetic with broadcasting, the activations, and dtype
 * conversion. Each op is its check, its forward kernel call and its
 * backward, side by side.
 *
 * kernels: tensor/pointwise.c (kernels.h); fused: GELU in tg_gelu_affine
 * (op_affine.c), SiLU in tg_swiglu (op_swiglu.c); gradcheck:
 * tests/cases_pointwise.c, one case or more named for each op; module:
 * nn/layer_parts.c (the feed-forward's activation), the residual adds of
 * every block. */
#include "graph.h"
#include "kernels.h"

static int check_unary(const char *fn, const tg_tensor *x)
{
    if (!x) {
        tg__fail(TG_ERR_NULL, "%s: x is NULL", fn);
        return -1;
    }
    return tg__check_float(fn, x);
}

static int check_binary(const char *fn, const tg_tensor *a, const tg_tensor *b)
{
    if (!a || !b) {
        tg__fail(TG_ERR_NULL, "%s: %s is NULL", fn, a ? "b" : "a");
        return -1;
    }
    if (tg__check_float(fn, a) < 0 || tg__check_float(fn, b) < 0)
        return -1;
    if (a->dtype != b->dtype) {
        tg__fail(TG_ERR_DTYPE, "%s: dtypes differ: %s and %s (convert one with tg_to_dtype)",
                 fn, tg_dtype_name(a->dtype), tg_dtype_name(b->dtype));
        return -1;
    }
    int ndim;
    int64_t shape[TG_MAX_DIMS];
    return tg__broadcast_shape(fn, a, b, &ndim, shape);
}

static tg_tensor *binary_op(const char *fn, const tg_tensor *a, const tg_tensor *b,
                            tg__binary_kind kind, tg_op op, tg_backward_fn backward)
{
    if (check_binary(fn, a, b) < 0)
        return NULL;
    return tg__finish(tg__binary(a, b, kind), op, backward, 2,
                      (const tg_tensor *[]){a, b}, NULL);
}

static tg_tensor *unary_op(const char *fn, const tg_tensor *x, tg__unary_kind kind,
                           double arg, tg_op op, tg_backward_fn backward, tg_node **node)
{
    if (node)
        *node = NULL;
    if (check_unary(fn, x) < 0)
        return NULL;
    return tg__finish(tg__unary(x, kind, arg), op, backward, 1, (const tg_tensor *[]){x},
                      node);
}

/* Ops whose backward uses their own output keep an alias of it in saved[0]. */
static tg_tensor *save_output(tg_tensor *out, tg_node *node)
{
    if (node) {
        tg_tensor *alias = tg__alias(out);
        tg__save(node, 0, alias);
        tg_release(alias);
    }
    return out;
}

/* The upstream gradient passed on unchanged, owned by the engine's scope. */
static tg_tensor *pass(const tg_tensor *g) { return tg__ret(tg_retain(g)); }

/* ---- add, sub, mul, div ---------------------------------------------------- */
/* The engine sums each gradient back to its operand's broadcast shape. */

static int add_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    grads[0] = n->needs[0] ? pass(g) : NULL;
    grads[1] = n->needs[1] ? pass(g) : NULL;
    return 0;
}

tg_tensor *tg_add(const tg_tensor *a, const tg_tensor *b)
{
    return binary_op(__func__, a, b, TG_BIN_ADD, TG_OP_ADD, add_backward);
}

static int sub_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    grads[0] = n->needs[0] ? pass(g) : NULL;
    grads[1] = n->needs[1] ? tg_neg(g) : NULL;
    return 0;
}

tg_tensor *tg_sub(const tg_tensor *a, const tg_tensor *b)
{
    return binary_op(__func__, a, b, TG_BIN_SUB, TG_OP_SUB, sub_backward);
}

static int mul_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    grads[0] = n->needs[0] ? tg_mul(g, n->inputs[1]) : NULL;
    grads[1] = n->needs[1] ? tg_mul(g, n->inputs[0]) : NULL;
    return 0;
}

tg_tensor *tg_mul(const tg_tensor *a, const tg_tensor *b)
{
    return binary_op(__func__, a, b, TG_BIN_MUL, TG_OP_MUL, mul_backward);
}

/* d(a/b)/da = 1/b, d(a/b)/db = -a/b^2 */
static int div_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    const tg_tensor *a = n->inputs[0], *b = n->inputs[1];
    tg_tensor *g_over_b = tg_div(g, b);
    grads[0] = n->needs[0] ? g_over_b : NULL;
    grads[1] = n->needs[1] ? tg_neg(tg_div(tg_mul(g_over_b, a), b)) : NULL;
    return 0;
}

tg_tensor *tg_div(const tg_tensor *a, const tg_tensor *b)
{
    return binary_op(__func__, a, b, TG_BIN_DIV, TG_OP_DIV, div_backward);
}

/* ---- neg and the scalar ops -------------------------------------------------- */

static int neg_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    (void)n;
    grads[0] = tg_neg(g);
    return 0;
}

tg_tensor *tg_neg(const tg_tensor *x)
{
    return unary_op(__func__, x, TG_UN_NEG, 0, TG_OP_NEG, neg_backward, NULL);
}

static int add_scalar_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    (void)n;
    grads[0] = pass(g);
    return 0;
}

tg_tensor *tg_add_scalar(const tg_tensor *x, double value)
{
    return unary_op(__func__, x, TG_UN_ADD_SCALAR, value, TG_OP_ADD_SCALAR,
                    add_scalar_backward, NULL);
}

static int mul_scalar_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    grads[0] = tg_mul_scalar(g, n->args[0]);
    return 0;
}

tg_tensor *tg_mul_scalar(const tg_tensor *x, double value)
{
    tg_node *node;
    tg_tensor *out = unary_op(__func__, x, TG_UN_MUL_SCALAR, value, TG_OP_MUL_SCALAR,
                              mul_scalar_backward, &node);
    if (node)
        node->args[0] = value;
    return out;
}

/* d(x^p)/dx = p x^(p-1) */
static int pow_scalar_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    double p = n->args[0];
    tg_tensor *d = tg_mul_scalar(tg_pow_scalar(n->inputs[0], p - 1), p);
    grads[0] = tg_mul(g, d);
    return 0;
}

tg_tensor *tg_pow_scalar(const tg_tensor *x, double exponent)
{
    tg_node *node;
    tg_tensor *out = unary_op(__func__, x, TG_UN_POW_SCALAR, exponent, TG_OP_POW_SCALAR,
                              pow_scalar_backward, &node);
    if (node)
        node->args[0] = exponent;
    return out;
}

/* ---- exp, log, sqrt ---------------------------------------------------------- */

static int exp_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    grads[0] = tg_mul(g, n->saved[0]); /* saved[0]: exp(x) */
    return 0;
}

tg_tensor *tg_exp(const tg_tensor *x)
{
    tg_node *node;
    tg_tensor *out = unary_op(__func__, x, TG_UN_EXP, 0, TG_OP_EXP, exp_backward, &node);
    return save_output(out, node);
}

static int log_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    grads[0] = tg_div(g, n->inputs[0]);
    return 0;
}

tg_tensor *tg_log(const tg_tensor *x)
{
    return unary_op(__func__, x, TG_UN_LOG, 0, TG_OP_LOG, log_backward, NULL);
}

/* d sqrt(x) = 1 / (2 sqrt(x)) */
static int sqrt_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    grads[0] = tg_div(tg_mul_scalar(g, 0.5), n->saved[0]);
    return 0;
}

tg_tensor *tg_sqrt(const tg_tensor *x)
{
    tg_node *node;
    tg_tensor *out = unary_op(__func__, x, TG_UN_SQRT, 0, TG_OP_SQRT, sqrt_backward, &node);
    return save_output(out, node);
}

/* ---- activations: their derivative formulas are fused binary kernels ----- */

static tg_tensor *grad_kernel(const tg_tensor *g, const tg_tensor *saved, tg__binary_kind kind)
{
    return tg__ret(tg__binary(g, saved, kind));
}

static int tanh_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    grads[0] = grad_kernel(g, n->saved[0], TG_BIN_TANH_GRAD);
    return 0;
}

tg_tensor *tg_tanh(const tg_tensor *x)
{
    tg_node *node;
    tg_tensor *out = unary_op(__func__, x, TG_UN_TANH, 0, TG_OP_TANH, tanh_backward, &node);
    return save_output(out, node);
}

static int sigmoid_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    grads[0] = grad_kernel(g, n->saved[0], TG_BIN_SIGMOID_GRAD);
    return 0;
}

tg_tensor *tg_sigmoid(const tg_tensor *x)
{
    tg_node *node;
    tg_tensor *out = unary_op(__func__, x, TG_UN_SIGMOID, 0, TG_OP_SIGMOID, sigmoid_backward,
                              &node);
    return save_output(out, node);
}

static int relu_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    grads[0] = grad_kernel(g, n->inputs[0], TG_BIN_RELU_GRAD);
    return 0;
}

tg_tensor *tg_relu(const tg_tensor *x)
{
    return unary_op(__func__, x, TG_UN_RELU, 0, TG_OP_RELU, relu_backward, NULL);
}

static int gelu_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    tg__binary_kind kind = n->args[0] == TG_GELU_TANH ? TG_BIN_GELU_TANH_GRAD
                                                      : TG_BIN_GELU_ERF_GRAD;
    grads[0] = grad_kernel(g, n->inputs[0], kind);
    return 0;
}

tg_tensor *tg_gelu(const tg_tensor *x, tg_gelu_kind kind)
{
    if (kind != TG_GELU_ERF && kind != TG_GELU_TANH)
        return tg__fail(TG_ERR_VALUE, "tg_gelu: unknown kind %d", (int)kind);
    tg_node *node;
    tg_tensor *out = unary_op(__func__, x, kind == TG_GELU_TANH ? TG_UN_GELU_TANH
                                                                : TG_UN_GELU_ERF,
                              0, TG_OP_GELU, gelu_backward, &node);
    if (node)
        node->args[0] = kind;
    return out;
}

/* silu(x) = x * sigmoid(x); its gradient reads x. */
static int silu_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    grads[0] = grad_kernel(g, n->inputs[0], TG_BIN_SILU_GRAD);
    return 0;
}

tg_tensor *tg_silu(const tg_tensor *x)
{
    return unary_op(__func__, x, TG_UN_SILU, 0, TG_OP_SILU, silu_backward, NULL);
}

/* ---- dtype conversion ------------------------------------------------------ */

static bool differentiable_dtype(tg_dtype dtype)
{
    return tg__is_float(dtype) || dtype == TG_BFLOAT16;
}

static int to_dtype_backward(tg_node *n, const tg_tensor *g, tg_tensor **grads)
{
    grads[0] = tg_to_dtype(g, n->inputs[0]->dtype);
    return 0;
}

tg_tensor *tg_to_dtype(const tg_tensor *x, tg_dtype dtype)
{
    TG_CHECK_NULL(x);
    if (!tg_dtype_size(dtype))
        return tg__fail(TG_ERR_DTYPE, "tg_to_dtype: unknown dtype %d", (int)dtype);
    tg_tensor *out = tg__convert(x, dtype);
    /* between float32, float64 and bfloat16 the gradient converts back */
    if (!differentiable_dtype(dtype) || !differentiable_dtype(x->dtype))
        return tg__ret(out);
    return tg__finish(out, TG_OP_TO_DTYPE, to_dtype_backward, 1, (const tg_tensor *[]){x},
                      NULL);
}
