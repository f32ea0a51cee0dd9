/* A flood of bad and refused control messages does not delay heartbeats: a probe node heartbeats
 * the coordinator (10 a second) and times each answer, first alone, then while four clients send
 * malformed frames, messages their role may not send, submissions of models that are not there
 * and queries of jobs that do not exist, as fast as the coordinator takes them, then with a fifth
 * client beside them that submits large valid jobs (about 4.7 MiB each) in a loop and cancels
 * each; two real daemons heartbeat throughout. The second test does the same while a decode job
 * runs on the two daemons (its progress is written to the state db as it goes), with large
 * invalid submissions beside the valid ones, and times the job's token rate too. The figures
 * (answer time p50/p99/max, flood rate, log lines a second, token rate) are printed, measured on
 * a shared machine; what is asserted is what does not depend on timing: every heartbeat is
 * answered, every flood request is answered (a refusal says why), no node is declared lost, the
 * job's tokens are the single-process reference's, and the coordinator's log grows by far fewer
 * lines than the flood has messages. */
#include "common/util.h"
#include "job_util.h"
#include "transport/keys.h"
#include "transport/msg.h"
#include "transport/sock.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>

#define S_WINDOW_S 5.0
#define S_HB_EVERY_S 0.1
#define S_FLOODERS 4

/* Requests a flooder has in flight at most: the coordinator answers each, and its answers must
 * fit the client's pipe (a ROUTER drops what does not), so the flood is pipelined, not blind. */
#define S_IN_FLIGHT 256

/* The answers waiting on a client socket, counted (REPLY or ERROR, each a type and a body): a
 * refusal is an ERROR, whose body says why (counted apart when it says nothing). */
static void s_answers(void *sock, long *answered, long *mute, int wait_ms)
{
    char buf[4096];
    zmq_pollitem_t it = {.socket = sock, .events = ZMQ_POLLIN};
    while (zmq_poll(&it, 1, wait_ms) > 0) {
        char type[32];
        int n = zmq_recv(sock, type, sizeof(type) - 1, ZMQ_DONTWAIT);
        if (n < 0)
            break;
        type[PL_MIN(n, (int)sizeof(type) - 1)] = '\0';
        n = zmq_recv(sock, buf, sizeof(buf) - 1, 0);
        buf[n < 0 ? 0 : PL_MIN(n, (int)sizeof(buf) - 1)] = '\0';
        (*answered)++;
        if (strcmp(type, "REPLY")) { /* an ERROR: its "error" says why */
            json_t *v = json_loads(buf, 0, NULL), *msg = json_object_get(v, "error");
            *mute += !json_is_string(msg) || !json_string_value(msg)[0];
            json_decref(v);
        }
        wait_ms = 0;
    }
}

typedef struct {
    void *sock;
    int kind; /* 0 malformed, 1 role-refused, 2 missing models, 3 unknown jobs */
    atomic_bool *stop;
    long sent, answered, mute; /* mute: an ERROR without a reason */
} s_flooder_t;

static void *s_flood(void *arg)
{
    s_flooder_t *f = arg;
    static const char *frames[4][3][2] = {
        {{"NOPE", "{}"}, {"HEARTBEAT", "{\"node\": "}, {"SUBMIT", "[1, 2"}},
        {{"SUBMIT", "{" TC_PROTO "\"model\": \"/m\", \"gen\": {\"prompts\": [[1]]}}"},
         {"SHUTDOWN", "{" TC_PROTO "\"x\": 0}"},
         {"KILL", "{" TC_PROTO "\"job\": 1}"}},
        {{"SUBMIT", "{" TC_PROTO "\"model\": \"/no/such/model\", \"gen\": {\"prompts\": [[1, 2]]}}"},
         {"PLAN", "{" TC_PROTO "\"model\": \"/no/such/model\", \"gen\": {\"prompts\": [[1]]}}"},
         {"SUBMIT", "{" TC_PROTO "\"model\": \"/tmp/../etc\", \"gen\": {\"prompts\": [[3]]}}"}},
        {{"STATUS", "{" TC_PROTO "\"job\": 999999}"},
         {"RESULTS", "{" TC_PROTO "\"job\": 999998}"},
         {"KILL", "{" TC_PROTO "\"job\": 99}"}},
    };
    for (long i = 0; !atomic_load(f->stop);) {
        const char *const *fr = frames[f->kind][i % 3];
        if (f->sent - f->answered < S_IN_FLIGHT &&
            zmq_send(f->sock, fr[0], strlen(fr[0]), ZMQ_SNDMORE | ZMQ_DONTWAIT) >= 0) {
            zmq_send(f->sock, fr[1], strlen(fr[1]), 0); /* the rest of a started message */
            f->sent++;
            i++;
            s_answers(f->sock, &f->answered, &f->mute, 0);
        } else {
            s_answers(f->sock, &f->answered, &f->mute, 1); /* the coordinator is behind */
        }
    }
    /* the flood's last answers: every request is answered */
    for (double end = pl_now() + 20; f->answered < f->sent && pl_now() < end;)
        s_answers(f->sock, &f->answered, &f->mute, 100);
    return NULL;
}

