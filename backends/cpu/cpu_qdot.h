/* CPU dot products of quantized weight rows (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, as stored) with
 * activations quantized per block to 8 bits; AVX-512, AVX2 or scalar, chosen once by cpuid. */
#ifndef PL_BACKENDS_CPU_CPU_QDOT_H
#define PL_BACKENDS_CPU_CPU_QDOT_H

#include "model/wtype.h"

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

typedef enum { PL_CPU_ISA_SCALAR = 0, PL_CPU_ISA_AVX2 = 1, PL_CPU_ISA_AVX512 = 2 } pl_cpu_isa_t;
#define PL_CPU_ISA_COUNT 3

/* w: a weight row of n elements as stored (any alignment); qx: its activations from
 * pl_cpu_qact_quantize. Returns sum_i w[i] * x[i]. n is a whole number of the type's blocks. */
typedef float (*pl_cpu_qdot_fn)(const void *w, const void *qx, int64_t n);

typedef struct {
    pl_cpu_qdot_fn q8_0, q4_0, q4_k, q5_k, q6_k;
} pl_cpu_qdot_table_t;

/* Bytes of the quantized activations of a row of n elements, for weights of type wt (0 for a
 * type that is not block-quantized). */
size_t pl_cpu_qact_bytes(pl_dtype_t wt, int64_t n);
/* Quantize n activations x for dots with weights of type wt: |x - x_q| <= amax(block) / 254. */
void pl_cpu_qact_quantize(pl_dtype_t wt, const float *x, int64_t n, void *qx);

/* The kernels of the best ISA this CPU has (decided once, thread-safe). */
const pl_cpu_qdot_table_t *pl_cpu_qdot_best(void);
/* The kernels of one ISA, or NULL when this CPU (or this build) lacks it. */
const pl_cpu_qdot_table_t *pl_cpu_qdot_table(pl_cpu_isa_t isa);
/* The kernel of a table for weight type wt; NULL for a type that is not block-quantized. */
pl_cpu_qdot_fn pl_cpu_qdot_fn_of(const pl_cpu_qdot_table_t *t, pl_dtype_t wt);
/* "scalar", "avx2", "avx512". */
const char *pl_cpu_isa_name(pl_cpu_isa_t isa);
pl_cpu_isa_t pl_cpu_qdot_best_isa(void);

/* The standalone kernels of the best ISA, one per type. */
float pl_q8_0_dot(const void *w, const void *qx, int64_t n);
float pl_q4_0_dot(const void *w, const void *qx, int64_t n);
float pl_q4_k_dot(const void *w, const void *qx, int64_t n);
float pl_q5_k_dot(const void *w, const void *qx, int64_t n);
float pl_q6_k_dot(const void *w, const void *qx, int64_t n);

/* Internal: the per-ISA tables (cpu_qdot_avx2.c, cpu_qdot_avx512.c). */
extern const pl_cpu_qdot_table_t pl_cpu_qdot_avx2;
extern const pl_cpu_qdot_table_t pl_cpu_qdot_avx512;

#endif
