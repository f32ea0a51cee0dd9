/* Layer partitioning: which contiguous range of layers each device runs. Pure C, no I/O.
 * This is the proportional split used until the optimal planner (scheduler/plan.h) lands. */
#ifndef PL_SCHEDULER_PARTITION_H
#define PL_SCHEDULER_PARTITION_H

#include "common/status.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    double rate;        /* relative throughput (e.g. measured GFLOP/s); > 0 */
    uint64_t mem_bytes; /* memory available for this stage's weights + KV cache */
} pl_part_device_t;

typedef struct {
    int n_layers;
    uint64_t layer_bytes; /* weights + KV cache of one layer */
    uint64_t first_extra; /* embedding, charged to the first stage */
    uint64_t last_extra;  /* final norm + LM head, charged to the last stage */
} pl_part_model_t;

/* Give device i the layers [first[i], first[i] + count[i]) in order, counts proportional to
 * rate and within memory, every device at least one layer. PL_ERR_INFEASIBLE (with how much
 * memory is missing) when no split fits. */
pl_status_t pl_part_proportional(const pl_part_device_t *devs, int n_dev, const pl_part_model_t *m,
                                 int *first, int *count);

#endif
