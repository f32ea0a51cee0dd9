/* The in-process runner: a whole job in one thread, the model split into stages run one after
 * another on one device. The reference the pipelines are compared with, and the tool behind
 * pl-generate and the single-stage benchmarks. */
#ifndef PL_PIPELINE_GEN_LOCAL_H
#define PL_PIPELINE_GEN_LOCAL_H

#include "backends/backend.h"
#include "common/job_spec.h"

#include <jansson.h>

struct pl_msg_result;

typedef struct {
    double load_s, prefill_s, total_s, compute_s;
    uint64_t prompt_tokens, generated;
    uint64_t freed; /* KV slots given back as sequences finished, summed over the stages */
} pl_gen_local_stats_t;

/* Run the job `spec` (its microbatches as given, at least one) over the model in model_dir with
 * n_stages stages of counts[i] layers each (counts NULL: one stage), all on the opened device
 * dev. *results_p gets the sink's results array. */
pl_status_t pl_gen_local_run(const char *model_dir, const pl_job_spec_t *spec,
                             pl_be_device_t *dev, const int *counts, int n_stages,
                             json_t **results_p, pl_gen_local_stats_t *stats);
/* The same, continuing from where an earlier run stood (pl_gen_job_resume's r and n): what
 * a resumed pipeline must match. */
pl_status_t pl_gen_local_resume(const char *model_dir, const pl_job_spec_t *spec,
                                const struct pl_msg_result *resume, int n_resume,
                                pl_be_device_t *dev, const int *counts, int n_stages,
                                json_t **results_p, pl_gen_local_stats_t *stats);
/* The same on device 0 of the backend named `backend` ("cpu"), opened with `threads` (0: all)
 * for this run and closed after: what pl-generate calls, so tools need no backend API. */
pl_status_t pl_gen_local_run_on(const char *model_dir, const pl_job_spec_t *spec,
                                const char *backend, int threads, const int *counts, int n_stages,
                                json_t **results_p, pl_gen_local_stats_t *stats);

#endif
