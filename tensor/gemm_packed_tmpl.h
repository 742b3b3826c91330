/* The packed, blocked GEMM driver around a SIMD micro-kernel (gemm_x86.h):
 * packing, cache blocking and the split over threads. gemm.c includes it
 * once per type after defining GEMM_T, GEMM_FN(name) and GEMM_UKR (the
 * kernel descriptor type); gemm_bf16.c once more with GEMM_PACK_BF16
 * defined, where the kernel's own packing (tg__ukr_bf16) makes every panel
 * of op(A) and op(B). No include guard on purpose. */

#ifndef GEMM_PACK_BF16 /* the bf16 kernels pack for themselves */
/* asum[r] += the elements of row r of the panel pa (kc deep, mr wide, h
 * rows used), one by one in double in the order of p: piece after piece,
 * the sum of the whole row as a loop over it would make it. */
static void GEMM_FN(sum_panel)(int mr, int h, int64_t kc, const GEMM_T *pa, double *asum)
{
    double s[32] = {0}; /* mr <= 32 */
    for (int r = 0; r < h; r++)
        s[r] = asum[r];
    for (int64_t p = 0; p < kc; p++)
        for (int r = 0; r < mr; r++)
            s[r] += (double)pa[p * mr + r];
    for (int r = 0; r < h; r++)
        asum[r] = s[r];
}

/* One mr-row panel of op(A), the portable way: rows [i0, i0+h) x cols
 * [p0, p0+kc), stored [kc][mr]; rows past h are zero. */
static void GEMM_FN(pack_a_panel)(int mr, int h, bool trans, const GEMM_T *a, int64_t lda,
                                  int64_t i0, int64_t p0, int64_t kc, GEMM_T *restrict pa)
{
    for (int64_t p = 0; p < kc; p++) {
        GEMM_T *dst = pa + p * mr;
        if (trans) { /* op(A)(i, p) = a[p * lda + i]: contiguous in i */
            const GEMM_T *src = a + (p0 + p) * lda + i0;
            for (int r = 0; r < h; r++)
                dst[r] = src[r];
        } else {
            const GEMM_T *src = a + i0 * lda + p0 + p;
            for (int r = 0; r < h; r++)
                dst[r] = src[r * lda];
        }
        for (int r = h; r < mr; r++)
            dst[r] = 0;
    }
}

#endif

/* A map applied to every packed element of op(A) (it must send 0 to 0, the
 * padding), or NULL. */
typedef void (*GEMM_FN(amap_fn))(GEMM_T *x, int64_t n);

/* rows [i0, i0+rows) x cols [p0, p0+kc) of op(A) as consecutive mr-row
 * panels, each [kc][mr]; the last panel's missing rows are zero. amap (or
 * NULL) then maps each panel in place; with asum, asum[i0 + i] gathers the
 * sum of each row's elements packed. */
static void GEMM_FN(pack_a_blk)(const GEMM_UKR *u, bool trans, const GEMM_T *a, int64_t lda,
                                int64_t i0, int64_t rows, int64_t p0, int64_t kc,
                                GEMM_T *restrict pa, GEMM_FN(amap_fn) amap, double *asum)
{
    const int mr = u->mr;
#ifdef GEMM_PACK_BF16
    (void)asum; /* no sums from the bf16 products */
    for (int64_t i = 0; i < rows; i += mr, pa += mr * kc)
        u->pack_a(trans, a, lda, i0 + i, rows - i < mr ? (int)(rows - i) : mr, p0, kc, mr, amap,
                pa);
#else
    /* A transposed: all the panels at once, each row of A^T read once */
    bool at_once = trans && u->pack_cols;
    if (at_once)
        u->pack_cols(a + p0 * lda + i0, lda, rows, kc, mr, (int64_t)mr * kc, pa);
    for (int64_t i = 0; i < rows; i += mr, pa += mr * kc) {
        int h = rows - i < mr ? (int)(rows - i) : mr;
        if (!trans && u->pack_rows)
            u->pack_rows(a + (i0 + i) * lda + p0, lda, h, kc, mr, pa);
        else if (!at_once)
            GEMM_FN(pack_a_panel)(mr, h, trans, a, lda, i0 + i, p0, kc, pa);
        if (amap)
            amap(pa, mr * kc);
        if (asum)
            GEMM_FN(sum_panel)(mr, h, kc, pa, asum + i0 + i);
    }
#endif
}
#ifndef GEMM_PACK_BF16
/* One nr-column panel of op(B): rows [p0, p0+kc) x cols [j0, j0+w), stored
 * [kc][nr]; columns past w are zero. */
