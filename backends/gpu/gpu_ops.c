/* The GPU backend's table of functions: what the plugin exports (gpu_plugin.c) and what
 * statically linked programs (the parity test, the benchmark) call. */
#include "backends/gpu/gpu_internal.h"

static const pl_be_ops_t s_ops = {
    .abi_version = PL_BE_ABI_VERSION,
    .name = PL_GPU_BACKEND,
    .probe = pl_gpu_probe,
    .open = pl_gpu_open,
    .close = pl_gpu_close,
    .calibrate = pl_gpu_calibrate,
    .stage_load = pl_gpu_stage_load,
    .stage_forward = pl_gpu_stage_forward,
    .stage_free_seq = pl_gpu_stage_free_seq,
    .stage_unload = pl_gpu_stage_unload,
    .health = pl_gpu_health,
};

const pl_be_ops_t *pl_gpu_ops(void)
{
    return &s_ops;
}
