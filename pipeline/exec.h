/* A stage executor: one thread that loads a stage's layers, talks UCX to its neighbours and runs
 * microbatches until the job ends. It reports to the node's main thread over an inproc PAIR
 * socket with typed control messages (READY, DONE, FAIL) and receives START on the same socket. */
#ifndef PL_PIPELINE_EXEC_H
#define PL_PIPELINE_EXEC_H

#include "backends/backend.h"
#include "common/job_spec.h"
#include "common/metrics.h"
#include "transport/sock.h"

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Where a stage records as it runs: families the daemon registered (borrowed; any may be NULL). */
typedef struct {
    pl_metric_t *compute_s;    /* histogram: seconds of one forward call */
    pl_metric_t *microbatches; /* counter: forward calls, one microbatch step each */
    pl_metric_t *link_bytes;   /* counter, label peer ("stage N"): bytes sent to the next stage */
    pl_metric_t *kv_slots;     /* gauge: KV slots (sequences) the stage holds on its device */
    pl_metric_t *act_dropped;  /* counter, label reason: data messages refused (act_recv.h) */
} pl_exec_metrics_t;

/* A stage's assignment (the ASSIGN message's values) and the device to run it on. */
typedef struct {
    uint32_t job_id;
    int stage, n_stages;
    int first_layer, last_layer;
    pl_job_spec_t spec; /* the job as the user asked it (model, prompts, settings); moved in */
    int n_resume;       /* ASSIGN's resume: where each sequence stands (0: from the start) */
    struct pl_msg_result *resume; /* moved in with the spec */
    int microbatches;   /* what the plan decided */
    int max_ctx, max_tokens;
    pl_be_device_t *dev; /* opened device; borrowed, outlives the exec */
    int threads;
    pl_exec_metrics_t metrics;
} pl_exec_params_t;

typedef struct pl_exec pl_exec_t;

/* Start the executor thread; params->spec is taken (left cleared), also on error. The returned
 * exec's PAIR socket (pl_exec_socket) is for the caller's poll loop. */
pl_status_t pl_exec_start(pl_tx_ctx_t *ctx, pl_exec_params_t *params, pl_exec_t **exec_p);
pl_tx_sock_t *pl_exec_socket(pl_exec_t *exec);
uint32_t pl_exec_job(const pl_exec_t *exec);
int pl_exec_stage(const pl_exec_t *exec);
/* Whether it runs a deployment's stage (spec.serve.on): it takes SEQ_ADD / SEQ_CANCEL on its
 * socket and sends SEQ_OUT there. */
bool pl_exec_serves(const pl_exec_t *exec);
/* Tokens the (last) stage has sampled so far; 0 for other stages. Safe from any thread. */
uint64_t pl_exec_generated(pl_exec_t *exec);
/* Seconds the stage has spent in forward calls so far, and the sequences whose KV slots it
 * freed because they finished (on the last stage: the sequences done). Safe from any thread. */
double pl_exec_busy_s(pl_exec_t *exec);
uint64_t pl_exec_seqs_done(pl_exec_t *exec);
/* Bytes [from, from + n) of the completion a one-prompt text job's last stage has decoded so
 * far, as much of it as no later token changes (gen_text.h's stable text), copied into buf; n
 * is at most cap, ends on a character boundary and before any NUL byte (the stream stops there).
 * Returns n: 0 when nothing new (or not such a stage). Safe from any thread. */
size_t pl_exec_text(pl_exec_t *exec, size_t from, char *buf, size_t cap);
/* The last stage's log of sampled tokens (gen_log.h), which the node reports in PROGRESS;
 * NULL for other stages. Borrowed, lives as long as the exec. */
struct pl_gen_log *pl_exec_log(pl_exec_t *exec);
/* The stage's trace so far (pipeline/trace.h), for a running job; PL_ERR_NOT_FOUND when the
 * job does not trace. Safe from any thread; the caller frees *out_p. */
pl_status_t pl_exec_trace(pl_exec_t *exec, pl_msg_trace_t **out_p);
/* Ask the thread to stop soon (the job was canceled). Never blocks. */
void pl_exec_cancel(pl_exec_t *exec);
/* Cancel, join the thread, close the socket, free; *exec_p NULL; safe on NULL. */
void pl_exec_destroy(pl_exec_t **exec_p);

#endif
