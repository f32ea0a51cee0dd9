/* The coordinator's event loop and node registry: registration, heartbeats, liveness, and the
 * dispatch of every message to its handler. Nodes have a socket of their own, drained before
 * any client's request and before liveness is judged; clients' messages arrive decoded and
 * checked from the intake thread (coord_intake.c), so that no client message delays a node. */
#include "daemon/coord.h"

#include "common/log.h"
#include "common/util.h"
#include "daemon/coord_int.h"
#include "daemon/coord_intake.h"
#include "daemon/coord_train.h"
#include "daemon/coord_writer.h"
#include "daemon/front.h"
#include "daemon/serve_api.h"
#include "pipeline/trace.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Client requests taken per loop turn: this long, then the node socket and liveness again. */
#define S_CLIENT_BUDGET_S 0.005
/* Node messages taken per loop turn at most (nodes are few and authenticated: a bound that only
 * a broken node reaches, so that the clients are served too). */
#define S_NODE_DRAIN_MAX 4096

/* A node is answered on the node socket; a client (its request from the intake, or a refusal
 * on the intake's own thread) through the intake, which keeps each client's answers in order. */
void pl_coord_reply_msg(pl_coord_t *c, const pl_tx_peer_t *to, const pl_msg_t *m)
{
    if (!to->sock || to->sock != c->node_router) {
        if (!pl_coord_hold_answer(c, to, m)) /* a request's answers wait for its end */
            pl_coord_intake_reply(c->intake, to, m);
    } else if (pl_tx_send(to->sock, to, m)) {
        pl_log_warn_limited("reply to '%.*s': %s", (int)to->len, to->id, pl_error_msg());
    }
}

void pl_coord_reply(pl_coord_t *c, const pl_tx_peer_t *to, json_t *body)
{
    pl_msg_t m;
    if (!body) {
        pl_coord_reply_error(c, to, PL_ERR_NOMEM, "coordinator out of memory");
        return;
    }
    pl_msg_init(&m, PL_MSG_REPLY);
    m.reply.body = body;
    pl_coord_reply_msg(c, to, &m);
    pl_msg_clear(&m);
}

void pl_coord_reply_error(pl_coord_t *c, const pl_tx_peer_t *to, pl_status_t code,
                          const char *fmt, ...)
{
    pl_msg_t m;
    va_list ap;
    pl_msg_init(&m, PL_MSG_ERROR);
    m.error.code = code < 0 && code >= PL_MSG_MIN_CODE ? code : PL_ERR_INVALID;
    va_start(ap, fmt);
    vsnprintf(m.error.message, sizeof(m.error.message), fmt, ap);
    va_end(ap);
    pl_coord_reply_msg(c, to, &m);
}

void pl_coord_send_node(pl_coord_t *c, int node, const pl_msg_t *m)
{
    if (pl_coord_hold_node(c, node, m)) /* after the writes queued before it */
        return;
    const char *name = c->nodes[node].name;
    pl_tx_peer_t to = {.len = strlen(name)};
    memcpy(to.id, name, to.len + 1);
    if (pl_tx_send(c->node_router, &to, m))
        pl_log_warn("node %s: cannot send %s: %s", name, pl_msg_name(m->type), pl_error_msg());
}

int pl_coord_find_node(const pl_coord_t *c, const char *name)
{
    if (!name[0]) /* "" marks a free slot */
        return -1;
    for (int i = 0; i < c->n_nodes; i++)
        if (strcmp(c->nodes[i].name, name) == 0)
            return i;
    return -1;
}

pl_coord_job_t *pl_coord_find_job(pl_coord_t *c, int64_t id)
{
    for (int i = 0; i < c->n_jobs; i++)
        if (c->jobs[i]->id == id)
            return c->jobs[i];
    return NULL;
}

static bool s_valid_name(const char *s, size_t len)
{
    if (len == 0 || len > PL_CFG_NAME_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '-' || ch == '_' || ch == '.'))
            return false;
    }
    return true;
}

