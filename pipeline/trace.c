/* The trace ring: fixed-size, filled by the executor thread as it runs, read out once (with
 * DONE) as the wire's trace on the coordinator's clock. */
#include "pipeline/trace.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

typedef struct {
    int64_t t0, t1; /* monotonic ns */
    uint32_t mb, step;
    uint8_t kind, act;
} s_event_t;

struct pl_trace {
    s_event_t *ev;
    int cap;
    uint64_t n;         /* recorded in all; the newest is at (n - 1) % cap */
    int64_t wall_ns;    /* wall clock minus monotonic clock, measured at creation */
    pthread_mutex_t mu; /* the owner records while another thread may export (running job) */
};

static int64_t s_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Wall minus monotonic from the tightest of a few brackets: a preemption between the two clock
 * reads would otherwise shift every event of the stage. */
static int64_t s_wall_offset(void)
{
    int64_t best = 0, width = INT64_MAX;
    for (int i = 0; i < 8; i++) {
        int64_t a = s_ns(CLOCK_MONOTONIC), w = s_ns(CLOCK_REALTIME), b = s_ns(CLOCK_MONOTONIC);
        if (b - a < width) {
            width = b - a;
            best = w - (a + (b - a) / 2);
        }
    }
    return best;
}

pl_status_t pl_trace_new(int capacity, pl_trace_t **tr_p)
{
    if (capacity < 1 || capacity > PL_TRACE_MAX_EVENTS)
        return pl_error(PL_ERR_INVALID, "trace: capacity %d not in [1, %d]", capacity,
                        PL_TRACE_MAX_EVENTS);
    pl_trace_t *tr = calloc(1, sizeof(*tr));
    if (!tr || !(tr->ev = malloc((size_t)capacity * sizeof(*tr->ev)))) {
        free(tr);
        return pl_error(PL_ERR_NOMEM, "trace: out of memory");
    }
    tr->cap = capacity;
    tr->wall_ns = s_wall_offset();
    pthread_mutex_init(&tr->mu, NULL);
    *tr_p = tr;
    return PL_OK;
}

void pl_trace_destroy(pl_trace_t **tr_p)
{
    if (!*tr_p)
        return;
    pthread_mutex_destroy(&(*tr_p)->mu);
    free((*tr_p)->ev);
    free(*tr_p);
    *tr_p = NULL;
}

void pl_trace_add(pl_trace_t *tr, pl_trace_kind_t kind, const pl_act_hdr_t *hdr, double t0,
                  double t1)
{
    if (!tr)
        return;
    pthread_mutex_lock(&tr->mu); /* uncontended but for an export: tens of ns */
    s_event_t *e = &tr->ev[tr->n % (uint64_t)tr->cap];
    e->t0 = llround(t0 * 1e9);
    e->t1 = llround(t1 * 1e9);
    if (e->t1 < e->t0)
        e->t1 = e->t0;
    e->mb = hdr->mb;
    e->step = hdr->step;
    e->kind = (uint8_t)kind;
    e->act = (uint8_t)hdr->kind;
    tr->n++;
    pthread_mutex_unlock(&tr->mu);
}

uint64_t pl_trace_recorded(const pl_trace_t *tr)
{
    return tr->n;
}

int pl_trace_count(const pl_trace_t *tr)
{
    return tr->n < (uint64_t)tr->cap ? (int)tr->n : tr->cap;
}

uint64_t pl_trace_dropped(const pl_trace_t *tr)
{
    return tr->n - (uint64_t)pl_trace_count(tr);
}

pl_status_t pl_trace_export(pl_trace_t *tr, pl_msg_trace_t **out_p)
{
    pl_msg_trace_t *t = calloc(1, sizeof(*t));
    if (!t || !(t->events = malloc((size_t)tr->cap * sizeof(*t->events)))) {
        free(t);
        return pl_error(PL_ERR_NOMEM, "trace: out of memory");
    }
    pthread_mutex_lock(&tr->mu);
    int n = pl_trace_count(tr);
    uint64_t first = tr->n - (uint64_t)n;
    int64_t zero = n ? tr->ev[first % (uint64_t)tr->cap].t0 : 0, prev = 0;
    for (int i = 0; i < n; i++) {
        const s_event_t *e = &tr->ev[(first + (uint64_t)i) % (uint64_t)tr->cap];
        int64_t at = e->t0 - zero;
        at = at < prev ? prev : at; /* a start is never before the one ahead (one thread) */
        t->events[i] = (pl_msg_trace_event_t){.kind = e->kind,
                                              .act = e->act,
                                              .mb = e->mb,
                                              .step = e->step,
                                              .t_ns = at,
                                              .dur_ns = e->t1 - e->t0};
        prev = at;
    }
    t->t0_ns = zero + tr->wall_ns + pl_trace_clock_correction_ns();
    t->recorded = (int64_t)tr->n;
    t->n_events = n;
    pthread_mutex_unlock(&tr->mu);
    *out_p = t;
    return PL_OK;
}
