/* The job lifecycle in the coordinator: submit (validated against the model), queue, plan,
 * assign, start, finish or fail; and what happens to a job when one of its nodes is lost. */
#include "common/log.h"
#include "common/util.h"
#include "daemon/coord_int.h"
#include "daemon/coord_train.h"
#include "daemon/coord_deploy_int.h"
#include "daemon/coord_intake.h"
#include "pipeline/gen.h"
#include "model/model.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pl_coord_job_free(pl_coord_job_t *j)
{
    if (!j)
        return;
    pl_coord_deploy_free(j);
    pl_job_spec_clear(&j->spec);
    free(j->spec_json);
    pl_coord_job_seqs_free(j);
    json_decref(j->plan);
    pl_msg_results_free(j->results, j->n_results);
    for (int i = 0; i < j->n_stages; i++)
        free(j->stages[i].ucx_addr);
    pl_coord_stream_clear(j);
    pl_coord_train_free(j);
    free(j);
}

bool pl_coord_job_terminal(const pl_coord_job_t *j)
{
    return j->state == PL_JOB_DONE || j->state == PL_JOB_FAILED || j->state == PL_JOB_CANCELED;
}

/* Validate a submission against the model before it is queued; nothing is kept on error. */
static pl_status_t s_validate(pl_coord_job_t *j)
{
    pl_model_t *model = NULL;
    pl_gen_job_t g = {0};
    pl_status_t st = pl_model_open(j->spec.model, &model);
    if (st)
        return pl_error_prefix(st, "model %s: ", j->spec.model);
    const pl_model_config_t *cfg = pl_model_config(model);
    if (j->spec.serve.on) { /* a deployment: no prompts, its slots and context instead */
        st = pl_coord_deploy_validate(j, cfg);
        pl_model_destroy(&model);
        return st;
    }
    if ((st = pl_gen_job_from_spec(&j->spec, j->spec.microbatches, cfg, &g))) {
        pl_model_destroy(&model);
        return st;
    }
    j->n_layers = cfg->n_layers;
    j->vocab = cfg->vocab;
    j->n_seqs = g.n_seqs;
    j->max_ctx = pl_gen_job_max_ctx(&g);
    for (int i = 0; i < g.n_seqs; i++)
        j->prompt_tokens += (uint64_t)g.prompt_len[i];
    pl_gen_job_clear(&g);
    pl_model_destroy(&model);
    return PL_OK;
}

pl_status_t pl_coord_job_new(pl_job_spec_t *spec, pl_coord_job_t **job_p)
{
    pl_coord_job_t *j = calloc(1, sizeof(*j));
    pl_status_t st;

    if (!j) {
        pl_job_spec_clear(spec);
        return pl_error(PL_ERR_NOMEM, "coordinator out of memory");
    }
    j->spec = *spec;
    pl_job_spec_init(spec); /* moved into the job */
    if (j->spec.train ? (st = pl_coord_train_validate(j)) /* coord_train.c */
                      : ((st = s_validate(j)) || (st = pl_coord_job_seqs_new(j))))
        goto err;
    if (j->spec.stages > j->n_layers) {
        st = pl_error(PL_ERR_RANGE, "%d stages asked for a model of %d layers", j->spec.stages,
                      j->n_layers);
        goto err;
    }
    *job_p = j;
    return PL_OK;
err:
    pl_coord_job_free(j);
    return st;
}

int pl_coord_unfinished(const pl_coord_t *c)
{
    int unfinished = 0;
    for (int i = 0; i < c->n_jobs; i++)
        unfinished += !pl_coord_job_terminal(c->jobs[i]);
    return unfinished;
}

/* The job's stored size is bounded: measured on the spec's encoding, which is kept (json_p) for
 * the state db, so that a large SUBMIT is encoded once, not once per save. */
