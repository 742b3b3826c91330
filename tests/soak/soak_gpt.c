/* Soak test: trains a small GPT for many steps (10,000 by default) and
 * samples the resident set size and the live-tensor count as it goes. After
 * warm-up neither may grow: RSS stays within 1% of its post-warm-up value and
 * the live-tensor count is the same after every step. Prints the figures;
 * exits 1 on growth. Run by tests/soak/run.sh, not by the quick suite. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tensorgrad/tensorgrad.h>

/* Resident set size in kB, from /proc/self/statm (pages). */
static long rss_kb(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long pages_total = 0, pages_resident = 0;
    if (!f)
        return -1;
    if (fscanf(f, "%ld %ld", &pages_total, &pages_resident) != 2)
        pages_resident = -1;
    fclose(f);
    return pages_resident < 0 ? -1 : pages_resident * 4;
}

int main(int argc, char **argv)
{
    long steps = argc > 1 ? strtol(argv[1], NULL, 10) : 10000;
    long warmup = steps / 10 > 0 ? steps / 10 : 1;
    if (steps < 20) {
        fprintf(stderr, "usage: soak_gpt [steps >= 20]\n");
        return 2;
    }
    tg_gpt_config config = {.vocab_size = 32, .block_size = 32, .n_layer = 2, .n_head = 2,
                            .n_embd = 32, .dropout = 0.1};
    tg_rng *rng = tg_rng_new(1);
    tg_gpt *model = tg_gpt_new(&config, TG_FLOAT32, rng);
    tg_params ps = {0};
    tg_gpt_params(model, &ps);
    tg_optim *opt = tg_adamw_new(&ps, 1e-3, 0.9, 0.99, 1e-8, 0.1);
    if (!model || !opt) {
        fprintf(stderr, "soak_gpt: setup failed: %s\n", tg_error_message());
        return 1;
    }
    enum { B = 8, T = 32 };
    int64_t idx[B * T], targets[B * T];
    long rss_base = 0, rss_max = 0, live_base = 0, live_changes = 0;
    double first_loss = 0, loss_value = 0;
    for (long step = 1; step <= steps; step++) {
        for (int i = 0; i < B * T; i++) {
            idx[i] = (int64_t)(tg_rng_uniform01(rng) * 32);
            targets[i] = (idx[i] * 7 + 3) % 32; /* something learnable */
        }
        tg_scope_begin();
        tg_tensor *loss = NULL;
        tg_gpt_forward(model, tg_from_data(TG_INT64, 2, (int64_t[]){B, T}, idx),
                       tg_from_data(TG_INT64, 2, (int64_t[]){B, T}, targets), &loss);
        if (!loss || tg_backward(loss, NULL) < 0 || tg_clip_grad_norm(&ps, 1.0) < 0 ||
            tg_optim_step(opt) < 0) {
            fprintf(stderr, "soak_gpt: step %ld failed: %s\n", step, tg_error_message());
            return 1;
        }
        tg_optim_zero_grad(opt);
        loss_value = tg_item(loss);
        tg_scope_end();
        if (step == 1)
            first_loss = loss_value;
        long live = (long)tg_live_tensors(), rss = rss_kb();
        if (step == warmup) {
            rss_base = rss_max = rss;
            live_base = live;
        } else if (step > warmup) {
            live_changes += live != live_base;
            rss_max = rss > rss_max ? rss : rss_max;
        }
        if (step % (steps / 10) == 0)
            printf("step %6ld  loss %.4f  rss %ld kB  live tensors %ld\n", step, loss_value,
                   rss, live);
    }
    double growth = rss_base ? 100.0 * (double)(rss_max - rss_base) / (double)rss_base : 0;
    printf("after warm-up (step %ld): rss %ld kB -> max %ld kB (%+.2f%%); live tensors %ld, "
           "changed after %ld steps; loss %.4f -> %.4f\n",
           warmup, rss_base, rss_max, growth, live_base, live_changes, first_loss, loss_value);
    tg_optim_free(opt);
    tg_params_clear(&ps);
    tg_gpt_free(model);
    tg_rng_free(rng);
    int ok = growth <= 1.0 && live_changes == 0 && tg_live_tensors() == 0;
    printf("soak: %s\n", ok ? "passed" : "FAILED");
    return ok ? 0 : 1;
}
