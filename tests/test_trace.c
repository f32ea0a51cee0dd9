/* The trace ring (bounds, wrap, drop counts, export on the wall clock), the trace clock's
 * correction against the coordinator's, and the trace codecs (round trips, every refused field). */
#include "common/util.h"
#include "pipeline/trace.h"
#include "transport/msg.h"

#include <criterion/criterion.h>
#include <string.h>
#include <time.h>

static int64_t s_wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t s_abs(int64_t v)
{
    return v < 0 ? -v : v;
}

Test(trace, ring_capacity_is_bounded)
{
    pl_trace_t *tr = (pl_trace_t *)0x1;
    cr_assert_eq(pl_trace_new(0, &tr), PL_ERR_INVALID);
    cr_assert_eq(pl_trace_new(PL_TRACE_MAX_EVENTS + 1, &tr), PL_ERR_INVALID);
    cr_assert(strstr(pl_error_msg(), "capacity"), "%s", pl_error_msg());
    cr_assert_eq(tr, (pl_trace_t *)0x1, "output set on error");
    cr_assert_eq(pl_trace_new(PL_TRACE_MAX_EVENTS, &tr), PL_OK);
    pl_act_hdr_t h = {.kind = PL_ACT_HIDDEN};
    for (int i = 0; i < 3 * PL_TRACE_MAX_EVENTS; i++)
        pl_trace_add(tr, PL_TRACE_COMPUTE, &h, i, i + 0.5);
    cr_assert_eq(pl_trace_count(tr), PL_TRACE_MAX_EVENTS);
    cr_assert_eq(pl_trace_recorded(tr), 3 * PL_TRACE_MAX_EVENTS);
    cr_assert_eq(pl_trace_dropped(tr), 2 * PL_TRACE_MAX_EVENTS);
    pl_trace_destroy(&tr);
    cr_assert_null(tr);
    pl_trace_destroy(&tr); /* safe twice */
    pl_trace_add(NULL, PL_TRACE_SEND, &h, 0, 1); /* no ring: the job does not trace */
}

Test(trace, ring_wraps_keeping_the_newest_in_order)
{
    pl_trace_t *tr;
    pl_msg_trace_t *out;
    cr_assert_eq(pl_trace_new(4, &tr), PL_OK);
    const pl_trace_kind_t kinds[3] = {PL_TRACE_RECV, PL_TRACE_COMPUTE, PL_TRACE_SEND};
    for (int i = 0; i < 10; i++) {
        pl_act_hdr_t h = {.kind = i % 2 ? PL_ACT_TOKENS : PL_ACT_HIDDEN, .mb = (uint32_t)i,
                          .step = (uint32_t)(2 * i)};
        double t0 = 100.0 + 0.010 * i; /* 10 ms apart, 5 ms long */
        pl_trace_add(tr, kinds[i % 3], &h, t0, t0 + 0.005);
        cr_assert_eq(pl_trace_count(tr), i < 4 ? i + 1 : 4);
        cr_assert_eq(pl_trace_dropped(tr), i < 4 ? 0 : (uint64_t)(i - 3));
    }
    cr_assert_eq(pl_trace_export(tr, &out), PL_OK);
    cr_assert_eq(out->n_events, 4);
    cr_assert_eq(out->recorded, 10);
    for (int k = 0; k < 4; k++) {
        const pl_msg_trace_event_t *e = &out->events[k];
        int i = 6 + k; /* the oldest six were dropped */
        cr_assert_eq(e->mb, (uint32_t)i);
        cr_assert_eq(e->step, (uint32_t)(2 * i));
        cr_assert_eq(e->kind, kinds[i % 3]);
        cr_assert_eq(e->act, i % 2 ? PL_ACT_TOKENS : PL_ACT_HIDDEN);
        cr_assert(s_abs(e->t_ns - 10000000LL * k) <= 2, "event %d at %lld ns", k,
                  (long long)e->t_ns);
        cr_assert(s_abs(e->dur_ns - 5000000) <= 2, "event %d lasts %lld ns", k,
                  (long long)e->dur_ns);
    }
    pl_msg_trace_free(&out);
    cr_assert_null(out);
    pl_trace_destroy(&tr);
}

