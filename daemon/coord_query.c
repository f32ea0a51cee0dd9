/* The coordinator's answers to pipectl: job status with its plan, progress, events and
 * throughput, results, the job list, the node table with each node's health, and one node's. */
#include "common/util.h"
#include "daemon/coord_int.h"
#include "daemon/coord_train.h"
#include "daemon/coord_deploy_int.h"

#include <stdio.h>
#include <string.h>

static pl_coord_job_t *s_job_arg(pl_coord_t *c, const pl_tx_peer_t *from, const pl_msg_t *m)
{
    pl_coord_job_t *j = pl_coord_find_job(c, m->job_ref.job);
    if (!j) {
        pl_coord_reply_error(c, from, PL_ERR_NOT_FOUND, "no job %u", m->job_ref.job);
    } else if (!pl_coord_auth_may_see(c, from, j)) {
        pl_coord_reply_error(c, from, PL_ERR_PERMISSION, "job %u belongs to another user", j->id);
        j = NULL;
    }
    return j;
}

/* Tokens sampled so far: the heartbeats' count, or the last stage's own once it is DONE. */
static int64_t s_generated(const pl_coord_job_t *j)
{
    const pl_coord_stage_t *ls = j->n_stages ? &j->stages[j->n_stages - 1] : NULL;
    if (ls && ls->have_stats && ls->stats.has_sink && ls->stats.generated > j->generated)
        return ls->stats.generated;
    return j->generated;
}

/* Throughput from the last stage's clock: prefill ends when every sequence has its first token. */
static json_t *s_throughput(const pl_coord_job_t *j)
{
    const pl_coord_stage_t *ls = j->n_stages ? &j->stages[j->n_stages - 1] : NULL;
    if (!ls || !ls->have_stats)
        return json_null();
    double wall = ls->stats.wall_s, prefill = ls->stats.has_sink ? ls->stats.prefill_s : 0;
    int64_t gen = ls->stats.has_sink ? ls->stats.generated : 0;
    double decode_s = wall - prefill;
    int64_t decoded = gen - j->n_seqs;
    return json_pack("{s:f, s:f, s:I, s:I, s:f, s:f, s:f}", "wall_s", wall, "prefill_s", prefill,
                     "prompt_tokens", (json_int_t)j->prompt_tokens, "generated_tokens",
                     (json_int_t)gen, "prefill_tok_s",
                     prefill > 0 ? (double)j->prompt_tokens / prefill : 0.0, "decode_tok_s",
                     decode_s > 0 && decoded > 0 ? (double)decoded / decode_s : 0.0, "tok_s",
                     wall > 0 ? (double)gen / wall : 0.0);
}

void pl_coord_on_status(pl_coord_t *c, const pl_tx_peer_t *from, const pl_msg_t *m)
{
    pl_coord_job_t *j = s_job_arg(c, from, m);
    if (!j)
        return;
    json_t *stages = json_array();
    double now = pl_now(), end = j->t_end > 0 ? j->t_end : now;
    /* a stage's busy share: its compute over the time the job has run */
    double ran = j->t_run > 0 ? end - j->t_run : 0;
    int64_t seqs_done = 0;
    for (int i = 0; i < j->n_stages; i++) {
        const pl_coord_stage_t *s = &j->stages[i];
        json_t *stats = NULL;
        if (s->have_stats && pl_msg_stats_encode(&s->stats, &stats))
            stats = NULL;
        double busy = s->have_stats ? s->stats.compute_s : s->busy_s;
        double wall = s->have_stats ? s->stats.wall_s : ran;
        json_array_append_new(
            stages, json_pack("{s:i, s:s, s:b, s:b, s:f, s:f, s:o?}", "stage", i, "node",
                              c->nodes[s->node].name, "ready", s->ready, "done", s->done,
                              "busy_s", busy, "busy_pct",
                              wall > 0 ? PL_MIN(100.0, 100.0 * busy / wall) : 0.0, "stats",
                              stats));
    }
    if (j->n_stages)
        seqs_done = j->state == PL_JOB_DONE ? j->n_seqs : j->stages[j->n_stages - 1].seqs_done;
    json_t *body = json_pack("{s:i, s:s, s:s, s:s, s:i, s:O?, s:o, s:o, s:f}", "job", j->id,
                             "state", pl_job_state_name(j->state), "model", j->spec.model,
                             "note", j->error, "sequences", j->n_seqs, "plan", j->plan, "stages",
                             stages, "throughput", s_throughput(j), "elapsed_s",
                             end - j->t_submit);
    /* progress: tokens sampled so far (from heartbeats), and the most the job can produce */
    if (body)
        json_object_set_new(
            body, "progress",
            json_pack("{s:I, s:I, s:I, s:i, s:f, s:f, s:s%}", "generated",
                      (json_int_t)s_generated(j), "at_most",
                      (json_int_t)j->n_seqs * j->spec.gen.max_new_tokens, "sequences_done",
                      (json_int_t)PL_MIN(seqs_done, (int64_t)j->n_seqs), "sequences", j->n_seqs,
                      "running_s", ran, "tok_s", ran > 0 ? (double)s_generated(j) / ran : 0.0,
                      "text", j->stream ? j->stream : "", j->stream_len));
    if (body)
        json_object_set_new(body, "events", pl_coord_events_json(j));
    if (body && j->train) /* a training job: step, loss, tokens/s, schedule, bubble */
        json_object_set_new(body, "train", pl_coord_train_json(j));
    json_t *rec = pl_coord_resume_json(j); /* the last resume after a lost stage */
    if (body && rec)
        json_object_set_new(body, "recovery", rec);
    else
        json_decref(rec);
    pl_coord_reply(c, from, body);
}

