/* Gradient-check cases for the rotary position embedding: both pairings,
 * 2-D to 4-D inputs, a position offset, Llama 3's theta of 500000, and
 * inputs read through a transposed view. Each case frees its table right
 * after the forward, so backward runs on the graph's own reference. */
#include "cases.h"

/* rope of x (any layout) by a fresh table of 16 positions. */
static tg_tensor *rope_of(const tg_tensor *x, double theta, tg_rope_pairing pairing,
                          int64_t pos0)
{
    tg_rope_table *t = tg_rope_table_new(16, tg_size(x, -1), theta, pairing);
    tg_tensor *y = tg_rope(x, t, pos0);
    tg_rope_table_free(t);
    return y;
}

static int x_3d(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 3, (int64_t[]){2, 5, 8});
    return 1;
}

static int x_4d(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 4, (int64_t[]){2, 3, 4, 6});
    return 1;
}

/* [B, T, H * hd] = [2, 4, 3 * 8], seen as [B, H, T, hd] as a model does */
static int x_projection(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 3, (int64_t[]){2, 4, 24});
    return 1;
}

/* [hd, T] = [8, 5]: its transpose has hd along a stride of 5 */
static int x_columns(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 2, (int64_t[]){8, 5});
    return 1;
}

static tg_tensor *f_half(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    return rope_of(x[0], 10000, TG_ROPE_HALF, 0);
}
static tg_tensor *f_interleaved_offset(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    return rope_of(x[0], 10000, TG_ROPE_INTERLEAVED, 3);
}
static tg_tensor *f_half_theta_500000(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    return rope_of(x[0], 500000, TG_ROPE_HALF, 11);
}
static tg_tensor *f_heads_view(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    tg_tensor *heads = tg_reshape(x[0], 4, (int64_t[]){2, 4, 3, 8});
    return rope_of(tg_transpose(heads, 1, 2), 10000, TG_ROPE_HALF, 2);
}
static tg_tensor *f_heads_view_interleaved(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    tg_tensor *heads = tg_reshape(x[0], 4, (int64_t[]){2, 4, 3, 8});
    return rope_of(tg_transpose(heads, 1, 2), 500000, TG_ROPE_INTERLEAVED, 12);
}
static tg_tensor *f_strided_hd(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    return rope_of(tg_transpose(x[0], 0, 1), 10000, TG_ROPE_INTERLEAVED, 1);
}
static tg_tensor *f_strided_hd_half(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    return rope_of(tg_transpose(x[0], 0, 1), 10000, TG_ROPE_HALF, 0);
}

const gc_case cases_rope[] = {
    {"rope_half_3d", f_half, x_3d, 0, 0},
    {"rope_interleaved_4d_from_position_3", f_interleaved_offset, x_4d, 0, 0},
    {"rope_half_4d_theta_500000_from_position_11", f_half_theta_500000, x_4d, 0, 0},
    {"rope_half_of_heads_viewed_from_a_projection", f_heads_view, x_projection, 0, 0},
    {"rope_interleaved_of_heads_viewed_from_a_projection", f_heads_view_interleaved,
     x_projection, 0, 0},
    {"rope_interleaved_with_hd_strided", f_strided_hd, x_columns, 0, 0},
    {"rope_half_with_hd_strided", f_strided_hd_half, x_columns, 0, 0},
};
const int n_cases_rope = sizeof cases_rope / sizeof cases_rope[0];
