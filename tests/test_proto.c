/* Integration: the control protocol's version between pipecoord, pipeld and pipectl. A real
 * coordinator refuses a HELLO or a request of another protocol (or of none: an older sender) with
 * an answer that names both versions, and logs it; pipectl and pipeld facing a coordinator that
 * speaks an older protocol (a stand-in ROUTER answering as protocol 2 did) say so; a pipeld whose
 * coordinator has no node endpoint (as before it had one) says which endpoint it tried. */
#include "cluster_util.h"
#include "transport/msg.h"

#include <pthread.h>

static tc_cluster_t s_c;
static int s_passed;

static void s_teardown(void)
{
    tc_cluster_end(&s_c, s_passed);
}

/* A hand-written body of `type`: its "proto" as the test wants it, or none (typed messages go
 * with tc_send_msg, their proto m->proto or this build's when 0). */
static void s_send_raw(void *sock, const char *type, const char *body)
{
    zmq_send(sock, type, strlen(type), ZMQ_SNDMORE);
    zmq_send(sock, body, strlen(body), 0);
}

/* A HELLO from node `name` that says it speaks `proto`. */
static void s_hello(pl_msg_t *m, const char *name, int proto)
{
    tc_hello(m, name);
    m->proto = proto;
}

Test(proto, the_coordinator_refuses_other_protocols_naming_both_versions, .fini = s_teardown,
     .timeout = 120)
{
    cr_assert_eq(tc_cluster_start(&s_c, 1, NULL), 0, "the daemon did not register");
    char node_ep[128], type[32], body[4096];
    tc_node_ep(s_c.ep, node_ep, sizeof(node_ep));
    void *ctx = zmq_ctx_new();
    /* an old pipeld: its HELLO says 2 */
    void *old = tc_dealer_local(ctx, "oldnode", "node", node_ep);
    pl_msg_t m;
    s_hello(&m, "oldnode", 2);
    tc_send_msg(old, &m);
    cr_assert(tc_recv_answer(old, type, body, sizeof(body)), "no answer to an old HELLO");
    cr_assert_str_eq(type, "ERROR", "%s", body);
    cr_assert(strstr(body, "pipeld speaks control protocol 2, this coordinator " TC_STR(
                               PL_PROTO_VERSION) ": upgrade pipeld"),
              "%s", body);
    cr_assert(strstr(body, "\"proto\":" TC_STR(PL_PROTO_VERSION)), "the answer names none: %s",
              body);
    /* a pipeld newer than the coordinator: the coordinator is the one to upgrade */
    void *newer = tc_dealer_local(ctx, "newnode", "node", node_ep);
    s_hello(&m, "newnode", PL_PROTO_VERSION + 1);
    tc_send_msg(newer, &m);
    cr_assert(tc_recv_answer(newer, type, body, sizeof(body)));
    cr_assert(strstr(body, "upgrade this coordinator"), "%s", body);
    /* a client that names no protocol (pipectl before 3) */
    void *cli = tc_dealer_local(ctx, "oldctl", "admin", s_c.ep);
    s_send_raw(cli, "NODES", "{}");
    cr_assert(tc_recv_answer(cli, type, body, sizeof(body)), "no answer to an old request");
    cr_assert_str_eq(type, "ERROR", "%s", body);
    cr_assert(strstr(body, "pipectl speaks a control protocol older than " TC_STR(
                               PL_PROTO_VERSION)) &&
                  strstr(body, "upgrade pipectl"),
              "%s", body);
    /* ... and a request of this protocol is answered */
    s_send_raw(cli, "NODES", "{" TC_PROTO "\"x\": 0}");
    cr_assert(tc_recv_answer(cli, type, body, sizeof(body)));
    cr_assert_str_eq(type, "REPLY", "%s", body);
    zmq_close(old);
    zmq_close(newer);
    zmq_close(cli);
    zmq_ctx_term(ctx);
    /* the old node never registered; the refusals are logged */
    char *out;
    tc_sh(&out, "%s/pipectl -c %s nodes", tc_bin(), s_c.ep);
    cr_assert(strstr(out, "node0") && !strstr(out, "oldnode") && !strstr(out, "newnode"), "%s",
              out);
    free(out);
    tc_sh(&out, "grep -c 'of control protocol' %s/pipecoord.log", s_c.dir);
    cr_assert_geq(atoi(out), 1, "the refusals are not logged");
    free(out);
    s_passed = 1;
}

/* A stand-in for an older pipecoord: a plaintext ROUTER that answers every message with
 * `type` and `body`, as protocol 2 did (no "proto"), until told to stop. Each stand-in has its own
 * context, ended when it stops: zmq_close only queues the close to the context's reaper, and
 * ending the context waits for it, so the next stand-in can bind the same port. */
typedef struct {
    void *ctx, *sock;
    char ep[96];
    const char *type, *body;
    volatile int stop;
    int answered;
    pthread_t th;
} s_old_coord_t;

static void *s_old_coord(void *arg)
{
    s_old_coord_t *o = arg;
    void *r = o->sock;
    while (!o->stop) {
        zmq_pollitem_t it = {.socket = r, .events = ZMQ_POLLIN};
        if (zmq_poll(&it, 1, 100) <= 0)
            continue;
        char id[256], part[65536];
        int n = zmq_recv(r, id, sizeof(id), 0), more = 1;
        size_t ml = sizeof(more);
        while (zmq_getsockopt(r, ZMQ_RCVMORE, &more, &ml) == 0 && more)
            zmq_recv(r, part, sizeof(part), 0);
        if (n <= 0 || n > (int)sizeof(id))
            continue;
        zmq_send(r, id, (size_t)n, ZMQ_SNDMORE);
        zmq_send(r, o->type, strlen(o->type), ZMQ_SNDMORE);
        zmq_send(r, o->body, strlen(o->body), 0);
        o->answered++;
    }
    zmq_close(r);
    return NULL;
}

