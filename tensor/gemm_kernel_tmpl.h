/* The built-in cache-blocked GEMM for one element type. gemm.c includes this
 * file once per type after defining GEMM_T (the element type), GEMM_FN(name)
 * (a name with the type's suffix) and GEMM_MR x GEMM_NR (the micro-tile that
 * the hot loop keeps in registers). No include guard on purpose. */

/* One MR-row panel of op(A): rows [i0, i0+mr) x cols [p0, p0+kc), stored
 * [kc][MR] so the micro-kernel reads it front to back; rows past mr are 0. */
static void GEMM_FN(pack_a)(bool trans, const GEMM_T *a, int64_t lda, int64_t i0, int64_t mr,
                            int64_t p0, int64_t kc, GEMM_T *restrict pa)
{
    if (trans) { /* op(A)(i, p) = a[p * lda + i]: a row of A gives one panel step */
        for (int64_t p = 0; p < kc; p++) {
            const GEMM_T *src = a + (p0 + p) * lda + i0;
            for (int r = 0; r < GEMM_MR; r++)
                pa[p * GEMM_MR + r] = r < mr ? src[r] : 0;
        }
        return;
    }
    for (int r = 0; r < GEMM_MR; r++) { /* op(A)(i, p) = a[i * lda + p] */
        const GEMM_T *src = a + (i0 + r) * lda + p0;
        for (int64_t p = 0; p < kc; p++)
            pa[p * GEMM_MR + r] = r < mr ? src[p] : 0;
    }
}

/* One NR-column panel of op(B): rows [p0, p0+kc) x cols [j0, j0+nr), stored
 * [kc][NR]; columns past nr are 0. */
static void GEMM_FN(pack_b)(bool trans, const GEMM_T *b, int64_t ldb, int64_t j0, int64_t nr,
                            int64_t p0, int64_t kc, GEMM_T *restrict pb)
{
    if (!trans) { /* op(B)(p, j) = b[p * ldb + j] */
        for (int64_t p = 0; p < kc; p++) {
            const GEMM_T *src = b + (p0 + p) * ldb + j0;
            for (int j = 0; j < GEMM_NR; j++)
                pb[p * GEMM_NR + j] = j < nr ? src[j] : 0;
        }
        return;
    }
    for (int j = 0; j < GEMM_NR; j++) { /* op(B)(p, j) = b[j * ldb + p] */
        const GEMM_T *src = b + (j0 + j) * ldb + p0;
        for (int64_t p = 0; p < kc; p++)
            pb[p * GEMM_NR + j] = j < nr ? src[p] : 0;
    }
}

/* acc[MR][NR] = panel_a (MR x kc) @ panel_b (kc x NR): the hot loop. With
 * GCC or Clang one row of the tile is a vector of NR elements (split into
 * whatever registers the target has), so all MR rows stay in registers;
 * elsewhere plain fixed-size loops are left to the compiler. */
#if defined(__GNUC__)
/* One register's worth of elements; a tile row is GEMM_NV of them. */
typedef GEMM_T GEMM_FN(vec) __attribute__((vector_size(GEMM_VEC_BYTES)));
enum { GEMM_FN(NV) = GEMM_NR * sizeof(GEMM_T) / GEMM_VEC_BYTES };
static void GEMM_FN(micro)(int64_t kc, const GEMM_T *restrict pa, const GEMM_T *restrict pb,
                           GEMM_T acc[GEMM_MR][GEMM_NR])
{
    GEMM_FN(vec) c[GEMM_MR][GEMM_FN(NV)];
    memset(c, 0, sizeof c);
    for (int64_t p = 0; p < kc; p++, pa += GEMM_MR, pb += GEMM_NR) {
        GEMM_FN(vec) b[GEMM_FN(NV)];
        memcpy(b, pb, sizeof b);
#pragma GCC unroll 16
        for (int r = 0; r < GEMM_MR; r++)
#pragma GCC unroll 16
            for (int v = 0; v < GEMM_FN(NV); v++)
                c[r][v] += pa[r] * b[v];
    }
#pragma GCC unroll 16
    for (int r = 0; r < GEMM_MR; r++)
#pragma GCC unroll 16
        for (int v = 0; v < GEMM_FN(NV); v++)
            memcpy(&acc[r][v * GEMM_NR / GEMM_FN(NV)], &c[r][v], sizeof c[r][v]);
}
#else
static void GEMM_FN(micro)(int64_t kc, const GEMM_T *restrict pa, const GEMM_T *restrict pb,
                           GEMM_T acc[GEMM_MR][GEMM_NR])
{
    GEMM_T c[GEMM_MR][GEMM_NR] = {{0}};
    for (int64_t p = 0; p < kc; p++, pa += GEMM_MR, pb += GEMM_NR)
        for (int r = 0; r < GEMM_MR; r++)
            for (int j = 0; j < GEMM_NR; j++)
                c[r][j] += pa[r] * pb[j];
    memcpy(acc, c, sizeof c);
}
#endif

/* Writes the valid mr x nr corner of acc into C: the first K slice applies
 * beta (without reading C when beta is 0), later slices add. */
