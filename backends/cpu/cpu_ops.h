/* CPU kernels of a decoder layer in f32: RMSNorm, GEMM (OpenBLAS; typed weights in cpu_gemm.h),
 * RoPE with llama3 scaling, causal grouped-query attention over a KV cache, SwiGLU, bias and
 * residual adds. */
#ifndef PL_BACKENDS_CPU_CPU_OPS_H
#define PL_BACKENDS_CPU_CPU_OPS_H

#include "common/status.h"
#include "model/model.h"

#include <stddef.h>
#include <stdint.h>

/* Query rows scored together in one attention GEMM, and the chunks of pl_cpu_attention_decode
 * (one score row of scratch each); bounds the score scratch. */
#define PL_CPU_ATT_ROWS 32


/* out[r] = x[r] * rsqrt(mean(x[r]^2) + eps) * w for n_rows rows of dim floats (x == out is fine).
 */
void pl_cpu_rmsnorm(const float *x, const float *w, int n_rows, int dim, float eps, float *out);

/* y[n_rows][out_dim] = x[n_rows][in_dim] @ w^T, w row-major [out_dim][in_dim], through OpenBLAS
 * sgemm. Fast, but a row's rounding depends on the call's shape and on the row's place in it. */
void pl_cpu_matmul(const float *x, int n_rows, int in_dim, const float *w, int out_dim, float *y);

/* A fixed set of worker threads that share each job's chunks with the caller. */
typedef struct pl_cpu_pool pl_cpu_pool_t;

/* Start threads-1 workers (the caller is the last thread); threads <= 1 makes a pool that runs
 * everything on the caller. */
pl_status_t pl_cpu_pool_create(int threads, pl_cpu_pool_t **pool_p);
/* Stop and join the workers; sets *pool_p to NULL; safe on NULL. */
void pl_cpu_pool_destroy(pl_cpu_pool_t **pool_p);
/* Threads that run each job (1 for a NULL pool). */
int pl_cpu_pool_size(const pl_cpu_pool_t *pool);
/* Call fn(arg, c) once for each chunk c in 0..n_chunks-1 and return when all are done. The
 * caller and the workers that are running take chunks in turn, so a worker the scheduler keeps
 * off a core, or one still waking, delays the job by at most the chunk it holds: which thread
 * runs a chunk is not fixed, so a chunk's result must not depend on it. NULL pool: every chunk on
 * the caller. Not reentrant: one caller at a time. */
void pl_cpu_pool_chunks(pl_cpu_pool_t *pool, int n_chunks, void (*fn)(void *arg, int chunk),
                        void *arg);
/* What the pools of this process have done since it started (jobs with workers only; a job run
 * on the caller alone is not counted): jobs, jobs that had to wake a sleeping worker, jobs whose
 * caller found a worker still inside after its own last chunk (the barrier waits) and the
 * seconds it waited in all, and how many of those waits outlasted the spin and slept. */
typedef struct {
    uint64_t jobs, wakes, waits, sleeps;
    double wait_s;
} pl_cpu_pool_stats_t;
void pl_cpu_pool_stats(pl_cpu_pool_stats_t *stats);
/* Call fn(arg, i, n) once for each i in 0..n-1, n the pool's size, as chunks of
 * pl_cpu_pool_chunks (so not necessarily part i on thread i); NULL pool: fn(arg, 0, 1). */
void pl_cpu_pool_run(pl_cpu_pool_t *pool, void (*fn)(void *arg, int i, int n), void *arg);

/* y[r] = x[r] @ w^T for the n_rows row indices rows[] of x [*][in_dim] into y [*][out_dim].
 * Batch-invariant: a row's result is bitwise the same whatever the other rows, their number or
 * order, and the pool's thread count. */
void pl_cpu_matmul_rows(pl_cpu_pool_t *pool, const float *x, const int *rows, int n_rows,
                        int in_dim, const float *w, int out_dim, float *y);

/* cos_tab / sin_tab [n][half] for positions pos[0..n), computed in double, stored as f32. */
void pl_cpu_rope_table(const double *inv_freq, int half, const int *pos, int n, float *cos_tab,
                       float *sin_tab);

/* Rotate n_heads heads of each of n_rows rows in place, HF "rotate_half" pairing (i, i+half).
 * Row r starts at x + r * row_stride; its tables are cos_tab + r * half. */
void pl_cpu_rope_apply(float *x, int n_rows, int row_stride, int n_heads, int head_dim,
                       const float *cos_tab, const float *sin_tab);

