/* The job lifecycle in the coordinator: submit (validated against the model), queue, plan,
 * assign, start, finish or fail; and what happens to a job when one of its nodes is lost. */
#include "common/json.h"
#include "common/log.h"
#include "common/util.h"
#include "daemon/coord_int.h"
#include "pipeline/gen.h"
#include "model/model.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_JOBS_KEPT 1024

void pl_coord_job_free(pl_coord_job_t *j)
{
    if (!j)
        return;
    json_decref(j->gen);
    json_decref(j->plan);
    json_decref(j->results);
    for (int i = 0; i < j->n_stages; i++) {
        free(j->stages[i].ucx_addr);
        json_decref(j->stages[i].stats);
    }
    free(j);
}

static bool s_terminal(const pl_coord_job_t *j)
{
    return j->state == PL_JOB_DONE || j->state == PL_JOB_FAILED || j->state == PL_JOB_CANCELED;
}

/* Validate a submission against the model before it is queued; nothing is kept on error. */
static pl_status_t s_validate(pl_coord_job_t *j)
{
    pl_model_t *model = NULL;
    pl_gen_job_t g = {0};
    pl_status_t st = pl_model_open(j->model, &model);
    if (st)
        return pl_error_prefix(st, "model %s: ", j->model);
    const pl_model_config_t *cfg = pl_model_config(model);
    if ((st = pl_gen_job_from_json(j->gen, cfg, &g))) {
        pl_model_destroy(&model);
        return st;
    }
    j->n_layers = cfg->n_layers;
    j->n_seqs = g.n_seqs;
    j->max_ctx = pl_gen_job_max_ctx(&g);
    for (int i = 0; i < g.n_seqs; i++)
        j->prompt_tokens += (uint64_t)g.prompt_len[i];
    pl_gen_job_clear(&g);
    pl_model_destroy(&model);
    return PL_OK;
}

pl_status_t pl_coord_job_parse(const json_t *body, pl_coord_job_t **job_p)
{
    pl_coord_job_t *j = calloc(1, sizeof(*j));
    json_t *nodes = json_object_get(body, "nodes"), *gen = json_object_get(body, "gen");
    const char *planner = NULL;
    int64_t stages = 0;
    pl_status_t st;

    if (!j)
        return pl_error(PL_ERR_NOMEM, "coordinator out of memory");
    j->planner = PL_PLANNER_AUTO; /* the fastest plan, even if it leaves devices out */
    if ((st = pl_json_str(body, "model", j->model, sizeof(j->model) - 1)) ||
        (st = pl_json_int_opt(body, "stages", 0, PL_COORD_MAX_STAGES, &stages)) ||
        (st = pl_json_str_opt(body, "planner", 16, &planner)) ||
        (planner && (st = pl_planner_parse(planner, &j->planner))))
        goto err;
    if (!json_is_object(gen)) {
        st = pl_error(PL_ERR_INVALID, "field 'gen': expected an object");
        goto err;
    }
    if (nodes && (!json_is_array(nodes) || json_array_size(nodes) > PL_CFG_MAX_NODES)) {
        st = pl_error(PL_ERR_INVALID, "field 'nodes': expected an array of at most %d names",
                      PL_CFG_MAX_NODES);
        goto err;
    }
    for (size_t i = 0; nodes && i < json_array_size(nodes); i++) {
        json_t *v = json_array_get(nodes, i);
        if (!json_is_string(v) || json_string_length(v) > PL_CFG_NAME_MAX) {
            st = pl_error(PL_ERR_INVALID, "field 'nodes': entry %zu is not a node name", i);
            goto err;
        }
        snprintf(j->allowed[j->n_allowed++], PL_CFG_NAME_MAX + 1, "%s", json_string_value(v));
    }
    j->want_stages = (int)stages;
    j->gen = json_deep_copy(gen);
    if (!j->gen) {
        st = pl_error(PL_ERR_NOMEM, "coordinator out of memory");
        goto err;
    }
    if ((st = s_validate(j)))
        goto err;
    if (j->want_stages > j->n_layers) {
        st = pl_error(PL_ERR_RANGE, "%d stages asked for a model of %d layers", j->want_stages,
                      j->n_layers);
        goto err;
    }
    *job_p = j;
    return PL_OK;
err:
    pl_coord_job_free(j);
    return st;
}

