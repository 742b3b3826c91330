/* Operands kept in bfloat16 for backward under the bf16 matmul precision
 * (autograd/saved_bf16.c): which inputs tg_affine and tg_matmul keep so,
 * the bytes it frees, and training runs whose gradients and parameters are
 * the same bits as with every input kept in float32 (the saving switched
 * off), for an MLP of affine maps and products, a GPT and a Llama. */
#include "testutil.h"

#include "graph.h" /* to read what a node kept */
#include "saved_bf16.h"

#include <math.h>
#include <string.h>

#define BEGIN tg_scope_begin()
#define END                                                                   \
    do {                                                                      \
        tg_set_matmul_precision(TG_PRECISION_FLOAT32);                        \
        tg__set_bf16_keeping(TG__KEEP_BF16_ROUNDED);                          \
        ck_assert_int_eq(tg_scope_end(), 0);                                  \
    } while (0)

static tg_tensor *param(tg_rng *rng, int ndim, const int64_t *shape)
{
    tg_tensor *t = tg_mul_scalar(tg_randn(rng, TG_FLOAT32, ndim, shape), 0.3);
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(tg_set_requires_grad(t, true), 0);
    return t;
}

static const tg_node *node_of(const tg_tensor *t)
{
    ck_assert_ptr_nonnull(t);
    ck_assert_ptr_nonnull(t->node);
    return (const tg_node *)t->node;
}

/* Whether the node kept input i as a bfloat16 copy in saved[slot]. */
static bool kept_bf16(const tg_tensor *out, int i, int slot)
{
    const tg_node *n = node_of(out);
    bool bf = n->saved[slot] && n->saved[slot]->dtype == TG_BFLOAT16;
    ck_assert_msg(bf == !n->inputs[i]->storage, "input %d: husk and copy go together", i);
    return bf;
}

/* ---- which inputs ------------------------------------------------------------------ */

START_TEST(affine_keeps_an_input_it_alone_reads_as_bf16_under_bf16_only)
{
    BEGIN;
    tg_rng *rng = tg_rng_new(1);
    tg_tensor *x = param(rng, 2, SHAPE(6, 8)), *w = param(rng, 2, SHAPE(5, 8));
    for (int prec = 0; prec < 2; prec++)
        for (int on = 0; on < 2; on++) {
            tg_set_matmul_precision(prec ? TG_PRECISION_BF16 : TG_PRECISION_FLOAT32);
            tg__set_bf16_keeping(on ? TG__KEEP_BF16_EXACT : TG__KEEP_FLOAT32);
            tg_tensor *h = tg_relu(tg_affine(x, w, NULL)); /* relu keeps its input, not h */
            tg_tensor *y = tg_affine(h, tg_transpose(w, 0, 1), NULL);
            ck_assert_msg(kept_bf16(y, 0, 0) == (prec && on), "precision %d, saving %d", prec,
                          on);
            ck_assert_msg(!kept_bf16(tg_affine(x, w, NULL), 0, 0), "a leaf stays as it is");
        }
    tg_rng_free(rng);
    END;
}
END_TEST

START_TEST(affine_keeps_float32_an_input_whose_storage_something_else_holds)
{
    BEGIN;
    tg_set_matmul_precision(TG_PRECISION_BF16);
    tg_rng *rng = tg_rng_new(2);
    tg_tensor *x = param(rng, 2, SHAPE(6, 8)), *w = param(rng, 2, SHAPE(8, 8));
    /* tanh keeps its output for its own gradient: float32 it must stay */
    tg_tensor *t = tg_tanh(tg_affine(x, w, NULL));
    ck_assert(!kept_bf16(tg_affine(t, w, NULL), 0, 0));
    /* a view shares its base's storage */
    tg_tensor *v = tg_reshape(tg_relu(x), 2, SHAPE(6, 8));
    ck_assert(!kept_bf16(tg_affine(v, w, NULL), 0, 0));
    /* a transposed operand is not contiguous */
    tg_tensor *r = tg_transpose(tg_relu(tg_affine(x, w, NULL)), 0, 1);
    ck_assert(!kept_bf16(tg_matmul(r, x), 0, 0));
    /* float64 products take no bf16 operands */
    tg_tensor *x64 = tg_relu(tg_to_dtype(x, TG_FLOAT64));
    ck_assert(!kept_bf16(tg_affine(x64, tg_to_dtype(w, TG_FLOAT64), NULL), 0, 0));
    tg_rng_free(rng);
    END;
}
END_TEST

