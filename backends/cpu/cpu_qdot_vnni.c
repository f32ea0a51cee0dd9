/* The AVX-512 table's quantized dots on CPUs with AVX-512 VNNI: cpu_qdot_x86_tmpl.h's kernels with
 * vpdpbusd / vpdpwssd, one instruction where AVX2 needs a multiply-add and an add (or a second
 * multiply-add), the same exact integer sums; compiled for that target, called only when cpuid
 * reports it (pl_cpu_qdot_table); and for batch-1 Q4_0 and a pair of Q4_K / Q5_K rows, kernels in
 * 512-bit registers. Q6_K is cpu_qdot_avx512.c's. */
#if defined(__x86_64__)
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")
#define S_SUFFIX vnni
#define S_DOT_U8(u, s) _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s)
#define S_ACC_I16(acc, a, b) _mm256_dpwssd_epi32(acc, a, b)
#define S_TWO_CHAINS(R) ((R) >= 3) /* a lone row or two would wait on vpdpwssd */
#include "backends/cpu/cpu_qdot.h"

#include <immintrin.h>
#include <string.h>

/* ---- batch-1 Q4_0 in 512-bit registers ----
 * A zmm holds blocks b (lanes 0-7) and b + 1 (lanes 8-15), the reference's 16 lanes by block
 * parity (cpu_qdot.c), so one fmadd per pair of blocks and row. The nibbles stay unsigned
 * (0..15) for vpdpbusd, and the -8 comes off through the activations: each 4-element lane starts
 * from -8 times the sum of its 4 activation quants, s = -8 sum x + sum q x = sum (q - 8) x,
 * exact. Those starts, the quants side by side and the scales in a row of floats are laid out
 * once per block product (one activation row against up to PL_CPU_BLOCK_OUTS_ONE weight rows),
 * and 16 blocks' weight scales are picked out of their 288 bytes by two word permutes, so a
 * block costs no scalar work: 18 bytes for 32 weights leave the 256-bit kernel's per-block
 * sign, broadcast and scalar scale steps the bottleneck (46-48% of the read bandwidth,
 * bench/README.md). */

/* Blocks of an activation row the layout holds: k up to 32768 (above it the 256-bit kernel). */
#define S_Q40_MAXB 1024

typedef struct {
    int32_t start[S_Q40_MAXB * 8]; /* -8 * (sum of quants 4m..4m+3) per block */
    int8_t qs[S_Q40_MAXB * PL_QK8_0];
    float d[S_Q40_MAXB];
    const void *raw; /* the row as pl_cpu_qact_quantize wrote it (for an odd last block) */
} s_q40_act_t;

static _Thread_local s_q40_act_t s_q40_act __attribute__((aligned(64)));

static inline const s_q40_act_t *s_q40_prep(const void *qx, int64_t n)
{
    const pl_q8_act_t *a = qx;
    int64_t nb = n / PL_QK8_0;
    s_q40_act_t *l = &s_q40_act;
    if (nb > S_Q40_MAXB)
        return NULL;
    const __m256i eight = _mm256_set1_epi8(8);
    for (int64_t b = 0; b < nb; b++) {
        __m256i q = _mm256_loadu_si256((const __m256i *)(const void *)a[b].qs);
        __m256i s8 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), eight, q);
        _mm256_store_si256((__m256i *)(void *)(l->start + 8 * b),
                           _mm256_sub_epi32(_mm256_setzero_si256(), s8));
        _mm256_store_si256((__m256i *)(void *)(l->qs + PL_QK8_0 * b), q);
        l->d[b] = a[b].d;
    }
    l->raw = qx;
    return l;
}

/* Block pair b, b + 1 of the weight row at p: its 32 + 32 unsigned quants, element i of each
 * block in byte i of its 256-bit half. */
static inline __m512i s_q40_pair(const unsigned char *p)
{
    __m512i v = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)(p + 2)));
    v = _mm512_mask_broadcast_i32x4(v, 0xFF00,
                                    _mm_loadu_si128((const __m128i *)(const void *)(p + 20)));
    v = _mm512_srlv_epi64(v, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4));
    return _mm512_and_si512(v, _mm512_set1_epi8(0x0F));
}