/* WELCOME answers a registration and every heartbeat, so a daemon knows its link is alive. */
static void s_welcome(pl_coord_t *c, const pl_tx_peer_t *to)
{
    pl_msg_t w;
    pl_msg_init(&w, PL_MSG_WELCOME);
    w.welcome = (pl_msg_welcome_t){.heartbeat_ms = c->cfg->heartbeat_ms,
                                   .dead_after_ms = c->cfg->dead_after_ms,
                                   .clock_ns = pl_trace_clock_wall_ns()};
    pl_coord_reply_msg(c, to, &w);
}

/* Stages a node runs that no current assignment owns (an earlier epoch, a job this coordinator
 * does not know or has finished) are canceled; until they are gone the node is not idle. */
static void s_reconcile(pl_coord_t *c, int node, const pl_msg_progress_t *st, int n)
{
    c->nodes[node].n_stale = 0;
    for (int k = 0; k < n; k++) {
        const pl_msg_progress_t *e = &st[k];
        const pl_coord_job_t *j = pl_coord_find_job(c, e->job);
        bool owned = j && (j->state == PL_JOB_LOADING || j->state == PL_JOB_RUNNING) &&
                     e->epoch == j->epoch && e->stage < j->n_stages &&
                     j->stages[e->stage].node == node;
        if (owned)
            continue;
        pl_msg_t m;
        pl_msg_init(&m, PL_MSG_CANCEL);
        m.cancel = (pl_msg_cancel_t){.job = e->job, .stage = e->stage, .epoch = e->epoch};
        pl_log_info("node %s: job %u stage %d epoch %u is no current assignment: canceled",
                    c->nodes[node].name, e->job, e->stage, e->epoch);
        pl_coord_send_node(c, node, &m);
        c->nodes[node].n_stale++;
    }
}

static void s_on_hello(pl_coord_t *c, const pl_tx_peer_t *from, const pl_msg_hello_t *h)
{
    pl_coord_node_t tmp = {0}; /* its protocol: pl_coord_auth_check's */
    if (strlen(h->node) != from->len || memcmp(h->node, from->id, from->len) != 0 ||
        !s_valid_name(h->node, strlen(h->node))) {
        pl_coord_reply_error(c, from, PL_ERR_INVALID, "node name '%s' must match the socket "
                             "identity and use [A-Za-z0-9_.-]", h->node);
        return;
    }
    int i = pl_coord_find_node(c, h->node);
    if (i < 0) {
        for (i = 0; i < c->n_nodes && c->nodes[i].name[0]; i++) /* a slot an expired node left */
            ;
        if (i == PL_COORD_MAX_NODES) {
            pl_coord_reply_error(c, from, PL_ERR_RANGE, "the cluster is full (%d nodes)",
                                 PL_COORD_MAX_NODES);
            return;
        }
        if (i == c->n_nodes)
            c->n_nodes++;
    } else if (c->nodes[i].alive && c->nodes[i].busy_job) {
        pl_coord_node_lost(c, i, "node re-registered (restarted)");
    }
    pl_coord_node_t *n = &c->nodes[i];
    snprintf(tmp.name, sizeof(tmp.name), "%s", h->node);
    snprintf(tmp.host, sizeof(tmp.host), "%s", h->host);
    for (int d = 0; d < h->n_devices && d < PL_COORD_MAX_DEVS; d++) {
        const pl_msg_device_t *v = &h->devices[d];
        pl_coord_dev_t *cd = &tmp.dev[tmp.n_dev++];
        snprintf(cd->id, sizeof(cd->id), "%s", v->id);
        snprintf(cd->backend, sizeof(cd->backend), "%s", v->backend);
        snprintf(cd->name, sizeof(cd->name), "%s", v->name);
        cd->cores = v->cores;
        cd->cpu_mask = v->cpu_mask;
        cd->mem_bytes = v->mem_bytes;
        cd->gflops = v->gflops;
        cd->mem_gbps = v->mem_gbps;
        cd->dec_gflops = v->dec_gflops;
        cd->pass_gbps = v->pass_gbps;
        cd->attn_gflops = v->attn_gflops;
        cd->host_gbps = v->host_gbps;
    }
    tmp.n_unavailable = h->n_unavailable;
    memcpy(tmp.unavailable, h->unavailable, sizeof(tmp.unavailable));
    tmp.alive = true;
    tmp.health = h->health; /* its health until the first heartbeat */
    tmp.have_health = true;
    tmp.last_seen = tmp.registered_at = pl_now();
    *n = tmp; /* learned device rates start again from the new calibration */
    pl_coord_forget_node(c, i);
    pl_log_info("node %s registered from %s: %d device(s)%s%s", n->name, n->host, n->n_dev,
                n->n_dev ? ", first " : "", n->n_dev ? n->dev[0].id : "");
    s_welcome(c, from);
    s_reconcile(c, i, h->health.stages, h->health.n_stages);
    pl_coord_schedule(c);
}