void pl_coord_on_results(pl_coord_t *c, const pl_tx_peer_t *from, const pl_msg_t *m)
{
    pl_coord_job_t *j = s_job_arg(c, from, m);
    if (!j)
        return;
    if (j->state != PL_JOB_DONE) {
        pl_coord_reply_error(c, from, PL_ERR_BUSY, "job %u is %s%s%s", j->id,
                             pl_job_state_name(j->state), j->error[0] ? ": " : "", j->error);
        return;
    }
    pl_msg_results_reply_t r = {.job = j->id, .n_results = j->n_results, .results = j->results,
                                .throughput = s_throughput(j)};
    json_t *body;
    if (pl_msg_results_reply_encode(&r, &body))
        body = NULL;
    json_decref(r.throughput);
    pl_coord_reply(c, from, body);
}

/* The operator's view of a node: ready, busy, draining (no new stages; busy ones finish) or
 * unreachable (no heartbeat within dead_after, or never registered). */
static const char *s_node_status(const pl_coord_t *c, const pl_coord_node_t *n)
{
    return !n->alive                               ? "unreachable"
           : pl_coord_node_draining(c, n->name)     ? "draining"
           : n->busy_job                           ? "busy"
                                                   : "ready";
}

/* The stages node i runs now ({job, stage}) and the UCX transports its links used. */
static void s_node_work(const pl_coord_t *c, int i, json_t *stages, json_t *tls)
{
    for (int k = 0; k < c->n_jobs; k++) {
        const pl_coord_job_t *j = c->jobs[k];
        if (pl_coord_job_terminal(j) || j->state == PL_JOB_QUEUED)
            continue;
        for (int s = 0; s < j->n_stages; s++)
            if (j->stages[s].node == i)
                json_array_append_new(stages, json_pack("{s:i, s:i}", "job", j->id, "stage", s));
    }
    for (int k = 0; k < c->n_nodes; k++) {
        const pl_coord_link_t *l = &c->links[i][k];
        bool seen = false;
        size_t x;
        json_t *v;
        if (!l->valid || !l->transport[0])
            continue;
        json_array_foreach(tls, x, v) seen = seen || !strcmp(json_string_value(v), l->transport);
        if (!seen)
            json_array_append_new(tls, json_string(l->transport));
    }
}

