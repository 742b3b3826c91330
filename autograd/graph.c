/* The dynamic graph: ops attach a node to their output as they run, and
 * tg_backward walks the nodes in reverse topological order, accumulating
 * gradients into leaves and freeing the graph behind it. */
#include "graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static TG_TLS bool grad_disabled;
static TG_TLS bool anomaly_on;
static TG_TLS tg_backward_observer observer;
static TG_TLS void *observer_user;
static TG_TLS int64_t visit_mark;

static const char *const op_names[] = {
#define TG_OP(name, text, props) text,
#include <tensorgrad/ops.def>
#undef TG_OP
};
_Static_assert(sizeof op_names / sizeof op_names[0] == TG_OP_COUNT,
               "op_names must follow ops.def");

/* What the graph knows of each op: ops.def's props column. */
enum { READS_INPUTS = 1, MAKES_INF = 2, TAKES_BF16 = 4 };
static const unsigned char op_props[] = {
#define TG_OP(name, text, props) [TG_OP_##name] = (props),
#include <tensorgrad/ops.def>
#undef TG_OP
};
_Static_assert(sizeof op_props == TG_OP_COUNT, "op_props must follow ops.def");

static bool op_has(tg_op op, unsigned prop)
{
    return op_props[op] & prop;
}

const char *tg_op_name(tg_op op)
{
    return (unsigned)op < TG_OP_COUNT ? op_names[op] : NULL;
}

bool tg_set_grad_enabled(bool enabled)
{
    bool was = !grad_disabled;
    grad_disabled = !enabled;
    return was;
}

bool tg_grad_enabled(void) { return !grad_disabled; }

void tg__set_backward_observer(tg_backward_observer fn, void *user)
{
    observer = fn;
    observer_user = user;
}

bool tg_set_anomaly_mode(bool on)
{
    bool was = anomaly_on;
    anomaly_on = on;
    return was;
}

bool tg_anomaly_mode(void) { return anomaly_on; }

/* ---- failures: out of memory, anomalies ------------------------------------ */

/* Storage allocation cannot know which op it serves, so its message starts
 * "tensorgrad:"; when the failure is fresh, put the op's name there instead. */
static void name_nomem(const char *who)
{
    if (!tg__take_nomem() || tg_error_code() != TG_ERR_NOMEM)
        return;
    static const char generic[] = "tensorgrad: ";
    const char *m = tg_error_message();
    if (strncmp(m, generic, sizeof generic - 1))
        return;
    char rest[512];
    snprintf(rest, sizeof rest, "%s", m + sizeof generic - 1);
    tg_error_clear();
    tg__fail(TG_ERR_NOMEM, "%s: %s", who, rest);
}

/* An allocation that failed inside op's backward: whatever op reported it
 * (its own kernels or a public op it called), say that backward was running. */
static void name_backward_nomem(tg_op op)
{
    tg__take_nomem();
    if (tg_error_code() != TG_ERR_NOMEM)
        return;
    static const char generic[] = "tensorgrad: ";
    const char *m = tg_error_message();
    if (!strncmp(m, generic, sizeof generic - 1))
        m += sizeof generic - 1;
    char rest[512];
    snprintf(rest, sizeof rest, "%s", m);
    tg_error_clear();
    tg__fail(TG_ERR_NOMEM, "tg_backward: in the backward of %s: %s", tg_op_name(op), rest);
}

enum { HAS_NAN = 1, HAS_INF = 2 };

/* Which non-finite values t holds (HAS_NAN | HAS_INF), with the first one and
 * its row-major index in *first and *at. Non-float tensors hold none. */
