/* Integration: the intake's table of clients never locks new clients out while the state db's
 * commits crawl (issue 13). A client stays in the table until its last request's end, which the
 * loop holds until the job row it wrote is committed: 140 one-shot submitters inside one slow
 * fsync (tests/slow_fsync.c preloaded into pipecoord) are more than the 128 entries the table
 * had, and a new client's JOBS is still answered, not "busy"; its pipelined SUBMIT and JOBS are
 * answered in its order; every submitter hears its "queued". Real processes on loopback. */
#include "cluster_util.h"
#include "common/util.h"
#include "job_util.h"
#include "transport/msg.h"

#include <criterion/criterion.h>
#include <zmq.h>

#define S_SUBMITTERS 140 /* the table had 2 * PL_COORD_INTAKE_MAX = 128 entries */
#define S_FSYNC_MS 3000

static tc_cluster_t s_c;
static int s_passed;

static void s_teardown(void)
{
    tc_cluster_end(&s_c, s_passed);
}

TestSuite(intake_table, .fini = s_teardown, .timeout = 240);

/* pipecoord with every sync of its state db (coord.db and its -wal, not the specs file) slowed;
 * the clients run at full speed. */
static void s_start_slow_coord(void)
{
    char db[600];
    tc_slow_disk_t slow;
    snprintf(db, sizeof(db), "%s/coord.db", s_c.dir);
    tc_slow_disk_on(&slow, db, S_FSYNC_MS, NULL);
    tc_start_coord(&s_c, s_c.ep);
    tc_slow_disk_off(&slow);
    /* its start syncs the state db several times: the keys come after */
    char pub[600];
    snprintf(pub, sizeof(pub), "%s/state/keys/coordinator.pub", s_c.dir);
    for (double end = pl_now() + 90; access(pub, R_OK) != 0 && pl_now() < end;)
        usleep(100 * 1000);
}

static void s_send(void *sock, const char *type, const char *body)
{
    cr_assert_geq(zmq_send(sock, type, strlen(type), ZMQ_SNDMORE), 0);
    cr_assert_geq(zmq_send(sock, body, strlen(body), 0), 0);
}

/* A SUBMIT of model m placed on a node that is not there: it stays queued, no daemon needed. */
static void s_submit_body(char *out, size_t cap)
{
    snprintf(out, cap,
             "{" TC_PROTO "\"model\": \"%s/m\", \"nodes\": [\"elsewhere\"], "
             "\"gen\": {\"max_new_tokens\": 1, \"prompts\": [[1, 2, 3]]}}",
             s_c.dir);
}

static bool s_busy(const char *type, const char *body)
{
    return strcmp(type, "ERROR") == 0 && strstr(body, "busy");
}

Test(intake_table, a_new_client_is_served_while_many_submitters_wait_for_their_commits)
{
    char type[32], body[8192], submit[1024];
    tc_cluster_init(&s_c);
    cr_assert_eq(tc_make_model(s_c.dir, "m", ""), 0, "pl-mkmodel failed");
    s_submit_body(submit, sizeof(submit));
    s_start_slow_coord();
    void *zctx = zmq_ctx_new();
    static void *sub[S_SUBMITTERS];
    static bool queued[S_SUBMITTERS];
    for (int i = 0; i < S_SUBMITTERS; i++)
        sub[i] = tc_dealer_local(zctx, NULL, "admin", s_c.ep);
    void *late = tc_dealer_local(zctx, "late", "admin", s_c.ep);

    /* every submitter's SUBMIT in; one refused "busy" (the specs file's writer has a bound of
     * its own) is sent again, so that all wait for the slow commits together */
    for (int i = 0; i < S_SUBMITTERS; i++) {
        s_send(sub[i], "SUBMIT", submit);
        usleep(2 * 1000);
    }
    int resent = 0, early = 0;
    for (double end = pl_now() + 0.5; pl_now() < end; usleep(20 * 1000))
        for (int i = 0; i < S_SUBMITTERS; i++) {
            int n = zmq_recv(sub[i], type, sizeof(type) - 1, ZMQ_DONTWAIT);
            if (n < 0)
                continue;
            type[n] = '\0';
            n = zmq_recv(sub[i], body, sizeof(body) - 1, 0);
            body[n < 0 ? 0 : n] = '\0';
            if (s_busy(type, body)) {
                s_send(sub[i], "SUBMIT", submit);
                resent++;
            } else {
                early++; /* answered before the commits: it no longer waits */
                queued[i] = strstr(body, "queued") != NULL;
            }
        }

    /* a client the coordinator has not seen: its JOBS is answered at once (it wrote nothing) */
    s_send(late, "JOBS", "{" TC_PROTO "\"x\": 0}");
    cr_assert(tc_recv_answer(late, type, body, sizeof(body)), "no answer to the new JOBS");
    bool late_busy = s_busy(type, body);
    static char late_type[32], late_body[8192];
    snprintf(late_type, sizeof(late_type), "%s", type);
    snprintf(late_body, sizeof(late_body), "%s", body);
    /* and its pipelined SUBMIT, JOBS come back in its order: "queued" after the commit first */
    s_send(late, "SUBMIT", submit);
    s_send(late, "JOBS", "{" TC_PROTO "\"x\": 0}");
    int rcv = 60000;
    zmq_setsockopt(late, ZMQ_RCVTIMEO, &rcv, sizeof(rcv));
    static char types[2][32], bodies[2][8192];
    for (int k = 0; k < 2; k++)
        cr_assert(tc_recv_answer(late, types[k], bodies[k], sizeof(bodies[k])),
                  "no answer %d to the pipelined requests", k);

    /* every submitter hears its "queued" once the commits land */
    for (int i = 0; i < S_SUBMITTERS; i++) {
        zmq_setsockopt(sub[i], ZMQ_RCVTIMEO, &rcv, sizeof(rcv));
        while (!queued[i]) {
            cr_assert(tc_recv_answer(sub[i], type, body, sizeof(body)),
                      "submitter %d: no answer in 60 s", i);
            if (s_busy(type, body)) { /* refused after the window above: once more */
                s_send(sub[i], "SUBMIT", submit);
                resent++;
                continue;
            }
            cr_assert_str_eq(type, "REPLY", "submitter %d: %s", i, body);
            cr_assert(strstr(body, "queued"), "submitter %d: %s", i, body);
            queued[i] = true;
        }
    }
    fprintf(stderr,
            "intake_table: %d submitters, %d answered before the new client's JOBS, %d SUBMITs "
            "sent again after a busy; the new client's JOBS: %s\n",
            S_SUBMITTERS, early, resent, late_type);
    cr_assert_lt(early, S_SUBMITTERS - 128,
                 "%d submitters were answered before the commits: the table was never full", early);
    cr_assert_not(late_busy, "the new client's JOBS was answered busy: %s", late_body);
    cr_assert_str_eq(late_type, "REPLY", "the new client's JOBS: %s", late_body);
    cr_assert_str_eq(types[0], "REPLY", "first pipelined answer: %s", bodies[0]);
    cr_assert(strstr(bodies[0], "queued"), "first pipelined answer: %s", bodies[0]);
    cr_assert_str_eq(types[1], "REPLY", "second pipelined answer: %s", bodies[1]);
    cr_assert(strstr(bodies[1], "\"jobs\""), "second pipelined answer: %s", bodies[1]);

    for (int i = 0; i < S_SUBMITTERS; i++)
        zmq_close(sub[i]);
    zmq_close(late);
    zmq_ctx_term(zctx);
    s_passed = 1;
}

