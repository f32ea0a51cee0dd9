/* Matrix products on weights kept as stored: a typed weight matrix pointing into the model's
 * mapping, and a table of kernels keyed by the weight type, with a path per instruction set. */
#ifndef PL_BACKENDS_CPU_CPU_GEMM_H
#define PL_BACKENDS_CPU_CPU_GEMM_H

#include "backends/cpu/cpu_ops.h"
#include "model/model.h"
#include "model/wtype.h"

#include <stdbool.h>
#include <stddef.h>

/* Instruction sets with kernels, in increasing order; a machine runs the highest it supports. */
typedef enum {
    PL_CPU_ISA_SCALAR = 0,
    PL_CPU_ISA_AVX2 = 1,   /* AVX2 + FMA + F16C */
    PL_CPU_ISA_AVX512 = 2, /* AVX-512 F/BW/VL + FMA + F16C */
    PL_CPU_ISA_COUNT
} pl_cpu_isa_t;

/* A [rows][cols] weight matrix as stored: row r starts at data + r * row_bytes. Borrowed.
 * packed: the rows are laid out in panels instead (cpu_pack.h), read by the type's pblock. */
typedef struct {
    pl_wtype_t type;
    int rows, cols;
    size_t row_bytes;
    const void *data;
    bool packed;
} pl_cpu_wmat_t;

/* Most rows and weight rows one kernel block call handles. */
#define PL_CPU_BLOCK_ROWS 64
#define PL_CPU_BLOCK_OUTS 32
/* Weight rows a block call of a type with wide_one takes when nr == 1 (batch-1 decode): its
 * kernel reads two far-apart halves of them side by side, two streams from memory. */
#define PL_CPU_BLOCK_OUTS_ONE 128
/* Weight rows converted to f32 at a time for an OpenBLAS product (prefill of a long sequence). */
#define PL_CPU_TILE_ROWS 256

/* A weight type's kernels. Adding a type is one entry in cpu_gemm.c's table. */
typedef struct {
    /* Bytes of one activation row of k elements in the form `block` reads (quantized per
     * block, say); NULL: block reads the f32 rows as given. */
    size_t (*x_bytes)(int k);
    /* Convert one f32 activation row of k elements to that form. */
    void (*x_prep)(const float *x, int k, void *xq);
    /* y[r][o] = (row r of x) . (weight row o) for r < nr <= PL_CPU_BLOCK_ROWS and
     * o < no <= PL_CPU_BLOCK_OUTS, weight rows from w at stride row_bytes, k elements each.
     * Every element must come out bitwise the same whatever nr, no, its place in the block and
     * the instruction set: batch invariance, and stages that agree across machines. NULL: no
     * kernel for that instruction set. */
    void (*block[PL_CPU_ISA_COUNT])(const void *const *x, int nr, const void *w, size_t row_bytes,
                                    int no, int k, float *const *y);
    /* `block` on a packed matrix (cpu_pack.h), w at the panel of its first weight row, which
     * is a multiple of PL_CPU_PACK_ROWS; bitwise what `block` gives. NULL: no packed layout. */
    void (*pblock[PL_CPU_ISA_COUNT])(const void *const *x, int nr, const void *w,
                                     size_t row_bytes, int no, int k, float *const *y);
    /* Whether `block` takes up to PL_CPU_BLOCK_OUTS_ONE weight rows when nr == 1. */
    bool wide_one;
    /* Convert n weight rows of k elements (from w at stride row_bytes) to f32, dst [n][k];
     * NULL: pl_wtype_to_f32 row by row. */
    void (*to_f32[PL_CPU_ISA_COUNT])(const void *w, size_t row_bytes, int n, int k, float *dst);
} pl_cpu_wkernel_t;

/* The highest instruction set this machine runs, capped by pl_cpu_isa_cap. */
pl_cpu_isa_t pl_cpu_isa(void);
/* Cap the instruction set the kernels use (tests compare the paths; benchmarks time them). */
void pl_cpu_isa_cap(pl_cpu_isa_t max);
const char *pl_cpu_isa_name(pl_cpu_isa_t isa);

/* The kernels of weight type t; NULL when the CPU backend has none. */
const pl_cpu_wkernel_t *pl_cpu_wkernel(pl_wtype_t t);

