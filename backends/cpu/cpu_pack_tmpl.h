/* The packed block kernels (cpu_pack.h's layout), written once and included by each instruction
 * set's file after cpu_gemm_tmpl.h, whose s_v16_t operations and fixed summation order they use:
 * each output element is bitwise what cpu_gemm_tmpl.h's block kernel gives on the matrix as
 * stored. A tile is S_PR token rows x one panel's 4 weight rows over the whole inner dimension,
 * its lane sums held in registers: per 16 positions 2 loads widen the panel's 4 rows (bf16 by a
 * shift and a mask), each row of x is loaded once and meets all 4. The weights of a block are
 * one sequential stream. Required besides cpu_gemm_tmpl.h's:
 *   S_PR                token rows of a tile
 *   s_v_ldw2_bf16(p, a, b)  the two rows of a bf16 pair's 64 bytes
 *   S_HAVE_RED4 / s_v_red4(a0, a1, a2, a3, s)  optional: the four sums of lane vectors, as s_finish
 *                       adds them (else stored and added here) */
#include "backends/cpu/cpu_pack.h"

#ifndef S_HAVE_RED4
static inline void s_v_red4(s_v16_t a0, s_v16_t a1, s_v16_t a2, s_v16_t a3, float *s)
{
    const s_v16_t a[4] = {a0, a1, a2, a3};
    for (int o = 0; o < 4; o++) {
        float l[16], v[8];
        s_v_st(l, a[o]);
        for (int j = 0; j < 8; j++)
            v[j] = l[j] + l[j + 8];
        s[o] = ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
    }
}
#endif

/* The two rows of a pair at p: 64 elements of the stored type. */
static inline __attribute__((always_inline)) void s_pw2(pl_wtype_t wt, const unsigned char *p,
                                                        s_v16_t *a, s_v16_t *b)
{
    if (wt == PL_WT_BF16) {
        s_v_ldw2_bf16(p, a, b);
    } else {
        size_t esz = wt == PL_WT_F32 ? 4 : 2;
        *a = s_ldw(wt, p);
        *b = s_ldw(wt, p + 16 * esz);
    }
}

/* R rows of x against the panel at pw: positions [0, k16) in the lanes, the lane sums, then the
 * positions k16..k-1 in order; weight rows o0..o0+nv-1 of y written. */
static inline __attribute__((always_inline)) void s_ppanel(pl_wtype_t wt, int R,
                                                           const float *const *x,
                                                           const unsigned char *pw, int k16, int k,
                                                           int nv, float *const *y, int o0)
{
    static const float zero[16];
    size_t esz = wt == PL_WT_F32 ? 4 : 2;
    s_v16_t a[S_PR][4];
    const unsigned char *p = pw;

#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int o = 0; o < 4; o++)
            a[r][o] = s_v_ld(zero);
    for (int i = 0; i < k16; i += 16, p += 64 * esz) {
        s_v16_t w0, w1, w2, w3;
        s_pw2(wt, p, &w0, &w1);
        s_pw2(wt, p + 32 * esz, &w2, &w3);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            s_v16_t xv = s_v_ld(x[r] + i);
            a[r][0] = s_v_fma(xv, w0, a[r][0]);
            a[r][1] = s_v_fma(xv, w1, a[r][1]);
            a[r][2] = s_v_fma(xv, w2, a[r][2]);
            a[r][3] = s_v_fma(xv, w3, a[r][3]);
        }
    }
    const unsigned char *tail = pw + (size_t)k16 * PL_CPU_PACK_ROWS * esz;
    for (int r = 0; r < R; r++) {
        float s[4];
        s_v_red4(a[r][0], a[r][1], a[r][2], a[r][3], s);
        if (k16 == k && nv == PL_CPU_PACK_ROWS) { /* no tail: the four sums as they are */
            memcpy(y[r] + o0, s, sizeof(s));
            continue;
        }
        for (int o = 0; o < nv; o++) {
            const unsigned char *t = tail + (size_t)o * (size_t)(k - k16) * esz;
            for (int i = k16; i < k; i++)
                s[o] = fmaf(x[r][i], s_elem(wt, t, i - k16), s[o]);
            y[r][o0 + o] = s[o];
        }
    }
}

static inline __attribute__((always_inline)) void s_pblock(pl_wtype_t wt, const void *const *xv,
                                                           int nr, const void *wv, size_t rb,
                                                           int no, int k, float *const *y)
{
    const float *const *x = (const float *const *)xv;
    int k16 = k & ~15;

    for (int r = 0; r < nr; r += S_PR) {
        int R = PL_MIN(S_PR, nr - r);
        for (int o = 0; o < no; o += PL_CPU_PACK_ROWS) {
            const unsigned char *pw = (const unsigned char *)wv + (size_t)o * rb;
            int nv = PL_MIN(PL_CPU_PACK_ROWS, no - o);
            switch (R) { /* each tile height its own code, its sums in registers */
#define S_CASE(n)                                                                                  \
    case n:                                                                                        \
        s_ppanel(wt, n, x + r, pw, k16, k, nv, y + r, o);                                          \
        break;
                S_CASE(1)
#if S_PR >= 2
                S_CASE(2)
#endif
#if S_PR >= 3
                S_CASE(3)
#endif
#if S_PR >= 4
                S_CASE(4)
#endif
#if S_PR >= 5
                S_CASE(5)
#endif
#if S_PR >= 6
                S_CASE(6)
#endif
#if S_PR > 6
#error "S_PR: cases up to 6"
#endif
#undef S_CASE
            default:
                break;
            }
        }
    }
}

#define S_PBLOCK_FN(T, WT)                                                                         \
    void S_FN(pl_cpu_pblock_##T##_)(const void *const *x, int nr, const void *w, size_t rb,        \
                                    int no, int k, float *const *y)                                \
    {                                                                                              \
        s_pblock(WT, x, nr, w, rb, no, k, y);                                                      \
    }

S_PBLOCK_FN(f32, PL_WT_F32)
S_PBLOCK_FN(f16, PL_WT_F16)
S_PBLOCK_FN(bf16, PL_WT_BF16)
