/* Each job's events (submitted, planned, loading, each stage ready / done, running, re-queued,
 * the end), bounded: the first and the latest PL_COORD_MAX_EVENTS - 1 are kept. */
#include "common/json.h"
#include "daemon/coord_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static double s_wall(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

void pl_coord_event(pl_coord_job_t *j, const char *what, const char *fmt, ...)
{
    if (j->n_events == PL_COORD_MAX_EVENTS) { /* keep the first (submitted), drop the next */
        memmove(&j->events[1], &j->events[2], (PL_COORD_MAX_EVENTS - 2) * sizeof(j->events[0]));
        j->n_events--;
        j->events_dropped++;
    }
    pl_coord_event_t *e = &j->events[j->n_events++];
    e->at = s_wall();
    snprintf(e->what, sizeof(e->what), "%s", what);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->detail, sizeof(e->detail), fmt, ap);
    va_end(ap);
}

json_t *pl_coord_events_json(const pl_coord_job_t *j)
{
    json_t *arr = json_array();
    for (int i = 0; arr && i < j->n_events; i++) {
        const pl_coord_event_t *e = &j->events[i];
        if (json_array_append_new(arr, json_pack("{s:f, s:s, s:s}", "at", e->at, "what", e->what,
                                                 "detail", e->detail))) {
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}

pl_status_t pl_coord_events_from_json(const json_t *arr, pl_coord_job_t *j)
{
    static pl_coord_event_t ev[PL_COORD_MAX_EVENTS]; /* one thread owns the coordinator */
    pl_status_t st;
    if (!json_is_array(arr) || json_array_size(arr) > PL_COORD_MAX_EVENTS)
        return pl_error(PL_ERR_INVALID, "field 'events': expected an array of at most %d",
                        PL_COORD_MAX_EVENTS);
    size_t n = json_array_size(arr);
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(arr, i);
        if (!json_is_object(e))
            return pl_error(PL_ERR_INVALID, "field 'events[%zu]': expected an object", i);
        if ((st = pl_json_num(e, "at", 0, 1e11, &ev[i].at)) ||
            (st = pl_json_str(e, "what", ev[i].what, sizeof(ev[i].what) - 1)) ||
            (st = pl_json_str(e, "detail", ev[i].detail, sizeof(ev[i].detail) - 1)))
            return pl_error_prefix(st, "events[%zu]: ", i);
    }
    memcpy(j->events, ev, n * sizeof(ev[0]));
    j->n_events = (int)n;
    return PL_OK;
}