static int nonfinite(const tg_tensor *t, double *first, int64_t *at)
{
    if (!t || !tg__is_float(t->dtype))
        return 0;
    int64_t strides[1][TG_MAX_DIMS];
    memcpy(strides[0], t->stride, sizeof strides[0]);
    tg__iter it;
    tg__iter_init(&it, t->ndim, t->shape, 1, (const int64_t(*)[TG_MAX_DIMS])strides);
    if (!it.len)
        return 0;
    int found = 0;
    int64_t row = 0;
    do {
        for (int64_t j = 0; j < it.len; j++) {
            int64_t k = it.off[0] + j * it.inner[0];
            double v = t->dtype == TG_FLOAT32 ? ((const float *)tg__ptr(t))[k]
                                              : ((const double *)tg__ptr(t))[k];
            if (isfinite(v))
                continue;
            if (!found) {
                *first = v;
                *at = row * it.len + j;
            }
            found |= isnan(v) ? HAS_NAN : HAS_INF;
        }
        row++;
    } while (found != (HAS_NAN | HAS_INF) && tg__iter_next(&it));
    return found;
}

/* "[2,3], [3], none" for the op's inputs. */
static const char *shapes_str(char *buf, size_t size, int n, const tg_tensor *const *inputs)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && used < size; i++) {
        char shape[96];
        const char *s = inputs[i] ? tg__shape_str(shape, sizeof shape, inputs[i]->ndim,
                                                  inputs[i]->shape) : "none";
        used += (size_t)snprintf(buf + used, size - used, i ? ", %s" : "%s", s);
    }
    return buf;
}

/* Anomaly mode's check of an op's output (see autograd.h): true, with the
 * error recorded, when out holds a NaN, or an Inf no input brought in. */
static bool anomalous_output(const tg_tensor *out, tg_op op, int n,
                             const tg_tensor *const *inputs)
{
    double first = 0;
    int64_t at = 0;
    int found = nonfinite(out, &first, &at);
    if (!found)
        return false;
    if (!(found & HAS_NAN)) {
        if (op_has(op, MAKES_INF))
            return false;
        double v;
        int64_t i;
        for (int k = 0; k < n; k++)
            if (nonfinite(inputs[k], &v, &i))
                return false;
    }
    char shapes[256];
    tg__fail(TG_ERR_VALUE, "tg_%s: anomaly: output holds NaN or Inf (inputs %s; first %g at "
                           "element %lld of %s)", tg_op_name(op),
             shapes_str(shapes, sizeof shapes, n, inputs), first, (long long)at,
             TG_SHAPE_STR(out));
    return true;
}

/* Anomaly mode's check of one gradient a backward function produced. */
static bool anomalous_gradient(const tg_node *node, int i, const tg_tensor *g)
{
    double first = 0;
    int64_t at = 0;
    if (!nonfinite(g, &first, &at))
        return false;
    char shapes[256];
    tg__fail(TG_ERR_VALUE, "tg_backward: anomaly: the gradient %s gave for input %d holds NaN "
                           "or Inf (inputs %s; first %g at element %lld of %s)",
             tg_op_name(node->op), i,
             shapes_str(shapes, sizeof shapes, node->n_inputs,
                        (const tg_tensor *const *)node->inputs),
             first, (long long)at, TG_SHAPE_STR(g));
    return true;
}

/* True, with the error recorded, when an op was given a released tensor
 * that its own checks let through (an optional mask, say): in checked mode
 * the op then ran on a stand-in that is safe to read, and its result goes. */
static bool released_input(tg_op op, int n, const tg_tensor *const *inputs)
{
    for (int i = 0; i < n; i++) {
        if (inputs[i] && inputs[i]->refcount <= 0) {
            char who[64];
            snprintf(who, sizeof who, "tg_%s", tg_op_name(op));
            tg__report_released(who, NULL, inputs[i],
                                &(tg__site){.addr = __builtin_return_address(0)});
            return true;
        }
    }
    return false;
}

/* bfloat16 is a storage type: tg_to_dtype is the one op that takes it
 * (TAKES_BF16). Ops of float math refuse it as they check their inputs
 * (tg__check_float); the rest (views, concat), whose work is the same for
 * any element size, are refused here, before their output is handed out. */
