/* AVX2 quantized dots (with FMA and F16C), compiled for that target whatever the build's flags;
 * called only when cpuid reports those extensions: cpu_qdot_x86_tmpl.h's kernels with AVX2's
 * multiply-adds, Q6_K, and the activation quantizer. The integer sums are vectorised; the float
 * chain is the scalar code's, so the results are bitwise the scalar ones. */
#if defined(__x86_64__)
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#define S_SUFFIX avx2
#define S_DOT_U8(u, s) _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1))
#define S_ACC_I16(acc, a, b) _mm256_add_epi32(acc, _mm256_madd_epi16(a, b))
#define S_TWO_CHAINS(R) 1 /* S_ACC_I16 is two instructions either way */
#include "backends/cpu/cpu_qdot_x86_tmpl.h"

/* Q6_K against R activation rows: unsigned 6-bit quants unpacked once and dotted as they are;
 * the offset 32 comes off through each row's bsums. */
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
        __m256i isum[PL_CPU_QDOT_ROWS];
        int off[PL_CPU_QDOT_ROWS];
        for (size_t l = 0; l < sizeof(pl_block_q6_k_t); l += 64)
            _mm_prefetch((const char *)p + S_PF + l, _MM_HINT_T0);
        __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)sc));
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) { /* sum_j sc[j] * bsums[j], exact in int32 */
            const pl_q8k_act_t *a = (const pl_q8k_act_t *)qx[r] + b;
            off[r] = s_hsum_i32(
                _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)a->bsums)));
            isum[r] = _mm256_setzero_si256();
        }
        for (int h = 0; h < 2; h++) {
            __m256i l0 = _mm256_loadu_si256((const __m256i *)(ql + 64 * h));
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 64 * h + 32));
            __m256i qh = _mm256_loadu_si256((const __m256i *)(qhp + 32 * h));
            __m256i q[4] = {
                _mm256_or_si256(_mm256_and_si256(l0, m4),
                                _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4)),
                _mm256_or_si256(
                    _mm256_and_si256(l1, m4),
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4)),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4)),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4)),
            };
#pragma GCC unroll 4
            for (int part = 0; part < 4; part++) {
                int is = 8 * h + 2 * part;
                __m256i scv = _mm256_set_m128i(_mm_set1_epi16(sc[is + 1]), _mm_set1_epi16(sc[is]));
#pragma GCC unroll 4
                for (int r = 0; r < R; r++) {
                    const int8_t *xq = ((const pl_q8k_act_t *)qx[r] + b)->qs + 128 * h + 32 * part;
                    __m256i x = _mm256_loadu_si256((const __m256i *)xq);
                    isum[r] = _mm256_add_epi32(
                        isum[r], _mm256_madd_epi16(_mm256_maddubs_epi16(q[part], x), scv));
                }
            }
        }
        float dw = s_half(p + 208);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            sum[r] = fmaf(((const pl_q8k_act_t *)qx[r] + b)->d * dw,
                          (float)(s_hsum_i32(isum[r]) - 32 * off[r]), sum[r]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        out[r] = sum[r];
}

#define S_Q6_K(R) s_q6_k_rows(w, qx, R, n, out)
static S_ROWS_ENTRY(s_q6_k_rows_entry, S_Q6_K)

static float s_q6_k(const void *w, const void *qx, int64_t n)
{
    float out;
    s_q6_k_rows(w, &qx, 1, n, &out);
    return out;
}

/* ---- the activation quantizer: bitwise the scalar one (the same max, the same division and
 * reciprocal, round-to-nearest-even as lrintf, the same clamp) ---- */

/* n (a multiple of 32) values x as int8 quants at scale d = amax / 127 into qs; *d_p = d. */
static void s_quant_block(const float *x, int n, float *d_p, int8_t *qs)
{
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 mx = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8) /* max(|x|, acc): a NaN x leaves acc, as fmaxf does */
        mx = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask), mx);
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    float amax = _mm_cvtss_f32(m4), d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
    const __m256 vid = _mm256_set1_ps(id);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int i = 0; i < n; i += 32) {
        __m256i q0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i), vid));
        __m256i q1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8), vid));
        __m256i q2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 16), vid));
        __m256i q3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 24), vid));
        __m256i q = _mm256_packs_epi16(_mm256_packs_epi32(q0, q1), _mm256_packs_epi32(q2, q3));
        q = _mm256_max_epi8(_mm256_permutevar8x32_epi32(q, perm), _mm256_set1_epi8(-127));
        _mm256_storeu_si256((__m256i *)(qs + i), q);
    }
    *d_p = d;
}

void pl_cpu_qact_quantize_avx2(pl_wtype_t wt, const float *x, int64_t n, void *qx)
{
    if (wt == PL_WT_Q8_0 || wt == PL_WT_Q4_0) {
        pl_q8_act_t *a = qx;
        for (int64_t b = 0; b < n / PL_QK8_0; b++)
            s_quant_block(x + b * PL_QK8_0, PL_QK8_0, &a[b].d, a[b].qs);
        return;
    }
    pl_q8k_act_t *a = qx;
    const __m256i one8 = _mm256_set1_epi8(1), one16 = _mm256_set1_epi16(1);
    for (int64_t b = 0; b < n / PL_QK_K; b++) {
        s_quant_block(x + b * PL_QK_K, PL_QK_K, &a[b].d, a[b].qs);
        for (int j = 0; j < PL_QK_K; j += 32) { /* two sums of 16 per 32 quants */
            __m256i q = _mm256_loadu_si256((const __m256i *)(a[b].qs + j));
            __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(one8, q), one16);
            s = _mm256_hadd_epi32(s, s);
            s = _mm256_hadd_epi32(s, s);
            a[b].bsums[j / 16] = (int16_t)_mm256_cvtsi256_si32(s);
            a[b].bsums[j / 16 + 1] = (int16_t)_mm_cvtsi128_si32(_mm256_extracti128_si256(s, 1));
        }
    }
}

const pl_cpu_qdot_table_t pl_cpu_qdot_avx2 = {
    pl_cpu_q8_0_dot_avx2,  pl_cpu_q4_0_dot_avx2,  pl_cpu_q4_k_dot_avx2,  pl_cpu_q5_k_dot_avx2,
    s_q6_k,                pl_cpu_q8_0_rows_avx2, pl_cpu_q4_0_rows_avx2, pl_cpu_q4_k_rows_avx2,
    pl_cpu_q5_k_rows_avx2, s_q6_k_rows_entry};
#pragma GCC pop_options
#endif
