/* Data parallelism for a training stage: the ring all-reduce over UCX that averages one stage's
 * gradients (and the step's loss) across the R replicas of the pipeline before the optimizer
 * step, so every replica takes the same step. */
#ifndef PL_PIPELINE_TRAIN_ALLREDUCE_H
#define PL_PIPELINE_TRAIN_ALLREDUCE_H

#include "common/metrics.h"
#include "pipeline/train_adamw.h"
#include "transport/act_recv.h"
#include "transport/act_token.h"
#include "transport/ucx.h"

#include <stdint.h>

typedef struct pl_train_ar pl_train_ar_t;

/* Rank `rank` of n_ranks (2..64) in the ring of one stage's replicas: messages go to next (the
 * replica rank + 1) and come from prev (rank - 1; both the same endpoint when n_ranks is 2),
 * over worker ucx (all borrowed, outliving the ring), tagged with job. Every message carries
 * token (the assignment's, copied) and one without it is dropped and counted in dropped (label
 * reason, as transport/act_recv.h counts; may be NULL). timeout_ms and cancel as
 * pl_train_link_t's. */
pl_status_t pl_train_ar_create(pl_ucx_t *ucx, pl_ucx_ep_t *next, pl_ucx_ep_t *prev, int rank,
                               int n_ranks, uint32_t job, const pl_act_token_t *token,
                               pl_metric_t *dropped, int timeout_ms, const volatile int *cancel,
                               pl_train_ar_t **ar_p);
void pl_train_ar_destroy(pl_train_ar_t **ar_p);
int pl_train_ar_ranks(const pl_train_ar_t *ar);
/* Messages the ring dropped so far (all reasons). */
uint64_t pl_train_ar_dropped(const pl_train_ar_t *ar);

/* Replace opt's accumulated gradients, and *extra (the stage's loss sum), by their mean over the
 * ranks: reduce-scatter then all-gather in n_ranks chunks, summed in double; each chunk's sum is
 * made once (by its owner) and passed on, so every rank ends with the same bits. `step` tags the
 * messages (the caller's step counter: a retry never matches an earlier attempt's). A message
 * without the token is dropped and the wait goes on; one with it is checked (kind, job, step,
 * chunk, length). On error the gradients are left partly reduced: the caller drops the step. */
pl_status_t pl_train_ar_mean(pl_train_ar_t *ar, pl_adamw_t *opt, double *extra, uint32_t step);

#endif
