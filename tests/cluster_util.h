/* Helpers for integration tests that run real processes: spawn pipecoord / pipeld with logs,
 * run a command and capture its output, make a test model, stop everything. Children die with
 * the test process (PR_SET_PDEATHSIG), so a failed assertion leaves nothing behind. */
#ifndef PL_TESTS_CLUSTER_UTIL_H
#define PL_TESTS_CLUSTER_UTIL_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <zmq.h>

#include "common/config.h"
#include "transport/ctl.h"
#include "transport/keys.h"
#include "transport/msg.h"

#define TC_MAX_PROCS 16

/* The first key of a hand-written control message body: the protocol it speaks (ctl.h), without
 * which the coordinator refuses it as a sender of protocol 2 or older. */
#define TC_STR_(x) #x
#define TC_STR(x) TC_STR_(x)
#define TC_PROTO "\"proto\": " TC_STR(PL_PROTO_VERSION) ", "

typedef struct {
    char dir[256]; /* scratch directory: logs, model, job files */
    char ep[96];   /* coordinator endpoint */
    pid_t coord;
    pid_t node[TC_MAX_PROCS];
    int n_nodes;
} tc_cluster_t;

static inline const char *tc_bin(void)
{
    const char *b = getenv("PL_BIN_DIR");
    return b && *b ? b : PL_BIN_DIR;
}

/* A free loopback port whose next port is free too: a coordinator started on tcp://...:PORT
 * binds its node endpoint on PORT + 1 (pl_cfg_node_endpoint). */
static inline int tc_free_port(void)
{
    for (int tries = 0; tries < 64; tries++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0), next = socket(AF_INET, SOCK_STREAM, 0), port = 0;
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof(a);
        if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
            getsockname(fd, (struct sockaddr *)&a, &len) == 0)
            port = ntohs(a.sin_port);
        a.sin_port = htons((uint16_t)(port + 1));
        bool pair = port > 0 && port < 65535 && next >= 0 &&
                    bind(next, (struct sockaddr *)&a, sizeof(a)) == 0;
        if (fd >= 0)
            close(fd);
        if (next >= 0)
            close(next);
        if (pair)
            return port;
    }
    return 0;
}

static inline void tc_mkdtemp(char *out, size_t len)
{
    snprintf(out, len, "/tmp/pl-test-XXXXXX");
    if (!mkdtemp(out))
        abort();
}

/* Run argv (NULL-terminated) in the background with stdout+stderr appended to `log`. */
static inline pid_t tc_spawn(char *const argv[], const char *log)
{
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execvp(argv[0], argv);
        _exit(127);
    }
    return pid;
}

/* Run a shell command; stdout into a malloc'd *out (may be NULL); returns the exit status. */
static inline int tc_sh(char **out, const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    FILE *p = popen(cmd, "r");
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    if (!p || !buf)
        abort();
    for (size_t n; (n = fread(buf + len, 1, cap - len - 1, p)) > 0;) {
        len += n;
        if (cap - len < 1024)
            buf = realloc(buf, cap *= 2);
    }
    buf[len] = '\0';
    int st = pclose(p);
    if (out)
        *out = buf;
    else
        free(buf);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static inline void tc_write(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        abort();
    fputs(text, f);
    fclose(f);
}

/* Each test's processes share a state directory of their own (the local cluster's keys), which
 * the pipeld and pipectl children inherit through the environment. */
static inline void tc_use_state_dir(tc_cluster_t *c)
{
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/state", c->dir);
    setenv("PIPELD_STATE_DIR", dir, 1);
}

/* A raw ZeroMQ test socket speaks CURVE with the local state directory's pair `which`
 * ("admin", "node"), waiting up to 10 s for the coordinator to have made it. */
static inline void tc_curve_local(void *sock, const char *which)
{
    char dir[512], path[600], server[PL_TX_KEY_LEN + 1];
    pl_tx_keypair_t p;
    cr_assert_eq(pl_tx_key_local_dir(dir, sizeof(dir)), 0);
    snprintf(path, sizeof(path), "%s/coordinator.pub", dir);
    for (int i = 0; i < 100 && access(path, R_OK) != 0; i++)
        usleep(100 * 1000);
    cr_assert_eq(pl_tx_key_local_pair(dir, which, &p), 0, "%s", pl_error_msg());
    cr_assert_eq(pl_tx_key_load_public(path, server), 0, "%s", pl_error_msg());
    cr_assert_eq(zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, server, 40), 0);
    cr_assert_eq(zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, p.public_key, 40), 0);
    cr_assert_eq(zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, p.secret_key, 40), 0);
}

