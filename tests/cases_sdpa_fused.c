/* Gradient-check cases for the fused attention ops: tg_attention with no
 * mask, causal, more keys than queries, float and bool masks, a fully masked
 * row, transposed views, batched heads [2,3,L,E], dropout, and grouped kv
 * heads (GQA, MQA, one decoding row); and
 * tg_attention_qkvpacked, causal or not, on a strided qkv, with dropout. */
#include "cases.h"

#include <math.h>

#define UNUSED (void)n, (void)c

/* q [L, E], k [S, E], v [S, Ev]. */
static int qkv(tg_tensor **in, tg_rng *rng, int64_t L, int64_t S, int64_t E, int64_t Ev)
{
    in[0] = gc_randn(rng, 2, (int64_t[]){L, E});
    in[1] = gc_randn(rng, 2, (int64_t[]){S, E});
    in[2] = gc_randn(rng, 2, (int64_t[]){S, Ev});
    return 3;
}

static int square_4(tg_tensor **in, tg_rng *rng)
{
    return qkv(in, rng, 4, 4, 3, 2);
}

static int more_keys(tg_tensor **in, tg_rng *rng)
{
    return qkv(in, rng, 3, 6, 4, 3);
}

/* Stored transposed: q [E, L], k [E, S], v [Ev, S]; the cases transpose back. */
static int transposed_3_5(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 2, (int64_t[]){4, 3});
    in[1] = gc_randn(rng, 2, (int64_t[]){4, 5});
    in[2] = gc_randn(rng, 2, (int64_t[]){2, 5});
    return 3;
}

static int heads_2x3(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 4, (int64_t[]){2, 3, 4, 3});
    in[1] = gc_randn(rng, 4, (int64_t[]){2, 3, 5, 3});
    in[2] = gc_randn(rng, 4, (int64_t[]){2, 3, 5, 2});
    return 3;
}

static tg_tensor *f_plain(tg_tensor *const *x, int n, void *c)
{
    UNUSED;
    return tg_attention(x[0], x[1], x[2], NULL, false, 0, 0, NULL);
}

static tg_tensor *f_causal(tg_tensor *const *x, int n, void *c)
{
    UNUSED;
    return tg_attention(x[0], x[1], x[2], NULL, true, 0, 0, NULL);
}

/* 3 queries, 6 keys, an explicit scale. */
static tg_tensor *f_more_keys_causal(tg_tensor *const *x, int n, void *c)
{
    UNUSED;
    return tg_attention(x[0], x[1], x[2], NULL, true, 0.7, 0, NULL);
}

/* A float [3, 6] mask with a -inf and finite offsets; it broadcasts over nothing. */
static tg_tensor *f_float_mask(tg_tensor *const *x, int n, void *c)
{
    UNUSED;
    const double m[18] = {0, -1, 0.5, -INFINITY, 0, 2, 1, 0, 0, 0, -0.5, 0,
                          -INFINITY, 0.3, 0, 0, 0, -2};
    tg_tensor *mask = tg_from_data(TG_FLOAT64, 2, (int64_t[]){3, 6}, m);
    if (mask && tg_dtype_of(x[0]) != TG_FLOAT64)
        mask = tg_to_dtype(mask, tg_dtype_of(x[0]));
    return tg_attention(x[0], x[1], x[2], mask, false, 0, 0, NULL);
}

/* A bool [1, 6] mask broadcast over the queries. */
static tg_tensor *f_bool_mask(tg_tensor *const *x, int n, void *c)
{
    UNUSED;
    const bool m[6] = {0, 1, 0, 0, 1, 0};
    tg_tensor *mask = tg_from_data(TG_BOOL, 2, (int64_t[]){1, 6}, m);
    return tg_attention(x[0], x[1], x[2], mask, false, 0, 0, NULL);
}

/* Query 1 sees no key: zeros out, and the gradient through it is zero. */
static tg_tensor *f_fully_masked_row(tg_tensor *const *x, int n, void *c)
{
    UNUSED;
    const bool m[18] = {0, 0, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 1, 0, 1, 0, 1};
    tg_tensor *mask = tg_from_data(TG_BOOL, 2, (int64_t[]){3, 6}, m);
    return tg_attention(x[0], x[1], x[2], mask, false, 0, 0, NULL);
}

/* q, k, v all transposed views (non-contiguous), causal. */
static tg_tensor *f_transposed(tg_tensor *const *x, int n, void *c)
{
    UNUSED;
    return tg_attention(tg_transpose(x[0], 0, 1), tg_transpose(x[1], 0, 1),
                        tg_transpose(x[2], 0, 1), NULL, true, 0, 0, NULL);
}

static tg_tensor *f_heads(tg_tensor *const *x, int n, void *c)
{
    UNUSED;
    return tg_attention(x[0], x[1], x[2], NULL, false, 0, 0, NULL);
}

/* Heads with the head dim swapped out and back: [2,3,L,E] -> [2,L,3,E]
 * contiguous -> transposed back, as the GPT hands its heads over. */
static tg_tensor *f_heads_views_causal(tg_tensor *const *x, int n, void *c)
{
    UNUSED;
    tg_tensor *v[3];
    for (int i = 0; i < 3; i++)
        v[i] = tg_transpose(tg_contiguous(tg_transpose(x[i], 1, 2)), 1, 2);
    return tg_attention(v[0], v[1], v[2], NULL, true, 0, 0, NULL);
}

/* Dropout from a generator seeded the same on every call: a fixed mask. */
static tg_tensor *with_dropout(tg_tensor *const *x, bool causal, double p)
{
    tg_rng *rng = tg_rng_new(23);
    tg_tensor *y = tg_attention(x[0], x[1], x[2], NULL, causal, 0, p, rng);
    tg_rng_free(rng);
    return y;
}