void pl_coord_on_submit(pl_coord_t *c, const pl_ctl_msg_t *m)
{
    pl_coord_job_t *j = NULL;
    pl_status_t st;

    if ((st = pl_coord_job_parse(m->body, &j)))
        goto err;
    if (c->n_jobs == c->cap_jobs) {
        int cap = c->cap_jobs ? 2 * c->cap_jobs : 16;
        pl_coord_job_t **nj = realloc(c->jobs, (size_t)cap * sizeof(*nj));
        if (!nj) {
            st = pl_error(PL_ERR_NOMEM, "coordinator out of memory");
            goto err;
        }
        c->jobs = nj;
        c->cap_jobs = cap;
    }
    j->id = c->next_job++;
    j->state = PL_JOB_QUEUED;
    j->t_submit = pl_now();
    c->jobs[c->n_jobs++] = j;
    pl_log_info("job %u: submitted, %d sequences, model %s (%d layers)", j->id, j->n_seqs,
                j->model, j->n_layers);
    pl_coord_reply(c, m, PL_MSG_REPLY, json_pack("{s:i, s:s}", "job", j->id, "state", "queued"));
    pl_coord_schedule(c);
    return;
err:
    pl_log_info("submission from '%.*s' rejected: %s", (int)m->identity_len, m->identity,
                pl_error_msg());
    pl_coord_reply_error(c, m, "job rejected: %s", pl_error_msg());
    pl_coord_job_free(j);
}

static void s_end_job(pl_coord_t *c, pl_coord_job_t *j, pl_job_state_t state, bool cancel_stages)
{
    for (int i = 0; i < j->n_stages; i++) {
        pl_coord_node_t *n = &c->nodes[j->stages[i].node];
        /* cancels running stages, releases finished ones (they keep endpoints until then) */
        if (cancel_stages && n->alive)
            pl_coord_send_node(c, j->stages[i].node, PL_MSG_CANCEL,
                               json_pack("{s:i, s:i}", "job", j->id, "stage", i));
        if (n->busy_job == j->id)
            n->busy_job = 0;
    }
    j->state = state;
    j->t_end = pl_now();
}

void pl_coord_job_fail(pl_coord_t *c, pl_coord_job_t *j, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->error, sizeof(j->error), fmt, ap);
    va_end(ap);
    pl_log_warn("job %u failed: %s", j->id, j->error);
    s_end_job(c, j, PL_JOB_FAILED, true);
}

static void s_assign(pl_coord_t *c, pl_coord_job_t *j)
{
    for (int i = 0; i < j->n_stages; i++) {
        pl_coord_stage_t *s = &j->stages[i];
        pl_coord_node_t *nd = &c->nodes[s->node];
        nd->busy_job = j->id;
        pl_coord_send_node(
            c, s->node, PL_MSG_ASSIGN,
            json_pack("{s:i, s:i, s:i, s:s, s:i, s:i, s:s, s:i, s:i, s:O}", "job", j->id, "stage",
                      i, "n_stages", j->n_stages, "device", nd->dev[s->dev].id, "first", s->first,
                      "last", s->last, "model", j->model, "max_ctx", j->max_ctx, "max_tokens",
                      j->max_tokens, "gen", j->gen));
    }
    j->state = PL_JOB_LOADING;
    j->t_start = pl_now();
    pl_log_info("job %u: %d stage(s) assigned", j->id, j->n_stages);
}

void pl_coord_schedule(pl_coord_t *c)
{
    /* first come, first served; a later job may start when it needs other nodes */
    for (int i = 0; i < c->n_jobs; i++) {
        pl_coord_job_t *j = c->jobs[i];
        if (j->state == PL_JOB_QUEUED && pl_coord_plan_job(c, j))
            s_assign(c, j);
    }
    /* forget the oldest finished jobs beyond the history limit */
    while (c->n_jobs > S_MAX_JOBS_KEPT && s_terminal(c->jobs[0])) {
        pl_coord_job_free(c->jobs[0]);
        memmove(c->jobs, c->jobs + 1, (size_t)(--c->n_jobs) * sizeof(*c->jobs));
    }
}

static void s_start(pl_coord_t *c, pl_coord_job_t *j)
{
    for (int i = 0; i < j->n_stages; i++) {
        /* next: where activations go; prev: the stage whose link probe this one answers */
        int n = j->n_stages;
        const char *next = n > 1 ? j->stages[(i + 1) % n].ucx_addr : NULL;
        const char *prev = n > 1 ? j->stages[(i + n - 1) % n].ucx_addr : NULL;
        pl_coord_send_node(c, j->stages[i].node, PL_MSG_START,
                           json_pack("{s:i, s:i, s:s?, s:s?}", "job", j->id, "stage", i, "next",
                                     next, "prev", prev));
    }
    j->state = PL_JOB_RUNNING;
    j->t_run = pl_now();
    pl_log_info("job %u: all stages ready (%.2f s), running", j->id, j->t_run - j->t_start);
}

static void s_finish(pl_coord_t *c, pl_coord_job_t *j)
{
    /* every stage is DONE: release them all (they kept their endpoints open until now) */
    s_end_job(c, j, PL_JOB_DONE, true);
    pl_coord_learn(c, j);
    pl_log_info("job %u: done in %.2f s", j->id, j->t_end - j->t_run);
}

