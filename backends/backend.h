/* The executor interface every backend implements (CPU built in; CUDA and HIP as plugins),
 * behind opaque handles: a backend, an opened device, a loaded stage, each used only through
 * the functions below. Activations cross this interface in host memory. The function table the
 * backends fill in is internal to backends/ (backend_impl.h). */
#ifndef PL_BACKENDS_BACKEND_H
#define PL_BACKENDS_BACKEND_H

/* pl_cpu_blas_core_fix, first in the main of every program that computes on this interface */
#include "backends/cpu/cpu_blas_core.h"
#include "common/status.h"
#include "model/model.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct pl_be pl_be_t;               /* a backend: "cpu", or a loaded GPU plugin */
typedef struct pl_be_device pl_be_device_t; /* an opened device of a backend */
typedef struct pl_be_stage pl_be_stage_t;   /* a layer range loaded on a device */

typedef struct {
    char backend[16]; /* "cpu", "cuda", "hip" */
    char name[128];   /* model name of the device */
    int index;        /* index within its backend */
    int cores;        /* CPU: threads used; GPU: SM / CU count */
    uint64_t mem_bytes; /* memory usable for weights, KV cache and activations */
    char isa[96];     /* CPU: "avx2 fma avx512f"; GPU: "sm_90", "gfx90a" */
} pl_be_device_info_t;

typedef struct {
    double gflops;   /* measured f32 (CPU) or model-dtype (GPU) GEMM rate */
    double mem_gbps; /* measured memory read bandwidth */
    /* measured rate of the decode kernels' per-row work (GFLOP/s), beside their pass over the
     * weights: what a decode step's rows cost; 0: not measured (the planner takes a roofline) */
    double dec_gflops;
    /* measured rate of prefill's pass over a product's stored weights per sequence (GB/s of
     * stored bytes: converting and packing them); 0: not measured (no such pass charged) */
    double pass_gbps;
    /* measured rate of prefill's attention (GFLOP/s): a chunk's queries against a cached prefix
     * on the kernel prefill runs; 0: not measured (attention at the phase's rate) */
    double attn_gflops;
    /* measured read bandwidth of the whole host, a reader on every online CPU (GB/s; CPUs):
     * what the stages of daemons on one host share while they stream at once (mem_gbps is one
     * device's threads alone); 0: not measured */
    double host_gbps;
} pl_be_calib_t;

typedef struct {
    int first_layer, last_layer; /* inclusive layer range; last < first means no layers */
    bool has_embed;              /* stage 0: input is token ids */
    bool has_head;               /* last stage: final norm + LM head, output is logits */
    int max_seqs;                /* KV-cache slots */
    int max_ctx;                 /* positions per slot */
    int max_tokens;              /* most tokens in one forward call */
} pl_be_stage_params_t;

/* One microbatch: n_seq sequences, sequence i contributing n_tok[i] consecutive tokens at
 * positions pos0[i] .. pos0[i]+n_tok[i]-1 and using KV slot slot[i]. Tokens are laid out
 * sequence after sequence; n_tokens is the sum of n_tok. */
typedef struct {
    int n_seq;
    int n_tokens;
    const int *slot;
    const int *pos0;
    const int *n_tok;
    /* Last stage: nothing is sampled from this call (every sequence ends inside its prompt, an
     * earlier prefill chunk), so the final norm and LM head may be skipped; `out` is then left
     * as it was. Backends may ignore it. */
    bool no_logits;
    /* Called between layers when set: a stage without a UCX progress thread progresses its
     * data plane there. */
    void (*between_layers)(void *arg);
    void *between_arg;
} pl_be_batch_t;

/* ---- backends ---------------------------------------------------------------------------- */

typedef struct {
    const pl_be_t *backend; /* NULL when the backend is unavailable */
    char name[16];
    char why[256]; /* why it is unavailable, or "" */
} pl_be_entry_t;

/* Every backend this binary knows: the CPU backend and the CUDA / HIP plugins, loaded with
 * dlopen when present. Returns the number of entries written. */
int pl_be_registry_list(pl_be_entry_t *entries, int max);
/* The backend named `name`, or NULL with the reason in pl_error_msg(). */
const pl_be_t *pl_be_registry_find(const char *name);
/* The built-in CPU backend (OpenBLAS GEMMs); always there. */
const pl_be_t *pl_be_cpu(void);
/* "cpu", "cuda", "hip". */
const char *pl_be_name(const pl_be_t *be);

/* List the backend's devices; PL_ERR_NO_DEVICE with the reason when there are none. */
pl_status_t pl_be_probe(const pl_be_t *be, pl_be_device_info_t *infos, int max, int *n_p);

/* ---- devices ----------------------------------------------------------------------------- */

/* Open device `index` of the backend; threads is a CPU thread count (0: all), ignored by GPUs. */
pl_status_t pl_be_device_open(const pl_be_t *be, int index, int threads, pl_be_device_t **dev_p);
/* Close; nulls the pointer; safe on NULL. Every stage loaded on it must be unloaded first. */
void pl_be_device_close(pl_be_device_t **dev_p);
const pl_be_t *pl_be_device_backend(const pl_be_device_t *dev);
/* Short measurement (well under a second) of compute and memory speed, as the device runs now
 * (a slowed-down device reports its slowed rates). */
pl_status_t pl_be_device_calibrate(pl_be_device_t *dev, pl_be_calib_t *calib);
/* The device's health as a new JSON object (runtime and management-library figures);
 * PL_ERR_UNSUPPORTED when the backend reports none (the CPU backend). */
pl_status_t pl_be_device_health(pl_be_device_t *dev, json_t **health_p);
/* Testing: make the device `factor` (>= 1) times slower. Every forward call on stages loaded
 * afterwards is followed by (factor - 1) times its own duration of idling, and calibration
 * divides its rates by factor to match. */
void pl_be_device_set_slowdown(pl_be_device_t *dev, double factor);

/* ---- stages ------------------------------------------------------------------------------ */

/* Load the stage's weights and allocate its KV cache on the device. */
pl_status_t pl_be_stage_load(pl_be_device_t *dev, pl_model_t *model,
                             const pl_be_stage_params_t *params, pl_be_stage_t **stage_p);
/* Run one microbatch through the stage's layers.
 * in:  has_embed ? int32 token ids [n_tokens] : float hidden [n_tokens][hidden]
 * out: has_head  ? float logits [n_seq][vocab] (last token of each sequence)
 *                : float hidden [n_tokens][hidden] */
pl_status_t pl_be_stage_forward(pl_be_stage_t *stage, const pl_be_batch_t *batch, const void *in,
                                void *out);
/* Forget the KV cache of one slot: its sequence finished, the slot may take a new one. Slots out
 * of range are ignored. */
void pl_be_stage_free_seq(pl_be_stage_t *stage, int slot);
/* Free the stage's weights and cache; nulls the pointer; safe on NULL. */
void pl_be_stage_unload(pl_be_stage_t **stage_p);

#endif