/* Binds `o`'s socket here (a port just freed may take a moment to be released: retried for up to
 * 10 s) and starts its thread. */
static void s_old_start(s_old_coord_t *o, const char *ep)
{
    snprintf(o->ep, sizeof(o->ep), "%s", ep);
    o->ctx = zmq_ctx_new();
    o->sock = zmq_socket(o->ctx, ZMQ_ROUTER);
    int linger = 0, rc = -1;
    zmq_setsockopt(o->sock, ZMQ_LINGER, &linger, sizeof(linger));
    for (double t0 = tc_now(); tc_now() - t0 < 10.0; usleep(50 * 1000))
        if ((rc = zmq_bind(o->sock, o->ep)) == 0)
            break;
    cr_assert_eq(rc, 0, "the stand-in coordinator cannot bind %s: %s", o->ep,
                 zmq_strerror(zmq_errno()));
    cr_assert_eq(pthread_create(&o->th, NULL, s_old_coord, o), 0);
}

static void s_old_stop(s_old_coord_t *o)
{
    o->stop = 1;
    pthread_join(o->th, NULL);
    zmq_ctx_term(o->ctx);
}

Test(proto, pipectl_and_pipeld_say_when_the_coordinator_speaks_an_older_protocol,
     .fini = s_teardown, .timeout = 120)
{
    memset(&s_c, 0, sizeof(s_c));
    tc_mkdtemp(s_c.dir, sizeof(s_c.dir));
    int port = tc_free_port();
    snprintf(s_c.ep, sizeof(s_c.ep), "tcp://127.0.0.1:%d", port);
    s_old_coord_t o = {.type = "REPLY", .body = "{\"nodes\": []}"};
    s_old_start(&o, s_c.ep);
    char *out;
    int rc = tc_sh(&out, "PIPELD_INSECURE=1 %s/pipectl -c %s --timeout 5 nodes 2>&1", tc_bin(),
                   s_c.ep);
    cr_assert_neq(rc, 0, "an answer of an older protocol was taken: %s", out);
    cr_assert(strstr(out, "the coordinator at tcp://127.0.0.1:") &&
                  strstr(out, "speaks a control protocol older than " TC_STR(PL_PROTO_VERSION)) &&
                  strstr(out, "this pipectl " TC_STR(PL_PROTO_VERSION)) &&
                  strstr(out, "upgrade the coordinator"),
              "%s", out);
    free(out);
    s_old_stop(&o);

    /* reached on its node endpoint (coordinator_node_endpoint set to the old one's only
     * socket), an old coordinator refuses the HELLO in its words: pipeld says which is older */
    s_old_coord_t o2 = {.type = "ERROR",
                        .body = "{\"code\": -9, \"error\": \"protocol version 3, the "
                                "coordinator speaks 2\"}"};
    s_old_start(&o2, s_c.ep);
    char log[512];
    snprintf(log, sizeof(log), "%s/n1.log", s_c.dir);
    tc_sh(NULL,
          "PIPELD_INSECURE=1 timeout 4 %s/pipeld --name n1 --coordinator %s --node-endpoint %s "
          "--threads 1 >%s 2>&1",
          tc_bin(), s_c.ep, s_c.ep, log);
    s_old_stop(&o2);
    tc_sh(&out, "cat %s", log);
    cr_assert_gt(o2.answered, 0, "the HELLO never came: %s", out);
    cr_assert(strstr(out, "speaks a control protocol older than " TC_STR(PL_PROTO_VERSION)) &&
                  strstr(out, "this pipeld " TC_STR(PL_PROTO_VERSION)) &&
                  strstr(out, "it says: protocol version 3, the coordinator speaks 2"),
              "%s", out);
    cr_assert(!strstr(out, "registered with the coordinator"), "%s", out);
    free(out);

    /* an old coordinator on the client endpoint only: nothing answers on the node endpoint */
    s_old_coord_t o3 = {.type = "ERROR", .body = "{\"code\": -9, \"error\": \"x\"}"};
    s_old_start(&o3, s_c.ep);
    snprintf(log, sizeof(log), "%s/n2.log", s_c.dir);
    double t0 = tc_now();
    tc_sh(NULL,
          "PIPELD_INSECURE=1 timeout 15 %s/pipeld --name n2 --coordinator %s --threads 1 >%s 2>&1",
          tc_bin(), s_c.ep, log);
    s_old_stop(&o3);
    tc_sh(&out, "cat %s", log);
    char node_ep[128];
    tc_node_ep(s_c.ep, node_ep, sizeof(node_ep));
    cr_assert(strstr(out, "no answer in ") && strstr(out, node_ep) &&
                  strstr(out, "the coordinator's node endpoint") &&
                  strstr(out, "coordinator.node_endpoint") && strstr(out, "plus 1") &&
                  strstr(out, "older pipecoord has no node endpoint"),
              "pipeld did not say which endpoint was silent (%.1f s): %s", tc_now() - t0, out);
    cr_assert_eq(o3.answered, 0, "pipeld sent its HELLO to the client endpoint");
    free(out);
    s_passed = 1;
}
