/* ZeroMQ control-plane framing: [identity][type][JSON body] on ROUTER sockets, [type][body] on
 * DEALER sockets. Every received part is checked before anything of it is used. */
#include "transport/ctl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

/* Longest type name we accept on the wire (the real ones are far shorter). */
#define PL_CTL_MAX_TYPE 32
/* Parts kept for validation; any beyond are received and dropped. */
#define PL_CTL_MAX_PARTS 3
#define PL_CTL_HWM 10000

/* Wire names, indexed by type; a type added to ctl.h needs its name here (the tests check). */
static const char *const s_names[PL_MSG_COUNT_] = {
    [PL_MSG_HELLO] = "HELLO",         [PL_MSG_WELCOME] = "WELCOME",
    [PL_MSG_HEARTBEAT] = "HEARTBEAT", [PL_MSG_ASSIGN] = "ASSIGN",
    [PL_MSG_READY] = "READY",         [PL_MSG_START] = "START",
    [PL_MSG_DONE] = "DONE",
    [PL_MSG_FAIL] = "FAIL",           [PL_MSG_CANCEL] = "CANCEL",
    [PL_MSG_SUBMIT] = "SUBMIT",       [PL_MSG_STATUS] = "STATUS",
    [PL_MSG_RESULTS] = "RESULTS",     [PL_MSG_KILL] = "KILL",
    [PL_MSG_NODES] = "NODES",         [PL_MSG_HEALTH] = "HEALTH",
    [PL_MSG_REPLY] = "REPLY",         [PL_MSG_ERROR] = "ERROR",
    [PL_MSG_SHUTDOWN] = "SHUTDOWN",
    [PL_MSG_PLAN] = "PLAN",           [PL_MSG_BYE] = "BYE",
    [PL_MSG_JOBS] = "JOBS",           [PL_MSG_DRAIN] = "DRAIN",
    [PL_MSG_TRACE] = "TRACE",         [PL_MSG_TRACED] = "TRACED",
    [PL_MSG_SEQ_ADD] = "SEQ_ADD",     [PL_MSG_SEQ_CANCEL] = "SEQ_CANCEL",
    [PL_MSG_SEQ_OUT] = "SEQ_OUT",
    [PL_MSG_PROGRESS] = "PROGRESS",
    [PL_MSG_TRAIN_STEP] = "TRAIN_STEP",
    [PL_MSG_DEPLOYMENTS] = "DEPLOYMENTS",
};

const char *pl_msg_name(pl_msg_type_t type)
{
    if ((int)type <= 0 || type >= PL_MSG_COUNT_ || !s_names[type])
        return "UNKNOWN";
    return s_names[type];
}

pl_status_t pl_msg_parse_name(const char *name, size_t len, pl_msg_type_t *type_p)
{
    char shown[4 * 64 + 1];
    for (int t = 1; t < PL_MSG_COUNT_; t++) {
        if (s_names[t] && strlen(s_names[t]) == len && memcmp(s_names[t], name, len) == 0) {
            *type_p = (pl_msg_type_t)t;
            return PL_OK;
        }
    }
    pl_ctl_escape(name, len < 64 ? len : 64, shown, sizeof(shown));
    return pl_error(PL_ERR_PROTOCOL, "unknown type '%s%s'", shown, len > 64 ? "..." : "");
}

size_t pl_ctl_escape(const void *data, size_t len, char *out, size_t out_len)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *in = data;
    size_t o = 0;
    if (out_len == 0)
        return 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = in[i];
        bool plain = c >= 0x20 && c < 0x7f && c != '\\' && c != '\'';
        if (o + (plain ? 1 : 4) >= out_len)
            break;
        if (plain) {
            out[o++] = (char)c;
        } else {
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        }
    }
    out[o] = '\0';
    return o;
}