/* Causal GQA attention of one sequence: n_tok queries q [n_tok][n_heads*head_dim] at positions
 * pos0 .. pos0+n_tok-1 attend to cache rows 0..their position of k_cache / v_cache
 * ([max_ctx][n_kv*head_dim], already holding every needed position); out like q.
 * scores holds at least PL_CPU_ATT_ROWS * (pos0 + n_tok) floats. Per head, blocks of
 * PL_CPU_ATT_ROWS queries through OpenBLAS sgemm: fast, but a row rounds by its block's shape,
 * so a prompt in chunks rounds unlike the whole (pl_cpu_attention_decode on every row does not);
 * one row takes pl_cpu_attention_heads. */
void pl_cpu_attention(const float *q, int n_tok, int pos0, const float *k_cache,
                      const float *v_cache, int n_heads, int n_kv, int head_dim, float *scores,
                      float *out);
/* pl_cpu_attention with its heads shared out on the pool, bitwise the same for any thread count
 * (with OpenBLAS on one thread); scores holds pl_cpu_pool_size(pool) * PL_CPU_ATT_ROWS *
 * (pos0 + n_tok) floats. */
void pl_cpu_attention_seq(pl_cpu_pool_t *pool, const float *q, int n_tok, int pos0,
                          const float *k_cache, const float *v_cache, int n_heads, int n_kv,
                          int head_dim, float *scores, float *out);

/* Decode's attention for one query row and head, per instruction set (the scalar one always,
 * AVX2 on x86-64): scores[j] = scale * q . k[j] for the n cache rows k + j * kv_stride, and
 * out[d] = sum_j p[j] * v[j * kv_stride + d]; hd floats per row, any hd >= 1. */
void pl_cpu_attn_scores_scalar(const float *q, const float *k, int kv_stride, int n, int hd,
                               float scale, float *scores);
void pl_cpu_attn_values_scalar(const float *p, const float *v, int kv_stride, int n, int hd,
                               float *out);
void pl_cpu_attn_scores_avx2(const float *q, const float *k, int kv_stride, int n, int hd,
                             float scale, float *scores);
void pl_cpu_attn_values_avx2(const float *p, const float *v, int kv_stride, int n, int hd,
                             float *out);

/* Heads h0..h1-1 of pl_cpu_attention for one query row at position pos (cache rows 0..pos);
 * scores holds pos + 1 floats. A head's result depends on nothing but its own inputs, so the
 * heads can be split between threads in any way and give the same bits. */
void pl_cpu_attention_heads(const float *q, int pos, const float *k_cache, const float *v_cache,
                            int n_heads, int n_kv, int head_dim, int h0, int h1, float *scores,
                            float *out);

/* One query row of decode: its q and out rows ([n_heads * head_dim]), its caches (as
 * pl_cpu_attention's) and its position. */
typedef struct {
    const float *q, *k, *v;
    float *out;
    int pos;
} pl_cpu_att_row_t;

/* Attention for n query rows (decode's one-token sequences; every row of a prefill whose bits
 * must not depend on its chunking) as one job on the pool, each row and head by
 * pl_cpu_attention_heads, so a row's bits depend on its position and cache alone: their
 * (row, head) pairs
 * cut into at most PL_CPU_ATT_ROWS chunks, chunk c scoring into scores + c * scores_stride
 * (scores_stride > every pos). On the caller alone where the products are too small to be worth
 * waking a worker. Every head gives the bits pl_cpu_attention gives it, whatever the split. */
void pl_cpu_attention_decode(pl_cpu_pool_t *pool, const pl_cpu_att_row_t *rows, int n,
                             int n_heads, int n_kv, int head_dim, float *scores,
                             size_t scores_stride);

/* gate[i] = silu(gate[i]) * up[i], with cpu_vexp.h's exp: bitwise the same on every instruction
 * set (the scalar one always, AVX2 on x86-64), within ~2 ulp of the exact value. */
void pl_cpu_swiglu(float *gate, const float *up, size_t n);
void pl_cpu_swiglu_scalar(float *gate, const float *up, size_t n);
void pl_cpu_swiglu_avx2(float *gate, const float *up, size_t n);

/* y[r][i] += bias[i] for n_rows rows of dim floats. */
void pl_cpu_add_bias(float *y, const float *bias, int n_rows, int dim);

/* x[i] += y[i]. */
void pl_cpu_add(float *x, const float *y, size_t n);

#endif
