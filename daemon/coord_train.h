/* The coordinator's training jobs (coord_train.c, coord_train_plan.c): what a training job
 * keeps beside a generation job's state, and the calls coord_job.c, coord_plan.c, coord.c and
 * coord_query.c make for one. */
#ifndef PL_DAEMON_COORD_TRAIN_H
#define PL_DAEMON_COORD_TRAIN_H

#include "daemon/coord_int.h"

/* What the stages reported of one stage. */
typedef struct {
    int step;                      /* the last step it reported */
    double busy_s, wait_s, wall_s; /* summed over the steps: bubble = 1 - busy / wall */
    int64_t peak_stash;
    int ckpt_step; /* the last step whose checkpoint part it wrote; -1: none */
} pl_coord_train_stage_t;

typedef struct pl_coord_train {
    int first_step;  /* steps taken before this run (a resume's) */
    int step;        /* the last step the last stage reported */
    double loss, grad_norm, lr;
    int64_t tokens;  /* trained on by this run */
    double t_first;  /* when the first reported step began */
    double *losses;  /* [min(steps, 2^20)]: step k's loss at k - 1 */
    int ckpt_step;   /* the last step whose checkpoint every stage wrote; -1: none */
    pl_coord_train_stage_t stages[PL_COORD_MAX_STAGES];
} pl_coord_train_t;

/* A submitted training job (j->spec.train) checked against its model, data and resume point;
 * sets j's shape and progress. A resume fixes the split. */
pl_status_t pl_coord_train_validate(pl_coord_job_t *j);
void pl_coord_train_free(pl_coord_job_t *j);
/* Plan a queued training job on idle devices (coord_train_plan.c): the stages, each charged its
 * weights, optimizer state, gradients and its schedule's stash; the schedule (the job's, or the
 * one with the least predicted step time); j's stages and spec.train's schedule and split.
 * As pl_coord_plan_job: false with j->error when it waits, false with j failed when it can't. */
bool pl_coord_train_plan(pl_coord_t *c, pl_coord_job_t *j);
/* START's addresses for stage i of a training job (replica i / S, stage i % S of S): next and
 * prev in its replica's chain (NULL at its ends), and its all-reduce ring across the replicas
 * (NULL with one replica). Borrowed from j. */
void pl_coord_train_start(const pl_coord_job_t *j, int i, pl_msg_start_t *m);
/* TRAIN_STEP from a stage of a running job's current assignment, its node checked. */
void pl_coord_on_train_step(pl_coord_t *c, const pl_tx_peer_t *from, const pl_msg_t *m);
/* Whether every stage reported every step (why: the final loss, or what is missing). */
bool pl_coord_train_finished(const pl_coord_job_t *j, char *why, size_t len);
/* The job's training status: step, loss, tokens/s, ETA, schedule, split, the loss curve (the
 * latest 4096 steps), per-stage busy, wait, measured bubble and stash, the last checkpoint. */
json_t *pl_coord_train_json(const pl_coord_job_t *j);

#endif
