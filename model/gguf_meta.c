/* Typed reads of GGUF metadata: integers of any width, numbers, bools, strings and arrays, each
 * checked against the key's stored type; errors name the file and the key. */
#include "model/gguf.h"

#include <string.h>

static uint64_t s_le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* The integer at p of type t; false when t is not an integer type or the u64 exceeds INT64_MAX. */
static bool s_int_at(const unsigned char *p, pl_gguf_vtype_t t, int64_t *v)
{
    switch (t) {
    case PL_GGUF_U8: *v = p[0]; return true;
    case PL_GGUF_I8: *v = (int8_t)p[0]; return true;
    case PL_GGUF_U16: *v = (int64_t)s_le(p, 2); return true;
    case PL_GGUF_I16: *v = (int16_t)s_le(p, 2); return true;
    case PL_GGUF_U32: *v = (int64_t)s_le(p, 4); return true;
    case PL_GGUF_I32: *v = (int32_t)s_le(p, 4); return true;
    case PL_GGUF_I64: *v = (int64_t)s_le(p, 8); return true;
    case PL_GGUF_U64:
        if (s_le(p, 8) > (uint64_t)INT64_MAX)
            return false;
        *v = (int64_t)s_le(p, 8);
        return true;
    default: return false;
    }
}

static bool s_is_int(pl_gguf_vtype_t t)
{
    return t <= PL_GGUF_I32 || t == PL_GGUF_U64 || t == PL_GGUF_I64;
}

pl_status_t pl_gguf_get_int(const pl_gguf_t *g, const char *key, int64_t min, int64_t max,
                            int64_t *v_p)
{
    const pl_gguf_kv_t *kv = pl_gguf_find(g, key);
    int64_t v;

    if (!kv)
        return PL_ERR_NOT_FOUND;
    if (kv->type == PL_GGUF_ARR || !s_int_at(g->buf + kv->off, kv->type, &v))
        return pl_error(PL_ERR_INVALID, "%s: metadata '%s' is not an integer", g->label, key);
    if (v < min || v > max)
        return pl_error(PL_ERR_RANGE, "%s: metadata '%s' is %lld, outside [%lld, %lld]",
                        g->label, key, (long long)v, (long long)min, (long long)max);
    *v_p = v;
    return PL_OK;
}

pl_status_t pl_gguf_get_num(const pl_gguf_t *g, const char *key, double *v_p)
{
    const pl_gguf_kv_t *kv = pl_gguf_find(g, key);
    uint64_t bits;
    float f;
    double d;

    if (!kv)
        return PL_ERR_NOT_FOUND;
    if (kv->type == PL_GGUF_F32) {
        bits = s_le(g->buf + kv->off, 4);
        uint32_t b32 = (uint32_t)bits;
        memcpy(&f, &b32, 4);
        d = f;
    } else if (kv->type == PL_GGUF_F64) {
        bits = s_le(g->buf + kv->off, 8);
        memcpy(&d, &bits, 8);
    } else {
        return pl_error(PL_ERR_INVALID, "%s: metadata '%s' is not a number", g->label, key);
    }
    if (d != d || d - d != 0.0)
        return pl_error(PL_ERR_INVALID, "%s: metadata '%s' is not finite", g->label, key);
    *v_p = d;
    return PL_OK;
}

pl_status_t pl_gguf_get_bool(const pl_gguf_t *g, const char *key, bool *v_p)
{
    const pl_gguf_kv_t *kv = pl_gguf_find(g, key);
    if (!kv)
        return PL_ERR_NOT_FOUND;
    if (kv->type != PL_GGUF_BOOL)
        return pl_error(PL_ERR_INVALID, "%s: metadata '%s' is not a bool", g->label, key);
    *v_p = g->buf[kv->off] != 0;
    return PL_OK;
}

pl_status_t pl_gguf_get_str(const pl_gguf_t *g, const char *key, const char **s_p,
                            size_t *len_p)
{
    const pl_gguf_kv_t *kv = pl_gguf_find(g, key);
    if (!kv)
        return PL_ERR_NOT_FOUND;
    if (kv->type != PL_GGUF_STR)
        return pl_error(PL_ERR_INVALID, "%s: metadata '%s' is not a string", g->label, key);
    *s_p = (const char *)g->buf + kv->off;
    *len_p = (size_t)kv->n;
    return PL_OK;
}

pl_status_t pl_gguf_get_arr(const pl_gguf_t *g, const char *key, pl_gguf_vtype_t elem,
                            const pl_gguf_kv_t **kv_p)
{
    const pl_gguf_kv_t *kv = pl_gguf_find(g, key);
    bool int_ok;

    if (!kv)
        return PL_ERR_NOT_FOUND;
    /* an integer array may be stored in any integer width (u64 may not fit an int64_t) */
    int_ok = kv->type == PL_GGUF_ARR && s_is_int(elem) && s_is_int(kv->elem) &&
             kv->elem != PL_GGUF_U64;
    if (kv->type != PL_GGUF_ARR || (kv->elem != elem && !int_ok))
        return pl_error(PL_ERR_INVALID, "%s: metadata '%s' is not an array of the expected "
                        "type (%d)", g->label, key, (int)elem);
    *kv_p = kv;
    return PL_OK;
}

void pl_gguf_arr_str(const pl_gguf_t *g, const pl_gguf_kv_t *kv, uint64_t i, const char **s_p,
                     size_t *len_p)
{
    uint64_t off = kv->str_offs[i];
    *s_p = (const char *)g->buf + off;
    *len_p = (size_t)s_le(g->buf + off - 8, 8);
}

float pl_gguf_arr_f32(const pl_gguf_t *g, const pl_gguf_kv_t *kv, uint64_t i)
{
    uint32_t b = (uint32_t)s_le(g->buf + kv->off + 4 * i, 4);
    float f;
    memcpy(&f, &b, 4);
    return f;
}

int64_t pl_gguf_arr_int(const pl_gguf_t *g, const pl_gguf_kv_t *kv, uint64_t i)
{
    static const uint8_t size[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    int64_t v = 0;
    s_int_at(g->buf + kv->off + size[kv->elem] * i, kv->elem, &v);
    return v;
}
