/* Float weight matrices (f32, f16, bf16) laid out once, when a stage copies its weights, in the
 * order the packed block kernels read them: panels of PL_CPU_PACK_ROWS weight rows, each one
 * sequential stream, so a product neither converts nor repacks the weights per call (issue 8:
 * OpenBLAS repacked every weight of every chunk of a chunked prefill).
 *
 * Panel p holds rows 4p..4p+3 (rows past the matrix are zeros), in 4 * cols elements of the
 * stored type, starting at data + 4p * row_bytes (a packed matrix keeps its row_bytes, so a
 * block of rows o0.. with o0 a multiple of 4 starts where it did before). With k16 = cols & ~15:
 *   - positions below k16, in blocks of 16 positions, each block 64 elements: the pair of rows
 *     (0, 1), then the pair (2, 3). bf16 pairs are interleaved, element j of the pair's first row
 *     in the low half of 32-bit word j and the second row's in its high half, so one 64-byte
 *     load widens into both rows with a shift and a mask; f16 and f32 pairs are the first row's
 *     16 elements then the second's;
 *   - then positions k16..cols-1 of row 0, of row 1, of row 2, of row 3.
 * The kernels sum in cpu_gemm_tmpl.h's fixed order, so a packed matrix's products are bitwise
 * those of the same matrix as stored: any token count, any chunking, decode or prefill. */
#ifndef PL_BACKENDS_CPU_CPU_PACK_H
#define PL_BACKENDS_CPU_CPU_PACK_H

#include "backends/cpu/cpu_gemm.h"

#include <stdbool.h>
#include <stddef.h>

#define PL_CPU_PACK_ROWS 4

/* Whether w (as stored, not yet packed) can be packed: a float type with a packed kernel. */
bool pl_cpu_pack_suits(const pl_cpu_wmat_t *w);
/* Bytes of w packed: its rows rounded up to whole panels. */
size_t pl_cpu_pack_bytes(const pl_cpu_wmat_t *w);
/* Write w (as stored) packed into dst (pl_cpu_pack_bytes(w) bytes). */
void pl_cpu_pack(const pl_cpu_wmat_t *w, void *dst);
/* Row r of the packed matrix w as f32 (dst [w->cols]): the embedding lookup of a tied table. */
void pl_cpu_pack_row_f32(const pl_cpu_wmat_t *w, int r, float *dst);

/* The packed block kernels of one instruction set (cpu_pack_tmpl.h, included by each
 * cpu_gemm_<isa>.c): pl_cpu_wkernel_t.block's contract, w at the first row's panel. */
#define PL_CPU_DECLARE_PACK_KERNELS(isa)                                                           \
    void pl_cpu_pblock_f32_##isa(const void *const *x, int nr, const void *w, size_t rb, int no,   \
                                 int k, float *const *y);                                          \
    void pl_cpu_pblock_f16_##isa(const void *const *x, int nr, const void *w, size_t rb, int no,   \
                                 int k, float *const *y);                                          \
    void pl_cpu_pblock_bf16_##isa(const void *const *x, int nr, const void *w, size_t rb, int no,  \
                                  int k, float *const *y);
PL_CPU_DECLARE_PACK_KERNELS(scalar)
PL_CPU_DECLARE_PACK_KERNELS(avx2)
PL_CPU_DECLARE_PACK_KERNELS(avx512)

#endif
