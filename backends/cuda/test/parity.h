/* GPU parity test (runs on a machine with a GPU): shared helpers of the per-op checks against
 * scalar references and the stage checks against the CPU backend. */
#ifndef PL_BACKENDS_CUDA_TEST_PARITY_H
#define PL_BACKENDS_CUDA_TEST_PARITY_H

#include "backends/gpu/gpu_internal.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define PT_MAX_PROMPT 32

typedef struct {
    int n_pass, n_fail, n_skip;
    uint64_t seed;
    FILE *log;
    int n_prompt; /* a given prompt for the generation check (else a random one) */
    int32_t prompt[PT_MAX_PROMPT];
} pt_ctx_t;

/* The message of the GPU table's last failure: pl_error_msg, or the plugin's own copy of it
 * when the table comes from a plugin (which carries its own pl_common). */
extern const char *(*pt_gpu_error_msg)(void);

/* Record one comparison: PASS when max |got - want| <= tol * max(1, max |want|). */
bool pt_compare(pt_ctx_t *t, const char *what, const float *got, const float *want, size_t n,
                double tol);
/* Record a plain condition. */
bool pt_check(pt_ctx_t *t, bool ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void pt_skip(pt_ctx_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Uniform values in [lo, hi) from (seed, stream, index). */
void pt_fill(float *x, size_t n, uint64_t seed, uint64_t stream, float lo, float hi);
/* Round each value through dtype dt (what the device stores). */
void pt_round(float *x, size_t n, pl_dtype_t dt);
/* Convert f32 values to dt into a new host buffer of n elements (caller frees). */
void *pt_to_dtype(const float *x, size_t n, pl_dtype_t dt);
/* Convert n elements of dt to f32. */
void pt_from_dtype(const void *src, size_t n, pl_dtype_t dt, float *out);

/* Device helpers: abort the program on failure (a broken device is not a parity result). */
void *pt_dev_alloc(size_t bytes);
void *pt_dev_upload(const void *host, size_t bytes);
void pt_dev_download(void *host, const void *dev, size_t bytes);
void pt_dev_sync(const char *what, cudaError_t launched);

/* Per-op checks of the kernels and the GEMM paths (parity_ops.c). */
void pt_ops_run(pt_ctx_t *t);
/* GEMM context creation and its description, with or without a device (parity_blas.c). */
void pt_blas_run(pt_ctx_t *t);

/* Stage checks against the CPU backend on a model directory (parity_stage.c). `gpu` is the
 * table under test: the static one or the plugin's. gen_tokens > 0 also compares a greedy
 * generation, which must be identical when exact is set (f32 models). */
void pt_stage_run(pt_ctx_t *t, const pl_be_ops_t *gpu, const char *model_dir, int gen_tokens,
                  bool exact);

#endif