/* The scales of the 8 blocks at p (144 bytes) as f16 words 0-7: block i's at word 9 i. */
static inline __m128i s_q40_d8(const unsigned char *p)
{
    /* words 0, 9, .. 63 (those of 32 and past from the second 64 bytes) */
    const __m512i idx = _mm512_setr_epi32(0x00090000, 0x001B0012, 0x002D0024, 0x003F0036, 0, 0, 0,
                                          0, 0, 0, 0, 0, 0, 0, 0, 0);
    __m512i v = _mm512_permutex2var_epi16(_mm512_loadu_si512((const void *)p), idx,
                                          _mm512_loadu_si512((const void *)(p + 64)));
    return _mm512_castsi512_si128(v);
}

static inline float s_q40_half(const unsigned char *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* Blocks b..b + G - 1 (G = 16 or 8) of M weight rows at p and p + wstep into their rows'
 * accumulators: the G scales at once, then per block pair one fmadd. */
static inline __attribute__((always_inline)) void s_q40_group(const unsigned char *p, size_t wstep,
                                                              int M, const s_q40_act_t *a,
                                                              int64_t b, int G, __m512 *acc)
{
    const size_t bb = sizeof(pl_block_q4_0_t);
    __m512 d[2];
#pragma GCC unroll 2
    for (int m = 0; m < M; m++) {
        const unsigned char *pb = p + m * wstep + (size_t)b * bb;
        for (int l = 0; l < (G == 16 ? 5 : 3); l++) /* the group's 288 or 144 bytes */
            _mm_prefetch((const char *)pb + 4096 + 64 * l, _MM_HINT_T0);
        __m256i h = _mm256_zextsi128_si256(s_q40_d8(pb));
        if (G == 16)
            h = _mm256_inserti128_si256(h, s_q40_d8(pb + 8 * bb), 1);
        __m512 dx =
            G == 16 ? _mm512_loadu_ps(a->d + b) : _mm512_castps256_ps512(_mm256_loadu_ps(a->d + b));
        d[m] = _mm512_mul_ps(_mm512_cvtph_ps(h), dx);
    }
#pragma GCC unroll 8
    for (int j = 0; j < G / 2; j++) {
        const __m512i x = _mm512_load_si512((const void *)(a->qs + PL_QK8_0 * (b + 2 * j)));
        const __m512i di =
            _mm512_add_epi32(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                             _mm512_set1_epi32(2 * j));
#pragma GCC unroll 2
        for (int m = 0; m < M; m++) {
            const unsigned char *pb = p + m * wstep + (size_t)(b + 2 * j) * bb;
            __m512i s = _mm512_dpbusd_epi32(
                _mm512_load_si512((const void *)(a->start + 8 * (b + 2 * j))), s_q40_pair(pb), x);
            acc[m] =
                _mm512_fmadd_ps(_mm512_permutexvar_ps(di, d[m]), _mm512_cvtepi32_ps(s), acc[m]);
        }
    }
}

/* s_q32_rows(w, wstep, M, {a->raw}, 1, n, true, out) on the layout a: M (1 or 2) weight rows at
 * w and w + wstep against one activation row. */
static inline __attribute__((always_inline)) void
s_q40_rows(const void *w, size_t wstep, int M, const s_q40_act_t *a, int64_t n, float *out)
{
    const unsigned char *p = w;
    int64_t nb = n / PL_QK8_0, b = 0;
    const size_t bb = sizeof(pl_block_q4_0_t);
    __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    for (; b + 16 <= nb; b += 16)
        s_q40_group(p, wstep, M, a, b, 16, acc);
    if (b + 8 <= nb) { /* 8 more (a 768-wide row: 16 + 8) */
        s_q40_group(p, wstep, M, a, b, 8, acc);
        b += 8;
    }
    for (; b + 2 <= nb; b += 2) {
        const __m512i x = _mm512_load_si512((const void *)(a->qs + PL_QK8_0 * b));
#pragma GCC unroll 2
        for (int m = 0; m < M; m++) {
            const unsigned char *pb = p + m * wstep + (size_t)b * bb;
            __m512 d = _mm512_castpd_ps(_mm512_insertf64x4(
                _mm512_castpd256_pd512(_mm256_castps_pd(_mm256_set1_ps(s_q40_half(pb) * a->d[b]))),
                _mm256_castps_pd(_mm256_set1_ps(s_q40_half(pb + bb) * a->d[b + 1])), 1));
            __m512i s = _mm512_dpbusd_epi32(_mm512_load_si512((const void *)(a->start + 8 * b)),
                                            s_q40_pair(pb), x);
            acc[m] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s), acc[m]);
        }
    }
