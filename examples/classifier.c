/* Write your own model: a 2-layer Transformer encoder that learns whether
 * token 1 occurs at least twice in a sequence of 8 tokens, trained with AdamW,
 * then saved. docs/models.md shows this file; it runs as a test.
 * Run: build/examples/classifier [--out FILE] */
#include <stdio.h>
#include <string.h>

#include <tensorgrad/tensorgrad.h>

enum { VOCAB = 6, T = 8, D = 32, BATCH = 32, STEPS = 300 };

static const char usage[] = "usage: classifier [--out FILE]\n"
                            "  --out FILE  where to save the trained weights "
                            "(default classifier.safetensors)\n";

int main(int argc, char **argv)
{
    const char *out = "classifier.safetensors";
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")))
        return fputs(usage, stdout), 0;
    if (argc == 3 && !strcmp(argv[1], "--out") && argv[2][0])
        out = argv[2];
    else if (argc != 1)
        return fprintf(stderr, "classifier: bad arguments\n%s", usage), 2;

    tg_rng *rng = tg_rng_new(0);
    tg_encoder_config layer = {.d_model = D, .nhead = 4, .dim_feedforward = 64,
                               .layer_norm_eps = 1e-5, .activation = TG_ACT_RELU};
    tg_embedding_module *embed = tg_embedding_module_new(VOCAB, D, TG_FLOAT32, rng);
    tg_encoder *encoder = tg_encoder_new(&layer, 2, false, TG_FLOAT32, rng);
    tg_linear *head = tg_linear_new(D, 2, true, TG_FLOAT32, rng);
    tg_params ps = {0};
    tg_embedding_module_params(embed, "embed", &ps);
    tg_encoder_params(encoder, "encoder", &ps);
    tg_linear_params(head, "head", &ps);
    tg_optim *opt = tg_adamw_new(&ps, 3e-3, 0.9, 0.999, 1e-8, 0.01);

    double accuracy = 0;
    for (int step = 1; step <= STEPS; step++) {
        int64_t tokens[BATCH * T], labels[BATCH] = {0}, ones[BATCH] = {0};
        for (int i = 0; i < BATCH * T; i++) {
            tokens[i] = (int64_t)(tg_rng_uniform01(rng) * VOCAB);
            ones[i / T] += tokens[i] == 1;
            labels[i / T] = ones[i / T] >= 2; /* the class: token 1 at least twice */
        }
        tg_scope_begin();
        tg_tensor *x = tg_from_data(TG_INT64, 2, (int64_t[]){BATCH, T}, tokens);
        tg_tensor *y = tg_from_data(TG_INT64, 1, (int64_t[]){BATCH}, labels);
        tg_tensor *e = tg_embedding_module_forward(embed, x);                  /* [B,T,D] */
        tg_tensor *h = tg_encoder_forward(encoder, e, NULL, NULL);
        tg_tensor *logits = tg_linear_forward(head, tg_mean(h, (int[]){1}, 1, false)); /* [B,2] */
        tg_tensor *loss = tg_cross_entropy(logits, y, -100);
        if (!loss || tg_backward(loss, NULL) < 0 || tg_optim_step(opt) < 0)
            return fprintf(stderr, "training failed: %s\n", tg_error_message()), 1;
        tg_optim_zero_grad(opt);
        tg_tensor *pred = NULL;
        tg_max(logits, 1, false, NULL, &pred);
        accuracy = 0;
        for (int i = 0; i < BATCH; i++)
            accuracy += tg_get(pred, (int64_t[]){i}) == labels[i];
        if (step % 50 == 0)
            printf("step %3d  loss %.4f  batch accuracy %.0f%%\n", step, tg_item(loss),
                   100 * accuracy / BATCH);
        tg_scope_end();
    }
    int saved = tg_safetensors_save(out, &ps, 0, NULL, NULL);
    if (saved < 0)
        fprintf(stderr, "classifier: %s\n", tg_error_message());
    else
        printf("saved %s\n", out);
    tg_optim_free(opt);
    tg_params_clear(&ps);
    tg_linear_free(head);
    tg_encoder_free(encoder);
    tg_embedding_module_free(embed);
    tg_rng_free(rng);
    return saved == 0 && accuracy / BATCH >= 0.9 ? 0 : 1;
}
