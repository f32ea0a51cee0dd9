/* The wire dtypes of activation payloads: names, sizes, and the f32 <-> bf16 / f16 conversions
 * (IEEE round to nearest even, subnormals and infinities kept, NaN payloads kept). */
#include "transport/act.h"

#include <string.h>

static const char *const s_names[PL_ACT_DTYPE_COUNT] = {"f32", "bf16", "f16"};

const char *pl_act_dtype_name(pl_act_dtype_t dtype)
{
    return (unsigned)dtype < PL_ACT_DTYPE_COUNT ? s_names[dtype] : NULL;
}

pl_status_t pl_act_dtype_parse(const char *name, pl_act_dtype_t *dtype_p)
{
    for (int i = 0; i < PL_ACT_DTYPE_COUNT; i++) {
        if (strcmp(name, s_names[i]) == 0) {
            *dtype_p = (pl_act_dtype_t)i;
            return PL_OK;
        }
    }
    return pl_error(PL_ERR_INVALID, "wire dtype '%s': expected f32, bf16 or f16", name);
}

size_t pl_act_dtype_size(pl_act_dtype_t dtype)
{
    return dtype == PL_ACT_F32 ? 4 : 2;
}

static uint32_t s_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static float s_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

uint16_t pl_act_f32_to_bf16(float f)
{
    uint32_t u = s_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) { /* NaN: keep the top of its payload, stay NaN */
        uint16_t h = (uint16_t)(u >> 16);
        return (h & 0x7f) ? h : (uint16_t)(h | 0x40);
    }
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float pl_act_bf16_to_f32(uint16_t h)
{
    return s_float((uint32_t)h << 16);
}

uint16_t pl_act_f32_to_f16(float f)
{
    uint32_t u = s_bits(f), a = u & 0x7fffffffu;
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    if (a > 0x7f800000u) { /* NaN */
        uint16_t m = (uint16_t)((a >> 13) & 0x3ffu);
        return (uint16_t)(sign | 0x7c00u | (m ? m : 0x200u));
    }
    if (a >= 0x477ff000u) /* 65520 and up (infinity included) round to infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below 2^-14: a subnormal half, or zero */
        uint32_t e = a >> 23;
        if (e < 102) /* below 2^-25 */
            return sign;
        uint32_t m = (a & 0x7fffffu) | 0x800000u, s = 126 - e;
        uint32_t r = m >> s, rem = m & ((1u << s) - 1), half = 1u << (s - 1);
        if (rem > half || (rem == half && (r & 1u)))
            r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = a - 0x38000000u; /* exponent rebiased from 127 to 15 */
    return (uint16_t)(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
}

float pl_act_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f)
        return s_float(sign | 0x7f800000u | (m << 13));
    if (e)
        return s_float(sign | ((e + 112) << 23) | (m << 13));
    if (!m)
        return s_float(sign);
    for (e = 113; !(m & 0x400u); e--)
        m <<= 1;
    return s_float(sign | (e << 23) | ((m & 0x3ffu) << 13));
}

static uint16_t s_get_u16(const unsigned char *p)
{
    return (uint16_t)(p[0] | (uint16_t)p[1] << 8);
}

void pl_act_payload_f32(const pl_act_hdr_t *hdr, const void *payload, float *scratch,
                        const float **f32_p)
{
    const unsigned char *p = payload;
    size_t n = (size_t)hdr->n_tokens * hdr->dim;
    switch ((pl_act_dtype_t)hdr->dtype) {
    case PL_ACT_F32:
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        *f32_p = payload;
        return;
#else
        for (size_t i = 0; i < n; i++, p += 4)
            scratch[i] = s_float((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                                 (uint32_t)p[3] << 24);
        break;
#endif
    case PL_ACT_BF16:
        for (size_t i = 0; i < n; i++, p += 2)
            scratch[i] = pl_act_bf16_to_f32(s_get_u16(p));
        break;
    case PL_ACT_F16:
        for (size_t i = 0; i < n; i++, p += 2)
            scratch[i] = pl_act_f16_to_f32(s_get_u16(p));
        break;
    }
    *f32_p = scratch;
}

void pl_act_round(pl_act_dtype_t dtype, float *x, size_t n)
{
    if (dtype == PL_ACT_BF16)
        for (size_t i = 0; i < n; i++)
            x[i] = pl_act_bf16_to_f32(pl_act_f32_to_bf16(x[i]));
    else if (dtype == PL_ACT_F16)
        for (size_t i = 0; i < n; i++)
            x[i] = pl_act_f16_to_f32(pl_act_f32_to_f16(x[i]));
}