static void s_on_heartbeat(pl_coord_t *c, const pl_tx_peer_t *from, const pl_msg_heartbeat_t *h)
{
    char name[PL_CFG_NAME_MAX + 1];
    snprintf(name, sizeof(name), "%.*s", (int)PL_MIN(from->len, PL_CFG_NAME_MAX), from->id);
    int i = pl_coord_find_node(c, name);
    if (i < 0 || !c->nodes[i].alive) {
        /* the code tells the daemon to register again (the coordinator restarted) */
        pl_coord_reply_error(c, from, PL_ERR_NOT_FOUND, "node '%s' is not registered", name);
        return;
    }
    c->nodes[i].last_seen = pl_now();
    s_welcome(c, from); /* the answer a daemon's readiness waits for */
    c->nodes[i].health = *h;
    c->nodes[i].have_health = true;
    /* progress of the jobs whose last stage runs here */
    for (int k = 0; k < h->n_stages; k++) {
        const pl_msg_progress_t *e = &h->stages[k];
        pl_coord_job_t *j = pl_coord_find_job(c, e->job);
        if (!j || j->state != PL_JOB_RUNNING || e->epoch != j->epoch ||
            e->stage >= j->n_stages || j->stages[e->stage].node != i)
            continue;
        j->stages[e->stage].busy_s = e->busy_s;
        j->stages[e->stage].seqs_done = e->seqs_done;
        if (e->stage != j->n_stages - 1)
            continue;
        if (e->generated > j->generated)
            j->generated = e->generated;
        if (e->text_len > 0)
            pl_coord_stream_piece(j, e->epoch, e->text_at, h->text + e->text_off, e->text_len);
    }
    s_reconcile(c, i, h->stages, h->n_stages);
}

/* Whether a job that is not finished still has a stage on node i (its slot must stay). */
static bool s_node_in_use(const pl_coord_t *c, int i)
{
    for (int k = 0; k < c->n_jobs; k++) {
        const pl_coord_job_t *j = c->jobs[k];
        if (pl_coord_job_terminal(j) || j->state == PL_JOB_QUEUED)
            continue;
        for (int s = 0; s < j->n_stages; s++)
            if (j->stages[s].node == i)
                return true;
    }
    return false;
}

static void s_check_liveness(pl_coord_t *c)
{
    double now = pl_now(), limit = c->cfg->dead_after_ms / 1000.0;
    double expire = c->cfg->node_expire_ms / 1000.0;
    for (int i = 0; i < c->n_nodes; i++) {
        pl_coord_node_t *n = &c->nodes[i];
        if (n->alive && now - n->last_seen > limit) {
            char why[128];
            snprintf(why, sizeof(why), "no heartbeat for %.1f s", now - n->last_seen);
            pl_log_warn("node %s lost: %s", n->name, why);
            pl_coord_node_lost(c, i, why);
            n->alive = false;
            n->lost_at = now;
        } else if (n->name[0] && !n->alive && now - n->lost_at > expire && !s_node_in_use(c, i)) {
            /* the registry must not fill for good with nodes that never come back */
            pl_log_info("node %s: lost for %.0f s, registration dropped", n->name,
                        now - n->lost_at);
            pl_coord_forget_node(c, i);
            memset(n, 0, sizeof(*n));
        }
    }
}

