/* CPU dot products of quantized weight rows (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, as stored) with
 * activations quantized per block to 8 bits, per instruction set (cpu_gemm.h's choice by cpuid),
 * and their entries in the GEMM's weight-type table. Every path gives bitwise the same result:
 * the quants' products are summed in integers, and the float steps are one fixed chain of fmaf. */
#ifndef PL_BACKENDS_CPU_CPU_QDOT_H
#define PL_BACKENDS_CPU_CPU_QDOT_H

#include "backends/cpu/cpu_gemm.h"
#include "model/wtype.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Activations for Q8_0 / Q4_0 weights: 32 values x = d * qs. */
typedef struct {
    float d;
    int8_t qs[PL_QK8_0];
} pl_q8_act_t;

/* Activations for K-quant weights: 256 values x = d * qs, and the sum of each 16 of qs. */
typedef struct {
    float d;
    int8_t qs[PL_QK_K];
    int16_t bsums[PL_QK_K / 16];
} pl_q8k_act_t;

/* w: a weight row of n elements as stored (any alignment); qx: its activations from
 * pl_cpu_qact_quantize. Returns sum_i w[i] * x[i]. n is a whole number of the type's blocks. */
typedef float (*pl_cpu_qdot_fn)(const void *w, const void *qx, int64_t n);

/* Most activation rows one multi-row dot takes. */
#define PL_CPU_QDOT_ROWS 4

/* The same weight row against nr (1..PL_CPU_QDOT_ROWS) activation rows qx[0..nr-1] at once,
 * each block unpacked once for all of them (batched decode reads and unpacks the weights once
 * per step, not once per sequence): out[r] is bitwise what the one-row dot gives qx[r]. */
typedef void (*pl_cpu_qdot_rows_fn)(const void *w, const void *const *qx, int nr, int64_t n,
                                    float *out);

typedef struct {
    pl_cpu_qdot_fn q8_0, q4_0, q4_k, q5_k, q6_k;
    pl_cpu_qdot_rows_fn q8_0_rows, q4_0_rows, q4_k_rows, q5_k_rows, q6_k_rows;
} pl_cpu_qdot_table_t;

/* Bytes of the quantized activations of a row of n elements, for weights of type wt (0 for a
 * type that is not block-quantized). */
size_t pl_cpu_qact_bytes(pl_wtype_t wt, int64_t n);
/* Quantize n activations x for dots with weights of type wt: |x - x_q| <= amax(block) / 254. */
void pl_cpu_qact_quantize(pl_wtype_t wt, const float *x, int64_t n, void *qx);

/* The kernels of one instruction set, or NULL above the one in use (pl_cpu_isa()); for AVX-512
 * on a CPU with VNNI, its VNNI kernels. */
const pl_cpu_qdot_table_t *pl_cpu_qdot_table(pl_cpu_isa_t isa);
/* The kernel of a table for weight type wt; NULL for a type that is not block-quantized. */
pl_cpu_qdot_fn pl_cpu_qdot_fn_of(const pl_cpu_qdot_table_t *t, pl_wtype_t wt);
/* Its multi-row kernel; NULL likewise. */
pl_cpu_qdot_rows_fn pl_cpu_qdot_rows_fn_of(const pl_cpu_qdot_table_t *t, pl_wtype_t wt);

/* The kernels of the instruction set in use, one per type. */
float pl_q8_0_dot(const void *w, const void *qx, int64_t n);
float pl_q4_0_dot(const void *w, const void *qx, int64_t n);
float pl_q4_k_dot(const void *w, const void *qx, int64_t n);
float pl_q5_k_dot(const void *w, const void *qx, int64_t n);
float pl_q6_k_dot(const void *w, const void *qx, int64_t n);

/* The GEMM table's slots for a quantized type (cpu_gemm.h's pl_cpu_wkernel_t): the activation
 * row's bytes and quantizer, and the block product of every instruction set. */
#define PL_CPU_DECLARE_QUANT_KERNELS(type)                                                         \
    size_t pl_cpu_qx_bytes_##type(int k);                                                          \
    void pl_cpu_qx_prep_##type(const float *x, int k, void *xq);                                   \
    void pl_cpu_qblock_##type##_scalar(const void *const *x, int nr, const void *w, size_t rb,    \
                                       int no, int k, float *const *y);                            \
    void pl_cpu_qblock_##type##_avx2(const void *const *x, int nr, const void *w, size_t rb,      \
                                     int no, int k, float *const *y);                              \
    void pl_cpu_qblock_##type##_avx512(const void *const *x, int nr, const void *w, size_t rb,    \
                                       int no, int k, float *const *y);