START_TEST(ops_reading_one_input_share_one_copy_until_it_is_written)
{
    BEGIN;
    tg_set_matmul_precision(TG_PRECISION_BF16);
    tg_rng *rng = tg_rng_new(3);
    tg_tensor *x = param(rng, 2, SHAPE(6, 8)), *w = param(rng, 2, SHAPE(8, 8));
    tg_tensor *h = tg_relu(x);
    tg_tensor *q = tg_affine(h, w, NULL), *k = tg_affine(h, w, NULL);
    ck_assert(kept_bf16(q, 0, 0) && kept_bf16(k, 0, 0));
    ck_assert_ptr_eq(node_of(q)->saved[0], node_of(k)->saved[0]);
    float *d = tg_data(h); /* a write: the copy is stale, the next op makes its own */
    ck_assert_ptr_nonnull(d);
    d[0] += 1;
    tg_tensor *v = tg_affine(h, w, NULL);
    ck_assert(kept_bf16(v, 0, 0));
    ck_assert_ptr_ne(node_of(v)->saved[0], node_of(q)->saved[0]);
    /* q's copy holds the values q's product read: its backward has them */
    ck_assert_int_eq(tg_backward(tg_sum(tg_add(q, v), NULL, 0, false), NULL), 0);
    tg_rng_free(rng);
    END;
}
END_TEST

START_TEST(matmul_keeps_each_operand_it_alone_reads_as_bf16)
{
    BEGIN;
    tg_set_matmul_precision(TG_PRECISION_BF16);
    tg_rng *rng = tg_rng_new(4);
    tg_tensor *x = param(rng, 3, SHAPE(2, 6, 8)), *w = param(rng, 2, SHAPE(8, 8));
    tg_tensor *a = tg_relu(tg_matmul(x, w)), *b = tg_relu(tg_matmul(x, w));
    tg_tensor *c = tg_matmul(a, tg_transpose(b, 1, 2)); /* b's transpose is a view */
    ck_assert(kept_bf16(c, 0, 0));
    ck_assert(!kept_bf16(c, 1, 1));
    tg_tensor *x2 = param(rng, 3, SHAPE(2, 8, 8));
    tg_tensor *d = tg_matmul(a, tg_relu(tg_matmul(x2, w))); /* [2, 6, 8] @ [2, 8, 8] */
    ck_assert(kept_bf16(d, 0, 0) && kept_bf16(d, 1, 1));
    ck_assert_ptr_eq(node_of(d)->saved[0], node_of(c)->saved[0]);
    tg_rng_free(rng);
    END;
}
END_TEST

/* ---- what it frees ------------------------------------------------------------------- */

static size_t live_bytes;

static void *counting_alloc(size_t n, void *user)
{
    (void)user;
    size_t *p = malloc(n + sizeof(max_align_t));
    if (!p)
        return NULL;
    *p = n;
    live_bytes += n;
    return (char *)p + sizeof(max_align_t);
}

static void counting_free(void *q, void *user)
{
    (void)user;
    size_t *p = (size_t *)((char *)q - sizeof(max_align_t));
    live_bytes -= *p;
    free(p);
}

/* The storage bytes a two-layer MLP's graph holds after its forward, its
 * own scope closed, and the gradient of x (float32 bits as uint32). */
static size_t mlp_graph_bytes(bool saving, uint32_t *dx, int64_t n)
{
    tg_rng *rng = tg_rng_new(5);
    tg_tensor *x = param(rng, 2, SHAPE(64, 32)), *w1 = param(rng, 2, SHAPE(48, 32));
    tg_tensor *w2 = param(rng, 2, SHAPE(32, 48));
    tg_set_matmul_precision(TG_PRECISION_BF16);
    tg__set_bf16_keeping(saving ? TG__KEEP_BF16_EXACT : TG__KEEP_FLOAT32);
    tg_set_allocator(counting_alloc, counting_free, NULL);
    size_t before = live_bytes;
    tg_scope_begin();
    tg_tensor *loss = tg_retain(tg_mean(tg_affine(tg_relu(tg_affine(x, w1, NULL)), w2, NULL),
                                        NULL, 0, false));
    tg_scope_end();
    size_t held = live_bytes - before;
    ck_assert_int_eq(tg_backward(loss, NULL), 0);
    tg_set_allocator(NULL, NULL, NULL);
    tg_tensor *g = tg_grad(x);
    ck_assert_int_eq(tg_numel(g), n);
    memcpy(dx, tg_data(g), (size_t)n * sizeof *dx);
    tg_release(loss);
    tg_rng_free(rng);
    return held;
}