/* BYE: a daemon is stopping; its jobs fail now instead of after dead_after_ms of silence. */
static void s_on_bye(pl_coord_t *c, const pl_tx_peer_t *from, const pl_msg_health_t *b)
{
    int i = pl_coord_find_node(c, b->node);
    if (i < 0 || strlen(b->node) != from->len || memcmp(b->node, from->id, from->len) != 0 ||
        !c->nodes[i].alive)
        return; /* only a registered node may say goodbye for itself; nothing to answer */
    pl_log_info("node %s: stopping (it said so)", c->nodes[i].name);
    pl_coord_node_lost(c, i, "the daemon stopped");
    c->nodes[i].alive = false;
    c->nodes[i].lost_at = pl_now();
}

static void s_on_shutdown(pl_coord_t *c, const pl_tx_peer_t *from)
{
    pl_msg_t m;
    pl_msg_init(&m, PL_MSG_SHUTDOWN);
    for (int i = 0; i < c->n_nodes; i++)
        if (c->nodes[i].alive)
            pl_coord_send_node(c, i, &m);
    pl_coord_reply(c, from, json_pack("{s:s}", "status", "shutting down"));
    c->shutdown = true;
}

/* A message that passed its checks (a node's here, a client's on the intake thread). */
static void s_dispatch(pl_coord_t *c, const pl_tx_peer_t *from, pl_msg_t *m)
{
    switch (m->type) {
    case PL_MSG_HELLO: s_on_hello(c, from, &m->hello); break;
    case PL_MSG_HEARTBEAT: s_on_heartbeat(c, from, &m->heartbeat); break;
    case PL_MSG_READY:
    case PL_MSG_DONE:
    case PL_MSG_FAIL: pl_coord_on_stage_msg(c, from, m); break;
    case PL_MSG_STATUS: pl_coord_on_status(c, from, m); break;
    case PL_MSG_RESULTS: pl_coord_on_results(c, from, m); break;
    case PL_MSG_KILL: pl_coord_on_kill(c, from, m); break;
    case PL_MSG_NODES: pl_coord_on_nodes(c, from); break;
    case PL_MSG_HEALTH: pl_coord_on_health(c, from, m); break;
    case PL_MSG_SHUTDOWN: s_on_shutdown(c, from); break;
    case PL_MSG_BYE: s_on_bye(c, from, &m->bye); break;
    case PL_MSG_PROGRESS: pl_coord_on_progress(c, from, m); break;
    case PL_MSG_TRAIN_STEP: pl_coord_on_train_step(c, from, m); break;
    case PL_MSG_JOBS: pl_coord_on_jobs(c, from); break;
    case PL_MSG_DRAIN: pl_coord_on_drain(c, from, &m->drain); break;
    case PL_MSG_TRACE: pl_coord_on_trace(c, from, m); break;
    case PL_MSG_TRACED: pl_coord_on_traced(c, from, m); break;
    case PL_MSG_SEQ_OUT: pl_coord_deploy_on_seq_out(c, from, m); break;
    case PL_MSG_DEPLOYMENTS: pl_coord_on_deployments(c, from); break;
    default:
        pl_log_warn_limited("'%.*s' sent %s, which the coordinator does not take", (int)from->len,
                            from->id, pl_msg_name(m->type));
        pl_coord_reply_error(c, from, PL_ERR_PROTOCOL, "unexpected message type %s",
                             pl_msg_name(m->type));
    }
}

void pl_coord_check_handshakes(pl_coord_t *c, pl_tx_sock_t *router)
{
    char why[256];
    while (pl_tx_sock_handshake_error(router, why, sizeof(why))) {
        double now = pl_now();
        c->refused_handshakes++;
        if (now - c->last_refusal_log >= 1.0) {
            c->last_refusal_log = now;
            pl_log_warn("refused a control-plane connection: %s (%ld so far)", why,
                        c->refused_handshakes + pl_tx_zap_refused(c->zap));
        }
    }
}

/* Take one message from the node socket and dispatch it; false when none was waiting. */
static bool s_take_node(pl_coord_t *c)
{
    pl_msg_t m;
    pl_tx_peer_t from = {0};
    pl_status_t rs = pl_tx_recv(c->node_router, 0, &from, NULL, &m);
    if (rs == PL_ERR_BUSY)
        return false;
    if (rs) {
        pl_log_warn_limited("dropped a message: %s", pl_error_msg());
        if (from.len)
            pl_coord_reply_error(c, &from, rs, "%s", pl_error_msg());
        return true;
    }
    if (pl_coord_auth_check(c, &from, m.type)) /* else refused, counted and answered */
        s_dispatch(c, &from, &m);
    pl_msg_clear(&m);
    return true;
}