pl_status_t pl_ctl_socket_setup(void *sock)
{
    int64_t max_size = (int64_t)PL_CTL_MAX_BODY + 4096;
    int zero = 0, hwm = PL_CTL_HWM, one = 1, type = 0;
    size_t type_len = sizeof(type);

    if (zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &max_size, sizeof(max_size)) != 0 ||
        zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof(zero)) != 0 ||
        zmq_setsockopt(sock, ZMQ_SNDHWM, &hwm, sizeof(hwm)) != 0 ||
        zmq_setsockopt(sock, ZMQ_RCVHWM, &hwm, sizeof(hwm)) != 0 ||
        zmq_getsockopt(sock, ZMQ_TYPE, &type, &type_len) != 0)
        return pl_error(PL_ERR_TRANSPORT, "control socket options: %s", zmq_strerror(errno));
    /* A ROUTER silently drops messages to unknown peers unless told to report them. */
    if (type == ZMQ_ROUTER &&
        zmq_setsockopt(sock, ZMQ_ROUTER_MANDATORY, &one, sizeof(one)) != 0)
        return pl_error(PL_ERR_TRANSPORT, "control socket ZMQ_ROUTER_MANDATORY: %s",
                        zmq_strerror(errno));
    return PL_OK;
}

/* Send one frame; the first frame's EAGAIN is "busy", anything later a transport failure. */
static pl_status_t s_send_part(void *sock, const void *data, size_t len, bool more, bool first,
                               pl_msg_type_t type)
{
    int flags = ZMQ_DONTWAIT | (more ? ZMQ_SNDMORE : 0);
    if (zmq_send(sock, data, len, flags) >= 0)
        return PL_OK;
    if (first && (errno == EAGAIN || errno == EINTR))
        return pl_error(PL_ERR_BUSY, "send %s: queue full", pl_msg_name(type));
    if (first && errno == EHOSTUNREACH)
        return pl_error(PL_ERR_TRANSPORT, "send %s: peer not connected", pl_msg_name(type));
    return pl_error(PL_ERR_TRANSPORT, "send %s: %s", pl_msg_name(type), zmq_strerror(errno));
}

pl_status_t pl_ctl_send(void *sock, const void *identity, size_t identity_len, pl_msg_type_t type,
                        const json_t *body)
{
    char *text = NULL;
    size_t text_len;
    pl_status_t st;

    if ((int)type <= 0 || type >= PL_MSG_COUNT_ || !s_names[type])
        return pl_error(PL_ERR_INVALID, "send: unknown message type %d", (int)type);
    if (body && !json_is_object(body))
        return pl_error(PL_ERR_INVALID, "send %s: body is not a JSON object", pl_msg_name(type));
    if (identity && (identity_len == 0 || identity_len > PL_CTL_MAX_IDENTITY))
        return pl_error(PL_ERR_INVALID, "send %s: identity of %zu bytes", pl_msg_name(type),
                        identity_len);
    text = body ? json_dumps(body, JSON_COMPACT) : strdup("{}");
    if (!text)
        return pl_error(PL_ERR_NOMEM, "send %s: cannot serialize body", pl_msg_name(type));
    text_len = strlen(text);
    if (text_len > PL_CTL_MAX_BODY) {
        st = pl_error(PL_ERR_RANGE, "send %s: body of %zu bytes exceeds %u", pl_msg_name(type),
                      text_len, PL_CTL_MAX_BODY);
        goto out;
    }
    if (identity &&
        (st = s_send_part(sock, identity, identity_len, true, true, type)) != PL_OK)
        goto out;
    st = s_send_part(sock, s_names[type], strlen(s_names[type]), true, !identity, type);
    if (st == PL_OK)
        st = s_send_part(sock, text, text_len, false, false, type);
out:
    free(text);
    return st;
}

/* A type part: a known name (its type into *type_p). */
static pl_status_t s_type_part(const void *type, size_t type_len, pl_msg_type_t *type_p)
{
    if (type_len > PL_CTL_MAX_TYPE) {
        char shown[4 * PL_CTL_MAX_TYPE + 1];
        pl_ctl_escape(type, PL_CTL_MAX_TYPE, shown, sizeof(shown));
        return pl_error(PL_ERR_PROTOCOL, "type name of %zu bytes ('%s...')", type_len, shown);
    }
    return pl_msg_parse_name(type, type_len, type_p);
}

