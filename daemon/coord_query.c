/* The coordinator's answers to pipectl: job status with its plan and throughput, results,
 * the node table, and one node's health. */
#include "common/util.h"
#include "daemon/coord_int.h"

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
    for (int i = 0; i < j->n_stages; i++) {
        json_t *stats = NULL;
        if (j->stages[i].have_stats && pl_msg_stats_encode(&j->stages[i].stats, &stats))
            stats = NULL;
        json_array_append_new(stages, json_pack("{s:i, s:b, s:b, s:o?}", "stage", i, "ready",
                                                j->stages[i].ready, "done", j->stages[i].done,
                                                "stats", stats));
    }
    double now = pl_now(), end = j->t_end > 0 ? j->t_end : now;
    json_t *body = json_pack("{s:i, s:s, s:s, s:s, s:i, s:O?, s:o, s:o, s:f}", "job", j->id,
                             "state", pl_job_state_name(j->state), "model", j->spec.model,
                             "note", j->error, "sequences", j->n_seqs, "plan", j->plan, "stages",
                             stages, "throughput", s_throughput(j), "elapsed_s",
                             end - j->t_submit);
    /* progress: tokens sampled so far (from heartbeats), and the most the job can produce */
    if (body)
        json_object_set_new(body, "progress",
                            json_pack("{s:I, s:I, s:s%}", "generated",
                                      (json_int_t)j->generated, "at_most",
                                      (json_int_t)j->n_seqs * j->spec.gen.max_new_tokens,
                                      "text", j->stream ? j->stream : "", j->stream_len));
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

static json_t *s_node_json(const pl_coord_node_t *n)
{
    json_t *devs = json_array();
    for (int d = 0; d < n->n_dev; d++) {
        const pl_coord_dev_t *v = &n->dev[d];
        json_t *dj = json_pack("{s:s, s:s, s:s, s:i, s:I, s:f, s:f}", "id", v->id, "backend",
                               v->backend, "name", v->name, "cores", v->cores, "mem_bytes",
                               (json_int_t)v->mem_bytes, "gflops", v->gflops, "mem_gbps",
                               v->mem_gbps);
        if (v->flagged)
            json_object_set_new(dj, "flagged", json_string("measured far below its claimed "
                                                           "rates"));
        if (v->n_obs) /* what the planner uses once stages have run on the device */
            json_object_set_new(dj, "learned", json_pack("{s:f, s:f, s:i}", "gflops",
                                                         v->eff_gflops, "mem_gbps",
                                                         v->eff_mem_gbps, "jobs", v->n_obs));
        json_array_append_new(devs, dj);
    }
    return json_pack("{s:s, s:s, s:s, s:f, s:i, s:o}", "name", n->name, "host", n->host, "state",
                     n->alive ? (n->busy_job ? "busy" : "idle") : "lost", "last_seen_s",
                     pl_now() - n->last_seen, "job", n->busy_job, "devices", devs);
}

void pl_coord_on_nodes(pl_coord_t *c, const pl_tx_peer_t *from)
{
    json_t *arr = json_array();
    for (int i = 0; i < c->n_nodes; i++)
        if (c->nodes[i].name[0]) /* not a free slot */
            json_array_append_new(arr, s_node_json(&c->nodes[i]));
    /* nodes the cluster file expects that never registered */
    for (int i = 0; i < c->cfg->n_nodes; i++)
        if (pl_coord_find_node(c, c->cfg->nodes[i].name) < 0)
            json_array_append_new(arr, json_pack("{s:s, s:s, s:s, s:n, s:i, s:[]}", "name",
                                                 c->cfg->nodes[i].name, "host",
                                                 c->cfg->nodes[i].address, "state", "missing",
                                                 "last_seen_s", "job", 0, "devices"));
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
    const pl_coord_node_t *n = &c->nodes[i];
    json_t *body = s_node_json(n), *unav = json_array(), *hb = NULL;
    for (int k = 0; unav && k < n->n_unavailable; k++)
        json_array_append_new(unav, json_pack("{s:s, s:s}", "backend",
                                              n->unavailable[k].backend, "why",
                                              n->unavailable[k].why));
    if (n->have_health && pl_msg_heartbeat_encode(&n->health, &hb))
        hb = NULL;
    json_object_set_new(body, "unavailable", unav);
    json_object_set_new(body, "heartbeat", hb ? hb : json_null());
    json_object_set_new(body, "uptime_s", json_real(pl_now() - n->registered_at));
    pl_coord_reply(c, from, body);
}
