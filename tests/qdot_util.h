/* Test fixtures for the quantized CPU dots: weight blocks of any quantized type, as quantized
 * random values or as random bytes with finite scales (every quant bit pattern). */
#ifndef PL_TESTS_QDOT_UTIL_H
#define PL_TESTS_QDOT_UTIL_H

#include "common/util.h"
#include "model/wtype.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* nb blocks of type dt into w: mode 0 quantizes random values in [-0.1, 0.1); mode 1 writes
 * random bytes, then small random f16 scales where the type keeps them. */
static inline void qt_weights(pl_wtype_t dt, int nb, int mode, uint64_t seed, unsigned char *w)
{
    int blk = pl_wtype_info(dt)->block;
    size_t bb = pl_wtype_info(dt)->block_bytes;
    if (mode == 0) {
        float *x = malloc((size_t)nb * blk * sizeof(float));
        cr_assert_not_null(x, "%d blocks of %s", nb, pl_wtype_info(dt)->name);
        for (int i = 0; i < nb * blk; i++)
            x[i] = (pl_rand_uniform(seed, (uint64_t)i) - 0.5f) * 0.2f;
        pl_wtype_from_f32(dt, x, (size_t)nb * blk, w);
        free(x);
        return;
    }
    for (size_t i = 0; i < (size_t)nb * bb; i++)
        w[i] = (unsigned char)pl_rand_u64(seed, i);
    for (int b = 0; b < nb; b++) {
        size_t offs[2] = {dt == PL_WT_Q6_K ? 208 : 0, 2};
        int n_offs = dt == PL_WT_Q4_K || dt == PL_WT_Q5_K ? 2 : 1;
        for (int k = 0; k < n_offs; k++) {
            uint16_t h =
                pl_f32_to_f16((pl_rand_uniform(seed + 9, (uint64_t)(2 * b + k)) - 0.5f) * 0.01f);
            memcpy(w + (size_t)b * bb + offs[k], &h, 2);
        }
    }
}

#endif
