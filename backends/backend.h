/* The executor interface every backend implements (CPU built in; CUDA and HIP as plugins).
 * A backend is a versioned table of function pointers; devices and loaded stages are opaque
 * pointers owned by the backend. Activations cross this interface in host memory. */
#ifndef PL_BACKENDS_BACKEND_H
#define PL_BACKENDS_BACKEND_H

#include "common/status.h"
#include "model/model.h"

#include <stdbool.h>
#include <stdint.h>

#define PL_BE_ABI_VERSION 1
#define PL_BE_PLUGIN_SYMBOL "pl_be_plugin_ops"

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
} pl_be_batch_t;

typedef struct pl_be_ops {
    int abi_version; /* PL_BE_ABI_VERSION */
    const char *name;
    /* List devices; when none, return PL_ERR_NO_DEVICE with the reason in pl_error_msg().
     * Must not block for long. */
    pl_status_t (*probe)(pl_be_device_info_t *infos, int max, int *n_p);
    /* Open device `index`; threads is a CPU thread count (0: all), ignored by GPUs. */
    pl_status_t (*open)(int index, int threads, void **dev_p);
    void (*close)(void *dev);
    /* Short measurement (well under a second) of compute and memory speed. */
    pl_status_t (*calibrate)(void *dev, pl_be_calib_t *calib);
    /* Load the stage's weights and allocate its KV cache. */
    pl_status_t (*stage_load)(void *dev, pl_model_t *model, const pl_be_stage_params_t *params,
                              void **stage_p);
    /* Run one microbatch through the stage's layers.
     * in:  has_embed ? int32 token ids [n_tokens] : float hidden [n_tokens][hidden]
     * out: has_head  ? float logits [n_seq][vocab] (last token of each sequence)
     *                : float hidden [n_tokens][hidden] */
    pl_status_t (*stage_forward)(void *stage, const pl_be_batch_t *batch, const void *in,
                                 void *out);
    /* Forget the KV cache of one slot (its sequence finished). Optional (may be NULL). */
    void (*stage_free_seq)(void *stage, int slot);
    void (*stage_unload)(void *stage);
} pl_be_ops_t;

/* The built-in CPU backend (OpenBLAS GEMMs). */
const pl_be_ops_t *pl_be_cpu_ops(void);

typedef struct {
    const pl_be_ops_t *ops; /* NULL when the backend is unavailable */
    char name[16];
    char why[256]; /* why it is unavailable, or "" */
} pl_be_entry_t;

/* Every backend this binary knows: the CPU backend and the CUDA / HIP plugins, loaded with
 * dlopen when present. Returns the number of entries written. */
int pl_be_registry_list(pl_be_entry_t *entries, int max);
/* The backend named `name`, or NULL with the reason in pl_error_msg(). */
const pl_be_ops_t *pl_be_registry_find(const char *name);

#endif