static pl_status_t s_encode_bounded(const pl_cfg_cluster_t *cfg, const pl_job_spec_t *spec,
                                    char **json_p)
{
    json_t *body;
    pl_status_t st = pl_job_spec_encode(spec, &body);
    if (st)
        return st;
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (!text)
        return pl_error(PL_ERR_NOMEM, "the job cannot be encoded: out of memory");
    size_t bytes = strlen(text);
    if (bytes > (size_t)cfg->max_job_mb << 20) {
        free(text);
        return pl_error(PL_ERR_RANGE,
                        "the job is %zu bytes, more than %d MiB "
                        "(coordinator.max_job_mb)",
                        bytes, cfg->max_job_mb);
    }
    *json_p = text;
    return PL_OK;
}

pl_status_t pl_coord_submit_prepare(const pl_cfg_cluster_t *cfg, pl_job_spec_t *spec,
                                    pl_coord_job_t **job_p)
{
    pl_coord_job_t *j = NULL;
    char *json = NULL;
    pl_status_t st;
    if ((st = s_encode_bounded(cfg, spec, &json))) {
        pl_job_spec_clear(spec);
        return st;
    }
    if ((st = pl_coord_job_new(spec, &j))) {
        free(json);
        return st;
    }
    j->spec_json = json; /* taken */
    *job_p = j;
    return PL_OK;
}

/* Admission against what only the loop knows: the queue has room, and a deployment's name is
 * free (or, for a batch job on one, deployed with the job's model). */
static pl_status_t s_admit(pl_coord_t *c, const pl_job_spec_t *spec)
{
    const pl_coord_job_t *live;
    int unfinished = pl_coord_unfinished(c);
    if (unfinished >= c->cfg->max_queued_jobs)
        return pl_error(PL_ERR_BUSY,
                        "the queue is full: %d unfinished jobs "
                        "(coordinator.max_queued_jobs)",
                        unfinished);
    if (spec->serve.on && (live = pl_coord_deploy_find(c, spec->serve.name)))
        return pl_error(PL_ERR_BUSY, "deployment '%s' is deployed already (job %u, %s): "
                        "pipectl undeploy %s first", spec->serve.name, live->id,
                        pl_coord_dep_state(live), spec->serve.name);
    if (spec->deployment[0] && !(live = pl_coord_deploy_find(c, spec->deployment)))
        return pl_error(PL_ERR_NOT_FOUND, "no deployment named '%s' is deployed",
                        spec->deployment);
    if (spec->deployment[0] && strcmp(live->spec.model, spec->model))
        return pl_error(PL_ERR_INVALID, "the job's model %s is not deployment '%s''s (%s)",
                        spec->model, spec->deployment, live->spec.model);
    return PL_OK;
}

void pl_coord_on_submit(pl_coord_t *c, const pl_tx_peer_t *from, pl_coord_job_t **job_p)
{
    pl_coord_job_t *j = *job_p;
    pl_status_t st;

    *job_p = NULL;
    if ((st = s_admit(c, &j->spec)))
        goto err;
    snprintf(j->owner, sizeof(j->owner), "%s", from->user);
    if (!j->id) /* the intake chose one (its spec may be stored under it) */
        j->id = c->next_job;
    if (j->id >= c->next_job)
        c->next_job = j->id + 1; /* saved with the job: durable before anyone hears of it */
    j->state = PL_JOB_QUEUED;
    j->t_submit = j->t_queued = pl_now();
    pl_coord_event(j, "submitted", "%d sequence(s), model %s, by %s", j->n_seqs, j->spec.model,
                   j->owner[0] ? j->owner : "-");
    uint64_t del = 0;
    if ((st = pl_coord_persist(c, j)) || (st = pl_coord_add_job(c, j))) {
        if (c->store && j->stored && pl_coord_save_delete(c, j->id, &del) == PL_OK)
            j->stored = false; /* no row: its spec is dropped below, after the deletion */
        goto err;
    }
    /* its "queued" waits for its row; if that fails it is the refusal (and the job fails) */
    pl_coord_hold_promise(c, j->row_seq, "job rejected");
    pl_log_info("job %u: submitted, %d sequences, model %s (%d layers)", j->id, j->n_seqs,
                j->spec.model, j->n_layers);
    json_t *body;
    if (pl_msg_job_state_encode(&(pl_msg_job_state_t){.job = j->id, .state = "queued"}, &body))
        body = NULL;
    pl_coord_reply(c, from, body);
    pl_coord_schedule(c);
    return;
err:
    pl_log_info_limited("submission from '%.*s' rejected: %s", (int)from->len, from->id,
                        pl_error_msg());
    pl_coord_reply_error(c, from, st, "job rejected: %s", pl_error_msg());
    if (j->spec_saved && !j->stored) /* its spec row has no job row: dropped */
        pl_coord_hold_drop_spec(c, j->id, del);
    pl_coord_job_free(j);
}