/* The large submitter: a valid job of S_BIG_PROMPTS prompts of S_BIG_TOKENS tokens, placed on a
 * node that is not there (so it waits in the queue and no daemon works on it), then canceled; or
 * (invalid) the same with token ids past the model's vocabulary, refused once decoded. */
#define S_BIG_PROMPTS 1200
#define S_BIG_TOKENS 1000

typedef struct {
    void *sock;
    char *body; /* the SUBMIT's JSON */
    atomic_bool *stop;
    long sent, accepted, refused, unanswered;
    size_t bytes;
} s_big_t;

/* Token ids are 100 + (p * 7 + t) % span: span 150 stays inside a 256-token vocabulary. */
static char *s_big_body(const char *model, int span, size_t *len_p)
{
    size_t cap = (size_t)S_BIG_PROMPTS * S_BIG_TOKENS * 6 + 4096, len = 0;
    char *b = malloc(cap);
    cr_assert_not_null(b);
    len += (size_t)snprintf(b, cap, "{" TC_PROTO "\"model\": \"%s\", \"nodes\": [\"elsewhere\"], \"gen\": "
                            "{\"max_new_tokens\": 1, \"prompts\": [", model);
    for (int p = 0; p < S_BIG_PROMPTS; p++) {
        b[len++] = p ? ',' : '[';
        if (p)
            b[len++] = '[';
        for (int t = 0; t < S_BIG_TOKENS; t++)
            len += (size_t)snprintf(b + len, cap - len, t ? ",%d" : "%d", 100 + (p * 7 + t) % span);
        b[len++] = ']';
    }
    len += (size_t)snprintf(b + len, cap - len, "]}}");
    *len_p = len;
    return b;
}

/* The answer to the last request: REPLY's body into buf; 1 REPLY, 0 ERROR, -1 none in 30 s. */
static int s_big_answer(void *sock, char *buf, size_t cap)
{
    char type[32];
    int n = zmq_recv(sock, type, sizeof(type) - 1, 0);
    if (n < 0)
        return -1;
    type[n < (int)sizeof(type) - 1 ? n : (int)sizeof(type) - 1] = '\0';
    n = zmq_recv(sock, buf, cap - 1, 0);
    buf[n < 0 ? 0 : n < (int)cap - 1 ? n : (int)cap - 1] = '\0';
    return strcmp(type, "REPLY") == 0;
}

