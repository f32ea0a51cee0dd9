/* Weight types: how a matrix is stored (f32, f16, bf16; quantized block types join here), with
 * each type's block geometry, name and conversion of a run of elements to f32. */
#ifndef PL_MODEL_WTYPE_H
#define PL_MODEL_WTYPE_H

#include "common/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The first values equal pl_dtype_t's (model.h), so a safetensors dtype converts by value. */
typedef enum { PL_WT_F32 = 0, PL_WT_F16 = 1, PL_WT_BF16 = 2, PL_WT_COUNT } pl_wtype_t;

typedef struct {
    const char *name;   /* "F32", "BF16", ... */
    int block;          /* elements per block (1 for the float types) */
    size_t block_bytes; /* bytes of one block as stored */
    bool quantized;     /* blocks with scales, not one float per element */
} pl_wtype_info_t;

/* Geometry and name of t; NULL when t is not a pl_wtype_t value. */
const pl_wtype_info_t *pl_wtype_info(pl_wtype_t t);
/* The type's name, "?" for a value outside the enum. */
const char *pl_wtype_name(pl_wtype_t t);
/* Bytes of one row of `cols` elements of type t; fails when cols is not a whole number of blocks
 * or the size overflows. */
pl_status_t pl_wtype_row_bytes(pl_wtype_t t, int64_t cols, size_t *bytes_p);
/* Convert n elements (a whole number of blocks) at src, any alignment, to f32. */
void pl_wtype_to_f32(pl_wtype_t t, const void *src, size_t n, float *dst);

#endif
