/* The coordinator's client intake thread (daemon/coord_intake.c), driven from this test as the
 * loop would: requests arrive decoded, a SUBMIT validated with its spec stored before the loop
 * sees it, answers go back through the thread, a full queue is answered "busy", and a stop frees
 * what was not taken. A real client talks to it over TCP. */
#include "common/util.h"
#include "daemon/coord_intake.h"
#include "daemon/coord_specs.h"
#include "job_util.h"
#include "transport/msg.h"
#include "transport/sock.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <poll.h>
#include <sqlite3.h>

typedef struct {
    char dir[256], ep[64], db[300], model[300];
    pl_cfg_cluster_t cfg;
    pl_coord_t c;
    pl_tx_ctx_t *ctx;
    pl_coord_intake_t *in;
    void *zctx, *client; /* a raw DEALER: it sends what it likes */
} s_t;

/* max_queued: coordinator.max_queued_jobs, fixed before the thread starts (it reads it). */
static void s_start(s_t *t, bool with_db, int max_queued)
{
    memset(t, 0, sizeof(*t));
    tc_mkdtemp(t->dir, sizeof(t->dir));
    snprintf(t->db, sizeof(t->db), "%s/coord.db", t->dir);
    snprintf(t->model, sizeof(t->model), "%s/m", t->dir);
    t->cfg.max_queued_jobs = max_queued;
    t->cfg.max_job_mb = 64;
    t->c.cfg = &t->cfg; /* field by field: the state is too large for a compound literal */
    t->c.next_job = 7;
    t->c.next_epoch = 1;
    t->c.insecure = true;
    pl_tx_sock_t *router;
    cr_assert_eq(pl_tx_ctx_new(&t->ctx), PL_OK);
    cr_assert_eq(pl_tx_sock_new(t->ctx, PL_TX_ROUTER, &router), PL_OK);
    /* tc_free_port's port is free when probed; another test may take it before the bind, so a
     * refused bind tries a fresh one */
    pl_status_t st = PL_ERR_TRANSPORT;
    for (int tries = 0; tries < 8 && st != PL_OK; tries++) {
        snprintf(t->ep, sizeof(t->ep), "tcp://127.0.0.1:%d", tc_free_port());
        st = pl_tx_sock_bind(router, t->ep);
    }
    cr_assert_eq(st, PL_OK, "%s", pl_error_msg());
    cr_assert_eq(pl_coord_intake_start(&t->c, with_db ? t->db : NULL, &router, &t->in), PL_OK, "%s",
                 pl_error_msg());
    cr_assert_null(router, "the socket is the intake's");
    t->c.intake = t->in;
    t->zctx = zmq_ctx_new();
    t->client = zmq_socket(t->zctx, ZMQ_DEALER);
    int linger = 0, rcv = 10000;
    zmq_setsockopt(t->client, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(t->client, ZMQ_RCVTIMEO, &rcv, sizeof(rcv));
    cr_assert_eq(zmq_connect(t->client, t->ep), 0);
}

static void s_stop(s_t *t)
{
    pl_coord_intake_stop(&t->in);
    cr_assert_null(t->in);
    pl_coord_intake_stop(&t->in); /* twice is harmless */
    zmq_close(t->client);
    zmq_ctx_term(t->zctx);
    pl_tx_ctx_destroy(&t->ctx);
    tc_sh(NULL, "rm -rf %s", t->dir);
}

static void s_send(s_t *t, const char *type, const char *body)
{
    cr_assert_geq(zmq_send(t->client, type, strlen(type), ZMQ_SNDMORE), 0);
    cr_assert_geq(zmq_send(t->client, body, strlen(body), 0), 0);
}

/* The next answer: its type into type (32 bytes) and body into body (cap bytes). */
static void s_answer(s_t *t, char *type, char *body, size_t cap)
{
    int n = zmq_recv(t->client, type, 31, 0);
    cr_assert_geq(n, 0, "no answer in 10 s");
    type[n] = '\0';
    n = zmq_recv(t->client, body, cap - 1, 0);
    cr_assert_geq(n, 0);
    body[n < (int)cap - 1 ? n : (int)cap - 1] = '\0';
}

/* The next request, as the loop's poll would see it (waits up to 10 s). */
static void s_take(s_t *t, pl_coord_req_t *r)
{
    struct pollfd p = {.fd = pl_coord_intake_fd(t->in), .events = POLLIN};
    for (double end = pl_now() + 10; pl_now() < end;) {
        if (pl_coord_intake_take(t->in, r))
            return;
        poll(&p, 1, 100);
    }
    cr_assert_fail("no request reached the loop in 10 s");
}

/* Whether job `id`'s spec is in the specs file beside the state db (read as a restart would). */
static bool s_spec_stored(s_t *t, uint32_t id)
{
    char path[400], sql[96];
    sqlite3 *db;
    sqlite3_stmt *q;
    cr_assert_eq(pl_coord_specs_path(t->db, path, sizeof(path)), PL_OK);
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK, "%s", path);
    snprintf(sql, sizeof(sql), "SELECT count(*) FROM specs WHERE id = %u", id);
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &q, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(q), SQLITE_ROW);
    bool stored = sqlite3_column_int(q, 0) == 1;
    sqlite3_finalize(q);
    sqlite3_close(db);
    return stored;
}

