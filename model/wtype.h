/* Weight types: how a matrix is stored (f32, f16, bf16, and ggml's block-quantized Q8_0, Q4_0,
 * Q4_K, Q5_K, Q6_K, byte for byte as ggml lays them out), with each type's block geometry, name,
 * conversion of a run of elements to f32 and quantization from f32. */
#ifndef PL_MODEL_WTYPE_H
#define PL_MODEL_WTYPE_H

#include "common/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The first values equal pl_dtype_t's (model.h), so a safetensors dtype converts by value. */
typedef enum {
    PL_WT_F32 = 0,
    PL_WT_F16 = 1,
    PL_WT_BF16 = 2,
    PL_WT_Q8_0 = 3,
    PL_WT_Q4_0 = 4,
    PL_WT_Q4_K = 5,
    PL_WT_Q5_K = 6,
    PL_WT_Q6_K = 7,
    PL_WT_COUNT
} pl_wtype_t;

typedef struct {
    const char *name;   /* "F32", "BF16", "Q4_K", ... */
    int block;          /* elements per block (1 for the float types) */
    size_t block_bytes; /* bytes of one block as stored */
    bool quantized;     /* blocks with scales, not one float per element */
} pl_wtype_info_t;

/* Geometry and name of t; NULL when t is not a pl_wtype_t value. */
const pl_wtype_info_t *pl_wtype_info(pl_wtype_t t);
/* The type's name, "?" for a value outside the enum. */
const char *pl_wtype_name(pl_wtype_t t);
/* The type named `name`, in either case ("q4_k", "Q4_K"); PL_ERR_UNSUPPORTED listing the names. */
pl_status_t pl_wtype_parse(const char *name, pl_wtype_t *t_p);
/* Bytes of one row of `cols` elements of type t; fails when cols is not a whole number of blocks
 * or the size overflows. */
pl_status_t pl_wtype_row_bytes(pl_wtype_t t, int64_t cols, size_t *bytes_p);
/* Convert n elements (a whole number of blocks) at src, any alignment, to f32. */
void pl_wtype_to_f32(pl_wtype_t t, const void *src, size_t n, float *dst);
/* Quantize (or round) n f32 values (a whole number of blocks) into t's layout at dst (any
 * alignment). Each block's round trip stays within the bound stated beside its quantizer in
 * wtype_quant.c. */
void pl_wtype_from_f32(pl_wtype_t t, const float *src, size_t n, void *dst);

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

/* Room for one block of any type: a block is copied in or out of the (unaligned) mapping. */
typedef union {
    pl_block_q8_0_t q8_0;
    pl_block_q4_0_t q4_0;
    pl_block_q4_k_t q4_k;
    pl_block_q5_k_t q5_k;
    pl_block_q6_k_t q6_k;
} pl_block_any_t;

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
