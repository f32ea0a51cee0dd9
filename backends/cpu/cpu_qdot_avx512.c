/* AVX-512 (F + BW) quantized dots: two 32-blocks or one 64-element chunk per register; compiled
 * for that target whatever the build's flags, called only when cpuid reports it. The float chain
 * is the scalar code's, so the results are bitwise the scalar ones. */
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

static inline int s_hsum256(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

/* 16 int32 sums of products of signed bytes w and x (w never -128). */
static inline __m512i s_dot_i8(__m512i w, __m512i x)
{
    __mmask64 neg = _mm512_movepi8_mask(w);
    __m512i sx = _mm512_mask_sub_epi8(x, neg, _mm512_setzero_si512(), x);
    return _mm512_madd_epi16(_mm512_maddubs_epi16(_mm512_abs_epi8(w), sx),
                             _mm512_set1_epi16(1));
}

static inline __m256i s_nibbles(const unsigned char *p)
{
    __m128i b = _mm_loadu_si128((const __m128i *)p), m = _mm_set1_epi8(0x0F);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m), _mm_and_si128(b, m));
}

static float s_q32(const void *w, const void *qx, int64_t n, bool four)
{
    const unsigned char *p = w;
    const pl_q8_act_t *a = qx;
    size_t bb = four ? sizeof(pl_block_q4_0_t) : sizeof(pl_block_q8_0_t);
    int64_t nb = n / PL_QK8_0, b = 0;
    float sum = 0.0f;
    for (; b + 2 <= nb; b += 2, p += 2 * bb) {
        __m512i qw;
        if (four)
            qw = _mm512_sub_epi8(s_join(s_nibbles(p + 2), s_nibbles(p + bb + 2)),
                                 _mm512_set1_epi8(8));
        else
            qw = s_join(_mm256_loadu_si256((const __m256i *)(p + 2)),
                        _mm256_loadu_si256((const __m256i *)(p + bb + 2)));
        __m512i qa = s_join(_mm256_loadu_si256((const __m256i *)a[b].qs),
                            _mm256_loadu_si256((const __m256i *)a[b + 1].qs));
        __m512i dot = s_dot_i8(qw, qa);
        sum = fmaf(s_half(p) * a[b].d, (float)s_hsum256(_mm512_castsi512_si256(dot)), sum);
        sum = fmaf(s_half(p + bb) * a[b + 1].d,
                   (float)s_hsum256(_mm512_extracti64x4_epi64(dot, 1)), sum);
    }
    if (b < nb) { /* the odd last block: its other half stays zero */
        __m256i q8 = four ? _mm256_sub_epi8(s_nibbles(p + 2), _mm256_set1_epi8(8))
                          : _mm256_loadu_si256((const __m256i *)(p + 2));
        __m512i qw = s_join(q8, _mm256_setzero_si256());
        __m512i qa = s_join(_mm256_loadu_si256((const __m256i *)a[b].qs), _mm256_setzero_si256());
        __m512i dot = s_dot_i8(qw, qa);
        sum = fmaf(s_half(p) * a[b].d, (float)s_hsum256(_mm512_castsi512_si256(dot)), sum);
    }
    return sum;
}

static float s_q8_0(const void *w, const void *qx, int64_t n)
{
    return s_q32(w, qx, n, false);
}

static float s_q4_0(const void *w, const void *qx, int64_t n)
{
    return s_q32(w, qx, n, true);
}

/* Two int16 scales, each over 16 lanes (one 32-element sub-block each). */
static inline __m512i s_scales2(int a, int b)
{
    return s_join(_mm256_set1_epi16((short)a), _mm256_set1_epi16((short)b));
}

static float s_k45(const void *w, const void *qx, int64_t n, bool five)
{
    const unsigned char *p = w;
    const pl_q8k_act_t *a = qx;
    size_t bb = five ? sizeof(pl_block_q5_k_t) : sizeof(pl_block_q4_k_t);
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    float sum = 0.0f;
    for (int64_t b = 0; b < n / PL_QK_K; b++, p += bb) {
        const uint8_t *scales = p + 4, *qs = p + (five ? 48 : 16);
        __m256i qh = five ? _mm256_loadu_si256((const __m256i *)(p + 16)) : _mm256_setzero_si256();
        __m512i isum = _mm512_setzero_si512();
        int summ = 0;
        for (int c = 0; c < 4; c++) {
            uint8_t sc0, m0, sc1, m1;
            pl_k_scale_min(2 * c, scales, &sc0, &m0);
            pl_k_scale_min(2 * c + 1, scales, &sc1, &m1);
            __m256i raw = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
            __m256i lo = _mm256_and_si256(raw, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
            if (five) {
                __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), one);
                __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), one);
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(h0, 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(h1, 4));
            }
            __m512i x = _mm512_loadu_si512((const void *)(a[b].qs + 64 * c));
            __m512i prod = _mm512_maddubs_epi16(s_join(lo, hi), x);
            isum = _mm512_add_epi32(isum, _mm512_madd_epi16(prod, s_scales2(sc0, sc1)));
            summ += m0 * (a[b].bsums[4 * c] + a[b].bsums[4 * c + 1]) +
                    m1 * (a[b].bsums[4 * c + 2] + a[b].bsums[4 * c + 3]);
        }
        sum = fmaf(a[b].d,
                   fmaf(s_half(p), (float)_mm512_reduce_add_epi32(isum),
                        -(s_half(p + 2) * (float)summ)),
                   sum);
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

/* Four int8 scales, each over 8 int16 lanes (one 16-element sub-block each). */
static inline __m512i s_scales4(const int8_t *sc)
{
    int32_t four;
    memcpy(&four, sc, 4);
    const __m256i rep = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, /* lo */
                                         2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    return _mm512_cvtepi8_epi16(_mm256_shuffle_epi8(_mm256_set1_epi32(four), rep));
}

static float s_q6_k(const void *w, const void *qx, int64_t n)
{
    const unsigned char *p = w;
    const pl_q8k_act_t *a = qx;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
    float sum = 0.0f;
    for (int64_t b = 0; b < n / PL_QK_K; b++, p += sizeof(pl_block_q6_k_t)) {
        const uint8_t *ql = p, *qhp = p + 128;
        const int8_t *sc = (const int8_t *)(p + 192);
        __m512i isum = _mm512_setzero_si512();
        int off = 0;
        for (int j = 0; j < 16; j++)
            off += sc[j] * a[b].bsums[j];
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
            for (int pair = 0; pair < 2; pair++) {
                __m512i q = pair ? s_join(q2, q3) : s_join(q0, q1);
                __m512i x = _mm512_loadu_si512((const void *)(a[b].qs + 128 * h + 64 * pair));
                __m512i prod = _mm512_maddubs_epi16(q, x);
                isum = _mm512_add_epi32(isum, _mm512_madd_epi16(prod, s_scales4(sc + 8 * h + 4 * pair)));
            }
        }
        sum = fmaf(a[b].d * s_half(p + 208), (float)(_mm512_reduce_add_epi32(isum) - 32 * off),
                   sum);
    }
    return sum;
}

const pl_cpu_qdot_table_t pl_cpu_qdot_avx512 = {s_q8_0, s_q4_0, s_q4_k, s_q5_k, s_q6_k};
#pragma GCC pop_options
#endif
