/* Quantized dots: the activation quantizers, the scalar kernels (the fallback, and the shape the
 * SIMD kernels follow: exact integer sums per block, then one fixed fmaf chain in block order),
 * the per-ISA tables and the GEMM's block products built on them. */
#include "backends/cpu/cpu_qdot.h"

#include "common/util.h"

#include <math.h>
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

size_t pl_cpu_qact_bytes(pl_wtype_t wt, int64_t n)
{
    switch (wt) {
    case PL_WT_Q8_0:
    case PL_WT_Q4_0: return (size_t)(n / PL_QK8_0) * sizeof(pl_q8_act_t);
    case PL_WT_Q4_K:
    case PL_WT_Q5_K:
    case PL_WT_Q6_K: return (size_t)(n / PL_QK_K) * sizeof(pl_q8k_act_t);
    default: return 0;
    }
}

void pl_cpu_qact_quantize(pl_wtype_t wt, const float *x, int64_t n, void *qx)
{
#if defined(__x86_64__)
    if (pl_cpu_isa() >= PL_CPU_ISA_AVX2) {
        pl_cpu_qact_quantize_avx2(wt, x, n, qx);
        return;
    }
#endif
    if (wt == PL_WT_Q8_0 || wt == PL_WT_Q4_0) {
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

/* Q8_0 / Q4_0 rows: 16 float lanes. Block b's elements 4m..4m+3 give an exact integer dot s_m
 * (m = 0..7, the int32 lanes of a 256-bit multiply-add), and lane 8 * (b % 2) + m takes
 * fmaf(d_w * d_x, s_m, lane); then the lanes' fixed sum pl_cpu_q32_lanes_sum. So SIMD code keeps
 * a float accumulator per block parity and never sums a block's integers across lanes. Every
 * path computes exactly this. */
float pl_cpu_q32_lanes_sum(const float *l)
{
    float v[8];
    for (int j = 0; j < 8; j++)
        v[j] = l[j] + l[j + 8];
    return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

void pl_cpu_q32_tail(const void *w, const void *qx, int64_t b0, int64_t nb, bool four,
                     float *lanes)
{
    const pl_q8_act_t *a = qx;
    size_t bb = four ? sizeof(pl_block_q4_0_t) : sizeof(pl_block_q8_0_t);
    for (int64_t b = b0; b < nb; b++) {
        const unsigned char *p = (const unsigned char *)w + (size_t)b * bb;
        float d = s_half(p) * a[b].d;
        for (int m = 0; m < 8; m++) {
            int s = 0;
            for (int i = 4 * m; i < 4 * m + 4; i++) {
                int q = four ? (i < 16 ? (p[2 + i] & 0xF) : (p[2 + i - 16] >> 4)) - 8
                             : (int8_t)p[2 + i];
                s += q * a[b].qs[i];
            }
            lanes[8 * (b % 2) + m] = fmaf(d, (float)s, lanes[8 * (b % 2) + m]);
        }
    }
}

static float s_q8_0(const void *w, const void *qx, int64_t n)
{
    float lanes[16] = {0};
    pl_cpu_q32_tail(w, qx, 0, n / PL_QK8_0, false, lanes);
    return pl_cpu_q32_lanes_sum(lanes);
}

static float s_q4_0(const void *w, const void *qx, int64_t n)
{
    float lanes[16] = {0};
    pl_cpu_q32_tail(w, qx, 0, n / PL_QK8_0, true, lanes);
    return pl_cpu_q32_lanes_sum(lanes);
}

/* Q4_K / Q5_K rows: 8 float lanes. In super-block b, lane m takes the exact integer sums
 * isum_m = sum_j sc_j * (q . x) over elements 4m..4m+3 of each sub-block j (the int32 lanes of a
 * 256-bit multiply-add by the scales) and ms_m = m_m * (bsums[2m] + bsums[2m+1]) (the mins'
 * multiply-add), then lane = fmaf(-(d_x * dmin), ms_m, fmaf(d_x * d, isum_m, lane)); the row is
 * s_k_lanes_sum of the lanes. SIMD code keeps the lanes in one register per row and never
 * sums across them per block. Every path computes exactly this. */
static float s_k_lanes_sum(const float *l)
{
    return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

static float s_k45(const void *w, const void *qx, int64_t n, bool five)
{
    const unsigned char *p = w;
    const pl_q8k_act_t *a = qx;
    size_t bb = five ? sizeof(pl_block_q5_k_t) : sizeof(pl_block_q4_k_t);
    float lanes[8] = {0};
    for (int64_t b = 0; b < n / PL_QK_K; b++, p += bb) {
        const uint8_t *scales = p + 4, *qh = p + 16, *qs = p + (five ? 48 : 16);
        int isum[8] = {0}, ms[8];
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            pl_k_scale_min(j, scales, &sc, &m);
            for (int l = 0; l < 32; l++) {
                uint8_t byte = qs[32 * (j / 2) + l];
                int q = j % 2 ? byte >> 4 : byte & 0xF;
                if (five)
                    q += ((qh[l] >> j) & 1) << 4;
                isum[l / 4] += sc * q * a[b].qs[32 * j + l];
            }
            ms[j] = m * (a[b].bsums[2 * j] + a[b].bsums[2 * j + 1]);
        }
        float dd = a[b].d * s_half(p), dm = a[b].d * s_half(p + 2);
        for (int m = 0; m < 8; m++)
            lanes[m] = fmaf(-dm, (float)ms[m], fmaf(dd, (float)isum[m], lanes[m]));
    }
    return s_k_lanes_sum(lanes);
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
        sum = fmaf(a[b].d * s_half(p + 208), (float)sumi, sum);
    }
    return sum;
}

/* The scalar multi-row kernels: the one-row kernel per row, the reference the others equal. */
#define S_ROWS(type)                                                                               \
    static void s_##type##_rows(const void *w, const void *const *qx, int nr, int64_t n,         \
                                float *out)                                                        \
    {                                                                                              \
        for (int r = 0; r < nr; r++)                                                               \
            out[r] = s_##type(w, qx[r], n);                                                        \
    }
S_ROWS(q8_0)
S_ROWS(q4_0)
S_ROWS(q4_k)
S_ROWS(q5_k)
S_ROWS(q6_k)
#undef S_ROWS

#define S_SCALAR_TABLE                                                                             \
    {                                                                                              \
        s_q8_0, s_q4_0, s_q4_k, s_q5_k, s_q6_k, s_q8_0_rows, s_q4_0_rows, s_q4_k_rows,             \
            s_q5_k_rows, s_q6_k_rows                                                               \
    }
const pl_cpu_qdot_table_t pl_cpu_qdot_scalar = S_SCALAR_TABLE;
#if !defined(__x86_64__) /* pl_cpu_isa() never picks these there */
const pl_cpu_qdot_table_t pl_cpu_qdot_avx2 = S_SCALAR_TABLE;
const pl_cpu_qdot_table_t pl_cpu_qdot_avx512 = S_SCALAR_TABLE;
const pl_cpu_qdot_table_t pl_cpu_qdot_avx512_vnni = S_SCALAR_TABLE;
#endif

/* The AVX-512 table this CPU runs: with VNNI's dot instructions where cpuid reports them. */
static const pl_cpu_qdot_table_t *s_avx512(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    static int vnni = -1; /* racing first calls all store the same value */
    int v = __atomic_load_n(&vnni, __ATOMIC_RELAXED);
    if (v < 0) {
        __builtin_cpu_init();
        v = __builtin_cpu_supports("avx512vnni") ? 1 : 0;
        __atomic_store_n(&vnni, v, __ATOMIC_RELAXED);
    }
    if (v)
        return &pl_cpu_qdot_avx512_vnni;
#endif
    return &pl_cpu_qdot_avx512;
}

const pl_cpu_qdot_table_t *pl_cpu_qdot_table(pl_cpu_isa_t isa)
{
    if ((unsigned)isa >= PL_CPU_ISA_COUNT || isa > pl_cpu_isa())
        return NULL;
    return isa == PL_CPU_ISA_AVX512 ? s_avx512() : isa == PL_CPU_ISA_AVX2 ? &pl_cpu_qdot_avx2
                                                                          : &pl_cpu_qdot_scalar;
}

pl_cpu_qdot_fn pl_cpu_qdot_fn_of(const pl_cpu_qdot_table_t *t, pl_wtype_t wt)
{
    switch (wt) {
    case PL_WT_Q8_0: return t->q8_0;
    case PL_WT_Q4_0: return t->q4_0;
    case PL_WT_Q4_K: return t->q4_k;
    case PL_WT_Q5_K: return t->q5_k;
    case PL_WT_Q6_K: return t->q6_k;
    default: return NULL;
    }
}

pl_cpu_qdot_rows_fn pl_cpu_qdot_rows_fn_of(const pl_cpu_qdot_table_t *t, pl_wtype_t wt)
{
    switch (wt) {
    case PL_WT_Q8_0: return t->q8_0_rows;
    case PL_WT_Q4_0: return t->q4_0_rows;
    case PL_WT_Q4_K: return t->q4_k_rows;
    case PL_WT_Q5_K: return t->q5_k_rows;
    case PL_WT_Q6_K: return t->q6_k_rows;
    default: return NULL;
    }
}

float pl_q8_0_dot(const void *w, const void *qx, int64_t n)
{
    return pl_cpu_qdot_table(pl_cpu_isa())->q8_0(w, qx, n);
}

float pl_q4_0_dot(const void *w, const void *qx, int64_t n)
{
    return pl_cpu_qdot_table(pl_cpu_isa())->q4_0(w, qx, n);
}

float pl_q4_k_dot(const void *w, const void *qx, int64_t n)
{
    return pl_cpu_qdot_table(pl_cpu_isa())->q4_k(w, qx, n);
}

float pl_q5_k_dot(const void *w, const void *qx, int64_t n)
{
    return pl_cpu_qdot_table(pl_cpu_isa())->q5_k(w, qx, n);
}

float pl_q6_k_dot(const void *w, const void *qx, int64_t n)
{
    return pl_cpu_qdot_table(pl_cpu_isa())->q6_k(w, qx, n);
}

/* ---- the GEMM table's slots ---- */

/* y[r][o] = dot(weight row o, activation row r): each weight row against up to
 * PL_CPU_QDOT_ROWS activation rows at a time, every element bitwise its own one-row dot, so an
 * element does not depend on the block it falls in or on the rows beside it. */
static void s_block(pl_cpu_qdot_rows_fn dot, const void *const *x, int nr, const void *w,
                    size_t rb, int no, int k, float *const *y)
{
    float out[PL_CPU_QDOT_ROWS];
    /* a group's activation rows stay in L1 while the block's weight rows pass (from memory for
     * the first group, from L2 for the others): 8 rows of 4096 would not fit beside them */
    for (int r0 = 0; r0 < nr; r0 += PL_CPU_QDOT_ROWS) {
        int n = PL_MIN(PL_CPU_QDOT_ROWS, nr - r0);
        for (int o = 0; o < no; o++) {
            dot((const unsigned char *)w + (size_t)o * rb, x + r0, n, k, out);
            for (int r = 0; r < n; r++)
                y[r0 + r][o] = out[r];
        }
    }
}

/* A table's block product over its multi-row dot: what Q6_K (and every type off x86) uses. */
#define S_TABLE_BLOCKS(type)                                                                       \
    static void s_##type##_block_avx2(const void *const *x, int nr, const void *w, size_t rb,     \
                                      int no, int k, float *const *y)                              \
    {                                                                                              \
        s_block(pl_cpu_qdot_avx2.type##_rows, x, nr, w, rb, no, k, y);                             \
    }                                                                                              \
    static void s_##type##_block_avx512(const void *const *x, int nr, const void *w, size_t rb,   \
                                        int no, int k, float *const *y)                            \
    {                                                                                              \
        s_block(s_avx512()->type##_rows, x, nr, w, rb, no, k, y);                                  \
    }
/* cpu_qdot_x86_tmpl.h's own block products, the AVX-512 table's with VNNI where it has it (and
 * for batches cpu_qdot_batch512.c's, which read each weight block once for 8 rows). */
#define S_X86_BLOCKS(type)                                                                         \
    static void s_##type##_block_avx2(const void *const *x, int nr, const void *w, size_t rb,     \
                                      int no, int k, float *const *y)                              \
    {                                                                                              \
        pl_cpu_##type##_block_avx2(x, nr, w, rb, no, k, y);                                        \
    }                                                                                              \
    static void s_##type##_block_avx512(const void *const *x, int nr, const void *w, size_t rb,   \
                                        int no, int k, float *const *y)                            \
    {                                                                                              \
        if (s_avx512() != &pl_cpu_qdot_avx512_vnni)                                               \
            pl_cpu_##type##_block_avx2(x, nr, w, rb, no, k, y);                                    \
        else if (nr > 1)                                                                           \
            pl_cpu_##type##_block_b512(x, nr, w, rb, no, k, y);                                    \
        else                                                                                       \
            pl_cpu_##type##_block_vnni(x, nr, w, rb, no, k, y);                                    \
    }
