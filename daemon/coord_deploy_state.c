/* Deployments as jobs in the coordinator: validation and the planner's shape of one, what the
 * plan decided, what the hub publishes, and the loop's turn (re-adds after a re-plan, the end of
 * a deployment's requests, its metrics). */
#include "common/log.h"
#include "common/util.h"
#include "daemon/coord_deploy_int.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *const pl_dep_outcome_names[PL_DEP_OUT_COUNT_] = {
    [PL_DEP_OUT_STOP] = "stop",
    [PL_DEP_OUT_LENGTH] = "length",
    [PL_DEP_OUT_CANCELED] = "canceled",
    [PL_DEP_OUT_FAILED] = "failed",
    [PL_DEP_OUT_REFUSED_400] = "refused_400",
    [PL_DEP_OUT_REFUSED_404] = "refused_404",
    [PL_DEP_OUT_REFUSED_429] = "refused_429",
    [PL_DEP_OUT_REFUSED_503] = "refused_503",
};

/* What was published last, so the hub is told only of changes. */
struct pl_coord_serve {
    int n;
    pl_serve_deployment_t deps[PL_SERVE_MAX_DEPLOYMENTS];
    bool published;
};

const char *pl_coord_dep_state(const pl_coord_job_t *j)
{
    switch (j->state) {
    case PL_JOB_QUEUED: return j->resuming ? "resuming" : "planning";
    case PL_JOB_LOADING: return j->n_resumes ? "resuming" : "loading";
    case PL_JOB_RUNNING: return "ready";
    case PL_JOB_FAILED: return "failed";
    default: return "undeployed";
    }
}

pl_status_t pl_coord_deploy_validate(pl_coord_job_t *j, const pl_model_config_t *cfg)
{
    const pl_job_serve_t *s = &j->spec.serve;
    if (j->spec.n_prompts != 0)
        return pl_error(PL_ERR_INVALID, "deployment '%s': a deployment takes no prompts", s->name);
    if (!pl_cfg_name_ok(s->name))
        return pl_error(PL_ERR_INVALID, "field 'serve.name': not a name ([A-Za-z0-9_.-]+)");
    if (s->kv_slots < 1 || s->kv_slots > PL_CFG_DEPLOY_MAX_SLOTS || s->max_queue < 0 ||
        s->max_tokens < 1 || s->step_tokens < 1)
        return pl_error(PL_ERR_RANGE, "deployment '%s': serve settings out of range", s->name);
    /* the context: the model's positions, at most a prompt limit plus the completion cap (a
     * model of 128k positions would otherwise take its whole KV budget for a few slots) */
    int ctx = PL_MIN(cfg->max_pos, PL_COORD_DEPLOY_PROMPT_MAX + s->max_tokens);
    if (ctx < 2)
        return pl_error(PL_ERR_RANGE, "deployment '%s': the model has %d positions, too few",
                        s->name, cfg->max_pos);
    if (!(j->dep = calloc(1, sizeof(*j->dep))))
        return pl_error(PL_ERR_NOMEM, "coordinator out of memory");
    j->dep->next_req = 1;
    j->n_layers = cfg->n_layers;
    j->vocab = cfg->vocab;
    j->n_seqs = s->kv_slots;
    j->max_ctx = ctx;
    j->prompt_tokens = 0;
    return PL_OK;
}

pl_status_t pl_coord_deploy_shape(const pl_coord_job_t *j, pl_job_spec_t *shape)
{
    pl_job_spec_t s = j->spec;
    int n = j->spec.serve.kv_slots;
    int new_tok = PL_MIN(j->spec.serve.max_tokens, j->max_ctx - 1);
    s.serve.on = false;
    s.n_prompts = n;
    s.prompts = NULL;
    s.gen.max_new_tokens = new_tok;
    if (!(s.prompt_len = malloc((size_t)n * sizeof(int))))
        return pl_error(PL_ERR_NOMEM, "coordinator out of memory");
    for (int i = 0; i < n; i++)
        s.prompt_len[i] = j->max_ctx - new_tok; /* every slot as long as the context */
    *shape = s;
    return PL_OK;
}

