/* The roofline parts of a planned stage's predicted compute, for comparing with measured times
 * and learning a device's effective rates (the coordinator's feedback loop). */
#ifndef PL_SCHEDULER_TERMS_H
#define PL_SCHEDULER_TERMS_H

#include "scheduler/plan.h"

/* Per call: each phase's compute-only and memory-only time; a prefill call is one message of
 * the plan's chunked prefill (a whole microbatch when prompts go whole), a decode call one
 * microbatch's step. A phase's predicted time is the larger of its two terms, or on decode's
 * kernels (its *_rows) the larger plus PL_SCHED_ROW_OVERLAP of the smaller (plan.h). */
typedef struct {
    double pre_flop_s, pre_mem_s; /* prefill: flops / rate (+ its weight passes), bytes / bw */
    double dec_flop_s, dec_mem_s; /* one decode step (dec_rows: flops / the decode row rate) */
    double pre_attn_s; /* of pre_flop_s, the attention's part (at attn_gflops; 0: no such rate) */
    bool pre_rows;                /* the prefill call runs on decode's kernels (short prompts) */
    bool dec_rows;                /* the device has a decode row rate (dec_gflops > 0) */
} pl_sched_terms_t;

/* The terms of stage `stage` of plan, made from `in`. PL_ERR_INVALID when there is no such
 * stage; *terms set only on success. */
pl_status_t pl_sched_terms(const pl_plan_input_t *in, const pl_plan_t *plan, int stage,
                           pl_sched_terms_t *terms);
/* The predicted compute of one prefill call and of one decode step from their terms. */
double pl_sched_terms_prefill(const pl_sched_terms_t *t);
double pl_sched_terms_decode(const pl_sched_terms_t *t);

#endif
