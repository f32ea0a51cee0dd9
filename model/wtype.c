/* Weight types: the geometry table and the scalar conversion to f32 that every other conversion
 * (the CPU kernels' vector paths, the GPU upload) must match bit for bit; the block types'
 * dequantizers follow ggml's reference ones. */
#include "model/wtype.h"

#include "common/util.h"

#include <string.h>
#include <strings.h>

static const pl_wtype_info_t s_info[PL_WT_COUNT] = {
    [PL_WT_F32] = {.name = "F32", .block = 1, .block_bytes = 4},
    [PL_WT_F16] = {.name = "F16", .block = 1, .block_bytes = 2},
    [PL_WT_BF16] = {.name = "BF16", .block = 1, .block_bytes = 2},
    [PL_WT_Q8_0] = {"Q8_0", PL_QK8_0, sizeof(pl_block_q8_0_t), true},
    [PL_WT_Q4_0] = {"Q4_0", PL_QK8_0, sizeof(pl_block_q4_0_t), true},
    [PL_WT_Q4_K] = {"Q4_K", PL_QK_K, sizeof(pl_block_q4_k_t), true},
    [PL_WT_Q5_K] = {"Q5_K", PL_QK_K, sizeof(pl_block_q5_k_t), true},
    [PL_WT_Q6_K] = {"Q6_K", PL_QK_K, sizeof(pl_block_q6_k_t), true},
};

_Static_assert(sizeof(pl_block_q8_0_t) == 34, "ggml block_q8_0 is 34 bytes");
_Static_assert(sizeof(pl_block_q4_0_t) == 18, "ggml block_q4_0 is 18 bytes");
_Static_assert(sizeof(pl_block_q4_k_t) == 144, "ggml block_q4_K is 144 bytes");
_Static_assert(sizeof(pl_block_q5_k_t) == 176, "ggml block_q5_K is 176 bytes");
_Static_assert(sizeof(pl_block_q6_k_t) == 210, "ggml block_q6_K is 210 bytes");

const pl_wtype_info_t *pl_wtype_info(pl_wtype_t t)
{
    return (unsigned)t < PL_WT_COUNT && s_info[t].name ? &s_info[t] : NULL;
}

const char *pl_wtype_name(pl_wtype_t t)
{
    const pl_wtype_info_t *i = pl_wtype_info(t);
    return i ? i->name : "?";
}

pl_status_t pl_wtype_parse(const char *name, pl_wtype_t *t_p)
{
    for (int t = 0; t < PL_WT_COUNT; t++) {
        if (s_info[t].name && strcasecmp(name, s_info[t].name) == 0) {
            *t_p = (pl_wtype_t)t;
            return PL_OK;
        }
    }
    return pl_error(PL_ERR_UNSUPPORTED, "weight type '%.32s' is not one of f32 f16 bf16 q8_0 q4_0 "
                    "q4_k q5_k q6_k", name);
}

pl_status_t pl_wtype_row_bytes(pl_wtype_t t, int64_t cols, size_t *bytes_p)
{
    const pl_wtype_info_t *i = pl_wtype_info(t);
    size_t bytes;

    if (!i)
        return pl_error(PL_ERR_UNSUPPORTED, "weight type %d is not known", (int)t);
    if (cols < 0 || cols % i->block != 0)
        return pl_error(PL_ERR_INVALID,
                        "%s: a row of %lld elements is not a whole number of "
                        "%d-element blocks",
                        i->name, (long long)cols, i->block);
    if (__builtin_mul_overflow((uint64_t)(cols / i->block), i->block_bytes, &bytes))
        return pl_error(PL_ERR_RANGE, "%s: a row of %lld elements is too large", i->name,
                        (long long)cols);
    *bytes_p = bytes;
    return PL_OK;
}

static void s_q8_0(const pl_block_q8_0_t *b, float *y)
{
    float d = pl_f16_to_f32(b->d);
    for (int j = 0; j < PL_QK8_0; j++)
        y[j] = d * (float)b->qs[j];
}

static void s_q4_0(const pl_block_q4_0_t *b, float *y)
{
    float d = pl_f16_to_f32(b->d);
    for (int j = 0; j < PL_QK8_0 / 2; j++) {
        y[j] = d * (float)((b->qs[j] & 0xF) - 8);
        y[j + PL_QK8_0 / 2] = d * (float)((b->qs[j] >> 4) - 8);
    }
}