static void GEMM_FN(pack_b_panel)(const GEMM_UKR *u, bool trans, const GEMM_T *b, int64_t ldb,
                                  int64_t j0, int w, int64_t p0, int64_t kc,
                                  GEMM_T *restrict pb)
{
    const int nr = u->nr;
    if (trans && u->pack_rows) {
        u->pack_rows(b + j0 * ldb + p0, ldb, w, kc, nr, pb);
        return;
    }
    for (int64_t p = 0; p < kc; p++, pb += nr) {
        if (!trans) { /* op(B)(p, j) = b[p * ldb + j]: contiguous in j */
            memcpy(pb, b + (p0 + p) * ldb + j0, (size_t)w * sizeof *pb);
        } else {
            const GEMM_T *src = b + j0 * ldb + p0 + p;
            for (int j = 0; j < w; j++)
                pb[j] = src[j * ldb];
        }
        for (int j = w; j < nr; j++)
            pb[j] = 0;
    }
}

#endif

/* Rows of op(B) per part when a slice is packed a band of rows at a time. */
#define B_BAND 32

/* Parts per kc-deep piece in packing a ks-deep slice of op(B) whose
 * columns make q_all panels: bands of B_BAND rows across every panel where
 * B is not transposed and the SIMD packing reads its rows whole, else the
 * panels one by one. */
static int64_t GEMM_FN(b_parts)(const GEMM_UKR *u, bool trans_b, int64_t ks, int64_t q_all)
{
    int64_t kc = ks < u->kc ? ks : u->kc;
#ifdef GEMM_PACK_BF16
    return !trans_b && u->pack_b_rows ? (kc + B_BAND - 1) / B_BAND : q_all;
#else
    return !trans_b && u->pack_cols ? (kc + B_BAND - 1) / B_BAND : q_all;
#endif
}

/* Part t (of parts per piece, piece after piece) of packing the slice of
 * op(B) of rows [ps, ps+ks) x cols [js, js+ns) into pb: kc-deep pieces of
 * ns_pad columns, each as nr-column panels [kc][nr]. */
static void GEMM_FN(pack_b_part)(const GEMM_UKR *u, bool trans_b, const GEMM_T *b, int64_t ldb,
                                 int64_t js, int64_t ns, int64_t ns_pad, int64_t ps, int64_t ks,
                                 int64_t parts, int64_t t, GEMM_T *pb)
{
    const int nr = u->nr;
    int64_t pc = t / parts * u->kc, part = t % parts;
    int64_t kc = ks - pc < u->kc ? ks - pc : u->kc;
    GEMM_T *piece = pb + pc * ns_pad;
#ifdef GEMM_PACK_BF16 /* a band of pair rows, or a panel as rows of op(B)^T */
    if (!trans_b && u->pack_b_rows) {
        int64_t r0 = part * B_BAND, kpad = (kc + u->k_align - 1) / u->k_align * u->k_align;
        if (r0 < kc)
            u->pack_b_rows(b + (ps + pc + r0) * ldb + js, ldb, ns,
                           kc - r0 < B_BAND ? kc - r0 : B_BAND, r0, kc, kpad, nr, nr * kc, piece);
        return;
    }
    int64_t jb = part * nr;
    u->pack_b(!trans_b, b, ldb, js + jb, ns - jb < nr ? (int)(ns - jb) : nr, ps + pc, kc, nr, NULL,
            piece + jb * kc);
#else
    if (!trans_b && u->pack_cols) {
        int64_t r0 = part * B_BAND; /* the last piece may have fewer bands */
        if (r0 < kc)
            u->pack_cols(b + (ps + pc + r0) * ldb + js, ldb, ns,
                         kc - r0 < B_BAND ? kc - r0 : B_BAND, nr, nr * kc, piece + r0 * nr);
        return;
    }
    int64_t j = part * nr;
    GEMM_FN(pack_b_panel)(u, trans_b, b, ldb, js + j, ns - j < nr ? (int)(ns - j) : nr, ps + pc,
                          kc, piece + j * kc);
#endif
}