void pl_coord_on_stage_msg(pl_coord_t *c, const pl_ctl_msg_t *m)
{
    int64_t id, stage;
    char node[PL_CFG_NAME_MAX + 1];
    if (pl_json_int(m->body, "job", 1, UINT32_MAX, &id) ||
        pl_json_int(m->body, "stage", 0, PL_COORD_MAX_STAGES - 1, &stage)) {
        pl_log_warn("%s from '%.*s': %s", pl_msg_name(m->type), (int)m->identity_len,
                    m->identity, pl_error_msg());
        return;
    }
    snprintf(node, sizeof(node), "%.*s", (int)PL_MIN(m->identity_len, PL_CFG_NAME_MAX),
             m->identity);
    pl_coord_job_t *j = pl_coord_find_job(c, id);
    int ni = pl_coord_find_node(c, node);
    if (!j || s_terminal(j) || stage >= j->n_stages || j->stages[stage].node != ni) {
        pl_log_debug("stale %s for job %lld stage %lld from %s", pl_msg_name(m->type),
                     (long long)id, (long long)stage, node);
        return;
    }
    pl_coord_stage_t *s = &j->stages[stage];
    const char *dev = c->nodes[ni].dev[s->dev].id;
    if (m->type == PL_MSG_FAIL) {
        const char *e = NULL;
        pl_json_str_opt(m->body, "error", 4096, &e);
        char where[160];
        snprintf(where, sizeof(where), "stage %lld (%s, %s)", (long long)stage, node, dev);
        s->done = true; /* its executor is gone already */
        pl_coord_job_fail(c, j, "%s: %s", where, e ? e : "failed");
        return;
    }
    if (m->type == PL_MSG_READY) {
        const char *addr = NULL;
        if (pl_json_str_opt(m->body, "ucx_addr", 1 << 16, &addr) || (j->n_stages > 1 && !addr)) {
            pl_coord_job_fail(c, j, "stage on %s sent READY without a valid ucx_addr", node);
            return;
        }
        free(s->ucx_addr);
        s->ucx_addr = addr ? strdup(addr) : NULL;
        s->ready = true;
        bool all = true;
        for (int i = 0; i < j->n_stages; i++)
            all = all && j->stages[i].ready;
        if (all && j->state == PL_JOB_LOADING)
            s_start(c, j);
        return;
    }
    /* DONE */
    json_t *stats = json_object_get(m->body, "stats");
    json_decref(s->stats);
    s->stats = json_is_object(stats) ? json_incref(stats) : NULL;
    s->done = true;
    if (stage == j->n_stages - 1) {
        json_t *res = json_object_get(m->body, "results");
        if (!json_is_array(res) || json_array_size(res) != (size_t)j->n_seqs) {
            pl_coord_job_fail(c, j, "last stage on %s sent malformed results", node);
            return;
        }
        json_decref(j->results);
        j->results = json_incref(res);
    }
    bool all = true;
    for (int i = 0; i < j->n_stages; i++)
        all = all && j->stages[i].done;
    if (all)
        s_finish(c, j);
}

void pl_coord_on_kill(pl_coord_t *c, const pl_ctl_msg_t *m)
{
    int64_t id;
    if (pl_json_int(m->body, "job", 1, UINT32_MAX, &id)) {
        pl_coord_reply_error(c, m, "%s", pl_error_msg());
        return;
    }
    pl_coord_job_t *j = pl_coord_find_job(c, id);
    if (!j) {
        pl_coord_reply_error(c, m, "no job %lld", (long long)id);
        return;
    }
    if (!s_terminal(j)) {
        snprintf(j->error, sizeof(j->error), "canceled by the user");
        s_end_job(c, j, PL_JOB_CANCELED, true);
        pl_log_info("job %u: canceled", j->id);
    }
    pl_coord_reply(c, m, PL_MSG_REPLY,
                   json_pack("{s:i, s:s}", "job", j->id, "state", pl_job_state_name(j->state)));
}

void pl_coord_node_lost(pl_coord_t *c, int node, const char *why)
{
    for (int i = 0; i < c->n_jobs; i++) {
        pl_coord_job_t *j = c->jobs[i];
        if (s_terminal(j) || j->state == PL_JOB_QUEUED)
            continue;
        for (int s = 0; s < j->n_stages; s++)
            if (j->stages[s].node == node) {
                j->stages[s].done = true; /* nothing to cancel there */
                pl_coord_job_fail(c, j, "node %s lost: %s", c->nodes[node].name, why);
                break;
            }
    }
    c->nodes[node].busy_job = 0;
}
