/* Internal to the CPU backend: the opened device and the table slots implemented in
 * cpu_probe.c (discovery, calibration) and cpu_exec.c (stages). */
#ifndef PL_BACKENDS_CPU_CPU_DEV_H
#define PL_BACKENDS_CPU_CPU_DEV_H

#include "backends/backend.h"
#include "backends/cpu/cpu_ops.h"

typedef struct {
    int threads;         /* OpenBLAS threads and pool size of this device's GEMMs */
    pl_cpu_pool_t *pool; /* runs the batch-invariant GEMM */
    pl_be_device_info_t info;
} pl_cpu_dev_t;

pl_status_t pl_cpu_probe(pl_be_device_info_t *infos, int max, int *n_p);
pl_status_t pl_cpu_open(int index, int threads, void **dev_p);
void pl_cpu_close(void *dev);
pl_status_t pl_cpu_calibrate(void *dev, pl_be_calib_t *calib);
/* MemAvailable of /proc/meminfo in bytes. */
pl_status_t pl_cpu_mem_available(uint64_t *bytes_p);

pl_status_t pl_cpu_stage_load(void *dev, pl_model_t *model, const pl_be_stage_params_t *params,
                              void **stage_p);
pl_status_t pl_cpu_stage_forward(void *stage, const pl_be_batch_t *batch, const void *in,
                                 void *out);
void pl_cpu_stage_free_seq(void *stage, int slot);
void pl_cpu_stage_unload(void *stage);

#endif
