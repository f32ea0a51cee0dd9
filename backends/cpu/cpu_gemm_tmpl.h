/* The float-type GEMM kernels (f32, f16, bf16 weights), written once and included by each
 * instruction set's file (cpu_gemm_<isa>.c), which first defines s_v16_t and its operations.
 *
 * Every output element goes through one fixed computation whatever the instruction set, the
 * tile it falls in or the block: 16 lanes, lane j summing x[i] * w[i] for the positions
 * i = j (mod 16) below k16 = k & ~15 in increasing order with fused multiply-adds; then
 * v[j] = lane[j] + lane[j + 8], ((v0 + v4) + (v1 + v5)) + ((v2 + v6) + (v3 + v7)); then the tail
 * positions k16..k-1 in order, fused. f16 and bf16 widen to f32 exactly, so a half-precision
 * matrix gives bitwise what its f32 widening gives. Required before inclusion:
 *   S_ISA              the name suffix (scalar, avx2, avx512)
 *   S_TR, S_TO         rows x weight rows of the main tile; S_TO1 weight rows of a one-row tile
 *   S_PAIR_ONE         optional, 1: one activation row takes its weight rows in pairs o, no / 2 + o
 *                      (two streams far apart) instead of S_TO1 side by side, each prefetched
 *                      S_PAIR_PF bytes ahead
 *   s_v16_t            16 floats; s_v_ld (f32, any alignment), s_v_st, s_v_fma(x, w, acc),
 *                      s_v_ldw_f32 / _f16 / _bf16 (16 stored elements at any alignment) */
#include "backends/cpu/cpu_gemm.h"

#include "common/util.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define S_CAT2(a, b) a##b
#define S_CAT(a, b) S_CAT2(a, b)
#define S_FN(base) S_CAT(base, S_ISA)

#define S_L2_BYTES (256 * 1024) /* rows of x that stay cached without blocking the inner dim */
#define S_BLOCK_K 512           /* inner positions per pass when they do not */
#ifndef S_PAIR_ONE
#define S_PAIR_ONE 0
#define S_PAIR_PF 0
#endif

/* The calling thread's accumulators: PL_CPU_BLOCK_ROWS * PL_CPU_BLOCK_OUTS * 16 floats. */
float *pl_cpu_gemm_acc(void);

static inline __attribute__((always_inline)) s_v16_t s_ldw(pl_wtype_t wt, const unsigned char *p)
{
    return wt == PL_WT_F32 ? s_v_ldw_f32(p) : wt == PL_WT_F16 ? s_v_ldw_f16(p) : s_v_ldw_bf16(p);
}

static inline __attribute__((always_inline)) float s_elem(pl_wtype_t wt, const unsigned char *p,
                                                          int i)
{
    float f;
    uint16_t h;
    if (wt == PL_WT_F32) {
        memcpy(&f, p + (size_t)i * 4, 4);
        return f;
    }
    memcpy(&h, p + (size_t)i * 2, 2);
    return wt == PL_WT_F16 ? pl_f16_to_f32(h) : pl_bf16_to_f32(h);
}

/* Add positions [k0, k1) (multiples of 16) of R rows times O weight rows to their lane
 * accumulators acc + (r * ast + o * os) * 16. pf > 0: also prefetch the same positions pf bytes
 * further on (once per 64-byte line), the rows of the next tile, whose short rows the hardware
 * prefetcher would meet cold (a decode step streams each weight row once). */
