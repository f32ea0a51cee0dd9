/* ZeroMQ sockets behind the transport's own handle: options, CURVE, typed send / receive over
 * ctl.c's framing, and poll. */
#include "transport/sock.h"

#include "common/log.h"
#include "transport/sock_int.h"

#include <stdio.h>

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

struct pl_tx_ctx {
    void *z;
};

struct pl_tx_sock {
    void *z;
    pl_tx_kind_t kind;
    pl_tx_ctx_t *ctx;
    void *monitor; /* PAIR receiving the handshake events, or NULL */
};

static const char *const s_role_names[] = {"none", "node", "user", "admin"};

const char *pl_tx_role_name(pl_tx_role_t role)
{
    return s_role_names[role];
}

pl_status_t pl_tx_role_parse(const char *name, pl_tx_role_t *role_p)
{
    for (int r = PL_TX_ROLE_NODE; r <= PL_TX_ROLE_ADMIN; r++) {
        if (strcmp(name, s_role_names[r]) == 0) {
            *role_p = (pl_tx_role_t)r;
            return PL_OK;
        }
    }
    return pl_error(PL_ERR_INVALID, "role '%.32s': expected node, user or admin", name);
}

void *pl_tx_ctx_raw(pl_tx_ctx_t *ctx)
{
    return ctx->z;
}

pl_status_t pl_tx_ctx_new(pl_tx_ctx_t **ctx_p)
{
    pl_tx_ctx_t *c = calloc(1, sizeof(*c));
    if (!c)
        return pl_error(PL_ERR_NOMEM, "ZeroMQ context: out of memory");
    if (!(c->z = zmq_ctx_new())) {
        free(c);
        return pl_error(PL_ERR_TRANSPORT, "ZeroMQ context: %s", zmq_strerror(errno));
    }
    *ctx_p = c;
    return PL_OK;
}

void pl_tx_ctx_destroy(pl_tx_ctx_t **ctx_p)
{
    pl_tx_ctx_t *c = *ctx_p;
    if (!c)
        return;
    zmq_ctx_term(c->z);
    free(c);
    *ctx_p = NULL;
}

pl_status_t pl_tx_sock_new(pl_tx_ctx_t *ctx, pl_tx_kind_t kind, pl_tx_sock_t **sock_p)
{
    static const int types[] = {
        [PL_TX_ROUTER] = ZMQ_ROUTER, [PL_TX_DEALER] = ZMQ_DEALER, [PL_TX_PAIR] = ZMQ_PAIR};
    pl_tx_sock_t *s = calloc(1, sizeof(*s));
    pl_status_t st;
    if (!s)
        return pl_error(PL_ERR_NOMEM, "socket: out of memory");
    s->kind = kind;
    s->ctx = ctx;
    if (!(s->z = zmq_socket(ctx->z, types[kind]))) {
        free(s);
        return pl_error(PL_ERR_TRANSPORT, "socket: %s", zmq_strerror(errno));
    }
    if ((st = pl_ctl_socket_setup(s->z))) {
        pl_tx_sock_destroy(&s);
        return st;
    }
    *sock_p = s;
    return PL_OK;
}

void pl_tx_sock_destroy(pl_tx_sock_t **sock_p)
{
    pl_tx_sock_t *s = *sock_p;
    if (!s)
        return;
    if (s->monitor) {
        zmq_socket_monitor(s->z, NULL, 0);
        zmq_close(s->monitor);
    }
    zmq_close(s->z);
    free(s);
    *sock_p = NULL;
}

pl_status_t pl_tx_sock_identity(pl_tx_sock_t *s, const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > PL_CTL_MAX_IDENTITY)
        return pl_error(PL_ERR_INVALID, "socket identity of %zu bytes", n);
    if (zmq_setsockopt(s->z, ZMQ_ROUTING_ID, name, n) != 0)
        return pl_error(PL_ERR_TRANSPORT, "socket identity: %s", zmq_strerror(errno));
    return PL_OK;
}

