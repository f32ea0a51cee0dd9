/* The roofline parts of a planned stage's predicted compute, for comparing with measured times
 * and learning a device's effective rates (the coordinator's feedback loop). */
#ifndef PL_SCHEDULER_TERMS_H
#define PL_SCHEDULER_TERMS_H

#include "scheduler/plan.h"

/* Per call: each phase's compute-only and memory-only time; a prefill call is one message of
 * the plan's chunked prefill (a whole microbatch when prompts go whole), a decode call one
 * microbatch's step. */
typedef struct {
    double pre_flop_s, pre_mem_s; /* prefill: flops / rate, bytes / bandwidth */
    double dec_flop_s, dec_mem_s; /* one decode step */
} pl_sched_terms_t;

/* The terms of stage `stage` of plan, made from `in`. PL_ERR_INVALID when there is no such
 * stage; *terms set only on success. */
pl_status_t pl_sched_terms(const pl_plan_input_t *in, const pl_plan_t *plan, int stage,
                           pl_sched_terms_t *terms);

#endif
