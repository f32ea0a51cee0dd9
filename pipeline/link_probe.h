/* Link measurement over a job's own UCX path: before activations move, every stage of a
 * multi-stage job measures the link to its next stage (small ping-pongs for latency, a few
 * 1 MiB messages for bandwidth) and answers the probe of the stage before it. Probe messages
 * carry their own tag kind, so they never mix with activations, and begin with the assignment's
 * token, so only the job's stages get an answer. */
#ifndef PL_PIPELINE_LINK_PROBE_H
#define PL_PIPELINE_LINK_PROBE_H

#include "common/status.h"
#include "transport/act_token.h"
#include "transport/ucx.h"

#include <stdbool.h>
#include <stdint.h>

/* The largest probe message. */
#define PL_PROBE_MAX_BYTES (1u << 20)

typedef struct {
    bool ok;          /* false: the peer did not answer in time (nothing measured) */
    double latency_s; /* one-way: half the shortest round trip */
    double gbps;      /* GB/s of the best bulk round */
    double took_s;    /* the whole exchange, both roles */
    int64_t dropped;  /* probe messages refused: without the token (never answered) */
} pl_probe_result_t;

/* Measure the link to `next` and answer the stage behind `prev` (may be the same endpoint).
 * Both sides run this at START with the assignment's token, which every probe message carries
 * and must carry: one that does not is dropped unanswered and counted (out->dropped). It ends
 * when both roles are done, or after about 3 s without a result (out->ok false, PL_OK).
 * PL_ERR_CANCELED when *cancel becomes non-zero, transport errors as pl_ucx_recv reports them. */
pl_status_t pl_probe_run(pl_ucx_t *ucx, pl_ucx_ep_t *next, pl_ucx_ep_t *prev, uint32_t job,
                         const pl_act_token_t *token, const volatile int *cancel,
                         pl_probe_result_t *out);

/* Whether a data-plane tag belongs to a probe (a late one is dropped by the receiver). */
bool pl_probe_is_tag(uint64_t tag);

#endif
