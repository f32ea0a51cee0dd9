/* A stage's receive side of the data plane: of the messages that land in its inbox, only those
 * that carry the job's token and decode within the job's limits are used; the others are
 * dropped, counted by reason and logged (rate-limited), their slots posted again. */
#ifndef PL_TRANSPORT_ACT_RECV_H
#define PL_TRANSPORT_ACT_RECV_H

#include "common/metrics.h"
#include "transport/act.h"
#include "transport/ucx.h"

typedef enum {
    PL_ACT_DROP_TOKEN,     /* not the job's token: from outside the job, or an earlier epoch */
    PL_ACT_DROP_MALFORMED, /* not a message of the job's shape (or of this version) */
    PL_ACT_DROP_OVERSIZE,  /* longer than the inbox's slot */
    PL_ACT_DROP_GRANT,     /* a credit grant without the job's token (transport/ucx_grant.h) */
    PL_ACT_DROP_PROBE,     /* a link probe message without it (pipeline/link_probe.h) */
    PL_ACT_DROP_COUNT
} pl_act_drop_t;

/* "token", "malformed", "oversize", "grant", "probe": the label values of
 * pipeld_act_dropped_total{reason}. */
const char *pl_act_drop_reason(pl_act_drop_t reason);

typedef struct {
    pl_ucx_inbox_t *inbox;         /* borrowed */
    uint32_t job;                  /* messages must name it */
    const pl_act_limits_t *limits; /* borrowed: the job's token and shape */
    pl_metric_t *dropped;          /* counter with label "reason"; NULL records nothing */
    uint64_t drops[PL_ACT_DROP_COUNT];
} pl_act_rx_t;

/* The next message of the job, decoded (pl_act_decode's outputs); it stays in its inbox slot
 * until pl_ucx_inbox_release(rx->inbox). Refused messages are dropped on the way
 * (pl_ucx_inbox_drop: no credit goes back for them) and the wait goes on. The errors of
 * pl_ucx_inbox_recv other than an oversized message; timeout_ms bounds the whole wait. */
pl_status_t pl_act_recv(pl_act_rx_t *rx, pl_act_hdr_t *hdr, pl_act_seq_t *seqs,
                        const void **payload_p, int timeout_ms, const volatile int *cancel);
/* Decode one message that came in outside an inbox (a reduction's sum, say) as pl_act_recv
 * decodes: PL_OK, or the message is refused, counted and logged as pl_act_recv drops one (the
 * caller frees it and waits for the next), with decode's status. */
pl_status_t pl_act_rx_check(pl_act_rx_t *rx, const void *buf, size_t len, pl_act_hdr_t *hdr,
                            pl_act_seq_t *seqs, const void **payload_p);
/* Count n messages of reason dropped elsewhere (grants, probes) as the others are counted. */
void pl_act_rx_note(pl_act_rx_t *rx, pl_act_drop_t reason, uint64_t n);
/* Messages dropped so far, all reasons. */
uint64_t pl_act_rx_dropped(const pl_act_rx_t *rx);

#endif
