/* The coordinator's event loop and node registry: registration, heartbeats, liveness, and the
 * dispatch of every message to its handler. */
#include "daemon/coord.h"

#include "common/json.h"
#include "common/log.h"
#include "common/util.h"
#include "daemon/coord_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

const char *pl_job_state_name(pl_job_state_t s)
{
    static const char *names[] = {"queued", "loading", "running", "done", "failed", "canceled"};
    return names[s];
}

void pl_coord_reply(pl_coord_t *c, const pl_ctl_msg_t *to, pl_msg_type_t type, json_t *body)
{
    if (pl_ctl_send(c->router, to->identity, to->identity_len, type, body))
        pl_log_warn("reply to '%.*s': %s", (int)to->identity_len, to->identity, pl_error_msg());
    json_decref(body);
}

void pl_coord_reply_error(pl_coord_t *c, const pl_ctl_msg_t *to, const char *fmt, ...)
{
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    pl_coord_reply(c, to, PL_MSG_ERROR, json_pack("{s:s}", "error", buf));
}

void pl_coord_send_node(pl_coord_t *c, int node, pl_msg_type_t type, json_t *body)
{
    const char *name = c->nodes[node].name;
    if (pl_ctl_send(c->router, name, strlen(name), type, body))
        pl_log_warn("node %s: cannot send %s: %s", name, pl_msg_name(type), pl_error_msg());
    json_decref(body);
}