START_TEST(the_bf16_copy_frees_half_the_input_it_replaces)
{
    BEGIN;
    uint32_t with[64 * 32], without[64 * 32];
    size_t on = mlp_graph_bytes(true, with, 64 * 32);
    size_t off = mlp_graph_bytes(false, without, 64 * 32);
    /* relu's output [64, 48]: 4 bytes an element in float32, 2 in bf16 */
    ck_assert_uint_eq(off - on, 64 * 48 * 2);
    ck_assert_mem_eq(with, without, sizeof with);
    END;
}
END_TEST

/* ---- training runs, bit for bit ------------------------------------------------------ */

typedef struct {
    int64_t n;
    uint32_t *bits; /* every gradient, then every parameter, as stored */
} snapshot;

static void snapshot_free(snapshot *s) { free(s->bits); }

/* Appends the float32 values of t to s. */
static void take(snapshot *s, const tg_tensor *t)
{
    int64_t k = tg_numel(t);
    s->bits = realloc(s->bits, (size_t)(s->n + k) * sizeof *s->bits);
    ck_assert_ptr_nonnull(s->bits);
    tg_tensor *c = tg_contiguous(t);
    memcpy(s->bits + s->n, tg__ptr(c), (size_t)k * sizeof *s->bits);
    s->n += k;
}

/* Set while a run with the saving on should find the inputs kept in bf16. */
static bool expect_kept;

typedef tg_tensor *(*loss_fn)(void *model, const tg_tensor *idx, const tg_tensor *tgt);

/* Three AdamW steps under bf16 of the model behind ps, the saving on or
 * off: the last step's gradients and the parameters after it. */
static snapshot train(void *model, loss_fn loss_of, tg_params *ps, int64_t vocab, bool saving)
{
    enum { B = 2, T = 16 };
    int64_t ids[B * T], tgt[B * T];
    for (int i = 0; i < B * T; i++) {
        ids[i] = (i * 7 + 3) % vocab;
        tgt[i] = (i * 5 + 1) % vocab;
    }
    tg_tensor *idx = tg_from_data(TG_INT64, 2, SHAPE(B, T), ids);
    tg_tensor *targets = tg_from_data(TG_INT64, 2, SHAPE(B, T), tgt);
    tg_optim *opt = tg_adamw_new(ps, 1e-2, 0.9, 0.999, 1e-8, 0.1);
    ck_assert_ptr_nonnull(opt);
    snapshot s = {0};
    tg_set_matmul_precision(TG_PRECISION_BF16);
    tg__set_bf16_keeping(saving ? TG__KEEP_BF16_EXACT : TG__KEEP_FLOAT32);
    for (int step = 0; step < 3; step++) {
        tg_scope_begin();
        tg_tensor *loss = loss_of(model, idx, targets);
        ck_assert_ptr_nonnull(loss);
        ck_assert_int_eq(tg_backward(loss, NULL), 0);
        for (int k = 0; step == 2 && k < ps->count; k++)
            take(&s, tg_grad(ps->tensors[k]));
        ck_assert_int_eq(tg_optim_step(opt), 0);
        tg_optim_zero_grad(opt);
        tg_scope_end();
    }
    for (int k = 0; k < ps->count; k++)
        take(&s, ps->tensors[k]);
    tg_optim_free(opt);
    return s;
}

static void assert_same_bits(const char *model, const snapshot *a, const snapshot *b)
{
    ck_assert_int_eq(a->n, b->n);
    int64_t differ = 0;
    for (int64_t i = 0; i < a->n; i++)
        differ += a->bits[i] != b->bits[i];
    ck_assert_msg(differ == 0, "%s: %lld of %lld values differ", model, (long long)differ,
                  (long long)a->n);
}