Test(coord_intake, requests_reach_the_loop_decoded_and_answers_go_back_through_it)
{
    static s_t t; /* the coordinator's state is large: not on the stack */
    char type[32], body[4096];
    s_start(&t, false, 256);
    s_send(&t, "STATUS", "{" TC_PROTO "\"job\": 3}");
    pl_coord_req_t r;
    s_take(&t, &r);
    cr_assert_eq(r.msg.type, PL_MSG_STATUS);
    cr_assert_eq(r.msg.job_ref.job, 3);
    cr_assert_null(r.job);
    cr_assert_null(r.from.sock, "answers go through the intake");
    pl_coord_reply(&t.c, &r.from, json_pack("{s:s}", "status", "fine"));
    pl_coord_intake_done(t.in, &r);
    s_answer(&t, type, body, sizeof(body));
    cr_assert_str_eq(type, "REPLY");
    cr_assert(strstr(body, "\"fine\""), "%s", body);

    /* broken frames and bodies are answered on the intake thread and never reach the loop */
    s_send(&t, "STATUS", "{" TC_PROTO "\"job\": ");
    s_answer(&t, type, body, sizeof(body));
    cr_assert_str_eq(type, "ERROR");
    cr_assert(strstr(body, "not JSON"), "%s", body);
    s_send(&t, "STATUS", "{" TC_PROTO "\"job\": \"three\"}");
    s_answer(&t, type, body, sizeof(body));
    cr_assert_str_eq(type, "ERROR");
    cr_assert(strstr(body, "job"), "%s", body);
    /* and so is a node's message on the client socket */
    pl_msg_t hb;
    json_t *hb_body;
    pl_msg_init(&hb, PL_MSG_HEARTBEAT);
    snprintf(hb.heartbeat.node, sizeof(hb.heartbeat.node), "n");
    cr_assert_eq(pl_msg_encode(&hb, &hb_body), PL_OK);
    char *hb_text = json_dumps(hb_body, JSON_COMPACT);
    json_decref(hb_body);
    s_send(&t, "HEARTBEAT", hb_text);
    free(hb_text);
    s_answer(&t, type, body, sizeof(body));
    cr_assert_str_eq(type, "ERROR");
    cr_assert(strstr(body, "node message"), "%s", body);
    cr_assert_eq(t.c.refused_msgs, 1);
    cr_assert_not(pl_coord_intake_take(t.in, &r), "nothing else reached the loop");
    s_stop(&t);
}