/* One mr x nr tile of C at cp (rows [ir, ir+mr) of the chunk's A block
 * pa, cols [j, j+nr) of the piece bs): h x w of it in C. A short last
 * tile takes the kernel of the fewest rows that holds it; edge tiles go
 * through a scratch tile so C is never overrun. */
static void GEMM_FN(one_tile)(const GEMM_UKR *u, int64_t kc, const GEMM_T *pa, const GEMM_T *bs,
                          int64_t ir, int64_t j, int h, int w, GEMM_T alpha, GEMM_T beta,
                          const GEMM_T *bias, GEMM_T *cp, int64_t ldc)
{
    const int mr = u->mr, nr = u->nr;
    GEMM_T tile[32 * 32]; /* mr x nr of the largest kernel */
    __typeof__(*u->fn) *fn = u->fn;
    int rows = mr;
    for (int s = 0; h < mr && s < TG_UKR_SHORT && u->short_rows[s]; s++)
        if (h <= u->short_rows[s]) {
            fn = u->short_fn[s];
            rows = u->short_rows[s];
            break;
        }
    if (h == rows && w == nr) {
        fn(kc, pa + ir * kc, bs + j * kc, cp, ldc, alpha, beta, bias ? bias + j : NULL);
        return;
    }
    fn(kc, pa + ir * kc, bs + j * kc, tile, nr, 1, 0, NULL);
    for (int r = 0; r < h; r++)
        for (int x = 0; x < w; x++) {
            GEMM_T *to = cp + r * ldc + x, v = alpha * tile[r * nr + x];
            *to = beta != 0 ? v + beta * *to : bias ? v + bias[j + x] : v;
        }
}

/* One chunk of C: rows [i0, i0+mc) x the nr-panels [q0, q1) of the packed
 * slice pb (ks deep, kc-deep pieces of ns_pad columns each). For every kc
 * piece the chunk's A block is packed into pa; then either one B panel
 * (kc x nr) stays in L1 while the A block streams from L2, or, where the
 * kernel asks for rows_outer, one A panel (mr x kc) stays while the B
 * panels stream and C is written along its rows. beta, and bias (the row
 * added to C's rows, with beta 0, or NULL), apply to the first piece; amap
 * and asum (or NULL) are pack_a_blk's. */
