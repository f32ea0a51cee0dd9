/* Quantized dots: the activation quantizers, the scalar kernels (the fallback, and the shape the
 * SIMD kernels follow: integer sums per sub-block, one float multiply per sub-block), dispatch. */
#include "backends/cpu/cpu_qdot.h"

#include "common/util.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

static float s_half(const unsigned char *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return pl_f16_to_f32(h);
}

static void s_quant_block(const float *x, int n, float *d_p, int8_t *qs)
{
    float amax = 0.0f, d, id;
    for (int i = 0; i < n; i++)
        amax = fmaxf(amax, fabsf(x[i]));
    d = amax / 127.0f;
    id = d > 0.0f ? 1.0f / d : 0.0f;
    for (int i = 0; i < n; i++) {
        long q = lrintf(x[i] * id);
        qs[i] = (int8_t)(q > 127 ? 127 : q < -127 ? -127 : q);
    }
    *d_p = d;
}

size_t pl_cpu_qact_bytes(pl_dtype_t wt, int64_t n)
{
    switch (wt) {
    case PL_DT_Q8_0:
    case PL_DT_Q4_0: return (size_t)(n / PL_QK8_0) * sizeof(pl_q8_act_t);
    case PL_DT_Q4_K:
    case PL_DT_Q5_K:
    case PL_DT_Q6_K: return (size_t)(n / PL_QK_K) * sizeof(pl_q8k_act_t);
    default: return 0;
    }
}

void pl_cpu_qact_quantize(pl_dtype_t wt, const float *x, int64_t n, void *qx)
{
    if (wt == PL_DT_Q8_0 || wt == PL_DT_Q4_0) {
        pl_q8_act_t *a = qx;
        for (int64_t b = 0; b < n / PL_QK8_0; b++)
            s_quant_block(x + b * PL_QK8_0, PL_QK8_0, &a[b].d, a[b].qs);
        return;
    }
    pl_q8k_act_t *a = qx;
    for (int64_t b = 0; b < n / PL_QK_K; b++) {
        s_quant_block(x + b * PL_QK_K, PL_QK_K, &a[b].d, a[b].qs);
        for (int j = 0; j < PL_QK_K / 16; j++) {
            int s = 0;
            for (int l = 0; l < 16; l++)
                s += a[b].qs[16 * j + l];
            a[b].bsums[j] = (int16_t)s;
        }
    }
}

static float s_q8_0(const void *w, const void *qx, int64_t n)
{
    const unsigned char *p = w;
    const pl_q8_act_t *a = qx;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / PL_QK8_0; b++, p += sizeof(pl_block_q8_0_t)) {
        int s = 0;
        for (int j = 0; j < PL_QK8_0; j++)
            s += (int8_t)p[2 + j] * a[b].qs[j];
        sum += s_half(p) * a[b].d * (float)s;
    }
    return sum;
}

static float s_q4_0(const void *w, const void *qx, int64_t n)
{
    const unsigned char *p = w;
    const pl_q8_act_t *a = qx;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / PL_QK8_0; b++, p += sizeof(pl_block_q4_0_t)) {
        int s = 0;
        for (int j = 0; j < PL_QK8_0 / 2; j++)
            s += ((p[2 + j] & 0xF) - 8) * a[b].qs[j] + ((p[2 + j] >> 4) - 8) * a[b].qs[j + 16];
        sum += s_half(p) * a[b].d * (float)s;
    }
    return sum;
}

/* Q4_K / Q5_K: sum_j sc_j * (q . x)_j  and  sum_j m_j * sum(x)_j per super-block. */
static float s_k45(const void *w, const void *qx, int64_t n, bool five)
{
    const unsigned char *p = w;
    const pl_q8k_act_t *a = qx;
    size_t bb = five ? sizeof(pl_block_q5_k_t) : sizeof(pl_block_q4_k_t);
    float sum = 0.0f;
    for (int64_t b = 0; b < n / PL_QK_K; b++, p += bb) {
        const uint8_t *scales = p + 4, *qh = p + 16, *qs = p + (five ? 48 : 16);
        int sumi = 0, summ = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            int s = 0;
            pl_k_scale_min(j, scales, &sc, &m);
            for (int l = 0; l < 32; l++) {
                uint8_t byte = qs[32 * (j / 2) + l];
                int q = j % 2 ? byte >> 4 : byte & 0xF;
                if (five)
                    q += ((qh[l] >> j) & 1) << 4;
                s += q * a[b].qs[32 * j + l];
            }
            sumi += sc * s;
            summ += m * (a[b].bsums[2 * j] + a[b].bsums[2 * j + 1]);
        }
        sum += a[b].d * (s_half(p) * (float)sumi - s_half(p + 2) * (float)summ);
    }
    return sum;
}

