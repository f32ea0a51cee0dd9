/* ZeroMQ sockets behind the transport's own handle: options, CURVE, typed send / receive over
 * ctl.c's framing, and poll. */
#include "transport/sock.h"

#include "common/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

struct pl_tx_ctx {
    void *z;
};

struct pl_tx_sock {
    void *z;
    pl_tx_kind_t kind;
};

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

pl_status_t pl_tx_sock_curve_server(pl_tx_sock_t *s, const char *secret_z85)
{
    return pl_ctl_curve_server(s->z, secret_z85);
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
    st = pl_ctl_send(s->z, to ? to->id : NULL, to ? to->len : 0, msg->type, body);
    json_decref(body);
    return st;
}

pl_status_t pl_tx_recv(pl_tx_sock_t *s, int timeout_ms, pl_tx_peer_t *from, pl_msg_type_t *type_p,
                       pl_msg_t *msg)
{
    pl_ctl_msg_t raw;
    bool router = s->kind == PL_TX_ROUTER;
    pl_status_t st;
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
    st = pl_ctl_recv(s->z, router, ZMQ_DONTWAIT, &raw);
    if (from) {
        memcpy(from->id, raw.identity, raw.identity_len);
        from->id[raw.identity_len] = '\0';
        from->len = raw.identity_len;
    }
    if (st)
        return st;
    if (type_p)
        *type_p = raw.type;
    st = pl_msg_decode(raw.type, raw.body, msg);
    pl_ctl_msg_clear(&raw);
    if (st && router) {
        char shown[4 * PL_CTL_MAX_IDENTITY + 1];
        pl_ctl_escape(raw.identity, raw.identity_len, shown, sizeof(shown));
        pl_error_prefix(st, "control message from '%s': ", shown);
    } else if (st) {
        pl_error_prefix(st, "control message: ");
    }
    return st;
}

pl_status_t pl_tx_poll(pl_tx_sock_t *const *socks, int n, long timeout_ms, bool *ready)
{
    zmq_pollitem_t items[64];
    if (n < 0 || n > 64)
        return pl_error(PL_ERR_INVALID, "poll: %d sockets", n);
    for (int i = 0; i < n; i++)
        items[i] = (zmq_pollitem_t){.socket = socks[i]->z, .events = ZMQ_POLLIN};
    int rc = zmq_poll(items, n, timeout_ms);
    if (rc < 0 && errno != EINTR)
        return pl_error(PL_ERR_TRANSPORT, "poll: %s", zmq_strerror(errno));
    for (int i = 0; i < n; i++)
        ready[i] = rc > 0 && (items[i].revents & ZMQ_POLLIN);
    return PL_OK;
}
