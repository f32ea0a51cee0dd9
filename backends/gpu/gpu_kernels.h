/* Host-callable launchers of the GPU kernels (one .cu per op in backends/gpu), shared by the CUDA
 * and HIP builds. Pointers are device memory unless named *_h; each launcher enqueues on `s`. */
#ifndef PL_BACKENDS_GPU_GPU_KERNELS_H
#define PL_BACKENDS_GPU_GPU_KERNELS_H

#include "backends/gpu/gpu_vendor.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "model/model.h"

/* Largest head_dim the attention kernels handle. */
#define PL_GPU_MAX_HEAD_DIM 256

/* out[i] = f32(table[ids[i]]) for n rows; table [vocab][hidden] of dtype dt. Ids in range. */
cudaError_t pl_gpu_embed(const void *table, pl_dtype_t dt, int hidden, const int32_t *ids, int n,
                         float *out, cudaStream_t s);

/* out[r] = x[src] * rsqrt(mean(x[src]^2) + eps) * w with src = rows ? rows[r] : r, for n_rows
 * rows of dim floats; out is written in out_dt. */
cudaError_t pl_gpu_rmsnorm(const float *x, const int32_t *rows, int n_rows, int dim, const float *w,
                           float eps, void *out, pl_dtype_t out_dt, cudaStream_t s);

/* cos/sin tables [n][n_half] for positions pos[0..n): cos((double)pos * inv_freq[i]) as f32. */
cudaError_t pl_gpu_rope_table(const double *inv_freq, int n_half, const int32_t *pos, int n,
                              float *cos_tab, float *sin_tab, cudaStream_t s);

/* Rows of qkv are [q: n_heads*hd][k: n_kv*hd][v: n_kv*hd] (f32, row stride qkv_stride). Rotates
 * q in place (rotate_half pairs i, i+hd/2), and writes rotated k and v of token t into the
 * caches ([slot][max_ctx][n_kv*hd] of kv_dt) at slot tok_slot[t], position tok_pos[t]. */
cudaError_t pl_gpu_rope_kv(float *qkv, int n_tok, int qkv_stride, int n_heads, int n_kv, int hd,
                           const float *cos_tab, const float *sin_tab, const int32_t *tok_slot,
                           const int32_t *tok_pos, void *k_cache, void *v_cache, pl_dtype_t kv_dt,
                           int max_ctx, cudaStream_t s);

/* out[r][i] = silu(gu[r][i]) * gu[r][inter + i] for n_rows rows, written in out_dt. */
cudaError_t pl_gpu_swiglu(const float *gu, int n_rows, int inter, void *out, pl_dtype_t out_dt,
                          cudaStream_t s);

/* Causal grouped-query attention over the KV cache for a batch of sequences. Sequence i has
 * seq_ntok[i] query rows starting at row seq_off[i] of q, at positions seq_pos0[i].., and reads
 * cache slot seq_slot[i] (all device arrays of n_seq). Query rows hold n_heads heads of
 * head_dim floats; the output row has the same layout in out_dt. */
typedef struct {
    const float *q;
    int q_stride; /* floats between query rows */
    const void *k_cache, *v_cache;
    pl_dtype_t kv_dt;
    int max_ctx;
    int n_heads, n_kv, head_dim;
    float scale;
    int n_seq;
    const int32_t *seq_slot, *seq_pos0, *seq_ntok, *seq_off;
    void *out;
    pl_dtype_t out_dt;
    int out_stride; /* elements between output rows */
} pl_gpu_attn_args_t;

/* Flash-decoding for the last query row of each sequence: `splits` blocks per (sequence, head)
 * each cover `chunk` positions (splits * chunk >= every sequence's length); work holds
 * n_seq * n_heads * splits * (head_dim + 2) floats of partial max / sum / accumulator. */
cudaError_t pl_gpu_attn_decode(const pl_gpu_attn_args_t *a, int splits, int chunk, float *work,
                               cudaStream_t s);

/* Every query row (prefill or mixed batches), online softmax over KV tiles; max_ntok is the
 * largest seq_ntok. */
cudaError_t pl_gpu_attn_prefill(const pl_gpu_attn_args_t *a, int max_ntok, cudaStream_t s);

/* Threads per block of the built-in GEMV (one warp per output column). */
#define PL_GPU_GEMV_THREADS 256

/* Built-in GEMM: y[m][n] (+)= x[m][k] . w[n][k]^T with x f32, w of w_dt, f32 accumulation.
 * gemv_cols: output columns per GEMV block (few rows of x), pl_gpu_gemv_cols() for the device;
 * any positive value gives the same result, the right one wastes no warps. */
cudaError_t pl_gpu_gemm_builtin(const float *x, int m, int k, const void *w, pl_dtype_t w_dt, int n,
                                float *y, bool accumulate, int gemv_cols, cudaStream_t s);

/* out[i] = x[i] converted to dt (round to nearest even). */
cudaError_t pl_gpu_cast(const float *x, size_t n, void *out, pl_dtype_t dt, cudaStream_t s);

/* Reads n floats (n a multiple of 4, 16-byte aligned) and writes one sum per block into sink
 * (at least pl_gpu_read_blocks() floats): a memory read-bandwidth probe. */
cudaError_t pl_gpu_read_sum(const float *x, size_t n, float *sink, cudaStream_t s);
int pl_gpu_read_blocks(void);

#ifdef __cplusplus
}
#endif

#endif
