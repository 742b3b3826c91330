/* Grad-ready hooks (tg_set_grad_ready_hook): backward counts, per hooked
 * leaf, the graph edges that will add to its .grad, and calls the hook when
 * the last of them has. */
#include "graph.h"

#include <stdlib.h>

int tg_set_grad_ready_hook(tg_tensor *leaf, tg_grad_ready_fn fn, void *user)
{
    TG_CHECK_NULL_STATUS(leaf);
    if (leaf->node) {
        tg__fail(TG_ERR_STATE, "tg_set_grad_ready_hook: only leaves have a hook; this tensor "
                               "was made by %s", tg_op_name(tg__node_of(leaf)->op));
        return -1;
    }
    leaf->grad_hook = fn;
    leaf->grad_hook_user = fn ? user : NULL;
    return 0;
}

/* The leaves with a hook among the inputs of order[0..n), each retained
 * once, with grad_pending set to the number of graph edges that will add
 * to its .grad. *leaves is NULL (and *count 0) when there are none. */
int tg__count_hooked(tg_node **order, int64_t n, tg_tensor ***leaves, int64_t *count)
{
    int64_t used = 0, cap = 0;
    tg_tensor **list = NULL;
    for (int64_t i = 0; i < n; i++) {
        for (int j = 0; j < order[i]->n_inputs; j++) {
            tg_tensor *in = order[i]->inputs[j];
            if (!in || in->node || !in->grad_hook || !order[i]->needs[j])
                continue;
            if (in->grad_pending++ > 0)
                continue;
            if (used == cap) {
                cap = cap ? 2 * cap : 16;
                void *p = realloc(list, (size_t)cap * sizeof *list);
                if (!p) {
                    in->grad_pending = 0;
                    *leaves = list;
                    *count = used;
                    tg__fail(TG_ERR_NOMEM, "tg_backward: out of memory listing hooked leaves");
                    return -1;
                }
                list = p;
            }
            list[used++] = tg_retain(in);
        }
    }
    *leaves = list;
    *count = used;
    return 0;
}

/* The node has run: each hooked leaf it fed has one contribution fewer to
 * wait for, and those with none left are complete. */
void tg__leaves_fed(tg_node *node)
{
    for (int j = 0; j < node->n_inputs; j++) {
        tg_tensor *in = node->inputs[j];
        if (in && !in->node && in->grad_hook && node->needs[j] && in->grad_pending > 0 &&
            --in->grad_pending == 0)
            in->grad_hook(in, in->grad_hook_user);
    }
}

void tg__forget_hooked(tg_tensor **leaves, int64_t count)
{
    for (int64_t i = 0; i < count; i++) {
        leaves[i]->grad_pending = 0;
        tg_release(leaves[i]);
    }
    free(leaves);
}

