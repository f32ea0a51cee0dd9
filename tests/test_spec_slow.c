/* Integration: a SUBMIT's spec commit on a slow disk (tests/slow_fsync.c preloaded into pipecoord:
 * every sync of the specs file sleeps) holds no other client: their small requests are answered
 * while it commits, the submitter hears its answers in the order it asked, and a kill -9 during
 * the commit loses no accepted job and leaves no half job. Real processes on loopback. */
#include "cluster_util.h"
#include "common/util.h"
#include "job_util.h"
#include "transport/msg.h"

#include <criterion/criterion.h>
#include <poll.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <zmq.h>

#define S_SLOW_MS 1000 /* each sync of the specs file */

static tc_cluster_t s_c;
static int s_passed;

static void s_teardown(void)
{
    tc_cluster_end(&s_c, s_passed);
}

TestSuite(spec_slow, .fini = s_teardown, .timeout = 180);

/* pipecoord on s_c.ep and s_c.dir/coord.db; slow: with the slow disk under its specs file
 * (slow_ms per sync; 0: S_SLOW_MS). */
static void s_start_coord_ms(bool slow, int slow_ms)
{
    tc_slow_disk_t disk;
    if (slow) /* coord-specs.db and its -wal */
        tc_slow_disk_on(&disk, "coord-specs.db", slow_ms > 0 ? slow_ms : S_SLOW_MS, NULL);
    tc_start_coord(&s_c, s_c.ep);
    if (slow) /* pipectl and the rest run at full speed */
        tc_slow_disk_off(&disk);
    /* its start syncs the specs file several times: the keys come after */
    char pub[600];
    snprintf(pub, sizeof(pub), "%s/state/keys/coordinator.pub", s_c.dir);
    for (double end = pl_now() + 60; access(pub, R_OK) != 0 && pl_now() < end;)
        usleep(100 * 1000);
}

static void s_start_coord(bool slow)
{
    s_start_coord_ms(slow, 0);
}

static void s_send(void *sock, const char *type, const char *body)
{
    cr_assert_geq(zmq_send(sock, type, strlen(type), ZMQ_SNDMORE), 0);
    cr_assert_geq(zmq_send(sock, body, strlen(body), 0), 0);
}

/* The next answer on sock within 20 s (asserted), and when it came (pl_now). */
static double s_answer(void *sock, char *type, char *body, size_t cap)
{
    struct pollfd p = {.events = POLLIN};
    size_t len = sizeof(p.fd);
    cr_assert_eq(zmq_getsockopt(sock, ZMQ_FD, &p.fd, &len), 0);
    for (double end = pl_now() + 20;;) {
        int ev = 0;
        size_t el = sizeof(ev);
        zmq_getsockopt(sock, ZMQ_EVENTS, &ev, &el);
        if (ev & ZMQ_POLLIN)
            break;
        cr_assert_lt(pl_now(), end, "no answer in 20 s");
        poll(&p, 1, 10);
    }
    double t = pl_now();
    cr_assert(tc_recv_answer(sock, type, body, cap));
    return t;
}

/* The job id in an "accepted" answer (a REPLY's "job"), asserted. */
static int s_accepted(const char *type, const char *body)
{
    cr_assert_str_eq(type, "REPLY", "not accepted: %s", body);
    const char *at = strstr(body, "\"job\":");
    cr_assert_not_null(at, "%s", body);
    return (int)strtol(at + 6, NULL, 10);
}

/* The ids of the specs in the specs file, ascending, into ids (cap); their count. */
static int s_stored_specs(int *ids, int cap)
{
    char path[600];
    sqlite3 *db;
    sqlite3_stmt *q;
    int n = 0;
    snprintf(path, sizeof(path), "%s/coord-specs.db", s_c.dir);
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK, "%s", path);
    cr_assert_eq(sqlite3_prepare_v2(db, "SELECT id FROM specs ORDER BY id", -1, &q, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(db));
    while (sqlite3_step(q) == SQLITE_ROW && n < cap)
        ids[n++] = sqlite3_column_int(q, 0);
    sqlite3_finalize(q);
    sqlite3_close(db);
    return n;
}