/* The coordinator's node endpoint for its client endpoint ep (what pipecoord binds and pipeld
 * connects to when neither is told otherwise): raw test sockets that play a node use it. */
static inline void tc_node_ep(const char *ep, char *out, size_t len)
{
    cr_assert_eq(pl_cfg_node_endpoint(ep, NULL, out, len), PL_OK, "%s", pl_error_msg());
}

/* A raw DEALER with routing id `id` (NULL: one of ZeroMQ's), no linger, its receives timing out
 * after rcv_ms; the caller sets its keys and connects it. */
static inline void *tc_dealer(void *ctx, const char *id, int rcv_ms)
{
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    int linger = 0;
    cr_assert_not_null(s, "zmq_socket: %s", zmq_strerror(zmq_errno()));
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &rcv_ms, sizeof(rcv_ms));
    if (id)
        zmq_setsockopt(s, ZMQ_ROUTING_ID, id, strlen(id));
    return s;
}

/* tc_dealer (5 s receives) speaking CURVE with the local pair `which`, connected to ep. */
static inline void *tc_dealer_local(void *ctx, const char *id, const char *which, const char *ep)
{
    void *s = tc_dealer(ctx, id, 5000);
    tc_curve_local(s, which);
    cr_assert_eq(zmq_connect(s, ep), 0, "connect %s: %s", ep, zmq_strerror(zmq_errno()));
    return s;
}

/* m on sock as it goes on the wire: its type, then its body as compact JSON (m stays the
 * caller's: borrowed parts are not cleared). */
static inline void tc_send_msg(void *sock, const pl_msg_t *m)
{
    json_t *body;
    cr_assert_eq(pl_msg_encode(m, &body), PL_OK, "%s", pl_error_msg());
    char *text = json_dumps(body, JSON_COMPACT);
    const char *type = pl_msg_name(m->type);
    zmq_send(sock, type, strlen(type), ZMQ_SNDMORE);
    zmq_send(sock, text, strlen(text), 0);
    free(text);
    json_decref(body);
}

/* The next answer on sock: its type part (up to 31 bytes) into type[32] and its body (up to
 * cap - 1 bytes) into body, both NUL-ended and empty when none came; false on timeout. */
static inline bool tc_recv_answer(void *sock, char *type, char *body, size_t cap)
{
    type[0] = body[0] = '\0';
    int n = zmq_recv(sock, type, 31, 0);
    if (n < 0)
        return false;
    type[n < 31 ? n : 31] = '\0';
    n = zmq_recv(sock, body, cap - 1, 0);
    body[n < 0 ? 0 : (size_t)n < cap - 1 ? (size_t)n : cap - 1] = '\0';
    return true;
}

/* A HELLO of this protocol from node `name` on host "fakehost", with no devices yet. */
static inline void tc_hello(pl_msg_t *m, const char *name)
{
    pl_msg_init(m, PL_MSG_HELLO);
    snprintf(m->hello.node, sizeof(m->hello.node), "%s", name);
    snprintf(m->hello.host, sizeof(m->hello.host), "fakehost");
    snprintf(m->hello.health.node, sizeof(m->hello.health.node), "%s", name);
}

static inline void tc_start_coord(tc_cluster_t *c, const char *bind_ep)
{
    char bin[512], log[512], db[512];
    tc_use_state_dir(c);
    snprintf(bin, sizeof(bin), "%s/pipecoord", tc_bin());
    snprintf(log, sizeof(log), "%s/pipecoord.log", c->dir);
    snprintf(db, sizeof(db), "%s/coord.db", c->dir); /* each test its own state: ids from 1 */
    char *argv[] = {bin, "--endpoint",  (char *)bind_ep, "--state-db",
                    db,  "--log-level", "debug",         NULL};
    c->coord = tc_spawn(argv, log);
}

/* A coordinator on c->ep from the cluster file c->dir/cluster.yaml: its endpoint, then the YAML
 * lines `extra` (may be NULL); its database in c->dir, the test's own state directory. */