static bool bf16_input(tg_op op, int n, const tg_tensor *const *inputs)
{
    if (op_has(op, TAKES_BF16))
        return false;
    for (int i = 0; i < n; i++) {
        if (inputs[i] && inputs[i]->dtype == TG_BFLOAT16) {
            tg__fail(TG_ERR_DTYPE, "tg_%s: input %d is bfloat16 %s, a storage type that only "
                                   "tg_to_dtype takes (convert it to float32 first)",
                     tg_op_name(op), i, TG_SHAPE_STR(inputs[i]));
            return true;
        }
    }
    return false;
}

/* ---- leaves --------------------------------------------------------------- */

int tg_set_requires_grad(tg_tensor *t, bool requires_grad)
{
    TG_CHECK_NULL_STATUS(t);
    if (t->node) {
        tg__fail(TG_ERR_STATE, "tg_set_requires_grad: only leaves can be changed; this tensor "
                               "was made by %s (detach it first)", tg_op_name(tg__node_of(t)->op));
        return -1;
    }
    if (requires_grad && tg__check_float("tg_set_requires_grad", t) < 0)
        return -1;
    t->requires_grad = requires_grad;
    return 0;
}

bool tg_requires_grad(const tg_tensor *t) { return t && t->requires_grad; }

bool tg_is_leaf(const tg_tensor *t) { return t && !t->node; }

tg_tensor *tg_grad(const tg_tensor *t)
{
    TG_CHECK_NULL(t);
    return tg__ret(tg_retain(t->grad));
}

void tg_zero_grad(tg_tensor *t)
{
    if (!t)
        return;
    tg_release(t->grad);
    t->grad = NULL;
}

tg_tensor *tg_detach(const tg_tensor *t)
{
    TG_CHECK_NULL(t);
    return tg__ret(tg__alias(t));
}

/* ---- recording ------------------------------------------------------------ */

bool tg__needs_grad(int n, const tg_tensor *const *inputs)
{
    if (grad_disabled)
        return false;
    for (int i = 0; i < n; i++)
        if (inputs[i] && inputs[i]->requires_grad)
            return true;
    return false;
}

static size_t node_size(int n)
{
    return sizeof(tg_node) + (size_t)n * (sizeof(tg_tensor *) + sizeof(uint64_t) + sizeof(bool));
}

static void node_destroy(tg__owner *owner);

tg_tensor *tg__finish(tg_tensor *out, tg_op op, tg_backward_fn backward, int n,
                      const tg_tensor *const *inputs, tg_node **node_out)
{
    if (node_out)
        *node_out = NULL;
    if (!out) {
        char who[64];
        snprintf(who, sizeof who, "tg_%s", tg_op_name(op));
        name_nomem(who);
        return NULL;
    }
    tg__take_nomem(); /* a failure the op got over is not ours to name */
    if (released_input(op, n, inputs) || bf16_input(op, n, inputs)) {
        tg_release(out);
        return NULL;
    }
    if (anomaly_on && anomalous_output(out, op, n, inputs)) {
        tg_release(out);
        return NULL;
    }
    if (!tg__needs_grad(n, inputs))
        return tg__ret(out);
    /* One allocation: the node, then its inputs[n], versions[n] and needs[n]. */
    tg_node *node = tg__small_alloc(node_size(n));
    if (!node) {
        tg_release(out);
        return tg__fail(TG_ERR_NOMEM, "tg_%s: out of memory recording the graph",
                        tg_op_name(op));
    }
    node->owner = (tg__owner){.refcount = 1, .destroy = node_destroy};
    node->bytes = node_size(n);
    node->op = op;
    node->backward = backward;
    node->prec = tg_matmul_precision();
    node->n_inputs = n;
    tg_tensor **in = (tg_tensor **)(node + 1);
    uint64_t *versions = (uint64_t *)(in + n);
    bool *needs = (bool *)(versions + n);
    node->inputs = in;
    node->input_versions = versions;
    node->needs = needs;
    bool husks = !op_has(op, READS_INPUTS);
    for (int i = 0; i < n; i++) {
        /* a leaf stays whole: its .grad is where backward accumulates */
        tg_tensor *h = husks && inputs[i] && inputs[i]->node ? tg__husk(inputs[i]) : NULL;
        in[i] = h ? h : tg_retain(inputs[i]);
        versions[i] = tg__version(in[i]);
        needs[i] = inputs[i] && inputs[i]->requires_grad;
    }
    node->out_ndim = out->ndim;
    memcpy(node->out_shape, out->shape, sizeof node->out_shape);
    node->out_dtype = out->dtype;
    out->node = &node->owner;
    out->requires_grad = true;
    if (node_out)
        *node_out = node;
    return tg__ret(out);
}