Test(spec_slow, small_requests_pass_a_slow_spec_commit_and_a_kill_during_it_loses_nothing_accepted)
{
    char type[32], body[8192], submit[1024], status[128];
    tc_cluster_init(&s_c);
    cr_assert_eq(tc_make_model(s_c.dir, "m", ""), 0, "pl-mkmodel failed");
    /* placed on a node that is not there: it stays queued, no daemon needed */
    snprintf(submit, sizeof(submit),
             "{" TC_PROTO "\"model\": \"%s/m\", \"nodes\": [\"elsewhere\"], "
             "\"gen\": {\"max_new_tokens\": 1, \"prompts\": [[1, 2, 3]]}}",
             s_c.dir);
    s_start_coord(true);
    void *zctx = zmq_ctx_new();
    void *a = tc_dealer_local(zctx, "submitter", "admin", s_c.ep);
    void *b = tc_dealer_local(zctx, "asker", "admin", s_c.ep);
    pl_msg_t nodes;
    pl_msg_init(&nodes, PL_MSG_NODES);

    /* one job accepted through the slow disk */
    s_send(a, "SUBMIT", submit);
    s_answer(a, type, body, sizeof(body));
    int job1 = s_accepted(type, body);

    /* the submitter pipelines a SUBMIT and a STATUS; another client asks for the nodes after */
    double t0 = pl_now();
    s_send(a, "SUBMIT", submit);
    snprintf(status, sizeof(status), "{" TC_PROTO "\"job\": %d}", job1);
    s_send(a, "STATUS", status);
    usleep(50 * 1000); /* the SUBMIT is at the intake first */
    double t_ask = pl_now();
    tc_send_msg(b, &nodes);
    double t_b = s_answer(b, type, body, sizeof(body));
    cr_assert_str_eq(type, "REPLY", "%s", body);
    cr_assert_eq(zmq_recv(a, type, sizeof(type) - 1, ZMQ_DONTWAIT), -1,
                 "the other client's NODES was answered only after the spec's commit");
    double t_a = s_answer(a, type, body, sizeof(body));
    int job2 = s_accepted(type, body);
    cr_assert_gt(job2, job1);
    s_answer(a, type, body, sizeof(body)); /* its STATUS, after its SUBMIT's answer */
    cr_assert_str_eq(type, "REPLY", "%s", body);
    cr_assert(strstr(body, "queued") || strstr(body, "state"), "not a status: %s", body);
    fprintf(stderr,
            "spec_slow: each sync of the specs file %d ms: NODES of another client answered "
            "in %.1f ms, the SUBMIT's accepted after %.0f ms\n",
            S_SLOW_MS, (t_b - t_ask) * 1e3, (t_a - t0) * 1e3);

    /* a kill -9 while a third spec commits: no answer was given, and none is lost */
    s_send(a, "SUBMIT", submit);
    usleep(50 * 1000);
    tc_send_msg(b, &nodes); /* answered: the intake is past the SUBMIT, the writer in its sync */
    s_answer(b, type, body, sizeof(body));
    cr_assert_str_eq(type, "REPLY", "%s", body);
    cr_assert_eq(zmq_recv(a, type, sizeof(type) - 1, ZMQ_DONTWAIT), -1,
                 "the third SUBMIT was answered before its spec's commit ended");
    kill(s_c.coord, SIGKILL);
    waitpid(s_c.coord, NULL, 0);
    s_start_coord(false);
    json_t *st = NULL;
    for (double end = pl_now() + 30; !st && pl_now() < end; usleep(100 * 1000))
        st = tc_status_json(&s_c, job1);
    cr_assert_not_null(st, "the coordinator did not come back");
    json_decref(st);
    for (int id = job1; id <= job2; id++) { /* the accepted jobs, each with its spec */
        st = tc_status_json(&s_c, id);
        cr_assert_not_null(st, "accepted job %d lost", id);
        const char *err = json_string_value(json_object_get(st, "error"));
        cr_assert(!err || !strstr(err, "spec is missing"), "job %d: %s", id, err);
        json_decref(st);
    }
    st = tc_status_json(&s_c, job2 + 1);
    cr_assert_null(st, "the killed SUBMIT left a job behind");
    int ids[8], n = s_stored_specs(ids, 8);
    cr_assert_eq(n, 2, "the specs file holds %d specs, not the two accepted jobs'", n);
    cr_assert(ids[0] == job1 && ids[1] == job2);
    /* and the next SUBMIT is accepted as a new job */
    s_send(a, "SUBMIT", submit);
    s_answer(a, type, body, sizeof(body));
    cr_assert_gt(s_accepted(type, body), job2);

    zmq_close(a);
    zmq_close(b);
    zmq_ctx_term(zctx);
    s_passed = 1;
}

/* A large submitter: valid SUBMITs of about 4.6 MiB (1,200 prompts of 1,000 tokens, placed on a
 * node that is not there), each killed once accepted, until stop. */
typedef struct {
    void *sock;
    char *body;
    atomic_bool stop;
    long sent, accepted;
} s_big_t;

