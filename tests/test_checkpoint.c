/* Stopping and resuming: a GPT with dropout trained for 3 steps, saved
 * (parameters, AdamW state, both generators) to safetensors, loaded into a
 * differently initialised model and trained on gives bit-identical losses to
 * a run that never stopped. A loaded checkpoint's values can be checked
 * finite. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <unistd.h>

enum { B = 3, T = 6, STEPS = 6, STOP = 3 };
static const tg_gpt_config config = {.vocab_size = 13, .block_size = 8, .n_layer = 2,
                                     .n_head = 2, .n_embd = 16, .dropout = 0.1};

typedef struct {
    tg_gpt *model;
    tg_params params;
    tg_optim *opt;
    tg_rng *data; /* draws the batches */
} run;

static void run_start(run *r, uint64_t init_seed)
{
    tg_rng *init = tg_rng_new(init_seed);
    r->model = tg_gpt_new(&config, TG_FLOAT32, init);
    tg_rng_free(init);
    ck_assert_ptr_nonnull(r->model);
    r->params = (tg_params){0};
    ck_assert_int_eq(tg_gpt_params(r->model, &r->params), 0);
    r->opt = tg_adamw_new(&r->params, 1e-2, 0.9, 0.99, 1e-8, 0.1);
    ck_assert_ptr_nonnull(r->opt);
    r->data = tg_rng_new(99);
}

static void run_end(run *r)
{
    tg_optim_free(r->opt);
    tg_params_clear(&r->params);
    tg_gpt_free(r->model);
    tg_rng_free(r->data);
}

/* One training step on a fresh random batch; returns the loss. */
static double train_step(run *r)
{
    int64_t idx[B * T], targets[B * T];
    for (int i = 0; i < B * T; i++) {
        idx[i] = (int64_t)(tg_rng_uniform01(r->data) * config.vocab_size);
        targets[i] = (idx[i] + 1) % config.vocab_size;
    }
    tg_scope_begin();
    tg_tensor *loss = NULL;
    tg_gpt_forward(r->model, tg_from_data(TG_INT64, 2, SHAPE(B, T), idx),
                   tg_from_data(TG_INT64, 2, SHAPE(B, T), targets), &loss);
    ck_assert_ptr_nonnull(loss);
    ck_assert_int_eq(tg_backward(loss, NULL), 0);
    ck_assert_int_eq(tg_optim_step(r->opt), 0);
    tg_optim_zero_grad(r->opt);
    double value = tg_item(loss);
    tg_scope_end();
    return value;
}

static void save(run *r, const char *model_path, const char *state_path)
{
    ck_assert_int_eq(tg_safetensors_save(model_path, &r->params, 0, NULL, NULL), 0);
    tg_params state = {0};
    ck_assert_int_eq(tg_optim_state(r->opt, &state), 0);
    tg_tensor *dropout_rng = tg_rng_state_tensor(tg_gpt_rng(r->model));
    tg_tensor *data_rng = tg_rng_state_tensor(r->data);
    ck_assert_int_eq(tg_params_add(&state, "rng", "dropout", dropout_rng), 0);
    ck_assert_int_eq(tg_params_add(&state, "rng", "data", data_rng), 0);
    tg_release(dropout_rng);
    tg_release(data_rng);
    ck_assert_int_eq(tg_safetensors_save(state_path, &state, 0, NULL, NULL), 0);
    tg_params_clear(&state);
}

static void load(run *r, const char *model_path, const char *state_path)
{
    ck_assert_int_eq(tg_safetensors_load_into(model_path, &r->params), 0);
    tg_params state = {0};
    ck_assert_int_eq(tg_safetensors_load(state_path, &state), 0);
    ck_assert_int_eq(tg_optim_load_state(r->opt, &state), 0);
    ck_assert_int_eq(tg_rng_set_state_tensor(tg_gpt_rng(r->model),
                                             tg_params_find(&state, "rng.dropout")), 0);
    ck_assert_int_eq(tg_rng_set_state_tensor(r->data, tg_params_find(&state, "rng.data")), 0);
    tg_params_clear(&state);
}

