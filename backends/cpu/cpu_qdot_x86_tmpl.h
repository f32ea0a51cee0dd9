/* The 256-bit quantized dots of Q8_0, Q4_0, Q4_K and Q5_K (one row and multi-row), written once
 * and included by the AVX2 file and the AVX-512 VNNI one, each under its own target pragma.
 * Required before inclusion:
 *   S_SUFFIX             the entry points' suffix (avx2, vnni)
 *   S_DOT_U8(u, s)       8 int32 lanes, each the sum of 4 products of unsigned u by signed s
 *                        bytes (no pair of products past int16: |u| <= 128, |s| <= 127)
 *   S_ACC_I16(acc, a, b) acc + the 8 int32 sums of pairs of int16 products a * b
 *   S_TWO_CHAINS(R)      whether R rows' K-quant sums take S_ACC_I16 twice per chunk into two
 *                        accumulators per row (fewer instructions where S_ACC_I16 is one, but
 *                        its latency twice per chunk on one row's chain)
 * Both are exact integer sums, so every instance gives the scalar code's results bitwise. */
#include "backends/cpu/cpu_qdot.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define S_CAT2(a, b) a##b
#define S_CAT(a, b) S_CAT2(a, b)
#define S_NAME(base) S_CAT(base, S_SUFFIX)

/* Bytes ahead of the block being dotted that the kernels prefetch: decode streams every weight
 * once, and the hardware prefetcher alone left the dots waiting on memory about half the time. */
#ifndef S_PF
#define S_PF 4096
#endif
#ifndef S_PF_HINT
#define S_PF_HINT _MM_HINT_T0
#endif

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

/* Q4_0's 32 quants minus 8 as int8, element i in byte i: the 16 bytes in both halves, the high
 * half shifted down to its high nibbles. */
static inline __m256i s_q4_0_quants(const unsigned char *qs)
{
    __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)qs));
    v = _mm256_srlv_epi32(v, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4));
    return _mm256_sub_epi8(_mm256_and_si256(v, _mm256_set1_epi8(0x0F)), _mm256_set1_epi8(8));
}

/* Q8_0 / Q4_0 against R activation rows, or (R = 1) M = 2 weight rows at w and w + wstep: block
 * b's weights unpacked once (their quants, their absolute values for the unsigned-times-signed
 * multiply, their scale), then per pair of rows its 8 integer lane dots, converted, times the two
 * scales, into that pair's accumulator of b's parity (cpu_qdot.c's lanes); out[r + m]. Every
 * lane takes the scalar code's fmaf chain in block order, so the vector loop may stop anywhere
 * and the scalar tail finish: any R or M gives the one-row result. */
static inline __attribute__((always_inline)) void s_q32_rows(const void *w, size_t wstep, int M,
                                                             const void *const *qx, int R,
                                                             int64_t n, bool four, float *out)
{
    const unsigned char *p = w;
    size_t bb = four ? sizeof(pl_block_q4_0_t) : sizeof(pl_block_q8_0_t);
    int64_t nb = n / PL_QK8_0, b = 0;
    __m256 acc[PL_CPU_QDOT_ROWS][2];
    float lanes[16];
#pragma GCC unroll 4
    for (int i = 0; i < R + M - 1; i++)
        acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (; b + 2 <= nb; b += 2) {
#pragma GCC unroll 2
        for (int par = 0; par < 2; par++) {
            __m256i qw[2], aw[2];
            float dw[2];
#pragma GCC unroll 2
            for (int m = 0; m < M; m++) {
                const unsigned char *pb = p + m * wstep + (size_t)(b + par) * bb;
                _mm_prefetch((const char *)pb + S_PF, S_PF_HINT);
                qw[m] = four ? s_q4_0_quants(pb + 2) : _mm256_loadu_si256((const __m256i *)(pb + 2));
                aw[m] = _mm256_sign_epi8(qw[m], qw[m]);
                dw[m] = s_half(pb);
            }
#pragma GCC unroll 2
            for (int m = 0; m < M; m++)
#pragma GCC unroll 4
                for (int r = 0; r < R; r++) {
                    const pl_q8_act_t *a = (const pl_q8_act_t *)qx[r] + b + par;
                    __m256i sx = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)a->qs), qw[m]);
                    __m256i s = S_DOT_U8(aw[m], sx);
                    __m256 d = _mm256_set1_ps(dw[m] * a->d);
                    acc[r + m][par] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s), acc[r + m][par]);
                }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R + M - 1; i++) {
        int r = M > 1 ? 0 : i, m = M > 1 ? i : 0;
        if (b < nb) { /* an odd block count: the last block in scalar code, then its sum */
            _mm256_storeu_ps(lanes, acc[i][0]);
            _mm256_storeu_ps(lanes + 8, acc[i][1]);
            pl_cpu_q32_tail(p + m * wstep, qx[r], b, nb, four, lanes);
            out[i] = pl_cpu_q32_lanes_sum(lanes);
            continue;
        }
        /* pl_cpu_q32_lanes_sum's order in registers: v = lanes 0-7 + 8-15, then
         * ((v0 + v4) + (v1 + v5)) + ((v2 + v6) + (v3 + v7)) */
        __m256 v = _mm256_add_ps(acc[i][0], acc[i][1]);
        __m128 u = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        u = _mm_add_ps(u, _mm_movehdup_ps(u)); /* u0 + u1, ., u2 + u3, . */
        out[i] = _mm_cvtss_f32(_mm_add_ss(u, _mm_movehl_ps(u, u)));
    }
}

