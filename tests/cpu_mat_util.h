/* What the CPU kernel suites share: deterministic values in [-1, 1), allocations that assert, and
 * a float-typed weight matrix (f32, f16, bf16) beside the exact f32 values it holds. */
#ifndef PL_TESTS_CPU_MAT_UTIL_H
#define PL_TESTS_CPU_MAT_UTIL_H

#include "backends/cpu/cpu_gemm.h"

#include "common/util.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Deterministic pseudo-random values in [-1, 1). */
static inline void fill(float *x, size_t n, unsigned seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ULL + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)((s >> 40) & 0xffffff) / 8388608.0f - 1.0f;
    }
}

/* n zeroed bytes (at least one), or the test fails. */
static inline void *xalloc(size_t n)
{
    void *p = calloc(n ? n : 1, 1);
    cr_assert(p, "%zu bytes", n);
    return p;
}

/* A [n][k] matrix of type t at byte offset `mis` into its buffer (an unaligned mapping), and the
 * exact f32 values it holds in wide. */
typedef struct {
    unsigned char *buf;
    pl_cpu_wmat_t m;
    float *wide;
} tmat_t;

static inline void tmat_make(tmat_t *t, pl_wtype_t type, int n, int k, size_t mis, unsigned seed)
{
    size_t esz = type == PL_WT_F32 ? 4 : 2;
    t->wide = xalloc((size_t)n * k * sizeof(float));
    fill(t->wide, (size_t)n * k, seed);
    t->buf = xalloc((size_t)n * k * esz + mis);
    unsigned char *d = t->buf + mis;
    for (size_t i = 0; i < (size_t)n * k; i++) {
        if (type == PL_WT_F32) {
            memcpy(d + 4 * i, &t->wide[i], 4);
        } else {
            uint16_t h = type == PL_WT_F16 ? pl_f32_to_f16(t->wide[i]) : pl_f32_to_bf16(t->wide[i]);
            t->wide[i] = type == PL_WT_F16 ? pl_f16_to_f32(h) : pl_bf16_to_f32(h);
            memcpy(d + 2 * i, &h, 2);
        }
    }
    t->m = (pl_cpu_wmat_t){
        .type = type, .rows = n, .cols = k, .row_bytes = (size_t)k * esz, .data = d};
}

static inline void tmat_free(tmat_t *t)
{
    free(t->buf);
    free(t->wide);
}

#endif