static inline void tc_start_coord_file(tc_cluster_t *c, const char *extra)
{
    char path[512], text[4096], bin[512], log[512], db[512];
    tc_use_state_dir(c);
    snprintf(path, sizeof(path), "%s/cluster.yaml", c->dir);
    int len =
        snprintf(text, sizeof(text), "coordinator:\n  endpoint: %s\n%s", c->ep, extra ? extra : "");
    cr_assert(len > 0 && (size_t)len < sizeof(text), "cluster file of %d bytes", len);
    tc_write(path, text);
    snprintf(bin, sizeof(bin), "%s/pipecoord", tc_bin());
    snprintf(log, sizeof(log), "%s/pipecoord.log", c->dir);
    snprintf(db, sizeof(db), "%s/coord.db", c->dir);
    char *argv[] = {bin, "--cluster", path, "--state-db", db, "--log-level", "debug", NULL};
    c->coord = tc_spawn(argv, log);
}

/* Start a daemon; `wrap` (may be NULL) is a prefix command line such as
 * "ip netns exec ns0 unshare --uts --ipc --". */
static inline void tc_start_node(tc_cluster_t *c, const char *name, int threads, const char *wrap)
{
    char cmd[1024], log[512];
    snprintf(log, sizeof(log), "%s/%s.log", c->dir, name);
    snprintf(cmd, sizeof(cmd), "exec %s %s/pipeld --name %s --coordinator %s --threads %d",
             wrap ? wrap : "", tc_bin(), name, c->ep, threads);
    char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    c->node[c->n_nodes++] = tc_spawn(argv, log);
}

/* Start daemon `name` into slot i (i == c->n_nodes: a new one; else it replaces a stopped one)
 * from a node file of its own: name, coordinator, threads and the YAML lines `extra` (may be
 * NULL), e.g. "memory_limit_mb: 8\n". */
static inline void tc_start_node_file(tc_cluster_t *c, int i, const char *name, int threads,
                                      const char *extra)
{
    char cmd[1024], log[512], path[512], text[1024];
    snprintf(log, sizeof(log), "%s/%s.log", c->dir, name);
    snprintf(path, sizeof(path), "%s/%s.node.yaml", c->dir, name);
    snprintf(text, sizeof(text), "name: %s\ncoordinator: %s\nthreads: %d\n%s", name, c->ep,
             threads, extra ? extra : "");
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "exec %s/pipeld --config %s", tc_bin(), path);
    char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    c->node[i] = tc_spawn(argv, log);
    if (i == c->n_nodes)
        c->n_nodes++;
}

static inline double tc_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t); /* the clock pl_now() reads in every process */
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Resident set of a process in KiB (/proc/PID/status VmRSS); -1 when it is gone. */
static inline long tc_rss_kb(pid_t pid)
{
    char path[64], line[256];
    long kb = -1;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

/* Wait until `n` nodes are registered and idle; returns 0 when they are. */
static inline int tc_wait_idle(tc_cluster_t *c, int n, double timeout_s)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        char *out = NULL;
        tc_sh(&out, "%s/pipectl -c %s --timeout 2 -o json nodes 2>/dev/null", tc_bin(), c->ep);
        int idle = 0;
        for (char *p = out; (p = strstr(p, "\"state\": \"idle\"")); p++)
            idle++;
        free(out);
        if (idle >= n)
            return 0;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) * 1e-9 > timeout_s)
            return -1;
        usleep(100 * 1000);
    }
}

/* A fresh scratch directory, the test's own state directory and a free loopback endpoint in c;
 * nothing started. */
static inline void tc_cluster_init(tc_cluster_t *c)
{
    memset(c, 0, sizeof(*c));
    tc_mkdtemp(c->dir, sizeof(c->dir));
    tc_use_state_dir(c);
    snprintf(c->ep, sizeof(c->ep), "tcp://127.0.0.1:%d", tc_free_port());
}

/* Start a coordinator and n local daemons with the given thread counts on loopback. */
static inline int tc_cluster_start(tc_cluster_t *c, int n, const int *threads)
{
    tc_cluster_init(c);
    tc_start_coord(c, c->ep);
    for (int i = 0; i < n; i++) {
        char name[16];
        snprintf(name, sizeof(name), "node%d", i);
        tc_start_node(c, name, threads ? threads[i] : 1, NULL);
    }
    return tc_wait_idle(c, n, 60);
}

/* n more daemons (node0, node1, ... after the ones started) of one thread each; asserts that all
 * of the cluster's daemons registered and are idle. */
static inline void tc_start_nodes(tc_cluster_t *c, int n)
{
    for (int i = 0; i < n; i++) {
        char name[16];
        snprintf(name, sizeof(name), "node%d", c->n_nodes);
        tc_start_node(c, name, 1, NULL);
    }
    cr_assert_eq(tc_wait_idle(c, c->n_nodes, 60), 0, "daemons did not register");
}

