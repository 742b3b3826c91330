/* The thread's matmul precision (tg_set_matmul_precision): whether the
 * float32 products of the ops take bfloat16 operands. The ops read it as
 * they run; the graph records it per node and restores it for backward. */
#include "internal.h"

static TG_TLS tg_precision matmul_precision;

tg_precision tg_set_matmul_precision(tg_precision p)
{
    tg_precision was = matmul_precision;
    if (p != TG_PRECISION_FLOAT32 && p != TG_PRECISION_BF16) {
        tg__fail(TG_ERR_VALUE, "tg_set_matmul_precision: unknown precision %d", (int)p);
        return was;
    }
    matmul_precision = p;
    return was;
}

tg_precision tg_matmul_precision(void) { return matmul_precision; }

const char *tg_precision_name(tg_precision p)
{
    switch (p) {
    case TG_PRECISION_FLOAT32: return "fp32";
    case TG_PRECISION_BF16: return "bf16";
    }
    return "unknown";
}
