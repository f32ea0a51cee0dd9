/* `pipectl trace`: a job's trace, one TRACE query per stage, indexed so that each send finds the
 * compute it feeds, then written as Chrome Trace JSON and/or an SVG timeline. */
#include "tools/pipectl/trace.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define S_ASK_US (200 * 1000) /* a running job's stages answer within this, on a live cluster */

static int s_fail(const char *fmt, const char *a)
{
    fprintf(stderr, "pipectl: trace: ");
    fprintf(stderr, fmt, a);
    fputc('\n', stderr);
    return 1;
}

/* qsort's comparator needs the events: one stage's at a time, on this thread only */
static const pl_msg_trace_event_t *s_sorting;

static int s_cmp(const void *a, const void *b)
{
    const pl_msg_trace_event_t *x = &s_sorting[*(const int *)a], *y = &s_sorting[*(const int *)b];
    if (x->kind != y->kind)
        return x->kind < y->kind ? -1 : 1;
    if (x->act != y->act)
        return x->act < y->act ? -1 : 1;
    if (x->mb != y->mb)
        return x->mb < y->mb ? -1 : 1;
    if (x->step != y->step)
        return x->step < y->step ? -1 : 1;
    if (x->t_ns != y->t_ns)
        return x->t_ns < y->t_ns ? -1 : 1;
    return *(const int *)a < *(const int *)b ? -1 : *(const int *)a > *(const int *)b;
}

static bool s_same(const pl_msg_trace_event_t *x, const pl_msg_trace_event_t *y)
{
    return x->kind == y->kind && x->act == y->act && x->mb == y->mb && x->step == y->step;
}

static int s_index(pl_pipectl_trace_t *t, int s)
{
    const pl_msg_trace_t *tr = t->st[s].trace;
    int n = tr->n_events;
    if (!(t->order[s] = malloc(((size_t)n + 1) * sizeof(int))) ||
        !(t->part[s] = malloc(((size_t)n + 1) * sizeof(int))))
        return s_fail("%s", "out of memory");
    for (int i = 0; i < n; i++)
        t->order[s][i] = i;
    s_sorting = tr->events;
    qsort(t->order[s], (size_t)n, sizeof(int), s_cmp);
    for (int k = 0; k < n; k++) {
        int i = t->order[s][k];
        bool run = k > 0 && s_same(&tr->events[t->order[s][k - 1]], &tr->events[i]);
        t->part[s][i] = run ? t->part[s][t->order[s][k - 1]] + 1 : 0;
    }
    for (int i = 0; i < n; i++) {
        int64_t a = tr->t0_ns + tr->events[i].t_ns, b = a + tr->events[i].dur_ns;
        if (a < t->origin_ns)
            t->origin_ns = a;
        if (b > t->end_ns)
            t->end_ns = b;
    }
    return 0;
}

static int s_fetch_once(pl_pipectl_t *c, uint32_t job, pl_pipectl_trace_t *t)
{
    memset(t, 0, sizeof(*t));
    t->job = job;
    t->origin_ns = INT64_MAX;
    t->end_ns = INT64_MIN;
    t->n_stages = 1;
    for (int s = 0; s < t->n_stages; s++) {
        pl_msg_t q;
        json_t *r;
        pl_msg_init(&q, PL_MSG_TRACE);
        q.trace_ref = (pl_msg_trace_ref_t){.job = job, .stage = s};
        if (pl_pipectl_call(c, &q, &r))
            return 1;
        pl_status_t st = pl_msg_trace_reply_decode(r, &t->st[s]);
        json_decref(r);
        if (st)
            return s_fail("bad answer: %s", pl_error_msg());
        if (t->st[s].job != job || t->st[s].stage != s ||
            (s > 0 && t->st[s].n_stages != t->n_stages))
            return s_fail("%s", "bad answer: another job's or stage's trace");
        t->n_stages = t->st[s].n_stages;
        if (t->st[s].trace && s_index(t, s))
            return 1;
    }
    if (t->origin_ns > t->end_ns)
        t->origin_ns = t->end_ns = 0;
    return 0;
}

/* A running job's stages each send their trace so far when asked (the coordinator asks them as
 * it answers): ask once, then again shortly for what they sent, until every stage has one. */
int pl_pipectl_trace_fetch(pl_pipectl_t *c, uint32_t job, pl_pipectl_trace_t *t)
{
    int rc = s_fetch_once(c, job, t);
    for (int round = 0; !rc && round < 8 && !strcmp(t->st[0].state, "running"); round++) {
        bool all = round > 0;
        for (int s = 0; all && s < t->n_stages; s++)
            all = t->st[s].trace != NULL;
        if (all)
            break;
        usleep(S_ASK_US);
        pl_pipectl_trace_clear(t);
        rc = s_fetch_once(c, job, t);
    }
    return rc;
}