void pl_coord_deploy_planned(pl_coord_job_t *j, int resident, int microbatches, int n_stages)
{
    j->n_seqs = PL_MAX(1, PL_MIN(resident, j->spec.serve.kv_slots));
    j->microbatches = PL_MAX(PL_MAX(microbatches, j->spec.microbatches), n_stages);
    j->max_tokens = j->spec.serve.step_tokens;
    j->prefill_chunk = 0;
    j->prefill_sched.n = 0;
    if (j->n_seqs < j->spec.serve.kv_slots)
        pl_log_info("deployment %s: %d KV slots fit the stages' memory (%d asked)",
                    j->spec.serve.name, j->n_seqs, j->spec.serve.kv_slots);
}

int pl_coord_deploy_in_flight(const pl_coord_job_t *j, int64_t *tokens_p)
{
    int64_t tokens = 0;
    int n = j->dep ? j->dep->n_live : 0;
    for (int k = 0; k < n; k++)
        tokens += j->dep->live[k].n_tok;
    *tokens_p = tokens;
    return n;
}

pl_coord_job_t *pl_coord_deploy_find(pl_coord_t *c, const char *name)
{
    for (int i = 0; i < c->n_jobs; i++) {
        pl_coord_job_t *j = c->jobs[i];
        if (j->dep && !pl_coord_job_terminal(j) && !strcmp(j->spec.serve.name, name))
            return j;
    }
    return NULL;
}

void pl_coord_deploy_free(pl_coord_job_t *j)
{
    pl_coord_bound_free(j);
    if (!j->dep)
        return;
    pl_serve_end_t end = {.finish = PL_SERVE_CANCELED};
    for (int k = 0; k < j->dep->n_live; k++) {
        pl_serve_req_end(j->dep->live[k].req, &end); /* no client waits for ever */
        pl_serve_req_unref(&j->dep->live[k].req);
        free(j->dep->live[k].tok);
    }
    free(j->dep->live);
    free(j->dep);
    j->dep = NULL;
}

void pl_coord_deploy_free_all(pl_coord_t *c)
{
    if (c->serve) /* the loop is ending: nothing it deployed takes requests any more */
        pl_serve_hub_publish(c->hub, NULL, 0);
    free(c->serve);
    c->serve = NULL;
}

void pl_coord_dep_count(pl_coord_t *c, pl_coord_job_t *j, const char *name, pl_dep_outcome_t o)
{
    (void)name;
    if (j && j->dep)
        j->dep->by_outcome[o]++;
    pl_metrics_add(c->metrics.serve_reqs, pl_dep_outcome_names[o], 1);
}

void pl_coord_deploy_publish(pl_coord_t *c)
{
    if (!c->serve && !(c->serve = calloc(1, sizeof(*c->serve))))
        return; /* the next turn tries again */
    pl_serve_deployment_t deps[PL_SERVE_MAX_DEPLOYMENTS];
    int n = 0;
    memset(deps, 0, sizeof(deps));
    for (int i = 0; i < c->n_jobs && n < PL_SERVE_MAX_DEPLOYMENTS; i++) {
        const pl_coord_job_t *j = c->jobs[i];
        if (!j->dep || pl_coord_job_terminal(j))
            continue;
        pl_serve_deployment_t *d = &deps[n++];
        if (!j->dep->created) /* t_submit is on the monotonic clock */
            j->dep->created = (int64_t)time(NULL) - (int64_t)(pl_now() - j->t_submit);
        snprintf(d->name, sizeof(d->name), "%s", j->spec.serve.name);
        snprintf(d->model, sizeof(d->model), "%s", j->spec.model);
        d->created = j->dep->created;
        d->context = j->max_ctx;
        d->ready = j->state == PL_JOB_RUNNING;
        d->max_tokens = j->spec.serve.max_tokens;
    }
    struct pl_coord_serve *s = c->serve;
    if (s->published && n == s->n && !memcmp(deps, s->deps, (size_t)n * sizeof(*deps)))
        return;
    memcpy(s->deps, deps, sizeof(deps));
    s->n = n;
    s->published = true;
    pl_serve_hub_publish(c->hub, deps, n);
}

