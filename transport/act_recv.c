/* A stage's receive side of the data plane (act_recv.h): decode what lands in the inbox, drop
 * and count what is not the job's, keep waiting for what is; the one count of every refused
 * data-plane message. */
#include "transport/act_recv.h"

#include "common/log.h"
#include "common/util.h"

#include <math.h>

const char *pl_act_drop_reason(pl_act_drop_t reason)
{
    switch (reason) {
    case PL_ACT_DROP_TOKEN:
        return "token";
    case PL_ACT_DROP_MALFORMED:
        return "malformed";
    case PL_ACT_DROP_OVERSIZE:
        return "oversize";
    case PL_ACT_DROP_GRANT:
        return "grant";
    case PL_ACT_DROP_PROBE:
        return "probe";
    case PL_ACT_DROP_COUNT:
        break;
    }
    return "unknown";
}

uint64_t pl_act_rx_dropped(const pl_act_rx_t *rx)
{
    uint64_t n = 0;
    for (int i = 0; i < PL_ACT_DROP_COUNT; i++)
        n += rx->drops[i];
    return n;
}

/* Count and log one dropped message; the error message says why (it never holds the token). */
static void s_count(pl_act_rx_t *rx, pl_act_drop_t reason)
{
    rx->drops[reason]++;
    pl_metrics_add(rx->dropped, pl_act_drop_reason(reason), 1);
    pl_log_warn_limited("job %u: dropped a data message (%s): %s", rx->job,
                        pl_act_drop_reason(reason), pl_error_msg());
}

void pl_act_rx_note(pl_act_rx_t *rx, pl_act_drop_t reason, uint64_t n)
{
    rx->drops[reason] += n;
    pl_metrics_add(rx->dropped, pl_act_drop_reason(reason), (double)n);
}

pl_status_t pl_act_rx_check(pl_act_rx_t *rx, const void *buf, size_t len, pl_act_hdr_t *hdr,
                            pl_act_seq_t *seqs, const void **payload_p)
{
    /* the token is the first thing decode looks at after the magic and version */
    pl_status_t st = pl_act_decode(buf, len, rx->limits, hdr, seqs, payload_p);
    if (!st && hdr->job != rx->job)
        st = pl_error(PL_ERR_PROTOCOL, "activation: job %u on job %u's stage", hdr->job,
                      rx->job);
    if (st)
        s_count(rx, st == PL_ERR_PERMISSION ? PL_ACT_DROP_TOKEN : PL_ACT_DROP_MALFORMED);
    return st;
}

pl_status_t pl_act_recv(pl_act_rx_t *rx, pl_act_hdr_t *hdr, pl_act_seq_t *seqs,
                        const void **payload_p, int timeout_ms, const volatile int *cancel)
{
    double deadline = timeout_ms < 0 ? INFINITY : pl_now() + timeout_ms / 1e3;
    for (;;) {
        const void *buf;
        size_t len;
        int left = -1;
        if (timeout_ms >= 0) {
            double ms = (deadline - pl_now()) * 1e3;
            left = ms <= 0 ? 0 : (int)ceil(ms);
        }
        pl_status_t st = pl_ucx_inbox_recv(rx->inbox, &buf, &len, NULL, left, cancel);
        if (st == PL_ERR_PROTOCOL) { /* longer than a slot: the inbox posted it again */
            s_count(rx, PL_ACT_DROP_OVERSIZE);
            continue;
        }
        if (st)
            return st;
        if (!pl_act_rx_check(rx, buf, len, hdr, seqs, payload_p))
            return PL_OK;
        if ((st = pl_ucx_inbox_drop(rx->inbox)))
            return st;
    }
}
