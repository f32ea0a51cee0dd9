/* The coordinator's authentication and authorisation: which keys it admits (ZAP allow-list),
 * what each role may send, whose jobs a user may see, and which model paths a job may name. */
#include "common/log.h"
#include "common/path_allow.h"
#include "common/util.h"
#include "daemon/coord_int.h"
#include "transport/keys.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* tcp://127.x.x.x, tcp://localhost, tcp://[::1], ipc:// and inproc:// are local. */
static bool s_loopback(const char *ep)
{
    if (strncmp(ep, "ipc://", 6) == 0 || strncmp(ep, "inproc://", 9) == 0)
        return true;
    if (strncmp(ep, "tcp://", 6) != 0)
        return false;
    ep += 6;
    return strncmp(ep, "127.", 4) == 0 || strncmp(ep, "localhost:", 10) == 0 ||
           strncmp(ep, "[::1]:", 6) == 0;
}

static pl_status_t s_file_clients(const pl_cfg_cluster_t *cfg, pl_tx_client_t *out)
{
    for (int i = 0; i < cfg->n_clients; i++) {
        const pl_cfg_client_t *k = &cfg->clients[i];
        pl_status_t st;
        snprintf(out[i].name, sizeof(out[i].name), "%s", k->name);
        if ((st = pl_tx_role_parse(k->role, &out[i].role)))
            return st;
        if (k->public_key[0])
            memcpy(out[i].public_key, k->public_key, PL_TX_KEY_LEN + 1); /* 40, checked */
        else if ((st = pl_tx_key_load_public(k->public_key_file, out[i].public_key)))
            return pl_error_prefix(st, "security.clients[%d] '%s': ", i, k->name);
    }
    return PL_OK;
}

pl_status_t pl_coord_auth_start(pl_coord_t *c, bool embedded)
{
    const pl_cfg_cluster_t *cfg = c->cfg;
    pl_tx_client_t *clients = calloc(PL_CFG_MAX_CLIENTS + 2, sizeof(*clients));
    pl_tx_keypair_t server;
    int n = 0;
    pl_status_t st = PL_OK;
    if (!clients)
        return pl_error(PL_ERR_NOMEM, "coordinator out of memory");
    if (cfg->secret_key[0]) {
        memcpy(server.secret_key, cfg->secret_key, sizeof(server.secret_key) - 1); /* 40, checked */
        server.secret_key[PL_TX_KEY_LEN] = '\0';
    } else if (cfg->secret_key_file[0]) {
        if ((st = pl_tx_key_load_secret(cfg->secret_key_file, &server)))
            goto out;
    } else if (cfg->insecure) {
        c->insecure = true;
        pl_log_warn("security.insecure: the control plane on %s and %s is neither encrypted "
                    "nor authenticated; anyone who reaches it may submit, read and shut down",
                    cfg->endpoint, c->node_ep);
        goto out;
    } else if (!embedded && (!s_loopback(cfg->endpoint) || !s_loopback(c->node_ep))) {
        st = pl_error(PL_ERR_INVALID,
                      "refusing to listen on %s without keys: set "
                      "security.coordinator_secret_key_file and security.clients (pipectl "
                      "keygen makes them), or security.insecure: true",
                      s_loopback(cfg->endpoint) ? c->node_ep : cfg->endpoint);
        goto out;
    } else {
        /* local: keys in the user's 0700 state directory, which local pipeld and pipectl read */
        char dir[PATH_MAX];
        static const struct {
            const char *file, *name;
            pl_tx_role_t role;
        } local[] = {{"node", "*", PL_TX_ROLE_NODE}, {"admin", "local", PL_TX_ROLE_ADMIN}};
        if ((st = pl_tx_key_local_dir(dir, sizeof(dir))) || (st = pl_tx_key_local_ensure(dir)) ||
            (st = pl_tx_key_local_pair(dir, "coordinator", &server)))
            goto out;
        for (size_t i = 0; i < PL_ARRAY_SIZE(local); i++) {
            pl_tx_keypair_t p;
            if ((st = pl_tx_key_local_pair(dir, local[i].file, &p)))
                goto out;
            snprintf(clients[n].public_key, sizeof(clients[n].public_key), "%s", p.public_key);
            snprintf(clients[n].name, sizeof(clients[n].name), "%s", local[i].name);
            clients[n++].role = local[i].role;
        }
        pl_log_info("local cluster: keys from %s", dir);
    }
    if ((st = s_file_clients(cfg, clients + n)))
        goto out;
    n += cfg->n_clients;
    if (n == 0)
        pl_log_warn("security.clients is empty: no node or user can connect");
    if ((st = pl_tx_zap_start(c->ctx, clients, n, &c->zap)) ||
        (st = pl_tx_sock_curve_server(c->router, server.secret_key, PL_TX_ZAP_CLIENTS)) ||
        (st = pl_tx_sock_monitor(c->router)) ||
        (st = pl_tx_sock_curve_server(c->node_router, server.secret_key, PL_TX_ZAP_NODES)) ||
        (st = pl_tx_sock_monitor(c->node_router)))
        goto out;
    c->n_clients = n;
out:
    free(clients);
    return st;
}