static void *s_big(void *arg)
{
    s_big_t *f = arg;
    char buf[4096];
    size_t len = strlen(f->body);
    while (!atomic_load(f->stop)) {
        if (zmq_send(f->sock, "SUBMIT", 6, ZMQ_SNDMORE) < 0 || zmq_send(f->sock, f->body, len, 0) < 0)
            break;
        f->sent++;
        f->bytes += len;
        int a = s_big_answer(f->sock, buf, sizeof(buf));
        f->unanswered += a < 0;
        f->refused += a == 0;
        if (a <= 0)
            continue; /* refused (the answer says why) or late: the next one */
        const char *at = strstr(buf, "\"job\":");
        long job = at ? strtol(at + 6, NULL, 10) : 0;
        if (job <= 0)
            continue;
        f->accepted++;
        snprintf(buf, sizeof(buf), "{" TC_PROTO "\"job\": %ld}", job);
        if (zmq_send(f->sock, "KILL", 4, ZMQ_SNDMORE) >= 0 &&
            zmq_send(f->sock, buf, strlen(buf), 0) >= 0 && s_big_answer(f->sock, buf, sizeof(buf)) < 0)
            f->unanswered++;
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

/* Heartbeat for a window; the answer times, sorted, into rtt (returns how many were answered;
 * *missed: how many were not, within 5 s, with a WELCOME: an ERROR says the probe was lost). */
static int s_heartbeats(pl_tx_sock_t *s, double *rtt, int cap, int *missed)
{
    int n = 0;
    double end = pl_now() + S_WINDOW_S;
    *missed = 0;
    while (pl_now() < end && n < cap) {
        pl_msg_t m;
        pl_msg_init(&m, PL_MSG_HEARTBEAT);
        snprintf(m.heartbeat.node, sizeof(m.heartbeat.node), "probe");
        double t0 = pl_now();
        cr_assert_eq(pl_tx_send(s, NULL, &m), PL_OK, "%s", pl_error_msg());
        bool welcome = false;
        for (;;) { /* the WELCOME that answers it; nothing else is sent to a probe */
            pl_msg_t in;
            if (pl_tx_recv(s, 5000, NULL, NULL, &in) != PL_OK)
                break;
            pl_msg_type_t type = in.type;
            pl_msg_clear(&in);
            if ((welcome = type == PL_MSG_WELCOME) || type == PL_MSG_ERROR)
                break;
        }
        if (!welcome) {
            (*missed)++;
            continue;
        }
        rtt[n++] = pl_now() - t0;
        double next = t0 + S_HB_EVERY_S;
        if (pl_now() < next)
            usleep((useconds_t)((next - pl_now()) * 1e6));
    }
    qsort(rtt, (size_t)n, sizeof(*rtt), s_cmp);
    return n;
}

/* One heartbeat answered between windows (the slow steps there must not let the probe be
 * declared lost: dead_after_ms is 3 s). */
static void s_beat(pl_tx_sock_t *s)
{
    pl_msg_t m, in;
    pl_msg_init(&m, PL_MSG_HEARTBEAT);
    snprintf(m.heartbeat.node, sizeof(m.heartbeat.node), "probe");
    cr_assert_eq(pl_tx_send(s, NULL, &m), PL_OK, "%s", pl_error_msg());
    while (pl_tx_recv(s, 5000, NULL, NULL, &in) == PL_OK) {
        pl_msg_type_t type = in.type;
        pl_msg_clear(&in);
        if (type == PL_MSG_WELCOME || type == PL_MSG_ERROR)
            break;
    }
}

static void s_row(const char *what, const double *rtt, int n, double msgs_s, double lines_s)
{
    if (n == 0) {
        fprintf(stderr, "flood: %-10s no heartbeat answered\n", what);
        return;
    }
    fprintf(stderr, "flood: %-10s %4d heartbeats  answer p50 %7.3f ms  p99 %7.3f ms  max %7.3f ms"
                    "  flood %8.0f msg/s  log %6.1f lines/s\n",
            what, n, rtt[n / 2] * 1e3, rtt[(int)(n * 0.99) < n ? (int)(n * 0.99) : n - 1] * 1e3,
            rtt[n - 1] * 1e3, msgs_s, lines_s);
}

/* The probe: a node of its own name that registers on the node socket, then heartbeats. */
static pl_tx_sock_t *s_probe(pl_tx_ctx_t *ctx, const tc_cluster_t *c)
{
    pl_tx_sock_t *probe;
    const char *how;
    cr_assert_eq(pl_tx_sock_new(ctx, PL_TX_DEALER, &probe), PL_OK);
    cr_assert_eq(pl_tx_sock_identity(probe, "probe"), PL_OK);
    cr_assert_eq(pl_tx_key_client_setup(probe, NULL, NULL, "node", &how), PL_OK, "%s",
                 pl_error_msg());
    char node_ep[128]; /* where nodes talk: the lane no client reaches */
    tc_node_ep(c->ep, node_ep, sizeof(node_ep));
    cr_assert_eq(pl_tx_sock_connect(probe, node_ep), PL_OK);
    pl_msg_t m;
    pl_msg_init(&m, PL_MSG_HELLO);
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
    return probe;
}

/* The coordinator (its state db in the directory, its default log level, as deployed) and two
 * daemons of one thread each. */
static void s_cluster(tc_cluster_t *c)
{
    char log[600], bin[512], db[600];
    memset(c, 0, sizeof(*c));
    tc_mkdtemp(c->dir, sizeof(c->dir));
    snprintf(c->ep, sizeof(c->ep), "tcp://127.0.0.1:%d", tc_free_port());
    tc_use_state_dir(c);
    snprintf(bin, sizeof(bin), "%s/pipecoord", tc_bin());
    snprintf(log, sizeof(log), "%s/pipecoord.log", c->dir);
    snprintf(db, sizeof(db), "%s/coord.db", c->dir);
    char *argv[] = {bin, "--endpoint", c->ep, "--state-db", db, NULL};
    c->coord = tc_spawn(argv, log);
    tc_start_node(c, "node0", 1, NULL);
    tc_start_node(c, "node1", 1, NULL);
    cr_assert_eq(tc_wait_idle(c, 2, 60), 0, "the daemons did not register");
}

/* A client socket on the coordinator's client endpoint with a local key (admin or node). */
static void *s_client(void *zctx, const tc_cluster_t *c, const char *key)
{
    void *sock = zmq_socket(zctx, ZMQ_DEALER);
    int linger = 0, rcv = 30000;
    zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(sock, ZMQ_RCVTIMEO, &rcv, sizeof(rcv));
    tc_curve_local(sock, key);
    cr_assert_eq(zmq_connect(sock, c->ep), 0);
    return sock;
}

/* Every flood request was answered, each refusal with its reason. */
static void s_assert_answered(const s_flooder_t *f, int n, const s_big_t *b, int n_big)
{
    for (int i = 0; i < n; i++) {
        cr_assert_eq(f[i].answered, f[i].sent, "flooder %d: %ld of %ld requests answered", i,
                     f[i].answered, f[i].sent);
        cr_assert_eq(f[i].mute, 0, "flooder %d: %ld refusals without a reason", i, f[i].mute);
    }
    for (int i = 0; i < n_big; i++)
        cr_assert_eq(b[i].unanswered, 0, "large submitter %d: %ld requests not answered in 30 s",
                     i, b[i].unanswered);
}

static void s_load_line(void)
{
    char *load = NULL;
    tc_sh(&load, "cut -d' ' -f1-3 /proc/loadavg | tr -d '\\n'");
    fprintf(stderr, "flood: %d flooders, %.1f s windows, load average %s (a shared machine: "
                    "labelled measured under load when it is above the core count)\n",
            S_FLOODERS, S_WINDOW_S, load);
    free(load);
}

/* What the coordinator said of its disk: state db commits (the loop's writer thread's) and
 * spec writes (the intake's) that took 100 ms or more (rate-limited lines: a lower bound). */
static void s_disk_line(const tc_cluster_t *c)
{
    char *out = NULL;
    tc_sh(&out, "grep -oE '(writing [a-z ]*|committing [0-9]* write.s.) took [0-9]* ms' %s/pipecoord.log | awk '{n++; if ($(NF-1) > m) "
                "m = $(NF-1)} END {printf \"%%d, max %%d ms\", n, m}'; echo -n '; '; "
                "grep -o 'bytes of specs, took [0-9]* ms' %s/pipecoord.log | awk '{n++; if ($(NF-1) > m) "
                "m = $(NF-1)} END {printf \"%%d, max %%d ms\", n, m}'",
          c->dir, c->dir);
    fprintf(stderr, "flood: slow writes (>= 100 ms): the loop's state db %s spec writes (the spec writer's)\n",
            out);
    free(out);
}

static void s_assert_no_node_lost(const tc_cluster_t *c)
{
    char *lost = NULL;
    tc_sh(&lost, "grep -c 'node node[01] lost' %s/pipecoord.log", c->dir);
    cr_assert_eq(strtol(lost, NULL, 10), 0, "a daemon was declared lost during the flood");
    free(lost);
}

Test(flood, heartbeats_are_answered_through_a_flood, .timeout = 300)
{
    tc_cluster_t c;
    char log[600];
    s_cluster(&c);
    snprintf(log, sizeof(log), "%s/pipecoord.log", c.dir);
    cr_assert_eq(tc_make_model(c.dir, "m", ""), 0, "pl-mkmodel failed");
    pl_tx_ctx_t *ctx;
    cr_assert_eq(pl_tx_ctx_new(&ctx), PL_OK);
    pl_tx_sock_t *probe = s_probe(ctx, &c);

    /* every client ready before the first window: nothing slow between windows */
    static double quiet[256], loud[256], big[256];
    void *zctx = zmq_ctx_new();
    char model[600];
    size_t big_len;
    snprintf(model, sizeof(model), "%s/m", c.dir);
    atomic_bool stop_big = false;
    s_big_t bf = {.sock = s_client(zctx, &c, "admin"), .stop = &stop_big};
    bf.body = s_big_body(model, 400, &big_len);
    s_beat(probe);
    long l0 = s_lines(log);
    int miss_q, miss_l, miss_b;
    int nq = s_heartbeats(probe, quiet, 256, &miss_q);
    long l1 = s_lines(log);

    atomic_bool stop = false;
    s_flooder_t f[S_FLOODERS];
    pthread_t th[S_FLOODERS];
    for (int i = 0; i < S_FLOODERS; i++) /* role-refused messages come with the node key */
        f[i] = (s_flooder_t){.sock = s_client(zctx, &c, i == 1 ? "node" : "admin"), .kind = i,
                             .stop = &stop};
    usleep(300 * 1000); /* handshakes done: the flood starts at once */
    s_beat(probe);
    double t0 = pl_now();
    for (int i = 0; i < S_FLOODERS; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, s_flood, &f[i]), 0);
    long l2 = s_lines(log);
    int nl = s_heartbeats(probe, loud, 256, &miss_l);
    long l3 = s_lines(log);
    long sent_bad = 0;
    for (int i = 0; i < S_FLOODERS; i++)
        sent_bad += f[i].sent;
    double bad_s = pl_now() - t0;

    /* the same flood, and a client sending large valid submissions beside it */
    pthread_t big_th;
    long sent_mid = 0;
    for (int i = 0; i < S_FLOODERS; i++)
        sent_mid += f[i].sent;
    double t1 = pl_now();
    cr_assert_eq(pthread_create(&big_th, NULL, s_big, &bf), 0);
    long l4 = s_lines(log);
    int nb = s_heartbeats(probe, big, 256, &miss_b);
    long l5 = s_lines(log);
    long sent_end = 0;
    for (int i = 0; i < S_FLOODERS; i++)
        sent_end += f[i].sent;
    double big_s = pl_now() - t1;
    atomic_store(&stop, true);
    atomic_store(&stop_big, true);
    long sent = 0;
    for (int i = 0; i < S_FLOODERS; i++) {
        pthread_join(th[i], NULL);
        sent += f[i].sent;
    }
    pthread_join(big_th, NULL);

    s_load_line();
    s_row("quiet", quiet, nq, 0, (double)(l1 - l0) / S_WINDOW_S);
    s_row("bad", loud, nl, (double)sent_bad / bad_s, (double)(l3 - l2) / S_WINDOW_S);
    s_row("bad+large", big, nb, (double)(sent_end - sent_mid) / big_s,
          (double)(l5 - l4) / S_WINDOW_S);
    fprintf(stderr, "flood: large submitter: %ld SUBMITs of %.1f MiB (%.1f MiB/s), %ld accepted "
                    "and canceled\n",
            bf.sent, (double)big_len / (1 << 20), (double)bf.bytes / (1 << 20) / big_s,
            bf.accepted);
    if (nq && nl && nb)
        fprintf(stderr, "flood: p50 ratio bad/quiet %.2f, bad+large/quiet %.2f\n",
                loud[nl / 2] / quiet[nq / 2], big[nb / 2] / quiet[nq / 2]);

    fprintf(stderr, "flood: heartbeats not answered with WELCOME: quiet %d, bad %d, bad+large %d\n",
            miss_q, miss_l, miss_b);
    cr_assert_eq(miss_q + miss_l + miss_b, 0, "every heartbeat is answered");
    cr_assert_gt(nq, 10);
    cr_assert_gt(nl, 10, "heartbeats went on during the flood");
    cr_assert_gt(nb, 0, "heartbeats went on during the flood with large submissions");
    cr_assert_gt(sent, 1000, "the flood flooded (%ld messages)", sent);
    cr_assert_gt(bf.accepted, 0, "no large submission was taken (%ld sent)", bf.sent);
    cr_assert_lt(l3 - l2, sent / 20 + 20, "the log grew by %ld lines for %ld bad messages",
                 l3 - l2, sent);
    s_disk_line(&c);
    s_assert_answered(f, S_FLOODERS, &bf, 1);
    for (int i = 0; i < S_FLOODERS; i++)
        zmq_close(f[i].sock);
    zmq_close(bf.sock);
    free(bf.body);
    zmq_ctx_term(zctx);
    /* the probe was not lost while it heartbeated (a lost node's heartbeat is answered with an
     * ERROR, counted above); it stops after the last window and is, 3 s later. The daemons
     * heartbeat throughout: neither is ever lost. */
    s_assert_no_node_lost(&c);
    cr_assert_eq(tc_wait_idle(&c, 2, 30), 0, "the daemons are still registered and idle");
    pl_tx_sock_destroy(&probe);
    pl_tx_ctx_destroy(&ctx);
    tc_cluster_stop(&c);
    tc_sh(NULL, "rm -rf %s", c.dir);
}

/* pipectl's stdout of a command (stderr dropped), and its exit status in *rc_p. */
__attribute__((noinline)) /* gcc -O3 otherwise sees a dangling pointer into its frame */
static char *s_ctl(const tc_cluster_t *c, int *rc_p, const char *cmd)
{
    char *out;
    int rc = tc_sh(&out, "%s/pipectl -c %s --timeout 10 %s 2>/dev/null", tc_bin(), c->ep, cmd);
    if (rc_p)
        *rc_p = rc;
    return out;
}

/* Job id's state and tokens generated so far, from `pipectl status`. */
static long s_generated(const tc_cluster_t *c, int id, char *state, size_t cap)
{
    char cmd[64];
    snprintf(cmd, sizeof(cmd), "-o json status %d", id);
    char *out = s_ctl(c, NULL, cmd), *at = strstr(out, "\"generated\": ");
    const char *st = strstr(out, "\"state\": \"");
    long n = at ? strtol(at + 13, NULL, 10) : -1;
    snprintf(state, cap, "%.*s", st ? (int)strcspn(st + 10, "\"") : 0, st ? st + 10 : "");
    free(out);
    return n;
}

/* The job of the second test: five prompts decoded on both daemons, long enough to run through
 * both windows (about 1,300 tokens a second here, quiet, under load; slower as they grow). */
#define S_JOB_TOKENS 4000

/* The same flood (with large invalid submissions too) while a decode job runs on the two daemons:
 * its progress reports (written to the state db) and its heartbeats go on, the job's rate is
 * measured in each window, and its tokens are the single-process reference's. */
Test(flood, a_running_job_keeps_its_tokens_and_its_nodes_through_a_flood, .timeout = 400)
{
    tc_cluster_t c;
    s_cluster(&c);
    tc_prompts_and_model(&c);
    char extra[128], cmd[700], state[32] = "";
    snprintf(extra, sizeof(extra), "max_new_tokens: %d\nstop_at_eos: false\nstages: 2\n",
             S_JOB_TOKENS);
    tc_job(&c, "long", "m", extra);
    int rc;
    snprintf(cmd, sizeof(cmd), "submit %s/long.yaml", c.dir);
    char *out = s_ctl(&c, &rc, cmd);
    int id = 0;
    cr_assert(rc == 0 && sscanf(out, "job %d submitted", &id) == 1, "submit: %s", out);
    free(out);
    long g = -1;
    for (int i = 0; i < 600 && (g <= 0 || strcmp(state, "running")); i++) {
        usleep(50 * 1000);
        g = s_generated(&c, id, state, sizeof(state));
    }
    cr_assert_str_eq(state, "running", "the job did not start generating");

    pl_tx_ctx_t *ctx;
    cr_assert_eq(pl_tx_ctx_new(&ctx), PL_OK);
    pl_tx_sock_t *probe = s_probe(ctx, &c);
    static double quiet[256], loud[256];
    int miss_q, miss_l;
    /* every client ready before the first window; the probe answered after each slow step */
    void *zctx = zmq_ctx_new();
    atomic_bool stop = false;
    s_flooder_t f[S_FLOODERS];
    pthread_t th[S_FLOODERS], big_th[2];
    for (int i = 0; i < S_FLOODERS; i++)
        f[i] = (s_flooder_t){.sock = s_client(zctx, &c, i == 1 ? "node" : "admin"), .kind = i,
                             .stop = &stop};
    char model[600];
    size_t big_len, bad_len;
    snprintf(model, sizeof(model), "%s/m", c.dir);
    s_big_t bf[2] = {{.sock = s_client(zctx, &c, "admin"), .stop = &stop},
                     {.sock = s_client(zctx, &c, "admin"), .stop = &stop}};
    bf[0].body = s_big_body(model, 150, &big_len); /* valid: ids in the vocabulary of 256 */
    bf[1].body = s_big_body(model, 400, &bad_len); /* ids past it: refused once decoded */
    usleep(300 * 1000); /* handshakes done */
    s_beat(probe);
    long g0 = s_generated(&c, id, state, sizeof(state));
    double t0 = pl_now();
    s_beat(probe);
    int nq = s_heartbeats(probe, quiet, 256, &miss_q);
    long g1 = s_generated(&c, id, state, sizeof(state));
    double t1 = pl_now();
    bool quiet_ran = strcmp(state, "running") == 0;
    s_beat(probe);
    long g2 = g1;
    double t2 = t1;
    for (int i = 0; i < S_FLOODERS; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, s_flood, &f[i]), 0);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(pthread_create(&big_th[i], NULL, s_big, &bf[i]), 0);
    int nl = s_heartbeats(probe, loud, 256, &miss_l);
    long g3 = s_generated(&c, id, state, sizeof(state));
    double t3 = pl_now();
    bool loud_ran = strcmp(state, "running") == 0;
    long sent = 0;
    for (int i = 0; i < S_FLOODERS; i++)
        sent += f[i].sent;
    atomic_store(&stop, true);
    for (int i = 0; i < S_FLOODERS; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++)
        pthread_join(big_th[i], NULL);

    s_load_line();
    s_row("job-quiet", quiet, nq, 0, 0);
    s_row("job-flood", loud, nl, (double)sent / (t3 - t2), 0);
    fprintf(stderr, "flood: job rate quiet %.0f tok/s%s, flood %.0f tok/s%s (%d sequences, "
                    "2 stages)\n",
            (double)(g1 - g0) / (t1 - t0), quiet_ran ? "" : " (it ended in the window)",
            (double)(g3 - g2) / (t3 - t2), loud_ran ? "" : " (it ended in the window)", 5);
    fprintf(stderr, "flood: large submitters: valid %ld SUBMITs of %.1f MiB, %ld accepted; "
                    "invalid %ld of %.1f MiB, %ld refused\n",
            bf[0].sent, (double)big_len / (1 << 20), bf[0].accepted, bf[1].sent,
            (double)bad_len / (1 << 20), bf[1].refused);
    s_disk_line(&c);
    cr_assert_eq(miss_q + miss_l, 0, "every heartbeat is answered");
    cr_assert_gt(nl, 10, "heartbeats went on during the flood");
    s_assert_answered(f, S_FLOODERS, bf, 2);
    cr_assert_eq(bf[1].accepted, 0, "a job with token ids past the vocabulary was taken");
    cr_assert_gt(bf[0].sent, 0);
    for (int i = 0; i < S_FLOODERS; i++)
        zmq_close(f[i].sock);
    for (int i = 0; i < 2; i++) {
        zmq_close(bf[i].sock);
        free(bf[i].body);
    }
    zmq_ctx_term(zctx);
    pl_tx_sock_destroy(&probe);
    pl_tx_ctx_destroy(&ctx);

    /* the job ends with the tokens one process gives, its nodes never lost */
    for (int i = 0; i < 2400 && strcmp(state, "done") && strcmp(state, "failed"); i++) {
        usleep(50 * 1000);
        s_generated(&c, id, state, sizeof(state));
    }
    cr_assert_str_eq(state, "done", "the job did not finish");
    snprintf(cmd, sizeof(cmd), "results %d", id);
    char *got = s_ctl(&c, &rc, cmd);
    cr_assert_eq(rc, 0, "results: %s", got);
    char *ref = tc_reference(&c, "long");
    cr_assert_str_eq(got, ref, "the job's tokens differ from the single-process reference");
    free(got);
    free(ref);
    s_assert_no_node_lost(&c);
    char *log = NULL;
    tc_sh(&log, "grep -c 'job %d.*\\(resum\\|interrupt\\|requeued\\)' %s/pipecoord.log", id, c.dir);
    cr_assert_eq(strtol(log, NULL, 10), 0, "the job was interrupted during the flood");
    free(log);
    tc_cluster_stop(&c);
    tc_sh(NULL, "rm -rf %s", c.dir);
}