#pragma GCC unroll 2
    for (int m = 0; m < M; m++) {
        if (b < nb) { /* an odd block count: the last block in scalar code, then its sum */
            float lanes[16];
            _mm512_storeu_ps(lanes, acc[m]);
            pl_cpu_q32_tail(p + m * wstep, a->raw, b, nb, true, lanes);
            out[m] = pl_cpu_q32_lanes_sum(lanes);
            continue;
        }
        /* pl_cpu_q32_lanes_sum's order: v = lanes 0-7 + 8-15, then
         * ((v0 + v4) + (v1 + v5)) + ((v2 + v6) + (v3 + v7)) */
        __m256 v =
            _mm256_add_ps(_mm512_castps512_ps256(acc[m]),
                          _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[m]), 1)));
        __m128 u = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        u = _mm_add_ps(u, _mm_movehdup_ps(u));
        out[m] = _mm_cvtss_f32(_mm_add_ss(u, _mm_movehl_ps(u, u)));
    }
}

#define S_Q4_0_PREP(qx0, n) ((const void *)s_q40_prep(qx0, n))
#define S_Q4_0_PREPPED(w, wstep, M, a1, n, out)                                                    \
    s_q40_rows(w, wstep, M, (const s_q40_act_t *)(a1), n, out)
static inline __attribute__((always_inline)) void
s_k45_pair(const void *w, size_t wstep, const void *qx0, int64_t n, bool five, float *out);
#define S_K45_PAIR s_k45_pair
#include "backends/cpu/cpu_qdot_x86_tmpl.h"

/* ---- batch-1 Q4_K / Q5_K in 512-bit registers ----
 * A pair of weight rows (cpu_qdot_x86_tmpl.h's S_BLOCK_ONE: rows o and h + o) in one register,
 * the first row's 32 bytes of a chunk in the low half and the second's in the high half, against
 * the activations broadcast to both halves: each half's int32 and float lanes are those of
 * s_k45_rows for its row (exact integer sums, then the same fmaf pair per lane and super-block),
 * in half the instructions per weight byte (the 256-bit pair left one core compute-bound, at
 * 82% of the read bandwidth on an AVX-512 EPYC, bench/README.md). */

static inline __m512i s_join256(const void *lo, const void *hi)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)lo)),
                              _mm256_loadu_si256((const __m256i *)hi), 1);
}

static inline __m512i s_bcast256(const void *p)
{
    return _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)p));
}

/* s_q5_bit on both halves. */
static inline __attribute__((always_inline)) __m512i s_q5_bit512(__m512i qh, int j)
{
    __m512i t = _mm512_and_si512(qh, _mm512_set1_epi8((char)(1 << j)));
    return j < 4 ? _mm512_slli_epi16(t, 4 - j) : j > 4 ? _mm512_srli_epi16(t, j - 4) : t;
}

/* s_k_lanes_sum of 8 float lanes, in registers. */
static inline float s_k_lanes8(__m256 l)
{
    __m128 v = _mm_add_ps(_mm256_castps256_ps128(l), _mm256_extractf128_ps(l, 1));
    v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    return _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)));
}