void pl_coord_deploy_tick(pl_coord_t *c)
{
    double now = pl_now();
    pl_coord_bound_tick(c);
    pl_coord_deploy_check_canceled(c);
    for (int i = 0; i < c->n_jobs; i++) {
        pl_coord_job_t *j = c->jobs[i];
        struct pl_coord_dep *d = j->dep;
        if (!d)
            continue;
        const char *name = j->spec.serve.name;
        if (pl_coord_job_terminal(j)) {
            if (d->n_live) {
                pl_serve_end_t end = {.finish = j->state == PL_JOB_FAILED ? PL_SERVE_FAILED
                                                                          : PL_SERVE_CANCELED,
                                      .http_status = j->state == PL_JOB_FAILED ? 503 : 0};
                /* the reason stays in `pipectl deployments` (it may name files) */
                snprintf(end.message, sizeof(end.message), "deployment '%s' %s", name,
                         j->state == PL_JOB_FAILED ? "failed" : "was undeployed");
                pl_log_info("deployment %s: %d request(s) in flight ended (%s)", name, d->n_live,
                            pl_job_state_name(j->state));
                pl_coord_deploy_end_all(c, j, &end);
            }
            if (d->t_ready >= 0) { /* once: its gauges go to zero */
                pl_metrics_set(c->metrics.serve_queue, name, 0);
                pl_metrics_set(c->metrics.serve_kv, name, 0);
                d->t_ready = -1;
            }
            continue;
        }
        if (j->state == PL_JOB_RUNNING) {
            if (d->t_ready <= 0) {
                d->t_ready = now;
                d->tokens_ready = d->output_tokens;
            }
            pl_coord_deploy_readd(c, j);
        } else {
            d->t_ready = 0;
        }
        pl_metrics_set(c->metrics.serve_queue, name, PL_MAX(0, d->n_live - j->n_seqs));
        pl_metrics_set(c->metrics.serve_kv, name, PL_MIN(d->n_live, j->n_seqs));
    }
    pl_coord_deploy_publish(c);
}

/* Time to first token and between tokens, seconds: a fast CPU stage to a loaded big model. */
static const double s_lat_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                      0.25,  0.5,    1,     2.5,  5,     10,   30};

pl_status_t pl_coord_deploy_metrics_init(pl_coord_t *c, pl_metrics_t *r)
{
    pl_coord_metrics_t *m = &c->metrics;
    pl_status_t st;
    int nb = (int)PL_ARRAY_SIZE(s_lat_bounds);
    if ((st = pl_metrics_counter(r, "pipecoord_serve_requests_total",
                                 "Serving requests by how they ended (stop, length, canceled, "
                                 "failed, refused_<http status>).",
                                 "outcome", &m->serve_reqs)) ||
        (st = pl_metrics_gauge(r, "pipecoord_serve_queue_depth",
                               "Requests of a deployment waiting for a KV slot.", "deployment",
                               &m->serve_queue)) ||
        (st = pl_metrics_gauge(r, "pipecoord_serve_kv_slots_used",
                               "KV slots of a deployment held by requests.", "deployment",
                               &m->serve_kv)) ||
        (st = pl_metrics_histogram(r, "pipecoord_serve_time_to_first_token_seconds",
                                   "From admission to a request's first token.", "deployment",
                                   s_lat_bounds, nb, &m->serve_ttft)) ||
        (st = pl_metrics_histogram(r, "pipecoord_serve_inter_token_seconds",
                                   "Between a request's tokens (a SEQ_OUT's interval over its "
                                   "tokens).",
                                   "deployment", s_lat_bounds, nb, &m->serve_itl)))
        return st;
    for (int o = 0; o < PL_DEP_OUT_COUNT_; o++) /* a counter shows from the start */
        pl_metrics_add(m->serve_reqs, pl_dep_outcome_names[o], 0);
    return PL_OK;
}
