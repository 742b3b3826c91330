/* One SIMD micro-kernel of the packed GEMM: an MR x (NV * W) tile of C kept
 * in vector registers. gemm_x86.c includes this once per ISA and type after
 * defining the MK_ macros below. No include guard on purpose.
 *
 *   MK_NAME   function name         MK_T  element type   MK_V  vector type
 *   MK_W      lanes per vector      MK_MR rows           MK_NV vectors per row
 *   MK_TARGET the target attribute, MK_LOAD / MK_STORE (unaligned),
 *   MK_SET1 (broadcast), MK_FMA(a, b, c) = a * b + c, MK_MUL, MK_ZERO
 *   MK_STRIDE (optional) the packed panel's width when the kernel computes
 *             only its first MK_MR rows: a short last tile (default MK_MR) */

#ifndef MK_STRIDE
#define MK_STRIDE MK_MR
#endif

/* C[MR][NR] = alpha * pa @ pb + beta * C, from pa = [kc][STRIDE] and
 * pb = [kc][NR] packed panels; beta == 0 never reads C, and then adds the
 * row bias[0..NR) to every row unless bias is NULL. */
MK_TARGET static void MK_NAME(int64_t kc, const MK_T *restrict pa, const MK_T *restrict pb,
                              MK_T *restrict c, int64_t ldc, MK_T alpha, MK_T beta,
                              const MK_T *restrict bias)
{
    MK_V acc[MK_MR][MK_NV];
#pragma GCC unroll 16
    for (int r = 0; r < MK_MR; r++)
#pragma GCC unroll 4
        for (int v = 0; v < MK_NV; v++)
            acc[r][v] = MK_ZERO();
    /* C's tile is written at the end: fetch its lines while the FMAs run */
#pragma GCC unroll 16
    for (int r = 0; r < MK_MR; r++)
#pragma GCC unroll 4
        for (int v = 0; v < MK_NV * MK_W * (int)sizeof(MK_T); v += 64)
            _mm_prefetch((const char *)(c + r * ldc) + v, _MM_HINT_T0);
    /* One k step: NV loads of B, MR broadcasts of A (folded into the FMAs
     * as memory operands), MR * NV independent FMAs. */
#pragma GCC unroll 4
    for (int64_t p = 0; p < kc; p++) {
        MK_V b[MK_NV];
#pragma GCC unroll 4
        for (int v = 0; v < MK_NV; v++)
            b[v] = MK_LOAD(pb + v * MK_W);
#pragma GCC unroll 16
        for (int r = 0; r < MK_MR; r++) {
            MK_V a = MK_SET1(pa[r]);
#pragma GCC unroll 4
            for (int v = 0; v < MK_NV; v++)
                acc[r][v] = MK_FMA(a, b[v], acc[r][v]);
        }
        pa += MK_STRIDE;
        pb += MK_NV * MK_W;
    }
    MK_V va = MK_SET1(alpha);
    if (beta == 0 && bias) {
        MK_V vbias[MK_NV];
#pragma GCC unroll 4
        for (int v = 0; v < MK_NV; v++)
            vbias[v] = MK_LOAD(bias + v * MK_W);
#pragma GCC unroll 16
        for (int r = 0; r < MK_MR; r++)
#pragma GCC unroll 4
            for (int v = 0; v < MK_NV; v++)
                MK_STORE(c + r * ldc + v * MK_W, MK_FMA(va, acc[r][v], vbias[v]));
        return;
    }
    if (beta == 0) {
#pragma GCC unroll 16
        for (int r = 0; r < MK_MR; r++)
#pragma GCC unroll 4
            for (int v = 0; v < MK_NV; v++)
                MK_STORE(c + r * ldc + v * MK_W, MK_MUL(va, acc[r][v]));
        return;
    }
    MK_V vb = MK_SET1(beta);
#pragma GCC unroll 16
    for (int r = 0; r < MK_MR; r++)
#pragma GCC unroll 4
        for (int v = 0; v < MK_NV; v++) {
            MK_T *cp = c + r * ldc + v * MK_W;
            MK_STORE(cp, MK_FMA(vb, MK_LOAD(cp), MK_MUL(va, acc[r][v])));
        }
}

/* The name and stride go with each instantiation, and so do the per-type
 * parameters unless MK_KEEP_TYPE is defined (the next one is of the same
 * type); MK_TARGET, MK_MR and MK_NV stay for the next one of the same
 * instruction set. */
#undef MK_NAME
#undef MK_STRIDE
#ifndef MK_KEEP_TYPE
#undef MK_ZERO
#undef MK_T
#undef MK_V
#undef MK_W
#undef MK_LOAD
#undef MK_STORE
#undef MK_SET1
#undef MK_FMA
#undef MK_MUL
#endif
