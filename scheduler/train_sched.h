/* Training pipeline schedules: GPipe, 1F1B and ZB-H1 as per-stage operation lists (F, B = input
 * grad, W = weight grad, send/receive), their predicted time, bubble and activation stash, the
 * memory a stage needs to train, and the choice among them. Pure C: no I/O, no threads. */
#ifndef PL_SCHEDULER_TRAIN_SCHED_H
#define PL_SCHEDULER_TRAIN_SCHED_H

#include "common/status.h"
#include "common/train_ops.h"

#include <stdbool.h>

/* Seconds (or any one unit) of one microbatch's F, B and W on a stage. */
typedef struct {
    double f, b, w;
} pl_tsched_times_t;

/* Generate `kind` for n_stages stages and n_mb microbatches. times [n_stages] (NULL: 1, 1, 1 on
 * every stage) and comm (seconds per hop) steer ZB-H1's placement of W; GPipe and 1F1B are
 * fixed patterns. ZB-H1 keeps at most min(S, M) microbatches stashed per stage, 1F1B's peak. */
pl_status_t pl_tsched_build(pl_train_kind_t kind, int n_stages, int n_mb,
                            const pl_tsched_times_t *times, double comm, pl_train_ops_t **sched_p);

typedef struct {
    double makespan;                     /* one step's F/B/W time, first op to last */
    double bubble;                       /* idle share: sum of idle / (S * makespan) */
    double busy[PL_TRAIN_MAX_STAGES];    /* compute time per stage */
    int peak_stash[PL_TRAIN_MAX_STAGES]; /* most microbatches between F and W at once */
} pl_tsched_pred_t;

/* Replay the lists with these per-op times (comm per hop): what each schedule is predicted to
 * take. PL_ERR_INFEASIBLE if the lists cannot run (a dependency never met). */
pl_status_t pl_tsched_predict(const pl_train_ops_t *sched, const pl_tsched_times_t *times,
                              double comm, pl_tsched_pred_t *pred_p);

/* What a stage keeps to train: its parameters with their stored bytes each, f32 master copy
 * (when stored otherwise), f32 gradients, two f32 moments; the stash a microbatch holds from F
 * to W (f_bytes) and the extra from B to W (b_bytes). */
typedef struct {
    double params;       /* parameters the stage owns */
    double weight_bytes; /* bytes per stored parameter (4: f32, which is then the master) */
    double f_bytes, b_bytes;
} pl_tsched_mem_t;

/* Peak stash bytes stage `stage` holds running its list. */
double pl_tsched_stash_bytes(const pl_train_ops_t *sched, int stage, double f_bytes,
                             double b_bytes);
/* The stage's training memory under this schedule: weights, master, gradients, moments, stash. */
double pl_tsched_stage_mem(const pl_train_ops_t *sched, int stage, const pl_tsched_mem_t *m);

/* The schedule to run: `forced` (>= 0: that kind, PL_ERR_INFEASIBLE if it does not fit) or the
 * least predicted makespan among those whose every stage fits budget[s] bytes (ties: the lower
 * kind). mem [n_stages], budget [n_stages]; *sched_p and *pred_p get the choice. */
pl_status_t pl_tsched_choose(int n_stages, int n_mb, const pl_tsched_times_t *times, double comm,
                             const pl_tsched_mem_t *mem, const double *budget, int forced,
                             pl_train_ops_t **sched_p, pl_tsched_pred_t *pred_p);

#endif