/* The multi-row entry points: one instance per row count, so each keeps its accumulators in
 * registers. */
#define S_ROWS_ENTRY(name, body)                                                                   \
    void name(const void *w, const void *const *qx, int nr, int64_t n, float *out)               \
    {                                                                                              \
        switch (nr) {                                                                              \
        case 1: body(1); break;                                                                    \
        case 2: body(2); break;                                                                    \
        case 3: body(3); break;                                                                    \
        default: body(4); break;                                                                   \
        }                                                                                          \
    }

/* The GEMM's block products (cpu_qdot.h's pl_cpu_qblock_*): every weight row o < no against the
 * activation rows in groups of PL_CPU_QDOT_ROWS, the loop over weight rows inside each row
 * count's instance so the kernel inlines into it (a 768-wide row is only 3 super-blocks or 24
 * blocks: a call, a dispatch and a switch per row weighed). */
#define S_BLOCK_CASE(R, body)                                                                      \
    for (int o = 0; o < no; o++) {                                                                 \
        const void *w = (const unsigned char *)w0 + (size_t)o * rb;                                \
        body(R);                                                                                   \
        for (int r = 0; r < (R); r++)                                                              \
            y[r0 + r][o] = out[r];                                                                 \
    }
/* One activation row (batch-1 decode, up to PL_CPU_BLOCK_OUTS_ONE weight rows): rows o and
 * h + o side by side (h = no / 2), so the weights stream from two places far apart at once, which
 * draws more of the memory's bandwidth than one stream (bench/README.md); an odd last row alone.
 * The second stream's prefetches run on into the next block's first rows, the first stream's
 * into rows already read: so the first S_PF bytes of the next block's second stream (a block of
 * the same size, as all but a chunk's last are) are prefetched a line per pair of rows here,
 * instead of meeting memory cold (1-2% of a decode step's weight streaming, bench/README.md). */
#define S_BLOCK_ONE(body, pair)                                                                    \
    {                                                                                              \
        int h = no / 2;                                                                            \
        /* as an integer: past a matrix's last block it points past its end, where a prefetch */   \
        /* is harmless but pointer arithmetic is not */                                            \
        uintptr_t next = (uintptr_t)w0 + (size_t)(no + h) * rb;                                    \
        for (int o = 0; o < h; o++) {                                                              \
            const void *w = (const unsigned char *)w0 + (size_t)o * rb;                            \
            if (o < S_PF / 64)                                                                     \
                _mm_prefetch((const char *)(next + 64 * (size_t)o), S_PF_HINT);                    \
            pair((size_t)h * rb);                                                                  \
            y[r0][o] = out[0];                                                                     \
            y[r0][h + o] = out[1];                                                                 \
        }                                                                                          \
        if (no & 1) {                                                                              \
            const void *w = (const unsigned char *)w0 + (size_t)(no - 1) * rb;                     \
            body(1);                                                                               \
            y[r0][no - 1] = out[0];                                                                \
        }                                                                                          \
    }
