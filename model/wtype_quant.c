/* Quantizers of every weight type: f32 into ggml's block layouts (pl-mkmodel's and the tests').
 * Scales are rounded up to f16 so that no value is clamped: each error is at most half a step. */
#include "model/wtype.h"

#include "common/util.h"

#include <math.h>
#include <string.h>

/* The smallest f16 whose value is >= v, for finite v >= 0. */
static uint16_t s_f16_ceil(float v)
{
    uint16_t h = pl_f32_to_f16(v);
    if (pl_f16_to_f32(h) < v)
        h++;
    return h;
}

static int s_clamp(long v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : (int)v;
}

static float s_amax(const float *x, int n)
{
    float a = 0.0f;
    for (int i = 0; i < n; i++)
        a = fmaxf(a, fabsf(x[i]));
    return a;
}

/* |x - y| <= d / 2 with d = amax / 127 rounded up to f16. */
static void s_q8_0(const float *x, pl_block_q8_0_t *b)
{
    float amax = s_amax(x, PL_QK8_0), d, id;
    b->d = s_f16_ceil(amax / 127.0f);
    d = pl_f16_to_f32(b->d);
    id = d > 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < PL_QK8_0; j++)
        b->qs[j] = (int8_t)s_clamp(lrintf(x[j] * id), -127, 127);
}

/* |x - y| <= d / 2 with d = amax / 7.5 rounded up to f16: levels -8..7 cover [-amax, amax]. */
static void s_q4_0(const float *x, pl_block_q4_0_t *b)
{
    float amax = s_amax(x, PL_QK8_0), d, id;
    int q[PL_QK8_0];
    b->d = s_f16_ceil(amax / 7.5f);
    d = pl_f16_to_f32(b->d);
    id = d > 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < PL_QK8_0; j++)
        q[j] = s_clamp(lrintf(x[j] * id) + 8, 0, 15);
    for (int j = 0; j < PL_QK8_0 / 2; j++)
        b->qs[j] = (uint8_t)(q[j] | (q[j + PL_QK8_0 / 2] << 4));
}

/* Q4_K / Q5_K: eight sub-blocks of 32, x = d * sc_j * q - dmin * m_j, q in 0..qmax. The mins are
 * chosen first (rounded up, so every value lies above -dmin * m_j), then the scales cover the
 * rest: |x - y| <= d * sc_j / 2 <= ((max_j - min(min_j, 0) + dmin) / qmax + d) / 2. */
static void s_k_scales(const float *x, int qmax, uint16_t *d_p, uint16_t *dmin_p,
                       uint8_t *sc, uint8_t *m, float *ds, float *dm)
{
    float mn[8], need[8], max_mn = 0.0f, max_need = 0.0f, dmin, d;
    for (int j = 0; j < 8; j++) {
        float lo = 0.0f, hi = -INFINITY;
        for (int l = 0; l < 32; l++) {
            lo = fminf(lo, x[32 * j + l]);
            hi = fmaxf(hi, x[32 * j + l]);
        }
        mn[j] = -lo;
        need[j] = hi; /* completed below once the min is rounded */
        max_mn = fmaxf(max_mn, mn[j]);
    }
    *dmin_p = s_f16_ceil(max_mn / 63.0f);
    dmin = pl_f16_to_f32(*dmin_p);
    for (int j = 0; j < 8; j++) {
        m[j] = dmin > 0.0f ? (uint8_t)s_clamp(lrintf(ceilf(mn[j] / dmin)), 0, 63) : 0;
        dm[j] = dmin * m[j];
        need[j] = fmaxf(0.0f, (need[j] + dm[j]) / (float)qmax);
        max_need = fmaxf(max_need, need[j]);
    }
    *d_p = s_f16_ceil(max_need / 63.0f);
    d = pl_f16_to_f32(*d_p);
    for (int j = 0; j < 8; j++) {
        sc[j] = d > 0.0f ? (uint8_t)s_clamp(lrintf(ceilf(need[j] / d)), 0, 63) : 0;
        ds[j] = d * sc[j];
    }
}

