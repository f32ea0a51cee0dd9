/* The trace codecs: one stage's recorded intervals (inside DONE and the TRACE answer), the TRACE
 * query and its answer. Events travel as short arrays, every field range-checked on receipt. */
#include "common/json.h"
#include "transport/msg.h"
#include "transport/msg_int.h"

#include <stdlib.h>
#include <string.h>

#define S_EVENT_FIELDS 6            /* [kind, act, mb, step, t_ns, dur_ns] */
#define S_MAX_NS ((int64_t)1 << 53) /* 104 days: a trace's span and an event's length */
#define S_MAX_ACT 3                 /* transport/act.h's kinds end at PL_ACT_STOP */

pl_status_t pl_msg_trace_encode(const pl_msg_trace_t *t, json_t **body_p)
{
    json_t *ev = json_array();
    for (int i = 0; ev && i < t->n_events; i++) {
        const pl_msg_trace_event_t *e = &t->events[i];
        if (json_array_append_new(ev, json_pack("[i, i, I, I, I, I]", e->kind, e->act,
                                                (json_int_t)e->mb, (json_int_t)e->step,
                                                (json_int_t)e->t_ns, (json_int_t)e->dur_ns))) {
            json_decref(ev);
            ev = NULL;
        }
    }
    if (!ev)
        return pl_msg_int_done(NULL, "trace", body_p);
    return pl_msg_int_done(json_pack("{s:I, s:I, s:o}", "t0_ns", (json_int_t)t->t0_ns, "recorded",
                                     (json_int_t)t->recorded, "events", ev),
                           "trace", body_p);
}

void pl_msg_trace_free(pl_msg_trace_t **t_p)
{
    if (!*t_p)
        return;
    free((*t_p)->events);
    free(*t_p);
    *t_p = NULL;
}

/* Event i from its array form; prev_t is the previous event's start (time order). */
static pl_status_t s_event(const json_t *a, int i, int64_t prev_t, pl_msg_trace_event_t *e)
{
    static const int64_t max[S_EVENT_FIELDS] = {
        PL_TRACE_KINDS_ - 1,   S_MAX_ACT, PL_JOB_MAX_SEQS - 1,
        PL_JOB_MAX_NEW_TOKENS, S_MAX_NS,  S_MAX_NS};
    static const char *const names[S_EVENT_FIELDS] = {"kind", "act",  "mb",
                                                      "step", "t_ns", "dur_ns"};
    int64_t v[S_EVENT_FIELDS];
    if (!json_is_array(a) || json_array_size(a) != S_EVENT_FIELDS)
        return pl_error(PL_ERR_INVALID, "trace event %d: expected an array of %d integers", i,
                        S_EVENT_FIELDS);
    for (int f = 0; f < S_EVENT_FIELDS; f++) {
        const json_t *x = json_array_get(a, (size_t)f);
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > max[f])
            return pl_error(PL_ERR_INVALID,
                            "trace event %d: field '%s': expected an integer in "
                            "[0, %lld]",
                            i, names[f], (long long)max[f]);
        v[f] = json_integer_value(x);
    }
    if (v[4] < prev_t)
        return pl_error(PL_ERR_INVALID, "trace event %d: starts before the event ahead of it", i);
    if (v[4] + v[5] > S_MAX_NS)
        return pl_error(PL_ERR_INVALID, "trace event %d: ends past the trace's span", i);
    *e = (pl_msg_trace_event_t){.kind = (uint8_t)v[0],
                                .act = (uint8_t)v[1],
                                .mb = (uint32_t)v[2],
                                .step = (uint32_t)v[3],
                                .t_ns = v[4],
                                .dur_ns = v[5]};
    return PL_OK;
}

pl_status_t pl_msg_trace_decode(const json_t *body, pl_msg_trace_t **t_p)
{
    json_t *ev;
    int64_t t0, rec;
    pl_status_t st;
    if (!json_is_object(body))
        return pl_error(PL_ERR_INVALID, "field 'trace': expected an object");
    if ((st = pl_json_int(body, "t0_ns", 0, INT64_MAX, &t0)) ||
        (st = pl_json_array(body, "events", PL_TRACE_MAX_EVENTS, &ev)) ||
        (st = pl_json_int(body, "recorded", (int64_t)json_array_size(ev), S_MAX_NS, &rec)))
        return pl_error_prefix(st, "trace: ");
    size_t n = json_array_size(ev);
    pl_msg_trace_t *t = calloc(1, sizeof(*t));
    if (!t || (n && !(t->events = malloc(n * sizeof(*t->events))))) {
        free(t);
        return pl_error(PL_ERR_NOMEM, "trace: out of memory");
    }
    int64_t prev = 0;
    for (size_t i = 0; i < n; i++) {
        if ((st = s_event(json_array_get(ev, i), (int)i, prev, &t->events[i]))) {
            pl_msg_trace_free(&t);
            return st;
        }
        prev = t->events[i].t_ns;
    }
    t->t0_ns = t0;
    t->recorded = rec;
    t->n_events = (int)n;
    *t_p = t;
    return PL_OK;
}

