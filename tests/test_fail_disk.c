/* Integration (issue 13): what a client hears when the state db refuses a write its answer
 * promised, and the order of a finished job's two deletions. pipecoord runs on the slow-disk shim
 * (tests/slow_fsync.c): while a flag file exists every fsync of coord.db's files fails (EIO), as
 * a disk that cannot write does. A DRAIN, an UNDRAIN, a SUBMIT and a KILL whose writes fail are
 * each answered with the refusal naming the write, in the client's order; the drained mark is
 * set back to what the disk keeps (also through two failed writes in a row), a job whose cancel
 * was not saved comes back after a restart as the answer said; a trimmed job whose row deletion
 * failed keeps its spec. Then with every fsync of coord.db slowed to 1.5 s: while a trimmed
 * job's row deletion is not committed its spec is still in the specs file, and it goes once the
 * deletion is. A refused SUBMIT's job is gone: not in JOBS nor STATUS, then or after a restart.
 * A job assigned while the disk fails: the row with its epoch is refused, so its stage never
 * hears of that epoch (the daemon's log shows no assignment), and it plans again once the disk
 * works, and runs to the end. A write that lands after a refused one may carry lower counters
 * than the disk has (the intake's and the loop's writes, or a write queued before the refusal):
 * the counters on disk only move forward. */
#include "cluster_util.h"
#include "common/util.h"
#include "daemon/coord_store.h"
#include "job_util.h"
#include "transport/msg.h"

#include <criterion/criterion.h>
#include <sqlite3.h>
#include <zmq.h>

#define S_SLOW_MS 1500
/* the first run's fsyncs: slow enough that two pipelined writes wait at once */
#define S_FIRST_MS 200
/* results_kept 1: the second finished job trims the first; n1 a node the cluster file names */
#define S_EXTRA "  results_kept: 1\nnodes:\n  - name: n1\n"

static tc_cluster_t s_c;
static int s_passed;
static char s_flag[600], s_submit[1024];

static void s_teardown(void)
{
    tc_cluster_end(&s_c, s_passed);
}

TestSuite(fail_disk, .fini = s_teardown, .timeout = 240);

/* The disk fails (the flag file exists) or works. */
static void s_disk_fails(bool fails)
{
    if (fails)
        tc_write(s_flag, "");
    else
        cr_assert(unlink(s_flag) == 0 || errno == ENOENT, "unlink %s", s_flag);
}

/* pipecoord from the cluster file, its coord.db's fsyncs slowed by slow_ms and failing while
 * the flag exists. */
static void s_start(int slow_ms)
{
    char db[600];
    tc_slow_disk_t disk;
    snprintf(db, sizeof(db), "%s/coord.db", s_c.dir);
    tc_slow_disk_on(&disk, db, slow_ms, s_flag);
    tc_start_coord_file(&s_c, S_EXTRA);
    tc_slow_disk_off(&disk);
    char pub[600];
    snprintf(pub, sizeof(pub), "%s/state/keys/coordinator.pub", s_c.dir);
    for (double end = pl_now() + 60; access(pub, R_OK) != 0 && pl_now() < end;)
        usleep(100 * 1000);
}

static void s_stop(void)
{
    kill(s_c.coord, SIGTERM);
    waitpid(s_c.coord, NULL, 0);
    s_c.coord = 0;
}

static void s_send(void *sock, const char *type, const char *body)
{
    cr_assert_geq(zmq_send(sock, type, strlen(type), ZMQ_SNDMORE), 0);
    cr_assert_geq(zmq_send(sock, body, strlen(body), 0), 0);
}

static void s_answer(void *sock, char *type, char *body, size_t cap, const char *what)
{
    cr_assert(tc_recv_answer(sock, type, body, cap), "no answer to %s in 30 s", what);
}

static void s_drain(void *sock, bool drain)
{
    pl_msg_t m;
    pl_msg_init(&m, PL_MSG_DRAIN);
    snprintf(m.drain.node, sizeof(m.drain.node), "n1");
    m.drain.drain = drain;
    tc_send_msg(sock, &m);
}