#define S_BLOCK_ENTRY(name, body, pair) S_BLOCK_ENTRY_ONE(name, body, S_BLOCK_ONE(body, pair))
/* The same with its own statement for one activation row (`one`). */
#define S_BLOCK_ENTRY_ONE(name, body, one)                                                         \
    void name(const void *const *x, int nr, const void *w0, size_t rb, int no, int k,             \
              float *const *y)                                                                     \
    {                                                                                              \
        float out[PL_CPU_QDOT_ROWS];                                                               \
        int64_t n = k;                                                                             \
        for (int r0 = 0; r0 < nr; r0 += PL_CPU_QDOT_ROWS) {                                        \
            const void *const *qx = x + r0;                                                        \
            switch (nr - r0) {                                                                     \
            case 1: one break;                                                                     \
            case 2: S_BLOCK_CASE(2, body) break;                                                   \
            case 3: S_BLOCK_CASE(3, body) break;                                                   \
            default: S_BLOCK_CASE(4, body) break;                                                  \
            }                                                                                      \
        }                                                                                          \
    }

/* The multi-row dots: one weight row's block product (a separate switch over the row count
 * around the kernel compiled its 4-row instance to a quarter of the block's speed). */
#define S_ROWS_VIA_BLOCK(name, block)                                                              \
    void name(const void *w, const void *const *qx, int nr, int64_t n, float *out)               \
    {                                                                                              \
        float *y[PL_CPU_QDOT_ROWS];                                                                \
        for (int r = 0; r < PL_CPU_QDOT_ROWS; r++)                                                 \
            y[r] = out + (r < nr ? r : 0);                                                         \
        block(qx, nr < PL_CPU_QDOT_ROWS ? nr : PL_CPU_QDOT_ROWS, w, 0, 1, (int)n, y);              \
    }

/* An instance's own batch-1 Q4_0 kernel, where it has one (cpu_qdot_vnni.c's): S_Q4_0_PREP(qx, n)
 * lays one activation row out for it once per block product (NULL: it cannot, and s_q32_rows
 * runs), S_Q4_0_PREPPED(w, wstep, M, a1, n, out) is s_q32_rows(w, wstep, M, .., 1, n, true, out)
 * on that layout, bitwise. */
#ifndef S_Q4_0_PREP
#define S_Q4_0_PREP(qx0, n) ((const void *)NULL)
#define S_Q4_0_PREPPED(w, wstep, M, a1, n, out) ((void)0)
#endif

#define S_Q8_0(R) s_q32_rows(w, 0, 1, qx, R, n, false, out)
#define S_Q4_0(R) s_q32_rows(w, 0, 1, qx, R, n, true, out)
#define S_Q8_0_PAIR(ws) s_q32_rows(w, ws, 2, qx, 1, n, false, out)
#define S_Q4_0_A1(R)                                                                               \
    if (a1)                                                                                        \
        S_Q4_0_PREPPED(w, 0, 1, a1, n, out);                                                       \
    else                                                                                           \
        s_q32_rows(w, 0, 1, qx, 1, n, true, out)
#define S_Q4_0_A1_PAIR(ws)                                                                         \
    if (a1)                                                                                        \
        S_Q4_0_PREPPED(w, ws, 2, a1, n, out);                                                      \
    else                                                                                           \
        s_q32_rows(w, ws, 2, qx, 1, n, true, out)
S_BLOCK_ENTRY(S_NAME(pl_cpu_q8_0_block_), S_Q8_0, S_Q8_0_PAIR)
S_BLOCK_ENTRY_ONE(S_NAME(pl_cpu_q4_0_block_), S_Q4_0, {
    const void *a1 = S_Q4_0_PREP(qx[0], n);
    S_BLOCK_ONE(S_Q4_0_A1, S_Q4_0_A1_PAIR)
})
S_ROWS_VIA_BLOCK(S_NAME(pl_cpu_q8_0_rows_), S_NAME(pl_cpu_q8_0_block_))
S_ROWS_VIA_BLOCK(S_NAME(pl_cpu_q4_0_rows_), S_NAME(pl_cpu_q4_0_block_))

float S_NAME(pl_cpu_q8_0_dot_)(const void *w, const void *qx, int64_t n)
{
    float out;
    s_q32_rows(w, 0, 1, &qx, 1, n, false, &out);
    return out;
}

float S_NAME(pl_cpu_q4_0_dot_)(const void *w, const void *qx, int64_t n)
{
    float out, *y = &out;
    S_NAME(pl_cpu_q4_0_block_)(&qx, 1, w, 0, 1, (int)n, &y);
    return out;
}

/* A K-quant super-block's 8 6-bit scales (bytes 0-7) and 8 mins (bytes 8-15), unpacked from
 * their 12 bytes at q in vector registers (the bit shuffle of pl_k_scale_min on four words at
 * once). Reads 16 bytes: the block's quants follow its scales, so the last 4 are its own. */