/* tc_cluster_init, a coordinator from a cluster file with `extra` (tc_start_coord_file) and n
 * daemons registered and idle. */
static inline void tc_cluster_start_file(tc_cluster_t *c, const char *extra, int n)
{
    tc_cluster_init(c);
    tc_start_coord_file(c, extra);
    tc_start_nodes(c, n);
}

static inline void tc_cluster_stop(tc_cluster_t *c)
{
    if (c->coord > 0)
        tc_sh(NULL, "%s/pipectl -c %s --timeout 2 shutdown >/dev/null 2>&1", tc_bin(), c->ep);
    for (int i = 0; i < c->n_nodes; i++)
        if (c->node[i] > 0)
            kill(c->node[i], SIGTERM);
    if (c->coord > 0)
        kill(c->coord, SIGTERM);
    for (int i = 0; i < c->n_nodes; i++)
        if (c->node[i] > 0)
            waitpid(c->node[i], NULL, 0);
    if (c->coord > 0)
        waitpid(c->coord, NULL, 0);
    c->coord = 0;
    c->n_nodes = 0;
}

/* Print every log of the cluster (on failure, to see why). */
static inline void tc_dump_logs(const tc_cluster_t *c)
{
    tc_sh(NULL, "for f in %s/*.log; do echo \"== $f\" >&2; tail -n 30 \"$f\" >&2; done", c->dir);
}

/* The end of a cluster test: its daemons and coordinator stopped; their logs shown when the test
 * did not get to its end (`passed` false), else its directory removed. */
static inline void tc_cluster_end(tc_cluster_t *c, bool passed)
{
    if (c->coord > 0 && !passed)
        tc_dump_logs(c);
    tc_cluster_stop(c);
    if (passed && c->dir[0]) /* keep the logs of a failed test */
        tc_sh(NULL, "rm -rf %s", c->dir);
}

/* Make a small random Llama model in dir/name with extra pl-mkmodel arguments. */
static inline int tc_make_model(const char *dir, const char *name, const char *args)
{
    return tc_sh(NULL, "%s/pl-mkmodel --out %s/%s %s >/dev/null", tc_bin(), dir, name, args);
}

/* The integration suites' usual prompts: five of mixed lengths. */
#define TC_PROMPTS                                                                                 \
    "[1, 15, 27, 99]\n"                                                                            \
    "[1, 7]\n"                                                                                     \
    "[1, 100, 101, 102, 103, 104, 105, 106, 107]\n"                                                \
    "[1, 42, 42]\n"                                                                                \
    "[3, 200, 5, 17, 9]\n"

/* TC_PROMPTS into c->dir/prompts.jsonl. */
static inline void tc_write_prompts(const tc_cluster_t *c)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/prompts.jsonl", c->dir);
    tc_write(path, TC_PROMPTS);
}

/* TC_PROMPTS and the integration suites' model c->dir/m: 6 layers, hidden 128, vocab 256, 4096
 * positions, seed 7. */
static inline void tc_prompts_and_model(const tc_cluster_t *c)
{
    tc_write_prompts(c);
    cr_assert_eq(tc_make_model(c->dir, "m",
                               "--layers 6 --hidden 128 --intermediate 344 --heads 4 "
                               "--kv-heads 2 --vocab 256 --seed 7 --max-pos 4096"),
                 0);
}

/* The pipeline job files of these tests: dir/NAME.yaml for model dir/MODEL with extra YAML lines.
 * They are about the pipeline, so every node stays in it (the default plan may pick one device
 * for a model this small). */
static inline void tc_job(const tc_cluster_t *c, const char *name, const char *model,
                          const char *extra)
{
    char path[512], text[2048];
    snprintf(path, sizeof(path), "%s/%s.yaml", c->dir, name);
    snprintf(text, sizeof(text), "model: %s\nprompts: prompts.jsonl\nplanner: optimal\n%s", model,
             extra);
    tc_write(path, text);
}

/* Reference tokens from one process, one stage, all sequences in one microbatch. */
static inline char *tc_reference(const tc_cluster_t *c, const char *job)
{
    char *out;
    int rc = tc_sh(&out, "%s/pl-generate --microbatches 1 %s/%s.yaml 2>/dev/null", tc_bin(),
                   c->dir, job);
    cr_assert_eq(rc, 0, "pl-generate failed");
    cr_assert(strstr(out, "\"tokens\""), "reference has no tokens: %s", out);
    return out;
}