/* The tied head's input, the final layer norm's output, is its one reader;
 * every other activation of a GPT or a Llama is read by a norm, GELU,
 * SwiGLU or attention in float32 as well (docs/mixed-precision.md says which). */
static tg_tensor *gpt_loss(void *m, const tg_tensor *idx, const tg_tensor *tgt)
{
    tg_tensor *loss = NULL;
    tg_tensor *logits = tg_gpt_forward(m, idx, tgt, &loss);
    if (expect_kept)
        ck_assert(kept_bf16(logits, 0, 0));
    return loss;
}

static tg_tensor *llama_loss(void *m, const tg_tensor *idx, const tg_tensor *tgt)
{
    tg_tensor *loss = NULL;
    tg_llama_forward(m, idx, tgt, &loss);
    return loss;
}

START_TEST(gpt_training_under_bf16_is_the_same_bits_with_bf16_saving)
{
    BEGIN;
    tg_gpt_config c = {.vocab_size = 50, .block_size = 16, .n_layer = 2, .n_head = 4,
                       .n_embd = 64};
    snapshot s[2];
    for (int on = 0; on < 2; on++) {
        tg_rng *rng = tg_rng_new(7);
        tg_gpt *m = tg_gpt_new(&c, TG_FLOAT32, rng);
        tg_params ps = {0};
        ck_assert_int_eq(tg_gpt_params(m, &ps), 0);
        expect_kept = on;
        s[on] = train(m, gpt_loss, &ps, c.vocab_size, on);
        expect_kept = false;
        tg_params_clear(&ps);
        tg_gpt_free(m);
        tg_rng_free(rng);
    }
    assert_same_bits("gpt", &s[0], &s[1]);
    snapshot_free(&s[0]);
    snapshot_free(&s[1]);
    END;
}
END_TEST

START_TEST(llama_training_under_bf16_is_the_same_bits_with_bf16_saving)
{
    BEGIN;
    tg_llama_config c = {.vocab_size = 50, .block_size = 16, .n_layer = 2, .n_head = 4,
                         .n_kv_head = 2, .n_embd = 64, .hidden_size = 160,
                         .rope_theta = 10000, .norm_eps = 1e-5, .tie_embeddings = true,
                         .rope_pairing = TG_ROPE_HALF};
    snapshot s[2];
    for (int on = 0; on < 2; on++) {
        tg_rng *rng = tg_rng_new(8);
        tg_llama *m = tg_llama_new(&c, TG_FLOAT32, rng);
        tg_params ps = {0};
        ck_assert_int_eq(tg_llama_params(m, &ps), 0);
        s[on] = train(m, llama_loss, &ps, c.vocab_size, on);
        tg_params_clear(&ps);
        tg_llama_free(m);
        tg_rng_free(rng);
    }
    assert_same_bits("llama", &s[0], &s[1]);
    snapshot_free(&s[0]);
    snapshot_free(&s[1]);
    END;
}
END_TEST

/* An embedding, then affine maps and products whose inputs are read by
 * that op alone (relu keeps its own input, not its output): with the saving
 * on (expect_kept), each of them is kept in bf16. */
typedef struct {
    tg_tensor *emb, *w1, *b1, *w2, *w3, *head;
} mlp;


static tg_tensor *mlp_loss(void *p, const tg_tensor *idx, const tg_tensor *tgt)
{
    mlp *m = p;
    tg_tensor *h = tg_relu(tg_affine(tg_embedding(m->emb, idx), m->w1, m->b1)); /* [B, T, 48] */
    tg_tensor *a = tg_affine(h, m->w2, NULL);                                  /* [B, T, 32] */
    tg_tensor *r = tg_relu(a);
    tg_tensor *ur = tg_matmul(r, m->w3);                           /* [B, T, 32] */
    tg_tensor *qr = tg_matmul(tg_transpose(r, 1, 2), r);          /* [B, 32, 32] */
    tg_tensor *y = tg_matmul(tg_relu(ur), tg_relu(qr));           /* [B, T, 32] */
    tg_tensor *logits = tg_affine(tg_relu(y), m->head, NULL);     /* [B, T, vocab] */
    if (expect_kept)
        ck_assert(kept_bf16(a, 0, 0) && kept_bf16(ur, 0, 0) && kept_bf16(qr, 1, 1) &&
                  kept_bf16(y, 0, 0) && kept_bf16(y, 1, 1) && kept_bf16(logits, 0, 0));
    int64_t bt = tg_numel(idx), v = tg_shape(m->head)[0];
    return tg_cross_entropy(tg_reshape(logits, 2, SHAPE(bt, v)), tg_reshape(tgt, 1, SHAPE(bt)),
                            -1);
}

