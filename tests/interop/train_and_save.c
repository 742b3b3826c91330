/* The C -> PyTorch half of the interop check: trains the tiny GPT of
 * tests/fixtures/gen_fixtures.py for 3 AdamW steps on fixed tokens and saves
 * its parameters ("param.<name>"), the tokens and its logits to argv[1]. */
#include <stdio.h>

#include <tensorgrad/tensorgrad.h>

enum { B = 2, T = 7, VOCAB = 11 };

static int fail(const char *what)
{
    fprintf(stderr, "train_and_save: %s: %s\n", what, tg_error_message());
    return 1;
}

/* Tokens idx [B, T] follow a fixed pattern; targets are the next token. */
static void fixed_data(int64_t *idx, int64_t *targets)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            idx[b * T + t] = (3 * b + 5 * t + 1) % VOCAB;
            targets[b * T + t] = (3 * b + 5 * (t + 1) + 1) % VOCAB;
        }
}

/* One AdamW step on the cross-entropy of (idx, targets); 0 or -1. */
static int train_step(tg_gpt *m, tg_optim *opt, const tg_tensor *idx, const tg_tensor *targets)
{
    tg_scope_begin();
    tg_tensor *loss = NULL;
    tg_tensor *logits = tg_gpt_forward(m, idx, targets, &loss); /* both owned by the scope */
    int rc = logits && loss ? tg_backward(loss, NULL) : -1;
    if (rc == 0)
        rc = tg_optim_step(opt);
    tg_optim_zero_grad(opt);
    tg_scope_end();
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUT.safetensors\n", argv[0]);
        return 2;
    }
    tg_gpt_config cfg = {.vocab_size = VOCAB, .block_size = 8, .n_layer = 2, .n_head = 2,
                         .n_embd = 8, .dropout = 0.0};
    tg_rng *rng = tg_rng_new(2024);
    tg_gpt *m = tg_gpt_new(&cfg, TG_FLOAT32, rng);
    tg_params ps = {0}, out = {0};
    if (!m || tg_gpt_params(m, &ps) != 0)
        return fail("building the GPT");
    tg_optim *opt = tg_adamw_new(&ps, 1e-2, 0.9, 0.99, 1e-8, 0.1);
    if (!opt)
        return fail("tg_adamw_new");

    int64_t idx_v[B * T], tgt_v[B * T];
    fixed_data(idx_v, tgt_v);
    tg_tensor *idx = tg_from_data(TG_INT64, 2, (int64_t[]){B, T}, idx_v);
    tg_tensor *targets = tg_from_data(TG_INT64, 2, (int64_t[]){B, T}, tgt_v);
    for (int step = 0; step < 3; step++)
        if (train_step(m, opt, idx, targets) != 0)
            return fail("training");

    bool was = tg_set_grad_enabled(false);
    tg_tensor *loss = NULL;
    tg_tensor *logits = tg_gpt_forward(m, idx, targets, &loss);
    tg_set_grad_enabled(was);
    if (!logits || !loss)
        return fail("tg_gpt_forward after training");

    /* The fixtures' naming: param.<state-dict name>, input.*, output.* */
    int rc = 0;
    for (int i = 0; i < ps.count && rc == 0; i++)
        rc = tg_params_add(&out, "param", ps.names[i], ps.tensors[i]);
    const char *names[] = {"input.idx", "input.targets", "output.logits", "output.loss"};
    tg_tensor *extra[] = {idx, targets, logits, loss};
    for (int i = 0; i < 4 && rc == 0; i++)
        rc = tg_params_add(&out, NULL, names[i], extra[i]);
    if (rc == 0)
        rc = tg_safetensors_save(argv[1], &out, 0, NULL, NULL);
    if (rc != 0)
        return fail("saving");
    printf("train_and_save: wrote %s (%d tensors, loss %.6f)\n", argv[1], out.count,
           tg_item(loss));

    tg_params_clear(&out);
    tg_release(logits);
    tg_release(loss);
    tg_release(idx);
    tg_release(targets);
    tg_optim_free(opt);
    tg_params_clear(&ps);
    tg_gpt_free(m);
    tg_rng_free(rng);
    if (tg_live_tensors() != 0) {
        fprintf(stderr, "train_and_save: %lld tensors leaked\n", (long long)tg_live_tensors());
        return 1;
    }
    return 0;
}
