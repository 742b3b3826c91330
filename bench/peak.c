/* Register-only multiply-add loops (peak.h): independent accumulators as
 * many as the registers hold, so neither memory nor one instruction's
 * latency limits them; run on one thread, then on every thread at once. */
#include "peak.h"

#include <pthread.h>
#include <stdint.h>
#include <time.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define PEAK_X86 1
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#else
#define PEAK_X86 0
#endif

enum kind { FP32, DPBF16, AMX };

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#if PEAK_X86
/* tensor/gemm_x86.c times a zmm loop like this one, but internally and on one thread; bench
 * links the public library alone and also times ymm, AMX and every thread at once. */
/* Eight independent instructions on zmm/ymm 0-7 (or tiles), and more. */
#define OPS8(op, r, a, b)                                                                     \
    op " %%" a ", %%" b ", %%" r "0\n\t" op " %%" a ", %%" b ", %%" r "1\n\t"                   \
    op " %%" a ", %%" b ", %%" r "2\n\t" op " %%" a ", %%" b ", %%" r "3\n\t"                   \
    op " %%" a ", %%" b ", %%" r "4\n\t" op " %%" a ", %%" b ", %%" r "5\n\t"                   \
    op " %%" a ", %%" b ", %%" r "6\n\t" op " %%" a ", %%" b ", %%" r "7\n\t"
#define ZMM_MORE(op)                                                                          \
    op " %%zmm30, %%zmm31, %%zmm8\n\t" op " %%zmm30, %%zmm31, %%zmm9\n\t"                       \
    op " %%zmm30, %%zmm31, %%zmm10\n\t" op " %%zmm30, %%zmm31, %%zmm11\n\t"                     \
    op " %%zmm30, %%zmm31, %%zmm12\n\t" op " %%zmm30, %%zmm31, %%zmm13\n\t"                     \
    op " %%zmm30, %%zmm31, %%zmm14\n\t" op " %%zmm30, %%zmm31, %%zmm15\n\t"                     \
    op " %%zmm30, %%zmm31, %%zmm16\n\t" op " %%zmm30, %%zmm31, %%zmm17\n\t"                     \
    op " %%zmm30, %%zmm31, %%zmm18\n\t" op " %%zmm30, %%zmm31, %%zmm19\n\t"                     \
    op " %%zmm30, %%zmm31, %%zmm20\n\t" op " %%zmm30, %%zmm31, %%zmm21\n\t"                     \
    op " %%zmm30, %%zmm31, %%zmm22\n\t" op " %%zmm30, %%zmm31, %%zmm23\n\t"                     \
    op " %%zmm30, %%zmm31, %%zmm24\n\t" op " %%zmm30, %%zmm31, %%zmm25\n\t"                     \
    op " %%zmm30, %%zmm31, %%zmm26\n\t" op " %%zmm30, %%zmm31, %%zmm27\n\t"
/* 28 accumulators, operands 1.0 in bfloat16 pairs (as floats: a normal number) */
#define ZMM_LOOP(op)                                                                          \
    __asm__ volatile("mov $0x3f803f80, %%eax\n\tvpbroadcastd %%eax, %%zmm30\n\t"               \
                     "vpbroadcastd %%eax, %%zmm31\n\t1:\n\t" OPS8(op, "zmm", "zmm30", "zmm31")  \
                         ZMM_MORE(op) "dec %0\n\tjnz 1b"                                      \
                     : "+r"(iters)                                                            \
                     :                                                                        \
                     : "eax", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6",    \
                       "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14",    \
                       "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", \
                       "xmm23", "xmm24", "xmm25", "xmm26", "xmm27", "xmm30", "xmm31")

__attribute__((target("avx512f"))) static void fma512(long iters)
{
    ZMM_LOOP("vfmadd231ps");
}

__attribute__((target("avx512f,avx512bf16"))) static void dpbf16(long iters)
{
    ZMM_LOOP("vdpbf16ps");
}

/* 12 accumulators in 16 ymm registers */
__attribute__((target("avx2,fma"))) static void fma256(long iters)
{
    __asm__ volatile("vxorps %%ymm14, %%ymm14, %%ymm14\n\tvxorps %%ymm15, %%ymm15, %%ymm15\n\t"
                     "1:\n\t" OPS8("vfmadd231ps", "ymm", "ymm14", "ymm15")
                     "vfmadd231ps %%ymm14, %%ymm15, %%ymm8\n\t"
                     "vfmadd231ps %%ymm14, %%ymm15, %%ymm9\n\t"
                     "vfmadd231ps %%ymm14, %%ymm15, %%ymm10\n\t"
                     "vfmadd231ps %%ymm14, %%ymm15, %%ymm11\n\t"
                     "dec %0\n\tjnz 1b"
                     : "+r"(iters)
                     :
                     : "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",
                       "xmm8", "xmm9", "xmm10", "xmm11", "xmm14", "xmm15");
}

/* Four independent tdpbf16ps (16 x 16 floats from 16 x 32 by 32 x 16
 * bfloat16 each) on zeroed tiles, after Linux grants the tile state. */
static bool amx_usable(void)
{
    unsigned a, b, c, d, lo, hi;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d >> 22 & 1) || !(d >> 24 & 1) ||
        !__get_cpuid(1, &a, &b, &c, &d) || !(c >> 27 & 1))
        return false;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo >> 17 & 3) == 3 && syscall(SYS_arch_prctl, 0x1023ul /* ARCH_REQ_XCOMP_PERM */,
                                          18ul /* XFEATURE_XTILEDATA */) == 0;
}

