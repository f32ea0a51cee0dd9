/* pipectl's connection to the coordinator: one request, one answer, with every failure (no
 * answer, a refusal, a malformed reply) told on stderr in one line. */
#include "tools/pipectl/pipectl.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int pl_pipectl_die(const char *fmt, const char *a)
{
    fprintf(stderr, "pipectl: ");
    fprintf(stderr, fmt, a);
    fputc('\n', stderr);
    return 1;
}

int pl_pipectl_call(pl_pipectl_t *c, const pl_msg_t *req, json_t **reply_p)
{
    pl_msg_t m;
    pl_status_t st = pl_tx_send(c->sock, NULL, req);
    if (st) {
        pl_pipectl_die("cannot send to the coordinator: %s", pl_error_msg());
        return PL_PIPECTL_EXIT_UNREACHABLE;
    }
    st = pl_tx_recv(c->sock, (int)(c->timeout_s * 1000), NULL, NULL, &m);
    if (st == PL_ERR_BUSY) {
        char why[256];
        if (pl_tx_sock_handshake_error(c->sock, why, sizeof(why)))
            fprintf(stderr, "pipectl: not admitted: %s\n", why);
        else {
            fprintf(stderr, "pipectl: no answer from the coordinator at %s within %.0f s\n",
                    c->endpoint, c->timeout_s);
            return PL_PIPECTL_EXIT_UNREACHABLE;
        }
        return PL_PIPECTL_EXIT_FAILED;
    }
    if (st)
        return pl_pipectl_die("bad answer from the coordinator: %s", pl_error_msg());
    if (m.proto != PL_PROTO_VERSION) { /* its fields may mean something else: say so, use none */
        char peer[300], why[700];
        snprintf(peer, sizeof(peer), "the coordinator at %s", c->endpoint);
        pl_msg_proto_mismatch(peer, m.proto, "this pipectl", why, sizeof(why));
        fprintf(stderr, "pipectl: %s%s%s%s\n", why, m.type == PL_MSG_ERROR ? " (it says: " : "",
                m.type == PL_MSG_ERROR ? m.error.message : "", m.type == PL_MSG_ERROR ? ")" : "");
        pl_msg_clear(&m);
        return PL_PIPECTL_EXIT_FAILED;
    }
    if (m.type == PL_MSG_ERROR) {
        fprintf(stderr, "pipectl: %s\n",
                m.error.message[0] ? m.error.message : "the coordinator refused");
        pl_msg_clear(&m);
        return 1;
    }
    if (m.type != PL_MSG_REPLY) {
        pl_msg_clear(&m);
        return pl_pipectl_die("unexpected answer %s", pl_msg_name(m.type));
    }
    *reply_p = m.reply.body; /* taken */
    m.reply.body = NULL;
    return 0;
}

int pl_pipectl_call_job(pl_pipectl_t *c, pl_msg_type_t type, int64_t id, json_t **reply_p)
{
    pl_msg_t m;
    pl_msg_init(&m, type);
    m.job_ref.job = (uint32_t)id;
    return pl_pipectl_call(c, &m, reply_p);
}

int64_t pl_pipectl_job_arg(const char *arg)
{
    char *end;
    long long v = strtoll(arg, &end, 10);
    if (*arg && !*end && v > 0 && v <= UINT32_MAX)
        return v;
    pl_pipectl_die("'%s' is not a job id", arg);
    return -1;
}