static pl_status_t s_body_size(pl_msg_type_t t, size_t body_len)
{
    if (body_len > PL_CTL_MAX_BODY)
        return pl_error(PL_ERR_PROTOCOL, "%s: body of %zu bytes exceeds %u", s_names[t], body_len,
                        PL_CTL_MAX_BODY);
    return PL_OK;
}

/* A body part of type t, its size checked: one JSON object without duplicate keys. */
static pl_status_t s_body_part(pl_msg_type_t t, const void *body, size_t body_len,
                               pl_ctl_msg_t *msg)
{
    json_error_t jerr;
    json_t *root = json_loadb(body, body_len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return pl_error(PL_ERR_PROTOCOL, "%s: body is not JSON: %s (offset %d)", s_names[t],
                        jerr.text, jerr.position);
    if (!json_is_object(root)) {
        json_decref(root);
        return pl_error(PL_ERR_PROTOCOL, "%s: body is not a JSON object", s_names[t]);
    }
    msg->type = t;
    msg->body = root;
    return PL_OK;
}

pl_status_t pl_ctl_decode(const void *type, size_t type_len, const void *body, size_t body_len,
                          pl_ctl_msg_t *msg)
{
    pl_msg_type_t t = PL_MSG_COUNT_;
    pl_status_t st;
    if ((st = s_type_part(type, type_len, &t)) || (st = s_body_size(t, body_len)))
        return st;
    return s_body_part(t, body, body_len, msg);
}

struct pl_ctl_raw {
    pl_msg_type_t type;
    zmq_msg_t body; /* the received part itself: no copy */
};

static void s_prefix(const pl_ctl_msg_t *msg, bool with_identity, pl_status_t st)
{
    if (with_identity) {
        char shown[4 * PL_CTL_MAX_IDENTITY + 1];
        pl_ctl_escape(msg->identity, msg->identity_len, shown, sizeof(shown));
        pl_error_prefix(st, "control message from '%s': ", shown);
    } else {
        pl_error_prefix(st, "control message: ");
    }
}

pl_status_t pl_ctl_recv_raw(void *sock, bool with_identity, int flags, pl_ctl_msg_t *msg,
                            pl_ctl_raw_t **raw_p)
{
    zmq_msg_t parts[PL_CTL_MAX_PARTS];
    int n_kept = 0, n_parts = 0, expected = with_identity ? 3 : 2;
    int more;
    size_t more_len;
    pl_status_t st = PL_OK;

    memset(msg, 0, sizeof(*msg));
    *raw_p = NULL;
    /* Receive every part of the message first, so nothing is left queued on any error. */
    do {
        zmq_msg_t part;
        zmq_msg_init(&part);
        if (zmq_msg_recv(&part, sock, n_parts == 0 ? flags : 0) < 0) {
            int err = errno;
            zmq_msg_close(&part);
            if (n_parts == 0 && (err == EAGAIN || err == EINTR))
                return pl_error(PL_ERR_BUSY, "receive: nothing waiting");
            st = pl_error(PL_ERR_TRANSPORT, "receive: %s", zmq_strerror(err));
            goto out;
        }
        n_parts++;
        more = 0;
        more_len = sizeof(more);
        zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &more_len);
        if (n_kept < PL_CTL_MAX_PARTS)
            parts[n_kept++] = part;
        else
            zmq_msg_close(&part);
    } while (more);

    int first = 0;
    if (with_identity) {
        size_t id_len = zmq_msg_size(&parts[0]);
        if (id_len > PL_CTL_MAX_IDENTITY) {
            st = pl_error(PL_ERR_PROTOCOL, "control message: identity of %zu bytes", id_len);
            goto out;
        }
        memcpy(msg->identity, zmq_msg_data(&parts[0]), id_len);
        msg->identity[id_len] = '\0';
        msg->identity_len = id_len;
        const char *uid = zmq_msg_gets(&parts[0], "User-Id");
        if (!uid && n_kept > 1) /* the property rides on the peer's own parts too */
            uid = zmq_msg_gets(&parts[1], "User-Id");
        if (uid)
            snprintf(msg->user_id, sizeof(msg->user_id), "%s", uid);
        first = 1;
    }
    pl_msg_type_t t = PL_MSG_COUNT_;
    pl_ctl_raw_t *raw = NULL;
    if (n_parts != expected)
        st = pl_error(PL_ERR_PROTOCOL, "%d parts (expected %d)", n_parts, expected);
    else if (!(st = s_type_part(zmq_msg_data(&parts[first]), zmq_msg_size(&parts[first]), &t)) &&
             !(st = s_body_size(t, zmq_msg_size(&parts[first + 1]))) &&
             !(raw = malloc(sizeof(*raw))))
        st = pl_error(PL_ERR_NOMEM, "%s: out of memory", s_names[t]);
    if (st) {
        s_prefix(msg, with_identity, st);
        goto out;
    }
    raw->type = t;
    zmq_msg_init(&raw->body);
    zmq_msg_move(&raw->body, &parts[first + 1]);
    msg->type = t;
    *raw_p = raw;
out:
    for (int i = 0; i < n_kept; i++)
        zmq_msg_close(&parts[i]);
    return st;
}

