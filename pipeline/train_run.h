/* A training stage inside pipeld: the executor thread's life for an assignment whose spec has a
 * training part — load the stage's master weights and the data, READY, START, the steps of
 * pl_train_exec over UCX with a TRAIN_STEP report each, checkpoints, DONE (or FAIL). */
#ifndef PL_PIPELINE_TRAIN_RUN_H
#define PL_PIPELINE_TRAIN_RUN_H

#include "common/job_spec.h"
#include "common/metrics.h"
#include "common/train_ops.h"
#include "transport/sock.h"

#include <stdint.h>

typedef struct {
    uint32_t job;
    int stage, n_stages;           /* the job's: replicas x the split's stages (stage i is
                                    * replica i / S's stage i % S) */
    int first, last;               /* the assignment's layers, inclusive */
    const pl_job_train_t *train;   /* borrowed: the job and the coordinator's schedule and split */
    const pl_train_ops_t *ops;     /* borrowed: the schedule, which every stage builds alike */
    pl_tx_sock_t *sock;            /* the executor's PAIR socket to the node's main thread */
    const volatile int *cancel;    /* non-zero: the node canceled the stage */
    pl_metric_t *act_dropped;      /* pipeld_act_dropped_total (label reason); may be NULL */
} pl_train_run_t;

/* Run the stage to its end on the calling thread. Every outcome is reported on r->sock (READY,
 * TRAIN_STEP per step, DONE or FAIL: job and stage filled, epoch left to the node); after DONE
 * the stage's endpoints stay up until it is canceled (released) or 30 s pass. */
void pl_train_run_stage(const pl_train_run_t *r);

/* The checkpoint directory of step `step` under the job's checkpoint_dir: DIR/checkpoint-STEP. */
pl_status_t pl_train_run_ckpt_dir(const pl_cfg_train_t *job, int step, char *out, size_t len);

#endif
