/* Pure host-side planning for the GPU backends (no GPU API here, so tests run it anywhere):
 * stage and batch validation, RoPE inverse frequencies, flash-decoding splits, the per-forward
 * metadata block, and the byte layout of a stage's device buffers. */
#ifndef PL_BACKENDS_GPU_GPU_PLAN_H
#define PL_BACKENDS_GPU_GPU_PLAN_H

#include "backends/backend.h"
#include "common/status.h"
#include "model/model.h"

#include <stddef.h>
#include <stdint.h>

#define PL_GPU_PLAN_MAX_HEAD_DIM 256   /* same as PL_GPU_MAX_HEAD_DIM of the kernels */
#define PL_GPU_PLAN_ALIGN 256          /* byte alignment of every buffer in a layout */
#define PL_GPU_DECODE_MIN_CHUNK 256    /* positions per flash-decoding block, at least */
#define PL_GPU_DECODE_MAX_BLOCKS 16384 /* cap on (sequences x heads x splits) */
/* Launch limits: grid dimensions y and z hold at most 65,535 blocks on both vendors. Sequences
 * and heads are y/z dimensions of the attention grids, decode splits a y dimension, and the
 * built-in GEMM's 64-row tiles of the tokens a y dimension. */
#define PL_GPU_GRID_MAX_YZ 65535
#define PL_GPU_MAX_SEQS PL_GPU_GRID_MAX_YZ
#define PL_GPU_MAX_TOKENS (PL_GPU_GRID_MAX_YZ * 64)

/* Check that the GPU kernels support the model and the stage parameters are sane (layer range
 * inside the model, positive limits, sizes that fit int32 indexing and the launch grids: at most
 * PL_GPU_MAX_SEQS sequences, PL_GPU_MAX_TOKENS tokens, PL_GPU_GRID_MAX_YZ heads and decode
 * splits). */
pl_status_t pl_gpu_stage_check(const pl_model_config_t *cfg, const pl_be_stage_params_t *p);

/* Check one microbatch against the stage limits: counts, n_tok sum, slots in range and distinct,
 * positions inside max_ctx. The message names the offending field and sequence. */
pl_status_t pl_gpu_batch_check(const pl_be_batch_t *b, int max_seqs, int max_ctx, int max_tokens);

/* Flash-decoding shape for n_seq single-token sequences: splits * chunk >= max_ctx, chunk at
 * least PL_GPU_DECODE_MIN_CHUNK unless max_ctx is smaller, blocks capped. */
void pl_gpu_decode_split(int max_ctx, int n_seq, int n_heads, int *splits_p, int *chunk_p);
/* Floats of partial results the decode kernels need for up to max_seqs sequences. */
size_t pl_gpu_decode_work_floats(int max_ctx, int max_seqs, int n_heads, int head_dim);

/* Output columns per block of the built-in GEMV, one warp per column: threads / warp_size for a
 * warp of 32 or 64 lanes that divides threads (8 on NVIDIA and RDNA's wave32, 4 on CDNA's
 * wave64), else threads / 64, the fewest any device runs. */
int pl_gpu_gemv_cols(int threads, int warp_size);

/* Offsets (in int32 elements) of the arrays inside the metadata block uploaded per forward. */
typedef struct {
    int n_tokens, n_seq;
    int max_ntok;    /* largest n_tok */
    bool decode;     /* every sequence contributes one token */
    size_t tok_id;   /* [n_tokens] token ids (0 when the input is hidden states) */
    size_t tok_pos;  /* [n_tokens] absolute position */
    size_t tok_slot; /* [n_tokens] KV slot */
    size_t seq_slot, seq_pos0, seq_ntok, seq_off; /* [n_seq] each */
    size_t last_row;                              /* [n_seq] index of each sequence's last token */
    size_t count;                                 /* total int32 elements */
} pl_gpu_meta_t;

/* Int32 elements of metadata for up to max_tokens tokens and max_seqs sequences. */
size_t pl_gpu_meta_capacity(int max_tokens, int max_seqs);
/* Lay out and fill the metadata of a checked batch into meta (capacity `cap` elements); ids may
 * be NULL. The layout depends only on (n_tokens, n_seq). */
pl_status_t pl_gpu_meta_fill(const pl_be_batch_t *b, const int32_t *ids, int32_t *meta, size_t cap,
                             pl_gpu_meta_t *layout);

/* Byte layout of a stage's device scratch and pinned host buffers. */
typedef struct {
    size_t resid;               /* f32 [T][hidden] residual stream */
    size_t xa;                  /* act [T][max(hidden, heads*hd, inter)] GEMM inputs */
    size_t fb;                  /* f32 [T][max(qkv, 2*inter)] GEMM outputs */
    size_t cos_tab, sin_tab;    /* f32 [T][hd/2] */
    size_t inv_freq;            /* f64 [hd/2] */
    size_t work;                /* f32 decode partials */
    size_t xh;                  /* act [S][hidden] head input (has_head) */
    size_t logits;              /* f32 [S][vocab] (has_head) */
    size_t meta;                /* int32 metadata */
    size_t dev_bytes;           /* total device scratch */
    size_t h_meta, h_in, h_out; /* offsets in the pinned host block */
    size_t host_bytes;
    size_t kv_bytes;     /* K and V cache of all the stage's layers */
    size_t weight_bytes; /* device weights (matrices in w_dt, norms f32) */
} pl_gpu_layout_t;

/* Compute the layout for a checked stage: weights stored in w_dt, GEMM inputs in act_dt, KV cache
 * in kv_dt. Fails with PL_ERR_RANGE when a size overflows. */
pl_status_t pl_gpu_layout(const pl_model_config_t *cfg, const pl_be_stage_params_t *p,
                          pl_dtype_t w_dt, pl_dtype_t act_dt, pl_dtype_t kv_dt,
                          pl_gpu_layout_t *out);

#endif
