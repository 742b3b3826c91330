/* The CPU's multiply-add peaks, measured by the benchmark at start with
 * register-only loops, so that each figure can be given as a share of the
 * peak it is bound by. */
#ifndef BENCH_PEAK_H
#define BENCH_PEAK_H

#include <stdbool.h>

/* GFLOP/s on one thread ([0]) and on `threads` threads at once ([1]), 0
 * where the CPU lacks the instructions: float32 FMAs (512-bit, else
 * 256-bit), vdpbf16ps (AVX512_BF16), and AMX tdpbf16ps tiles. */
typedef struct {
    double fp32[2], dpbf16[2], amx[2];
} bench_peaks;

/* Measures them; quick takes a few microseconds per loop, not a measurement. */
void bench_measure_peaks(int threads, bool quick, bench_peaks *p);

#endif
