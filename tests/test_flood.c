/* A flood of bad and refused control messages does not delay heartbeats: a probe node heartbeats
 * the coordinator (10 a second) and times each answer, first alone, then while four clients send
 * malformed frames, messages their role may not send, submissions of models that are not there
 * and queries of jobs that do not exist, as fast as the coordinator takes them; two real daemons
 * heartbeat throughout. The figures (answer time p50/p99/max, flood rate, coordinator log lines
 * a second) are printed, measured on a shared machine; what is asserted is what does not depend
 * on timing: every heartbeat is answered, the daemons stay registered, and the coordinator's log
 * grows by far fewer lines than the flood has messages. */
#include "cluster_util.h"
#include "common/util.h"
#include "transport/keys.h"
#include "transport/msg.h"
#include "transport/sock.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>

#define S_WINDOW_S 5.0
#define S_HB_EVERY_S 0.1
#define S_FLOODERS 4

typedef struct {
    void *sock;
    int kind; /* 0 malformed, 1 role-refused, 2 missing models, 3 unknown jobs */
    atomic_bool *stop;
    long sent;
} s_flooder_t;

static void *s_flood(void *arg)
{
    s_flooder_t *f = arg;
    static const char *frames[4][3][2] = {
        {{"NOPE", "{}"}, {"HEARTBEAT", "{\"node\": "}, {"SUBMIT", "[1, 2"}},
        {{"SUBMIT", "{\"model\": \"/m\", \"gen\": {\"prompts\": [[1]]}}"},
         {"SHUTDOWN", "{}"},
         {"KILL", "{\"job\": 1}"}},
        {{"SUBMIT", "{\"model\": \"/no/such/model\", \"gen\": {\"prompts\": [[1, 2]]}}"},
         {"PLAN", "{\"model\": \"/no/such/model\", \"gen\": {\"prompts\": [[1]]}}"},
         {"SUBMIT", "{\"model\": \"/tmp/../etc\", \"gen\": {\"prompts\": [[3]]}}"}},
        {{"STATUS", "{\"job\": 999999}"}, {"RESULTS", "{\"job\": 999998}"}, {"KILL", "{\"job\": 99}"}},
    };
    char buf[4096];
    for (long i = 0; !atomic_load(f->stop); i++) {
        const char *const *fr = frames[f->kind][i % 3];
        if (zmq_send(f->sock, fr[0], strlen(fr[0]), ZMQ_SNDMORE | ZMQ_DONTWAIT) >= 0 &&
            zmq_send(f->sock, fr[1], strlen(fr[1]), ZMQ_DONTWAIT) >= 0)
            f->sent++;
        else
            usleep(100); /* at the high-water mark: the coordinator is behind */
        while (zmq_recv(f->sock, buf, sizeof(buf), ZMQ_DONTWAIT) >= 0) /* its answers */
            ;
    }
    return NULL;
}

static int s_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static long s_lines(const char *path)
{
    char *out = NULL;
    tc_sh(&out, "wc -l < %s", path);
    long n = strtol(out, NULL, 10);
    free(out);
    return n;
}

/* Heartbeat for a window; the answer times, sorted, into rtt (returns how many). */
static int s_heartbeats(pl_tx_sock_t *s, double *rtt, int cap)
{
    int n = 0;
    double end = pl_now() + S_WINDOW_S;
    while (pl_now() < end && n < cap) {
        pl_msg_t m;
        pl_msg_init(&m, PL_MSG_HEARTBEAT);
        snprintf(m.heartbeat.node, sizeof(m.heartbeat.node), "probe");
        double t0 = pl_now();
        cr_assert_eq(pl_tx_send(s, NULL, &m), PL_OK, "%s", pl_error_msg());
        for (;;) { /* the WELCOME that answers it; nothing else is sent to a probe */
            pl_msg_t in;
            pl_status_t st = pl_tx_recv(s, 5000, NULL, NULL, &in);
            cr_assert_eq(st, PL_OK, "heartbeat %d not answered in 5 s: %s", n, pl_error_msg());
            pl_msg_type_t type = in.type;
            pl_msg_clear(&in);
            if (type == PL_MSG_WELCOME)
                break;
        }
        rtt[n++] = pl_now() - t0;
        double next = t0 + S_HB_EVERY_S;
        if (pl_now() < next)
            usleep((useconds_t)((next - pl_now()) * 1e6));
    }
    qsort(rtt, (size_t)n, sizeof(*rtt), s_cmp);
    return n;
}

static void s_row(const char *what, const double *rtt, int n, double msgs_s, double lines_s)
{
    fprintf(stderr, "flood: %-10s %4d heartbeats  answer p50 %7.3f ms  p99 %7.3f ms  max %7.3f ms"
                    "  flood %8.0f msg/s  log %6.1f lines/s\n",
            what, n, rtt[n / 2] * 1e3, rtt[(int)(n * 0.99) < n ? (int)(n * 0.99) : n - 1] * 1e3,
            rtt[n - 1] * 1e3, msgs_s, lines_s);
}