START_TEST(mlp_training_under_bf16_is_the_same_bits_with_bf16_saving)
{
    BEGIN;
    snapshot s[2];
    for (int on = 0; on < 2; on++) {
        tg_rng *rng = tg_rng_new(9);
        mlp m = {param(rng, 2, SHAPE(40, 24)), param(rng, 2, SHAPE(48, 24)),
                 param(rng, 1, SHAPE(48)),     param(rng, 2, SHAPE(32, 48)),
                 param(rng, 2, SHAPE(32, 32)), param(rng, 2, SHAPE(40, 32))};
        tg_params ps = {0};
        tg_tensor **all = &m.emb;
        for (int k = 0; k < 6; k++)
            ck_assert_int_eq(tg_params_add(&ps, "mlp", (const char *[]){"emb", "w1", "b1", "w2", "w3", "head"}[k], all[k]), 0);
        expect_kept = on;
        s[on] = train(&m, mlp_loss, &ps, 40, on);
        expect_kept = false;
        tg_params_clear(&ps);
        tg_rng_free(rng);
    }
    assert_same_bits("mlp", &s[0], &s[1]);
    snapshot_free(&s[0]);
    snapshot_free(&s[1]);
    END;
}
END_TEST

/* ---- inputs kept rounded ---------------------------------------------------------- */

START_TEST(gelu_swiglu_and_attention_keep_their_inputs_rounded_when_rounding_is_on)
{
    BEGIN;
    tg_rng *rng = tg_rng_new(10);
    tg_tensor *x = param(rng, 3, SHAPE(2, 6, 8)), *w = param(rng, 2, SHAPE(16, 8));
    tg_tensor *w2 = param(rng, 2, SHAPE(8, 16)), *wqkv = param(rng, 2, SHAPE(24, 8));
    tg_tensor *wo = param(rng, 2, SHAPE(8, 8));
    tg_tensor *t = param(rng, 4, SHAPE(2, 2, 6, 4));
    for (int run = 0; run < 3; run++) {
        /* float32 precision, bf16 keeping exact values only, bf16 rounding */
        bool rounded = run == 2;
        tg_set_matmul_precision(run ? TG_PRECISION_BF16 : TG_PRECISION_FLOAT32);
        tg__set_bf16_keeping(run == 1 ? TG__KEEP_BF16_EXACT : TG__KEEP_BF16_ROUNDED);
        tg_tensor *y = tg_gelu_affine(tg_affine(x, w, NULL), TG_GELU_TANH, w2, NULL);
        ck_assert_msg(kept_bf16(y, 0, 0) == rounded, "gelu_affine, run %d", run);
        tg_tensor *z = tg_swiglu_affine(tg_affine(x, w, NULL), tg_affine(x, w, NULL), w2, NULL);
        ck_assert_msg(kept_bf16(z, 0, 0) == rounded && kept_bf16(z, 1, 1) == rounded,
                      "swiglu_affine, run %d", run);
        tg_tensor *o = tg_attention_qkvpacked(tg_affine(x, wqkv, NULL), 2, true, 0, 0, NULL);
        ck_assert_msg(kept_bf16(o, 0, 4) == rounded, "qkvpacked, run %d", run);
        /* its output rounded for the softmax's gradient: the output
         * projection's bf16 product shares that copy, exact for it */
        const tg_tensor *o_kept = node_of(o)->saved[0];
        ck_assert_msg((o_kept->dtype == TG_BFLOAT16) == rounded, "qkvpacked output, run %d", run);
        tg_tensor *proj = tg_affine(o, wo, NULL);
        ck_assert_msg(kept_bf16(proj, 0, 0) == rounded, "output projection, run %d", run);
        if (rounded)
            ck_assert_ptr_eq(node_of(proj)->saved[0], o_kept);
        /* q and k made by ops, v a leaf: only the first two go */
        tg_tensor *a = tg_attention(tg_mul_scalar(t, 1.0), tg_mul_scalar(t, 0.5), t, NULL, true,
                                    0, 0, NULL);
        ck_assert_msg(kept_bf16(a, 0, 4) == rounded && kept_bf16(a, 1, 5) == rounded &&
                          !kept_bf16(a, 2, 6),
                      "attention, run %d", run);
    }
    tg_rng_free(rng);
    END;
}
END_TEST

