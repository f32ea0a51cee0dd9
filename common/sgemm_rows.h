/* The one home of the CPU backend's kernel choice that the planner models: a sequence with at
 * least PL_SGEMM_MIN_TOKENS tokens in a call gets its own sgemm, shorter ones run on decode's kernels. */
#ifndef PL_COMMON_SGEMM_ROWS_H
#define PL_COMMON_SGEMM_ROWS_H

/* A sequence with at least this many tokens in a call gets its own OpenBLAS sgemm (its rows'
 * rounding then depends only on itself); the rows of shorter ones, decode steps above all, are
 * packed into one batch-invariant GEMM that reads the weights once for all of them
 * (backends/cpu/cpu_exec.c), which scheduler/ charges at the decode row rate (plan.h). */
#define PL_SGEMM_MIN_TOKENS 32

#endif