/* Rate-limited: a flood of refused messages writes one line a second. */
static void s_refuse(pl_coord_t *c, const pl_tx_peer_t *from, const char *what)
{
    double now = pl_now();
    char shown[4 * 64 + 1];
    c->refused_msgs++;
    if (now - c->last_refusal_log < 1.0)
        return;
    c->last_refusal_log = now;
    pl_ctl_escape(from->id, PL_MIN(from->len, (size_t)64), shown, sizeof(shown));
    pl_log_warn("refused %s from '%s' (key %s:%s; %ld refused so far)", what, shown,
                pl_tx_role_name(from->role), from->user, c->refused_msgs);
}

/* What a daemon sends the coordinator: these come on the node socket, nothing else does. */
static bool s_node_msg(pl_msg_type_t t)
{
    switch (t) {
    case PL_MSG_HELLO:
    case PL_MSG_HEARTBEAT:
    case PL_MSG_READY:
    case PL_MSG_DONE:
    case PL_MSG_FAIL:
    case PL_MSG_PROGRESS:
    case PL_MSG_TRACED:
    case PL_MSG_SEQ_OUT:
    case PL_MSG_TRAIN_STEP:
    case PL_MSG_BYE:
        return true;
    default:
        return false;
    }
}

static bool s_role_may(pl_tx_role_t role, pl_msg_type_t t)
{
    if (t != PL_MSG_BYE && s_node_msg(t)) /* BYE: s_on_bye checks the name itself */
        return role == PL_TX_ROLE_NODE;
    switch (t) {
    case PL_MSG_SHUTDOWN:
    case PL_MSG_DRAIN:
        return role == PL_TX_ROLE_ADMIN;
    case PL_MSG_SUBMIT:
    case PL_MSG_STATUS:
    case PL_MSG_RESULTS:
    case PL_MSG_KILL:
    case PL_MSG_NODES:
    case PL_MSG_HEALTH:
    case PL_MSG_PLAN:
    case PL_MSG_JOBS:
    case PL_MSG_DEPLOYMENTS:
    case PL_MSG_TRACE:
        return role == PL_TX_ROLE_USER || role == PL_TX_ROLE_ADMIN;
    default:
        return true; /* the dispatcher refuses the rest itself */
    }
}

/* Nodes on the node socket, clients on the client socket: a client flood cannot reach the lane
 * that heartbeats take, and a node that still talks to the client endpoint is told where to go. */
