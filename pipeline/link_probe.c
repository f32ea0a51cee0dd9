/* The link probe: one loop plays both roles, measuring the link to the next stage while it
 * answers the previous stage, so a ring of stages that all probe at once never deadlocks. Every
 * message begins with the job's token; one without it is dropped unanswered. */
#include "pipeline/link_probe.h"

#include "common/log.h"
#include "common/util.h"
#include "transport/act.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define S_PINGS 9  /* the first is a warm-up: it pays for wire-up and the peer's start */
#define S_ROUNDS 5 /* bulk rounds; the first is a warm-up */
#define S_BULKS 2  /* messages per bulk round */
#define S_BULK_BYTES PL_PROBE_MAX_BYTES
#define S_PING_BYTES PL_ACT_TOKEN_BYTES /* the token alone */
#define S_TIMEOUT_S 3.0
#define S_BUDGET_S 0.04 /* bulk rounds after the first timed one start only within this */

enum { S_PING = 0, S_PONG = 1, S_BULK = 2, S_ACK = 3, S_END = 4 }; /* a probe tag's type */

bool pl_probe_is_tag(uint64_t tag)
{
    return pl_act_probe_tag_decode(tag, NULL, NULL);
}

/* A probe message's bytes: the token, then filler. */
static void s_fill(unsigned char *buf, size_t len, const pl_act_token_t *token)
{
    memcpy(buf, token->b, PL_ACT_TOKEN_BYTES);
    memset(buf + PL_ACT_TOKEN_BYTES, 0x5a, len - PL_ACT_TOKEN_BYTES);
}

typedef struct {
    const pl_act_token_t *token;
    /* measuring the link to next */
    int ping;      /* ping in flight */
    int round;     /* bulk round in flight; S_ROUNDS: done */
    double t0;     /* when the probe started */
    double t_sent; /* when the ping or round went out */
    double rtt_min, bps;
    bool mine_done;
    /* answering prev */
    uint32_t bulk_round;
    int bulk_count;
    bool got_end;
    int64_t dropped;
} s_state_t;

static pl_status_t s_send(pl_ucx_t *ucx, pl_ucx_ep_t *ep, uint32_t job, const s_state_t *s,
                          int type, uint32_t seq)
{
    unsigned char *buf = malloc(S_PING_BYTES);
    if (!buf)
        return pl_error(PL_ERR_NOMEM, "link probe: out of memory");
    s_fill(buf, S_PING_BYTES, s->token);
    return pl_ucx_send(ucx, ep, pl_act_probe_tag(job, (uint32_t)type, seq), buf, S_PING_BYTES);
}

/* One bulk round; its buffers are written before the clock starts (first-touch page faults
 * are slow on some VMs and are not the link's). */
static pl_status_t s_round(pl_ucx_t *ucx, pl_ucx_ep_t *next, uint32_t job, s_state_t *s)
{
    void *buf[S_BULKS] = {NULL};
    pl_status_t st = PL_OK;
    for (int i = 0; i < S_BULKS; i++) {
        if (!(buf[i] = malloc(S_BULK_BYTES))) {
            st = pl_error(PL_ERR_NOMEM, "link probe: out of memory");
            goto out;
        }
        s_fill(buf[i], S_BULK_BYTES, s->token);
    }
    s->t_sent = pl_now();
    uint64_t tag = pl_act_probe_tag(job, S_BULK, (uint32_t)s->round);
    for (int i = 0; i < S_BULKS && !st; i++) {
        st = pl_ucx_send(ucx, next, tag, buf[i], S_BULK_BYTES);
        buf[i] = NULL; /* the send owns it, also on failure */
    }
out:
    for (int i = 0; i < S_BULKS; i++)
        free(buf[i]);
    return st;
}

/* One probe message: answer it (prev's probe) or advance this side's measurement; dropped
 * unanswered without the job's token. */
