/* AVX2 quantized dots (with FMA and F16C), compiled for that target whatever the build's flags;
 * called only when cpuid reports those extensions. The integer sums are vectorised; the float
 * chain is the scalar code's, so the results are bitwise the scalar ones. */
#if defined(__x86_64__)
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
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

static inline int s_hsum_i32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

/* 8 int32 sums of products of 32 signed bytes w and x (|w| <= 127 or -128 never met: w is a
 * quant in -127..127 or -8..7). */
static inline __m256i s_dot_i8(__m256i w, __m256i x)
{
    __m256i aw = _mm256_sign_epi8(w, w), sx = _mm256_sign_epi8(x, w);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), _mm256_set1_epi16(1));
}

/* 32 nibbles of 16 bytes: low nibbles first (elements 0..15), then high ones (16..31). */
static inline __m256i s_nibbles(const unsigned char *p)
{
    __m128i b = _mm_loadu_si128((const __m128i *)p), m = _mm_set1_epi8(0x0F);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m), _mm_and_si128(b, m));
}

/* [sum(v[0]), ..., sum(v[7])]: eight horizontal integer sums at once. */
static inline __m256i s_hsum8(const __m256i *v)
{
    __m256i h01 = _mm256_hadd_epi32(v[0], v[1]), h23 = _mm256_hadd_epi32(v[2], v[3]);
    __m256i h45 = _mm256_hadd_epi32(v[4], v[5]), h67 = _mm256_hadd_epi32(v[6], v[7]);
    __m256i lo = _mm256_hadd_epi32(h01, h23), hi = _mm256_hadd_epi32(h45, h67);
    return _mm256_add_epi32(_mm256_permute2x128_si256(lo, hi, 0x20),
                            _mm256_permute2x128_si256(lo, hi, 0x31));
}

/* Eight blocks side by side, block b0 + j in lane j (b0 a multiple of 8): the lanes' fmaf chains
 * of the scalar code, vectorised. */
static float s_q32(const void *w, const void *qx, int64_t n, bool four)
{
    const unsigned char *p = w;
    const pl_q8_act_t *a = qx;
    size_t bb = four ? sizeof(pl_block_q4_0_t) : sizeof(pl_block_q8_0_t);
    int64_t nb = n / PL_QK8_0, b0 = 0;
    __m256 acc = _mm256_setzero_ps();
    float lanes[8];
    for (; b0 + 8 <= nb; b0 += 8) {
        __m256i dots[8];
        uint16_t dh[8];
        float dx[8];
        for (int j = 0; j < 8; j++) {
            const unsigned char *pb = p + (size_t)(b0 + j) * bb;
            __m256i qw = four ? _mm256_sub_epi8(s_nibbles(pb + 2), _mm256_set1_epi8(8))
                              : _mm256_loadu_si256((const __m256i *)(pb + 2));
            dots[j] = s_dot_i8(qw, _mm256_loadu_si256((const __m256i *)a[b0 + j].qs));
            memcpy(&dh[j], pb, 2);
            dx[j] = a[b0 + j].d;
        }
        __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)dh)),
                                 _mm256_loadu_ps(dx));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s_hsum8(dots)), acc);
    }
    _mm256_storeu_ps(lanes, acc);
    pl_cpu_q32_tail(w, qx, b0, nb, four, lanes);
    return pl_cpu_q32_lanes_sum(lanes);
}

float pl_cpu_q8_0_dot_avx2(const void *w, const void *qx, int64_t n)
{
    return s_q32(w, qx, n, false);
}

float pl_cpu_q4_0_dot_avx2(const void *w, const void *qx, int64_t n)
{
    return s_q32(w, qx, n, true);
}

/* Q4_K / Q5_K: per 64-element chunk, two sub-blocks of 32 unsigned quants. */
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
        __m256i isum = _mm256_setzero_si256();
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
            __m256i x0 = _mm256_loadu_si256((const __m256i *)(a[b].qs + 64 * c));
            __m256i x1 = _mm256_loadu_si256((const __m256i *)(a[b].qs + 64 * c + 32));
            __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x0), _mm256_set1_epi16(sc0));
            __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x1), _mm256_set1_epi16(sc1));
            isum = _mm256_add_epi32(isum, _mm256_add_epi32(p0, p1));
            summ += m0 * (a[b].bsums[4 * c] + a[b].bsums[4 * c + 1]) +
                    m1 * (a[b].bsums[4 * c + 2] + a[b].bsums[4 * c + 3]);
        }
        sum = fmaf(a[b].d, fmaf(s_half(p), (float)s_hsum_i32(isum), -(s_half(p + 2) * (float)summ)),
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

/* Q6_K: unsigned 6-bit quants dotted as they are; the offset 32 comes off through the bsums. */
static float s_q6_k(const void *w, const void *qx, int64_t n)
{
    const unsigned char *p = w;
    const pl_q8k_act_t *a = qx;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
    float sum = 0.0f;
    for (int64_t b = 0; b < n / PL_QK_K; b++, p += sizeof(pl_block_q6_k_t)) {
        const uint8_t *ql = p, *qhp = p + 128;
        const int8_t *sc = (const int8_t *)(p + 192);
        __m256i isum = _mm256_setzero_si256();
        int off = 0;
        for (int j = 0; j < 16; j++)
            off += sc[j] * a[b].bsums[j];
        for (int h = 0; h < 2; h++) {
            __m256i l0 = _mm256_loadu_si256((const __m256i *)(ql + 64 * h));
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 64 * h + 32));
            __m256i qh = _mm256_loadu_si256((const __m256i *)(qhp + 32 * h));
            __m256i q[4] = {
                _mm256_or_si256(_mm256_and_si256(l0, m4),
                                _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4)),
                _mm256_or_si256(_mm256_and_si256(l1, m4),
                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4)),
            };
            for (int part = 0; part < 4; part++) {
                int is = 8 * h + 2 * part;
                __m256i x = _mm256_loadu_si256((const __m256i *)(a[b].qs + 128 * h + 32 * part));
                __m256i scv = _mm256_set_m128i(_mm_set1_epi16(sc[is + 1]), _mm_set1_epi16(sc[is]));
                isum = _mm256_add_epi32(isum,
                                        _mm256_madd_epi16(_mm256_maddubs_epi16(q[part], x), scv));
            }
        }
        sum = fmaf(a[b].d * s_half(p + 208), (float)(s_hsum_i32(isum) - 32 * off), sum);
    }
    return sum;
}

const pl_cpu_qdot_table_t pl_cpu_qdot_avx2 = {pl_cpu_q8_0_dot_avx2, pl_cpu_q4_0_dot_avx2, s_q4_k,
                                              s_q5_k, s_q6_k};
#pragma GCC pop_options
#endif
