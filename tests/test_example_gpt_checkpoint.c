/* examples/gpt refusing a checkpoint whose tensors say more than its config,
 * or whose values are not finite: resuming or sampling from it would drop a
 * layer (and its optimizer state) without a word, or sample newlines from
 * NaN. Each case edits a real checkpoint, as a user's tool might. */
#include "testutil.h"

#include <math.h>

static char dir[64];
static char output[1 << 16];

/* Runs `gpt ARGS` in dir: it exits with status (no crash, no leak) and says
 * fragment, unless that is NULL. */
static void expect(int status, const char *args, const char *fragment)
{
    int got = run_example_in(dir, "gpt", args, output, sizeof output);
    ck_assert_msg(got == status && !strstr(output, "leaked") &&
                      (!fragment || strstr(output, fragment)),
                  "gpt %s: exit %d, not %d, or no '%s' in:\n%s", args, got, status,
                  fragment ? fragment : "", output);
}

static void make_dir(void) { make_temp_dir(dir, sizeof dir, "tg_gpt_ck"); }

static void remove_dir(void) { remove_temp_dir(dir); }

/* base.st as bad.st with element `at` of tensor name set to value (float32,
 * float64 or int64), or with a tensor called name added if it has none;
 * at < 0: without the tensor called name. */
static void write_changed(const char *name, int64_t at, double value)
{
    char path[128];
    snprintf(path, sizeof path, "%s/base.st", dir);
    tg_params ck = {0};
    ck_assert_int_eq(tg_safetensors_load(path, &ck), 0);
    tg_tensor *t = tg_params_find(&ck, name);
    if (at < 0) {
        ck_assert_ptr_nonnull(t);
        for (int i = 0; i < ck.count; i++)
            if (!strcmp(ck.names[i], name)) { /* the last entry takes its place */
                tg_release(ck.tensors[i]);
                free(ck.names[i]);
                ck.tensors[i] = ck.tensors[ck.count - 1];
                ck.names[i] = ck.names[--ck.count];
                break;
            }
    } else if (t) {
        if (tg_dtype_of(t) == TG_FLOAT32)
            ((float *)tg_data(t))[at] = (float)value;
        else if (tg_dtype_of(t) == TG_FLOAT64)
            ((double *)tg_data(t))[at] = value;
        else
            ((int64_t *)tg_data(t))[at] = (int64_t)value;
    } else {
        tg_tensor *added = tg_full(TG_FLOAT32, 1, SHAPE(at + 1), value);
        ck_assert_int_eq(tg_params_add(&ck, NULL, name, added), 0);
        tg_release(added);
    }
    snprintf(path, sizeof path, "%s/bad.st", dir);
    ck_assert_int_eq(tg_safetensors_save(path, &ck, 0, NULL, NULL), 0);
    tg_params_clear(&ck);
}

/* Resuming and sampling bad.st both fail with message, before a step. */
static void assert_refused(const char *message)
{
    expect(1, "train --resume bad.st --out o.st --svg o.svg", message);
    ck_assert_msg(!strstr(output, "step 3/"), "trained:\n%s", output);
    expect(1, "sample --ckpt bad.st --tokens 3", message);
}

START_TEST(llama_config_that_counts_a_layer_fewer_than_the_file_holds_is_refused)
{
    expect(0, "train --arch llama --config task --steps 4 --batch 4 --stop-at 2 "
           "--out base.st --svg base.svg", NULL);
    write_changed("llama.config", 2, 1); /* layers: 2 -> 1 */
    /* 9 weights of layer 1, and 3 tensors of AdamW state for each */
    assert_refused("bad.st is not a usable gpt checkpoint: llama.config does not account for "
                   "36 of its tensors: model.layers.1.self_attn.q_proj.weight, "
                   "model.layers.1.self_attn.k_proj.weight, "
                   "model.layers.1.self_attn.v_proj.weight and 33 more");
    expect(0, "train --resume base.st --out o.st --svg o.svg", NULL);
}
END_TEST

START_TEST(gpt_config_that_counts_a_layer_fewer_or_a_stray_tensor_is_refused)
{
    expect(0, "train --config task --steps 4 --batch 4 --stop-at 2 --out base.st "
           "--svg base.svg", NULL);
    write_changed("gpt.config", 2, 1); /* layers: 2 -> 1 */
    assert_refused("gpt.config does not account for 48 of its tensors: "
                   "transformer.h.1.ln_1.weight, transformer.h.1.ln_1.bias, "
                   "transformer.h.1.attn.c_attn.weight and 45 more");
    write_changed("llama.config", 10, 1); /* another architecture's config */
    assert_refused("gpt.config does not account for 1 of its tensors: llama.config");
}
END_TEST

START_TEST(weights_or_optimizer_state_not_finite_or_missing_are_refused_by_name)
{
    expect(0, "train --config tiny --steps 4 --batch 4 --stop-at 2 --out base.st "
           "--svg base.svg", NULL);
    write_changed("transformer.wte.weight", 3 * 32 + 5, INFINITY);
    assert_refused("'transformer.wte.weight' (float32 [13,32]) holds inf at [3,5]");
    write_changed("exp_avg_sq.transformer.h.0.mlp.c_fc.bias", 7, NAN);
    expect(1, "train --resume bad.st --out o.st --svg o.svg",
           "'exp_avg_sq.transformer.h.0.mlp.c_fc.bias' (float32 [128]) holds nan at [7]");
    /* a state that does not load is named in plain words */
    write_changed("exp_avg.transformer.h.0.mlp.c_fc.bias", -1, 0);
    expect(1, "train --resume bad.st --out o.st --svg o.svg",
           "bad.st cannot be resumed: its optimizer state is not usable: ");
    expect(0, "sample --ckpt bad.st --tokens 3", NULL); /* it needs none */
    /* train.history marks the steps without a validation loss with NaN */
    expect(0, "train --resume base.st --out o.st --svg o.svg", NULL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("example_gpt_checkpoint");
    TCase *tc = tcase_checked("refused");
    tcase_add_checked_fixture(tc, make_dir, remove_dir);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, llama_config_that_counts_a_layer_fewer_than_the_file_holds_is_refused);
    tcase_add_test(tc, gpt_config_that_counts_a_layer_fewer_or_a_stray_tensor_is_refused);
    tcase_add_test(tc, weights_or_optimizer_state_not_finite_or_missing_are_refused_by_name);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