pl_status_t pl_tx_sock_handover(pl_tx_sock_t *s)
{
    int one = 1;
    if (zmq_setsockopt(s->z, ZMQ_ROUTER_HANDOVER, &one, sizeof(one)) != 0)
        return pl_error(PL_ERR_TRANSPORT, "ZMQ_ROUTER_HANDOVER: %s", zmq_strerror(errno));
    return PL_OK;
}

pl_status_t pl_tx_sock_curve_server(pl_tx_sock_t *s, const char *secret_z85,
                                    const char *zap_domain)
{
    pl_status_t st = pl_ctl_curve_server(s->z, secret_z85);
    /* a domain makes libzmq ask the ZAP handler about every handshake */
    if (!st && zmq_setsockopt(s->z, ZMQ_ZAP_DOMAIN, zap_domain, strlen(zap_domain)) != 0)
        return pl_error(PL_ERR_TRANSPORT, "ZMQ_ZAP_DOMAIN: %s", zmq_strerror(errno));
    return st;
}

pl_status_t pl_tx_sock_curve_client_pair(pl_tx_sock_t *s, const char *server_public_z85,
                                         const char *public_z85, const char *secret_z85)
{
    if (strlen(server_public_z85) != 40 || strlen(public_z85) != 40 || strlen(secret_z85) != 40)
        return pl_error(PL_ERR_INVALID, "CURVE client: keys must be 40 Z85 characters");
    if (zmq_setsockopt(s->z, ZMQ_CURVE_SERVERKEY, server_public_z85, 40) != 0 ||
        zmq_setsockopt(s->z, ZMQ_CURVE_PUBLICKEY, public_z85, 40) != 0 ||
        zmq_setsockopt(s->z, ZMQ_CURVE_SECRETKEY, secret_z85, 40) != 0)
        return pl_error(PL_ERR_TRANSPORT, "CURVE client: %s", zmq_strerror(errno));
    return PL_OK;
}

pl_status_t pl_tx_sock_monitor(pl_tx_sock_t *s)
{
    static int seq;
    char ep[64];
    snprintf(ep, sizeof(ep), "inproc://pl-monitor-%p-%d", (void *)s, seq++);
    if (zmq_socket_monitor(s->z, ep,
                           ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) != 0 ||
        !(s->monitor = zmq_socket(s->ctx->z, ZMQ_PAIR)) || zmq_connect(s->monitor, ep) != 0) {
        pl_status_t st = pl_error(PL_ERR_TRANSPORT, "socket monitor: %s", zmq_strerror(errno));
        if (s->monitor)
            zmq_close(s->monitor);
        s->monitor = NULL;
        return st;
    }
    return PL_OK;
}

bool pl_tx_sock_handshake_error(pl_tx_sock_t *s, char *why, size_t why_len)
{
    bool got = false;
    while (s->monitor) {
        zmq_msg_t ev, addr;
        zmq_msg_init(&ev);
        if (zmq_msg_recv(&ev, s->monitor, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&ev);
            break;
        }
        zmq_msg_init(&addr);
        zmq_msg_recv(&addr, s->monitor, 0); /* the endpoint part always follows */
        if (zmq_msg_size(&ev) >= 6) {
            const uint8_t *d = zmq_msg_data(&ev);
            uint16_t event = (uint16_t)(d[0] | d[1] << 8);
            uint32_t value = d[2] | d[3] << 8 | (uint32_t)d[4] << 16 | (uint32_t)d[5] << 24;
            char ep[128];
            pl_ctl_escape(zmq_msg_data(&addr), zmq_msg_size(&addr), ep, sizeof(ep));
            if (s->kind == PL_TX_ROUTER && event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
                ; /* the ZAP handler has said why already */
            else if (s->kind == PL_TX_ROUTER)
                snprintf(why, why_len, "a client's handshake on %s failed (%s 0x%x): it does "
                         "not use CURVE or has the wrong coordinator key", ep,
                         event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ? "protocol error"
                                                                      : "error",
                         value);
            else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
                snprintf(why, why_len, "%s refused this client's key (ZAP status %u): it is not "
                         "on the coordinator's allow-list", ep, value);
            else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL)
                snprintf(why, why_len, "CURVE handshake with %s failed (protocol error 0x%x): "
                         "wrong coordinator key, or one side without CURVE", ep, value);
            else
                snprintf(why, why_len, "handshake with %s failed (%s): wrong coordinator key, or "
                         "one side without CURVE", ep, zmq_strerror((int)value));
            got = got || s->kind != PL_TX_ROUTER || event != ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
        }
        zmq_msg_close(&ev);
        zmq_msg_close(&addr);
    }
    return got;
}