Test(coord_intake, a_submit_arrives_validated_with_its_spec_stored, .timeout = 60)
{
    static s_t t; /* the coordinator's state is large: not on the stack */
    char type[32], body[4096], submit[1024];
    s_start(&t, true, 256);
    cr_assert_eq(tc_make_model(t.dir, "m", ""), 0, "pl-mkmodel failed");
    snprintf(submit, sizeof(submit),
             "{" TC_PROTO "\"model\": \"%s\", \"gen\": {\"prompts\": [[1, 2, 3]]}}", t.model);
    s_send(&t, "SUBMIT", submit);
    pl_coord_req_t r;
    s_take(&t, &r);
    cr_assert_eq(r.msg.type, PL_MSG_SUBMIT);
    cr_assert_not_null(r.job, "the loop gets the validated job");
    cr_assert_eq(r.job->id, 7, "ids continue from the coordinator's counter");
    cr_assert(r.job->spec_saved);
    cr_assert_eq(r.job->n_seqs, 1);
    cr_assert_gt(r.job->n_layers, 0);
    cr_assert_str_eq(r.job->spec.model, t.model);
    cr_assert(s_spec_stored(&t, 7), "the spec is durable before the loop sees the job");
    pl_coord_intake_done(t.in, &r);

    /* a SUBMIT that fails validation is answered by the intake and stores nothing */
    s_send(&t, "SUBMIT",
           "{" TC_PROTO "\"model\": \"/no/such/model\", \"gen\": {\"prompts\": [[1]]}}");
    s_answer(&t, type, body, sizeof(body));
    cr_assert_str_eq(type, "ERROR");
    cr_assert(strstr(body, "job rejected") && strstr(body, "/no/such/model"), "%s", body);
    cr_assert_not(pl_coord_intake_take(t.in, &r));

    /* one the loop refuses: its stored spec is dropped by the intake */
    s_send(&t, "SUBMIT", submit);
    s_take(&t, &r);
    cr_assert_eq(r.job->id, 8, "a failed validation uses no id");
    cr_assert(s_spec_stored(&t, 8));
    pl_coord_intake_drop_spec(t.in, 8);
    pl_coord_intake_done(t.in, &r);
    bool gone = false;
    for (double end = pl_now() + 10; !gone && pl_now() < end; usleep(20 * 1000))
        gone = !s_spec_stored(&t, 8);
    cr_assert(gone, "the refused job's spec was dropped");

    /* a request still queued at stop is freed, and its stored spec dropped */
    s_send(&t, "SUBMIT", submit);
    for (double end = pl_now() + 10; !s_spec_stored(&t, 9) && pl_now() < end;)
        usleep(20 * 1000);
    pl_coord_intake_stop(&t.in);
    cr_assert_not(s_spec_stored(&t, 9), "a request never taken leaves no spec behind");
    s_stop(&t);
}

Test(coord_intake, a_full_job_queue_is_answered_before_anything_is_stored, .timeout = 60)
{
    static s_t t; /* the coordinator's state is large: not on the stack */
    char type[32], body[4096], submit[1024];
    s_start(&t, true, 2);
    cr_assert_eq(tc_make_model(t.dir, "m", ""), 0, "pl-mkmodel failed");
    snprintf(submit, sizeof(submit),
             "{" TC_PROTO "\"model\": \"%s\", \"gen\": {\"prompts\": [[1]]}}", t.model);
    pl_coord_intake_publish(t.in, 1); /* one unfinished job: one more fits */
    s_send(&t, "SUBMIT", submit);
    pl_coord_req_t r;
    s_take(&t, &r);
    cr_assert_not_null(r.job);
    cr_assert_eq(r.job->id, 7);
    pl_coord_intake_done(t.in, &r);
    pl_coord_intake_publish(t.in, 2); /* the loop has it now */
    s_send(&t, "SUBMIT", submit);
    s_answer(&t, type, body, sizeof(body));
    cr_assert_str_eq(type, "ERROR");
    cr_assert(strstr(body, "queue is full") && strstr(body, "max_queued_jobs"), "%s", body);
    cr_assert_not(s_spec_stored(&t, 8), "nothing was stored for it");
    cr_assert_not(pl_coord_intake_take(t.in, &r));
    s_stop(&t);
}

/* A pipelining client's answers come in the order it asked, whoever gives them: the "busy" the
 * intake gives its requests past a full queue waits behind the loop's answers to the requests
 * before them; another client, with nothing at the loop, is answered at once meanwhile. */
