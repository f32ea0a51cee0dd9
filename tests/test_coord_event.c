/* A job's bounded event list (daemon/coord_event.c): recorded in order, the first kept and the
 * oldest after it dropped when full, and back from its stored JSON with every field checked. */
#include "daemon/coord_int.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

Test(coord_event, bounded_keeps_first_and_latest)
{
    pl_coord_job_t *j = calloc(1, sizeof(*j));
    pl_coord_event(j, "submitted", "by %s", "alice");
    for (int i = 0; i < PL_COORD_MAX_EVENTS + 10; i++)
        pl_coord_event(j, "ready", "stage %d", i);
    cr_assert_eq(j->n_events, PL_COORD_MAX_EVENTS);
    cr_assert_eq(j->events_dropped, 11);
    cr_assert_str_eq(j->events[0].what, "submitted");
    cr_assert_str_eq(j->events[0].detail, "by alice");
    char last[32];
    snprintf(last, sizeof(last), "stage %d", PL_COORD_MAX_EVENTS + 9);
    cr_assert_str_eq(j->events[PL_COORD_MAX_EVENTS - 1].detail, last);
    for (int i = 1; i < j->n_events; i++)
        cr_assert_geq(j->events[i].at, j->events[i - 1].at);

    json_t *arr = pl_coord_events_json(j);
    cr_assert_eq(json_array_size(arr), PL_COORD_MAX_EVENTS);
    pl_coord_job_t *k = calloc(1, sizeof(*k));
    cr_assert_eq(pl_coord_events_from_json(arr, k), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(k->n_events, j->n_events);
    cr_assert_eq(memcmp(k->events, j->events, sizeof(j->events)), 0);
    json_decref(arr);
    free(j);
    free(k);
}

static void s_bad(const char *text, const char *what)
{
    pl_coord_job_t *j = calloc(1, sizeof(*j));
    pl_coord_event(j, "submitted", "x");
    json_t *v = json_loads(text, 0, NULL);
    cr_assert_not_null(v, "%s", text);
    cr_assert_neq(pl_coord_events_from_json(v, j), PL_OK, "%s should fail", text);
    cr_assert(strstr(pl_error_msg(), what), "'%s' should name '%s'", pl_error_msg(), what);
    cr_assert_eq(j->n_events, 1, "events untouched on error");
    json_decref(v);
    free(j);
}

Test(coord_event, stored_events_checked)
{
    s_bad("{}", "events");
    s_bad("[1]", "events[0]");
    s_bad("[{\"at\": -1, \"what\": \"a\", \"detail\": \"\"}]", "at");
    s_bad("[{\"at\": 1, \"what\": 3, \"detail\": \"\"}]", "what");
    s_bad("[{\"at\": 1, \"what\": \"aaaaaaaaaaaaaaaaaaaa\", \"detail\": \"\"}]", "what");
    s_bad("[{\"at\": 1, \"what\": \"a\"}]", "detail");
}