void tg__save(tg_node *node, int slot, tg_tensor *t)
{
    if (!node || slot < 0 || slot >= TG_NODE_SAVED)
        return;
    tg_release(node->saved[slot]);
    node->saved[slot] = tg_retain(t);
    node->saved_versions[slot] = tg__version(t);
}

/* Drops what the node holds for backward; the node itself stays, marked
 * freed, as long as its output lives. */
static void free_links(tg_node *node)
{
    for (int i = 0; i < node->n_inputs; i++)
        tg_release(node->inputs[i]);
    for (int i = 0; i < TG_NODE_SAVED; i++) {
        tg_release(node->saved[i]);
        node->saved[i] = NULL;
    }
    node->inputs = NULL; /* the arrays live in the node's own allocation */
    node->input_versions = NULL;
    node->needs = NULL;
    node->n_inputs = 0;
    tg_release(node->grad);
    node->grad = NULL;
    node->freed = true;
}

/* The node's tg__owner destroy: its last reference went. */
static void node_destroy(tg__owner *owner)
{
    tg_node *node = (tg_node *)owner;
    free_links(node);
    tg__small_free(node, node->bytes);
}

/* ---- backward ------------------------------------------------------------- */

tg_tensor *tg__sum_to(const tg_tensor *grad, int ndim, const int64_t *shape)
{
    int dims[TG_MAX_DIMS], nd = 0;
    int lead = grad->ndim - ndim;
    for (int d = 0; d < grad->ndim; d++)
        if (d < lead || (shape[d - lead] == 1 && grad->shape[d] != 1))
            dims[nd++] = d;
    if (nd == 0)
        return tg__ret(tg_retain(grad));
    tg_scope_begin();
    tg_tensor *sum = tg_sum(grad, dims, nd, true);
    tg_tensor *view = NULL;
    if (sum) {
        int64_t stride[TG_MAX_DIMS];
        tg__contiguous_strides(ndim, shape, stride);
        view = tg__ret(tg__view(sum, ndim, shape, stride, sum->offset));
    }
    return tg_scope_end_keep(view);
}

/* A pending gradient that only the engine holds (no other reference to it
 * or its storage), contiguous: one the engine may add into in place. */
static bool adoptable(const tg_tensor *t)
{
    return t->refcount == 1 && t->storage->refcount == 1 && tg_is_contiguous(t);
}

/* Adds g (input's shape and dtype) to what input has gathered so far: the
 * .grad of a leaf, which owns its storage, or the pending gradient of the
 * node that made input. */