static void s_end_job(pl_coord_t *c, pl_coord_job_t *j, pl_job_state_t state, bool cancel_stages)
{
    for (int i = 0; i < j->n_stages; i++) {
        pl_coord_node_t *n = &c->nodes[j->stages[i].node];
        /* cancels running stages, releases finished ones (they keep endpoints until then) */
        if (cancel_stages && n->alive) {
            pl_msg_t m;
            pl_msg_init(&m, PL_MSG_CANCEL);
            m.cancel = (pl_msg_cancel_t){.job = j->id, .stage = i, .epoch = j->epoch};
            pl_coord_send_node(c, j->stages[i].node, &m);
        }
        if (n->busy_job == j->id)
            n->busy_job = 0;
    }
    j->state = state;
    j->t_end = pl_now();
    if (j->error[0])
        pl_coord_event(j, pl_job_state_name(state), "%s", j->error);
    else
        pl_coord_event(j, pl_job_state_name(state), "%d sequence(s) after %.2f s", j->n_seqs,
                       j->t_end - j->t_submit);
    pl_coord_stream_clear(j); /* the results have the whole text */
    pl_coord_persist(c, j);
    pl_coord_save_progress_delete(c, j->id); /* the results (or the end) make it moot */
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

/* Stage i's ASSIGN of job j into m, borrowing the spec and the resume list for encoding (not
 * cleared). */
static void s_assign_msg(const pl_coord_t *c, const pl_coord_job_t *j, int i,
                         pl_msg_result_t *resume, int n_resume, pl_msg_t *m)
{
    const pl_coord_stage_t *s = &j->stages[i];
    pl_msg_init(m, PL_MSG_ASSIGN);
    m->assign = (pl_msg_assign_t){.job = j->id,
                                  .stage = i,
                                  .n_stages = j->n_stages,
                                  .epoch = j->epoch,
                                  .first = s->first,
                                  .last = s->last,
                                  .max_ctx = j->max_ctx,
                                  .max_tokens = j->max_tokens,
                                  .microbatches = j->microbatches,
                                  .spec = j->spec};
    if (j->prefill_chunk > 0) /* the plan's choice when the job left it open */
        m->assign.spec.gen.prefill_chunk = j->prefill_chunk;
    /* the plan's uneven chunks, or none: the schedule is the coordinator's, never a client's */
    m->assign.spec.gen.prefill_sched = j->prefill_sched;
    if (j->dep) /* the KV slots that fit every stage, so that all stages agree */
        m->assign.spec.serve.kv_slots = j->n_seqs;
    /* only the first stage (prefill) and the last (sampling) need where sequences stand */
    if (i == 0 || i == j->n_stages - 1) {
        m->assign.resume = resume;
        m->assign.n_resume = n_resume;
    }
    snprintf(m->assign.device, sizeof(m->assign.device), "%s", c->nodes[s->node].dev[s->dev].id);
}

void pl_coord_job_done(pl_coord_t *c, pl_coord_job_t *j)
{
    s_end_job(c, j, PL_JOB_DONE, false);
    pl_log_info("job %u: done in %.2f s", j->id, j->t_end - j->t_run);
}

static void s_assign(pl_coord_t *c, pl_coord_job_t *j)
{
    pl_msg_t *m = malloc(sizeof(*m));
    if (!m) {
        pl_coord_job_fail(c, j, "coordinator out of memory");
        return;
    }
    pl_msg_result_t *resume = NULL;
    int n_resume = 0;
    if (pl_coord_resume_list(j, &resume, &n_resume)) {
        free(m);
        pl_coord_job_fail(c, j, "coordinator out of memory");
        return;
    }
    /* stage 0's carries the most (the spec and the resume list): refused whole, before any
     * stage hears of the job, when it does not fit */
    s_assign_msg(c, j, 0, resume, n_resume, m);
    if (pl_coord_assign_fits(m)) {
        free(m);
        pl_msg_results_free(resume, n_resume);
        pl_coord_job_fail(c, j, "%s", pl_error_msg());
        return;
    }
    j->epoch = c->next_epoch++;
    j->state = PL_JOB_LOADING;
    j->t_start = pl_now();
    if (j->resuming)
        j->t_resumed = j->t_start;
    j->resuming = false;
    {
        char where[160] = "";
        size_t k = 0;
        for (int i = 0; i < j->n_stages && k < sizeof(where); i++)
            k += (size_t)snprintf(where + k, sizeof(where) - k, "%s%s", i ? ", " : "",
                                  c->nodes[j->stages[i].node].name);
        pl_coord_event(j, "planned", "%d stage(s) on %s", j->n_stages, where);
        pl_coord_event(j, "loading", "epoch %u", j->epoch);
    }
    /* the epoch is durable before a stage hears of it: each ASSIGN waits for this write, and
     * is not sent if it fails (coord_state.c); one not even queued, nobody hears of */
    if (pl_coord_persist(c, j)) {
        char why[PL_MSG_TEXT_MAX + 1];
        snprintf(why, sizeof(why), "its epoch %u was not saved (%s)", j->epoch, pl_error_msg());
        free(m);
        pl_msg_results_free(resume, n_resume);
        pl_coord_job_interrupt(c, j, why);
        return;
    }
    for (int i = 0; i < j->n_stages; i++) {
        pl_coord_stage_t *s = &j->stages[i];
        c->nodes[s->node].busy_job = j->id;
        s_assign_msg(c, j, i, resume, n_resume, m);
        pl_coord_send_node(c, s->node, m);
    }
    free(m);
    pl_msg_results_free(resume, n_resume);
    pl_log_info("job %u: %d stage(s) assigned, epoch %u%s", j->id, j->n_stages, j->epoch,
                n_resume ? ", resuming" : "");
}

/* A loading job whose stages are not all READY in time fails, naming the ones that are not. */
static void s_check_loading(pl_coord_t *c, pl_coord_job_t *j, double now)
{
    double limit = c->cfg->load_timeout_ms / 1000.0;
    if (now - j->t_start <= limit)
        return;
    char missing[256] = "";
    size_t len = 0;
    for (int i = 0; i < j->n_stages && len < sizeof(missing) - 32; i++)
        if (!j->stages[i].ready)
            len += (size_t)snprintf(missing + len, sizeof(missing) - len, "%s%d (%s)",
                                    len ? ", " : "", i, c->nodes[j->stages[i].node].name);
    pl_coord_job_fail(c, j,
                      "loading took longer than %.1f s (coordinator.load_timeout_ms); "
                      "not ready: stage %s",
                      limit, missing);
}

void pl_coord_job_forget(pl_coord_t *c, pl_coord_job_t *j)
{
    pl_log_warn("job %u: rejected (its row was not saved): forgotten", j->id);
    pl_coord_hold_forget_job(c, j->id); /* a stage has heard nothing: they waited for it */
    for (int i = 0; i < j->n_stages; i++)
        if (c->nodes[j->stages[i].node].busy_job == j->id)
            c->nodes[j->stages[i].node].busy_job = 0;
    if (j->spec_saved) /* no row has it: dropped now */
        pl_coord_hold_drop_spec(c, j->id, 0);
    pl_coord_trace_forget(c, j->id);
    for (int i = 0; i < c->n_jobs; i++)
        if (c->jobs[i] == j) {
            memmove(c->jobs + i, c->jobs + i + 1, (size_t)(--c->n_jobs - i) * sizeof(*c->jobs));
            break;
        }
    pl_coord_job_free(j);
}

/* Forget the oldest finished jobs beyond results_kept (a job that waits blocks nothing). */
static void s_trim(pl_coord_t *c)
{
    int terminal = 0;
    for (int i = 0; i < c->n_jobs; i++)
        terminal += pl_coord_job_terminal(c->jobs[i]);
    for (int i = 0; i < c->n_jobs && terminal > c->cfg->results_kept;) {
        pl_coord_job_t *j = c->jobs[i];
        if (!pl_coord_job_terminal(j)) {
            i++;
            continue;
        }
        /* the row here; the spec's large delete in its own file, on the intake's connection,
         * once the row's is committed: a crash between them leaves an orphan spec, which the
         * next start prunes, never a row without its spec */
        uint64_t del;
        if (c->store && pl_coord_save_delete(c, j->id, &del) == PL_OK)
            pl_coord_hold_drop_spec(c, j->id, del);
        pl_coord_trace_forget(c, j->id);
        pl_coord_job_free(j);
        memmove(c->jobs + i, c->jobs + i + 1, (size_t)(--c->n_jobs - i) * sizeof(*c->jobs));
        terminal--;
    }
}

void pl_coord_schedule(pl_coord_t *c)
{
    double now = pl_now(), place_limit = c->cfg->place_timeout_ms / 1000.0;
    /* first come, first served; a later job may start when it needs other nodes */
    for (int i = 0; i < c->n_jobs; i++) {
        pl_coord_job_t *j = c->jobs[i];
        if (j->spec.deployment[0]) /* it runs on the deployment: coord_deploy_job.c */
            continue;
        if (j->state == PL_JOB_QUEUED) {
            if (pl_coord_plan_job(c, j))
                s_assign(c, j);
            else if (j->state == PL_JOB_QUEUED && now - j->t_queued > place_limit)
                pl_coord_job_fail(c, j,
                                  "could not be placed in %.1f s "
                                  "(coordinator.place_timeout_ms): %s",
                                  place_limit, j->error);
        } else if (j->state == PL_JOB_LOADING) {
            s_check_loading(c, j, now);
        }
    }
    s_trim(c);
}

static void s_start(pl_coord_t *c, pl_coord_job_t *j)
{
    pl_act_token_t token; /* this assignment's data-plane token: fresh for every epoch */
    if (pl_act_token_new(&token)) {
        pl_coord_job_fail(c, j, "no data-plane token: %s", pl_error_msg());
        return;
    }
    for (int i = 0; i < j->n_stages; i++) {
        /* next: where activations go; prev: the stage whose link probe this one answers */
        int n = j->n_stages;
        pl_msg_t m;
        pl_msg_init(&m, PL_MSG_START);
        m.start = (pl_msg_start_t){.job = j->id,
                                   .stage = i,
                                   .epoch = j->epoch,
                                   .next = n > 1 ? j->stages[(i + 1) % n].ucx_addr : NULL,
                                   .prev = n > 1 ? j->stages[(i + n - 1) % n].ucx_addr : NULL,
                                   .token = token};
        if (j->train) /* a chain per replica, and rings across them (coord_train.c) */
            pl_coord_train_start(j, i, &m.start);
        pl_coord_send_node(c, j->stages[i].node, &m); /* borrowed addresses, not cleared */
    }
    j->state = PL_JOB_RUNNING;
    j->t_run = pl_now();
    pl_coord_event(j, "running", "all %d stage(s) ready after %.2f s", j->n_stages,
                   j->t_run - j->t_start);
    pl_coord_persist(c, j);
    pl_log_info("job %u: all stages ready (%.2f s), running", j->id, j->t_run - j->t_start);
}

static void s_finish(pl_coord_t *c, pl_coord_job_t *j)
{
    char why[160];
    if (j->train && !pl_coord_train_finished(j, why, sizeof(why))) {
        pl_coord_job_fail(c, j, "training: every stage is done, but %s", why);
        return;
    }
    if (j->train)
        pl_coord_event(j, "trained", "%s", why);
    /* every stage is DONE: release them all (they kept their endpoints open until now) */
    s_end_job(c, j, PL_JOB_DONE, true);
    pl_coord_learn(c, j);
    pl_log_info("job %u: done in %.2f s", j->id, j->t_end - j->t_run);
}

void pl_coord_on_stage_msg(pl_coord_t *c, const pl_tx_peer_t *from, pl_msg_t *m)
{
    uint32_t id = m->type == PL_MSG_READY  ? m->ready.job
                  : m->type == PL_MSG_DONE ? m->done.job
                                           : m->fail.job;
    uint32_t epoch = m->type == PL_MSG_READY  ? m->ready.epoch
                     : m->type == PL_MSG_DONE ? m->done.epoch
                                              : m->fail.epoch;
    int stage = m->type == PL_MSG_READY  ? m->ready.stage
                : m->type == PL_MSG_DONE ? m->done.stage
                                         : m->fail.stage;
    char node[PL_CFG_NAME_MAX + 1];
    snprintf(node, sizeof(node), "%.*s", (int)PL_MIN(from->len, PL_CFG_NAME_MAX), from->id);
    pl_coord_job_t *j = pl_coord_find_job(c, id);
    int ni = pl_coord_find_node(c, node);
    if (j && epoch == j->epoch && stage < j->n_stages && j->stages[stage].node != ni) {
        char what[96]; /* results only from the stage the coordinator assigned */
        snprintf(what, sizeof(what), "%s for job %u stage %d, assigned to another node",
                 pl_msg_name(m->type), id, stage);
        pl_coord_auth_stage_refused(c, from, what);
        return;
    }
    if (!j || pl_coord_job_terminal(j) || j->state == PL_JOB_QUEUED || epoch != j->epoch ||
        stage >= j->n_stages || j->stages[stage].node != ni) {
        /* an earlier assignment (before a restart or a re-plan), or not this node's stage */
        pl_log_info_limited("refused %s for job %u stage %d epoch %u from %s: %s",
                            pl_msg_name(m->type), id, stage, epoch, node,
                            !j ? "no such job"
                            : pl_coord_job_terminal(j) || j->state == PL_JOB_QUEUED
                                ? "the job is not running"
                            : epoch != j->epoch ? "stale epoch"
                                                : "not the stage's node");
        return;
    }
    pl_coord_stage_t *s = &j->stages[stage];
    const char *dev = c->nodes[ni].dev[s->dev].id;
    if (m->type == PL_MSG_FAIL) {
        char where[160];
        snprintf(where, sizeof(where), "stage %d (%s, %s)", stage, node, dev);
        s->done = true; /* its executor is gone already */
        if (m->fail.code == PL_ERR_TRANSPORT || m->fail.code == PL_ERR_TIMEOUT) {
            /* a peer's data plane failed (it died, froze or was cut off): resume on the nodes
             * that still heartbeat, without waiting for the lost one to be declared dead */
            char why[PL_MSG_TEXT_MAX + 200];
            snprintf(why, sizeof(why), "%s: %s", where, m->fail.error);
            pl_coord_job_interrupt(c, j, why);
            return;
        }
        pl_coord_job_fail(c, j, "%s: %s", where, m->fail.error[0] ? m->fail.error : "failed");
        return;
    }
    if (m->type == PL_MSG_READY) {
        if (j->n_stages > 1 && !m->ready.ucx_addr) {
            pl_coord_job_fail(c, j, "stage on %s sent READY without a valid ucx_addr", node);
            return;
        }
        free(s->ucx_addr);
        s->ucx_addr = m->ready.ucx_addr; /* taken */
        m->ready.ucx_addr = NULL;
        s->ready = true;
        pl_coord_event(j, "ready", "stage %d on %s (%s)", stage, node, dev);
        bool all = true;
        for (int i = 0; i < j->n_stages; i++)
            all = all && j->stages[i].ready;
        if (all && j->state == PL_JOB_LOADING)
            s_start(c, j);
        return;
    }
    /* DONE */
    s->stats = m->done.stats;
    s->have_stats = true;
    pl_coord_trace_keep(c, j, stage, &m->done.trace);
    s->done = true;
    pl_coord_event(j, "stage done", "stage %d on %s: %.2f s, %.2f s computing", stage, node,
                   s->stats.wall_s, s->stats.compute_s);
    if (stage == j->n_stages - 1) {
        if (m->done.n_results != j->n_seqs) {
            pl_coord_job_fail(c, j, "last stage on %s sent malformed results", node);
            return;
        }
        pl_msg_results_free(j->results, j->n_results);
        j->results = m->done.results; /* taken */
        j->n_results = m->done.n_results;
        int64_t total = 0;
        for (int i = 0; i < j->n_results; i++)
            total += j->results[i].n_tokens;
        pl_coord_resume_seen(j, total); /* it ended before a report showed a new token */
        m->done.results = NULL;
        m->done.n_results = 0;
    }
    bool all = true;
    for (int i = 0; i < j->n_stages; i++)
        all = all && j->stages[i].done;
    if (all)
        s_finish(c, j);
}

void pl_coord_on_kill(pl_coord_t *c, const pl_tx_peer_t *from, const pl_msg_t *m)
{
    pl_coord_job_t *j = pl_coord_find_job(c, m->job_ref.job);
    if (!j) {
        pl_coord_reply_error(c, from, PL_ERR_NOT_FOUND, "no job %u", m->job_ref.job);
        return;
    }
    if (!pl_coord_auth_may_see(c, from, j)) {
        pl_coord_reply_error(c, from, PL_ERR_PERMISSION, "job %u belongs to another user", j->id);
        return;
    }
    if (!pl_coord_job_terminal(j)) {
        snprintf(j->error, sizeof(j->error), "canceled by the user");
        s_end_job(c, j, PL_JOB_CANCELED, true);
        pl_log_info("job %u: canceled", j->id);
        /* "canceled" waits for the row; its stages are canceled already, so if the row fails
         * the job stays canceled here and the answer says that the disk does not know it */
        pl_coord_hold_promise(c, j->row_seq,
                              "job %u is canceled, but the state db still has it as it was: a "
                              "coordinator restart would bring it back",
                              j->id);
    }
    pl_msg_job_state_t r = {.job = j->id};
    json_t *body;
    snprintf(r.state, sizeof(r.state), "%s", pl_job_state_name(j->state));
    if (pl_msg_job_state_encode(&r, &body))
        body = NULL;
    pl_coord_reply(c, from, body);
}

void pl_coord_node_lost(pl_coord_t *c, int node, const char *why)
{
    for (int i = 0; i < c->n_jobs; i++) {
        pl_coord_job_t *j = c->jobs[i];
        if (pl_coord_job_terminal(j) || j->state == PL_JOB_QUEUED)
            continue;
        for (int s = 0; s < j->n_stages; s++)
            if (j->stages[s].node == node) {
                char what[PL_CFG_NAME_MAX + 160];
                snprintf(what, sizeof(what), "node %s lost: %s", c->nodes[node].name, why);
                pl_coord_job_interrupt(c, j, what);
                break;
            }
    }
    c->nodes[node].busy_job = 0;
}