/* Handle one client request from the intake; false when none was waiting. */
static bool s_take_client(pl_coord_t *c)
{
    pl_coord_req_t r;
    if (!pl_coord_intake_take(c->intake, &r))
        return false;
    pl_coord_hold_begin(c);
    if (r.job && r.msg.type == PL_MSG_PLAN)
        pl_coord_on_plan(c, &r.from, &r.job);
    else if (r.job)
        pl_coord_on_submit(c, &r.from, &r.job);
    else
        s_dispatch(c, &r.from, &r.msg);
    pl_coord_req_clear(&r);
    pl_coord_hold_end(c, &r.from); /* its answers, then its end: after what it wrote */
    return true;
}

/* Both routers: the node socket's own endpoint (it must differ from the clients'), handover of
 * identities restarted peers reuse, authentication, then bind. */
static pl_status_t s_listen(pl_coord_t *c, bool embedded)
{
    const pl_cfg_cluster_t *cfg = c->cfg;
    pl_status_t st;
    if ((st = pl_cfg_node_endpoint(cfg->endpoint, cfg->node_endpoint, c->node_ep,
                                   sizeof(c->node_ep))))
        return st;
    if (strcmp(c->node_ep, cfg->endpoint) == 0)
        return pl_error(PL_ERR_INVALID, "coordinator.node_endpoint %s is coordinator.endpoint: "
                        "nodes need an endpoint of their own", c->node_ep);
    if ((st = pl_tx_ctx_new(&c->ctx)) || (st = pl_tx_sock_new(c->ctx, PL_TX_ROUTER, &c->router)) ||
        (st = pl_tx_sock_handover(c->router)) ||
        (st = pl_tx_sock_new(c->ctx, PL_TX_ROUTER, &c->node_router)) ||
        (st = pl_tx_sock_handover(c->node_router)) || (st = pl_coord_auth_start(c, embedded)) ||
        (st = pl_tx_sock_bind(c->router, cfg->endpoint)) ||
        (st = pl_tx_sock_bind(c->node_router, c->node_ep)))
        return st;
    if (c->insecure)
        pl_log_warn("coordinator listening on %s, nodes on %s, INSECURE: no encryption, no "
                    "authentication", cfg->endpoint, c->node_ep);
    else
        pl_log_info("coordinator listening on %s, nodes on %s (CURVE, %d client key(s) allowed)",
                    cfg->endpoint, c->node_ep, c->n_clients);
    return PL_OK;
}

pl_status_t pl_coord_run(const pl_cfg_cluster_t *cfg, const char *state_db, bool embedded,
                         volatile sig_atomic_t *stop)
{
    pl_serve_hub_t *hub = NULL;
    pl_status_t st = pl_serve_hub_create(&hub);
    if (st)
        return st;
    st = pl_coord_serve(cfg, state_db, embedded, hub, stop);
    pl_serve_hub_destroy(&hub);
    return st;
}