pl_status_t pl_msg_trace_ref_encode(const pl_msg_trace_ref_t *m, json_t **body_p)
{
    return pl_msg_int_done(json_pack("{s:I, s:i, s:I}", "job", (json_int_t)m->job, "stage",
                                     m->stage, "epoch", (json_int_t)m->epoch),
                           "TRACE", body_p);
}

pl_status_t pl_msg_trace_ref_decode(const json_t *body, pl_msg_trace_ref_t *out)
{
    int64_t job, stage, epoch = 0;
    pl_status_t st;
    if ((st = pl_json_int(body, "job", 1, UINT32_MAX, &job)) ||
        (st = pl_json_int(body, "stage", 0, PL_MSG_MAX_STAGES - 1, &stage)) ||
        (st = pl_json_int_opt(body, "epoch", 0, UINT32_MAX, &epoch)))
        return st;
    *out =
        (pl_msg_trace_ref_t){.job = (uint32_t)job, .stage = (int)stage, .epoch = (uint32_t)epoch};
    return PL_OK;
}

pl_status_t pl_msg_traced_encode(const pl_msg_traced_t *m, json_t **body_p)
{
    static const pl_msg_trace_t empty; /* a message not yet filled carries an empty trace */
    json_t *tr;
    pl_status_t st;
    if ((st = pl_msg_trace_encode(m->trace ? m->trace : &empty, &tr)))
        return st;
    return pl_msg_int_done(json_pack("{s:I, s:i, s:I, s:o}", "job", (json_int_t)m->job, "stage",
                                     m->stage, "epoch", (json_int_t)m->epoch, "trace", tr),
                           "TRACED", body_p);
}

pl_status_t pl_msg_traced_decode(const json_t *body, pl_msg_traced_t *out)
{
    int64_t job, stage, epoch;
    pl_msg_trace_t *tr;
    pl_status_t st;
    if ((st = pl_json_int(body, "job", 1, UINT32_MAX, &job)) ||
        (st = pl_json_int(body, "stage", 0, PL_MSG_MAX_STAGES - 1, &stage)) ||
        (st = pl_json_int(body, "epoch", 1, UINT32_MAX, &epoch)) ||
        (st = pl_msg_trace_decode(json_object_get(body, "trace"), &tr)))
        return st;
    *out = (pl_msg_traced_t){
        .job = (uint32_t)job, .stage = (int)stage, .epoch = (uint32_t)epoch, .trace = tr};
    return PL_OK;
}

pl_status_t pl_msg_trace_reply_encode(const pl_msg_trace_reply_t *m, json_t **body_p)
{
    json_t *tr = NULL;
    pl_status_t st;
    if (m->trace && (st = pl_msg_trace_encode(m->trace, &tr)))
        return st;
    return pl_msg_int_done(json_pack("{s:I, s:i, s:i, s:s, s:s, s:s, s:i, s:i, s:o?}", "job",
                                     (json_int_t)m->job, "stage", m->stage, "n_stages", m->n_stages,
                                     "state", m->state, "node", m->node, "device", m->device,
                                     "first", m->first, "last", m->last, "trace", tr),
                           "TRACE reply", body_p);
}

pl_status_t pl_msg_trace_reply_decode(const json_t *body, pl_msg_trace_reply_t *out)
{
    pl_msg_trace_reply_t m = {0};
    int64_t job, stage, n, first, last;
    pl_status_t st;
    if (!json_is_object(body))
        return pl_error(PL_ERR_INVALID, "TRACE reply: expected an object");
    if ((st = pl_json_int(body, "job", 1, UINT32_MAX, &job)) ||
        (st = pl_json_int(body, "n_stages", 1, PL_MSG_MAX_STAGES, &n)) ||
        (st = pl_json_int(body, "stage", 0, n - 1, &stage)) ||
        (st = pl_msg_int_name(body, "state", m.state, sizeof(m.state) - 1)) ||
        (st = pl_msg_int_name(body, "node", m.node, sizeof(m.node) - 1)) ||
        (st = pl_msg_int_name(body, "device", m.device, sizeof(m.device) - 1)) ||
        (st = pl_json_int(body, "first", 0, INT32_MAX, &first)) ||
        (st = pl_json_int(body, "last", first, INT32_MAX, &last)))
        return pl_error_prefix(st, "TRACE reply: ");
    const json_t *tr = json_object_get(body, "trace");
    if (tr && !json_is_null(tr) && (st = pl_msg_trace_decode(tr, &m.trace)))
        return pl_error_prefix(st, "TRACE reply: ");
    m.job = (uint32_t)job;
    m.stage = (int)stage;
    m.n_stages = (int)n;
    m.first = (int)first;
    m.last = (int)last;
    *out = m;
    return PL_OK;
}

void pl_msg_trace_reply_clear(pl_msg_trace_reply_t *m)
{
    pl_msg_trace_free(&m->trace);
    memset(m, 0, sizeof(*m));
}
