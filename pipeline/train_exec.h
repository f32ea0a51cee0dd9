/* The distributed training stage: one stage of a pipeline per process (or thread), running its
 * schedule's op list with activations forward and gradients backward over the UCX data plane,
 * then the global gradient norm summed down the chain and AdamW. Same losses as train_local. */
#ifndef PL_PIPELINE_TRAIN_EXEC_H
#define PL_PIPELINE_TRAIN_EXEC_H

#include "pipeline/train_local.h"
#include "common/metrics.h"
#include "transport/act_token.h"
#include "transport/ucx.h"

#include <stdint.h>

/* Where a stage's messages go: its worker and the endpoints to its neighbours (all borrowed,
 * outliving the stage; prev NULL on stage 0, next NULL on the last). */
typedef struct {
    pl_ucx_t *ucx;
    pl_ucx_ep_t *prev, *next;
    uint32_t job;               /* tags and headers carry it */
    pl_act_token_t token;       /* the assignment's: every message and grant carries it, and
                                 * what comes without it is dropped and counted */
    pl_metric_t *dropped;       /* counter, label reason (transport/act_recv.h); may be NULL */
    int timeout_ms;             /* a receive or a credit waits at most this; < 0 forever */
    const volatile int *cancel; /* non-zero stops a waiting step (PL_ERR_CANCELED); may be NULL */
    /* Data parallel (train_allreduce.h): this stage's ring across the pipeline's replicas, whose
     * gradients and loss are averaged before the norm and the optimizer step; NULL: alone. */
    struct pl_train_ar *dp;
} pl_train_link_t;

typedef struct pl_train_exec pl_train_exec_t;

/* Stage `stage` of n_stages over layers [l0, l1) of w (borrowed; only this stage's tensors are
 * read and updated), running sched->ops[stage] (borrowed; checked: the schedule's shape against
 * cfg, every op's microbatch, no receive or send past the ends of the pipeline). Makes the
 * stage's inboxes: activations from prev and gradients from next, n_mb slots each, credits
 * granted to the neighbours (whose endpoints this switches to credits). */
pl_status_t pl_train_exec_create(const pl_train_local_cfg_t *cfg, pl_train_weights_t *w, int stage,
                                 int n_stages, int l0, int l1, const pl_train_ops_t *sched,
                                 const pl_train_link_t *link, pl_train_exec_t **te_p);
/* Waits for this stage's sends to complete (bounded), frees; *te_p NULL; safe on NULL. */
void pl_train_exec_destroy(pl_train_exec_t **te_p);
/* The stage's optimizer (borrowed): what checkpoints save and a resume restores. */
pl_adamw_t *pl_train_exec_opt(pl_train_exec_t *te);

typedef struct {
    double loss;             /* mean cross-entropy per token of the step (every stage has it) */
    double grad_norm;        /* global gradient norm before clipping, summed over the stages */
    float clip;              /* clipping factor applied */
    size_t peak_stash_bytes; /* most activation bytes this stage held */
    double busy_s;           /* time in F, B and W */
    double wait_s;           /* time waiting for activations, gradients and the norm */
    double wall_s;           /* the whole step on this stage */
} pl_train_exec_step_t;

/* One optimizer step over the step's tokens [n_mb][seq_len + 1] (every stage gets the same; ids
 * checked < vocab): the op list, then the norm reduction (stage 0's partial sum passed up to the
 * last stage, which sends the total and the loss back down), then this stage's AdamW. On error
 * the weights are untouched and the stage's gradients and stashes dropped; its peers then fail
 * by timeout or transport error. */
pl_status_t pl_train_exec_step(pl_train_exec_t *te, const int32_t *tokens,
                               pl_train_exec_step_t *out);

#endif