Test(flood, heartbeats_are_answered_through_a_flood, .timeout = 240)
{
    tc_cluster_t c;
    char log[600], bin[512], db[600];
    memset(&c, 0, sizeof(c));
    tc_mkdtemp(c.dir, sizeof(c.dir));
    snprintf(c.ep, sizeof(c.ep), "tcp://127.0.0.1:%d", tc_free_port());
    /* the coordinator at its default log level, as deployed */
    tc_use_state_dir(&c);
    snprintf(bin, sizeof(bin), "%s/pipecoord", tc_bin());
    snprintf(log, sizeof(log), "%s/pipecoord.log", c.dir);
    snprintf(db, sizeof(db), "%s/coord.db", c.dir);
    char *argv[] = {bin, "--endpoint", c.ep, "--state-db", db, NULL};
    c.coord = tc_spawn(argv, log);
    tc_start_node(&c, "node0", 1, NULL);
    tc_start_node(&c, "node1", 1, NULL);
    cr_assert_eq(tc_wait_idle(&c, 2, 60), 0, "the daemons did not register");

    /* the probe: a node that heartbeats and times the answers */
    pl_tx_ctx_t *ctx;
    pl_tx_sock_t *probe;
    const char *how;
    cr_assert_eq(pl_tx_ctx_new(&ctx), PL_OK);
    cr_assert_eq(pl_tx_sock_new(ctx, PL_TX_DEALER, &probe), PL_OK);
    cr_assert_eq(pl_tx_sock_identity(probe, "probe"), PL_OK);
    cr_assert_eq(pl_tx_key_client_setup(probe, NULL, NULL, "node", &how), PL_OK, "%s",
                 pl_error_msg());
    cr_assert_eq(pl_tx_sock_connect(probe, c.ep), PL_OK);
    pl_msg_t m;
    pl_msg_init(&m, PL_MSG_HELLO);
    m.hello.proto = PL_PROTO_VERSION;
    snprintf(m.hello.node, sizeof(m.hello.node), "probe");
    snprintf(m.hello.host, sizeof(m.hello.host), "localhost");
    m.hello.pid = (int)getpid();
    m.hello.n_devices = 1;
    m.hello.devices[0] = (pl_msg_device_t){.id = "cpu:0", .backend = "cpu", .name = "probe",
                                           .isa = "scalar", .cores = 1, .mem_bytes = 1ULL << 30,
                                           .gflops = 1, .mem_gbps = 1};
    snprintf(m.hello.health.node, sizeof(m.hello.health.node), "probe");
    cr_assert_eq(pl_tx_send(probe, NULL, &m), PL_OK);
    pl_msg_t in;
    cr_assert_eq(pl_tx_recv(probe, 10000, NULL, NULL, &in), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(in.type, PL_MSG_WELCOME, "%s", pl_msg_name(in.type));
    pl_msg_clear(&in);

    static double quiet[256], loud[256];
    long l0 = s_lines(log);
    int nq = s_heartbeats(probe, quiet, 256);
    long l1 = s_lines(log);

    void *zctx = zmq_ctx_new();
    atomic_bool stop = false;
    s_flooder_t f[S_FLOODERS];
    pthread_t th[S_FLOODERS];
    for (int i = 0; i < S_FLOODERS; i++) {
        f[i] = (s_flooder_t){.sock = zmq_socket(zctx, ZMQ_DEALER), .kind = i, .stop = &stop};
        int linger = 0;
        zmq_setsockopt(f[i].sock, ZMQ_LINGER, &linger, sizeof(linger));
        /* role-refused messages come with the node key, the rest with the admin key */
        tc_curve_local(f[i].sock, i == 1 ? "node" : "admin");
        cr_assert_eq(zmq_connect(f[i].sock, c.ep), 0);
    }
    usleep(300 * 1000); /* handshakes done: the flood starts at once */
    double t0 = pl_now();
    for (int i = 0; i < S_FLOODERS; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, s_flood, &f[i]), 0);
    long l2 = s_lines(log);
    int nl = s_heartbeats(probe, loud, 256);
    long l3 = s_lines(log);
    atomic_store(&stop, true);
    long sent = 0;
    for (int i = 0; i < S_FLOODERS; i++) {
        pthread_join(th[i], NULL);
        sent += f[i].sent;
        zmq_close(f[i].sock);
    }
    double flood_s = pl_now() - t0;
    zmq_ctx_term(zctx);

    fprintf(stderr, "flood: measured under load (shared machine); %d flooders, %.1f s windows\n",
            S_FLOODERS, S_WINDOW_S);
    s_row("quiet", quiet, nq, 0, (double)(l1 - l0) / S_WINDOW_S);
    s_row("flooded", loud, nl, (double)sent / flood_s, (double)(l3 - l2) / S_WINDOW_S);
    fprintf(stderr, "flood: p50 ratio flooded/quiet %.2f, p99 ratio %.2f\n",
            loud[nl / 2] / quiet[nq / 2], loud[(int)(nl * 0.99)] / quiet[(int)(nq * 0.99)]);

    cr_assert_gt(nq, 10);
    cr_assert_gt(nl, 10, "heartbeats went on during the flood");
    cr_assert_gt(sent, 1000, "the flood flooded (%ld messages)", sent);
    cr_assert_lt(l3 - l2, sent / 20 + 20, "the log grew by %ld lines for %ld bad messages",
                 l3 - l2, sent);
    cr_assert_eq(tc_wait_idle(&c, 2, 30), 0, "the daemons are still registered and idle");
    pl_tx_sock_destroy(&probe);
    pl_tx_ctx_destroy(&ctx);
    tc_cluster_stop(&c);
    tc_sh(NULL, "rm -rf %s", c.dir);
}