static void *s_big(void *arg)
{
    s_big_t *f = arg;
    char type[32], buf[4096];
    size_t len = strlen(f->body);
    while (!atomic_load(&f->stop)) {
        if (zmq_send(f->sock, "SUBMIT", 6, ZMQ_SNDMORE) < 0 ||
            zmq_send(f->sock, f->body, len, 0) < 0)
            break;
        f->sent++;
        if (!tc_recv_answer(f->sock, type, buf, sizeof(buf)) || strcmp(type, "REPLY") != 0)
            continue;
        const char *at = strstr(buf, "\"job\":");
        long job = at ? strtol(at + 6, NULL, 10) : 0;
        if (job <= 0)
            continue;
        f->accepted++;
        snprintf(buf, sizeof(buf), "{" TC_PROTO "\"job\": %ld}", job);
        if (zmq_send(f->sock, "KILL", 4, ZMQ_SNDMORE) >= 0 &&
            zmq_send(f->sock, buf, strlen(buf), 0) >= 0)
            tc_recv_answer(f->sock, type, buf, sizeof(buf));
    }
    return NULL;
}

static int s_cmp(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* A small request every 20 ms for secs, each answer's time in ms; printed as a row. bad: one the
 * intake refuses itself (a body that is not JSON), else NODES (answered by the loop). */
static void s_window(void *sock, const char *what, double secs, bool bad)
{
    static double ms[4096];
    char type[32], body[8192];
    pl_msg_t nodes;
    pl_msg_init(&nodes, PL_MSG_NODES);
    int n = 0;
    for (double end = pl_now() + secs; pl_now() < end && n < 4096;) {
        double t = pl_now();
        if (bad)
            s_send(sock, "STATUS", "{");
        else
            tc_send_msg(sock, &nodes);
        ms[n++] = (s_answer(sock, type, body, sizeof(body)) - t) * 1e3;
        cr_assert_str_eq(type, bad ? "ERROR" : "REPLY", "%s", body);
        double left = 0.020 - (pl_now() - t);
        if (left > 0)
            usleep((useconds_t)(left * 1e6));
    }
    qsort(ms, (size_t)n, sizeof(ms[0]), s_cmp);
    double load[3] = {0};
    getloadavg(load, 3);
    fprintf(stderr,
            "spec_slow: %-12s %4d small requests  answer p50 %8.3f ms  p99 %8.3f ms  "
            "max %8.3f ms  (load average %.2f %.2f %.2f)\n",
            what, n, ms[n / 2], ms[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1], ms[n - 1], load[0],
            load[1], load[2]);
}

/* The bench's (bench/bench_spec_slow.sh): a small request's answer time alone, then while a
 * client submits large valid jobs back to back; on the real disk, or with PL_BENCH_SLOW_FSYNC_MS
 * set, on the slow one. Every small request is answered (asserted); the times are printed. */
Test(spec_slow, small_request_answer_times_while_large_submits_stream, .timeout = 120)
{
    const char *slow = getenv("PL_BENCH_SLOW_FSYNC_MS");
    tc_cluster_init(&s_c);
    cr_assert_eq(tc_make_model(s_c.dir, "m", ""), 0, "pl-mkmodel failed");
    s_start_coord_ms(slow && atoi(slow) > 0, slow ? atoi(slow) : 0);
    void *zctx = zmq_ctx_new();
    void *b = tc_dealer_local(zctx, "asker", "admin", s_c.ep);
    static s_big_t f;
    f.sock = tc_dealer_local(zctx, "big", "admin", s_c.ep);
    int rcv = 60000;
    zmq_setsockopt(f.sock, ZMQ_RCVTIMEO, &rcv, sizeof(rcv));
    size_t cap = (size_t)1200 * 1000 * 6 + 4096, len = 0;
    f.body = malloc(cap);
    cr_assert_not_null(f.body);
    len += (size_t)snprintf(f.body, cap,
                            "{" TC_PROTO "\"model\": \"%s/m\", \"nodes\": "
                            "[\"elsewhere\"], \"gen\": {\"max_new_tokens\": 1, \"prompts\": [",
                            s_c.dir);
    for (int p = 0; p < 1200; p++) {
        f.body[len++] = p ? ',' : '[';
        if (p)
            f.body[len++] = '[';
        for (int t = 0; t < 1000; t++)
            len += (size_t)snprintf(f.body + len, cap - len, t ? ",%d" : "%d",
                                    100 + (p * 7 + t) % 150);
        f.body[len++] = ']';
    }
    snprintf(f.body + len, cap - len, "]}}");
    s_window(b, "warm-up", 1, false);
    s_window(b, "quiet/NODES", 4, false);
    s_window(b, "quiet/bad", 4, true);
    pthread_t th;
    pthread_create(&th, NULL, s_big, &f);
    s_window(b, "large/NODES", 8, false);
    s_window(b, "large/bad", 8, true);
    atomic_store(&f.stop, true);
    pthread_join(th, NULL);
    fprintf(stderr, "spec_slow: large submitter: %ld SUBMITs of %.1f MiB, %ld accepted; sync %s\n",
            f.sent, (double)strlen(f.body) / (1 << 20), f.accepted, slow ? slow : "real disk");
    free(f.body);
    zmq_close(f.sock);
    zmq_close(b);
    zmq_ctx_term(zctx);
    s_passed = 1;
}
