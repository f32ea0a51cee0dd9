/* The coordinator's metrics: jobs and nodes by state, queue depth, tokens generated and job
 * latency, swept from its own state by the event loop (the only thread that owns that state). */
#include "common/log.h"
#include "common/util.h"
#include "daemon/coord_int.h"

#include <time.h>

#define S_SWEEP_S 0.25

/* Job latency from SUBMIT to its end, seconds: a small test job to a long batch. */
static const double s_job_bounds[] = {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600};

pl_status_t pl_coord_metrics_init(pl_coord_t *c, pl_metrics_t *r)
{
    pl_coord_metrics_t *m = &c->metrics;
    pl_status_t st;
    if ((st = pl_metrics_gauge(r, "pipecoord_jobs", "Jobs known to the coordinator by state.",
                               "state", &m->jobs)) ||
        (st = pl_metrics_gauge(r, "pipecoord_queue_depth", "Jobs queued, waiting for devices.",
                               NULL, &m->queue)) ||
        (st = pl_metrics_gauge(r, "pipecoord_nodes",
                               "Registered nodes by state (idle, busy, "
                               "lost).",
                               "state", &m->nodes)) ||
        (st = pl_metrics_counter(r, "pipecoord_tokens_generated_total",
                                 "Tokens sampled by the last stages of all jobs.", NULL,
                                 &m->tokens)) ||
        (st = pl_metrics_histogram(r, "pipecoord_job_duration_seconds",
                                   "Job latency from submission to its end, by final state.",
                                   "state", s_job_bounds, (int)PL_ARRAY_SIZE(s_job_bounds),
                                   &m->job_s)) ||
        (st = pl_metrics_gauge(r, "pipecoord_start_time_seconds",
                               "When the coordinator started, Unix time.", NULL, &m->started)))
        return st;
    if ((st = pl_coord_deploy_metrics_init(c, r)))
        return st;
    pl_metrics_set(m->started, NULL, (double)time(NULL));
    pl_metrics_add(m->tokens, NULL, 0); /* a counter shows from the start */
    return PL_OK;
}

/* Tokens a job has sampled: the last stage's final count once DONE, its heartbeats before. */
static int64_t s_tokens(const pl_coord_job_t *j)
{
    const pl_coord_stage_t *ls = j->n_stages ? &j->stages[j->n_stages - 1] : NULL;
    if (ls && ls->have_stats && ls->stats.has_sink && ls->stats.generated > j->generated)
        return ls->stats.generated;
    return j->generated;
}

void pl_coord_metrics_update(pl_coord_t *c)
{
    pl_coord_metrics_t *m = &c->metrics;
    double now = pl_now();
    if (now < m->next_sweep)
        return;
    m->next_sweep = now + S_SWEEP_S;
    int by_state[PL_JOB_CANCELED + 1] = {0};
    for (int i = 0; i < c->n_jobs; i++) {
        pl_coord_job_t *j = c->jobs[i];
        by_state[j->state]++;
        int64_t tok = s_tokens(j);
        if (tok > j->metered_tokens) {
            pl_metrics_add(m->tokens, NULL, (double)(tok - j->metered_tokens));
            j->metered_tokens = tok;
        }
        bool ended =
            j->state == PL_JOB_DONE || j->state == PL_JOB_FAILED || j->state == PL_JOB_CANCELED;
        if (ended && !j->metered) {
            pl_metrics_observe(m->job_s, pl_job_state_name(j->state), j->t_end - j->t_submit);
            j->metered = true;
        }
    }
    for (int s = 0; s <= PL_JOB_CANCELED; s++)
        pl_metrics_set(m->jobs, pl_job_state_name((pl_job_state_t)s), by_state[s]);
    pl_metrics_set(m->queue, NULL, by_state[PL_JOB_QUEUED]);
    int idle = 0, busy = 0, lost = 0;
    for (int i = 0; i < c->n_nodes; i++) {
        const pl_coord_node_t *n = &c->nodes[i];
        if (!n->alive)
            lost++;
        else if (n->busy_job)
            busy++;
        else
            idle++;
    }
    pl_metrics_set(m->nodes, "idle", idle);
    pl_metrics_set(m->nodes, "busy", busy);
    pl_metrics_set(m->nodes, "lost", lost);
}