static int accumulate(tg_tensor *input, tg_tensor *g)
{
    if (!input->node) {
        if (!input->grad) {
            /* g itself when only the open scope holds it (a weight's
             * gradient, just made), else a copy nobody else sees */
            input->grad = g->dtype == input->dtype && adoptable(g) ? tg_retain(g)
                                                                   : tg__convert(g, input->dtype);
            return input->grad ? 0 : -1;
        }
        tg__add_into(input->grad, g);
        tg__bump_version(input->grad); /* the user may hold it (tg_grad) */
        return 0;
    }
    tg_node *node = tg__node_of(input);
    if (!node->grad) {
        node->grad = tg_retain(g);
        node->grad_own = false;
        return 0;
    }
    if (!node->grad_own && adoptable(node->grad))
        node->grad_own = true; /* the first gradient, which nobody else holds */
    if (node->grad_own) { /* ours: add in place */
        tg__add_into(node->grad, g);
        return 0;
    }
    tg_tensor *sum = tg_add(node->grad, g);
    if (!sum)
        return -1;
    tg_retain(sum); /* the open scope holds it too, and only to release it */
    tg_release(node->grad);
    node->grad = sum;
    node->grad_own = true;
    return 0;
}

const char tg__grad_added = 0;

tg_tensor *tg__grad_target(tg_node *node, int i)
{
    tg_tensor *input = node->inputs[i];
    tg_node *producer = tg__node_of(input);
    tg_tensor **slot = producer ? &producer->grad : &input->grad; /* a leaf's .grad is its own */
    bool own = producer ? producer->grad_own : true;
    if (*slot && !own && adoptable(*slot)) /* nobody else holds it: ours as it is */
        own = producer->grad_own = true;
    if (!*slot || !own) {
        tg_tensor *t = *slot ? tg__convert(*slot, input->dtype) /* a copy of our own */
                             : tg__empty(input->dtype, input->ndim, input->shape);
        if (!t)
            return NULL;
        tg_release(*slot);
        *slot = t;
        if (producer)
            producer->grad_own = true;
    }
    return *slot;
}

tg_tensor *tg__grad_owned(tg_node *node, int i)
{
    tg_tensor *input = node->inputs[i];
    tg_node *producer = tg__node_of(input);
    tg_tensor *g = producer ? producer->grad : input->grad;
    if (!g || g->dtype != input->dtype || !tg_is_contiguous(g))
        return NULL;
    if (producer && !producer->grad_own) {
        if (!adoptable(g))
            return NULL;
        producer->grad_own = true;
    }
    return g;
}

/* Checks one input gradient that a backward function produced and brings it
 * to the input's shape. Returns the gradient (a borrowed reference held by
 * the open scope) or NULL. */
static tg_tensor *fit_gradient(const tg_node *node, int i, tg_tensor *g)
{
    const tg_tensor *input = node->inputs[i];
    if (!g)
        return tg__fail(TG_ERR_STATE, "tg_backward: the backward of %s gave no gradient "
                                      "for input %d", tg_op_name(node->op), i);
    if (g->dtype != input->dtype)
        return tg__fail(TG_ERR_DTYPE, "tg_backward: %s gave a %s gradient for a %s input",
                        tg_op_name(node->op), tg_dtype_name(g->dtype),
                        tg_dtype_name(input->dtype));
    bool same = g->ndim == input->ndim &&
                !memcmp(g->shape, input->shape, (size_t)g->ndim * sizeof g->shape[0]);
    return same ? g : tg__sum_to(g, input->ndim, input->shape);
}

/* Fails when t, which the node kept as what (input or saved slot) i at
 * version kept, has been written in place since. */
static int check_version(const tg_node *node, const tg_tensor *t, const char *what, int i,
                         uint64_t kept)
{
    if (!t || tg__version(t) == kept)
        return 0;
    tg__fail(TG_ERR_STATE, "tg_backward: a tensor needed for the gradient of %s (saved as %s "
                           "%d, shape %s) was modified in place after it was used (version "
                           "%llu, now %llu)", tg_op_name(node->op), what, i, TG_SHAPE_STR(t),
             (unsigned long long)kept, (unsigned long long)tg__version(t));
    return -1;
}

