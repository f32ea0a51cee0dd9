/* A stage's trace: the intervals it waits to receive, computes and sends, per microbatch step,
 * in a fixed-size ring (the oldest are dropped, and counted), plus the process's clock. */
#ifndef PL_PIPELINE_TRACE_H
#define PL_PIPELINE_TRACE_H

#include "common/status.h"
#include "transport/act.h"
#include "transport/msg.h"

#include <stdint.h>

typedef struct pl_trace pl_trace_t;

/* A ring of `capacity` events (1..PL_TRACE_MAX_EVENTS), its wall-clock offset measured now. */
pl_status_t pl_trace_new(int capacity, pl_trace_t **tr_p);
void pl_trace_destroy(pl_trace_t **tr_p);

/* Record [t0, t1] (pl_now() seconds) of `kind` for hdr's (kind, microbatch, step). Never
 * allocates or blocks; when full it overwrites the oldest event. A NULL ring records nothing
 * (the job does not trace). Only the owning (executor) thread calls it. */
void pl_trace_add(pl_trace_t *tr, pl_trace_kind_t kind, const pl_act_hdr_t *hdr, double t0,
                  double t1);

/* Events recorded in all, held now, and dropped (overwritten); the owning thread's view. */
uint64_t pl_trace_recorded(const pl_trace_t *tr);
int pl_trace_count(const pl_trace_t *tr);
uint64_t pl_trace_dropped(const pl_trace_t *tr);

/* The held events, oldest first, as the wire's trace: times on the coordinator's clock (this
 * process's wall clock corrected by pl_trace_clock_correction_ns). The caller frees *out_p. Safe
 * from any thread while the owner records (a running job's trace so far). */
pl_status_t pl_trace_export(pl_trace_t *tr, pl_msg_trace_t **out_p);

/* ---- the process's clock against the coordinator's (trace_clock.c) ---- */

/* This process's wall clock, ns since the epoch. */
int64_t pl_trace_clock_wall_ns(void);
/* The smallest correction (ns, added to this clock) that agrees with one round trip: a request
 * left at local wall time sent_ns, the coordinator stamped coord_ns, the answer came back at
 * recv_ns. The coordinator's stamp lies within the round trip, so any skew within +-rtt/2 of the
 * measured one is possible: 0 when that range holds 0 (as on one host), else its end nearest 0. */
int64_t pl_trace_clock_correction(int64_t sent_ns, int64_t coord_ns, int64_t recv_ns);
/* The daemon's heartbeat exchange: a heartbeat (or HELLO) leaves now; a WELCOME stamped coord_ns
 * came back now. The round trip with the smallest delay of the last minute sets the process's
 * correction. Safe from any thread. */
void pl_trace_clock_sent(void);
void pl_trace_clock_answer(int64_t coord_ns);
/* The current correction, ns (0 before any answer, and in the coordinator itself). */
int64_t pl_trace_clock_correction_ns(void);

#endif
