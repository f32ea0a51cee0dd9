/* A job's trace as Chrome Trace Event JSON (the format Perfetto and chrome://tracing open): a
 * process per stage, "X" slices, "s"/"f" flow arrows from each send to the compute it feeds. */
#include "tools/pipectl/trace.h"

#include <stdio.h>
#include <string.h>

static const char *s_msg(uint8_t act)
{
    return act == 1 ? "hidden" : act == 2 ? "tokens" : act == 3 ? "stop" : "?";
}

/* Append v (taken) to arr; false when either is missing (out of memory). */
static bool s_push(json_t *arr, json_t *v)
{
    return v && !json_array_append_new(arr, v);
}

static json_t *s_meta(const char *what, int pid, json_t *args)
{
    return json_pack("{s:s, s:s, s:i, s:i, s:o}", "ph", "M", "name", what, "pid", pid, "tid", 0,
                     "args", args);
}

static double s_us(int64_t ns)
{
    return (double)ns / 1000.0;
}

/* The slice of event i of stage s. */
static json_t *s_slice(const pl_pipectl_trace_t *t, int s, int i)
{
    const pl_msg_trace_event_t *e = &t->st[s].trace->events[i];
    int part = t->part[s][i];
    char name[64];
    const char *cat = e->kind == PL_TRACE_COMPUTE ? "compute"
                      : e->kind == PL_TRACE_RECV  ? "recv"
                                                  : "send";
    if (e->kind == PL_TRACE_COMPUTE && e->step == 0)
        snprintf(name, sizeof(name), "mb %u prefill%s", e->mb, part ? " chunk" : "");
    else if (e->kind == PL_TRACE_COMPUTE)
        snprintf(name, sizeof(name), "mb %u step %u", e->mb, e->step);
    else
        snprintf(name, sizeof(name), "%s %s", e->kind == PL_TRACE_RECV ? "recv wait" : "send",
                 s_msg(e->act));
    return json_pack("{s:s, s:s, s:s, s:f, s:f, s:i, s:i, s:{s:I, s:I, s:i, s:s}}", "name", name,
                     "cat", cat, "ph", "X", "ts", s_us(pl_pipectl_trace_start(t, s, i)), "dur",
                     s_us(e->dur_ns), "pid", s, "tid", 0, "args", "mb", (json_int_t)e->mb, "step",
                     (json_int_t)e->step, "part", part, "message", s_msg(e->act));
}

/* The compute a send of stage s feeds: the next stage's of the same (mb, step, part) for
 * activations; stage 0's next step for the last stage's sampled tokens; none otherwise. */
static int s_target(const pl_pipectl_trace_t *t, int s, int i, int *to_p)
{
    const pl_msg_trace_event_t *e = &t->st[s].trace->events[i];
    int n = t->n_stages;
    if (n < 2)
        return -1;
    if (e->act == 1 && s + 1 < n) {
        *to_p = s + 1;
        return pl_pipectl_trace_find_compute(t, s + 1, e->mb, e->step, t->part[s][i]);
    }
    if (e->act == 2 && s == n - 1) {
        *to_p = 0;
        return pl_pipectl_trace_find_compute(t, 0, e->mb, e->step + 1, 0);
    }
    return -1;
}

/* Flow arrows bind to the slice enclosing their time: the middle of each end's slice. */
static bool s_flows(const pl_pipectl_trace_t *t, json_t *ev, int64_t *id)
{
    for (int s = 0; s < t->n_stages; s++) {
        const pl_msg_trace_t *tr = t->st[s].trace;
        for (int i = 0; tr && i < tr->n_events; i++) {
            int to = -1;
            if (tr->events[i].kind != PL_TRACE_SEND)
                continue;
            int j = s_target(t, s, i, &to);
            if (j < 0)
                continue;
            const char *name = tr->events[i].act == 1 ? "activations" : "tokens";
            double a = s_us(pl_pipectl_trace_start(t, s, i) + tr->events[i].dur_ns / 2);
            double b =
                s_us(pl_pipectl_trace_start(t, to, j) + t->st[to].trace->events[j].dur_ns / 2);
            ++*id;
            if (!s_push(ev, json_pack("{s:s, s:s, s:s, s:I, s:f, s:i, s:i}", "ph", "s", "name",
                                      name, "cat", "flow", "id", (json_int_t)*id, "ts", a, "pid", s,
                                      "tid", 0)) ||
                !s_push(ev, json_pack("{s:s, s:s, s:s, s:s, s:I, s:f, s:i, s:i}", "ph", "f", "bp",
                                      "e", "name", name, "cat", "flow", "id", (json_int_t)*id, "ts",
                                      b, "pid", to, "tid", 0)))
                return false;
        }
    }
    return true;
}

pl_status_t pl_pipectl_trace_chrome_build(const pl_pipectl_trace_t *t, json_t **out_p)
{
    json_t *ev = json_array(), *stages = json_array();
    int64_t flow_id = 0;
    bool ok = ev && stages;
    for (int s = 0; ok && s < t->n_stages; s++) {
        const pl_msg_trace_reply_t *r = &t->st[s];
        char name[160];
        snprintf(name, sizeof(name), "stage %d \xc2\xb7 %s \xc2\xb7 %s (layers %d-%d)", s, r->node,
                 r->device, r->first, r->last);
        ok =
            s_push(ev, s_meta("process_name", s, json_pack("{s:s}", "name", name))) &&
            s_push(ev, s_meta("process_sort_index", s, json_pack("{s:i}", "sort_index", s))) &&
            s_push(ev, s_meta("thread_name", s, json_pack("{s:s}", "name", "executor"))) &&
            s_push(stages,
                   json_pack("{s:i, s:s, s:s, s:i, s:i, s:I, s:I}", "stage", s, "node", r->node,
                             "device", r->device, "first", r->first, "last", r->last, "recorded",
                             (json_int_t)(r->trace ? r->trace->recorded : 0), "dropped",
                             (json_int_t)(r->trace ? r->trace->recorded - r->trace->n_events : 0)));
        for (int i = 0; ok && r->trace && i < r->trace->n_events; i++)
            ok = s_push(ev, s_slice(t, s, i));
    }
    ok = ok && s_flows(t, ev, &flow_id);
    json_t *doc = ok ? json_pack("{s:o, s:s, s:{s:I, s:s, s:I, s:o}}", "traceEvents", ev,
                                 "displayTimeUnit", "ms", "otherData", "job", (json_int_t)t->job,
                                 "state", t->st[0].state, "origin_ns", (json_int_t)t->origin_ns, "stages", stages)
                     : NULL;
    if (!doc) {
        if (!ok) {
            json_decref(ev);
            json_decref(stages);
        }
        return pl_error(PL_ERR_NOMEM, "trace: cannot build the JSON (out of memory)");
    }
    *out_p = doc;
    return PL_OK;
}