static json_t *s_node_json(const pl_coord_t *c, int i)
{
    const pl_coord_node_t *n = &c->nodes[i];
    json_t *devs = json_array();
    for (int d = 0; d < n->n_dev; d++) {
        const pl_coord_dev_t *v = &n->dev[d];
        json_t *dj = json_pack("{s:s, s:s, s:s, s:i, s:I, s:f, s:f, s:f}", "id", v->id,
                               "backend", v->backend, "name", v->name, "cores", v->cores,
                               "mem_bytes", (json_int_t)v->mem_bytes, "gflops", v->gflops,
                               "mem_gbps", v->mem_gbps, "dec_gflops", v->dec_gflops);
        json_object_set_new(dj, "pass_gbps", json_real(v->pass_gbps));
        json_object_set_new(dj, "attn_gflops", json_real(v->attn_gflops));
        json_object_set_new(dj, "host_gbps", json_real(v->host_gbps));
        if (v->flagged)
            json_object_set_new(dj, "flagged", json_string("measured far below its claimed "
                                                           "rates"));
        if (v->n_obs) /* what the planner uses once stages have run on the device */
            json_object_set_new(dj, "learned",
                                json_pack("{s:f, s:f, s:f, s:f, s:f, s:f, s:i}", "gflops",
                                          v->eff_gflops, "mem_gbps", v->eff_mem_gbps, "dec_gflops",
                                          v->eff_dec_gflops, "pass_gbps", v->eff_pass_gbps,
                                          "attn_gflops", v->eff_attn_gflops, "host_gbps",
                                          v->eff_host_gbps, "jobs", v->n_obs));
        json_array_append_new(devs, dj);
    }
    json_t *unav = json_array(), *hb = NULL, *stages = json_array(), *tls = json_array();
    for (int k = 0; unav && k < n->n_unavailable; k++)
        json_array_append_new(unav, json_pack("{s:s, s:s}", "backend",
                                              n->unavailable[k].backend, "why",
                                              n->unavailable[k].why));
    if (n->have_health && pl_msg_heartbeat_encode(&n->health, &hb))
        hb = NULL;
    if (stages && tls)
        s_node_work(c, i, stages, tls);
    const char *version = n->have_health ? n->health.sys.version : "";
    /* the daemon's own uptime when it said, else since it registered */
    double now = pl_now(), up = n->have_health && n->health.sys.uptime_s >= 0
                                    ? n->health.sys.uptime_s + (now - n->last_seen)
                                    : now - n->registered_at;
    return json_pack("{s:s, s:s, s:s, s:s, s:b, s:f, s:f, s:s, s:i, s:o, s:o, s:o, s:o, s:o}",
                     "name", n->name, "host", n->host, "state",
                     n->alive ? (n->busy_job ? "busy" : "idle") : "lost", "status",
                     s_node_status(c, n), "draining", pl_coord_node_draining(c, n->name),
                     "last_seen_s", now - n->last_seen, "uptime_s", up, "version", version, "job", n->busy_job,
                     "devices", devs, "unavailable", unav, "stages", stages, "transports", tls,
                     "heartbeat", hb ? hb : json_null());
}

void pl_coord_on_nodes(pl_coord_t *c, const pl_tx_peer_t *from)
{
    json_t *arr = json_array();
    for (int i = 0; i < c->n_nodes; i++)
        if (c->nodes[i].name[0]) /* not a free slot */
            json_array_append_new(arr, s_node_json(c, i));
    /* nodes the cluster file expects that never registered */
    for (int i = 0; i < c->cfg->n_nodes; i++)
        if (pl_coord_find_node(c, c->cfg->nodes[i].name) < 0)
            json_array_append_new(
                arr, json_pack("{s:s, s:s, s:s, s:s, s:b, s:n, s:i, s:[], s:[], s:[], s:[], s:n}",
                               "name", c->cfg->nodes[i].name, "host", c->cfg->nodes[i].address,
                               "state", "missing", "status", "unreachable", "draining",
                               pl_coord_node_draining(c, c->cfg->nodes[i].name), "last_seen_s",
                               "job", 0, "devices", "unavailable", "stages", "transports",
                               "heartbeat"));
    json_t *sec = json_pack("{s:b, s:i, s:I, s:I, s:I}", "insecure", c->insecure, "client_keys",
                            c->n_clients, "refused_handshakes",
                            (json_int_t)(c->refused_handshakes + pl_tx_zap_refused(c->zap)),
                            "refused_messages", (json_int_t)c->refused_msgs,
                            "refused_stage_messages", (json_int_t)c->refused_stage_msgs);
    pl_coord_reply(c, from, json_pack("{s:o, s:o?}", "nodes", arr, "security", sec));
}

void pl_coord_on_health(pl_coord_t *c, const pl_tx_peer_t *from, const pl_msg_t *m)
{
    int i = pl_coord_find_node(c, m->health.node);
    if (i < 0) {
        pl_coord_reply_error(c, from, PL_ERR_NOT_FOUND, "no node '%s'", m->health.node);
        return;
    }
    pl_coord_reply(c, from, s_node_json(c, i));
}

