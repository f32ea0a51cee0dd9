/* A catalogue of common GPUs and CPUs with their published peak figures, so users can plan
 * hypothetical clusters ("what would 2x H100 + 4x RTX 4090 do?"). Pure data and lookups. */
#ifndef PL_SCHEDULER_CATALOG_H
#define PL_SCHEDULER_CATALOG_H

#include "common/status.h"
#include "scheduler/plan.h"

#include <stdint.h>

typedef struct {
    const char *name;    /* canonical name, "H100 SXM" */
    const char *aliases; /* comma-separated other names, "h100,h100-sxm5" */
    const char *vendor;  /* "nvidia", "amd", "intel" */
    const char *backend; /* "cuda", "hip", "cpu" */
    double tflops;       /* published dense bf16/fp16 tensor peak (CPUs: bf16 with AMX/AVX-512) */
    double mem_gbps;     /* published peak memory bandwidth */
    uint64_t mem_bytes;  /* device memory (CPUs: a typical configuration) */
} pl_sched_catalog_entry_t;

/* Number of entries; entries are indexed 0 .. count - 1. */
int pl_sched_catalog_count(void);
/* Entry i, or NULL when i is out of range. */
const pl_sched_catalog_entry_t *pl_sched_catalog_get(int i);
/* Look an entry up by name or alias: case-insensitive, and ' ', '-' and '_' are interchangeable
 * and may be left out ("h100 sxm", "H100-SXM", "h100sxm"). NULL with PL_ERR_NOT_FOUND in
 * pl_error_msg() when unknown. */
const pl_sched_catalog_entry_t *pl_sched_catalog_find(const char *name);
/* A planner device from a catalogue entry: peak figures scaled by compute_eff and mem_eff
 * (each in (0, 1]; 0 means 1), placed on node/host (NULL: ""). */
pl_status_t pl_sched_catalog_device(const char *name, double compute_eff, double mem_eff,
                                    const char *node, const char *host, pl_sched_device_t *dev);

#endif
