/* The C -> PyTorch half of the encoder-decoder interop check: builds an
 * nn.Transformer here (d_model 8, 2 heads, 2 + 2 layers, feed-forward 16),
 * runs it on fixed inputs with padded source and target and a causal target
 * mask, and saves its parameters ("param.<name>"), the inputs and the output
 * to argv[1] for check_transformer_in_torch.py. */
#include <math.h>
#include <stdio.h>

#include <tensorgrad/tensorgrad.h>

enum { B = 2, S = 7, T = 5, D = 8 };

static int fail(const char *what)
{
    fprintf(stderr, "transformer_save: %s: %s\n", what, tg_error_message());
    return 1;
}

/* [B, len, D]: sin(0.7 i + phase) */
static tg_tensor *fixed_input(int64_t len, double phase)
{
    float v[B * S * D];
    for (int i = 0; i < B * len * D; i++)
        v[i] = (float)sin(0.7 * i + phase);
    return tg_from_data(TG_FLOAT32, 3, (int64_t[]){B, len, D}, v);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUT.safetensors\n", argv[0]);
        return 2;
    }
    tg_transformer_config cfg = {.d_model = D, .nhead = 2, .dim_feedforward = 16,
                                 .num_encoder_layers = 2, .num_decoder_layers = 2,
                                 .dropout = 0.0, .layer_norm_eps = 1e-5,
                                 .activation = TG_ACT_RELU};
    tg_rng *rng = tg_rng_new(2026);
    tg_transformer *m = tg_transformer_new(&cfg, TG_FLOAT32, rng);
    tg_params ps = {0}, out = {0};
    if (!m || tg_transformer_params(m, NULL, &ps) != 0)
        return fail("building the Transformer");

    /* source row 0 pads its first and last keys, row 1 its last two; the
     * target pads a middle position of row 0 and the last of row 1 */
    bool src_pad_v[B * S] = {1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 1};
    bool tgt_pad_v[B * T] = {0, 0, 1, 0, 0, 0, 0, 0, 0, 1};
    tg_tensor *src = fixed_input(S, 0.3), *tgt = fixed_input(T, 1.7);
    tg_tensor *src_pad = tg_from_data(TG_BOOL, 2, (int64_t[]){B, S}, src_pad_v);
    tg_tensor *tgt_pad = tg_from_data(TG_BOOL, 2, (int64_t[]){B, T}, tgt_pad_v);
    tg_tensor *tgt_mask = tg_square_subsequent_mask(T, TG_FLOAT32);
    tg_transformer_masks masks = {.src_key_padding_mask = src_pad,
                                  .tgt = {.tgt_mask = tgt_mask, .tgt_key_padding_mask = tgt_pad,
                                          .memory_key_padding_mask = src_pad}};
    bool was = tg_set_grad_enabled(false);
    tg_tensor *y = tg_transformer_forward(m, src, tgt, &masks);
    tg_set_grad_enabled(was);
    if (!y)
        return fail("tg_transformer_forward");

    int rc = 0;
    for (int i = 0; i < ps.count && rc == 0; i++)
        rc = tg_params_add(&out, "param", ps.names[i], ps.tensors[i]);
    const char *names[] = {"input.src", "input.tgt", "input.src_key_padding_mask",
                           "input.tgt_key_padding_mask", "input.tgt_mask", "output.out"};
    tg_tensor *extra[] = {src, tgt, src_pad, tgt_pad, tgt_mask, y};
    for (int i = 0; i < 6 && rc == 0; i++)
        rc = tg_params_add(&out, NULL, names[i], extra[i]);
    if (rc == 0)
        rc = tg_safetensors_save(argv[1], &out, 0, NULL, NULL);
    if (rc != 0)
        return fail("saving");
    printf("transformer_save: wrote %s (%d tensors)\n", argv[1], out.count);

    tg_params_clear(&out);
    for (int i = 0; i < 6; i++)
        tg_release(extra[i]);
    tg_params_clear(&ps);
    tg_transformer_free(m);
    tg_rng_free(rng);
    if (tg_live_tensors() != 0) {
        fprintf(stderr, "transformer_save: %lld tensors leaked\n", (long long)tg_live_tensors());
        return 1;
    }
    return 0;
}
