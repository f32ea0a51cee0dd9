/* ZAP: the authentication half of the control plane. The coordinator's CURVE socket asks this
 * thread about every handshake; a key not on the allow-list never gets a session. */
#include "transport/zap.h"

#include "common/log.h"
#include "common/util.h"
#include "transport/ctl.h"
#include "transport/sock_int.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

struct pl_tx_zap {
    void *rep;
    pthread_t thread;
    atomic_bool stop;
    atomic_long refused;
    int n;
    pl_tx_client_t *clients;
    double last_log;
    long unlogged;
};

#define S_ZAP_PARTS 7 /* version, id, domain, address, identity, mechanism, one credential */

static void s_reply(void *rep, const zmq_msg_t *id, const char *code, const char *text,
                    const char *user)
{
    zmq_send(rep, "1.0", 3, ZMQ_SNDMORE);
    zmq_send(rep, zmq_msg_data((zmq_msg_t *)id), zmq_msg_size((zmq_msg_t *)id), ZMQ_SNDMORE);
    zmq_send(rep, code, strlen(code), ZMQ_SNDMORE);
    zmq_send(rep, text, strlen(text), ZMQ_SNDMORE);
    zmq_send(rep, user, strlen(user), ZMQ_SNDMORE);
    zmq_send(rep, "", 0, 0);
}

static void s_refuse_log(pl_tx_zap_t *z, const char *addr, const char *why)
{
    double now = pl_now();
    atomic_fetch_add(&z->refused, 1);
    if (now - z->last_log < 1.0) { /* a flood of handshakes writes one line a second */
        z->unlogged++;
        return;
    }
    pl_log_warn("refused a control-plane client from %s: %s%s", addr, why,
                z->unlogged ? " (and more refusals not logged)" : "");
    z->last_log = now;
    z->unlogged = 0;
}

static void s_handle(pl_tx_zap_t *z, zmq_msg_t *p, int n)
{
    char addr[64], mech[16], key[PL_TX_KEY_LEN + 1], why[256], user[96];
    const zmq_msg_t *id = n > 1 ? &p[1] : NULL;
    if (n < 6 || !id) {
        pl_log_warn("ZAP: a request of %d parts dropped", n);
        return;
    }
    pl_ctl_escape(zmq_msg_data(&p[3]), zmq_msg_size(&p[3]), addr, sizeof(addr));
    pl_ctl_escape(zmq_msg_data(&p[5]), zmq_msg_size(&p[5]), mech, sizeof(mech));
    if (zmq_msg_size(&p[0]) != 3 || memcmp(zmq_msg_data(&p[0]), "1.0", 3) != 0) {
        s_refuse_log(z, addr, "ZAP version is not 1.0");
        s_reply(z->rep, id, "400", "bad ZAP version", "");
        return;
    }
    if (strcmp(mech, "CURVE") != 0 || n != S_ZAP_PARTS || zmq_msg_size(&p[6]) != 32) {
        snprintf(why, sizeof(why), "mechanism %s (only CURVE with a listed key is admitted)", mech);
        s_refuse_log(z, addr, why);
        s_reply(z->rep, id, "400", "only CURVE clients with a listed key are admitted", "");
        return;
    }
    zmq_z85_encode(key, zmq_msg_data(&p[6]), 32);
    for (int i = 0; i < z->n; i++) {
        const pl_tx_client_t *c = &z->clients[i];
        if (strcmp(c->public_key, key) == 0) {
            /* the node socket is served before every client: only nodes may take that lane */
            bool node_lane = zmq_msg_size(&p[2]) == strlen(PL_TX_ZAP_NODES) &&
                             memcmp(zmq_msg_data(&p[2]), PL_TX_ZAP_NODES, zmq_msg_size(&p[2])) == 0;
            if (node_lane && c->role != PL_TX_ROLE_NODE) {
                snprintf(why, sizeof(why), "%s key '%s' on the node endpoint (only node keys are "
                         "admitted there; clients use the coordinator endpoint)",
                         pl_tx_role_name(c->role), c->name);
                s_refuse_log(z, addr, why);
                s_reply(z->rep, id, "400", "only node keys are admitted on the node endpoint", "");
                return;
            }
            snprintf(user, sizeof(user), "%s:%s", pl_tx_role_name(c->role), c->name);
            pl_log_debug("admitted %s from %s", user, addr);
            s_reply(z->rep, id, "200", "OK", user);
            return;
        }
    }
    snprintf(why, sizeof(why), "public key %s is not on the allow-list", key);
    s_refuse_log(z, addr, why);
    s_reply(z->rep, id, "400", "public key not on the allow-list", "");
}

static void *s_main(void *arg)
{
    pl_tx_zap_t *z = arg;
    while (!atomic_load(&z->stop)) {
        zmq_pollitem_t it = {.socket = z->rep, .events = ZMQ_POLLIN};
        if (zmq_poll(&it, 1, 100) <= 0)
            continue;
        zmq_msg_t p[S_ZAP_PARTS + 1];
        int n = 0, more = 1;
        while (more) {
            zmq_msg_t part;
            size_t ml = sizeof(more);
            zmq_msg_init(&part);
            if (zmq_msg_recv(&part, z->rep, 0) < 0) {
                zmq_msg_close(&part);
                break;
            }
            zmq_getsockopt(z->rep, ZMQ_RCVMORE, &more, &ml);
            if (n < S_ZAP_PARTS + 1)
                p[n++] = part;
            else
                zmq_msg_close(&part);
        }
        s_handle(z, p, n);
        for (int i = 0; i < n; i++)
            zmq_msg_close(&p[i]);
    }
    return NULL;
}

pl_status_t pl_tx_zap_start(pl_tx_ctx_t *ctx, const pl_tx_client_t *clients, int n,
                            pl_tx_zap_t **zap_p)
{
    pl_tx_zap_t *z = calloc(1, sizeof(*z));
    int linger = 0;
    if (!z || !(z->clients = calloc((size_t)(n > 0 ? n : 1), sizeof(*clients)))) {
        free(z);
        return pl_error(PL_ERR_NOMEM, "ZAP handler: out of memory");
    }
    memcpy(z->clients, clients, (size_t)n * sizeof(*clients));
    z->n = n;
    z->last_log = -1e9;
    if (!(z->rep = zmq_socket(pl_tx_ctx_raw(ctx), ZMQ_REP)) ||
        zmq_setsockopt(z->rep, ZMQ_LINGER, &linger, sizeof(linger)) != 0 ||
        zmq_bind(z->rep, "inproc://zeromq.zap.01") != 0) {
        pl_status_t st = pl_error(PL_ERR_TRANSPORT, "ZAP handler: %s", zmq_strerror(errno));
        if (z->rep)
            zmq_close(z->rep);
        free(z->clients);
        free(z);
        return st;
    }
    if (pthread_create(&z->thread, NULL, s_main, z) != 0) {
        zmq_close(z->rep);
        free(z->clients);
        free(z);
        return pl_error(PL_ERR_TRANSPORT, "ZAP handler: cannot start its thread");
    }
    *zap_p = z;
    return PL_OK;
}

void pl_tx_zap_stop(pl_tx_zap_t **zap_p)
{
    pl_tx_zap_t *z = *zap_p;
    if (!z)
        return;
    atomic_store(&z->stop, true);
    pthread_join(z->thread, NULL);
    zmq_close(z->rep);
    free(z->clients);
    free(z);
    *zap_p = NULL;
}

long pl_tx_zap_refused(const pl_tx_zap_t *zap)
{
    return zap ? atomic_load(&((pl_tx_zap_t *)zap)->refused) : 0;
}
