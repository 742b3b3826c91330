/* Gradient-check cases for layer_norm, rms_norm, swiglu, embedding and the
 * losses: affine and plain layer norms over one and two dims, RMS norms with
 * and without a weight, transposed inputs, repeated embedding indices, and
 * cross-entropy with an ignored target. */
#include "cases.h"

#define EPS 1e-5

static tg_tensor *int64s(int ndim, const int64_t *shape, const int64_t *values)
{
    return tg_from_data(TG_INT64, ndim, shape, values);
}

/* ---- layer_norm -------------------------------------------------------------- */

static int ln_last_dim(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 2, (int64_t[]){3, 5});
    in[1] = gc_randn(rng, 1, (int64_t[]){5});
    in[2] = gc_randn(rng, 1, (int64_t[]){5});
    return 3;
}

static int ln_last_two_dims(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 3, (int64_t[]){2, 3, 4});
    in[1] = gc_randn(rng, 2, (int64_t[]){3, 4});
    in[2] = gc_randn(rng, 2, (int64_t[]){3, 4});
    return 3;
}

static int ln_plain(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 2, (int64_t[]){4, 6});
    return 1;
}

static int ln_weight_only(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 2, (int64_t[]){3, 4});
    in[1] = gc_randn(rng, 1, (int64_t[]){4});
    return 2;
}

/* x is [5,3]: the op sees its transpose [3,5], normalised along stride-3 rows. */
static int ln_transposed(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 2, (int64_t[]){5, 3});
    in[1] = gc_randn(rng, 1, (int64_t[]){5});
    in[2] = gc_randn(rng, 1, (int64_t[]){5});
    return 3;
}

static tg_tensor *f_ln_affine(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    return tg_layer_norm(x[0], 1, x[1], x[2], EPS);
}
static tg_tensor *f_ln_two_dims(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    return tg_layer_norm(x[0], 2, x[1], x[2], EPS);
}
static tg_tensor *f_ln_plain(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    return tg_layer_norm(x[0], 1, NULL, NULL, EPS);
}
static tg_tensor *f_ln_weight_only(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    return tg_layer_norm(x[0], 1, x[1], NULL, EPS);
}
static tg_tensor *f_ln_transposed(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    return tg_layer_norm(tg_transpose(x[0], 0, 1), 1, x[1], x[2], EPS);
}

/* ---- rms_norm and swiglu ------------------------------------------------------ */

static int rms_with_weight(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 2, (int64_t[]){3, 5});
    in[1] = gc_randn(rng, 1, (int64_t[]){5});
    return 2;
}

static int rms_batch(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 3, (int64_t[]){2, 3, 7});
    return 1;
}

static tg_tensor *f_rms(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    return tg_rms_norm(x[0], x[1], EPS);
}
static tg_tensor *f_rms_plain(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    return tg_rms_norm(x[0], NULL, EPS);
}
/* x stored [5,3]: the op sees [3,5] with rows of stride 3. */
static tg_tensor *f_rms_transposed(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    return tg_rms_norm(tg_transpose(x[0], 0, 1), x[1], EPS);
}
static int rms_stored_t(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 2, (int64_t[]){5, 3});
    in[1] = gc_randn(rng, 1, (int64_t[]){5});
    return 2;
}

static int swiglu_pair(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 3, (int64_t[]){2, 3, 5});
    in[1] = gc_randn(rng, 3, (int64_t[]){2, 3, 5});
    return 2;
}
/* gate stored [5,3] and read transposed, up [3,5]. */
static int swiglu_stored_t(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 2, (int64_t[]){5, 3});
    in[1] = gc_randn(rng, 2, (int64_t[]){3, 5});
    return 2;
}

static tg_tensor *f_swiglu(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    return tg_swiglu(x[0], x[1]);
}
static tg_tensor *f_swiglu_transposed(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    return tg_swiglu(tg_transpose(x[0], 0, 1), x[1]);
}

/* ---- embedding ----------------------------------------------------------------- */

/* Row 1 is picked three times: its gradient is the sum of three rows of g. */
static int emb_repeated(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 2, (int64_t[]){5, 3});
    in[1] = int64s(1, (int64_t[]){6}, (int64_t[]){1, 3, 1, 0, 4, 1});
    return 2;
}