/* One forward and backward of a GPT under bf16 at a keeping: the storage
 * bytes its graph holds after the forward (its scope closed), and every
 * gradient. */
static size_t gpt_step(tg__bf16_keeping keeping, snapshot *grads)
{
    enum { B = 2, T = 16 };
    tg_gpt_config c = {.vocab_size = 50, .block_size = T, .n_layer = 2, .n_head = 4,
                       .n_embd = 64};
    int64_t ids[B * T], tgt[B * T];
    for (int i = 0; i < B * T; i++) {
        ids[i] = (i * 7 + 3) % c.vocab_size;
        tgt[i] = (i * 5 + 1) % c.vocab_size;
    }
    tg_rng *rng = tg_rng_new(11);
    tg_gpt *m = tg_gpt_new(&c, TG_FLOAT32, rng);
    tg_params ps = {0};
    ck_assert_int_eq(tg_gpt_params(m, &ps), 0);
    tg_tensor *idx = tg_from_data(TG_INT64, 2, SHAPE(B, T), ids);
    tg_tensor *targets = tg_from_data(TG_INT64, 2, SHAPE(B, T), tgt);
    tg_set_matmul_precision(TG_PRECISION_BF16);
    tg__set_bf16_keeping(keeping);
    tg_set_allocator(counting_alloc, counting_free, NULL);
    size_t before = live_bytes;
    tg_scope_begin();
    tg_tensor *loss = NULL;
    tg_gpt_forward(m, idx, targets, &loss);
    tg_retain(loss);
    tg_scope_end();
    size_t held = live_bytes - before;
    tg_set_allocator(NULL, NULL, NULL);
    ck_assert_int_eq(tg_backward(loss, NULL), 0);
    *grads = (snapshot){0};
    for (int k = 0; k < ps.count; k++)
        take(grads, tg_grad(ps.tensors[k]));
    tg_release(loss);
    tg_params_clear(&ps);
    tg_gpt_free(m);
    tg_rng_free(rng);
    return held;
}

START_TEST(rounding_frees_half_of_gelu_and_attention_and_moves_gradients_less_than_bf16)
{
    BEGIN;
    snapshot exact, rounded;
    size_t held_exact = gpt_step(TG__KEEP_BF16_EXACT, &exact);
    size_t held_rounded = gpt_step(TG__KEEP_BF16_ROUNDED, &rounded);
    /* per block GELU's input [2, 16, 256], qkv [2, 16, 192] and the
     * attention's output [2, 16, 64]: 2 bytes an element fewer each */
    ck_assert_uint_eq(held_exact - held_rounded, 2 * (2 * 16 * (256 + 192 + 64)) * 2);
    /* the gradients move, but by less than a bf16 product's rounding moves
     * them (test_precision: within 2% of float32's) */
    ck_assert_int_eq(exact.n, rounded.n);
    double num = 0, den = 0;
    int64_t differ = 0;
    for (int64_t i = 0; i < exact.n; i++) {
        float e, r;
        memcpy(&e, &exact.bits[i], sizeof e);
        memcpy(&r, &rounded.bits[i], sizeof r);
        num += ((double)r - e) * ((double)r - e);
        den += (double)e * e;
        differ += exact.bits[i] != rounded.bits[i];
    }
    ck_assert_msg(differ > 0, "rounded inputs left every gradient as it was");
    ck_assert_msg(sqrt(num / den) < 5e-3, "relative L2 error %g", sqrt(num / den));
    snapshot_free(&exact);
    snapshot_free(&rounded);
    END;
}
END_TEST

/* The gradients of x and the weights through gelu_affine (swiglu false)
 * or swiglu_affine of bf16-exact values of x (rows x in), under bf16 at a
 * keeping, as doubles in one array. */
