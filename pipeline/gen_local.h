/* The in-process runner: a whole job in one thread, the model split into stages run one after
 * another on one device. The reference the pipelines are compared with, and the tool behind
 * pl-generate and the single-stage benchmarks. */
#ifndef PL_PIPELINE_GEN_LOCAL_H
#define PL_PIPELINE_GEN_LOCAL_H

#include "backends/backend.h"
#include "common/job_spec.h"

#include <jansson.h>

typedef struct {
    double load_s, prefill_s, total_s, compute_s;
    uint64_t prompt_tokens, generated;
} pl_gen_local_stats_t;

/* Run the job `spec` (its microbatches as given, at least one) over the model in model_dir with
 * n_stages stages of counts[i] layers each (counts NULL: one stage). *results_p gets the sink's
 * results array. */
pl_status_t pl_gen_local_run(const char *model_dir, const pl_job_spec_t *spec,
                             const pl_be_ops_t *ops, void *dev, const int *counts, int n_stages,
                             json_t **results_p, pl_gen_local_stats_t *stats);

#endif