static inline __m128i s_k_scales(const uint8_t *q)
{
    __m128i v = _mm_loadu_si128((const __m128i *)(const void *)q); /* words u0 u1 u2 . */
    /* words 0, 2: u0, u1 & 0x3f; words 1, 3: (u2 & 0x0f, (u2 >> 4) & 0x0f) | (u0, u1 >> 6) << 4 */
    __m128i lo = _mm_srlv_epi32(_mm_shuffle_epi32(v, 0x98), _mm_setr_epi32(0, 0, 0, 4));
    lo = _mm_and_si128(lo, _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    __m128i hi = _mm_srli_epi32(_mm_shuffle_epi32(v, 0x50), 2);
    hi = _mm_and_si128(hi, _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
    return _mm_or_si128(lo, hi);
}

/* The fifth bit of sub-block j's 32 quants (bit j of qh's bytes), at bit 4. */
static inline __attribute__((always_inline)) __m256i s_q5_bit(__m256i qh, int j)
{
    __m256i t = _mm256_and_si256(qh, _mm256_set1_epi8((char)(1 << j)));
    return j < 4 ? _mm256_slli_epi16(t, 4 - j) : j > 4 ? _mm256_srli_epi16(t, j - 4) : t;
}

/* Q4_K / Q5_K against R activation rows, or (R = 1) M = 2 weight rows at w and w + wstep: per
 * 64-element chunk, two sub-blocks of 32 unsigned quants unpacked once with their scales
 * (broadcast by a byte shuffle); per pair of rows each product times its scale into 8 int32
 * lanes, and the mins times the row's bsums (each min twice, one multiply-add) into 8 more; then
 * per super-block both converted into the pair's 8 float lanes (cpu_qdot.c's s_k45 defines them:
 * its fmaf pair per lane; fnmadd(a, b, c) rounds c - a * b once, as fmaf(-a, b, c) does), no
 * horizontal sum until the row's end; out[r + m]. */
static inline __attribute__((always_inline)) void s_k45_rows(const void *w, size_t wstep, int M,
                                                             const void *const *qx, int R,
                                                             int64_t n, bool five, float *out)
{
    const unsigned char *p = w;
    size_t bb = five ? sizeof(pl_block_q5_k_t) : sizeof(pl_block_q4_k_t);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[PL_CPU_QDOT_ROWS];
    /* two chains per pair where S_TWO_CHAINS says so for its row count; a pair of weight rows
     * gives each row's chain the other's to overlap with, as two activation rows do */
    const bool two = S_TWO_CHAINS(R + M - 1);
#pragma GCC unroll 4
    for (int i = 0; i < R + M - 1; i++)
        acc[i] = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / PL_QK_K; b++, p += bb) {
        __m256i qh[2], sc2[2];
        __m128i scm[2];
#pragma GCC unroll 2
        for (int m = 0; m < M; m++) {
            const unsigned char *pm = p + m * wstep;
            for (size_t l = 0; l < bb; l += 64)
                _mm_prefetch((const char *)pm + S_PF + l, S_PF_HINT);
            qh[m] = five ? _mm256_loadu_si256((const __m256i *)(pm + 16)) : _mm256_setzero_si256();
            scm[m] = s_k_scales(pm + 4);
            sc2[m] = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scm[m]));
        }
        __m256i isum[PL_CPU_QDOT_ROWS], isum2[PL_CPU_QDOT_ROWS];
#pragma GCC unroll 4
        for (int i = 0; i < R + M - 1; i++)
            isum[i] = isum2[i] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
#pragma GCC unroll 2
            for (int m = 0; m < M; m++) {
                const uint8_t *qs = p + m * wstep + (five ? 48 : 16);
                __m256i raw = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
                __m256i lo = _mm256_and_si256(raw, m4);
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
                if (five) {
                    lo = _mm256_or_si256(lo, s_q5_bit(qh[m], 2 * c));
                    hi = _mm256_or_si256(hi, s_q5_bit(qh[m], 2 * c + 1));
                }
                __m256i s0 =
                    _mm256_shuffle_epi8(sc2[m], _mm256_set1_epi16((short)(0x0100 + 0x0404 * c)));
                __m256i s1 =
                    _mm256_shuffle_epi8(sc2[m], _mm256_set1_epi16((short)(0x0302 + 0x0404 * c)));
#pragma GCC unroll 4
                for (int r = 0; r < R; r++) {
                    const int8_t *xq = ((const pl_q8k_act_t *)qx[r] + b)->qs + 64 * c;
                    __m256i x0 = _mm256_loadu_si256((const __m256i *)xq);
                    __m256i x1 = _mm256_loadu_si256((const __m256i *)(xq + 32));
                    if (two) { /* each sub-block straight into its own chain */
                        isum[r + m] = S_ACC_I16(isum[r + m], _mm256_maddubs_epi16(lo, x0), s0);
                        isum2[r + m] = S_ACC_I16(isum2[r + m], _mm256_maddubs_epi16(hi, x1), s1);
                    } else { /* the second sub-block added onto the first's products, then onto
                              * isum: one short chain (a lone row would wait on two dependent
                              * VNNI adds per chunk) */
                        __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x0), s0);
                        __m256i p01 = S_ACC_I16(p0, _mm256_maddubs_epi16(hi, x1), s1);
                        isum[r + m] = _mm256_add_epi32(isum[r + m], p01);
                    }
                }
            }
        }
