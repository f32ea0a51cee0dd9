/* Weight types of stored tensors: plain F32 / F16 / BF16 and ggml's block-quantized Q8_0, Q4_0,
 * Q4_K, Q5_K, Q6_K, with their block layouts exactly as ggml defines them, and f32 conversions. */
#ifndef PL_MODEL_WTYPE_H
#define PL_MODEL_WTYPE_H

#include "common/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    PL_DT_F32 = 0,
    PL_DT_F16 = 1,
    PL_DT_BF16 = 2,
    PL_DT_Q8_0 = 3,
    PL_DT_Q4_0 = 4,
    PL_DT_Q4_K = 5,
    PL_DT_Q5_K = 6,
    PL_DT_Q6_K = 7,
} pl_dtype_t;
#define PL_DT_COUNT 8

#define PL_QK8_0 32 /* elements per Q8_0 / Q4_0 block */
#define PL_QK_K 256 /* elements per K-quant super-block */
#define PL_K_SCALE_SIZE 12

/* ggml's blocks, byte for byte (ggml_half is stored as uint16_t f16 bits). */
typedef struct {
    uint16_t d;            /* scale: x = d * q */
    int8_t qs[PL_QK8_0];
} pl_block_q8_0_t;

typedef struct {
    uint16_t d;                /* x = d * (q - 8) */
    uint8_t qs[PL_QK8_0 / 2];  /* element j in the low nibble of qs[j], j+16 in the high one */
} pl_block_q4_0_t;

typedef struct {
    uint16_t d, dmin;                 /* super-block scales of the 6-bit scales and mins */
    uint8_t scales[PL_K_SCALE_SIZE];  /* 8 (scale, min) pairs of 6 bits */
    uint8_t qs[PL_QK_K / 2];          /* 4-bit quants: x = d * sc * q - dmin * m */
} pl_block_q4_k_t;

typedef struct {
    uint16_t d, dmin;
    uint8_t scales[PL_K_SCALE_SIZE];
    uint8_t qh[PL_QK_K / 8];          /* the fifth bit of each quant */
    uint8_t qs[PL_QK_K / 2];
} pl_block_q5_k_t;

typedef struct {
    uint8_t ql[PL_QK_K / 2];  /* low 4 bits */
    uint8_t qh[PL_QK_K / 4];  /* high 2 bits */
    int8_t scales[PL_QK_K / 16];
    uint16_t d;               /* x = d * scale * (q - 32) */
} pl_block_q6_k_t;

/* Bytes per element of a plain type; 0 for block types (use the block functions). */
size_t pl_dtype_size(pl_dtype_t dt);
/* "F32", "Q4_K", ...; "?" for a value outside the enum. */
const char *pl_dtype_name(pl_dtype_t dt);
/* Elements per block: 1 for plain types, 32 or 256 for quantized ones. */
int pl_dtype_block(pl_dtype_t dt);
/* Bytes per block (the element size for plain types). */
size_t pl_dtype_block_bytes(pl_dtype_t dt);
/* True for the block-quantized types. */
bool pl_dtype_is_quant(pl_dtype_t dt);
/* Bytes of a row of n elements; PL_ERR_INVALID when n is not a whole number of blocks. */
pl_status_t pl_dtype_row_bytes(pl_dtype_t dt, int64_t n, size_t *bytes_p);

/* Convert n elements of type dt at src (any alignment, little-endian) to f32; n must be a whole
 * number of blocks (checked by whoever accepted the tensor). */
void pl_dtype_to_f32(pl_dtype_t dt, const void *src, size_t n, float *dst);
/* Quantize (or round) n f32 values into dt's layout at dst (pl_dtype_row_bytes bytes); n must be a
 * whole number of blocks. Each quantized block's round trip stays within the bound stated beside
 * its quantizer in wtype_quant.c. */
void pl_dtype_from_f32(pl_dtype_t dt, const float *src, size_t n, void *dst);

/* The 6-bit (scale, min) pair j in 0..7 of a Q4_K / Q5_K block's scales. */
static inline void pl_k_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

#endif