static void GEMM_FN(chunk)(const GEMM_UKR *u, bool trans_a, const GEMM_T *a, int64_t lda,
                           int64_t i0, int64_t mc, int64_t q0, int64_t q1, int64_t ns,
                           int64_t ns_pad, int64_t p0, int64_t ks, const GEMM_T *pb,
                           GEMM_T *pa, GEMM_T alpha, GEMM_T beta, const GEMM_T *bias,
                           GEMM_FN(amap_fn) amap, double *asum, GEMM_T *c, int64_t ldc)
{
    const int mr = u->mr, nr = u->nr;
#ifdef GEMM_PACK_BF16
    const bool rows_outer = u->rows_outer;
#else
    const bool rows_outer = false;
#endif
    int64_t tiles = (mc + mr - 1) / mr, panels = q1 - q0;
    for (int64_t pc = 0; pc < ks; pc += u->kc, beta = 1, bias = NULL) {
        int64_t kc = ks - pc < u->kc ? ks - pc : u->kc;
        const GEMM_T *bs = pb + pc * ns_pad;
        GEMM_FN(pack_a_blk)(u, trans_a, a, lda, i0, mc, p0 + pc, kc, pa, amap, asum);
        for (int64_t t = 0; t < tiles * panels; t++) {
            int64_t ir = (rows_outer ? t / panels : t % tiles) * mr;
            int64_t j = (q0 + (rows_outer ? t % panels : t / tiles)) * nr;
            int h = mc - ir < mr ? (int)(mc - ir) : mr;
            int w = ns - j < nr ? (int)(ns - j) : nr;
            GEMM_FN(one_tile)(u, kc, pa, bs, ir, j, h, w, alpha, beta, bias,
                          c + (i0 + ir) * ldc + j, ldc);
        }
    }
}

/* One slice of a product as its chunks see it: chunk's arguments but the
 * rows and the panels, with the slice's beta, bias, asum and C. */
typedef struct {
    const GEMM_UKR *u;
    bool trans_a;
    const GEMM_T *a;
    int64_t lda, m, tiles, row_blocks, g, q_all, ns, ns_pad, ps, ks;
    const GEMM_T *pb;
    GEMM_T alpha, beta;
    const GEMM_T *bias;
    GEMM_FN(amap_fn) amap;
    double *asum;
    GEMM_T *c;
    int64_t ldc;
} GEMM_FN(slice);

/* The tiles of chunk t's row block (t / g; the blocks' tile counts differ
 * by one at most). */
static int64_t GEMM_FN(first_tile)(const GEMM_FN(slice) *s, int64_t t)
{
    return t / s->g * s->tiles / s->row_blocks;
}
static int64_t GEMM_FN(block_tiles)(const GEMM_FN(slice) *s, int64_t t)
{
    return GEMM_FN(first_tile)(s, t + s->g) - GEMM_FN(first_tile)(s, t);
}

/* Tiles [lo, hi) of chunk t: its row block's, by its column group (t % g)
 * of the slice's panels. Rows are disjoint between any two calls, so each
 * sums its own rows into asum (column group 0 only). */
static void GEMM_FN(chunk_tiles)(const GEMM_FN(slice) *s, int64_t t, int64_t lo, int64_t hi,
                                 GEMM_T *pa)
{
    const int mr = s->u->mr;
    int64_t j = t % s->g, first = GEMM_FN(first_tile)(s, t);
    int64_t i0 = (first + lo) * mr, i1 = (first + hi) * mr < s->m ? (first + hi) * mr : s->m;
    GEMM_FN(chunk)(s->u, s->trans_a, s->a, s->lda, i0, i1 - i0, j * s->q_all / s->g,
                   (j + 1) * s->q_all / s->g, s->ns, s->ns_pad, s->ps, s->ks, s->pb, pa,
                   s->alpha, s->beta, s->bias, s->amap, j == 0 ? s->asum : NULL, s->c, s->ldc);
}

/* Tiles per piece of a thread's last chunk, which the team shares out. */
#define TAIL_TILES 2

/* Thread th's part of a slice's chunks, out of nt: an equal run of them,
 * the first run to the first thread, as the row-split ops before a product
 * leave those rows in that core's cache (a dynamic queue of whole chunks
 * spent 2-3% of a GPT step waiting on the last one). Each run's last chunk
 * is cut into pieces of TAIL_TILES tiles that the threads take from
 * next[owner] (zero at the start of the slice) once through their own
 * runs, their own last chunk first: equal runs still ended 3% apart, most
 * often the second thread last. With fewer than three chunks a thread
 * (384-row weight gradients, 2048 deep) the pieces' re-reading of B cost
 * more than they saved. */