#if defined(__x86_64__)
S_X86_BLOCKS(q8_0)
S_X86_BLOCKS(q4_0)
S_X86_BLOCKS(q4_k)
S_X86_BLOCKS(q5_k)
/* Q6_K: the table's multi-row dot, and for batches with VNNI cpu_qdot_batch512.c's */
static void s_q6_k_block_avx2(const void *const *x, int nr, const void *w, size_t rb, int no,
                              int k, float *const *y)
{
    s_block(pl_cpu_qdot_avx2.q6_k_rows, x, nr, w, rb, no, k, y);
}
static void s_q6_k_block_avx512(const void *const *x, int nr, const void *w, size_t rb, int no,
                                int k, float *const *y)
{
    if (nr > 1 && s_avx512() == &pl_cpu_qdot_avx512_vnni)
        pl_cpu_q6_k_block_b512(x, nr, w, rb, no, k, y);
    else
        s_block(s_avx512()->q6_k_rows, x, nr, w, rb, no, k, y);
}
#else
S_TABLE_BLOCKS(q8_0)
S_TABLE_BLOCKS(q4_0)
S_TABLE_BLOCKS(q4_k)
S_TABLE_BLOCKS(q5_k)
S_TABLE_BLOCKS(q6_k)
#endif

#define S_QUANT_KERNELS(type, WT)                                                                  \
    size_t pl_cpu_qx_bytes_##type(int k)                                                           \
    {                                                                                              \
        return pl_cpu_qact_bytes(WT, k);                                                           \
    }                                                                                              \
    void pl_cpu_qx_prep_##type(const float *x, int k, void *xq)                                    \
    {                                                                                              \
        pl_cpu_qact_quantize(WT, x, k, xq);                                                        \
    }                                                                                              \
    void pl_cpu_qblock_##type##_scalar(const void *const *x, int nr, const void *w, size_t rb,    \
                                       int no, int k, float *const *y)                             \
    {                                                                                              \
        s_block(pl_cpu_qdot_scalar.type##_rows, x, nr, w, rb, no, k, y);                           \
    }                                                                                              \
    void pl_cpu_qblock_##type##_avx2(const void *const *x, int nr, const void *w, size_t rb,      \
                                     int no, int k, float *const *y)                               \
    {                                                                                              \
        s_##type##_block_avx2(x, nr, w, rb, no, k, y);                                             \
    }                                                                                              \
    void pl_cpu_qblock_##type##_avx512(const void *const *x, int nr, const void *w, size_t rb,    \
                                       int no, int k, float *const *y)                             \
    {                                                                                              \
        s_##type##_block_avx512(x, nr, w, rb, no, k, y);                                           \
    }
S_QUANT_KERNELS(q8_0, PL_WT_Q8_0)
S_QUANT_KERNELS(q4_0, PL_WT_Q4_0)
S_QUANT_KERNELS(q4_k, PL_WT_Q4_K)
S_QUANT_KERNELS(q5_k, PL_WT_Q5_K)
S_QUANT_KERNELS(q6_k, PL_WT_Q6_K)
