/* Batched decode's quantized block products (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K) in 512-bit AVX-512
 * VNNI: each weight block read and unpacked once for up to 8 activation rows, bitwise one row's.
 *
 * Why it equals the one-row dot: cpu_qdot.c defines every type's result as exact integer sums per
 * float lane, then one fixed fmaf chain per lane in block order and one fixed sum of the lanes.
 * The integer sums here are grouped differently (64 bytes per instruction, not 32) but integer
 * addition is exact, and the float steps are the reference's, lane for lane:
 *   - Q8_0 / Q4_0: a zmm holds blocks b (lanes 0-7) and b + 1 (lanes 8-15), exactly the
 *     reference's 16 lanes by block parity. vpdpbusd wants unsigned times signed bytes, so the
 *     activations are offset by 128 (x ^ 0x80) and 128 * (the weights' sum of 4), computed once
 *     per block for every row, starts the sum: s = sum (x + 128) w - 128 sum w = sum x w.
 *   - Q4_K / Q5_K: a zmm holds sub-blocks 2c (low half) and 2c + 1 (high half) of a 64-element
 *     chunk; the halves' int32 lanes add to the reference's isum_m. Two rows then share one zmm
 *     for the float steps (row 2i in the low half, 2i + 1 in the high one).
 *   - Q6_K: the reference sums a block's integers exactly, then one fmaf per block; so here.
 * AMX (TDPBUSD) was weighed and left out: a tile sums whole 64-byte rows, so it cannot give the
 * reference's per-4-element lanes without 16x wasted work, and a different lane split would
 * change every instruction set's results (and batch 1's speed). Compiled for its target; called
 * only where cpuid reports AVX-512 VNNI (cpu_qdot.c's dispatch). */
#if defined(__x86_64__)
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")
#include "backends/cpu/cpu_qdot.h"

#include "common/util.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

/* Most activation rows one pass over a weight row takes: 8 rows' accumulators fit the 32 zmm
 * registers beside the unpacked block. */
#define S_ROWS 8
/* Bytes ahead of the block being read that the kernels prefetch (as cpu_qdot_x86_tmpl.h). */
#define S_PF 4096

static inline float s_half(const unsigned char *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* Two 256-bit halves as one zmm. */
static inline __m512i s_pair_i(const void *lo, const void *hi)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)lo)),
                              _mm256_loadu_si256((const __m256i *)hi), 1);
}

static inline __m512 s_pair_ps(float lo, float hi)
{
    return _mm512_castpd_ps(
        _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(_mm256_set1_ps(lo))),
                           _mm256_castps_pd(_mm256_set1_ps(hi)), 1));
}

/* The high 8 lanes (AVX-512 F only, no DQ). */
static inline __m256 s_hi8(__m512 v)
{
    return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
}

/* ((v0 + v4) + (v1 + v5)) + ((v2 + v6) + (v3 + v7)) of the 8 lanes of v: u = the halves' sum,
 * then (u0 + u1) + (u2 + u3). cpu_qdot.c's Q8_0 / Q4_0 lane sum ends so. */
static inline float s_sum8_q32(__m256 v)
{
    __m128 u = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    u = _mm_add_ps(u, _mm_movehdup_ps(u));
    return _mm_cvtss_f32(_mm_add_ss(u, _mm_movehl_ps(u, u)));
}

/* ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)): cpu_qdot.c's s_k_lanes_sum. */
static inline float s_sum8_k(__m256 v)
{
    __m128 u = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    u = _mm_add_ps(u, _mm_movehl_ps(u, u));
    return _mm_cvtss_f32(_mm_add_ss(u, _mm_movehdup_ps(u)));
}

/* Q4_0's blocks b and b + 1 as signed quants (q - 8), element i of each block at byte i of its
 * half: a block's 16 bytes in both 128-bit lanes of its half, the second lane's high nibbles. */