static void GEMM_FN(run_chunks)(const GEMM_FN(slice) *s, int th, int nt, _Atomic int64_t *next,
                                GEMM_T *pa)
{
    int64_t chunks = s->row_blocks * s->g, t0 = chunks * th / nt, t1 = chunks * (th + 1) / nt;
    bool tails = nt > 1 && chunks >= 3 * nt;
#ifdef GEMM_PACK_BF16 /* AMX's tile configuration, per thread */
    if (s->u->begin)
        s->u->begin();
#endif
    for (int64_t t = t0; t < t1 - tails; t++)
        GEMM_FN(chunk_tiles)(s, t, 0, GEMM_FN(block_tiles)(s, t), pa);
    for (int r = 0; tails && r < nt; r++) {
        int owner = (th + r) % nt;
        int64_t last = chunks * (owner + 1) / nt - 1, bt = GEMM_FN(block_tiles)(s, last);
        for (int64_t x; (x = atomic_fetch_add(&next[owner], 1)) * TAIL_TILES < bt;)
            GEMM_FN(chunk_tiles)(s, last, x * TAIL_TILES,
                                 (x + 1) * TAIL_TILES < bt ? (x + 1) * TAIL_TILES : bt, pa);
    }
#ifdef GEMM_PACK_BF16
    if (s->u->end)
        s->u->end();
#endif
}

/* The whole product (gemm.h's contract) with kernel u on up to nt threads,
 * plus bias[0..n) on every row of C when bias is given (beta must then be
 * 0), of amap(op(A)) when amap is given. Per slice of op(B) (up to nc
 * columns x ks_max deep) the team packs the slice once into a shared
 * buffer, then shares out chunks of C (row blocks, cut into column groups
 * when rows are few; run_chunks), each packing its own A block; with asum,
 * the first to pack a row of op(A) also adds it up into asum[row] (which
 * must start at zero). */