size_t pl_ctl_raw_size(const pl_ctl_raw_t *raw)
{
    return zmq_msg_size(&raw->body);
}

pl_status_t pl_ctl_raw_decode(pl_ctl_raw_t **raw_p, pl_ctl_msg_t *msg)
{
    pl_ctl_raw_t *raw = *raw_p;
    pl_status_t st =
        s_body_part(raw->type, zmq_msg_data(&raw->body), zmq_msg_size(&raw->body), msg);
    pl_ctl_raw_free(raw_p);
    return st;
}

void pl_ctl_raw_free(pl_ctl_raw_t **raw_p)
{
    if (!raw_p || !*raw_p)
        return;
    zmq_msg_close(&(*raw_p)->body);
    free(*raw_p);
    *raw_p = NULL;
}

pl_status_t pl_ctl_recv(void *sock, bool with_identity, int flags, pl_ctl_msg_t *msg)
{
    pl_ctl_raw_t *raw;
    pl_status_t st = pl_ctl_recv_raw(sock, with_identity, flags, msg, &raw);
    if (st)
        return st;
    if ((st = pl_ctl_raw_decode(&raw, msg)))
        s_prefix(msg, with_identity, st);
    return st;
}

void pl_ctl_msg_clear(pl_ctl_msg_t *msg)
{
    if (!msg)
        return;
    json_decref(msg->body);
    msg->body = NULL;
}

pl_status_t pl_ctl_curve_server(void *sock, const char *secret_z85)
{
    int one = 1;
    if (strlen(secret_z85) != 40)
        return pl_error(PL_ERR_INVALID, "CURVE secret key: expected 40 Z85 characters");
    if (zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &one, sizeof(one)) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, secret_z85, 40) != 0)
        return pl_error(PL_ERR_TRANSPORT, "CURVE server: %s", zmq_strerror(zmq_errno()));
    return PL_OK;
}

pl_status_t pl_ctl_curve_client(void *sock, const char *server_public_z85)
{
    char pub[41], sec[41];
    if (strlen(server_public_z85) != 40)
        return pl_error(PL_ERR_INVALID, "coordinator public key: expected 40 Z85 characters");
    if (zmq_curve_keypair(pub, sec) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, server_public_z85, 40) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, pub, 40) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, sec, 40) != 0)
        return pl_error(PL_ERR_TRANSPORT, "CURVE client: %s", zmq_strerror(zmq_errno()));
    return PL_OK;
}