static void s_q4_k(const pl_block_q4_k_t *b, float *y)
{
    const uint8_t *q = b->qs;
    float d = pl_f16_to_f32(b->d), dmin = pl_f16_to_f32(b->dmin);
    uint8_t sc, m;
    for (int j = 0, is = 0; j < PL_QK_K; j += 64, is += 2, q += 32) {
        pl_k_scale_min(is, b->scales, &sc, &m);
        float d1 = d * sc, m1 = dmin * m;
        pl_k_scale_min(is + 1, b->scales, &sc, &m);
        float d2 = d * sc, m2 = dmin * m;
        for (int l = 0; l < 32; l++)
            *y++ = d1 * (float)(q[l] & 0xF) - m1;
        for (int l = 0; l < 32; l++)
            *y++ = d2 * (float)(q[l] >> 4) - m2;
    }
}

static void s_q5_k(const pl_block_q5_k_t *b, float *y)
{
    const uint8_t *ql = b->qs, *qh = b->qh;
    float d = pl_f16_to_f32(b->d), dmin = pl_f16_to_f32(b->dmin);
    uint8_t sc, m, u1 = 1, u2 = 2;
    for (int j = 0, is = 0; j < PL_QK_K; j += 64, is += 2, ql += 32) {
        pl_k_scale_min(is, b->scales, &sc, &m);
        float d1 = d * sc, m1 = dmin * m;
        pl_k_scale_min(is + 1, b->scales, &sc, &m);
        float d2 = d * sc, m2 = dmin * m;
        for (int l = 0; l < 32; l++)
            *y++ = d1 * (float)((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
        for (int l = 0; l < 32; l++)
            *y++ = d2 * (float)((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        u1 = (uint8_t)(u1 << 2);
        u2 = (uint8_t)(u2 << 2);
    }
}

static void s_q6_k(const pl_block_q6_k_t *b, float *y)
{
    const uint8_t *ql = b->ql, *qh = b->qh;
    const int8_t *sc = b->scales;
    float d = pl_f16_to_f32(b->d);
    for (int n = 0; n < PL_QK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = (int)((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32;
            int q2 = (int)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            int q3 = (int)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            int q4 = (int)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l] = d * sc[is] * (float)q1;
            y[l + 32] = d * sc[is + 2] * (float)q2;
            y[l + 64] = d * sc[is + 4] * (float)q3;
            y[l + 96] = d * sc[is + 6] * (float)q4;
        }
    }
}

void pl_wtype_to_f32(pl_wtype_t t, const void *src, size_t n, float *dst)
{
    const unsigned char *p = src;
    const pl_wtype_info_t *info = pl_wtype_info(t);
    uint16_t h;
    /* the mapping need not be aligned: each block is copied out before it is read */
    pl_block_any_t b;

    switch (t) {
    case PL_WT_F32:
        memcpy(dst, src, n * 4);
        return;
    case PL_WT_F16:
        for (size_t i = 0; i < n; i++) {
            memcpy(&h, p + 2 * i, 2); /* the mapping need not be 2-byte aligned */
            dst[i] = pl_f16_to_f32(h);
        }
        return;
    case PL_WT_BF16:
        for (size_t i = 0; i < n; i++) {
            memcpy(&h, p + 2 * i, 2);
            dst[i] = pl_bf16_to_f32(h);
        }
        return;
    default:
        break;
    }
    if (!info)
        return;
    for (size_t i = 0; i < n / (size_t)info->block; i++) {
        memcpy(&b, p + i * info->block_bytes, info->block_bytes);
        switch (t) {
        case PL_WT_Q8_0: s_q8_0(&b.q8_0, dst + i * PL_QK8_0); break;
        case PL_WT_Q4_0: s_q4_0(&b.q4_0, dst + i * PL_QK8_0); break;
        case PL_WT_Q4_K: s_q4_k(&b.q4_k, dst + i * PL_QK_K); break;
        case PL_WT_Q5_K: s_q5_k(&b.q5_k, dst + i * PL_QK_K); break;
        case PL_WT_Q6_K: s_q6_k(&b.q6_k, dst + i * PL_QK_K); break;
        default: return;
        }
    }
}
