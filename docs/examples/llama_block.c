/* One Llama decoder layer written with public ops, as docs/llama.md shows
 * it: fused RMSNorm projections, rotary q and k, grouped-query causal
 * attention, the output projection and a SwiGLU MLP, forward and backward. */
#include <math.h>
#include <stdio.h>

#include <tensorgrad/module.h> /* tg_scale_in_place, tg_sum_squares */
#include <tensorgrad/tensorgrad.h>

enum { B = 2, T = 8, H = 4, HKV = 2, HD = 8, D = H * HD, F = 48 };
static const double EPS = 1e-5;

/* [B, T, n * HD] -> the heads view [B, n, T, HD], no copy */
static tg_tensor *heads(const tg_tensor *x, int64_t n)
{
    return tg_transpose(tg_reshape(x, 4, (int64_t[]){B, T, n, HD}), 1, 2);
}

static tg_tensor *param(tg_rng *rng, int64_t rows, int64_t cols)
{
    tg_tensor *w = cols ? tg_randn(rng, TG_FLOAT32, 2, (int64_t[]){rows, cols})
                        : tg_ones(TG_FLOAT32, 1, (int64_t[]){rows});
    if (w && cols)
        tg_scale_in_place(w, 1 / sqrt((double)cols));
    tg_set_requires_grad(w, true);
    return w;
}

int main(void)
{
    tg_rng *rng = tg_rng_new(3);
    tg_rope_table *rope = tg_rope_table_new(T, HD, 10000, TG_ROPE_HALF);
    tg_tensor *in_norm = param(rng, D, 0), *post_norm = param(rng, D, 0);
    tg_tensor *q_w = param(rng, H * HD, D), *k_w = param(rng, HKV * HD, D);
    tg_tensor *v_w = param(rng, HKV * HD, D), *o_w = param(rng, D, D);
    tg_tensor *gate_w = param(rng, F, D), *up_w = param(rng, F, D), *down_w = param(rng, D, F);
    tg_tensor *x = tg_randn(rng, TG_FLOAT32, 3, (int64_t[]){B, T, D});

    tg_scope_begin();
    tg_tensor *q = tg_rms_norm_affine(x, in_norm, EPS, q_w, NULL);          /* [B, T, H hd] */
    tg_tensor *k = tg_rms_norm_affine(x, in_norm, EPS, k_w, NULL);          /* [B, T, Hkv hd] */
    tg_tensor *v = tg_rms_norm_affine(x, in_norm, EPS, v_w, NULL);
    q = tg_rope(heads(q, H), rope, 0);                                     /* [B, H, T, hd] */
    k = tg_rope(heads(k, HKV), rope, 0);                                   /* [B, Hkv, T, hd] */
    v = heads(v, HKV);
    tg_tensor *y = tg_attention(q, k, v, NULL, true, 0, 0, NULL);          /* [B, H, T, hd] */
    y = tg_reshape(tg_transpose(y, 1, 2), 3, (int64_t[]){B, T, D});
    tg_tensor *h = tg_add(x, tg_affine(y, o_w, NULL));
    tg_tensor *gate = tg_rms_norm_affine(h, post_norm, EPS, gate_w, NULL); /* [B, T, F] */
    tg_tensor *up = tg_rms_norm_affine(h, post_norm, EPS, up_w, NULL);
    tg_tensor *out = tg_add(h, tg_swiglu_affine(gate, up, down_w, NULL));  /* [B, T, D] */
    tg_tensor *loss = tg_mean(tg_mul(out, out), NULL, 0, false);
    int rc = loss && tg_backward(loss, NULL) == 0 ? 0 : 1;
    if (rc)
        fprintf(stderr, "llama_block: %s\n", tg_error_message());
    else
        printf("loss %.6f, |dW_q| %.6f\n", tg_item(loss), sqrt(tg_sum_squares(tg_grad(q_w))));
    tg_scope_end();

    tg_tensor *all[] = {in_norm, post_norm, q_w, k_w, v_w, o_w, gate_w, up_w, down_w, x};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        tg_release(all[i]);
    tg_rope_table_free(rope);
    tg_rng_free(rng);
    return rc == 0 && tg_live_tensors() == 0 ? 0 : 1;
}