pl_status_t pl_tx_sock_curve_client(pl_tx_sock_t *s, const char *server_public_z85)
{
    return pl_ctl_curve_client(s->z, server_public_z85);
}

pl_status_t pl_tx_sock_bind(pl_tx_sock_t *s, const char *endpoint)
{
    if (zmq_bind(s->z, endpoint) != 0)
        return pl_error(PL_ERR_TRANSPORT, "bind %s: %s", endpoint, zmq_strerror(errno));
    return PL_OK;
}

pl_status_t pl_tx_sock_connect(pl_tx_sock_t *s, const char *endpoint)
{
    if (zmq_connect(s->z, endpoint) != 0)
        return pl_error(PL_ERR_TRANSPORT, "connect %s: %s", endpoint, zmq_strerror(errno));
    return PL_OK;
}

pl_status_t pl_tx_send(pl_tx_sock_t *s, const pl_tx_peer_t *to, const pl_msg_t *msg)
{
    json_t *body;
    pl_status_t st = pl_msg_encode(msg, &body);
    if (st)
        return st;
    st = pl_tx_send_body(s, to, msg->type, body);
    json_decref(body);
    return st;
}

pl_status_t pl_tx_send_body(pl_tx_sock_t *s, const pl_tx_peer_t *to, pl_msg_type_t type,
                            const json_t *body)
{
    return pl_ctl_send(s->z, to ? to->id : NULL, to ? to->len : 0, type, body);
}

/* Who sent raw, as pl_tx_peer_t says. */
static void s_peer(pl_tx_sock_t *s, const pl_ctl_msg_t *raw, pl_tx_peer_t *from)
{
    memcpy(from->id, raw->identity, raw->identity_len);
    from->id[raw->identity_len] = '\0';
    from->len = raw->identity_len;
    from->role = PL_TX_ROLE_NONE;
    from->user[0] = '\0';
    from->sock = s;
    from->proto = 0;
    const char *colon = strchr(raw->user_id, ':');
    if (colon) {
        char role[16];
        snprintf(role, sizeof(role), "%.*s", (int)(colon - raw->user_id), raw->user_id);
        if (pl_tx_role_parse(role, &from->role) == PL_OK)
            snprintf(from->user, sizeof(from->user), "%s", colon + 1);
        else
            from->role = PL_TX_ROLE_NONE;
    }
}

pl_status_t pl_tx_recv_raw(pl_tx_sock_t *s, pl_tx_peer_t *from, pl_msg_type_t *type_p,
                           pl_ctl_raw_t **raw_p)
{
    pl_ctl_msg_t hdr;
    if (type_p)
        *type_p = PL_MSG_COUNT_;
    pl_status_t st = pl_ctl_recv_raw(s->z, s->kind == PL_TX_ROUTER, ZMQ_DONTWAIT, &hdr, raw_p);
    if (from && st != PL_ERR_BUSY)
        s_peer(s, &hdr, from);
    if (!st && type_p)
        *type_p = hdr.type;
    return st;
}

