/* AVX-512 (F + BW) quantized dot of Q6_K, one 64-element chunk per register (the other types use
 * the AVX2 kernels: see the table); compiled for that target whatever the build's flags, called
 * only when cpuid reports it. The float chain is the scalar code's: bitwise the scalar result. */
#if defined(__x86_64__)
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx2,fma,f16c")
#include "backends/cpu/cpu_qdot.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

static inline float s_half(const unsigned char *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* The scales of 16-element sub-blocks 4g..4g+3 (g = 0..3 a quarter of the super-block), each over
 * the 8 int16 lanes of its 128-bit lane, picked from the 16 scales as words in sc16. */
static inline __attribute__((always_inline)) __m512i s_scales4(__m256i sc16, int g)
{
    const __m512i idx = _mm512_add_epi16(
        _mm512_set1_epi16((short)(4 * g)),
        _mm512_setr_epi64(0, 0, 0x0001000100010001, 0x0001000100010001, 0x0002000200020002,
                          0x0002000200020002, 0x0003000300030003, 0x0003000300030003));
    return _mm512_permutexvar_epi16(idx, _mm512_castsi256_si512(sc16));
}

/* Q6_K against R activation rows: each half super-block's 128 quants unpacked in two registers,
 * 64 elements each: the low nibbles of its 64 ql bytes side by side (the 32 at ql then the 32
 * after), then their high nibbles, each joined with its two bits of the 32 qh bytes broadcast to
 * both halves (shifted per half by a variable word shift); per row the products, times the
 * scales, into its sum. The scalar code's sums and float chain, so bitwise its result, in about
 * half the instructions of unpacking each 32-element part apart (one core streams Q6_K
 * compute-bound otherwise, bench/README.md). */
static inline __attribute__((always_inline)) void s_q6_k_rows(const void *w, const void *const *qx,
                                                              int R, int64_t n, float *out)
{
    const unsigned char *p = w;
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    /* the two bits of parts 0 | 1 at bit 4: qh << 4 | qh << 2; of parts 2 | 3: qh | qh >> 2 */
    const __m512i sh01 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i sh23 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    float sum[PL_CPU_QDOT_ROWS];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        sum[r] = 0.0f;
    for (int64_t b = 0; b < n / PL_QK_K; b++, p += sizeof(pl_block_q6_k_t)) {
        const uint8_t *ql = p, *qhp = p + 128;
        __m512i isum[PL_CPU_QDOT_ROWS];
        for (size_t l = 0; l < sizeof(pl_block_q6_k_t); l += 64)
            _mm_prefetch((const char *)p + 4096 + l, _MM_HINT_T0);
        __m256i sc16 =
            _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(p + 192)));
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            isum[r] = _mm512_setzero_si512();
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m512i l = _mm512_loadu_si512((const void *)(ql + 64 * h));
            __m512i qh = _mm512_broadcast_i64x4(
                _mm256_loadu_si256((const __m256i *)(const void *)(qhp + 32 * h)));
            /* (a & b) | c: the low nibbles, then the two high bits */
            __m512i q01 = _mm512_ternarylogic_epi32(
                l, m4, _mm512_and_si512(_mm512_sllv_epi16(qh, sh01), m30), 0xEA);
            __m512i q23 =
                _mm512_ternarylogic_epi32(_mm512_srli_epi16(l, 4), m4,
                                          _mm512_and_si512(_mm512_srlv_epi16(qh, sh23), m30), 0xEA);
#pragma GCC unroll 2
            for (int pair = 0; pair < 2; pair++) {
                __m512i q = pair ? q23 : q01;
                __m512i scv = s_scales4(sc16, 2 * h + pair);
#pragma GCC unroll 4
                for (int r = 0; r < R; r++) {
                    const int8_t *xq = ((const pl_q8k_act_t *)qx[r] + b)->qs + 128 * h + 64 * pair;
                    __m512i prod = _mm512_maddubs_epi16(q, _mm512_loadu_si512((const void *)xq));
                    isum[r] = _mm512_add_epi32(isum[r], _mm512_madd_epi16(prod, scv));
                }
            }
        }
        float dw = s_half(p + 208);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) { /* sum_j sc[j] * (q . x - 32 bsums[j]), exact in int32 */
            const pl_q8k_act_t *a = (const pl_q8k_act_t *)qx[r] + b;
            __m256i o = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)a->bsums));
            __m256i t = _mm256_add_epi32(_mm512_castsi512_si256(isum[r]),
                                         _mm512_extracti64x4_epi64(isum[r], 1));
            t = _mm256_sub_epi32(t, _mm256_slli_epi32(o, 5));
            __m128i u = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
            u = _mm_add_epi32(u, _mm_shuffle_epi32(u, 0x4E));
            int si = _mm_cvtsi128_si32(_mm_add_epi32(u, _mm_shuffle_epi32(u, 0xB1)));
            sum[r] = fmaf(a->d * dw, (float)si, sum[r]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        out[r] = sum[r];
}

void pl_cpu_q6_k_rows_avx512(const void *w, const void *const *qx, int nr, int64_t n, float *out)
{
    switch (nr) {
    case 1: s_q6_k_rows(w, qx, 1, n, out); break;
    case 2: s_q6_k_rows(w, qx, 2, n, out); break;
    case 3: s_q6_k_rows(w, qx, 3, n, out); break;
    default: s_q6_k_rows(w, qx, 4, n, out); break;
    }
}

float pl_cpu_q6_k_dot_avx512(const void *w, const void *qx, int64_t n)
{
    float out;
    s_q6_k_rows(w, &qx, 1, n, &out);
    return out;
}

/* Q8_0, Q4_0, Q4_K, Q5_K: the AVX2 kernels (or, with VNNI, cpu_qdot_vnni.c's). 512-bit versions of them (a super-block's chunk per
 * register, its halves joined across lanes) measured slower on an AVX-512 Xeon: the joins and
 * the scale broadcasts cost more than the wider multiply-adds save. */
const pl_cpu_qdot_table_t pl_cpu_qdot_avx512 = {
    pl_cpu_q8_0_dot_avx2,   pl_cpu_q4_0_dot_avx2,  pl_cpu_q4_k_dot_avx2,  pl_cpu_q5_k_dot_avx2,
    pl_cpu_q6_k_dot_avx512, pl_cpu_q8_0_rows_avx2, pl_cpu_q4_0_rows_avx2, pl_cpu_q4_k_rows_avx2,
    pl_cpu_q5_k_rows_avx2,  pl_cpu_q6_k_rows_avx512};
#pragma GCC pop_options
#endif