static void s_job_msg(void *sock, pl_msg_type_t type, int job)
{
    pl_msg_t m;
    pl_msg_init(&m, type);
    m.job_ref.job = (uint32_t)job;
    tc_send_msg(sock, &m);
}

/* Whether NODES says n1 is draining (asked on sock, answered next). */
static bool s_draining(void *sock)
{
    char type[32], body[16384];
    pl_msg_t m;
    pl_msg_init(&m, PL_MSG_NODES);
    tc_send_msg(sock, &m);
    s_answer(sock, type, body, sizeof(body), "NODES");
    cr_assert_str_eq(type, "REPLY", "NODES: %s", body);
    json_t *v = json_loads(body, 0, NULL), *nodes = json_object_get(v, "nodes");
    int draining = -1;
    for (size_t i = 0; i < json_array_size(nodes); i++) {
        const json_t *n = json_array_get(nodes, i);
        const char *name = json_string_value(json_object_get(n, "name"));
        if (name && !strcmp(name, "n1"))
            draining = json_is_true(json_object_get(n, "draining"));
    }
    json_decref(v);
    cr_assert_geq(draining, 0, "n1 is not in NODES: %s", body);
    return draining;
}

/* Whether JOBS lists job id (asked on sock, answered next). */
static bool s_listed(void *sock, int id)
{
    char type[32], body[16384];
    pl_msg_t m;
    pl_msg_init(&m, PL_MSG_JOBS);
    tc_send_msg(sock, &m);
    s_answer(sock, type, body, sizeof(body), "JOBS");
    cr_assert_str_eq(type, "REPLY", "JOBS: %s", body);
    json_t *v = json_loads(body, 0, NULL), *jobs = json_object_get(v, "jobs");
    cr_assert(json_is_array(jobs), "JOBS: %s", body);
    bool found = false;
    for (size_t i = 0; i < json_array_size(jobs); i++)
        found |= json_integer_value(json_object_get(json_array_get(jobs, i), "job")) == id;
    json_decref(v);
    return found;
}

/* A SUBMIT accepted: its job id. */
static int s_queued(void *sock)
{
    char type[32], body[4096];
    s_send(sock, "SUBMIT", s_submit);
    s_answer(sock, type, body, sizeof(body), "a SUBMIT");
    cr_assert_str_eq(type, "REPLY", "not queued: %s", body);
    const char *at = strstr(body, "\"job\":");
    cr_assert_not_null(at, "%s", body);
    return (int)strtol(at + 6, NULL, 10);
}

/* Whether the specs file holds job id's spec. */
static bool s_has_spec(int id)
{
    char path[600];
    sqlite3 *db;
    sqlite3_stmt *q;
    snprintf(path, sizeof(path), "%s/coord-specs.db", s_c.dir);
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK, "%s", path);
    sqlite3_busy_timeout(db, 5000);
    cr_assert_eq(sqlite3_prepare_v2(db, "SELECT 1 FROM specs WHERE id = ?", -1, &q, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(db));
    sqlite3_bind_int(q, 1, id);
    bool found = sqlite3_step(q) == SQLITE_ROW;
    sqlite3_finalize(q);
    sqlite3_close(db);
    return found;
}

static void *s_client(void **zctx_p)
{
    *zctx_p = zmq_ctx_new();
    void *a = tc_dealer_local(*zctx_p, NULL, "admin", s_c.ep);
    int rcv = 30000;
    zmq_setsockopt(a, ZMQ_RCVTIMEO, &rcv, sizeof(rcv));
    return a;
}

static void s_client_end(void *a, void *zctx)
{
    zmq_close(a);
    zmq_ctx_term(zctx);
}

