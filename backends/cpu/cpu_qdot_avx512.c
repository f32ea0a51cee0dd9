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

static inline __m512i s_join(__m256i lo, __m256i hi)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}


/* Four int8 scales, each over 8 int16 lanes (one 16-element sub-block each). */
static inline __m512i s_scales4(const int8_t *sc)
{
    int32_t four;
    memcpy(&four, sc, 4);
    const __m256i rep = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, /* lo */
                                         2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    return _mm512_cvtepi8_epi16(_mm256_shuffle_epi8(_mm256_set1_epi32(four), rep));
}

/* Q6_K against R activation rows: each pair of 32-element parts joined in one register and
 * unpacked once with its four scales; per row the products, times the scales, into its sum. */
static inline __attribute__((always_inline)) void s_q6_k_rows(const void *w, const void *const *qx,
                                                              int R, int64_t n, float *out)
{
    const unsigned char *p = w;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
    float sum[PL_CPU_QDOT_ROWS];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        sum[r] = 0.0f;
    for (int64_t b = 0; b < n / PL_QK_K; b++, p += sizeof(pl_block_q6_k_t)) {
        const uint8_t *ql = p, *qhp = p + 128;
        const int8_t *sc = (const int8_t *)(p + 192);
        __m512i isum[PL_CPU_QDOT_ROWS];
        int off[PL_CPU_QDOT_ROWS];
        for (size_t l = 0; l < sizeof(pl_block_q6_k_t); l += 64)
            _mm_prefetch((const char *)p + 4096 + l, _MM_HINT_T0);
        __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)sc));
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) { /* sum_j sc[j] * bsums[j], exact in int32 */
            const pl_q8k_act_t *a = (const pl_q8k_act_t *)qx[r] + b;
            __m256i o = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)a->bsums));
            __m128i t = _mm_add_epi32(_mm256_castsi256_si128(o), _mm256_extracti128_si256(o, 1));
            t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4E));
            off[r] = _mm_cvtsi128_si32(_mm_add_epi32(t, _mm_shuffle_epi32(t, 0xB1)));
            isum[r] = _mm512_setzero_si512();
        }
        for (int h = 0; h < 2; h++) {
            __m256i l0 = _mm256_loadu_si256((const __m256i *)(ql + 64 * h));
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 64 * h + 32));
            __m256i qh = _mm256_loadu_si256((const __m256i *)(qhp + 32 * h));
            __m256i q0 = _mm256_or_si256(_mm256_and_si256(l0, m4),
                                         _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4));
            __m256i q1 = _mm256_or_si256(
                _mm256_and_si256(l1, m4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4));
            __m256i q2 = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4));
            __m256i q3 = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4));
#pragma GCC unroll 2
            for (int pair = 0; pair < 2; pair++) {
                __m512i q = pair ? s_join(q2, q3) : s_join(q0, q1);
                __m512i scv = s_scales4(sc + 8 * h + 4 * pair);
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
        for (int r = 0; r < R; r++)
            sum[r] = fmaf(((const pl_q8k_act_t *)qx[r] + b)->d * dw,
                          (float)(_mm512_reduce_add_epi32(isum[r]) - 32 * off[r]), sum[r]);
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
