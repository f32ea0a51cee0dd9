/* `pipectl trace`'s parts: a job's trace as fetched stage by stage (trace.c), written as Chrome
 * Trace Event JSON (trace_chrome.c) or drawn as an SVG timeline (trace_svg.c). */
#ifndef PL_TOOLS_PIPECTL_TRACE_H
#define PL_TOOLS_PIPECTL_TRACE_H

#include "tools/pipectl/pipectl.h"

#include <stdio.h>

/* The SVG's size in pixels: a fixed width, a row per stage (tests check the PNG's size). */
#define PL_PIPECTL_SVG_WIDTH 1200
#define PL_PIPECTL_SVG_ROW 40
#define PL_PIPECTL_SVG_HEIGHT(n_stages) (130 + PL_PIPECTL_SVG_ROW * (n_stages))

typedef struct {
    uint32_t job;
    int n_stages;
    pl_msg_trace_reply_t st[PL_MSG_MAX_STAGES]; /* each stage's answer; st[k].trace may be NULL */
    /* per stage, its events' indices sorted by (kind, act, mb, step, start): the events of one
     * (kind, microbatch, step) in time order, so the n-th is its part n (a prefill chunk) */
    int *order[PL_MSG_MAX_STAGES];
    int *part[PL_MSG_MAX_STAGES]; /* per event, its part */
    int64_t origin_ns, end_ns;    /* earliest start and latest end, coordinator wall clock */
} pl_pipectl_trace_t;

/* TRACE for every stage of job; 0 with *t filled, else 1 after a one-line error. */
int pl_pipectl_trace_fetch(pl_pipectl_t *c, uint32_t job, pl_pipectl_trace_t *t);
void pl_pipectl_trace_clear(pl_pipectl_trace_t *t);
/* Event i of stage s: its start and end in ns from t->origin_ns. */
int64_t pl_pipectl_trace_start(const pl_pipectl_trace_t *t, int s, int i);
int64_t pl_pipectl_trace_end(const pl_pipectl_trace_t *t, int s, int i);
/* The compute event of stage s for (mb, step, part); -1 when the trace does not hold it. */
int pl_pipectl_trace_find_compute(const pl_pipectl_trace_t *t, int s, uint32_t mb, uint32_t step,
                                  int part);

/* The trace as Chrome Trace Event JSON (Perfetto, chrome://tracing): a process per stage, an "X"
 * slice per receive wait, compute and send, flow arrows from each send to the compute it feeds. */
pl_status_t pl_pipectl_trace_chrome_build(const pl_pipectl_trace_t *t, json_t **out_p);
/* The pipeline timeline as SVG: a row per stage, compute coloured by microbatch, receive waits
 * grey, idle white, a time axis and a legend. */
pl_status_t pl_pipectl_trace_svg_write(const pl_pipectl_trace_t *t, FILE *f);

/* `pipectl trace JOB [-o FILE.json] [--svg FILE.svg]`: JSON to FILE (stdout without -o and
 * --svg, or with -o -). 0 ok, 1 no trace or an error. */
int pl_pipectl_trace(pl_pipectl_t *c, const char *job, const char *json_out, const char *svg_out);

#endif