/* The data node's backward reads is as the op saw it: a compare per tensor. */
static int check_versions(const tg_node *node)
{
    if (op_has(node->op, READS_INPUTS)) /* otherwise only the inputs' shapes matter */
        for (int i = 0; i < node->n_inputs; i++)
            if (check_version(node, node->inputs[i], "input", i, node->input_versions[i]) < 0)
                return -1;
    for (int i = 0; i < TG_NODE_SAVED; i++)
        if (check_version(node, node->saved[i], "saved tensor", i, node->saved_versions[i]) < 0)
            return -1;
    return 0;
}

static int run_node(tg_node *node)
{
    if (check_versions(node) < 0)
        return -1;
    tg_tensor *grads[64] = {0};
    tg_tensor **gs = node->n_inputs <= 64 ? grads : calloc((size_t)node->n_inputs, sizeof *gs);
    if (!gs) {
        tg__fail(TG_ERR_NOMEM, "tg_backward: out of memory");
        return -1;
    }
    int rc = 0;
    tg__take_nomem();
    tg_scope_begin();
    bool clean = tg_error_code() == TG_OK;
    /* The ops a backward runs are checked as the gradient they make, below,
     * so that the anomaly names the op whose backward it is. */
    bool anomaly = anomaly_on;
    anomaly_on = false;
    tg_precision prec = tg_set_matmul_precision(node->prec);
    int brc = node->backward(node, node->grad, gs);
    tg_set_matmul_precision(prec);
    anomaly_on = anomaly;
    if (brc < 0) {
        if (clean)
            name_backward_nomem(node->op);
        rc = -1;
    }
    for (int i = 0; rc == 0 && i < node->n_inputs; i++) {
        if (!node->needs[i])
            continue;
        if (gs[i] == TG_GRAD_ADDED) { /* the backward added it in place */
            const tg_tensor *in = node->inputs[i];
            if (!in->node)
                tg__bump_version(in->grad);
            if (anomaly && anomalous_gradient(node, i, in->node ? tg__node_of(in)->grad : in->grad))
                rc = -1;
            continue;
        }
        if (anomaly && anomalous_gradient(node, i, gs[i])) {
            rc = -1;
            break;
        }
        tg_tensor *g = fit_gradient(node, i, gs[i]);
        if (!g || accumulate(node->inputs[i], g) < 0)
            rc = -1;
    }
    tg_scope_end();
    if (gs != grads)
        free(gs);
    if (observer && rc == 0)
        observer(node->op, observer_user);
    return rc;
}

/* The nodes reachable from root, in post-order (inputs before users). */
static tg_node **topological_order(tg_node *root, int64_t *count)
{
    int64_t cap = 64, n = 0, depth = 0, stack_cap = 64;
    tg_node **order = malloc((size_t)cap * sizeof *order);
    struct frame { tg_node *node; int next; } *stack = malloc((size_t)stack_cap * sizeof *stack);
    if (!order || !stack)
        goto nomem;
    int64_t mark = ++visit_mark;
    root->visit = mark;
    stack[depth++] = (struct frame){root, 0};
    while (depth > 0) {
        struct frame *f = &stack[depth - 1];
        if (f->next < f->node->n_inputs) {
            tg_tensor *in = f->node->inputs[f->next++];
            tg_node *child = in ? tg__node_of(in) : NULL;
            if (!child || !f->node->needs[f->next - 1] || child->visit == mark)
                continue;
            if (child->freed) {
                free(order);
                free(stack);
                tg__fail(TG_ERR_STATE, "tg_backward: the graph through %s was freed by an "
                                       "earlier backward", tg_op_name(child->op));
                return NULL;
            }
            child->visit = mark;
            if (depth == stack_cap) {
                stack_cap *= 2;
                void *p = realloc(stack, (size_t)stack_cap * sizeof *stack);
                if (!p)
                    goto nomem;
                stack = p;
            }
            stack[depth++] = (struct frame){child, 0};
            continue;
        }
        if (n == cap) {
            cap *= 2;
            void *p = realloc(order, (size_t)cap * sizeof *order);
            if (!p)
                goto nomem;
            order = p;
        }
        order[n++] = f->node;
        depth--;
    }
    free(stack);
    *count = n;
    return order;
nomem:
    free(order);
    free(stack);
    tg__fail(TG_ERR_NOMEM, "tg_backward: out of memory sorting the graph");
    return NULL;
}