Test(trace, export_puts_events_on_the_wall_clock)
{
    pl_trace_t *tr;
    pl_msg_trace_t *out;
    cr_assert_eq(pl_trace_new(8, &tr), PL_OK);
    pl_act_hdr_t h = {.kind = PL_ACT_HIDDEN, .mb = 1, .step = 2};
    int64_t before = s_wall();
    double t0 = pl_now();
    int64_t after = s_wall();
    pl_trace_add(tr, PL_TRACE_COMPUTE, &h, t0, t0 + 0.001);
    cr_assert_eq(pl_trace_export(tr, &out), PL_OK);
    /* no WELCOME answered in this process: the correction is 0, the time the wall clock's */
    cr_assert(out->t0_ns >= before - 1000000 && out->t0_ns <= after + 1000000,
              "t0 %lld not within [%lld, %lld] +- 1 ms", (long long)out->t0_ns,
              (long long)before, (long long)after);
    cr_assert_eq(out->events[0].t_ns, 0);
    pl_msg_trace_free(&out);
    /* an empty ring exports an empty trace */
    pl_trace_destroy(&tr);
    cr_assert_eq(pl_trace_new(8, &tr), PL_OK);
    cr_assert_eq(pl_trace_export(tr, &out), PL_OK);
    cr_assert_eq(out->n_events, 0);
    cr_assert_eq(out->recorded, 0);
    pl_msg_trace_free(&out);
    pl_trace_destroy(&tr);
}

Test(trace, clock_correction_is_the_smallest_the_round_trip_allows)
{
    /* request at 1000, answer at 3000: the coordinator stamped somewhere in between */
    cr_assert_eq(pl_trace_clock_correction(1000, 2000, 3000), 0);
    cr_assert_eq(pl_trace_clock_correction(1000, 1000, 3000), 0);
    cr_assert_eq(pl_trace_clock_correction(1000, 3000, 3000), 0);
    /* coordinator 1 s ahead: the skew is 1 s +- 1000 ns, the nearest to 0 is 1 s - 1000 */
    cr_assert_eq(pl_trace_clock_correction(1000, 2000 + 1000000000, 3000), 999999000);
    cr_assert_eq(pl_trace_clock_correction(1000, 2000 - 50000000, 3000), -49999000);
    cr_assert_eq(pl_trace_clock_correction(1000, 3001, 3000), 1);
    cr_assert_eq(pl_trace_clock_correction(3000, 2000, 1000), 0); /* the clock stepped back */
}

Test(trace, clock_keeps_the_tightest_round_trip)
{
    cr_assert_eq(pl_trace_clock_correction_ns(), 0);
    pl_trace_clock_answer(s_wall()); /* no request in flight: ignored */
    cr_assert_eq(pl_trace_clock_correction_ns(), 0);
    pl_trace_clock_sent();
    pl_trace_clock_answer(0); /* an old coordinator without a clock: ignored */
    cr_assert_eq(pl_trace_clock_correction_ns(), 0);

    pl_trace_clock_sent();
    int64_t coord = s_wall() + 5000000000LL; /* 5 s ahead */
    pl_trace_clock_answer(coord);
    int64_t c = pl_trace_clock_correction_ns();
    cr_assert(c > 4990000000LL && c <= 5000000000LL, "correction %lld", (long long)c);

    /* a slower round trip (50 ms) does not replace the tight one */
    pl_trace_clock_sent();
    struct timespec d = {0, 50000000};
    nanosleep(&d, NULL);
    pl_trace_clock_answer(s_wall() + 9000000000LL);
    cr_assert_eq(pl_trace_clock_correction_ns(), c);

    /* the export carries it */
    pl_trace_t *tr;
    pl_msg_trace_t *out;
    pl_act_hdr_t h = {.kind = PL_ACT_HIDDEN};
    cr_assert_eq(pl_trace_new(2, &tr), PL_OK);
    double t = pl_now();
    int64_t wall = s_wall();
    pl_trace_add(tr, PL_TRACE_RECV, &h, t, t);
    cr_assert_eq(pl_trace_export(tr, &out), PL_OK);
    cr_assert(s_abs(out->t0_ns - (wall + c)) < 1000000, "t0 %lld, want %lld", (long long)out->t0_ns,
              (long long)(wall + c));
    pl_msg_trace_free(&out);
    pl_trace_destroy(&tr);
}