pl_status_t pl_coord_serve(const pl_cfg_cluster_t *cfg, const char *state_db, bool embedded,
                           pl_serve_hub_t *hub, volatile sig_atomic_t *stop)
{
    pl_coord_t c = {.cfg = cfg, .next_job = 1, .next_epoch = 1, .hub = hub};
    pl_front_t *front = NULL;
    pl_status_t st;

    /* the state first: no message is taken before the jobs and counters are back */
    if (state_db && ((st = pl_coord_store_open(state_db, &c.store)) || (st = pl_coord_restore(&c))))
        goto out;
    /* from here on the loop's writes are queued to a thread of their own */
    if (c.store && (st = pl_coord_writer_start(c.store, &c.writer)))
        goto out;
    /* the OpenAI API joins the front when coordinator.http is configured */
    pl_http_route_t api_routes[PL_SERVE_API_N_ROUTES];
    int n_api = 0;
    if (cfg->http.port && (st = pl_serve_api_new(&cfg->http, c.hub, &c.serve_api)))
        goto out;
    if (c.serve_api)
        n_api = pl_serve_api_routes(c.serve_api, api_routes);
    if ((st = pl_front_start(&cfg->http, api_routes, n_api, &front)) ||
        (st = pl_coord_metrics_init(&c, pl_front_metrics(front))))
        goto out;

    if ((st = s_listen(&c, embedded)))
        goto out;
    /* the client socket is the intake thread's from here on */
    if ((st = pl_coord_intake_start(&c, c.store ? pl_coord_store_path(c.store) : NULL, &c.router,
                                    &c.intake)))
        goto out;
    pl_coord_intake_publish(c.intake, pl_coord_unfinished(&c)); /* the restored jobs */
    pl_front_set_ready(front, true, NULL); /* listening, and its state is loaded */
    pl_coord_deploy_publish(&c);
    bool clients_left = false; /* the last turn's budget ended with client messages taken */
    while (!*stop && !c.shutdown) {
        int fds[3] = {pl_serve_hub_fd(hub), pl_coord_intake_fd(c.intake),
                      c.writer ? pl_coord_writer_fd(c.writer) : -1};
        bool ready, fd_ready[3] = {0};
        long wait_ms = clients_left ? 0 : PL_MAX(50, cfg->heartbeat_ms / 2);
        if ((st = pl_tx_poll_fds(&c.node_router, 1, fds, c.writer ? 3 : 2, wait_ms, &ready,
                                 fd_ready)))
            break;
        if (fd_ready[2]) /* commits done: what waited for them is answered */
            pl_coord_saved(&c);
        /* every node message first; liveness only then, so that queued heartbeats count */
        for (int k = 0; k < S_NODE_DRAIN_MAX && s_take_node(&c); k++)
            ;
        s_check_liveness(&c);
        if (fd_ready[0])
            pl_coord_deploy_on_hub(&c);
        /* client requests (decoded and checked already) for a time budget, the node socket
         * drained again before each: a heartbeat waits for one request's handling at most */
        double until = pl_now() + S_CLIENT_BUDGET_S;
        clients_left = false;
        while (s_take_client(&c)) {
            for (int k = 0; k < S_NODE_DRAIN_MAX && s_take_node(&c); k++)
                ;
            if (pl_now() >= until) {
                clients_left = true;
                break;
            }
        }
        pl_coord_check_handshakes(&c, c.node_router); /* the clients': the intake's */
        pl_coord_schedule(&c);
        pl_coord_deploy_tick(&c);
        pl_coord_metrics_update(&c);
        pl_coord_intake_publish(c.intake, pl_coord_unfinished(&c));
    }
    if (c.shutdown) /* let the SHUTDOWN replies leave before the socket closes */
        usleep(200 * 1000);
out:
    /* every queued write committed, then what waited for it sent, before the intake stops; the
     * failures so far handled first (a held "queued" of a job not saved becomes its refusal,
     * a lost row is written again whole), then what that queued is committed by the stop */
    while (c.writer && c.committed < pl_coord_writer_queued(c.writer)) {
        pl_coord_writer_wait(c.writer); /* handling a failure may queue a write: until none */
        pl_coord_saved(&c);
    }
    pl_coord_writer_stop(&c.writer);
    c.committed = UINT64_MAX;
    pl_coord_hold_release(&c);
    pl_coord_hold_free(&c);
    pl_coord_drain_free(&c);
    pl_coord_intake_stop(&c.intake); /* its answers sent; it reads c, so first */
    pl_front_stop(&front); /* its threads read nothing of c, but stop them first all the same */
    pl_serve_api_destroy(&c.serve_api); /* no HTTP thread uses it now */
    for (int i = 0; i < c.n_jobs; i++)
        pl_coord_job_free(c.jobs[i]);
    free(c.jobs);
    pl_coord_trace_free_all(&c);
    pl_coord_deploy_free_all(&c);
    pl_tx_sock_destroy(&c.router);
    pl_tx_sock_destroy(&c.node_router);
    pl_tx_zap_stop(&c.zap);
    pl_tx_ctx_destroy(&c.ctx);
    pl_coord_store_close(&c.store);
    return st;
}