/* A typed matrix over a 2-D tensor view, checking its type has kernels and its bytes match
 * rows x cols. `name` labels errors. */
pl_status_t pl_cpu_wmat_from_view(const char *name, const pl_tensor_view_t *v, pl_cpu_wmat_t *m_p);

/* y[r] = x[r] @ w^T for the n_rows row indices rows[] of x [*][w->cols] into y [*][w->rows], on
 * the pool's threads. Batch-invariant: a row's result is bitwise the same whatever the other
 * rows, their number or order, the thread count and the instruction set. */
void pl_cpu_gemm_rows(pl_cpu_pool_t *pool, const float *x, const int *rows, int n_rows,
                      const pl_cpu_wmat_t *w, float *y);
/* The same for n_w matrices of one input (q, k and v; gate and up), w[i] into y[i]: one job on
 * the pool for all of them, and the activations prepared once per form. Every w[i] has the
 * same cols; each y[i] comes out bitwise what pl_cpu_gemm_rows gives it alone. */
void pl_cpu_gemm_rows_n(pl_cpu_pool_t *pool, const float *x, const int *rows, int n_rows,
                        const pl_cpu_wmat_t *const *w, float *const *y, int n_w);

/* y[n][w->rows] = x[n][w->cols] @ w^T for one whole sequence. A packed matrix: the packed
 * kernels on the pool, bitwise what pl_cpu_gemm_rows gives (tile unused). Otherwise through
 * OpenBLAS sgemm where its kernels suit this CPU (pl_cpu_gemm_seq_uses_blas): one
 * single-threaded sgemm per PL_CPU_TILE_ROWS weight rows, the tiles shared out on the pool, so
 * the bits do not depend on its thread count (with OpenBLAS itself on 1 thread, as the stage
 * and the calibration set it);
 * f32 weights read in place (tile unused), f16/bf16 converted into tile, which holds
 * pl_cpu_pool_size(pool) * PL_CPU_TILE_ROWS * w->cols floats (one tile per thread); rows'
 * rounding then depending on n and their place; else pl_cpu_gemm_rows. */
void pl_cpu_gemm_seq(pl_cpu_pool_t *pool, const float *x, int n, const pl_cpu_wmat_t *w,
                     float *tile, float *y);
/* Whether pl_cpu_gemm_seq uses OpenBLAS here: not when OpenBLAS fell back to generic kernels for
 * a CPU that has AVX2 (measured: a third of the speed of pl_cpu_gemm_rows then). Fixed for the
 * process, so every stage on a machine rounds alike. */
bool pl_cpu_gemm_seq_uses_blas(void);
/* Tests and benchmarks: 1 OpenBLAS, 0 the batch-invariant kernel, -1 the rule above. */
void pl_cpu_gemm_seq_force(int use_blas);

/* Row `r` of w as f32 (dst [w->cols]). */
void pl_cpu_wmat_row_f32(const pl_cpu_wmat_t *w, int r, float *dst);
/* out[i] = row ids[i] of the [vocab][hidden] table, as f32, for n ids already in range. */
void pl_cpu_embed(const pl_cpu_wmat_t *table, const int32_t *ids, int n, float *out);

/* The kernels of one instruction set (cpu_gemm_<isa>.c). */
#define PL_CPU_DECLARE_FLOAT_KERNELS(isa)                                                          \
    void pl_cpu_block_f32_##isa(const void *const *x, int nr, const void *w, size_t rb, int no,    \
                                int k, float *const *y);                                           \
    void pl_cpu_block_f16_##isa(const void *const *x, int nr, const void *w, size_t rb, int no,    \
                                int k, float *const *y);                                           \
    void pl_cpu_block_bf16_##isa(const void *const *x, int nr, const void *w, size_t rb, int no,   \
                                 int k, float *const *y);                                          \
    void pl_cpu_to_f32_f16_##isa(const void *w, size_t rb, int n, int k, float *dst);              \
    void pl_cpu_to_f32_bf16_##isa(const void *w, size_t rb, int n, int k, float *dst);
PL_CPU_DECLARE_FLOAT_KERNELS(scalar)
PL_CPU_DECLARE_FLOAT_KERNELS(avx2)
PL_CPU_DECLARE_FLOAT_KERNELS(avx512)

#endif
