/* The packed layout of float weight matrices (cpu_pack.h): where each element goes. */
#include "backends/cpu/cpu_pack.h"

#include "common/util.h"

#include <string.h>

static size_t s_esz(pl_wtype_t t)
{
    return t == PL_WT_F32 ? 4 : 2;
}

bool pl_cpu_pack_suits(const pl_cpu_wmat_t *w)
{
    return !w->packed && w->data && w->rows > 0 && w->cols > 0 &&
           (w->type == PL_WT_F32 || w->type == PL_WT_F16 || w->type == PL_WT_BF16) &&
           w->row_bytes == (size_t)w->cols * s_esz(w->type);
}

size_t pl_cpu_pack_bytes(const pl_cpu_wmat_t *w)
{
    size_t panels = ((size_t)w->rows + PL_CPU_PACK_ROWS - 1) / PL_CPU_PACK_ROWS;
    return panels * PL_CPU_PACK_ROWS * w->row_bytes;
}

/* Element index, inside its panel, of position i of the panel's row o. */
static size_t s_index(pl_wtype_t t, int k, int o, int i)
{
    int k16 = k & ~15;
    if (i >= k16)
        return (size_t)k16 * PL_CPU_PACK_ROWS + (size_t)o * (size_t)(k - k16) + (size_t)(i - k16);
    size_t blk = (size_t)(i >> 4) * 64 + (size_t)(o >> 1) * 32;
    return t == PL_WT_BF16 ? blk + (size_t)(i & 15) * 2 + (size_t)(o & 1)
                           : blk + (size_t)(o & 1) * 16 + (size_t)(i & 15);
}

void pl_cpu_pack(const pl_cpu_wmat_t *w, void *dst)
{
    size_t esz = s_esz(w->type), panels = pl_cpu_pack_bytes(w) / (PL_CPU_PACK_ROWS * w->row_bytes);
    unsigned char *d = dst;

    memset(dst, 0, pl_cpu_pack_bytes(w)); /* the rows past the matrix */
    for (size_t p = 0; p < panels; p++) {
        unsigned char *panel = d + p * PL_CPU_PACK_ROWS * w->row_bytes;
        for (int o = 0; o < PL_CPU_PACK_ROWS; o++) {
            size_t r = p * PL_CPU_PACK_ROWS + (size_t)o;
            if (r >= (size_t)w->rows)
                break;
            const unsigned char *src = (const unsigned char *)w->data + r * w->row_bytes;
            for (int i = 0; i < w->cols; i++)
                memcpy(panel + s_index(w->type, w->cols, o, i) * esz, src + (size_t)i * esz, esz);
        }
    }
}

void pl_cpu_pack_row_f32(const pl_cpu_wmat_t *w, int r, float *dst)
{
    size_t esz = s_esz(w->type);
    const unsigned char *panel = (const unsigned char *)w->data +
                                 (size_t)(r / PL_CPU_PACK_ROWS) * PL_CPU_PACK_ROWS * w->row_bytes;
    int o = r % PL_CPU_PACK_ROWS;
    for (int i = 0; i < w->cols; i++) {
        const unsigned char *p = panel + s_index(w->type, w->cols, o, i) * esz;
        uint16_t h;
        if (w->type == PL_WT_F32) {
            memcpy(&dst[i], p, 4);
            continue;
        }
        memcpy(&h, p, 2);
        dst[i] = w->type == PL_WT_F16 ? pl_f16_to_f32(h) : pl_bf16_to_f32(h);
    }
}