static void s_k_pack_scales(const uint8_t *sc, const uint8_t *m, uint8_t *out)
{
    for (int j = 0; j < 4; j++) {
        out[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        out[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        out[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
    }
}

static void s_k_quants(const float *x, int qmax, const float *ds, const float *dm, int *q)
{
    for (int i = 0; i < PL_QK_K; i++) {
        int j = i / 32;
        q[i] = ds[j] > 0.0f ? s_clamp(lrintf((x[i] + dm[j]) / ds[j]), 0, qmax) : 0;
    }
}

static void s_q4_k(const float *x, pl_block_q4_k_t *b)
{
    uint8_t sc[8], m[8];
    float ds[8], dm[8];
    int q[PL_QK_K];
    s_k_scales(x, 15, &b->d, &b->dmin, sc, m, ds, dm);
    s_k_pack_scales(sc, m, b->scales);
    s_k_quants(x, 15, ds, dm, q);
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++)
            b->qs[32 * c + l] = (uint8_t)(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
}

static void s_q5_k(const float *x, pl_block_q5_k_t *b)
{
    uint8_t sc[8], m[8];
    float ds[8], dm[8];
    int q[PL_QK_K];
    s_k_scales(x, 31, &b->d, &b->dmin, sc, m, ds, dm);
    s_k_pack_scales(sc, m, b->scales);
    s_k_quants(x, 31, ds, dm, q);
    memset(b->qh, 0, sizeof(b->qh));
    for (int c = 0; c < 4; c++) {
        for (int l = 0; l < 32; l++) {
            int lo = q[64 * c + l], hi = q[64 * c + 32 + l];
            b->qs[32 * c + l] = (uint8_t)((lo & 0xF) | ((hi & 0xF) << 4));
            b->qh[l] |= (uint8_t)(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
        }
    }
}

/* Sixteen sub-blocks of 16, x = d * sc_j * (q - 32): |x - y| <= d * sc_j / 2, with
 * d * sc_j <= amax_j / 31 + d. */
static void s_q6_k(const float *x, pl_block_q6_k_t *b)
{
    float need[16], max_need = 0.0f, d, ds[16];
    for (int j = 0; j < 16; j++) {
        need[j] = s_amax(x + 16 * j, 16) / 31.0f;
        max_need = fmaxf(max_need, need[j]);
    }
    b->d = s_f16_ceil(max_need / 127.0f);
    d = pl_f16_to_f32(b->d);
    for (int j = 0; j < 16; j++) {
        b->scales[j] = d > 0.0f ? (int8_t)s_clamp(lrintf(ceilf(need[j] / d)), 0, 127) : 0;
        ds[j] = d * b->scales[j];
    }
    memset(b->ql, 0, sizeof(b->ql));
    memset(b->qh, 0, sizeof(b->qh));
    for (int e = 0; e < PL_QK_K; e++) {
        int j = e / 16, h = e / 128, part = (e % 128) / 32, l = e % 32;
        int q = (ds[j] > 0.0f ? s_clamp(lrintf(x[e] / ds[j]), -32, 31) : 0) + 32;
        int qi = 64 * h + l + (part & 1) * 32;
        b->ql[qi] |= (uint8_t)((q & 0xF) << (part < 2 ? 0 : 4));
        b->qh[32 * h + l] |= (uint8_t)((q >> 4) << (2 * part));
    }
}

void pl_wtype_from_f32(pl_wtype_t dt, const float *src, size_t n, void *dst)
{
    unsigned char *p = dst;
    size_t bb = pl_wtype_info(dt)->block_bytes;
    int blk = pl_wtype_info(dt)->block;
    uint16_t h;
    pl_block_any_t b;

    switch (dt) {
    case PL_WT_F32:
        memcpy(dst, src, n * 4);
        return;
    case PL_WT_F16:
    case PL_WT_BF16:
        for (size_t i = 0; i < n; i++) {
            h = dt == PL_WT_F16 ? pl_f32_to_f16(src[i]) : pl_f32_to_bf16(src[i]);
            memcpy(p + 2 * i, &h, 2);
        }
        return;
    default:
        break;
    }
    if (blk <= 1)
        return;
    for (size_t i = 0; i < n / (size_t)blk; i++) {
        const float *x = src + i * (size_t)blk;
        switch (dt) {
        case PL_WT_Q8_0: s_q8_0(x, &b.q8_0); break;
        case PL_WT_Q4_0: s_q4_0(x, &b.q4_0); break;
        case PL_WT_Q4_K: s_q4_k(x, &b.q4_k); break;
        case PL_WT_Q5_K: s_q5_k(x, &b.q5_k); break;
        case PL_WT_Q6_K: s_q6_k(x, &b.q6_k); break;
        default: return;
        }
        memcpy(p + i * bb, &b, bb);
    }
}