static int check_root(const tg_tensor *root, const tg_tensor *grad_output)
{
    if (!root->requires_grad) {
        tg__fail(TG_ERR_STATE, "tg_backward: the tensor does not require grad (no input of "
                               "the ops that made it requires grad)");
        return -1;
    }
    if (root->node && tg__node_of(root)->freed) {
        tg__fail(TG_ERR_STATE, "tg_backward: the graph behind this %s output was freed by an "
                               "earlier backward", tg_op_name(tg__node_of(root)->op));
        return -1;
    }
    if (!grad_output) {
        if (tg__numel(root->ndim, root->shape) != 1) {
            tg__fail(TG_ERR_SHAPE, "tg_backward: grad_output is NULL but the root has shape %s; "
                                   "only a one-element root gets the implicit gradient 1",
                     TG_SHAPE_STR(root));
            return -1;
        }
        return 0;
    }
    if (grad_output->dtype != root->dtype || grad_output->ndim != root->ndim ||
        memcmp(grad_output->shape, root->shape, (size_t)root->ndim * sizeof root->shape[0])) {
        tg__fail(TG_ERR_SHAPE, "tg_backward: grad_output %s %s does not match the root %s %s",
                 TG_SHAPE_STR(grad_output), tg_dtype_name(grad_output->dtype),
                 TG_SHAPE_STR(root), tg_dtype_name(root->dtype));
        return -1;
    }
    return 0;
}

int tg_backward(tg_tensor *root, const tg_tensor *grad_output)
{
    TG_CHECK_NULL_STATUS(root);
    if (check_root(root, grad_output) < 0)
        return -1;
    bool was_enabled = tg_set_grad_enabled(false);
    tg_scope_begin();
    tg_tensor *g = grad_output ? tg_retain(grad_output)
                               : tg_ones(root->dtype, root->ndim, root->shape);
    if (grad_output)
        tg__ret(g);
    int rc = g ? 0 : -1;
    if (rc == 0 && !root->node) {
        rc = accumulate(root, g);
        if (rc == 0 && root->grad_hook)
            root->grad_hook(root, root->grad_hook_user);
    } else if (rc == 0) {
        int64_t n = 0, n_hooked = 0;
        tg_tensor **hooked = NULL;
        tg_node **order = topological_order(tg__node_of(root), &n);
        if (!order || tg__count_hooked(order, n, &hooked, &n_hooked) < 0)
            rc = -1;
        for (int64_t i = 0; i < n; i++)
            order[i]->owner.refcount++; /* freeing links below must not free nodes we visit */
        tg__node_of(root)->grad = tg_retain(g);
        /* A node that has run is done with what it saved and its inputs: its
         * links go at once, so activations are freed as backward passes them
         * rather than all at the end. */
        for (int64_t i = n - 1; rc == 0 && i >= 0; i--) {
            if (order[i]->grad && run_node(order[i]) < 0)
                rc = -1;
            if (rc == 0 && n_hooked)
                tg__leaves_fed(order[i]);
            free_links(order[i]);
        }
        for (int64_t i = n - 1; i >= 0; i--)
            free_links(order[i]);
        for (int64_t i = 0; i < n; i++)
            tg__node_release(order[i]);
        free(order);
        tg__forget_hooked(hooked, n_hooked);
    }
    tg_scope_end();
    tg_set_grad_enabled(was_enabled);
    if (rc < 0)
        name_nomem("tg_backward");
    return rc;
}