static inline __m512i s_q4_0_pair(const unsigned char *qs0, const unsigned char *qs1)
{
    __m512i v = _mm512_inserti64x4(
        _mm512_castsi256_si512(
            _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)qs0))),
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)qs1)), 1);
    v = _mm512_srlv_epi16(v, _mm512_setr_epi64(0, 0, 0x0004000400040004LL, 0x0004000400040004LL, 0,
                                               0, 0x0004000400040004LL, 0x0004000400040004LL));
    return _mm512_sub_epi8(_mm512_and_si512(v, _mm512_set1_epi8(0x0F)), _mm512_set1_epi8(8));
}

/* Q8_0 / Q4_0, O (1 or 2) weight rows at p, stride rb, of nb blocks each against R activation
 * rows: block pairs in zmm, an odd last block in the reference's scalar code. Two weight rows
 * share each activation pair's loads, offset and scales (the float steps are most of the work:
 * the reference's fmaf per 4 elements). out[o * S_ROWS + r]. */
static inline __attribute__((always_inline)) void s_q32(const unsigned char *p, size_t rb, int O,
                                                        int64_t nb, const void *const *qx, int R,
                                                        bool four, float *out)
{
    const size_t bb = four ? sizeof(pl_block_q4_0_t) : sizeof(pl_block_q8_0_t);
    const __m512i c80 = _mm512_set1_epi8((char)0x80);
    __m512 acc[2][S_ROWS];
    int64_t b = 0;
#pragma GCC unroll 2
    for (int o = 0; o < O; o++)
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
            acc[o][r] = _mm512_setzero_ps();
    for (; b + 2 <= nb; b += 2) {
        __m512i w[2], base[2];
        __m512 dw[2];
#pragma GCC unroll 2
        for (int o = 0; o < O; o++) {
            const unsigned char *p0 = p + (size_t)o * rb + (size_t)b * bb, *p1 = p0 + bb;
            _mm_prefetch((const char *)p0 + S_PF, _MM_HINT_T0);
            w[o] = four ? s_q4_0_pair(p0 + 2, p1 + 2) : s_pair_i(p0 + 2, p1 + 2);
            /* -128 * (sum of each 4 weights): what the +128 on the activations adds */
            base[o] = _mm512_sub_epi32(_mm512_setzero_si512(),
                                       _mm512_dpbusd_epi32(_mm512_setzero_si512(), c80, w[o]));
            dw[o] = s_pair_ps(s_half(p0), s_half(p1));
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const pl_q8_act_t *a = (const pl_q8_act_t *)qx[r] + b;
            __m512i xu = _mm512_xor_si512(s_pair_i(a[0].qs, a[1].qs), c80);
            __m512 dx = s_pair_ps(a[0].d, a[1].d);
#pragma GCC unroll 2
            for (int o = 0; o < O; o++) {
                __m512i sum = _mm512_dpbusd_epi32(base[o], xu, w[o]);
                acc[o][r] = _mm512_fmadd_ps(_mm512_mul_ps(dw[o], dx), _mm512_cvtepi32_ps(sum),
                                            acc[o][r]);
            }
        }
    }
#pragma GCC unroll 2
    for (int o = 0; o < O; o++)
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            if (b < nb) { /* the last of an odd count, as the reference does it */
                float lanes[16];
                _mm512_storeu_ps(lanes, acc[o][r]);
                pl_cpu_q32_tail(p + (size_t)o * rb, qx[r], b, nb, four, lanes);
                out[o * S_ROWS + r] = pl_cpu_q32_lanes_sum(lanes);
                continue;
            }
            out[o * S_ROWS + r] =
                s_sum8_q32(_mm256_add_ps(_mm512_castps512_ps256(acc[o][r]), s_hi8(acc[o][r])));
        }
}

/* A K-quant super-block's 8 6-bit scales (bytes 0-7) and 8 mins (8-15) from their 12 bytes at q
 * (cpu_qdot_x86_tmpl.h's s_k_scales). Reads 16 bytes: the block's quants follow its scales. */