Test(coord_intake, a_full_queue_is_answered_busy_in_the_clients_order, .timeout = 60)
{
    static s_t t; /* the coordinator's state is large: not on the stack */
    char type[32], body[4096], msg[64];
    s_start(&t, false, 256);
    int extra = 6;
    for (int i = 0; i < PL_COORD_INTAKE_MAX + extra; i++) {
        snprintf(msg, sizeof(msg), "{" TC_PROTO "\"job\": %d}", 1000 + i);
        s_send(&t, "STATUS", msg);
    }
    void *other = zmq_socket(t.zctx, ZMQ_DEALER);
    int linger = 0, rcv = 10000;
    zmq_setsockopt(other, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(other, ZMQ_RCVTIMEO, &rcv, sizeof(rcv));
    cr_assert_eq(zmq_connect(other, t.ep), 0);
    /* the first client's requests are in: the queue is full */
    for (double end = pl_now() + 20;
         pl_coord_intake_waiting(t.in) < PL_COORD_INTAKE_MAX && pl_now() < end;)
        usleep(5 * 1000);
    cr_assert_eq(pl_coord_intake_waiting(t.in), PL_COORD_INTAKE_MAX, "the queue never filled");
    cr_assert_geq(zmq_send(other, "STATUS", 6, ZMQ_SNDMORE), 0);
    cr_assert_geq(zmq_send(other, "{" TC_PROTO "\"job\": 1}", strlen("{" TC_PROTO "\"job\": 1}"), 0), 0);
    int n = zmq_recv(other, type, sizeof(type) - 1, 0);
    cr_assert_geq(n, 0, "the other client was not answered while the loop took nothing");
    type[n] = '\0';
    cr_assert_str_eq(type, "ERROR");
    n = zmq_recv(other, body, sizeof(body) - 1, 0);
    body[n < 0 ? 0 : n] = '\0';
    cr_assert(strstr(body, "busy"), "%s", body);
    zmq_close(other);
    cr_assert_eq(zmq_recv(t.client, type, sizeof(type) - 1, ZMQ_DONTWAIT), -1,
                 "a busy answer overtook the loop's answers to earlier requests");
    for (int i = 0; i < PL_COORD_INTAKE_MAX; i++) {
        pl_coord_req_t r;
        s_take(&t, &r);
        cr_assert_eq(r.msg.job_ref.job, 1000 + i, "the oldest first");
        pl_coord_reply(&t.c, &r.from, json_pack("{s:i}", "answer", 1000 + i));
        pl_coord_intake_done(t.in, &r);
    }
    for (int i = 0; i < PL_COORD_INTAKE_MAX + extra; i++) {
        s_answer(&t, type, body, sizeof(body));
        if (i < PL_COORD_INTAKE_MAX) {
            char want[32];
            snprintf(want, sizeof(want), "\"answer\":%d", 1000 + i);
            cr_assert_str_eq(type, "REPLY", "answer %d: %s", i, body);
            cr_assert(strstr(body, want), "answer %d out of order: %s", i, body);
            continue;
        }
        cr_assert_str_eq(type, "ERROR", "answer %d: %s", i, body);
        cr_assert(strstr(body, "busy"), "%s", body);
        char code[32];
        snprintf(code, sizeof(code), "\"code\":%d", PL_ERR_BUSY);
        cr_assert(strstr(body, code), "%s", body);
    }
    pl_coord_req_t r;
    cr_assert_not(pl_coord_intake_take(t.in, &r));
    s_send(&t, "STATUS", "{" TC_PROTO "\"job\": 5}"); /* room again */
    s_take(&t, &r);
    cr_assert_eq(r.msg.job_ref.job, 5);
    pl_coord_intake_done(t.in, &r);
    /* and a refusal behind nothing at the loop goes at once */
    s_send(&t, "STATUS", "{" TC_PROTO "\"job\": ");
    s_answer(&t, type, body, sizeof(body));
    cr_assert_str_eq(type, "ERROR");
    cr_assert(strstr(body, "not JSON"), "%s", body);
    s_stop(&t);
}

/* A PLAN reaches the loop as a validated job (the model read on the intake); one that cannot be
 * validated is answered by the intake. */
Test(coord_intake, a_plan_arrives_validated, .timeout = 60)
{
    static s_t t; /* the coordinator's state is large: not on the stack */
    char type[32], body[4096], plan[1024];
    s_start(&t, true, 256);
    cr_assert_eq(tc_make_model(t.dir, "m", ""), 0, "pl-mkmodel failed");
    snprintf(plan, sizeof(plan),
             "{" TC_PROTO "\"model\": \"%s\", \"gen\": {\"prompts\": [[1, 2, 3], [4]]}}", t.model);
    s_send(&t, "PLAN", plan);
    pl_coord_req_t r;
    s_take(&t, &r);
    cr_assert_eq(r.msg.type, PL_MSG_PLAN);
    cr_assert_not_null(r.job, "the loop gets the validated job");
    cr_assert_eq(r.job->n_seqs, 2);
    cr_assert_gt(r.job->n_layers, 0);
    cr_assert_not(r.job->spec_saved, "a plan stores nothing");
    cr_assert_eq(r.job->id, 0, "a plan takes no job id");
    pl_coord_intake_done(t.in, &r);
    snprintf(plan, sizeof(plan),
             "{" TC_PROTO "\"model\": \"%s\", \"gen\": {\"prompts\": [[1, 99999]]}}", t.model);
    s_send(&t, "PLAN", plan);
    s_answer(&t, type, body, sizeof(body));
    cr_assert_str_eq(type, "ERROR");
    cr_assert(strstr(body, "cannot plan"), "%s", body);
    cr_assert_not(pl_coord_intake_take(t.in, &r), "the loop never saw it");
    /* a SUBMIT after it still gets the next id */
    snprintf(plan, sizeof(plan),
             "{" TC_PROTO "\"model\": \"%s\", \"gen\": {\"prompts\": [[1]]}}", t.model);
    s_send(&t, "SUBMIT", plan);
    s_take(&t, &r);
    cr_assert_eq(r.job->id, 7);
    pl_coord_intake_done(t.in, &r);
    s_stop(&t);
}

/* While a SUBMIT's spec waits on the disk (another connection holds the specs file's write lock),
 * another client's request reaches the loop, the submitter's later request waits behind its
 * SUBMIT, and both come in its order once the spec is stored. A spec that cannot be stored is
 * answered "job rejected" after the answers to the client's earlier requests, and no job
 * reaches the loop. */
Test(coord_intake, a_slow_spec_write_holds_only_its_own_clients_later_requests, .timeout = 60)
{
    static s_t t; /* the coordinator's state is large: not on the stack */
    char type[32], body[4096], submit[1024], path[400];
    s_start(&t, true, 256);
    cr_assert_eq(tc_make_model(t.dir, "m", ""), 0, "pl-mkmodel failed");
    snprintf(submit, sizeof(submit),
             "{" TC_PROTO "\"model\": \"%s\", \"gen\": {\"prompts\": [[1]]}}", t.model);
    cr_assert_eq(pl_coord_specs_path(t.db, path, sizeof(path)), PL_OK);
    sqlite3 *lock;
    cr_assert_eq(sqlite3_open(path, &lock), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(lock, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK, "%s",
                 sqlite3_errmsg(lock));
    void *other = zmq_socket(t.zctx, ZMQ_DEALER);
    int linger = 0, rcv = 10000;
    zmq_setsockopt(other, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(other, ZMQ_RCVTIMEO, &rcv, sizeof(rcv));
    cr_assert_eq(zmq_connect(other, t.ep), 0);
    s_send(&t, "SUBMIT", submit);
    s_send(&t, "STATUS", "{" TC_PROTO "\"job\": 1}");
    usleep(100 * 1000);
    cr_assert_geq(zmq_send(other, "STATUS", 6, ZMQ_SNDMORE), 0);
    const char *st2 = "{" TC_PROTO "\"job\": 2}";
    cr_assert_geq(zmq_send(other, st2, strlen(st2), 0), 0);
    pl_coord_req_t r;
    s_take(&t, &r);
    cr_assert_eq(r.msg.type, PL_MSG_STATUS);
    cr_assert_eq(r.msg.job_ref.job, 2,
                 "first at the loop: STATUS of job %d (1: the submitter's overtook its SUBMIT; "
                 "none: the other client's waited behind the spec's write)",
                 (int)r.msg.job_ref.job);
    pl_coord_reply(&t.c, &r.from, json_pack("{s:i}", "answer", 2));
    pl_coord_intake_done(t.in, &r);
    cr_assert_not(pl_coord_intake_take(t.in, &r), "the submitter's STATUS overtook its SUBMIT");
    cr_assert_eq(sqlite3_exec(lock, "COMMIT", NULL, NULL, NULL), SQLITE_OK); /* the disk is back */
    cr_assert_geq(zmq_recv(other, type, sizeof(type) - 1, 0), 0);
    zmq_recv(other, body, sizeof(body) - 1, 0);
    s_take(&t, &r);
    cr_assert_eq(r.msg.type, PL_MSG_SUBMIT);
    cr_assert(r.job && r.job->spec_saved && s_spec_stored(&t, r.job->id));
    pl_coord_reply(&t.c, &r.from, json_pack("{s:s}", "answer", "submit"));
    pl_coord_intake_done(t.in, &r);
    s_take(&t, &r);
    cr_assert_eq(r.msg.type, PL_MSG_STATUS);
    cr_assert_eq(r.msg.job_ref.job, 1);
    pl_coord_reply(&t.c, &r.from, json_pack("{s:s}", "answer", "status"));
    pl_coord_intake_done(t.in, &r);
    s_answer(&t, type, body, sizeof(body));
    cr_assert(strstr(body, "submit"), "%s", body);
    s_answer(&t, type, body, sizeof(body));
    cr_assert(strstr(body, "status"), "%s", body);

    /* the lock held past the writer's wait: the spec is not stored */
    cr_assert_eq(sqlite3_exec(lock, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
    s_send(&t, "STATUS", "{" TC_PROTO "\"job\": 3}");
    s_take(&t, &r); /* at the loop, not answered yet */
    cr_assert_eq(r.msg.job_ref.job, 3);
    s_send(&t, "SUBMIT", submit);
    int wait = 3000; /* past the specs file's busy timeout (2 s) */
    zmq_setsockopt(t.client, ZMQ_RCVTIMEO, &wait, sizeof(wait));
    cr_assert_eq(zmq_recv(t.client, type, sizeof(type) - 1, 0), -1,
                 "the failed SUBMIT's answer overtook the answer to the request before it");
    zmq_setsockopt(t.client, ZMQ_RCVTIMEO, &rcv, sizeof(rcv));
    cr_assert_eq(sqlite3_exec(lock, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    pl_coord_reply(&t.c, &r.from, json_pack("{s:i}", "answer", 3));
    pl_coord_intake_done(t.in, &r);
    s_answer(&t, type, body, sizeof(body));
    cr_assert(strstr(body, "\"answer\":3"), "%s", body);
    s_answer(&t, type, body, sizeof(body));
    cr_assert_str_eq(type, "ERROR", "%s", body);
    cr_assert(strstr(body, "job rejected"), "%s", body);
    cr_assert_not(pl_coord_intake_take(t.in, &r), "a job whose spec was not stored reached the loop");
    cr_assert_not(s_spec_stored(&t, 8), "the failed spec left a row");
    /* the client's count of requests still agrees: its next one is answered at once */
    s_send(&t, "STATUS", "{" TC_PROTO "\"job\": ");
    s_answer(&t, type, body, sizeof(body));
    cr_assert(strstr(body, "not JSON"), "%s", body);
    zmq_close(other);
    sqlite3_close(lock);
    s_stop(&t);
}

/* The next request within 10 s, as s_take, but false when none came. */
static bool s_take_within(s_t *t, pl_coord_req_t *r)
{
    struct pollfd p = {.fd = pl_coord_intake_fd(t->in), .events = POLLIN};
    for (double end = pl_now() + 10; pl_now() < end; poll(&p, 1, 100))
        if (pl_coord_intake_take(t->in, r))
            return true;
    return false;
}

static bool s_from(const pl_coord_req_t *r, const char *id)
{
    return r->from.len == strlen(id) && memcmp(r->from.id, id, r->from.len) == 0;
}

/* A SUBMIT whose checks are slow (its model's config.json a FIFO: opening it waits for this
 * test to open the other end) holds none of the other clients' requests: another client's
 * NODES, and its SUBMIT, reach the loop meanwhile, each with the identity it came with; the
 * slow submitter's later STATUS waits behind its SUBMIT, and both are answered in its order once
 * the read ends. On an intake that checks a SUBMIT on its own thread, nothing reaches the loop
 * until then. */
Test(coord_intake, a_slow_submit_is_checked_off_the_intake_thread_in_its_clients_order,
     .timeout = 60)
{
    static s_t t; /* the coordinator's state is large: not on the stack */
    char type[32], body[4096], slow[1024], good[1024], fifo[400];
    s_start(&t, true, 256);
    cr_assert_eq(tc_make_model(t.dir, "m", ""), 0, "pl-mkmodel failed");
    snprintf(fifo, sizeof(fifo), "%s/slow/config.json", t.dir);
    cr_assert_eq(tc_sh(NULL, "mkdir -p %s/slow && mkfifo %s", t.dir, fifo), 0);
    snprintf(slow, sizeof(slow),
             "{" TC_PROTO "\"model\": \"%s/slow\", \"gen\": {\"prompts\": [[1]]}}", t.dir);
    snprintf(good, sizeof(good),
             "{" TC_PROTO "\"model\": \"%s\", \"gen\": {\"prompts\": [[1], [2, 3]]}}", t.model);
    s_send(&t, "SUBMIT", slow);
    s_send(&t, "STATUS", "{" TC_PROTO "\"job\": 1}");
    /* the other client only then: an intake that checks on its own thread is in the slow read
     * before it reads the other's (this wait orders the broken case; the right one needs none) */
    usleep(200 * 1000);
    void *other = zmq_socket(t.zctx, ZMQ_DEALER);
    int linger = 0, rcv = 10000;
    zmq_setsockopt(other, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(other, ZMQ_RCVTIMEO, &rcv, sizeof(rcv));
    zmq_setsockopt(other, ZMQ_ROUTING_ID, "asker", 5);
    cr_assert_eq(zmq_connect(other, t.ep), 0);
    const char *nodes = "{" TC_PROTO "\"x\": 0}";
    cr_assert_geq(zmq_send(other, "NODES", 5, ZMQ_SNDMORE), 0);
    cr_assert_geq(zmq_send(other, nodes, strlen(nodes), 0), 0);
    cr_assert_geq(zmq_send(other, "SUBMIT", 6, ZMQ_SNDMORE), 0);
    cr_assert_geq(zmq_send(other, good, strlen(good), 0), 0);
    pl_coord_req_t r1 = {0}, r2 = {0}, r3;
    bool got1 = s_take_within(&t, &r1);
    bool got2 = PL_COORD_INTAKE_DECODERS < 2 || (got1 && s_take_within(&t, &r2));
    bool overtook = pl_coord_intake_take(t.in, &r3);
    /* the read ends (asserted after, so that a broken intake is not left in it) */
    int wfd = -1;
    for (double end = pl_now() + 10; wfd < 0 && pl_now() < end; usleep(5 * 1000))
        wfd = open(fifo, O_WRONLY | O_NONBLOCK);
    if (wfd >= 0)
        close(wfd);
    cr_assert(got1, "the other client's NODES waited for the slow SUBMIT's checks");
    cr_assert_eq(r1.msg.type, PL_MSG_NODES);
    cr_assert(s_from(&r1, "asker"), "the NODES came with another identity");
    if (PL_COORD_INTAKE_DECODERS >= 2) {
        cr_assert(got2, "the other client's SUBMIT waited for the slow SUBMIT's checks");
        cr_assert_eq(r2.msg.type, PL_MSG_SUBMIT);
        cr_assert(s_from(&r2, "asker"), "the SUBMIT came with another identity");
        cr_assert(r2.job && r2.job->n_seqs == 2, "another client's job");
        cr_assert_eq(r2.job->id, 7);
        pl_coord_intake_done(t.in, &r2);
    }
    cr_assert_not(overtook, "the slow submitter's STATUS overtook its SUBMIT");
    cr_assert_geq(wfd, 0, "the slow SUBMIT's model was never read");
    pl_coord_intake_done(t.in, &r1);
    /* the slow SUBMIT refused (its config.json is no file), then its STATUS at the loop */
    pl_coord_req_t r;
    s_take(&t, &r);
    cr_assert_eq(r.msg.type, PL_MSG_STATUS);
    cr_assert_eq(r.msg.job_ref.job, 1);
    cr_assert_not(s_from(&r, "asker"));
    pl_coord_reply(&t.c, &r.from, json_pack("{s:s}", "answer", "status"));
    pl_coord_intake_done(t.in, &r);
    s_answer(&t, type, body, sizeof(body));
    cr_assert_str_eq(type, "ERROR", "%s", body);
    cr_assert(strstr(body, "job rejected") && strstr(body, "config.json"), "%s", body);
    s_answer(&t, type, body, sizeof(body));
    cr_assert_str_eq(type, "REPLY", "%s", body);
    cr_assert(strstr(body, "status"), "%s", body);
    cr_assert_not(pl_coord_intake_take(t.in, &r));
    zmq_close(other);
    s_stop(&t);
}