START_TEST(resumed_run_gives_bit_identical_losses)
{
    double straight[STEPS], resumed[STEPS];
    run a;
    run_start(&a, 1);
    for (int s = 0; s < STEPS; s++)
        straight[s] = train_step(&a);
    run_end(&a);

    char dir[] = "/tmp/tg_ckpt_XXXXXX", model_path[64], state_path[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(model_path, sizeof model_path, "%s/model.safetensors", dir);
    snprintf(state_path, sizeof state_path, "%s/state.safetensors", dir);

    run first;
    run_start(&first, 1);
    for (int s = 0; s < STOP; s++)
        resumed[s] = train_step(&first);
    save(&first, model_path, state_path);
    run_end(&first);

    run second;
    run_start(&second, 12345); /* other weights, other data stream: all overwritten */
    load(&second, model_path, state_path);
    for (int s = STOP; s < STEPS; s++)
        resumed[s] = train_step(&second);
    run_end(&second);
    unlink(model_path);
    unlink(state_path);
    rmdir(dir);

    for (int s = 0; s < STEPS; s++)
        ck_assert_msg(memcmp(&straight[s], &resumed[s], sizeof(double)) == 0,
                      "step %d: %.17g straight, %.17g resumed", s, straight[s], resumed[s]);
    ck_assert(straight[STEPS - 1] < straight[0]); /* it did learn something */
}
END_TEST

/* A checkpoint that holds NaN or inf loads, as in PyTorch; checking what
 * was loaded refuses it by name, whatever the float dtype or layout. */
START_TEST(loaded_weights_that_are_not_finite_are_named_by_the_check)
{
    run r;
    run_start(&r, 1);
    tg_tensor *wte = tg_params_find(&r.params, "transformer.wte.weight"); /* [13, 16] */
    ((float *)tg_data(wte))[3 * 16 + 5] = INFINITY;
    ((float *)tg_data(wte))[7 * 16] = NAN;
    char dir[64], path[96];
    make_temp_dir(dir, sizeof dir, "tg_finite");
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    ck_assert_int_eq(tg_safetensors_save(path, &r.params, 0, NULL, NULL), 0);
    tg_params loaded = {0};
    ck_assert_int_eq(tg_safetensors_load(path, &loaded), 0);
    unlink(path);
    rmdir(dir);
    ck_assert_int_eq(tg_params_check_finite(&loaded), -1);
    ck_assert_error(TG_ERR_VALUE, "tg_params_check_finite: 'transformer.wte.weight'",
                    "float32 [13,16]", "holds inf at [3,5]", "2 of its 208 values");
    tg_params_clear(&loaded);
    run_end(&r);

    /* bfloat16 and a strided view are read too; integers cannot be NaN. */
    tg_params ps = {0};
    tg_tensor *ok = tg_full(TG_BFLOAT16, 2, SHAPE(2, 3), 1.5);
    tg_tensor *steps = tg_zeros(TG_INT64, 1, SHAPE(2));
    tg_tensor *m = tg_from_data(TG_FLOAT64, 2, SHAPE(2, 2), (const double[]){1, -INFINITY, 2, 3});
    tg_tensor *mt = tg_transpose(m, 0, 1);
    ck_assert_int_eq(tg_params_add(&ps, NULL, "ok", ok), 0);
    ck_assert_int_eq(tg_params_add(&ps, NULL, "steps", steps), 0);
    ck_assert_int_eq(tg_params_check_finite(&ps), 0);
    ck_assert_int_eq(tg_params_add(&ps, "exp_avg", "m", mt), 0);
    ck_assert_int_eq(tg_params_check_finite(&ps), -1);
    ck_assert_error(TG_ERR_VALUE, "'exp_avg.m' (float64 [2,2]) holds -inf at [1,0]");
    tg_tensor *half = tg_full(TG_BFLOAT16, 1, SHAPE(4), NAN);
    tg_params_truncate(&ps, 2);
    ck_assert_int_eq(tg_params_add(&ps, NULL, "half", half), 0);
    ck_assert_int_eq(tg_params_check_finite(&ps), -1);
    ck_assert_error(TG_ERR_VALUE, "'half' (bfloat16 [4]) holds nan at [0]");
    ck_assert_int_eq(tg_params_check_finite(NULL), -1);
    ck_assert_error(TG_ERR_NULL, "tg_params_check_finite");
    tg_release(ok);
    tg_release(steps);
    tg_release(m);
    tg_release(mt);
    tg_release(half);
    tg_params_clear(&ps);
}
END_TEST

START_TEST(rng_state_tensor_round_trips_and_rejects_bad_input)
{
    tg_rng *a = tg_rng_new(5), *b = tg_rng_new(6);
    tg_rng_next(a);
    tg_tensor *state = tg_rng_state_tensor(a);
    ck_assert_shape(state, 4);
    ck_assert_int_eq(tg_rng_set_state_tensor(b, state), 0);
    for (int i = 0; i < 5; i++)
        ck_assert(tg_rng_next(a) == tg_rng_next(b));
    tg_tensor *f = tg_zeros(TG_FLOAT32, 1, SHAPE(4));
    ck_assert_int_eq(tg_rng_set_state_tensor(b, f), -1);
    ck_assert_error(TG_ERR_DTYPE, "tg_rng_set_state_tensor", "float32");
    tg_tensor *three = tg_zeros(TG_INT64, 1, SHAPE(3));
    ck_assert_int_eq(tg_rng_set_state_tensor(b, three), -1);
    ck_assert_error(TG_ERR_SHAPE, "tg_rng_set_state_tensor", "[3]");
    tg_tensor *zero = tg_zeros(TG_INT64, 1, SHAPE(4));
    ck_assert_int_eq(tg_rng_set_state_tensor(b, zero), -1);
    ck_assert_error(TG_ERR_VALUE, "tg_rng_set_state_tensor", "all-zero");
    ck_assert_int_eq(tg_rng_set_state_tensor(b, NULL), -1);
    ck_assert_error(TG_ERR_NULL, "tg_rng_set_state_tensor");
    tg_release(state);
    tg_release(f);
    tg_release(three);
    tg_release(zero);
    tg_rng_free(a);
    tg_rng_free(b);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("checkpoint");
    TCase *tc = tcase_checked("resume");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, resumed_run_gives_bit_identical_losses);
    tcase_add_test(tc, rng_state_tensor_round_trips_and_rejects_bad_input);
    tcase_add_test(tc, loaded_weights_that_are_not_finite_are_named_by_the_check);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