static inline __m128i s_k_scales(const uint8_t *q)
{
    __m128i v = _mm_loadu_si128((const __m128i *)(const void *)q);
    __m128i lo = _mm_srlv_epi32(_mm_shuffle_epi32(v, 0x98), _mm_setr_epi32(0, 0, 0, 4));
    lo = _mm_and_si128(lo, _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    __m128i hi = _mm_srli_epi32(_mm_shuffle_epi32(v, 0x50), 2);
    hi = _mm_and_si128(hi, _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
    return _mm_or_si128(lo, hi);
}

/* Q4_K / Q5_K, one weight row of nsb super-blocks against R activation rows. Per chunk c of 64
 * elements: its 32 bytes in both halves, the low half's low nibbles (sub-block 2c) and the high
 * half's high nibbles (2c + 1), with their scales as int16 per half; per row one
 * multiply-add of bytes and one of words into 16 int32 lanes. Per super-block and pair of rows:
 * the halves added into the reference's isum lanes, the mins' sums beside them, and the
 * reference's fmaf pair per lane (fnmadd(a, b, c) rounds c - a * b once, as fmaf(-a, b, c)). */
static inline __attribute__((always_inline)) void
s_k45(const unsigned char *p, int64_t nsb, const void *const *qx, int R, bool five, float *out)
{
    const size_t bb = five ? sizeof(pl_block_q5_k_t) : sizeof(pl_block_q4_k_t);
    const __m512i m4 = _mm512_set1_epi8(0x0F), b16 = _mm512_set1_epi8(16);
    const __m512i nib = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    enum { P = (S_ROWS + 1) / 2 };
    __m512 acc[P];
    const pl_q8k_act_t *act[S_ROWS + 1];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
        act[r] = qx[r];
    act[R] = act[R - 1]; /* an odd count: the last pair's high half repeats its row, unused */
#pragma GCC unroll 4
    for (int i = 0; i < (R + 1) / 2; i++)
        acc[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nsb; b++, p += bb) {
        const uint8_t *qs = p + (five ? 48 : 16);
        for (size_t l = 0; l < bb; l += 64)
            _mm_prefetch((const char *)p + S_PF + l, _MM_HINT_T0);
        __m512i qh = five ? _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(p + 16)))
                          : _mm512_setzero_si512();
        __m128i scm = s_k_scales(p + 4);
        __m512i sc16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(scm)); /* words 0-7: scales */
        __m512i mn2 = _mm512_broadcast_i64x4(
            _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(scm, scm))); /* m0 m0 m1 m1 .. per half */
        __m512i isum[S_ROWS];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
            isum[r] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            __m512i raw =
                _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * c)));
            __m512i q = _mm512_and_si512(_mm512_srlv_epi16(raw, nib), m4);
            if (five) {
                __m512i bit = _mm512_inserti64x4(
                    _mm512_castsi256_si512(_mm256_set1_epi8((char)(1 << (2 * c)))),
                    _mm256_set1_epi8((char)(1 << (2 * c + 1))), 1);
                q = _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(qh, bit), q, b16);
            }
            __m512i sc = _mm512_permutexvar_epi16(
                _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16((short)(2 * c))),
                                   _mm256_set1_epi16((short)(2 * c + 1)), 1),
                sc16);
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) {
                __m512i x = _mm512_loadu_si512((const void *)(act[r][b].qs + 64 * c));
                isum[r] = _mm512_dpwssd_epi32(isum[r], _mm512_maddubs_epi16(q, x), sc);
            }
        }
        float dw = s_half(p), dmin = s_half(p + 2);
        const __m512 vdw = _mm512_set1_ps(dw), vdmin = _mm512_set1_ps(dmin);
