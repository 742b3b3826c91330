/* Module-level gradchecks of the encoder-decoder (test_decoder.c,
 * test_transformer.c): a module's parameter fields in state_dict order, so a
 * checked function can run the module on the checker's copies of them. */
#ifndef TG_TRANSFORMER_TESTUTIL_H
#define TG_TRANSFORMER_TESTUTIL_H

#include "testutil.h"

enum { MAX_SLOTS = 256 };

typedef struct {
    tg_tensor **at[MAX_SLOTS];
    int count;
} slots;

static inline void slot(slots *s, tg_tensor **p)
{
    ck_assert_int_lt(s->count, MAX_SLOTS);
    s->at[s->count++] = p;
}

static inline void mha_slots(slots *s, tg_mha *m)
{
    slot(s, &m->in_proj_weight);
    slot(s, &m->in_proj_bias);
    slot(s, &m->out_proj->weight);
    slot(s, &m->out_proj->bias);
}

static inline void linear_slots(slots *s, tg_linear *l)
{
    slot(s, &l->weight);
    slot(s, &l->bias);
}

static inline void norm_slots(slots *s, tg_layer_norm_module *n)
{
    slot(s, &n->weight);
    slot(s, &n->bias);
}

static inline void decoder_layer_slots(slots *s, tg_decoder_layer *m)
{
    mha_slots(s, m->self_attn);
    mha_slots(s, m->multihead_attn);
    linear_slots(s, m->linear1);
    linear_slots(s, m->linear2);
    norm_slots(s, m->norm1);
    norm_slots(s, m->norm2);
    norm_slots(s, m->norm3);
}

static inline void encoder_layer_slots(slots *s, tg_encoder_layer *m)
{
    mha_slots(s, m->self_attn);
    linear_slots(s, m->linear1);
    linear_slots(s, m->linear2);
    norm_slots(s, m->norm1);
    norm_slots(s, m->norm2);
}

/* Points every slot at in[0..count), remembering the module's own tensors
 * in saved; unbind puts them back. */
static inline void bind(const slots *s, tg_tensor *const *in, tg_tensor **saved)
{
    for (int i = 0; i < s->count; i++) {
        saved[i] = *s->at[i];
        *s->at[i] = in[i];
    }
}

static inline void unbind(const slots *s, tg_tensor *const *saved)
{
    for (int i = 0; i < s->count; i++)
        *s->at[i] = saved[i];
}

/* Moves every parameter (borrowed from ps) away from ones and zeros so
 * that norms and biases matter. Float64 parameters. */
static inline void perturb_params(const tg_params *ps)
{
    for (int k = 0; k < ps->count; k++) {
        double *p = tg_data(ps->tensors[k]);
        for (int64_t i = 0; i < tg_numel(ps->tensors[k]); i++)
            p[i] += 0.2 * sin(1.1 * (double)i + k);
    }
}

#endif