/* ---- codecs ---- */

static pl_msg_trace_t *s_sample(int n)
{
    pl_msg_trace_t *t = calloc(1, sizeof(*t));
    t->events = calloc((size_t)n, sizeof(*t->events));
    t->n_events = n;
    t->recorded = n + 7;
    t->t0_ns = 1764590000123456789LL; /* a 2025 wall time in ns: beyond a double's precision */
    for (int i = 0; i < n; i++)
        t->events[i] = (pl_msg_trace_event_t){.kind = (uint8_t)(i % 3), .act = (uint8_t)(1 + i % 3),
                                              .mb = (uint32_t)(i % 5), .step = (uint32_t)i,
                                              .t_ns = 1000LL * i, .dur_ns = 999 - i};
    return t;
}

static void s_same_trace(const pl_msg_trace_t *a, const pl_msg_trace_t *b)
{
    cr_assert_eq(a->t0_ns, b->t0_ns);
    cr_assert_eq(a->recorded, b->recorded);
    cr_assert_eq(a->n_events, b->n_events);
    for (int i = 0; i < a->n_events; i++) {
        const pl_msg_trace_event_t *x = &a->events[i], *y = &b->events[i];
        cr_assert(x->kind == y->kind && x->act == y->act && x->mb == y->mb &&
                      x->step == y->step && x->t_ns == y->t_ns && x->dur_ns == y->dur_ns,
                  "event %d differs", i);
    }
}