#pragma GCC unroll 4
        for (int i = 0; i < (R + 1) / 2; i++) {
            const pl_q8k_act_t *a0 = act[2 * i] + b, *a1 = act[2 * i + 1] + b;
            __m512i i0 = isum[2 * i], i1 = 2 * i + 1 < R ? isum[2 * i + 1] : i0;
            /* [low halves of rows 2i, 2i+1] + [their high halves]: isum_m of each row */
            __m512i is = _mm512_add_epi32(_mm512_shuffle_i64x2(i0, i1, 0x44),
                                          _mm512_shuffle_i64x2(i0, i1, 0xEE));
            __m512i ms = _mm512_madd_epi16(mn2, s_pair_i(a0->bsums, a1->bsums));
            __m512 dx = s_pair_ps(a0->d, a1->d);
            __m512 t = _mm512_fmadd_ps(_mm512_mul_ps(dx, vdw), _mm512_cvtepi32_ps(is), acc[i]);
            acc[i] = _mm512_fnmadd_ps(_mm512_mul_ps(dx, vdmin), _mm512_cvtepi32_ps(ms), t);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        __m512 a = acc[r / 2];
        out[r] = s_sum8_k(r % 2 ? s_hi8(a) : _mm512_castps512_ps256(a));
    }
}

/* Q6_K, one weight row of nsb super-blocks against R activation rows: per half h of a block,
 * elements 128h + 0..63 and 128h + 64..127 as two zmm of unsigned 6-bit quants (low nibbles and
 * two bits of qh, as cpu_qdot_avx2.c's parts 0-1 and 2-3), each 128-bit lane one sub-block of
 * 16 with its scale; per row the exact sum of scale * quant * x, less 32 * (scale . bsums): the
 * reference's integer sumi, then its one fmaf per block. */
static inline __attribute__((always_inline)) void s_q6_k(const unsigned char *p, int64_t nsb,
                                                         const void *const *qx, int R, float *out)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F), m3 = _mm512_set1_epi8(3);
    const __m512i sh01 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    const __m512i sh23 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1);
    /* word w of a zmm is in 128-bit lane w / 8 */
    const __m512i lane =
        _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_setr_epi64x(0, 0, 0x0001000100010001LL,
                                                                     0x0001000100010001LL)),
                           _mm256_setr_epi64x(0x0002000200020002LL, 0x0002000200020002LL,
                                              0x0003000300030003LL, 0x0003000300030003LL),
                           1);
    float sum[S_ROWS];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
        sum[r] = 0.0f;
    for (int64_t b = 0; b < nsb; b++, p += sizeof(pl_block_q6_k_t)) {
        const uint8_t *ql = p, *qhp = p + 128;
        for (size_t l = 0; l < sizeof(pl_block_q6_k_t); l += 64)
            _mm_prefetch((const char *)p + S_PF + l, _MM_HINT_T0);
        __m256i sc16 =
            _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(p + 192)));
        __m512i scz = _mm512_castsi256_si512(sc16);
        __m512i isum[S_ROWS];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) { /* -32 * sum_j sc_j * bsums_j, in the low half */
            const pl_q8k_act_t *a = (const pl_q8k_act_t *)qx[r] + b;
            __m256i off = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)a->bsums));
            isum[r] = _mm512_zextsi256_si512(
                _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(off, 5)));
        }
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m512i l = _mm512_loadu_si512((const void *)(ql + 64 * h));
            __m512i qh =
                _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qhp + 32 * h)));
            __m512i z0 = _mm512_or_si512(
                _mm512_and_si512(l, m4),
                _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, sh01), m3), 4));
            __m512i z1 = _mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, sh23), m3), 4));
            __m512i s0 = _mm512_permutexvar_epi16(
                _mm512_add_epi16(lane, _mm512_set1_epi16((short)(8 * h))), scz);
            __m512i s1 = _mm512_permutexvar_epi16(
                _mm512_add_epi16(lane, _mm512_set1_epi16((short)(8 * h + 4))), scz);
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) {
                const int8_t *xq = ((const pl_q8k_act_t *)qx[r] + b)->qs + 128 * h;
                __m512i x0 = _mm512_loadu_si512((const void *)xq);
                __m512i x1 = _mm512_loadu_si512((const void *)(xq + 64));
                isum[r] = _mm512_dpwssd_epi32(isum[r], _mm512_maddubs_epi16(z0, x0), s0);
                isum[r] = _mm512_dpwssd_epi32(isum[r], _mm512_maddubs_epi16(z1, x1), s1);
            }
        }
        float dw = s_half(p + 208);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
            sum[r] = fmaf(((const pl_q8k_act_t *)qx[r] + b)->d * dw,
                          (float)_mm512_reduce_add_epi32(isum[r]), sum[r]);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
        out[r] = sum[r];
}

