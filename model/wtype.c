/* Weight types: sizes, names, block geometry, and dequantization of every type to f32, written
 * after ggml's reference dequantizers. Conversions of halves use common/'s helpers. */
#include "model/model.h"
#include "model/safetensors.h"

#include "common/util.h"

#include <string.h>

static const struct {
    const char *name;
    int block;
    size_t bytes;
} s_types[PL_DT_COUNT] = {
    [PL_DT_F32] = {"F32", 1, 4},
    [PL_DT_F16] = {"F16", 1, 2},
    [PL_DT_BF16] = {"BF16", 1, 2},
    [PL_DT_Q8_0] = {"Q8_0", PL_QK8_0, sizeof(pl_block_q8_0_t)},
    [PL_DT_Q4_0] = {"Q4_0", PL_QK8_0, sizeof(pl_block_q4_0_t)},
    [PL_DT_Q4_K] = {"Q4_K", PL_QK_K, sizeof(pl_block_q4_k_t)},
    [PL_DT_Q5_K] = {"Q5_K", PL_QK_K, sizeof(pl_block_q5_k_t)},
    [PL_DT_Q6_K] = {"Q6_K", PL_QK_K, sizeof(pl_block_q6_k_t)},
};

_Static_assert(sizeof(pl_block_q8_0_t) == 34, "ggml block_q8_0 is 34 bytes");
_Static_assert(sizeof(pl_block_q4_0_t) == 18, "ggml block_q4_0 is 18 bytes");
_Static_assert(sizeof(pl_block_q4_k_t) == 144, "ggml block_q4_K is 144 bytes");
_Static_assert(sizeof(pl_block_q5_k_t) == 176, "ggml block_q5_K is 176 bytes");
_Static_assert(sizeof(pl_block_q6_k_t) == 210, "ggml block_q6_K is 210 bytes");

static bool s_valid(pl_dtype_t dt)
{
    return (unsigned)dt < PL_DT_COUNT;
}

size_t pl_dtype_size(pl_dtype_t dt)
{
    return s_valid(dt) && s_types[dt].block == 1 ? s_types[dt].bytes : 0;
}

const char *pl_dtype_name(pl_dtype_t dt)
{
    return s_valid(dt) ? s_types[dt].name : "?";
}

int pl_dtype_block(pl_dtype_t dt)
{
    return s_valid(dt) ? s_types[dt].block : 0;
}

size_t pl_dtype_block_bytes(pl_dtype_t dt)
{
    return s_valid(dt) ? s_types[dt].bytes : 0;
}

bool pl_dtype_is_quant(pl_dtype_t dt)
{
    return s_valid(dt) && s_types[dt].block > 1;
}

pl_status_t pl_dtype_row_bytes(pl_dtype_t dt, int64_t n, size_t *bytes_p)
{
    if (!s_valid(dt))
        return pl_error(PL_ERR_UNSUPPORTED, "weight type %d is not supported", (int)dt);
    if (n < 0 || n % s_types[dt].block != 0)
        return pl_error(PL_ERR_INVALID, "a row of %lld elements is not a whole number of %s "
                        "blocks of %d", (long long)n, s_types[dt].name, s_types[dt].block);
    if ((uint64_t)(n / s_types[dt].block) > SIZE_MAX / s_types[dt].bytes)
        return pl_error(PL_ERR_RANGE, "a row of %lld %s elements is too large", (long long)n,
                        s_types[dt].name);
    *bytes_p = (size_t)(n / s_types[dt].block) * s_types[dt].bytes;
    return PL_OK;
}

pl_status_t pl_dtype_parse(const char *name, pl_dtype_t *dt_p)
{
    static const struct {
        const char *name;
        pl_dtype_t dt;
    } s_names[] = {{"F32", PL_DT_F32}, {"F16", PL_DT_F16}, {"BF16", PL_DT_BF16}};
    for (size_t i = 0; i < PL_ARRAY_SIZE(s_names); i++) {
        if (strcmp(name, s_names[i].name) == 0) {
            *dt_p = s_names[i].dt;
            return PL_OK;
        }
    }
    return pl_error(PL_ERR_UNSUPPORTED, "dtype '%s' is not supported (F32, F16, BF16 are)", name);
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

void pl_dtype_to_f32(pl_dtype_t dt, const void *src, size_t n, float *dst)
{
    const unsigned char *p = src;
    size_t bb = pl_dtype_block_bytes(dt), nb = n / (size_t)(s_valid(dt) ? s_types[dt].block : 1);
    uint16_t h;
    /* the mapping need not be aligned: each block is copied out before it is read */
    union {
        pl_block_q8_0_t q8_0;
        pl_block_q4_0_t q4_0;
        pl_block_q4_k_t q4_k;
        pl_block_q5_k_t q5_k;
        pl_block_q6_k_t q6_k;
    } b;

    switch (dt) {
    case PL_DT_F32:
        memcpy(dst, src, n * 4);
        return;
    case PL_DT_F16:
        for (size_t i = 0; i < n; i++) {
            memcpy(&h, p + 2 * i, 2);
            dst[i] = pl_f16_to_f32(h);
        }
        return;
    case PL_DT_BF16:
        for (size_t i = 0; i < n; i++) {
            memcpy(&h, p + 2 * i, 2);
            dst[i] = pl_bf16_to_f32(h);
        }
        return;
    default:
        break;
    }
    for (size_t i = 0; i < nb; i++) {
        memcpy(&b, p + i * bb, bb);
        switch (dt) {
        case PL_DT_Q8_0: s_q8_0(&b.q8_0, dst + i * PL_QK8_0); break;
        case PL_DT_Q4_0: s_q4_0(&b.q4_0, dst + i * PL_QK8_0); break;
        case PL_DT_Q4_K: s_q4_k(&b.q4_k, dst + i * PL_QK_K); break;
        case PL_DT_Q5_K: s_q5_k(&b.q5_k, dst + i * PL_QK_K); break;
        case PL_DT_Q6_K: s_q6_k(&b.q6_k, dst + i * PL_QK_K); break;
        default: return;
        }
    }
}