void pl_pipectl_trace_clear(pl_pipectl_trace_t *t)
{
    for (int s = 0; s < PL_MSG_MAX_STAGES; s++) {
        pl_msg_trace_reply_clear(&t->st[s]);
        free(t->order[s]);
        free(t->part[s]);
    }
    memset(t, 0, sizeof(*t));
}

int64_t pl_pipectl_trace_start(const pl_pipectl_trace_t *t, int s, int i)
{
    const pl_msg_trace_t *tr = t->st[s].trace;
    return tr->t0_ns + tr->events[i].t_ns - t->origin_ns;
}

int64_t pl_pipectl_trace_end(const pl_pipectl_trace_t *t, int s, int i)
{
    return pl_pipectl_trace_start(t, s, i) + t->st[s].trace->events[i].dur_ns;
}

int pl_pipectl_trace_find_compute(const pl_pipectl_trace_t *t, int s, uint32_t mb, uint32_t step,
                                  int part)
{
    const pl_msg_trace_t *tr = t->st[s].trace;
    if (!tr)
        return -1;
    pl_msg_trace_event_t key = {
        .kind = PL_TRACE_COMPUTE, .act = 1 /* hidden */, .mb = mb, .step = step};
    int lo = 0, hi = tr->n_events; /* the first of the run at or after key */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        const pl_msg_trace_event_t *e = &tr->events[t->order[s][mid]];
        bool before = e->kind != key.kind ? e->kind < key.kind
                      : e->act != key.act ? e->act < key.act
                      : e->mb != key.mb   ? e->mb < key.mb
                                          : e->step < key.step;
        if (before)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (part < 0 || lo + part >= tr->n_events)
        return -1;
    int i = t->order[s][lo + part];
    return s_same(&tr->events[i], &key) ? i : -1;
}

static FILE *s_open(const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        fprintf(stderr, "pipectl: trace: %s: %s\n", path, strerror(errno));
    return f;
}

/* Close f (not stdout), reporting a write error against path. */
static int s_close(FILE *f, const char *path)
{
    int bad = ferror(f) != 0;
    if (f != stdout)
        bad |= fclose(f) != 0;
    else
        bad |= fflush(f) != 0;
    return bad ? s_fail("%s: write failed", path) : 0;
}

int pl_pipectl_trace(pl_pipectl_t *c, const char *job, const char *json_out, const char *svg_out)
{
    char *end;
    errno = 0;
    long id = strtol(job, &end, 10);
    if (!*job || *end || errno || id < 1 || id > (long)UINT32_MAX)
        return s_fail("'%s' is not a job id", job);
    static pl_pipectl_trace_t t; /* large: off the stack */
    int rc = pl_pipectl_trace_fetch(c, (uint32_t)id, &t);
    int64_t events = 0, dropped = 0;
    int traced = 0;
    for (int s = 0; !rc && s < t.n_stages; s++) {
        const pl_msg_trace_t *tr = t.st[s].trace;
        if (!tr) {
            fprintf(stderr, "pipectl: trace: job %ld stage %d (%s): no trace\n", id, s,
                    t.st[s].node);
            continue;
        }
        traced++;
        events += tr->n_events;
        dropped += tr->recorded - tr->n_events;
    }
    if (!rc && traced == 0) {
        fprintf(stderr,
                "pipectl: trace: job %ld (%s) has no trace: its stages send theirs when "
                "they finish, and a job with `trace: false` records none\n",
                id, t.st[0].state);
        rc = 1;
    }
    if (!rc && (json_out || !svg_out)) {
        json_t *doc;
        bool to_stdout = !json_out || !strcmp(json_out, "-");
        FILE *f = to_stdout ? stdout : s_open(json_out);
        if (!f) {
            rc = 1;
        } else if (pl_pipectl_trace_chrome_build(&t, &doc)) {
            rc = s_fail("%s", pl_error_msg());
            if (f != stdout)
                fclose(f);
        } else {
            rc = json_dumpf(doc, f, JSON_COMPACT | JSON_REAL_PRECISION(15)) != 0;
            fputc('\n', f);
            json_decref(doc);
            rc = s_close(f, to_stdout ? "stdout" : json_out) || rc;
        }
    }
    if (!rc && svg_out) {
        FILE *f = s_open(svg_out);
        if (!f) {
            rc = 1;
        } else if (pl_pipectl_trace_svg_write(&t, f)) {
            rc = s_fail("%s", pl_error_msg());
            fclose(f);
        } else {
            rc = s_close(f, svg_out);
        }
    }
    if (!rc)
        fprintf(stderr, "job %ld: %d of %d stages traced, %lld events (%lld dropped), %.3f ms\n",
                id, traced, t.n_stages, (long long)events, (long long)dropped,
                (double)(t.end_ns - t.origin_ns) / 1e6);
    pl_pipectl_trace_clear(&t);
    return rc;
}

int pl_pipectl_trace_verb(pl_pipectl_t *c, char **args, int n_args)
{
    (void)n_args;
    return pl_pipectl_trace(c, args[0], c->out_file, c->svg);
}