static float s_q4_k(const void *w, const void *qx, int64_t n)
{
    return s_k45(w, qx, n, false);
}

static float s_q5_k(const void *w, const void *qx, int64_t n)
{
    return s_k45(w, qx, n, true);
}

static float s_q6_k(const void *w, const void *qx, int64_t n)
{
    const unsigned char *p = w;
    const pl_q8k_act_t *a = qx;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / PL_QK_K; b++, p += sizeof(pl_block_q6_k_t)) {
        const uint8_t *ql = p, *qh = p + 128;
        const int8_t *sc = (const int8_t *)(p + 192);
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            int s = 0;
            for (int l16 = 0; l16 < 16; l16++) {
                int e = 16 * j + l16, h = e / 128, part = (e % 128) / 32, l = e % 32;
                int lo = ql[64 * h + l + 32 * (part & 1)];
                lo = part < 2 ? lo & 0xF : lo >> 4;
                int q = (lo | (((qh[32 * h + l] >> (2 * part)) & 3) << 4)) - 32;
                s += q * a[b].qs[e];
            }
            sumi += sc[j] * s;
        }
        sum += a[b].d * s_half(p + 208) * (float)sumi;
    }
    return sum;
}

static const pl_cpu_qdot_table_t s_scalar = {s_q8_0, s_q4_0, s_q4_k, s_q5_k, s_q6_k};

static bool s_has(pl_cpu_isa_t isa)
{
    switch (isa) {
    case PL_CPU_ISA_SCALAR: return true;
    case PL_CPU_ISA_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("f16c");
    case PL_CPU_ISA_AVX512:
        return s_has(PL_CPU_ISA_AVX2) && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw");
    }
    return false;
}

const pl_cpu_qdot_table_t *pl_cpu_qdot_table(pl_cpu_isa_t isa)
{
    static const pl_cpu_qdot_table_t *const tables[PL_CPU_ISA_COUNT] = {
        &s_scalar, &pl_cpu_qdot_avx2, &pl_cpu_qdot_avx512};
    if ((unsigned)isa >= PL_CPU_ISA_COUNT || !s_has(isa))
        return NULL;
    return tables[isa];
}

static pthread_once_t s_once = PTHREAD_ONCE_INIT;
static pl_cpu_isa_t s_best_isa;

static void s_pick(void)
{
    __builtin_cpu_init();
    s_best_isa = s_has(PL_CPU_ISA_AVX512) ? PL_CPU_ISA_AVX512
                 : s_has(PL_CPU_ISA_AVX2) ? PL_CPU_ISA_AVX2
                                          : PL_CPU_ISA_SCALAR;
}

pl_cpu_isa_t pl_cpu_qdot_best_isa(void)
{
    pthread_once(&s_once, s_pick);
    return s_best_isa;
}

const pl_cpu_qdot_table_t *pl_cpu_qdot_best(void)
{
    return pl_cpu_qdot_table(pl_cpu_qdot_best_isa());
}

pl_cpu_qdot_fn pl_cpu_qdot_fn_of(const pl_cpu_qdot_table_t *t, pl_dtype_t wt)
{
    switch (wt) {
    case PL_DT_Q8_0: return t->q8_0;
    case PL_DT_Q4_0: return t->q4_0;
    case PL_DT_Q4_K: return t->q4_k;
    case PL_DT_Q5_K: return t->q5_k;
    case PL_DT_Q6_K: return t->q6_k;
    default: return NULL;
    }
}

const char *pl_cpu_isa_name(pl_cpu_isa_t isa)
{
    return isa == PL_CPU_ISA_AVX512 ? "avx512" : isa == PL_CPU_ISA_AVX2 ? "avx2" : "scalar";
}

float pl_q8_0_dot(const void *w, const void *qx, int64_t n)
{
    return pl_cpu_qdot_best()->q8_0(w, qx, n);
}

float pl_q4_0_dot(const void *w, const void *qx, int64_t n)
{
    return pl_cpu_qdot_best()->q4_0(w, qx, n);
}

float pl_q4_k_dot(const void *w, const void *qx, int64_t n)
{
    return pl_cpu_qdot_best()->q4_k(w, qx, n);
}

float pl_q5_k_dot(const void *w, const void *qx, int64_t n)
{
    return pl_cpu_qdot_best()->q5_k(w, qx, n);
}

float pl_q6_k_dot(const void *w, const void *qx, int64_t n)
{
    return pl_cpu_qdot_best()->q6_k(w, qx, n);
}