static void GEMM_FN(store)(GEMM_T acc[GEMM_MR][GEMM_NR], int64_t mr, int64_t nr, GEMM_T alpha,
                           GEMM_T beta, bool first, GEMM_T *c, int64_t ldc)
{
    for (int64_t r = 0; r < mr; r++) {
        GEMM_T *row = c + r * ldc;
        if (!first)
            for (int64_t j = 0; j < nr; j++)
                row[j] += alpha * acc[r][j];
        else if (beta == 0)
            for (int64_t j = 0; j < nr; j++)
                row[j] = alpha * acc[r][j];
        else
            for (int64_t j = 0; j < nr; j++)
                row[j] = alpha * acc[r][j] + beta * row[j];
    }
}

/* C = beta * C, for the products with nothing to add (K == 0 or alpha == 0). */
static void GEMM_FN(scale)(int64_t m, int64_t n, GEMM_T beta, GEMM_T *c, int64_t ldc)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++)
            c[i * ldc + j] = beta == 0 ? 0 : beta * c[i * ldc + j];
}

/* One tile of C: rows [i0, i1) x cols [j0, j1) of the current column slice,
 * from the packed slices pa (every row of op(A), kc deep) and pb. */
static void GEMM_FN(tile)(int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t kc,
                          const GEMM_T *pa, const GEMM_T *pb, GEMM_T alpha, GEMM_T beta,
                          bool first, GEMM_T *c, int64_t ldc)
{
    GEMM_T acc[GEMM_MR][GEMM_NR];
    /* j outer: one B panel (kc x NR) stays in L1 while the A block streams. */
    for (int64_t j = j0; j < j1; j += GEMM_NR)
        for (int64_t i = i0; i < i1; i += GEMM_MR) {
            GEMM_FN(micro)(kc, pa + i * kc, pb + j * kc, acc);
            GEMM_FN(store)(acc, i1 - i < GEMM_MR ? i1 - i : GEMM_MR,
                           j1 - j < GEMM_NR ? j1 - j : GEMM_NR, alpha, beta, first,
                           c + i * ldc + j, ldc);
        }
}

/* The blocked product. For each KC-deep slice: pack all of op(A) once, then
 * for each NC-wide column slice pack op(B), and share the MC x NT tiles of C
 * among the threads. Packing buffers: ceil(M/MR)*MR x KC and NC x KC. */
static int GEMM_FN(blocked)(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                            GEMM_T alpha, const GEMM_T *a, int64_t lda, const GEMM_T *b,
                            int64_t ldb, GEMM_T beta, GEMM_T *c, int64_t ldc)
{
    enum { MC = GEMM_MC / GEMM_MR * GEMM_MR, NT = GEMM_NT / GEMM_NR * GEMM_NR };
    if (m <= 0 || n <= 0)
        return 0;
    if (k <= 0 || alpha == 0) {
        GEMM_FN(scale)(m, n, beta, c, ldc);
        return 0;
    }
    int64_t kc_max = k < GEMM_KC ? k : GEMM_KC;
    int64_t nc_max = n < GEMM_NC ? n : GEMM_NC;
    int64_t m_panels = (m + GEMM_MR - 1) / GEMM_MR;
    int64_t n_panels_max = (nc_max + GEMM_NR - 1) / GEMM_NR;
    GEMM_T *pa = malloc((size_t)(m_panels * GEMM_MR * kc_max) * sizeof *pa);
    GEMM_T *pb = malloc((size_t)(n_panels_max * GEMM_NR * kc_max) * sizeof *pb);
    if (!pa || !pb) {
        free(pa);
        free(pb);
        return -1;
    }
    /* Every thread walks the same slice loops; the omp for loops split the
     * packing and the tiles, and their closing barriers keep a buffer from
     * being repacked while another thread still reads it. */
#pragma omp parallel if ((double)m * (double)n * (double)k >= GEMM_PARALLEL_MIN && \
                         !GEMM_IN_PARALLEL())
    for (int64_t pc = 0; pc < k; pc += GEMM_KC) {
        int64_t kc = k - pc < GEMM_KC ? k - pc : GEMM_KC;
#pragma omp for schedule(static)
        for (int64_t ip = 0; ip < m_panels; ip++)
            GEMM_FN(pack_a)(trans_a, a, lda, ip * GEMM_MR,
                            m - ip * GEMM_MR < GEMM_MR ? m - ip * GEMM_MR : GEMM_MR, pc, kc,
                            pa + ip * GEMM_MR * kc);
        for (int64_t jc = 0; jc < n; jc += GEMM_NC) {
            int64_t nc = n - jc < GEMM_NC ? n - jc : GEMM_NC;
            int64_t n_panels = (nc + GEMM_NR - 1) / GEMM_NR;
#pragma omp for schedule(static)
            for (int64_t jp = 0; jp < n_panels; jp++)
                GEMM_FN(pack_b)(trans_b, b, ldb, jc + jp * GEMM_NR,
                                nc - jp * GEMM_NR < GEMM_NR ? nc - jp * GEMM_NR : GEMM_NR, pc,
                                kc, pb + jp * GEMM_NR * kc);
            int64_t m_tiles = (m + MC - 1) / MC, n_tiles = (nc + NT - 1) / NT;
#pragma omp for collapse(2) schedule(static)
            for (int64_t it = 0; it < m_tiles; it++)
                for (int64_t jt = 0; jt < n_tiles; jt++)
                    GEMM_FN(tile)(it * MC, (it + 1) * MC < m ? (it + 1) * MC : m, jt * NT,
                                  (jt + 1) * NT < nc ? (jt + 1) * NT : nc, kc, pa, pb, alpha,
                                  beta, pc == 0, c + jc, ldc);
        }
    }
    free(pa);
    free(pb);
    return 0;
}
