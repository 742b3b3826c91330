/* nn.Embedding: a [num, dim] table of rows initialised N(0, 1), looked up by
 * int64 indices of any shape through the op tg_embedding. */
#include <stdlib.h>

#include <tensorgrad/module.h>
#include <tensorgrad/nn.h>

tg_embedding_module *tg_embedding_module_new(int64_t num_embeddings, int64_t embedding_dim,
                                      tg_dtype dtype, tg_rng *rng)
{
    TG_CHECK_ARG(rng);
    if (num_embeddings <= 0 || embedding_dim <= 0)
        return tg_fail(TG_ERR_VALUE, "tg_embedding_module_new: num_embeddings %lld and "
                       "embedding_dim %lld must be positive", (long long)num_embeddings,
                       (long long)embedding_dim);
    if (dtype != TG_FLOAT32 && dtype != TG_FLOAT64)
        return tg_fail(TG_ERR_DTYPE, "tg_embedding_module_new: dtype %s is not a float dtype",
                       tg_dtype_name(dtype));
    tg_embedding_module *m = calloc(1, sizeof *m);
    if (!m)
        return tg_fail(TG_ERR_NOMEM, "tg_embedding_module_new: out of memory");
    m->num_embeddings = num_embeddings;
    m->embedding_dim = embedding_dim;
    bool was = tg_set_grad_enabled(false);
    /* A private scope, so that an enclosing one does not take the table. */
    tg_scope_begin();
    m->weight = tg_retain(tg_randn(rng, dtype, 2, (int64_t[]){num_embeddings, embedding_dim}));
    tg_scope_end();
    tg_set_grad_enabled(was);
    if (!m->weight || tg_set_requires_grad(m->weight, true) < 0) {
        tg_embedding_module_free(m);
        return NULL;
    }
    return m;
}

/* int64 indices [...] -> [..., dim] */
tg_tensor *tg_embedding_module_forward(const tg_embedding_module *m, const tg_tensor *indices)
{
    TG_CHECK_ARG(m);
    TG_CHECK_ARG(indices);
    return tg_embedding(m->weight, indices);
}

int tg_embedding_module_params(const tg_embedding_module *m, const char *prefix, tg_params *ps)
{
    TG_CHECK_ARG_STATUS(m);
    TG_CHECK_ARG_STATUS(ps);
    return tg_params_add(ps, prefix, "weight", m->weight);
}

void tg_embedding_module_free(tg_embedding_module *m)
{
    if (!m)
        return;
    tg_release(m->weight);
    free(m);
}