static bool s_lane_ok(pl_coord_t *c, const pl_tx_peer_t *from, pl_msg_type_t type)
{
    char what[96];
    bool on_nodes = from->sock == c->node_router;
    if (s_node_msg(type) == on_nodes)
        return true;
    snprintf(what, sizeof(what), "%s on the %s endpoint", pl_msg_name(type),
             on_nodes ? "node" : "client");
    s_refuse(c, from, what);
    if (on_nodes)
        pl_coord_reply_error(c, from, PL_ERR_PERMISSION, "%s is a client message: clients use "
                             "the coordinator endpoint %s", pl_msg_name(type), c->cfg->endpoint);
    else
        pl_coord_reply_error(c, from, PL_ERR_PERMISSION, "%s is a node message: nodes talk to "
                             "the coordinator on its node endpoint %s", pl_msg_name(type),
                             c->node_ep);
    return false;
}

/* A sender of another control protocol is answered with both versions, whatever it sent: its
 * fields may mean something else here. */
static bool s_proto_ok(pl_coord_t *c, const pl_tx_peer_t *from, pl_msg_type_t type)
{
    char why[256], what[96];
    if (from->proto == PL_PROTO_VERSION)
        return true;
    pl_msg_proto_mismatch(from->sock == c->node_router ? "pipeld" : "pipectl", from->proto,
                          "this coordinator", why, sizeof(why));
    snprintf(what, sizeof(what), "%s of control protocol %d", pl_msg_name(type), from->proto);
    s_refuse(c, from, what);
    pl_coord_reply_error(c, from, PL_ERR_UNSUPPORTED, "%s", why);
    return false;
}

bool pl_coord_auth_check(pl_coord_t *c, const pl_tx_peer_t *from, pl_msg_type_t type)
{
    char what[96];
    if (!s_proto_ok(c, from, type))
        return false;
    if (c->insecure)
        return s_lane_ok(c, from, type);
    if (!s_role_may(from->role, type)) {
        snprintf(what, sizeof(what), "%s (not allowed to role %s)", pl_msg_name(type),
                 pl_tx_role_name(from->role));
        s_refuse(c, from, what);
        pl_coord_reply_error(c, from, PL_ERR_PERMISSION, "%s is not allowed to a %s key",
                             pl_msg_name(type), pl_tx_role_name(from->role));
        return false;
    }
    /* a node key speaks only for its own node name: the socket identity every stage message
     * and every assignment is matched by */
    if (from->role == PL_TX_ROLE_NODE && strcmp(from->user, "*") != 0 &&
        (strlen(from->user) != from->len || memcmp(from->user, from->id, from->len) != 0)) {
        snprintf(what, sizeof(what), "%s under another node's name", pl_msg_name(type));
        s_refuse(c, from, what);
        pl_coord_reply_error(c, from, PL_ERR_PERMISSION, "this key belongs to node '%s'",
                             from->user);
        return false;
    }
    return s_lane_ok(c, from, type);
}

bool pl_coord_auth_may_see(pl_coord_t *c, const pl_tx_peer_t *from, const pl_coord_job_t *j)
{
    if (c->insecure || from->role == PL_TX_ROLE_ADMIN || strcmp(from->user, j->owner) == 0)
        return true;
    s_refuse(c, from, "a request about another user's job");
    return false;
}

void pl_coord_auth_stage_refused(pl_coord_t *c, const pl_tx_peer_t *from, const char *what)
{
    c->refused_stage_msgs++;
    s_refuse(c, from, what);
}

pl_status_t pl_coord_auth_model(const pl_coord_t *c, const char *model)
{
    return pl_path_allow_check("model", model, c->cfg->model_dirs, c->cfg->n_model_dirs, true);
}

pl_status_t pl_coord_auth_job(const pl_coord_t *c, const pl_job_spec_t *spec)
{
    const pl_cfg_train_t *t = spec->train ? &spec->train->cfg : NULL;
    pl_status_t st = pl_coord_auth_model(c, spec->model);
    if (!st && t && t->resume_from[0]) /* a model to read too */
        st = pl_coord_auth_model(c, t->resume_from);
    if (!st && t && t->checkpoint_dir[0]) /* where the daemons will write: it may not exist yet */
        st = pl_path_allow_check("checkpoint_dir", t->checkpoint_dir, c->cfg->model_dirs,
                                 c->cfg->n_model_dirs, false);
    return st;
}
