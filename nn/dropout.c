/* The Dropout module: p and a train flag around the dropout op, so model
 * code can switch every dropout off for evaluation. */
#include <tensorgrad/module.h>
#include <tensorgrad/nn.h>

tg_tensor *tg_dropout_module_forward(const tg_dropout_module *m, const tg_tensor *x)
{
    TG_CHECK_ARG(m);
    return tg_dropout(x, m->p, m->train, m->rng);
}
