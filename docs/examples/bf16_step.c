/* One GPT training step with bfloat16 matrix products, as
 * docs/mixed-precision.md shows it: the switch around forward and
 * backward, the optimizer step in float32. */
#include <stdio.h>

#include <tensorgrad/tensorgrad.h>

enum { B = 2, T = 8, VOCAB = 16 };

int main(void)
{
    tg_rng *rng = tg_rng_new(5);
    tg_gpt_config cfg = {.vocab_size = VOCAB, .block_size = T, .n_layer = 2, .n_head = 2,
                         .n_embd = 32, .dropout = 0.0};
    tg_gpt *model = tg_gpt_new(&cfg, TG_FLOAT32, rng);
    tg_params ps = {0};
    tg_gpt_params(model, &ps);
    tg_optim *opt = tg_adamw_new(&ps, 1e-3, 0.9, 0.999, 1e-8, 0.01);
    int64_t tokens[B * T], next[B * T];
    for (int i = 0; i < B * T; i++)
        tokens[i] = i % VOCAB, next[i] = (i + 1) % VOCAB;

    tg_scope_begin();
    tg_tensor *idx = tg_from_data(TG_INT64, 2, (int64_t[]){B, T}, tokens);
    tg_tensor *targets = tg_from_data(TG_INT64, 2, (int64_t[]){B, T}, next);
    tg_tensor *loss = NULL;
    tg_precision was = tg_set_matmul_precision(TG_PRECISION_BF16);
    tg_tensor *logits = tg_gpt_forward(model, idx, targets, &loss);
    int rc = logits && loss ? tg_backward(loss, NULL) : -1; /* backward products in bf16 too */
    tg_set_matmul_precision(was);
    rc = rc == 0 ? tg_optim_step(opt) : -1; /* parameters and moments: float32 */
    if (rc == 0)
        printf("bf16 step: loss %.4f\n", tg_item(loss));
    else
        fprintf(stderr, "bf16_step: %s\n", tg_error_message());
    tg_scope_end();

    tg_optim_free(opt);
    tg_params_clear(&ps);
    tg_gpt_free(model);
    tg_rng_free(rng);
    return rc == 0 && tg_live_tensors() == 0 ? 0 : 1;
}