#pragma GCC unroll 2
        for (int m = 0; m < M; m++) {
            const unsigned char *pm = p + m * wstep;
            float dw = s_half(pm), dmin = s_half(pm + 2);
            __m256i mn2 = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(scm[m], scm[m])); /* m0 m0 m1 .. */
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                const pl_q8k_act_t *a = (const pl_q8k_act_t *)qx[r] + b;
                if (two)
                    isum[r + m] = _mm256_add_epi32(isum[r + m], isum2[r + m]);
                __m256i ms = _mm256_madd_epi16(mn2, _mm256_loadu_si256((const __m256i *)a->bsums));
                __m256 t = _mm256_fmadd_ps(_mm256_set1_ps(a->d * dw),
                                           _mm256_cvtepi32_ps(isum[r + m]), acc[r + m]);
                acc[r + m] =
                    _mm256_fnmadd_ps(_mm256_set1_ps(a->d * dmin), _mm256_cvtepi32_ps(ms), t);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R + M - 1; i++) { /* cpu_qdot.c's s_k_lanes_sum order, in registers */
        __m128 v = _mm_add_ps(_mm256_castps256_ps128(acc[i]), _mm256_extractf128_ps(acc[i], 1));
        v = _mm_add_ps(v, _mm_movehl_ps(v, v));
        out[i] = _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)));
    }
}

#define S_Q4_K(R) s_k45_rows(w, 0, 1, qx, R, n, false, out)
#define S_Q5_K(R) s_k45_rows(w, 0, 1, qx, R, n, true, out)
/* An instance's own kernel for a pair of weight rows against one activation row, where it has
 * one (cpu_qdot_vnni.c's, in 512-bit registers): S_K45_PAIR(w, wstep, qx0, n, five, out) is
 * s_k45_rows(w, wstep, 2, &qx0, 1, n, five, out), bitwise. */
#ifdef S_K45_PAIR
#define S_Q4_K_PAIR(ws) S_K45_PAIR(w, ws, qx[0], n, false, out)
#define S_Q5_K_PAIR(ws) S_K45_PAIR(w, ws, qx[0], n, true, out)
#else
#define S_Q4_K_PAIR(ws) s_k45_rows(w, ws, 2, qx, 1, n, false, out)
#define S_Q5_K_PAIR(ws) s_k45_rows(w, ws, 2, qx, 1, n, true, out)
#endif
S_BLOCK_ENTRY(S_NAME(pl_cpu_q4_k_block_), S_Q4_K, S_Q4_K_PAIR)
S_BLOCK_ENTRY(S_NAME(pl_cpu_q5_k_block_), S_Q5_K, S_Q5_K_PAIR)
S_ROWS_VIA_BLOCK(S_NAME(pl_cpu_q4_k_rows_), S_NAME(pl_cpu_q4_k_block_))
S_ROWS_VIA_BLOCK(S_NAME(pl_cpu_q5_k_rows_), S_NAME(pl_cpu_q5_k_block_))

float S_NAME(pl_cpu_q4_k_dot_)(const void *w, const void *qx, int64_t n)
{
    float out;
    s_k45_rows(w, 0, 1, &qx, 1, n, false, &out);
    return out;
}

float S_NAME(pl_cpu_q5_k_dot_)(const void *w, const void *qx, int64_t n)
{
    float out;
    s_k45_rows(w, 0, 1, &qx, 1, n, true, &out);
    return out;
}