/* Palette 1, tiles 0-7 of 16 rows x 64 bytes; static, as GCC may drop the
 * stores filling a stack copy (its _tile_loadconfig claims to read only a
 * pointer's worth). */
static const _Alignas(64) unsigned char amx_config[64] = {
    [0] = 1,   [16] = 64, [18] = 64, [20] = 64, [22] = 64, [24] = 64, [26] = 64, [28] = 64,
    [30] = 64, [48] = 16, [49] = 16, [50] = 16, [51] = 16, [52] = 16, [53] = 16, [54] = 16,
    [55] = 16};

__attribute__((target("amx-tile,amx-bf16"))) static void amx(long iters)
{
    _tile_loadconfig(amx_config);
    for (long i = 0; i < iters; i++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_release();
}

static bool available(enum kind k)
{
    switch (k) {
    case FP32:
        return __builtin_cpu_supports("avx512f") ||
               (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"));
    case DPBF16:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
    default:
        return amx_usable();
    }
}

/* Runs iters rounds of kind's loop; returns the floating-point operations done. */
static double run(enum kind k, long iters)
{
    if (k == AMX) {
        amx(iters);
        return (double)iters * 4 * 16 * 16 * 32 * 2;
    }
    if (k == DPBF16) {
        dpbf16(iters);
        return (double)iters * 28 * 16 * 2 * 2;
    }
    if (__builtin_cpu_supports("avx512f")) {
        fma512(iters);
        return (double)iters * 28 * 16 * 2;
    }
    fma256(iters);
    return (double)iters * 12 * 8 * 2;
}
#else
static bool available(enum kind k)
{
    (void)k;
    return false;
}

static double run(enum kind k, long iters)
{
    (void)k, (void)iters;
    return 0;
}
#endif

typedef struct {
    enum kind k;
    long iters;
    double flops;
} job;

static void *run_job(void *p)
{
    job *j = p;
    j->flops = run(j->k, j->iters);
    return NULL;
}

/* GFLOP/s of nt threads each running iters rounds at once (the best of
 * three tries: the first may meet the cores at a low clock). */
static double measure(enum kind k, long iters, int nt)
{
    pthread_t th[64];
    job jobs[64];
    nt = nt < 64 ? nt : 64;
    double best = 0;
    for (int attempt = 0; attempt < 3; attempt++) {
        double t0 = now_s(), flops = 0;
        int started = 1; /* the calling thread runs jobs[0] */
        jobs[0] = (job){k, iters, 0};
        for (; started < nt; started++) {
            jobs[started] = (job){k, iters, 0};
            if (pthread_create(&th[started], NULL, run_job, &jobs[started]) != 0)
                break;
        }
        run_job(&jobs[0]);
        for (int i = 1; i < started; i++)
            pthread_join(th[i], NULL);
        for (int i = 0; i < started; i++)
            flops += jobs[i].flops;
        double dt = now_s() - t0, rate = dt > 0 ? flops / dt / 1e9 : 0;
        best = rate > best ? rate : best;
    }
    return best;
}

void bench_measure_peaks(int threads, bool quick, bench_peaks *p)
{
    /* about 20 ms per loop at the rates of a current core */
    static const long iters[] = {[FP32] = 400000, [DPBF16] = 400000, [AMX] = 200000};
    double *out[] = {[FP32] = p->fp32, [DPBF16] = p->dpbf16, [AMX] = p->amx};
    for (int k = FP32; k <= AMX; k++) {
        out[k][0] = out[k][1] = 0;
        if (!available((enum kind)k))
            continue;
        long n = quick ? 100 : iters[k];
        out[k][0] = measure((enum kind)k, n, 1);
        out[k][1] = threads > 1 ? measure((enum kind)k, n, threads) : out[k][0];
    }
}