Test(fail_disk, a_refused_write_is_answered_as_refused_and_undone, .timeout = 240)
{
    char type[32], body[4096];
    tc_cluster_init(&s_c);
    cr_assert_eq(tc_make_model(s_c.dir, "m", ""), 0, "pl-mkmodel failed");
    snprintf(s_flag, sizeof(s_flag), "%s/the-disk-fails", s_c.dir);
    /* placed on a node that is not there: it waits queued, no daemon needed */
    snprintf(s_submit, sizeof(s_submit),
             "{" TC_PROTO "\"model\": \"%s/m\", \"nodes\": [\"elsewhere\"], \"gen\": "
             "{\"max_new_tokens\": 1, \"prompts\": [[1, 2, 3]]}}",
             s_c.dir);
    s_start(S_FIRST_MS);
    void *zctx, *a = s_client(&zctx);
    cr_assert(!s_draining(a));

    /* DRAIN refused by the disk: the refusal, in its place before the NODES asked after it */
    s_disk_fails(true);
    s_drain(a, true);
    s_answer(a, type, body, sizeof(body), "the DRAIN");
    cr_assert_str_eq(type, "ERROR", "a DRAIN the disk refused: %s %s", type, body);
    cr_assert(strstr(body, "cannot drain n1") && strstr(body, "n1's drained mark not saved"), "%s",
              body);
    fprintf(stderr, "fail_disk: a refused DRAIN is answered %s\n", body);
    s_disk_fails(false);
    cr_assert(!s_draining(a), "n1 is drained, which the disk refused");

    /* UNDRAIN refused: drained again; then two refused in a row (an UNDRAIN, a DRAIN): the disk
     * keeps "drained", so must the table, though the second was asked while n1 was undrained */
    s_drain(a, true);
    s_answer(a, type, body, sizeof(body), "the DRAIN");
    cr_assert_str_eq(type, "REPLY", "%s", body);
    s_disk_fails(true);
    s_drain(a, false);
    s_answer(a, type, body, sizeof(body), "the UNDRAIN");
    cr_assert_str_eq(type, "ERROR", "an UNDRAIN the disk refused: %s", body);
    cr_assert(strstr(body, "cannot undrain n1"), "%s", body);
    s_drain(a, false);
    s_drain(a, true);
    s_answer(a, type, body, sizeof(body), "the UNDRAIN");
    cr_assert_str_eq(type, "ERROR", "%s", body);
    s_answer(a, type, body, sizeof(body), "the DRAIN");
    cr_assert_str_eq(type, "ERROR", "%s", body);
    s_disk_fails(false);
    cr_assert(s_draining(a), "n1 is not drained, but the disk still has it drained");

    /* SUBMIT refused: "job rejected" naming the row */
    s_disk_fails(true);
    s_send(a, "SUBMIT", s_submit);
    s_answer(a, type, body, sizeof(body), "the SUBMIT");
    cr_assert_str_eq(type, "ERROR", "a SUBMIT the disk refused: %s", body);
    cr_assert(strstr(body, "job rejected") && strstr(body, "row not saved"), "%s", body);
    const char *at = strstr(body, "job rejected: job ");
    cr_assert_not_null(at, "the refusal names no job: %s", body);
    int rejected = (int)strtol(at + strlen("job rejected: job "), NULL, 10);
    cr_assert_gt(rejected, 0, "%s", body);
    s_disk_fails(false);
    /* gone, as a SUBMIT refused at once is: its client was told so */
    cr_assert(!s_listed(a, rejected), "JOBS lists job %d, whose SUBMIT was rejected", rejected);
    cr_assert_null(tc_status_json(&s_c, rejected), "STATUS shows job %d, rejected", rejected);
    bool spec_gone = false; /* no row has it: the intake drops it */
    for (double end = pl_now() + 20; !spec_gone && pl_now() < end; usleep(100 * 1000))
        spec_gone = !s_has_spec(rejected);
    cr_assert(spec_gone, "job %d, rejected, keeps its spec", rejected);

    /* KILL refused: the job stays canceled here (its stages are told already) and the answer
     * says the disk still has it; the trim it causes cannot delete the first job's row, so
     * that job keeps its spec */
    int first = s_queued(a), second = s_queued(a);
    s_job_msg(a, PL_MSG_KILL, first);
    s_answer(a, type, body, sizeof(body), "the first KILL");
    cr_assert_str_eq(type, "REPLY", "%s", body);
    s_disk_fails(true);
    s_job_msg(a, PL_MSG_KILL, second);
    s_answer(a, type, body, sizeof(body), "the KILL");
    cr_assert_str_eq(type, "ERROR", "a KILL the disk refused: %s", body);
    cr_assert(strstr(body, "is canceled, but the state db still has it") &&
                  strstr(body, "row not saved"),
              "%s", body);
    fprintf(stderr, "fail_disk: a refused KILL is answered %s\n", body);
    /* the trim's deletion fails too (a drop not held back was sent at once) */
    int rc = 1;
    for (double end = pl_now() + 20; rc && pl_now() < end; usleep(100 * 1000))
        rc =
            tc_sh(NULL, "grep -q \"job %d's deletion not saved\" %s/pipecoord.log", first, s_c.dir);
    cr_assert_eq(rc, 0, "the trim's deletion of job %d did not fail", first);
    s_disk_fails(false);
    json_t *st = tc_status_json(&s_c, second);
    cr_assert_not_null(st);
    cr_assert_str_eq(tc_status_state(st), "canceled");
    char *events = json_dumps(json_object_get(st, "events"), 0);
    cr_assert(events && strstr(events, "not saved"), "no note of the refused write: %s", events);
    free(events);
    json_decref(st);
    cr_assert_null(tc_status_json(&s_c, first), "the first job was not trimmed");
    cr_assert(s_has_spec(first), "the first job's spec was dropped, its row's deletion failed");
    s_client_end(a, zctx);

    /* after a restart: what the disk kept, as the answers said */
    s_stop();
    s_start(S_SLOW_MS);
    a = s_client(&zctx);
    cr_assert(s_draining(a), "n1 drained after the restart");
    cr_assert(!s_listed(a, rejected), "job %d, rejected, is back after a restart", rejected);
    st = tc_status_json(&s_c, second);
    cr_assert_not_null(st, "the job whose cancel was refused");
    cr_assert_str_eq(tc_status_state(st), "queued", "the job whose cancel the disk refused");
    json_decref(st);
    st = tc_status_json(&s_c, first);
    cr_assert_not_null(st, "the job whose row's deletion failed");
    cr_assert_str_eq(tc_status_state(st), "canceled");
    json_decref(st);
    cr_assert_neq(tc_sh(NULL, "grep -q 'its spec is in neither' %s/pipecoord.log", s_c.dir), 0,
                  "a row came back without its spec");

    /* the order, every fsync of coord.db 1.5 s: the second's cancel trims the first; while
     * the cancel's row is not committed (its answer not come), the first's deletion is not
     * either, and its spec must still be there; once it is, the spec goes */
    s_job_msg(a, PL_MSG_KILL, second);
    usleep(500 * 1000);
    bool answered = zmq_recv(a, type, sizeof(type) - 1, ZMQ_DONTWAIT) >= 0;
    cr_assert(!answered, "the KILL was answered before its commit (1.5 s)");
    cr_assert(s_has_spec(first), "the spec was dropped before its row's deletion was committed");
    s_answer(a, type, body, sizeof(body), "the KILL");
    cr_assert_str_eq(type, "REPLY", "%s", body);
    bool gone = false;
    for (double end = pl_now() + 20; !gone && pl_now() < end; usleep(100 * 1000))
        gone = !s_has_spec(first);
    cr_assert(gone, "the first job's spec stayed after its row's deletion");
    s_client_end(a, zctx);
    s_passed = 1;
}