/* JSONL text (pl-generate's results, a line each) as one array; a line that is not JSON fails. */
static inline json_t *tc_jsonl_array(const char *text)
{
    json_t *arr = json_array();
    for (const char *l = text; l && *l;) {
        const char *nl = strchr(l, '\n');
        size_t n = nl ? (size_t)(nl - l) : strlen(l);
        if (n) {
            json_t *v = json_loadb(l, n, 0, NULL);
            cr_assert_not_null(v, "not a result line: %.*s", (int)n, l);
            json_array_append_new(arr, v);
        }
        l = nl ? nl + 1 : NULL;
    }
    return arr;
}

/* Submit dir/JOB.yaml and wait: the results on stdout, pipectl's stderr kept in dir/JOB.err. */
static inline char *tc_submit(const tc_cluster_t *c, const char *job, int *rc_p)
{
    char *out;
    *rc_p = tc_sh(&out, "%s/pipectl -c %s --timeout 5 submit %s/%s.yaml --wait 2>%s/%s.err",
                  tc_bin(), c->ep, c->dir, job, c->dir, job);
    return out;
}

static inline char *tc_err(const tc_cluster_t *c, const char *job)
{
    char *out;
    tc_sh(&out, "cat %s/%s.err", c->dir, job);
    return out;
}

/* Submit dir/JOB.yaml and wait: pipectl succeeds and its results are the single-process
 * reference's (tc_reference). */
static inline void tc_expect_reference(const tc_cluster_t *c, const char *job)
{
    int rc;
    char *ref = tc_reference(c, job), *got = tc_submit(c, job, &rc), *err = tc_err(c, job);
    cr_assert_eq(rc, 0, "%s: %s", job, err);
    cr_assert_str_eq(got, ref, "%s", job);
    free(ref);
    free(got);
    free(err);
}

/* `pipectl -o json status ID` (NULL when there is no answer, as while the coordinator starts). */
static inline json_t *tc_status_json(const tc_cluster_t *c, int id)
{
    char *out;
    int rc = tc_sh(&out, "%s/pipectl -c %s --timeout 2 -o json status %d 2>/dev/null", tc_bin(),
                   c->ep, id);
    json_error_t e;
    json_t *v = rc == 0 ? json_loads(out, 0, &e) : NULL;
    free(out);
    return v;
}

/* A status's "state" ("" when it has none). */
static inline const char *tc_status_state(const json_t *st)
{
    const char *s = json_string_value(json_object_get(st, "state"));
    return s ? s : "";
}

/* The training suites' model and corpus: c->dir/PREFIXtiny, the tiny model (3 layers, hidden 32,
 * vocab 64, seed 3), and c->dir/PREFIXcorpus.tok, a repetitive corpus of token ids. */
static inline void tc_train_data(const tc_cluster_t *c, const char *prefix)
{
    char path[600], text[8192];
    snprintf(path, sizeof(path), "%stiny", prefix);
    cr_assert_eq(tc_make_model(c->dir, path,
                               "--layers 3 --hidden 32 --intermediate 64 "
                               "--heads 4 --kv-heads 2 --vocab 64 --seed 3"),
                 0);
    size_t n = 0;
    for (int i = 0; i < 700; i++)
        n += (size_t)snprintf(text + n, sizeof(text) - n, "%d ", (i * 7 + 3) % 61);
    snprintf(path, sizeof(path), "%s/%scorpus.tok", c->dir, prefix);
    tc_write(path, text);
}

/* The training suites' cluster: n daemons of one thread each and tc_train_data in c->dir. */
static inline void tc_train_start(tc_cluster_t *c, int n_nodes)
{
    cr_assert_eq(tc_cluster_start(c, n_nodes, NULL), 0, "nodes did not register");
    tc_train_data(c, "");
}

/* dir/NAME.yaml: a training job of the tiny model on the corpus, 2 stages, `steps` steps of
 * `batch` sequences of seq_len tokens, `extra` lines after. */
static inline void tc_train_file(const tc_cluster_t *c, const char *name, int seq_len, int batch,
                                 int steps, const char *extra)
{
    char path[600], text[2048];
    snprintf(path, sizeof(path), "%s/%s.yaml", c->dir, name);
    snprintf(text, sizeof(text),
             "model: tiny\ndata:\n  tokens: corpus.tok\nseq_len: %d\nglobal_batch: %d\n"
             "steps: %d\noptimizer:\n  lr: 1.0e-2\n  warmup_steps: 1\n  clip_norm: 0.5\n"
             "stages: 2\n%s",
             seq_len, batch, steps, extra);
    tc_write(path, text);
}

#endif