static tg_tensor *f_dropout(tg_tensor *const *x, int n, void *c)
{
    UNUSED;
    return with_dropout(x, false, 0.3);
}

static tg_tensor *f_heads_dropout_causal(tg_tensor *const *x, int n, void *c)
{
    UNUSED;
    return with_dropout(x, true, 0.25);
}

/* Grouped-query attention: q [2, 6, L, 3] on k [2, Hkv, S, 3], v [2, Hkv,
 * S, 2]. */
static int grouped(tg_tensor **in, tg_rng *rng, int64_t Hkv, int64_t L, int64_t S)
{
    in[0] = gc_randn(rng, 4, (int64_t[]){2, 6, L, 3});
    in[1] = gc_randn(rng, 4, (int64_t[]){2, Hkv, S, 3});
    in[2] = gc_randn(rng, 4, (int64_t[]){2, Hkv, S, 2});
    return 3;
}

static int gqa_6x2(tg_tensor **in, tg_rng *rng)
{
    return grouped(in, rng, 2, 3, 5);
}

static int mqa_6x1(tg_tensor **in, tg_rng *rng)
{
    return grouped(in, rng, 1, 3, 5);
}

/* One query row over 7 keys: decoding, a group's heads as one block. */
static int gqa_decode_row(tg_tensor **in, tg_rng *rng)
{
    return grouped(in, rng, 2, 1, 7);
}

/* Causal, with a bool key padding mask [2, 1, 1, S] (batch 1 loses its
 * last two keys) and dropout: every part of the plan on grouped heads. */
static tg_tensor *f_gqa_masked_dropout(tg_tensor *const *x, int n, void *c)
{
    UNUSED;
    int64_t S = tg_shape(x[1])[2];
    tg_tensor *mask = tg_zeros(TG_BOOL, 4, (int64_t[]){2, 1, 1, S});
    if (mask)
        ((bool *)tg_data(mask))[2 * S - 1] = ((bool *)tg_data(mask))[2 * S - 2] = true;
    tg_rng *rng = tg_rng_new(31);
    tg_tensor *y = tg_attention(x[0], x[1], x[2], mask, true, 0, 0.2, rng);
    tg_rng_free(rng);
    return y;
}

/* qkv [2, 5, 3 * 2 heads * 2]. */
static int packed_2x5(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 3, (int64_t[]){2, 5, 12});
    return 1;
}

/* qkv stored [12, 5, 2]: the case hands over its [2, 5, 12] transpose. */
static int packed_transposed(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 3, (int64_t[]){12, 5, 2});
    return 1;
}

static tg_tensor *f_packed(tg_tensor *const *x, int n, void *c)
{
    UNUSED;
    return tg_attention_qkvpacked(x[0], 2, false, 0, 0, NULL);
}

static tg_tensor *f_packed_causal_scaled(tg_tensor *const *x, int n, void *c)
{
    UNUSED;
    return tg_attention_qkvpacked(x[0], 2, true, 0.6, 0, NULL);
}

static tg_tensor *f_packed_strided_causal(tg_tensor *const *x, int n, void *c)
{
    UNUSED;
    return tg_attention_qkvpacked(tg_transpose(x[0], 0, 2), 2, true, 0, 0, NULL);
}

static tg_tensor *f_packed_dropout_causal(tg_tensor *const *x, int n, void *c)
{
    UNUSED;
    tg_rng *rng = tg_rng_new(29);
    tg_tensor *y = tg_attention_qkvpacked(x[0], 2, true, 0, 0.3, rng);
    tg_rng_free(rng);
    return y;
}

const gc_case cases_sdpa_fused[] = {
    {"attention_no_mask", f_plain, square_4, 0, 0},
    {"attention_causal", f_causal, square_4, 0, 0},
    {"attention_more_keys_than_queries_causal", f_more_keys_causal, more_keys, 0, 0},
    {"attention_float_mask", f_float_mask, more_keys, 0, 0},
    {"attention_bool_mask_broadcast", f_bool_mask, more_keys, 0, 0},
    {"attention_fully_masked_row", f_fully_masked_row, more_keys, 0, 0},
    {"attention_transposed_inputs", f_transposed, transposed_3_5, 0, 0},
    {"attention_heads_2x3", f_heads, heads_2x3, 0, 0},
    {"attention_heads_views_causal", f_heads_views_causal, heads_2x3, 0, 0},
    {"attention_dropout", f_dropout, more_keys, 0, 0},
    {"attention_heads_dropout_causal", f_heads_dropout_causal, heads_2x3, 0, 0},
    {"attention_gqa_6x2_causal", f_causal, gqa_6x2, 0, 0},
    {"attention_gqa_6x2_masked_dropout", f_gqa_masked_dropout, gqa_6x2, 0, 0},
    {"attention_mqa_6x1_causal", f_causal, mqa_6x1, 0, 0},
    {"attention_gqa_decode_row", f_plain, gqa_decode_row, 0, 0},
    {"attention_qkvpacked", f_packed, packed_2x5, 0, 0},
    {"attention_qkvpacked_causal_scaled", f_packed_causal_scaled, packed_2x5, 0, 0},
    {"attention_qkvpacked_strided_causal", f_packed_strided_causal, packed_transposed, 0, 0},
    {"attention_qkvpacked_dropout_causal", f_packed_dropout_causal, packed_2x5, 0, 0},
};
const int n_cases_sdpa_fused = sizeof cases_sdpa_fused / sizeof cases_sdpa_fused[0];