Test(fail_disk, an_epoch_the_disk_refused_is_never_assigned, .timeout = 240)
{
    tc_cluster_init(&s_c);
    cr_assert_eq(tc_make_model(s_c.dir, "m", ""), 0, "pl-mkmodel failed");
    snprintf(s_flag, sizeof(s_flag), "%s/the-disk-fails", s_c.dir);
    snprintf(s_submit, sizeof(s_submit),
             "{" TC_PROTO "\"model\": \"%s/m\", \"nodes\": [\"n1\"], \"gen\": "
             "{\"max_new_tokens\": 2, \"prompts\": [[1, 2, 3]]}}",
             s_c.dir);
    s_start(S_FIRST_MS);
    void *zctx, *a = s_client(&zctx);
    int id = s_queued(a); /* n1 not there yet: it waits, its row saved */
    /* the disk fails, then n1 comes: the job is planned, and the row with its epoch refused */
    s_disk_fails(true);
    tc_start_node(&s_c, "n1", 1, NULL);
    int rc = 1;
    for (double end = pl_now() + 60; rc && pl_now() < end; usleep(100 * 1000))
        rc = tc_sh(NULL, "grep -q \"job %d's row not saved\" %s/pipecoord.log", id, s_c.dir);
    cr_assert_eq(rc, 0, "job %d's row (its epoch) was not refused", id);
    usleep(1500 * 1000); /* what was sent would have reached n1 by now */
    cr_assert_neq(tc_sh(NULL, "grep -q 'job %d: stage' %s/n1.log", id, s_c.dir), 0,
                  "n1 was assigned job %d at an epoch the disk refused", id);
    s_disk_fails(false);
    /* planned again at a new epoch, now saved: it runs to the end */
    json_t *st = NULL;
    for (double end = pl_now() + 60; pl_now() < end; usleep(200 * 1000)) {
        json_decref(st);
        st = tc_status_json(&s_c, id);
        if (st && !strcmp(tc_status_state(st), "done"))
            break;
    }
    cr_assert_not_null(st);
    char *events = json_dumps(json_object_get(st, "events"), 0);
    fprintf(stderr, "fail_disk: job %d's events: %s\n", id, events);
    cr_assert_str_eq(tc_status_state(st), "done", "%s", events);
    cr_assert(events && strstr(events, "was not saved"), "no note of the refused epoch: %s",
              events);
    free(events);
    json_decref(st);
    cr_assert_eq(tc_sh(NULL, "grep -q 'job %d: stage' %s/n1.log", id, s_c.dir), 0,
                 "n1 never heard of job %d", id);
    s_client_end(a, zctx);
    s_passed = 1;
}