int pl_coord_find_node(const pl_coord_t *c, const char *name)
{
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

static pl_status_t s_parse_devices(const json_t *arr, pl_coord_node_t *n)
{
    size_t i;
    json_t *d;
    n->n_dev = 0;
    json_array_foreach(arr, i, d)
    {
        pl_coord_dev_t *v = &n->dev[n->n_dev];
        int64_t cores = 0, mem = 0;
        double gf = 0, bw = 0;
        pl_status_t st;
        if ((st = pl_json_str(d, "id", v->id, sizeof(v->id) - 1)) ||
            (st = pl_json_str(d, "backend", v->backend, sizeof(v->backend) - 1)) ||
            (st = pl_json_str(d, "name", v->name, sizeof(v->name) - 1)) ||
            (st = pl_json_int(d, "cores", 0, 1 << 20, &cores)) ||
            (st = pl_json_int(d, "mem_bytes", 0, INT64_MAX, &mem)) ||
            (st = pl_json_num(d, "gflops", 0, 1e9, &gf)) ||
            (st = pl_json_num(d, "mem_gbps", 0, 1e7, &bw)))
            return pl_error_prefix(st, "device %zu: ", i);
        v->cores = (int)cores;
        v->mem_bytes = (uint64_t)mem;
        v->gflops = gf;
        v->mem_gbps = bw;
        n->n_dev++;
    }
    return PL_OK;
}

static void s_on_hello(pl_coord_t *c, const pl_ctl_msg_t *m)
{
    char name[PL_CFG_NAME_MAX + 1];
    int64_t proto;
    json_t *devs;
    pl_coord_node_t tmp = {0};
    pl_status_t st;

    if ((st = pl_json_int(m->body, "proto", 0, INT32_MAX, &proto)) ||
        (st = pl_json_str(m->body, "node", name, PL_CFG_NAME_MAX)) ||
        (st = pl_json_array(m->body, "devices", PL_COORD_MAX_DEVS, &devs)) ||
        (st = pl_json_str(m->body, "host", tmp.host, sizeof(tmp.host) - 1)) ||
        (st = s_parse_devices(devs, &tmp))) {
        pl_log_warn("HELLO from '%.*s': %s", (int)m->identity_len, m->identity, pl_error_msg());
        pl_coord_reply_error(c, m, "HELLO rejected: %s", pl_error_msg());
        return;
    }
    if (proto != PL_PROTO_VERSION) {
        pl_coord_reply_error(c, m, "protocol version %lld, the coordinator speaks %d",
                             (long long)proto, PL_PROTO_VERSION);
        return;
    }
    if (strlen(name) != m->identity_len || memcmp(name, m->identity, m->identity_len) != 0 ||
        !s_valid_name(name, strlen(name))) {
        pl_coord_reply_error(c, m, "node name '%s' must match the socket identity and use "
                             "[A-Za-z0-9_.-]", name);
        return;
    }
    int i = pl_coord_find_node(c, name);
    if (i < 0) {
        if (c->n_nodes == PL_COORD_MAX_NODES) {
            pl_coord_reply_error(c, m, "the cluster is full (%d nodes)", PL_COORD_MAX_NODES);
            return;
        }
        i = c->n_nodes++;
    } else if (c->nodes[i].alive && c->nodes[i].busy_job) {
        pl_coord_node_lost(c, i, "node re-registered (restarted)");
    }
    pl_coord_node_t *n = &c->nodes[i];
    json_decref(n->hello);
    json_decref(n->health);
    snprintf(tmp.name, sizeof(tmp.name), "%s", name);
    tmp.alive = true;
    tmp.last_seen = tmp.registered_at = pl_now();
    tmp.hello = json_incref(m->body);
    *n = tmp; /* learned device rates start again from the new calibration */
    pl_coord_forget_node(c, i);
    pl_log_info("node %s registered from %s: %d device(s)%s%s", name, n->host, n->n_dev,
                n->n_dev ? ", first " : "", n->n_dev ? n->dev[0].id : "");
    pl_coord_reply(c, m, PL_MSG_WELCOME,
                   json_pack("{s:i, s:i}", "heartbeat_ms", c->cfg->heartbeat_ms, "dead_after_ms",
                             c->cfg->dead_after_ms));
    pl_coord_schedule(c);
}

static void s_on_heartbeat(pl_coord_t *c, const pl_ctl_msg_t *m)
{
    char name[PL_CFG_NAME_MAX + 1];
    snprintf(name, sizeof(name), "%.*s", (int)PL_MIN(m->identity_len, PL_CFG_NAME_MAX),
             m->identity);
    int i = pl_coord_find_node(c, name);
    if (i < 0 || !c->nodes[i].alive) {
        pl_coord_reply_error(c, m, "node '%s' is not registered", name);
        return;
    }
    c->nodes[i].last_seen = pl_now();
    json_decref(c->nodes[i].health);
    c->nodes[i].health = json_incref(m->body);
    /* progress of the jobs whose last stage runs here; entries that do not check out are ignored */
    size_t k;
    json_t *e, *stages = json_object_get(m->body, "stages");
    json_array_foreach(stages, k, e)
    {
        int64_t id, stage, gen;
        if (k >= 64 || pl_json_int(e, "job", 1, UINT32_MAX, &id) ||
            pl_json_int(e, "stage", 0, PL_COORD_MAX_STAGES - 1, &stage) ||
            pl_json_int(e, "generated", 0, INT64_MAX, &gen))
            continue;
        pl_coord_job_t *j = pl_coord_find_job(c, id);
        if (j && j->state == PL_JOB_RUNNING && stage == j->n_stages - 1 &&
            j->stages[stage].node == i && gen > j->generated)
            j->generated = gen;
    }
}

static void s_check_liveness(pl_coord_t *c)
{
    double now = pl_now(), limit = c->cfg->dead_after_ms / 1000.0;
    for (int i = 0; i < c->n_nodes; i++) {
        pl_coord_node_t *n = &c->nodes[i];
        if (n->alive && now - n->last_seen > limit) {
            char why[128];
            snprintf(why, sizeof(why), "no heartbeat for %.1f s", now - n->last_seen);
            pl_log_warn("node %s lost: %s", n->name, why);
            pl_coord_node_lost(c, i, why);
            n->alive = false;
        }
    }
}

static void s_on_shutdown(pl_coord_t *c, const pl_ctl_msg_t *m)
{
    for (int i = 0; i < c->n_nodes; i++)
        if (c->nodes[i].alive)
            pl_coord_send_node(c, i, PL_MSG_SHUTDOWN, json_object());
    pl_coord_reply(c, m, PL_MSG_REPLY, json_pack("{s:s}", "status", "shutting down"));
    c->shutdown = true;
}

static void s_dispatch(pl_coord_t *c, const pl_ctl_msg_t *m)
{
    switch (m->type) {
    case PL_MSG_HELLO: s_on_hello(c, m); break;
    case PL_MSG_HEARTBEAT: s_on_heartbeat(c, m); break;
    case PL_MSG_READY:
    case PL_MSG_DONE:
    case PL_MSG_FAIL: pl_coord_on_stage_msg(c, m); break;
    case PL_MSG_SUBMIT: pl_coord_on_submit(c, m); break;
    case PL_MSG_STATUS: pl_coord_on_status(c, m); break;
    case PL_MSG_RESULTS: pl_coord_on_results(c, m); break;
    case PL_MSG_KILL: pl_coord_on_kill(c, m); break;
    case PL_MSG_NODES: pl_coord_on_nodes(c, m); break;
    case PL_MSG_HEALTH: pl_coord_on_health(c, m); break;
    case PL_MSG_SHUTDOWN: s_on_shutdown(c, m); break;
    case PL_MSG_PLAN: pl_coord_on_plan(c, m); break;
    default:
        pl_log_warn("'%.*s' sent %s, which the coordinator does not take", (int)m->identity_len,
                    m->identity, pl_msg_name(m->type));
        pl_coord_reply_error(c, m, "unexpected message type %s", pl_msg_name(m->type));
    }
}

pl_status_t pl_coord_run(const pl_cfg_cluster_t *cfg, volatile sig_atomic_t *stop)
{
    pl_coord_t c = {.cfg = cfg, .next_job = 1};
    pl_status_t st = PL_OK;
    void *zctx = zmq_ctx_new();
    int handover = 1;

    c.router = zmq_socket(zctx, ZMQ_ROUTER);
    pl_ctl_socket_setup(c.router);
    zmq_setsockopt(c.router, ZMQ_ROUTER_HANDOVER, &handover, sizeof(handover));
    if (cfg->secret_key[0] && (st = pl_ctl_curve_server(c.router, cfg->secret_key)))
        goto out;
    if (zmq_bind(c.router, cfg->endpoint) != 0) {
        st = pl_error(PL_ERR_TRANSPORT, "bind %s: %s", cfg->endpoint, zmq_strerror(zmq_errno()));
        goto out;
    }
    pl_log_info("coordinator listening on %s%s", cfg->endpoint,
                cfg->secret_key[0] ? " (CURVE encrypted)" : "");
    while (!*stop && !c.shutdown) {
        zmq_pollitem_t it = {.socket = c.router, .events = ZMQ_POLLIN};
        int rc = zmq_poll(&it, 1, PL_MAX(50, cfg->heartbeat_ms / 2));
        if (rc < 0 && zmq_errno() != EINTR) {
            st = pl_error(PL_ERR_TRANSPORT, "poll: %s", zmq_strerror(zmq_errno()));
            break;
        }
        for (int k = 0; rc > 0 && k < 256; k++) { /* drain, bounded so liveness still runs */
            pl_ctl_msg_t m;
            pl_status_t rs = pl_ctl_recv(c.router, true, ZMQ_DONTWAIT, &m);
            if (rs == PL_ERR_BUSY)
                break;
            if (rs) {
                pl_log_warn("dropped a message: %s", pl_error_msg());
                if (m.identity_len)
                    pl_coord_reply_error(&c, &m, "%s", pl_error_msg());
                continue;
            }
            s_dispatch(&c, &m);
            pl_ctl_msg_clear(&m);
        }
        s_check_liveness(&c);
        pl_coord_schedule(&c);
    }
    if (c.shutdown) /* let the SHUTDOWN replies leave before the socket closes */
        zmq_poll(NULL, 0, 200);
out:
    for (int i = 0; i < c.n_jobs; i++)
        pl_coord_job_free(c.jobs[i]);
    free(c.jobs);
    for (int i = 0; i < c.n_nodes; i++) {
        json_decref(c.nodes[i].hello);
        json_decref(c.nodes[i].health);
    }
    zmq_close(c.router);
    zmq_ctx_term(zctx);
    return st;
}