/* (weight rows at w, stride rb, how many of them O, activations, their count R, k, out): O
 * weight rows at once where the kernel takes two, else O = 1 */
#define S_Q8_0(w, rb, O, qx, R, k, out) s_q32(w, rb, O, (k) / PL_QK8_0, qx, R, false, out)
#define S_Q4_0(w, rb, O, qx, R, k, out) s_q32(w, rb, O, (k) / PL_QK8_0, qx, R, true, out)
#define S_Q4_K(w, rb, O, qx, R, k, out) s_k45(w, (k) / PL_QK_K, qx, R, false, out)
#define S_Q5_K(w, rb, O, qx, R, k, out) s_k45(w, (k) / PL_QK_K, qx, R, true, out)
#define S_Q6_K(w, rb, O, qx, R, k, out) s_q6_k(w, (k) / PL_QK_K, qx, R, out)

/* Every weight row o < no against R activation rows, `step` (1 or 2) weight rows per call; the
 * loop inside each row count's instance so the kernel inlines with its registers. */
#define S_CASE(R, body, step)                                                                      \
    case R: {                                                                                      \
        int o = 0;                                                                                 \
        for (; (step) == 2 && o + 2 <= no; o += 2) {                                               \
            body((const unsigned char *)w0 + (size_t)o * rb, rb, 2, x + r0, R, k, out);            \
            for (int r = 0; r < R; r++) {                                                          \
                y[r0 + r][o] = out[r];                                                             \
                y[r0 + r][o + 1] = out[S_ROWS + r];                                                \
            }                                                                                      \
        }                                                                                          \
        for (; o < no; o++) {                                                                      \
            body((const unsigned char *)w0 + (size_t)o * rb, rb, 1, x + r0, R, k, out);            \
            for (int r = 0; r < R; r++)                                                            \
                y[r0 + r][o] = out[r];                                                             \
        }                                                                                          \
    } break;

/* The GEMM's block product (cpu_gemm.h's slot) in groups of S_ROWS activation rows (the
 * dispatch sends a lone row to the one-row kernels; a group of one here is what 9 or 17 rows
 * leave). */
#define S_ENTRY(type, body, step)                                                                  \
    void pl_cpu_##type##_block_b512(const void *const *x, int nr, const void *w0, size_t rb,      \
                                    int no, int k, float *const *y)                                \
    {                                                                                              \
        float out[2 * S_ROWS];                                                                     \
        for (int r0 = 0; r0 < nr; r0 += S_ROWS) {                                                  \
            switch (PL_MIN(S_ROWS, nr - r0)) {                                                     \
                S_CASE(1, body, step)                                                              \
                S_CASE(2, body, step)                                                              \
                S_CASE(3, body, step)                                                              \
                S_CASE(4, body, step)                                                              \
                S_CASE(5, body, step)                                                              \
                S_CASE(6, body, step)                                                              \
                S_CASE(7, body, step)                                                              \
                S_CASE(8, body, step)                                                              \
            }                                                                                      \
        }                                                                                          \
    }
S_ENTRY(q8_0, S_Q8_0, 2)
S_ENTRY(q4_0, S_Q4_0, 2)
S_ENTRY(q4_k, S_Q4_K, 1)
S_ENTRY(q5_k, S_Q5_K, 1)
S_ENTRY(q6_k, S_Q6_K, 1)

#pragma GCC pop_options
#endif
