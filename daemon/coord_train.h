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
    int first_step;  /* steps taken before the job (its resume_from's): the curve starts after */
    int run_from;    /* steps taken before this run (first_step, or the checkpoint it resumed) */
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
void pl_coord_train_free(pl_coord_job_t *j); /* coord_train_row.c */
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

/* coord_train_row.c */
/* The job's progress for its state db row (first step, steps, loss curve, last whole
 * checkpoint; a new reference, NULL on no memory), and back from a stored one onto a job whose
 * spec has its training part: every field checked against the spec (the file is outside input),
 * j->train set only on success. */
json_t *pl_coord_train_row(const pl_coord_job_t *j);
pl_status_t pl_coord_train_from_row(const json_t *row, pl_coord_job_t *j);
/* coord_train_resume.c */
/* Make j (validated, not running) continue from the last whole checkpoint of `from` (the
 * progress of its earlier run, taken; *from_p NULL after), or from its start when there is none:
 * its spec resumes from that checkpoint and keeps its split, the curve up to it is kept. what:
 * "checkpoint-N" or "step N" (the start). On error j and *from_p are unchanged. */
pl_status_t pl_coord_train_rewind(pl_coord_job_t *j, pl_coord_train_t **from_p, char *what,
                                  size_t len);

#endif