Test(fail_disk, the_counters_on_disk_only_move_forward)
{
    char dir[64], path[96];
    tc_mkdtemp(dir, sizeof(dir));
    snprintf(path, sizeof(path), "%s/coord.db", dir);
    pl_coord_store_t *s;
    cr_assert_eq(pl_coord_store_open(path, &s), PL_OK, "%s", pl_error_msg());
    pl_coord_row_t r = {.id = 8, .state = "loading", .spec = "{}", .n_seqs = 1, .epoch = 11};
    cr_assert_eq(pl_coord_store_put(s, &r, 9, 12), PL_OK, "%s", pl_error_msg());
    r = (pl_coord_row_t){.id = 2, .state = "queued", .spec = "{}", .n_seqs = 1};
    cr_assert_eq(pl_coord_store_put(s, &r, 3, 4), PL_OK, "%s", pl_error_msg());
    pl_coord_store_close(&s);
    cr_assert_eq(pl_coord_store_open(path, &s), PL_OK, "%s", pl_error_msg());
    uint32_t nj = 0, ne = 0;
    cr_assert_eq(pl_coord_store_counters(s, &nj, &ne), PL_OK, "%s", pl_error_msg());
    pl_coord_store_close(&s);
    cr_assert(nj == 9 && ne == 12, "a later write set the counters back: next job %u, epoch %u", nj,
              ne);
    tc_sh(NULL, "rm -rf %s", dir);
}