static inline __attribute__((always_inline)) void s_tile(pl_wtype_t wt, int R, int O, float *acc,
                                                         int ast, int os, const float *const *x,
                                                         const unsigned char *const *w, int k0,
                                                         int k1, size_t pf)
{
    s_v16_t a[S_TR > 1 ? S_TR : 1][S_TO1 > S_TO ? (S_TO1 > 2 ? S_TO1 : 2) : (S_TO > 2 ? S_TO : 2)],
        xv[S_TR > 1 ? S_TR : 1];
    size_t esz = wt == PL_WT_F32 ? 4 : 2;
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int o = 0; o < O; o++)
            a[r][o] = s_v_ld(acc + (size_t)(r * ast + o * os) * 16);
    for (int i = k0; i < k1; i += 16) {
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
            xv[r] = s_v_ld(x[r] + i);
#pragma GCC unroll 8
        for (int o = 0; o < O; o++) {
            if (pf && (esz == 4 || (i & 16) == 0))
                __builtin_prefetch(w[o] + (size_t)i * esz + pf);
            s_v16_t wv = s_ldw(wt, w[o] + (size_t)i * esz);
#pragma GCC unroll 8
            for (int r = 0; r < R; r++)
                a[r][o] = s_v_fma(xv[r], wv, a[r][o]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int o = 0; o < O; o++)
            s_v_st(acc + (size_t)(r * ast + o * os) * 16, a[r][o]);
}

static float s_finish(pl_wtype_t wt, const float *l, const float *x, const unsigned char *w,
                      int k16, int k)
{
    float v[8];
    for (int j = 0; j < 8; j++)
        v[j] = l[j] + l[j + 8];
    float s = ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
    for (int i = k16; i < k; i++)
        s = fmaf(x[i], s_elem(wt, w, i), s);
    return s;
}

typedef void (*s_tile_fn)(float *acc, int ast, const float *const *x, const unsigned char *const *w,
                          int k0, int k1, size_t pf);

/* The tile shapes of one weight type, as real functions so each is compiled once. */
#define S_TILES(T, WT)                                                                             \
    static void s_tile_##T##_main(float *acc, int ast, const float *const *x,                      \
                                  const unsigned char *const *w, int k0, int k1, size_t pf)        \
    {                                                                                              \
        s_tile(WT, S_TR, S_TO, acc, ast, 1, x, w, k0, k1, pf);                                     \
    }                                                                                              \
    static void s_tile_##T##_row(float *acc, int ast, const float *const *x,                       \
                                 const unsigned char *const *w, int k0, int k1, size_t pf)         \
    {                                                                                              \
        s_tile(WT, 1, S_TO, acc, ast, 1, x, w, k0, k1, pf);                                        \
    }                                                                                              \
    static void s_tile_##T##_col(float *acc, int ast, const float *const *x,                       \
                                 const unsigned char *const *w, int k0, int k1, size_t pf)         \
    {                                                                                              \
        s_tile(WT, S_TR, 1, acc, ast, 1, x, w, k0, k1, pf);                                        \
    }                                                                                              \
    static void s_tile_##T##_thin(float *acc, int ast, const float *const *x,                      \
                                  const unsigned char *const *w, int k0, int k1, size_t pf)        \
    {                                                                                              \
        s_tile(WT, 1, S_TO1, acc, ast, 1, x, w, k0, k1, pf);                                       \
    }                                                                                              \
    static void s_tile_##T##_one(float *acc, int ast, const float *const *x,                       \
                                 const unsigned char *const *w, int k0, int k1, size_t pf)         \
    {                                                                                              \
        s_tile(WT, 1, 1, acc, ast, 1, x, w, k0, k1, pf);                                           \
    }                                                                                              \
    /* two weight rows whose accumulators lie ast slots apart */                                   \
    static void s_tile_##T##_pair(float *acc, int ast, const float *const *x,                      \
                                  const unsigned char *const *w, int k0, int k1, size_t pf)        \
    {                                                                                              \
        s_tile(WT, 1, 2, acc, 0, ast, x, w, k0, k1, pf);                                           \
    }

S_TILES(f32, PL_WT_F32)
S_TILES(f16, PL_WT_F16)
S_TILES(bf16, PL_WT_BF16)

typedef struct {
    s_tile_fn main, row, col, thin, one, pair;
} s_tiles_t;