PL_CPU_DECLARE_QUANT_KERNELS(q8_0)
PL_CPU_DECLARE_QUANT_KERNELS(q4_0)
PL_CPU_DECLARE_QUANT_KERNELS(q4_k)
PL_CPU_DECLARE_QUANT_KERNELS(q5_k)
PL_CPU_DECLARE_QUANT_KERNELS(q6_k)

/* Internal: Q8_0 / Q4_0 rows sum into 16 f32 lanes (cpu_qdot.c says which block part goes
 * where), then add the lanes in one fixed order; the scalar steps every instruction set ends
 * with. */
float pl_cpu_q32_lanes_sum(const float *lanes);
/* Blocks b0..nb-1 of a row into their lanes (four: Q4_0, else Q8_0). */
void pl_cpu_q32_tail(const void *w, const void *qx, int64_t b0, int64_t nb, bool four,
                     float *lanes);
/* cpu_qdot_x86_tmpl.h's kernels: AVX2 (the AVX-512 table shares them) and AVX-512 VNNI; their
 * block products are the GEMM's slots (pl_cpu_qblock_*). */
#define PL_CPU_DECLARE_X86_DOTS(sfx)                                                               \
    float pl_cpu_q8_0_dot_##sfx(const void *w, const void *qx, int64_t n);                        \
    float pl_cpu_q4_0_dot_##sfx(const void *w, const void *qx, int64_t n);                        \
    float pl_cpu_q4_k_dot_##sfx(const void *w, const void *qx, int64_t n);                        \
    float pl_cpu_q5_k_dot_##sfx(const void *w, const void *qx, int64_t n);                        \
    void pl_cpu_q8_0_rows_##sfx(const void *w, const void *const *qx, int nr, int64_t n,          \
                                float *out);                                                       \
    void pl_cpu_q4_0_rows_##sfx(const void *w, const void *const *qx, int nr, int64_t n,          \
                                float *out);                                                       \
    void pl_cpu_q4_k_rows_##sfx(const void *w, const void *const *qx, int nr, int64_t n,          \
                                float *out);                                                       \
    void pl_cpu_q5_k_rows_##sfx(const void *w, const void *const *qx, int nr, int64_t n,          \
                                float *out);                                                       \
    void pl_cpu_q8_0_block_##sfx(const void *const *x, int nr, const void *w, size_t rb, int no,  \
                                 int k, float *const *y);                                          \
    void pl_cpu_q4_0_block_##sfx(const void *const *x, int nr, const void *w, size_t rb, int no,  \
                                 int k, float *const *y);                                          \
    void pl_cpu_q4_k_block_##sfx(const void *const *x, int nr, const void *w, size_t rb, int no,  \
                                 int k, float *const *y);                                          \
    void pl_cpu_q5_k_block_##sfx(const void *const *x, int nr, const void *w, size_t rb, int no,  \
                                 int k, float *const *y);
PL_CPU_DECLARE_X86_DOTS(avx2)
PL_CPU_DECLARE_X86_DOTS(vnni)
/* cpu_qdot_batch512.c's block products for batched decode (AVX-512 VNNI in 512-bit registers,
 * up to 8 activation rows per pass over a weight row); each element bitwise its one-row dot. */
#define PL_CPU_DECLARE_BATCH512(type)                                                              \
    void pl_cpu_##type##_block_b512(const void *const *x, int nr, const void *w, size_t rb,       \
                                    int no, int k, float *const *y);
PL_CPU_DECLARE_BATCH512(q8_0)
PL_CPU_DECLARE_BATCH512(q4_0)
PL_CPU_DECLARE_BATCH512(q4_k)
PL_CPU_DECLARE_BATCH512(q5_k)
PL_CPU_DECLARE_BATCH512(q6_k)
/* cpu_qdot_avx512.c's Q6_K, which both AVX-512 tables use. */
float pl_cpu_q6_k_dot_avx512(const void *w, const void *qx, int64_t n);
void pl_cpu_q6_k_rows_avx512(const void *w, const void *const *qx, int nr, int64_t n, float *out);

/* Internal: pl_cpu_qact_quantize with AVX2, bitwise the same bytes. */
void pl_cpu_qact_quantize_avx2(pl_wtype_t wt, const float *x, int64_t n, void *qx);

/* Internal: the per-ISA tables (cpu_qdot.c, cpu_qdot_avx2.c, cpu_qdot_avx512.c). */
extern const pl_cpu_qdot_table_t pl_cpu_qdot_scalar;
extern const pl_cpu_qdot_table_t pl_cpu_qdot_avx2;
extern const pl_cpu_qdot_table_t pl_cpu_qdot_avx512;
extern const pl_cpu_qdot_table_t pl_cpu_qdot_avx512_vnni; /* where cpuid reports AVX-512 VNNI */

#endif