static double *fused_grads(bool swiglu, tg__bf16_keeping keeping, int64_t rows, int64_t in,
                           int64_t out, int64_t *n)
{
    tg_rng *rng = tg_rng_new(12);
    tg_tensor *x = param(rng, 2, SHAPE(rows, in)), *w = param(rng, 2, SHAPE(out, in));
    tg_tensor *b = param(rng, 1, SHAPE(out));
    tg_set_matmul_precision(TG_PRECISION_BF16);
    tg__set_bf16_keeping(keeping);
    tg_scope_begin();
    /* values a bf16 copy holds exactly: rounding them changes nothing */
    tg_tensor *h = tg_to_dtype(tg_to_dtype(x, TG_BFLOAT16), TG_FLOAT32);
    tg_tensor *y = swiglu ? tg_swiglu_affine(h, tg_mul_scalar(h, 0.5), w, b)
                          : tg_gelu_affine(h, TG_GELU_TANH, w, b);
    ck_assert(kept_bf16(y, 0, 0) == (keeping == TG__KEEP_BF16_ROUNDED));
    ck_assert_int_eq(tg_backward(tg_sum(tg_mul(y, y), NULL, 0, false), NULL), 0);
    tg_scope_end();
    tg_tensor *gs[] = {tg_grad(x), tg_grad(w), tg_grad(b)};
    *n = 0;
    double *v = malloc((size_t)(rows * in + out * in + out) * sizeof *v);
    ck_assert_ptr_nonnull(v);
    for (int k = 0; k < 3; k++) {
        tg_tensor *g64 = tg_to_dtype(gs[k], TG_FLOAT64);
        memcpy(v + *n, tg_data(g64), (size_t)tg_numel(g64) * sizeof *v);
        *n += tg_numel(g64);
    }
    tg_rng_free(rng);
    return v;
}

/* Kept inputs go through the backward a block of rows at a time (about 4
 * MiB of float32 each); on inputs the copy holds exactly, that gives the
 * gradients of the whole-tensor backward up to the order of the sums. */
START_TEST(the_blocked_backward_of_kept_inputs_matches_the_whole_one)
{
    BEGIN;
    for (int swiglu = 0; swiglu < 2; swiglu++) {
        int64_t rows = 600, in = 2048, out = 16, n_whole, n_blocks; /* two blocks */
        double *whole = fused_grads(swiglu, TG__KEEP_BF16_EXACT, rows, in, out, &n_whole);
        double *blocks = fused_grads(swiglu, TG__KEEP_BF16_ROUNDED, rows, in, out, &n_blocks);
        ck_assert_int_eq(n_whole, n_blocks);
        double num = 0, den = 0;
        for (int64_t i = 0; i < n_whole; i++) {
            num += (blocks[i] - whole[i]) * (blocks[i] - whole[i]);
            den += whole[i] * whole[i];
        }
        ck_assert_msg(den > 0 && sqrt(num / den) < 1e-5, "%s: relative L2 error %g",
                      swiglu ? "swiglu_affine" : "gelu_affine", sqrt(num / den));
        free(whole);
        free(blocks);
    }
    END;
}
END_TEST

static Suite *saved_bf16_suite(void)
{
    Suite *s = suite_create("saved_bf16");
    TCase *tc = tcase_checked("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, affine_keeps_an_input_it_alone_reads_as_bf16_under_bf16_only);
    tcase_add_test(tc, affine_keeps_float32_an_input_whose_storage_something_else_holds);
    tcase_add_test(tc, ops_reading_one_input_share_one_copy_until_it_is_written);
    tcase_add_test(tc, matmul_keeps_each_operand_it_alone_reads_as_bf16);
    tcase_add_test(tc, the_bf16_copy_frees_half_the_input_it_replaces);
    tcase_add_test(tc, gpt_training_under_bf16_is_the_same_bits_with_bf16_saving);
    tcase_add_test(tc, llama_training_under_bf16_is_the_same_bits_with_bf16_saving);
    tcase_add_test(tc, mlp_training_under_bf16_is_the_same_bits_with_bf16_saving);
    tcase_add_test(tc, gelu_swiglu_and_attention_keep_their_inputs_rounded_when_rounding_is_on);
    tcase_add_test(tc, the_blocked_backward_of_kept_inputs_matches_the_whole_one);
    tcase_add_test(tc, rounding_frees_half_of_gelu_and_attention_and_moves_gradients_less_than_bf16);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return run_suite(saved_bf16_suite()); }