Test(trace, codec_round_trips_in_done_and_the_trace_reply)
{
    pl_msg_t m, back;
    json_t *body;
    pl_msg_init(&m, PL_MSG_DONE);
    m.done = (pl_msg_done_t){.job = 7, .stage = 2, .epoch = 9, .trace = s_sample(50)};
    cr_assert_eq(pl_msg_encode(&m, &body), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(pl_msg_decode(PL_MSG_DONE, body, &back), PL_OK, "%s", pl_error_msg());
    cr_assert_not_null(back.done.trace);
    s_same_trace(m.done.trace, back.done.trace);
    json_decref(body);
    pl_msg_clear(&back);

    pl_msg_trace_reply_t r = {.job = 7, .stage = 1, .n_stages = 3, .state = "done",
                              .node = "node1", .device = "cpu:0", .first = 3, .last = 5,
                              .trace = m.done.trace},
                         rb;
    cr_assert_eq(pl_msg_trace_reply_encode(&r, &body), PL_OK);
    cr_assert_eq(pl_msg_trace_reply_decode(body, &rb), PL_OK, "%s", pl_error_msg());
    cr_assert(rb.job == 7 && rb.stage == 1 && rb.n_stages == 3 && rb.first == 3 && rb.last == 5);
    cr_assert_str_eq(rb.node, "node1");
    cr_assert_str_eq(rb.device, "cpu:0");
    cr_assert_str_eq(rb.state, "done");
    s_same_trace(r.trace, rb.trace);
    json_decref(body);
    pl_msg_trace_reply_clear(&rb);
    pl_msg_clear(&m);

    r.trace = NULL; /* a stage that has not finished */
    cr_assert_eq(pl_msg_trace_reply_encode(&r, &body), PL_OK);
    cr_assert_eq(pl_msg_trace_reply_decode(body, &rb), PL_OK, "%s", pl_error_msg());
    cr_assert_null(rb.trace);
    json_decref(body);

    pl_msg_init(&m, PL_MSG_TRACE);
    m.trace_ref = (pl_msg_trace_ref_t){.job = 12, .stage = 63, .epoch = 4};
    cr_assert_eq(pl_msg_encode(&m, &body), PL_OK);
    cr_assert_eq(pl_msg_decode(PL_MSG_TRACE, body, &back), PL_OK, "%s", pl_error_msg());
    cr_assert(back.trace_ref.job == 12 && back.trace_ref.stage == 63 && back.trace_ref.epoch == 4);
    json_decref(body);

    /* a running stage's answer to the coordinator's TRACE */
    pl_msg_init(&m, PL_MSG_TRACED);
    m.traced = (pl_msg_traced_t){.job = 3, .stage = 1, .epoch = 8, .trace = s_sample(9)};
    cr_assert_eq(pl_msg_encode(&m, &body), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(pl_msg_decode(PL_MSG_TRACED, body, &back), PL_OK, "%s", pl_error_msg());
    cr_assert(back.traced.job == 3 && back.traced.stage == 1 && back.traced.epoch == 8);
    s_same_trace(m.traced.trace, back.traced.trace);
    json_decref(body);
    pl_msg_clear(&back);
    pl_msg_clear(&m);
    static const char *const bad[][2] = {
        {"{\"job\": 3, \"stage\": 1, \"epoch\": 8}", "trace"},
        {"{\"job\": 3, \"stage\": 1, \"epoch\": 0, \"trace\": {\"t0_ns\": 1, \"recorded\": 0, "
         "\"events\": []}}",
         "epoch"},
    };
    for (int i = 0; i < 2; i++) {
        body = json_loads(bad[i][0], 0, NULL);
        cr_assert_not_null(body);
        cr_assert_neq(pl_msg_decode(PL_MSG_TRACED, body, &back), PL_OK, "accepted %s", bad[i][0]);
        cr_assert(strstr(pl_error_msg(), bad[i][1]), "%s", pl_error_msg());
        json_decref(body);
    }
}

/* body (a trace object) is refused with a message naming `what`; nothing is returned */
static void s_refused(const char *text, const char *what)
{
    json_error_t je;
    json_t *body = json_loads(text, 0, &je);
    cr_assert_not_null(body, "bad test JSON %s: %s", text, je.text);
    pl_msg_trace_t *t = (pl_msg_trace_t *)0x1;
    cr_assert_neq(pl_msg_trace_decode(body, &t), PL_OK, "accepted %s", text);
    cr_assert_eq(t, (pl_msg_trace_t *)0x1, "output set on error");
    cr_assert(strstr(pl_error_msg(), what), "'%s' for %s, want '%s'", pl_error_msg(), text, what);
    json_decref(body);
}

Test(trace, codec_refuses_every_bad_field)
{
#define T(ev) "{\"t0_ns\": 5, \"recorded\": 9, \"events\": [" ev "]}"
    s_refused("[]", "object");
    s_refused("{\"recorded\": 1, \"events\": []}", "t0_ns");
    s_refused("{\"t0_ns\": -1, \"recorded\": 1, \"events\": []}", "t0_ns");
    s_refused("{\"t0_ns\": 1, \"events\": []}", "recorded");
    s_refused("{\"t0_ns\": 1, \"recorded\": 0}", "events");
    s_refused("{\"t0_ns\": 1, \"recorded\": 1, \"events\": {}}", "events");
    s_refused("{\"t0_ns\": 1, \"recorded\": 1, \"events\": [[1,1,0,0,0,1], [1,1,0,0,2,1]]}",
              "recorded");
    s_refused(T("5"), "event 0");
    s_refused(T("[1, 1, 0, 0, 0]"), "event 0");
    s_refused(T("[1, 1, 0, 0, 0, 1, 7]"), "event 0");
    s_refused(T("[3, 1, 0, 0, 0, 1]"), "kind");
    s_refused(T("[-1, 1, 0, 0, 0, 1]"), "kind");
    s_refused(T("[1.0, 1, 0, 0, 0, 1]"), "kind");
    s_refused(T("[1, 4, 0, 0, 0, 1]"), "act");
    s_refused(T("[1, 1, 4096, 0, 0, 1]"), "mb");
    s_refused(T("[1, 1, 0, 65537, 0, 1]"), "step");
    s_refused(T("[1, 1, 0, 0, -5, 1]"), "t_ns");
    s_refused(T("[1, 1, 0, 0, 9007199254740993, 1]"), "t_ns");
    s_refused(T("[1, 1, 0, 0, 0, -1]"), "dur_ns");
    s_refused(T("[1, 1, 0, 0, 9007199254740000, 9007199254740000]"), "span");
    s_refused(T("[1, 1, 0, 0, 100, 1], [1, 1, 0, 0, 99, 1]"), "event 1: starts before");
    s_refused(T("[1, 1, 0, 0, 0, 1], \"x\""), "event 1");
#undef T
    /* more events than a ring holds */
    json_t *ev = json_array();
    for (int i = 0; i <= PL_TRACE_MAX_EVENTS; i++)
        json_array_append_new(ev, json_pack("[i, i, i, i, i, i]", 1, 1, 0, 0, i, 1));
    json_t *body = json_pack("{s:i, s:i, s:o}", "t0_ns", 1, "recorded", PL_TRACE_MAX_EVENTS + 1,
                             "events", ev);
    char *text = json_dumps(body, 0);
    s_refused(text, "events");
    free(text);
    json_decref(body);
}

Test(trace, reply_and_query_refuse_bad_fields)
{
    static const char *const bad[][2] = {
        {"{\"job\": 0, \"stage\": 0}", "job"},
        {"{\"job\": 1, \"stage\": 64}", "stage"},
        {"{\"job\": 1}", "stage"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        json_t *b = json_loads(bad[i][0], 0, NULL);
        pl_msg_t m;
        cr_assert_neq(pl_msg_decode(PL_MSG_TRACE, b, &m), PL_OK, "accepted %s", bad[i][0]);
        cr_assert(strstr(pl_error_msg(), bad[i][1]), "%s", pl_error_msg());
        json_decref(b);
    }
#define R(x) "{\"job\": 1, \"n_stages\": 2, \"state\": \"done\", " x "}"
    static const char *const rbad[][2] = {
        {R("\"stage\": 2, \"node\": \"a\", \"device\": \"d\", \"first\": 0, \"last\": 1"), "stage"},
        {R("\"stage\": 1, \"node\": \"\", \"device\": \"d\", \"first\": 0, \"last\": 1"), "node"},
        {R("\"stage\": 1, \"node\": \"a\", \"first\": 0, \"last\": 1"), "device"},
        {R("\"stage\": 1, \"node\": \"a\", \"device\": \"d\", \"first\": 2, \"last\": 1"), "last"},
        {R("\"stage\": 1, \"node\": \"a\", \"device\": \"d\", \"first\": 0, \"last\": 1, "
           "\"trace\": 5"),
         "trace"},
        {"{\"job\": 1, \"n_stages\": 65, \"stage\": 0}", "n_stages"},
    };
#undef R
    for (size_t i = 0; i < sizeof(rbad) / sizeof(rbad[0]); i++) {
        json_t *b = json_loads(rbad[i][0], 0, NULL);
        cr_assert_not_null(b, "%s", rbad[i][0]);
        pl_msg_trace_reply_t r;
        memset(&r, 0x5a, sizeof(r));
        cr_assert_neq(pl_msg_trace_reply_decode(b, &r), PL_OK, "accepted %s", rbad[i][0]);
        cr_assert(strstr(pl_error_msg(), rbad[i][1]), "%s: %s", rbad[i][0], pl_error_msg());
        cr_assert_eq(((unsigned char *)&r)[0], 0x5a, "output set on error");
        json_decref(b);
    }
}