pl_status_t pl_tx_raw_decode(pl_ctl_raw_t **raw_p, pl_tx_peer_t *from, pl_msg_t *msg)
{
    pl_ctl_msg_t raw = {0};
    pl_status_t st = pl_ctl_raw_decode(raw_p, &raw);
    if (!st) {
        st = pl_msg_decode(raw.type, raw.body, msg);
        pl_ctl_msg_clear(&raw);
    }
    if (!st && from)
        from->proto = msg->proto;
    if (st && from && from->sock && from->sock->kind == PL_TX_ROUTER) {
        char shown[4 * PL_CTL_MAX_IDENTITY + 1];
        pl_ctl_escape(from->id, from->len, shown, sizeof(shown));
        pl_error_prefix(st, "control message from '%s': ", shown);
    } else if (st) {
        pl_error_prefix(st, "control message: ");
    }
    return st;
}

pl_status_t pl_tx_recv(pl_tx_sock_t *s, int timeout_ms, pl_tx_peer_t *from, pl_msg_type_t *type_p,
                       pl_msg_t *msg)
{
    pl_tx_peer_t who;
    pl_ctl_raw_t *raw;
    if (type_p)
        *type_p = PL_MSG_COUNT_;
    if (timeout_ms != 0) {
        zmq_pollitem_t it = {.socket = s->z, .events = ZMQ_POLLIN};
        int rc = zmq_poll(&it, 1, timeout_ms);
        if (rc < 0 && errno != EINTR)
            return pl_error(PL_ERR_TRANSPORT, "poll: %s", zmq_strerror(errno));
        if (rc <= 0)
            return pl_error(PL_ERR_BUSY, "receive: nothing waiting");
    }
    pl_status_t st = pl_tx_recv_raw(s, from ? from : &who, type_p, &raw);
    if (st)
        return st;
    return pl_tx_raw_decode(&raw, from ? from : &who, msg);
}

pl_status_t pl_tx_poll(pl_tx_sock_t *const *socks, int n, long timeout_ms, bool *ready)
{
    bool unused;
    return pl_tx_poll_fd(socks, n, -1, timeout_ms, ready, &unused);
}

pl_status_t pl_tx_poll_fd(pl_tx_sock_t *const *socks, int n, int fd, long timeout_ms,
                          bool *ready, bool *fd_ready)
{
    return pl_tx_poll_fds(socks, n, &fd, 1, timeout_ms, ready, fd_ready);
}

pl_status_t pl_tx_poll_fds(pl_tx_sock_t *const *socks, int n, const int *fds, int n_fds,
                           long timeout_ms, bool *ready, bool *fd_ready)
{
    zmq_pollitem_t items[72];
    int at[8]; /* fds[k]'s item, -1: none */
    if (n < 0 || n > 64 || n_fds < 0 || n_fds > 8)
        return pl_error(PL_ERR_INVALID, "poll: %d sockets, %d descriptors", n, n_fds);
    for (int i = 0; i < n; i++)
        items[i] = (zmq_pollitem_t){.socket = socks[i]->z, .events = ZMQ_POLLIN};
    int n_items = n;
    for (int k = 0; k < n_fds; k++) {
        at[k] = fds[k] >= 0 ? n_items : -1;
        if (fds[k] >= 0)
            items[n_items++] = (zmq_pollitem_t){.fd = fds[k], .events = ZMQ_POLLIN};
    }
    int rc = zmq_poll(items, n_items, timeout_ms);
    if (rc < 0 && errno != EINTR)
        return pl_error(PL_ERR_TRANSPORT, "poll: %s", zmq_strerror(errno));
    for (int i = 0; i < n; i++)
        ready[i] = rc > 0 && (items[i].revents & ZMQ_POLLIN);
    for (int k = 0; k < n_fds; k++)
        fd_ready[k] = at[k] >= 0 && rc > 0 && (items[at[k]].revents & ZMQ_POLLIN);
    return PL_OK;
}