static int GEMM_FN(packed)(const GEMM_UKR *u, int nt, bool trans_a, bool trans_b, int64_t m,
                           int64_t n, int64_t k, GEMM_T alpha, const GEMM_T *a, int64_t lda,
                           const GEMM_T *b, int64_t ldb, GEMM_T beta, const GEMM_T *bias,
                           GEMM_FN(amap_fn) amap, double *asum, GEMM_T *c, int64_t ldc)
{
    const int mr = u->mr, nr = u->nr;
    /* Slices about 2048 deep, but one kc piece deep when C has fewer rows
     * than the reduction is long (a weight gradient, [out, in] from 2048
     * rows): re-reading that C for every piece costs less than streaming a
     * deep slice of B, packed whole, from memory (384 x 1536 x 2048: 3-4%). */
    const int64_t ks_max = m < k ? u->kc : (2048 + u->kc - 1) / u->kc * u->kc;
    int64_t n_pad = ((n < u->nc ? n : u->nc) + nr - 1) / nr * nr;
    int64_t k_max = k < ks_max ? k : ks_max, kc_max = k < u->kc ? k : u->kc;
    /* row blocks of whole tiles, at most mc rows, their tile counts
     * differing by one at most, as many for each thread where the rows
     * allow: each block of A is then packed once (2048 rows made 13 blocks,
     * which took 26 chunks to share evenly, or 13 of 154 rows and one of 46) */
    int64_t tiles = (m + mr - 1) / mr;
    int64_t row_blocks = (m + u->mc - 1) / u->mc;
    if (nt > 1 && row_blocks % nt != 0)
        row_blocks += nt - row_blocks % nt;
    row_blocks = row_blocks < tiles ? row_blocks : tiles;
    int64_t mc = (tiles + row_blocks - 1) / row_blocks * mr; /* the largest block */
    /* at least two chunks per thread */
    int64_t groups = nt > 1 ? (2 * nt + row_blocks - 1) / row_blocks : 1;
    size_t nb = (size_t)(n_pad * k_max + 31) / 16 * 16;
    size_t na = (size_t)(mc * kc_max + 31) / 16 * 16;
    size_t tail_at = ((nb + (size_t)nt * na) * sizeof(GEMM_T) + 64 + 7) / 8 * 8;
    char *buf = malloc(tail_at + (size_t)nt * sizeof(_Atomic int64_t));
    if (!buf)
        return -1;
    GEMM_T *pb = (GEMM_T *)(((uintptr_t)buf + 63) & ~(uintptr_t)63);
    _Atomic int64_t *next = (_Atomic int64_t *)(buf + tail_at); /* run_chunks' tails */
/* The loop nest, the same for one thread and for a team: PRAGMA_FOR and
 * PRAGMA_BARRIER are the team's worksharing, or nothing; TH is the thread.
 * One thread never enters an OpenMP construct, whose team-of-one barriers
 * cost system calls. */
#define PACKED_LOOPS(pa, TH, PRAGMA_FOR, PRAGMA_BARRIER)                                      \
    for (int64_t js = 0; js < n; js += u->nc) {                                           \
        int64_t ns = n - js < u->nc ? n - js : u->nc;                                     \
        int64_t ns_pad = (ns + nr - 1) / nr * nr, q_all = ns_pad / nr;                    \
        /* at least two panels per group, and as many chunks for each thread           \
         * where that allows (384^3 in 9 chunks ran 14% slower than in 6) */           \
        int64_t g_max = (q_all + 1) / 2 > 1 ? (q_all + 1) / 2 : 1;                        \
        int64_t g = groups < g_max ? groups : g_max;                                      \
        while (g < g_max && row_blocks * g % nt != 0)                                     \
            g++;                                                                          \
        for (int64_t ps = 0; ps < k; ps += ks_max) {                                      \
            int64_t ks = k - ps < ks_max ? k - ps : ks_max;                               \
            int64_t pieces = (ks + u->kc - 1) / u->kc;                                    \
            int64_t parts = GEMM_FN(b_parts)(u, trans_b, ks, q_all);                      \
            if ((TH) == 0) /* seen by all after the packing's barrier */                  \
                for (int v = 0; v < nt; v++)                                              \
                    atomic_store_explicit(&next[v], 0, memory_order_relaxed);             \
            PRAGMA_FOR                                                                    \
            for (int64_t t = 0; t < pieces * parts; t++)                                  \
                GEMM_FN(pack_b_part)(u, trans_b, b, ldb, js, ns, ns_pad, ps, ks, parts, t, \
                                     pb);                                                 \
            GEMM_FN(slice) sl = {.u = u, .trans_a = trans_a, .a = a, .lda = lda, .m = m,  \
                                 .tiles = tiles, .row_blocks = row_blocks, .g = g,        \
                                 .q_all = q_all, .ns = ns, .ns_pad = ns_pad, .ps = ps,    \
                                 .ks = ks, .pb = pb, .alpha = alpha,                      \
                                 .beta = ps == 0 ? beta : 1,                              \
                                 .bias = ps == 0 && bias ? bias + js : NULL,              \
                                 .amap = amap, .asum = js == 0 ? asum : NULL,             \
                                 .c = c + js, .ldc = ldc};                                \
            GEMM_FN(run_chunks)(&sl, (TH), nt, next, pa);                                 \
            /* the next slice overwrites pb, and resets next: wait for their            \
             * readers (the last slice leaves that to the end of the region) */          \
            if (ps + ks < k || js + ns < n) {                                             \
                PRAGMA_BARRIER                                                            \
            }                                                                             \
        }                                                                                 \
    }
    if (nt <= 1) {
        PACKED_LOOPS(pb + nb, 0, , )
    } else {
#pragma omp parallel num_threads(nt)
        {
            GEMM_T *pa = pb + nb + (size_t)GEMM_THREAD_NUM() * na;
            PACKED_LOOPS(pa, GEMM_THREAD_NUM(), _Pragma("omp for schedule(dynamic)"),
                         _Pragma("omp barrier"))
        }
    }
#undef PACKED_LOOPS
    free(buf);
    return 0;
}
