/* Internal to backends/: the versioned function table a backend fills in (the plugins export
 * theirs by PL_BE_PLUGIN_SYMBOL), and the handles' layout. Everything else uses backend.h. */
#ifndef PL_BACKENDS_BACKEND_IMPL_H
#define PL_BACKENDS_BACKEND_IMPL_H

#include "backends/backend.h"

#define PL_BE_ABI_VERSION 2
#define PL_BE_PLUGIN_SYMBOL "pl_be_plugin_ops"

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
    /* Run one microbatch through the stage's layers (backend.h: pl_be_stage_forward). */
    pl_status_t (*stage_forward)(void *stage, const pl_be_batch_t *batch, const void *in,
                                 void *out);
    /* Forget the KV cache of one slot (its sequence finished). Optional (may be NULL). */
    void (*stage_free_seq)(void *stage, int slot);
    void (*stage_unload)(void *stage);
    /* Health of device `index` as a new JSON object. Optional (may be NULL). */
    pl_status_t (*health)(int index, json_t **health_p);
} pl_be_ops_t;

/* A backend: its table, and for a plugin the plugin's own pl_error_msg (a plugin links its own
 * copy of pl_common, so its messages live in its own per-thread buffer; the wrappers copy a
 * failed call's message into ours). */
struct pl_be {
    const pl_be_ops_t *ops;
    const char *(*plugin_msg)(void); /* NULL for built-in backends */
};

struct pl_be_device {
    const pl_be_t *be;
    void *ctx;
    int index;
    double slowdown; /* >= 1 */
};

struct pl_be_stage {
    const pl_be_t *be;
    void *ctx;
    double slowdown;
};

/* The CPU backend's table (backends/cpu/cpu_exec.c). */
const pl_be_ops_t *pl_be_cpu_ops(void);

#endif