/* A client with a request unfinished (its SUBMIT's row waits for the slow commit) cannot pile up
 * answers behind it: past the intake's bound for one client (1,024 held) its further requests
 * are refused "busy" at once — an answer that itself is dropped while the others wait — instead
 * of each holding one more refusal. Every answer it does get comes in its order, "queued" first. */
Test(intake_table, a_client_cannot_pile_up_refusals_behind_an_unfinished_request)
{
    enum { S_BAD = 1500, S_HELD_BOUND = 1024 };
    char type[32], body[8192], submit[1024];
    tc_cluster_init(&s_c);
    cr_assert_eq(tc_make_model(s_c.dir, "m", ""), 0, "pl-mkmodel failed");
    s_submit_body(submit, sizeof(submit));
    s_start_slow_coord();
    void *zctx = zmq_ctx_new();
    void *a = tc_dealer_local(zctx, "flooder", "admin", s_c.ep);
    int hwm = 0;
    zmq_setsockopt(a, ZMQ_SNDHWM, &hwm, sizeof(hwm));
    zmq_setsockopt(a, ZMQ_RCVHWM, &hwm, sizeof(hwm));
    s_send(a, "SUBMIT", submit);
    for (int i = 0; i < S_BAD; i++)
        s_send(a, "JOBS", "{not json"); /* refused by the intake, after it was taken in */
    int rcv = 60000, n = 0, errors = 0;
    zmq_setsockopt(a, ZMQ_RCVTIMEO, &rcv, sizeof(rcv));
    cr_assert(tc_recv_answer(a, type, body, sizeof(body)), "no answer to the SUBMIT in 60 s");
    cr_assert_str_eq(type, "REPLY", "first answer: %s", body);
    cr_assert(strstr(body, "queued"), "first answer: %s", body);
    rcv = 3000; /* the rest come at once behind it */
    zmq_setsockopt(a, ZMQ_RCVTIMEO, &rcv, sizeof(rcv));
    while (tc_recv_answer(a, type, body, sizeof(body))) {
        n++;
        errors += strcmp(type, "ERROR") == 0;
    }
    fprintf(stderr,
            "intake_table: %d bad requests behind an unfinished SUBMIT: %d answers after "
            "its \"queued\" (%d errors)\n",
            S_BAD, n, errors);
    cr_assert_eq(errors, n, "an answer to a bad request that is not an error");
    cr_assert_leq(n, S_HELD_BOUND, "%d answers were held behind one client's request", n);
    cr_assert_geq(n, S_HELD_BOUND / 2, "only %d of the bad requests were answered", n);
    /* and the coordinator still serves the client once its request is done */
    s_send(a, "JOBS", "{" TC_PROTO "\"x\": 0}");
    cr_assert(tc_recv_answer(a, type, body, sizeof(body)), "no answer to JOBS afterwards");
    cr_assert_str_eq(type, "REPLY", "JOBS afterwards: %s", body);
    zmq_close(a);
    zmq_ctx_term(zctx);
    s_passed = 1;
}