/* [2,3] indices into a weight that is the transpose of a [4,6] tensor. */
static int emb_2d(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 2, (int64_t[]){4, 6});
    in[1] = int64s(2, (int64_t[]){2, 3}, (int64_t[]){5, 0, 2, 2, 3, 5});
    return 2;
}

static tg_tensor *f_emb(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    return tg_embedding(x[0], x[1]);
}
static tg_tensor *f_emb_transposed(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    return tg_embedding(tg_transpose(x[0], 0, 1), x[1]);
}

/* ---- cross_entropy and mse_loss --------------------------------------------------- */

static int ce_batch(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 2, (int64_t[]){4, 5});
    in[1] = int64s(1, (int64_t[]){4}, (int64_t[]){2, 0, 4, 2});
    return 2;
}

/* Row 2's target is -100: it gets no gradient and stays out of the mean. */
static int ce_one_ignored(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 2, (int64_t[]){4, 5});
    in[1] = int64s(1, (int64_t[]){4}, (int64_t[]){1, 3, -100, 0});
    return 2;
}

static int ce_single(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 1, (int64_t[]){6});
    in[1] = int64s(0, NULL, (int64_t[]){4});
    return 2;
}

/* Logits [5,3] transposed to [3,5]: a strided class dim. */
static int ce_transposed(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 2, (int64_t[]){5, 3});
    in[1] = int64s(1, (int64_t[]){3}, (int64_t[]){4, 0, 1});
    return 2;
}

static tg_tensor *f_ce(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    return tg_cross_entropy(x[0], x[1], -100);
}
static tg_tensor *f_ce_transposed(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    return tg_cross_entropy(tg_transpose(x[0], 0, 1), x[1], -100);
}

static int mse_pair(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 2, (int64_t[]){3, 4});
    in[1] = gc_randn(rng, 2, (int64_t[]){3, 4});
    return 2;
}

static int mse_transposed_pair(tg_tensor **in, tg_rng *rng)
{
    in[0] = gc_randn(rng, 2, (int64_t[]){3, 4});
    in[1] = gc_randn(rng, 2, (int64_t[]){4, 3});
    return 2;
}

static tg_tensor *f_mse(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    return tg_mse_loss(x[0], x[1]);
}
static tg_tensor *f_mse_transposed(tg_tensor *const *x, int n, void *c)
{
    (void)n; (void)c;
    return tg_mse_loss(x[0], tg_transpose(x[1], 0, 1));
}

const gc_case cases_nn[] = {
    {"layer_norm_last_dim_affine", f_ln_affine, ln_last_dim, 0, 0},
    {"layer_norm_last_two_dims", f_ln_two_dims, ln_last_two_dims, 0, 0},
    {"layer_norm_without_affine", f_ln_plain, ln_plain, 0, 0},
    {"layer_norm_weight_only", f_ln_weight_only, ln_weight_only, 0, 0},
    {"layer_norm_transposed_input", f_ln_transposed, ln_transposed, 0, 0},
    {"rms_norm_with_weight", f_rms, rms_with_weight, 0, 0},
    {"rms_norm_without_weight_3d", f_rms_plain, rms_batch, 0, 0},
    {"rms_norm_transposed_input", f_rms_transposed, rms_stored_t, 0, 0},
    {"swiglu_3d", f_swiglu, swiglu_pair, 0, 0},
    {"swiglu_transposed_gate", f_swiglu_transposed, swiglu_stored_t, 0, 0},
    {"embedding_repeated_indices", f_emb, emb_repeated, 0, 0},
    {"embedding_2d_indices_transposed_weight", f_emb_transposed, emb_2d, 0, 0},
    {"cross_entropy", f_ce, ce_batch, 0, 0},
    {"cross_entropy_one_target_ignored", f_ce, ce_one_ignored, 0, 0},
    {"cross_entropy_1d_logits", f_ce, ce_single, 0, 0},
    {"cross_entropy_transposed_logits", f_ce_transposed, ce_transposed, 0, 0},
    {"mse_loss_grad_to_both", f_mse, mse_pair, 0, 0},
    {"mse_loss_transposed_target", f_mse_transposed, mse_transposed_pair, 0, 0},
};
const int n_cases_nn = sizeof cases_nn / sizeof cases_nn[0];
