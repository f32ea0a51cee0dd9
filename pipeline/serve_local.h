/* The in-process serving runner: requests arriving over time through the continuous batcher
 * (batch.h) and the per-slot sink (serve_sink.h), the model's stages run back to back in one
 * thread with `lanes` microbatches in flight. The reference a deployment is compared with, and
 * what shows that a request's tokens do not depend on what shares its microbatches. */
#ifndef PL_PIPELINE_SERVE_LOCAL_H
#define PL_PIPELINE_SERVE_LOCAL_H

#include "backends/backend.h"
#include "common/job_gen.h"
#include "pipeline/batch.h"
#include "transport/msg.h"

#include <stdint.h>

typedef struct {
    const int32_t *prompt; /* borrowed */
    int n_prompt;
    pl_job_gen_t gen;
    uint64_t arrive; /* microbatches run before it arrives (0: at the start) */
} pl_serve_local_req_t;

typedef struct {
    int32_t *tokens; /* malloc'd; free with pl_serve_local_free */
    int n_tokens;
    pl_finish_t finish;
    bool refused;       /* the queue was full when it arrived */
    uint64_t admitted_at; /* microbatches run when its first chunk went in */
} pl_serve_local_out_t;

typedef struct {
    pl_batch_stats_t batch;
    uint64_t steps; /* microbatches run */
    double compute_s, total_s;
} pl_serve_local_stats_t;

/* Run the requests over the model in model_dir split into n_stages stages of counts[i] layers
 * (counts NULL: one stage) on device dev, with the batcher's bounds `bp` (n_slots, lanes,
 * step_tokens, chunk, max_queue). outs[i] is request i's result. */
pl_status_t pl_serve_local_run(const char *model_dir, pl_be_device_t *dev, const int *counts,
                               int n_stages, const pl_batch_params_t *bp,
                               const pl_serve_local_req_t *reqs, int n_reqs,
                               pl_serve_local_out_t *outs, pl_serve_local_stats_t *stats);
void pl_serve_local_free(pl_serve_local_out_t *outs, int n);

#endif