static void s_block(pl_wtype_t wt, const s_tiles_t *t, const void *const *xv, int nr,
                    const void *wv, size_t rb, int no, int k, float *const *y)
{
    const float *const *x = (const float *const *)xv;
    const unsigned char *wr[PL_CPU_BLOCK_OUTS_ONE];
    float *acc = pl_cpu_gemm_acc();
    int k16 = k & ~15;
    /* Blocking the inner dimension keeps the rows of x cached while the weights pass; when they
     * fit in L2 anyway (decode batches) whole weight rows stream better. */
    int bk = (size_t)nr * (size_t)k * sizeof(float) > S_L2_BYTES ? S_BLOCK_K : PL_MAX(k16, 16);

    for (int o = 0; o < no; o++)
        wr[o] = (const unsigned char *)wv + (size_t)o * rb;
    memset(acc, 0, (size_t)nr * (size_t)no * 16 * sizeof(float));
    for (int kb = 0; kb < k16; kb += bk) {
        int ke = PL_MIN(kb + bk, k16), o = 0;
        /* the first pass over a tile's weight rows prefetches the next tile's */
        size_t pf_thin = bk >= k16 ? S_TO1 * rb : 0, pf_main = bk >= k16 ? S_TO * rb : 0;
        if (S_PAIR_ONE && nr == 1) { /* rows o and h + o: two streams, each its own prefetches */
            int h = no / 2;
            /* the second stream's prefetches run on into the next block's first rows, the
             * first's into rows already read: so the first S_PAIR_PF bytes of the next block's
             * second stream (a block of the same size, as all but a chunk's last are) go here,
             * spread over the pairs (an integer: past a matrix's end, where a prefetch is
             * harmless but pointer arithmetic is not) */
            uintptr_t next = (uintptr_t)wv + (size_t)(no + h) * rb;
            int lines = h > 0 ? (S_PAIR_PF / 64 + h - 1) / h : 0;
            for (; o < h; o++) {
                const unsigned char *pw[2] = {wr[o], wr[h + o]};
                if (bk >= k16)
                    for (int l = o * lines; l < (o + 1) * lines && l < S_PAIR_PF / 64; l++)
                        __builtin_prefetch((const void *)(next + 64 * (size_t)l));
                t->pair(acc + (size_t)o * 16, h, x, pw, kb, ke, bk >= k16 ? S_PAIR_PF : 0);
            }
            o = 2 * h;
        } else if (nr < S_TR) { /* a few rows: more weight rows at once */
            for (; o + S_TO1 <= no; o += S_TO1)
                for (int r = 0; r < nr; r++)
                    t->thin(acc + (size_t)(r * no + o) * 16, no, x + r, wr + o, kb, ke,
                            r ? 0 : pf_thin);
        } else {
            for (; o + S_TO <= no; o += S_TO) {
                int r = 0;
                for (; r + S_TR <= nr; r += S_TR)
                    t->main(acc + (size_t)(r * no + o) * 16, no, x + r, wr + o, kb, ke,
                            r ? 0 : pf_main);
                for (; r < nr; r++)
                    t->row(acc + (size_t)(r * no + o) * 16, no, x + r, wr + o, kb, ke, 0);
            }
        }
        for (; o < no; o++) {
            int r = 0;
            for (; r + S_TR <= nr; r += S_TR)
                t->col(acc + (size_t)(r * no + o) * 16, no, x + r, wr + o, kb, ke, 0);
            for (; r < nr; r++)
                t->one(acc + (size_t)(r * no + o) * 16, no, x + r, wr + o, kb, ke, 0);
        }
    }
    for (int r = 0; r < nr; r++)
        for (int o = 0; o < no; o++)
            y[r][o] = s_finish(wt, acc + (size_t)(r * no + o) * 16, x[r], wr[o], k16, k);
}

#define S_BLOCK_FN(T, WT)                                                                          \
    void S_FN(pl_cpu_block_##T##_)(const void *const *x, int nr, const void *w, size_t rb, int no, \
                                   int k, float *const *y)                                         \
    {                                                                                              \
        static const s_tiles_t tiles = {s_tile_##T##_main, s_tile_##T##_row, s_tile_##T##_col,     \
                                        s_tile_##T##_thin, s_tile_##T##_one, s_tile_##T##_pair};   \
        s_block(WT, &tiles, x, nr, w, rb, no, k, y);                                               \
    }

S_BLOCK_FN(f32, PL_WT_F32)
S_BLOCK_FN(f16, PL_WT_F16)
S_BLOCK_FN(bf16, PL_WT_BF16)

static inline __attribute__((always_inline)) void s_to_f32(pl_wtype_t wt, const void *w, size_t rb,
                                                           int n, int k, float *dst)
{
    int k16 = k & ~15;
    for (int r = 0; r < n; r++) {
        const unsigned char *p = (const unsigned char *)w + (size_t)r * rb;
        float *d = dst + (size_t)r * k;
        for (int i = 0; i < k16; i += 16)
            s_v_st(d + i, s_ldw(wt, p + (size_t)i * 2));
        for (int i = k16; i < k; i++)
            d[i] = s_elem(wt, p, i);
    }
}

void S_FN(pl_cpu_to_f32_f16_)(const void *w, size_t rb, int n, int k, float *dst)
{
    s_to_f32(PL_WT_F16, w, rb, n, k, dst);
}

void S_FN(pl_cpu_to_f32_bf16_)(const void *w, size_t rb, int n, int k, float *dst)
{
    s_to_f32(PL_WT_BF16, w, rb, n, k, dst);
}