static inline __attribute__((always_inline)) void
s_k45_pair(const void *w, size_t wstep, const void *qx0, int64_t n, bool five, float *out)
{
    const unsigned char *p = w;
    const pl_q8k_act_t *a = qx0;
    size_t bb = five ? sizeof(pl_block_q5_k_t) : sizeof(pl_block_q4_k_t), qo = five ? 48 : 16;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < n / PL_QK_K; b++, p += bb, a++) {
        const unsigned char *q = p + wstep;
        for (size_t l = 0; l < bb; l += 64) {
            _mm_prefetch((const char *)p + S_PF + l, S_PF_HINT);
            _mm_prefetch((const char *)q + S_PF + l, S_PF_HINT);
        }
        __m512i qh = five ? s_join256(p + 16, q + 16) : _mm512_setzero_si512();
        /* words, by 128-bit lane: the first row's 8 scales, its 8 mins, the second's */
        __m512i scm = _mm512_cvtepu8_epi16(_mm256_inserti128_si256(
            _mm256_castsi128_si256(s_k_scales(p + 4)), s_k_scales(q + 4), 1));
        __m512i sc2 = _mm512_shuffle_i64x2(scm, scm, 0xA0); /* scales: lanes 0 0 2 2 */
        __m512i isum = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            __m512i raw = s_join256(p + qo + 32 * c, q + qo + 32 * c);
            __m512i lo = _mm512_and_si512(raw, m4);
            __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
            if (five) {
                lo = _mm512_or_si512(lo, s_q5_bit512(qh, 2 * c));
                hi = _mm512_or_si512(hi, s_q5_bit512(qh, 2 * c + 1));
            }
            __m512i s0 = _mm512_shuffle_epi8(sc2, _mm512_set1_epi16((short)(0x0100 + 0x0404 * c)));
            __m512i s1 = _mm512_shuffle_epi8(sc2, _mm512_set1_epi16((short)(0x0302 + 0x0404 * c)));
            __m512i x0 = s_bcast256(a->qs + 64 * c), x1 = s_bcast256(a->qs + 64 * c + 32);
            __m512i p0 = _mm512_madd_epi16(_mm512_maddubs_epi16(lo, x0), s0);
            isum =
                _mm512_add_epi32(isum, _mm512_dpwssd_epi32(p0, _mm512_maddubs_epi16(hi, x1), s1));
        }
        /* m0 m0 m1 m1 .. of each row (its mins, lanes 1 1 3 3, each word twice), times the
         * bsums of pairs of sub-blocks */
        __m512i mins = _mm512_shuffle_i64x2(scm, scm, 0xF5);
        __m512i mn2 = _mm512_mask_blend_epi64(0xCC, _mm512_unpacklo_epi16(mins, mins),
                                              _mm512_unpackhi_epi16(mins, mins));
        __m512i ms = _mm512_madd_epi16(mn2, s_bcast256(a->bsums));
        /* d and dmin of both rows times the activations' d, each over its row's half */
        uint32_t hp, hq;
        memcpy(&hp, p, 4);
        memcpy(&hq, q, 4);
        __m512 f = _mm512_castps128_ps512(_mm_mul_ps(
            _mm_cvtph_ps(_mm_insert_epi32(_mm_cvtsi32_si128((int)hp), (int)hq, 1)),
            _mm_set1_ps(a->d)));
        __m512 dd = _mm512_permutexvar_ps(
            _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2), f);
        __m512 dm = _mm512_permutexvar_ps(
            _mm512_setr_epi32(1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3), f);
        acc = _mm512_fnmadd_ps(dm, _mm512_cvtepi32_ps(ms),
                               _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(isum), acc));
    }
    out[0] = s_k_lanes8(_mm512_castps512_ps256(acc));
    out[1] = s_k_lanes8(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)));
}

const pl_cpu_qdot_table_t pl_cpu_qdot_avx512_vnni = {
    pl_cpu_q8_0_dot_vnni,  pl_cpu_q4_0_dot_vnni,  pl_cpu_q4_k_dot_vnni,  pl_cpu_q5_k_dot_vnni,
    pl_cpu_q6_k_dot_avx512, pl_cpu_q8_0_rows_vnni, pl_cpu_q4_0_rows_vnni, pl_cpu_q4_k_rows_vnni,
    pl_cpu_q5_k_rows_vnni, pl_cpu_q6_k_rows_avx512};
#pragma GCC pop_options
#endif
