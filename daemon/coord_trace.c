/* The traces the coordinator keeps: each finished stage's (from its DONE), in memory only, at most
 * S_BUDGET events over all jobs (the oldest jobs' go first), and the TRACE query that reads them.
 */
#include "common/log.h"
#include "common/util.h"
#include "daemon/coord_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Events kept in all (32 bytes each: 32 MiB): more than one job of PL_MSG_MAX_STAGES stages with
 * full rings holds, so the newest job's trace is always whole. */
#define S_BUDGET ((int64_t)1 << 20)

typedef struct {
    uint32_t job, epoch;
    int stage;
    char node[PL_CFG_NAME_MAX + 1];
    char device[32];
    pl_msg_trace_t *trace;
} s_entry_t;

struct pl_coord_traces {
    s_entry_t *e;
    int n, cap;
    int64_t events;
};

static void s_drop(struct pl_coord_traces *t, int i)
{
    t->events -= t->e[i].trace->n_events;
    pl_msg_trace_free(&t->e[i].trace);
    t->e[i] = t->e[--t->n];
}

void pl_coord_trace_keep(pl_coord_t *c, const pl_coord_job_t *j, int stage, pl_msg_trace_t **tr_p)
{
    pl_msg_trace_t *tr = *tr_p;
    struct pl_coord_traces *t = c->traces;
    *tr_p = NULL;
    if (!tr)
        return;
    if (!t && !(t = c->traces = calloc(1, sizeof(*t))))
        goto nomem;
    for (int i = t->n - 1; i >= 0; i--) /* an earlier assignment's, or this stage's again */
        if (t->e[i].job == j->id && (t->e[i].epoch != j->epoch || t->e[i].stage == stage))
            s_drop(t, i);
    while (t->events + tr->n_events > S_BUDGET) { /* the oldest job's go first */
        int old = -1;
        for (int i = 0; i < t->n; i++)
            if (t->e[i].job != j->id && (old < 0 || t->e[i].job < t->e[old].job))
                old = i;
        if (old < 0)
            break;
        uint32_t id = t->e[old].job;
        for (int i = t->n - 1; i >= 0; i--)
            if (t->e[i].job == id)
                s_drop(t, i);
    }
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 16;
        s_entry_t *e = realloc(t->e, (size_t)cap * sizeof(*e));
        if (!e)
            goto nomem;
        t->e = e;
        t->cap = cap;
    }
    s_entry_t *e = &t->e[t->n++];
    const pl_coord_stage_t *s = &j->stages[stage];
    *e = (s_entry_t){.job = j->id, .epoch = j->epoch, .stage = stage, .trace = tr};
    snprintf(e->node, sizeof(e->node), "%s", c->nodes[s->node].name);
    snprintf(e->device, sizeof(e->device), "%s", c->nodes[s->node].dev[s->dev].id);
    t->events += tr->n_events;
    if (tr->recorded > tr->n_events)
        pl_log_info("job %u stage %d: trace kept its newest %d of %lld events", j->id, stage,
                    tr->n_events, (long long)tr->recorded);
    return;
nomem:
    pl_log_warn("job %u stage %d: trace dropped: out of memory", j->id, stage);
    pl_msg_trace_free(&tr);
}

void pl_coord_trace_forget(pl_coord_t *c, uint32_t job)
{
    struct pl_coord_traces *t = c->traces;
    for (int i = t ? t->n - 1 : -1; i >= 0; i--)
        if (t->e[i].job == job)
            s_drop(t, i);
}

void pl_coord_trace_free_all(pl_coord_t *c)
{
    struct pl_coord_traces *t = c->traces;
    if (!t)
        return;
    while (t->n > 0)
        s_drop(t, t->n - 1);
    free(t->e);
    free(t);
    c->traces = NULL;
}

void pl_coord_on_trace(pl_coord_t *c, const pl_tx_peer_t *from, const pl_msg_t *m)
{
    const pl_msg_trace_ref_t *q = &m->trace_ref;
    pl_coord_job_t *j = pl_coord_find_job(c, q->job);
    if (!j) {
        pl_coord_reply_error(c, from, PL_ERR_NOT_FOUND, "no job %u", q->job);
        return;
    }
    if (!pl_coord_auth_may_see(c, from, j)) {
        pl_coord_reply_error(c, from, PL_ERR_PERMISSION, "job %u belongs to another user", j->id);
        return;
    }
    if (j->n_stages == 0) {
        pl_coord_reply_error(c, from, PL_ERR_BUSY,
                             "job %u is %s and has no stages: not planned yet, or from before "
                             "the coordinator's restart (traces are kept in memory only)",
                             j->id, pl_job_state_name(j->state));
        return;
    }
    if (q->stage >= j->n_stages) {
        pl_coord_reply_error(c, from, PL_ERR_RANGE, "job %u has %d stages, no stage %d", j->id,
                             j->n_stages, q->stage);
        return;
    }
    const pl_coord_stage_t *s = &j->stages[q->stage];
    if (j->state == PL_JOB_RUNNING && !s->done) { /* ask for the trace so far, for next time */
        pl_msg_t ask;
        pl_msg_init(&ask, PL_MSG_TRACE);
        ask.trace_ref = (pl_msg_trace_ref_t){.job = j->id, .stage = q->stage, .epoch = j->epoch};
        pl_coord_send_node(c, s->node, &ask);
    }
    pl_msg_trace_reply_t r = {.job = j->id,
                              .stage = q->stage,
                              .n_stages = j->n_stages,
                              .first = s->first,
                              .last = s->last};
    snprintf(r.state, sizeof(r.state), "%s", pl_job_state_name(j->state));
    snprintf(r.node, sizeof(r.node), "%s",
             c->nodes[s->node].name[0] ? c->nodes[s->node].name : "?");
    snprintf(r.device, sizeof(r.device), "%s",
             c->nodes[s->node].dev[s->dev].id[0] ? c->nodes[s->node].dev[s->dev].id : "?");
    for (int i = 0; c->traces && i < c->traces->n; i++) {
        const s_entry_t *e = &c->traces->e[i];
        if (e->job == j->id && e->epoch == j->epoch && e->stage == q->stage) {
            snprintf(r.node, sizeof(r.node), "%s", e->node);
            snprintf(r.device, sizeof(r.device), "%s", e->device);
            r.trace = e->trace; /* borrowed for the encode */
        }
    }
    json_t *body;
    if (pl_msg_trace_reply_encode(&r, &body))
        body = NULL;
    pl_coord_reply(c, from, body);
}

void pl_coord_on_traced(pl_coord_t *c, const pl_tx_peer_t *from, pl_msg_t *m)
{
    const pl_msg_traced_t *t = &m->traced;
    char node[PL_CFG_NAME_MAX + 1];
    snprintf(node, sizeof(node), "%.*s", (int)PL_MIN(from->len, PL_CFG_NAME_MAX), from->id);
    pl_coord_job_t *j = pl_coord_find_job(c, t->job);
    int ni = pl_coord_find_node(c, node);
    /* only the assigned node's, for the current assignment, before its DONE (which is final) */
    if (!j || j->state != PL_JOB_RUNNING || t->epoch != j->epoch || t->stage >= j->n_stages ||
        j->stages[t->stage].node != ni || j->stages[t->stage].done) {
        pl_log_info_limited("TRACED for job %u stage %d epoch %u from %s: not a running stage "
                            "of that node; dropped",
                            t->job, t->stage, t->epoch, node);
        return;
    }
    pl_coord_trace_keep(c, j, t->stage, &m->traced.trace);
}