/* JOBS: every job the asker may see, newest last, with what a table row shows. */
void pl_coord_on_jobs(pl_coord_t *c, const pl_tx_peer_t *from)
{
    json_t *arr = json_array();
    double now = pl_now();
    for (int k = 0; arr && k < c->n_jobs; k++) {
        const pl_coord_job_t *j = c->jobs[k];
        /* auth_may_see's rule, without counting the others' jobs as refusals */
        if (!c->insecure && from->role != PL_TX_ROLE_ADMIN && strcmp(from->user, j->owner))
            continue;
        json_t *nodes = json_array();
        for (int s = 0; nodes && s < j->n_stages; s++)
            json_array_append_new(nodes, json_string(c->nodes[j->stages[s].node].name));
        double end = j->t_end > 0 ? j->t_end : now;
        json_array_append_new(
            arr, json_pack("{s:i, s:s, s:s, s:s, s:i, s:I, s:I, s:i, s:o, s:f, s:s}", "job", j->id,
                           "state", pl_job_state_name(j->state), "model", j->spec.model, "owner",
                           j->owner, "sequences", j->n_seqs, "generated",
                           (json_int_t)s_generated(j), "at_most",
                           (json_int_t)j->n_seqs * j->spec.gen.max_new_tokens, "stages",
                           j->n_stages, "nodes", nodes, "elapsed_s", end - j->t_submit, "note",
                           j->error));
    }
    pl_coord_reply(c, from, json_pack("{s:o}", "jobs", arr));
}

/* One deployment for DEPLOYMENTS: its state, plan (stages on nodes, layer ranges), KV slots,
 * requests live / queued / completed and its output rate since it last became ready. */
static json_t *s_deployment(const pl_coord_t *c, const pl_coord_job_t *j, double now)
{
    const struct pl_coord_dep *d = j->dep;
    json_t *stages = json_array(), *outcomes = json_object();
    for (int s = 0; stages && s < j->n_stages; s++) {
        const pl_coord_stage_t *st = &j->stages[s];
        json_array_append_new(stages, json_pack("{s:i, s:s, s:s, s:i, s:i, s:b}", "stage", s,
                                                "node", c->nodes[st->node].name, "device",
                                                c->nodes[st->node].dev[st->dev].id, "first",
                                                st->first, "last", st->last, "ready", st->ready));
    }
    for (int o = 0; outcomes && o < PL_DEP_OUT_COUNT_; o++)
        json_object_set_new(outcomes, pl_dep_outcome_names[o], json_integer(d->by_outcome[o]));
    int64_t completed = d->by_outcome[PL_DEP_OUT_STOP] + d->by_outcome[PL_DEP_OUT_LENGTH];
    double up = d->t_ready > 0 ? now - d->t_ready : 0;
    int live = PL_MIN(d->n_live, j->n_seqs), queued = PL_MAX(0, d->n_live - j->n_seqs);
    return json_pack("{s:s, s:i, s:s, s:s, s:s, s:s, s:f, s:i, s:i, s:i, s:i, s:i, s:i, s:i, "
                     "s:i, s:i, s:I, s:I, s:f, s:f, s:o, s:o}",
                     "name", j->spec.serve.name, "job", (int)j->id, "model", j->spec.model,
                     "state", pl_coord_dep_state(j), "owner", j->owner, "note", j->error,
                     "created", (double)d->created, "context", j->max_ctx, "kv_slots", j->n_seqs,
                     "kv_slots_asked", j->spec.serve.kv_slots, "max_queue",
                     j->spec.serve.max_queue, "max_tokens", j->spec.serve.max_tokens,
                     "microbatches", j->microbatches, "live", live, "queued", queued,
                     "resumes", j->n_resumes, "completed", (json_int_t)completed,
                     "output_tokens", (json_int_t)d->output_tokens, "ready_s", up, "tok_s",
                     up > 0 ? (double)(d->output_tokens - d->tokens_ready) / up : 0.0,
                     "stages", stages, "requests", outcomes);
}

void pl_coord_on_deployments(pl_coord_t *c, const pl_tx_peer_t *from)
{
    json_t *arr = json_array();
    double now = pl_now();
    /* every user may see the deployments (the API lists them to anyone); undeploy checks the
     * owner as cancel does. Ended ones are left out; a failed one stays until it is trimmed. */
    for (int k = 0; arr && k < c->n_jobs; k++) {
        const pl_coord_job_t *j = c->jobs[k];
        if (j->dep && (!pl_coord_job_terminal(j) || j->state == PL_JOB_FAILED))
            json_array_append_new(arr, s_deployment(c, j, now));
    }
    pl_coord_reply(c, from, json_pack("{s:o}", "deployments", arr));
}
