/* A CPU stage's weight matrices copied out of the model's file mapping into one anonymous,
 * 2 MiB-aligned region advised for transparent huge pages, so the kernels stream them faster;
 * float matrices packed on the way (cpu_pack.h), in place of the plain copy, not beside it. */
#ifndef PL_BACKENDS_CPU_CPU_WCOPY_H
#define PL_BACKENDS_CPU_CPU_WCOPY_H

#include "backends/cpu/cpu_gemm.h"
#include "common/status.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    void *base; /* NULL: the matrices still point into the mapping */
    size_t len;
} pl_cpu_wcopy_t;

/* Whether stages copy their weights: yes unless PL_CPU_WEIGHTS=mapped is set in the
 * environment (a machine short of memory, or a benchmark's before/after). */
bool pl_cpu_wcopy_wanted(void);

/* Whether stages pack their float matrices: only with PL_CPU_WEIGHTS=packed for now. Measured
 * (bench/README.md, perf8i): the AVX-512 packed kernel matches OpenBLAS on converted tiles up to
 * 128 tokens a call but runs at 0.7-0.85x of it on whole long prompts, so packing by default
 * would make one stage's long prefill slower; the AVX2 one (one token row a tile) is slower still. */
bool pl_cpu_wcopy_pack_wanted(void);

/* Copy the n matrices mats[] (NULL entries and empty ones skipped; two that share data stay
 * shared) into one new region and point them at it; with pack, the matrices that
 * pl_cpu_pack_suits are packed instead of copied as they are, and marked packed. On error the
 * matrices are unchanged. */
pl_status_t pl_cpu_wcopy_make(pl_cpu_wmat_t *const *mats, int n, bool pack, pl_cpu_wcopy_t *c_p);

/* Unmap the region (a zeroed or never-made copy is fine). */
void pl_cpu_wcopy_free(pl_cpu_wcopy_t *c);

#endif
