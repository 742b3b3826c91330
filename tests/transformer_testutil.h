/* What the encoder-decoder tests (test_decoder.c, test_transformer.c) share:
 * their sizes and inputs, a bit-for-bit comparison, and for the module-level
 * gradchecks a module's parameter fields in state_dict order, so a checked
 * function can run the module on the checker's copies of them. */
#ifndef TG_TRANSFORMER_TESTUTIL_H
#define TG_TRANSFORMER_TESTUTIL_H

#include "testutil.h"

/* The sizes both tests run at: width, heads, feed-forward, batch, target
 * and source lengths. */
enum { D = 4, NH = 2, DFF = 6, B = 2, T = 3, S = 4 };

/* [B, len, D]: 1.5 sin(0.37 i^2 + phase), rows that layer_norm does not make equal */
static inline tg_tensor *input(tg_dtype dt, int64_t len, double phase)
{
    double v[B * 8 * D];
    ck_assert_int_le(len, 8);
    for (int i = 0; i < B * len * D; i++)
        v[i] = 1.5 * sin(0.37 * i * i + phase);
    return make(dt, 3, SHAPE(B, len, D), v);
}

/* a and b hold bit-for-bit the same values. */
static inline void assert_same(const tg_tensor *a, const tg_tensor *b)
{
    int64_t n = tg_numel(a);
    ck_assert_int_eq(n, tg_numel(b));
    double *va = values_of(a), *vb = values_of(b);
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(va[i] == vb[i], "element %lld: %.17g vs %.17g", (long long)i, va[i], vb[i]);
    free(va);
    free(vb);
}

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
