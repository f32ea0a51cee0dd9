/* A CPU stage's weight matrices copied out of the model's file mapping into one anonymous,
 * 2 MiB-aligned region advised for transparent huge pages, so the kernels stream them faster. */
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

/* Copy the n matrices mats[] (NULL entries and empty ones skipped; two that share data stay
 * shared) into one new region and point them at it. On error the matrices are unchanged. */
pl_status_t pl_cpu_wcopy_make(pl_cpu_wmat_t *const *mats, int n, pl_cpu_wcopy_t *c_p);

/* Unmap the region (a zeroed or never-made copy is fine). */
void pl_cpu_wcopy_free(pl_cpu_wcopy_t *c);

#endif
