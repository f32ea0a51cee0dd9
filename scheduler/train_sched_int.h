/* Internal to scheduler/: ZB-H1's greedy placement and the emitter it shares with the fixed
 * patterns (train_sched.c). */
#ifndef PL_SCHEDULER_TRAIN_SCHED_INT_H
#define PL_SCHEDULER_TRAIN_SCHED_INT_H

#include "scheduler/train_sched.h"

/* Append compute op (kind, mb) of stage s with the receive before and the send after it. */
void pl_tsched_emit(pl_train_ops_t *t, int s, pl_train_op_kind_t kind, int mb);
/* Fill t (kind, sizes set, lists empty) with ZB-H1's order. */
pl_status_t pl_tsched_zbh1(pl_train_ops_t *t, const pl_tsched_times_t *times, double comm);

#endif