static pl_status_t s_on_msg(pl_ucx_t *ucx, pl_ucx_ep_t *next, pl_ucx_ep_t *prev, uint32_t job,
                            uint64_t tag, const void *buf, size_t len, s_state_t *s)
{
    uint32_t type, seq;
    double now = pl_now();
    pl_act_token_t got;
    if (!pl_act_probe_tag_decode(tag, &type, &seq))
        return PL_OK; /* the receive mask lets only probe tags through */
    if (len >= PL_ACT_TOKEN_BYTES)
        memcpy(got.b, buf, PL_ACT_TOKEN_BYTES);
    if (len < PL_ACT_TOKEN_BYTES || !pl_act_token_equal(&got, s->token)) {
        s->dropped++;
        pl_log_warn_limited("job %u: dropped a link probe message of %zu bytes without the job's "
                            "token", job, len);
        return PL_OK;
    }
    switch (type) {
    case S_PING:
        return s_send(ucx, prev, job, s, S_PONG, seq);
    case S_BULK:
        if (seq != s->bulk_round) {
            s->bulk_round = seq;
            s->bulk_count = 0;
        }
        if (++s->bulk_count == S_BULKS)
            return s_send(ucx, prev, job, s, S_ACK, seq);
        return PL_OK;
    case S_END:
        s->got_end = true;
        return PL_OK;
    case S_PONG:
        if (s->mine_done || s->ping >= S_PINGS || seq != (uint32_t)s->ping)
            return PL_OK; /* stale */
        if (s->ping > 0)
            s->rtt_min = PL_MIN(s->rtt_min, now - s->t_sent);
        if (++s->ping < S_PINGS) {
            s->t_sent = pl_now();
            return s_send(ucx, next, job, s, S_PING, (uint32_t)s->ping);
        }
        return s_round(ucx, next, job, s);
    case S_ACK:
        if (s->mine_done || s->ping < S_PINGS || seq != (uint32_t)s->round)
            return PL_OK;
        if (s->round > 0) /* the round trip stays in: never more than the link gave */
            s->bps = PL_MAX(s->bps, (double)S_BULKS * S_BULK_BYTES / PL_MAX(now - s->t_sent, 1e-9));
        /* after one timed round, stop when the budget is spent (a slow path stays short) */
        if (++s->round < S_ROUNDS && (s->round < 2 || now - s->t0 < S_BUDGET_S))
            return s_round(ucx, next, job, s);
        s->mine_done = true;
        return s_send(ucx, next, job, s, S_END, 0);
    default:
        return PL_OK; /* a type this version does not know: ignore it */
    }
}

pl_status_t pl_probe_run(pl_ucx_t *ucx, pl_ucx_ep_t *next, pl_ucx_ep_t *prev, uint32_t job,
                         const pl_act_token_t *token, const volatile int *cancel,
                         pl_probe_result_t *out)
{
    double t0 = pl_now();
    s_state_t s = {.token = token, .t0 = t0, .rtt_min = INFINITY, .bulk_round = UINT32_MAX};
    uint64_t want = pl_act_probe_tag(job, 0, 0);
    pl_status_t st = s_send(ucx, next, job, &s, S_PING, 0);
    s.t_sent = t0;
    while (!st && !(s.mine_done && s.got_end) && pl_now() - t0 < S_TIMEOUT_S) {
        void *buf = NULL;
        size_t len;
        uint64_t tag;
        st = pl_ucx_recv(ucx, want, PL_ACT_TAG_PROBE_MASK, S_BULK_BYTES, &buf, &len, &tag, 1,
                         cancel);
        if (st == PL_ERR_TIMEOUT) {
            st = PL_OK;
            continue;
        }
        if (st == PL_ERR_PROTOCOL) { /* longer than any probe: taken off the wire, dropped */
            s.dropped++;
            pl_log_warn_limited("job %u: dropped a link probe message: %s", job, pl_error_msg());
            st = PL_OK;
            continue;
        }
        if (!st)
            st = s_on_msg(ucx, next, prev, job, tag, buf, len, &s);
        free(buf);
    }
    if (st)
        return st;
    *out = (pl_probe_result_t){.ok = s.mine_done && isfinite(s.rtt_min) && s.bps > 0,
                               .latency_s = isfinite(s.rtt_min) ? s.rtt_min / 2 : 0,
                               .gbps = s.bps / 1e9,
                               .took_s = pl_now() - t0,
                               .dropped = s.dropped};
    return PL_OK;
}
