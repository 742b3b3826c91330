/* What every example program promises on its command line: --help prints
 * the usage on stdout and exits 0, an unknown argument exits 2 with the
 * usage; and the classifier saves the checkpoint docs/models.md shows it saving. */
#include "testutil.h"

#include <unistd.h>

static const char *const examples[] = {"attention", "attention_walkthrough", "classifier",
                                       "encoder", "gpt", "seq2seq", "toy_attention_lm"};
enum { N_EXAMPLES = sizeof examples / sizeof examples[0] };

static char dir[64];
static char output[1 << 16];

static void make_dir(void) { make_temp_dir(dir, sizeof dir, "tg_examples"); }

static void remove_dir(void) { remove_temp_dir(dir); }

START_TEST(help_prints_usage_on_stdout_and_exits_0)
{
    const char *name = examples[_i];
    /* stderr goes nowhere: the usage must come on stdout */
    int status = run_example_in(dir, name, "--help 2>/dev/null", output, sizeof output);
    ck_assert_msg(status == 0, "%s --help exited %d:\n%s", name, status, output);
    ck_assert_msg(!strncmp(output, "usage:", 6), "%s --help printed:\n%s", name, output);
    ck_assert_msg(strstr(output, name) != NULL, "%s --help does not name it:\n%s", name, output);
}
END_TEST

START_TEST(unknown_argument_exits_2_with_usage)
{
    const char *name = examples[_i];
    int status = run_example_in(dir, name, "--no-such-option 7", output, sizeof output);
    ck_assert_msg(status == 2, "%s --no-such-option exited %d:\n%s", name, status, output);
    ck_assert_msg(strstr(output, "usage:") != NULL, "%s printed no usage:\n%s", name, output);
}
END_TEST

/* A batch of the classifier's task: token 1 at least twice in 8. */
static double accuracy_of(tg_params *ps, tg_rng *rng)
{
    enum { B = 256, T = 8, VOCAB = 6 };
    static int64_t tokens[B * T], labels[B];
    for (int i = 0; i < B; i++) {
        int ones = 0;
        for (int t = 0; t < T; t++)
            ones += (tokens[i * T + t] = (int64_t)(tg_rng_uniform01(rng) * VOCAB)) == 1;
        labels[i] = ones >= 2;
    }
    tg_encoder_config layer = {.d_model = 32, .nhead = 4, .dim_feedforward = 64,
                               .layer_norm_eps = 1e-5, .activation = TG_ACT_RELU};
    tg_embedding_module *embed = tg_embedding_module_new(VOCAB, 32, TG_FLOAT32, rng);
    tg_encoder *encoder = tg_encoder_new(&layer, 2, false, TG_FLOAT32, rng);
    tg_linear *head = tg_linear_new(32, 2, true, TG_FLOAT32, rng);
    tg_embedding_module_params(embed, "embed", ps);
    tg_encoder_params(encoder, "encoder", ps);
    tg_linear_params(head, "head", ps);
    char path[128];
    snprintf(path, sizeof path, "%s/weights.safetensors", dir);
    ck_assert_msg(tg_safetensors_load_into(path, ps) == 0, "%s", tg_error_message());

    tg_encoder_set_train(encoder, false);
    tg_scope_begin();
    tg_tensor *x = tg_from_data(TG_INT64, 2, (int64_t[]){B, T}, tokens);
    tg_tensor *h = tg_encoder_forward(encoder, tg_embedding_module_forward(embed, x), NULL, NULL);
    tg_tensor *logits = tg_linear_forward(head, tg_mean(h, (int[]){1}, 1, false));
    ck_assert_ptr_nonnull(logits);
    double right = 0;
    for (int i = 0; i < B; i++) {
        double no = tg_get(logits, (int64_t[]){i, 0}), yes = tg_get(logits, (int64_t[]){i, 1});
        right += (yes > no) == (labels[i] == 1);
    }
    tg_scope_end();
    tg_linear_free(head);
    tg_encoder_free(encoder);
    tg_embedding_module_free(embed);
    return right / B;
}

START_TEST(classifier_saves_weights_that_classify_a_fresh_batch)
{
    int status = run_example_in(dir, "classifier", "--out weights.safetensors", output,
                                sizeof output);
    ck_assert_msg(status == 0, "classifier exited %d:\n%s", status, output);
    ck_assert_msg(strstr(output, "saved weights.safetensors"), "%s", output);
    /* fresh modules with other random weights, then the saved ones loaded */
    tg_rng *rng = tg_rng_new(99);
    tg_params ps = {0};
    double accuracy = accuracy_of(&ps, rng);
    ck_assert_msg(accuracy >= 0.9, "accuracy %.3f with the saved weights", accuracy);
    tg_params_clear(&ps);
    tg_rng_free(rng);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("example_cli");
    TCase *tc = tcase_checked("example_cli");
    tcase_add_checked_fixture(tc, make_dir, remove_dir);
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, help_prints_usage_on_stdout_and_exits_0, 0, N_EXAMPLES);
    tcase_add_loop_test(tc, unknown_argument_exits_2_with_usage, 0, N_EXAMPLES);
    tcase_add_test(tc, classifier_saves_weights_that_classify_a_fresh_batch);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
