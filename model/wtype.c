/* Weight types: the geometry table and the scalar conversion to f32 that every other conversion
 * (the CPU kernels' vector paths, the GPU upload) must match bit for bit. */
#include "model/wtype.h"

#include "common/util.h"

#include <string.h>

static const pl_wtype_info_t s_info[PL_WT_COUNT] = {
    [PL_WT_F32] = {.name = "F32", .block = 1, .block_bytes = 4},
    [PL_WT_F16] = {.name = "F16", .block = 1, .block_bytes = 2},
    [PL_WT_BF16] = {.name = "BF16", .block = 1, .block_bytes = 2},
};

const pl_wtype_info_t *pl_wtype_info(pl_wtype_t t)
{
    return (unsigned)t < PL_WT_COUNT && s_info[t].name ? &s_info[t] : NULL;
}

const char *pl_wtype_name(pl_wtype_t t)
{
    const pl_wtype_info_t *i = pl_wtype_info(t);
    return i ? i->name : "?";
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

void pl_wtype_to_f32(pl_wtype_t t, const void *src, size_t n, float *dst)
{
    const unsigned char *p = src;
    uint16_t h;

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
    case PL_WT_COUNT:
        break;
    }
}
