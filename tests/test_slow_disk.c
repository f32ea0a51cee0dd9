/* The coordinator loop never waits on the disk (issue 13): its state db on a slow disk for real
 * (the slow_fsync shim, LD_PRELOAD, makes every fsync of coord.db's files sleep 1.5 s), a probe
 * node heartbeats 10 times a second while one client pipelines SUBMIT (valid), SUBMIT (refused by
 * the intake), SUBMIT (valid), JOBS, and a second client asks JOBS. Shown without timing the
 * answers: heartbeats are answered while the first SUBMIT's commit crawls, and the other
 * client's query is answered before it; the first client hears its four answers in the order it
 * asked (the intake's refusal does not overtake the "queued" held for its commit); and an
 * "accepted" is durable when it arrives: the coordinator killed (-9) the moment a job's "queued"
 * arrives (its row queued behind another commit), then restarted, still has the job. */
#include "cluster_util.h"
#include "common/util.h"
#include "job_util.h"
#include "transport/sock.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>

#define S_FSYNC_MS 1500
#define S_HB_EVERY_S 0.1
#define S_MAX_BEATS 4096

typedef struct {
    pl_tx_sock_t *sock;
    atomic_bool stop;
    double answered_at[S_MAX_BEATS]; /* pl_now() of each WELCOME */
    atomic_int n;
    int lost; /* an ERROR answered: the probe was declared lost */
} s_probe_t;

static void *s_beats(void *arg)
{
    s_probe_t *p = arg;
    while (!atomic_load(&p->stop) && atomic_load(&p->n) < S_MAX_BEATS) {
        pl_msg_t m, in;
        pl_msg_init(&m, PL_MSG_HEARTBEAT);
        snprintf(m.heartbeat.node, sizeof(m.heartbeat.node), "probe");
        double t0 = pl_now();
        if (pl_tx_send(p->sock, NULL, &m) != PL_OK)
            break;
        while (pl_tx_recv(p->sock, 200, NULL, NULL, &in) == PL_OK) {
            pl_msg_type_t type = in.type;
            pl_msg_clear(&in);
            if (type == PL_MSG_WELCOME) {
                p->answered_at[atomic_load(&p->n)] = pl_now();
                atomic_fetch_add(&p->n, 1);
                break;
            }
            if (type == PL_MSG_ERROR) {
                p->lost++;
                break;
            }
        }
        double next = t0 + S_HB_EVERY_S;
        if (pl_now() < next)
            usleep((useconds_t)((next - pl_now()) * 1e6));
    }
    return NULL;
}

/* The probe: a node of its own name on the node socket, registered. */
static pl_tx_sock_t *s_probe(pl_tx_ctx_t *ctx, const char *ep)
{
    pl_tx_sock_t *probe;
    const char *how;
    char node_ep[128];
    cr_assert_eq(pl_tx_sock_new(ctx, PL_TX_DEALER, &probe), PL_OK);
    cr_assert_eq(pl_tx_sock_identity(probe, "probe"), PL_OK);
    cr_assert_eq(pl_tx_key_client_setup(probe, NULL, NULL, "node", &how), PL_OK, "%s",
                 pl_error_msg());
    tc_node_ep(ep, node_ep, sizeof(node_ep));
    cr_assert_eq(pl_tx_sock_connect(probe, node_ep), PL_OK);
    pl_msg_t m, in;
    tc_hello(&m, "probe");
    m.hello.pid = (int)getpid();
    m.hello.n_devices = 1;
    m.hello.devices[0] = (pl_msg_device_t){.id = "cpu:0",
                                           .backend = "cpu",
                                           .name = "probe",
                                           .isa = "scalar",
                                           .cores = 1,
                                           .mem_bytes = 1ULL << 30,
                                           .gflops = 1,
                                           .mem_gbps = 1};
    cr_assert_eq(pl_tx_send(probe, NULL, &m), PL_OK);
    cr_assert_eq(pl_tx_recv(probe, 20000, NULL, NULL, &in), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(in.type, PL_MSG_WELCOME, "%s", pl_msg_name(in.type));
    pl_msg_clear(&in);
    return probe;
}

/* pipecoord on c->ep with its state db c->dir/coord.db; slow: through the shim. */
static void s_coord(tc_cluster_t *c, bool slow)
{
    char bin[512], log[600], db[600];
    snprintf(bin, sizeof(bin), "%s/pipecoord", tc_bin());
    snprintf(log, sizeof(log), "%s/pipecoord.log", c->dir);
    snprintf(db, sizeof(db), "%s/coord.db", c->dir);
    char *argv[] = {bin, "--endpoint", c->ep, "--state-db", db, "--log-level", "debug", NULL};
    tc_slow_disk_t disk;
    if (slow) /* coord.db, coord.db-wal; not the specs file */
        tc_slow_disk_on(&disk, db, S_FSYNC_MS, NULL);
    c->coord = tc_spawn(argv, log);
    if (slow)
        tc_slow_disk_off(&disk);
}

static void s_send(void *sock, const char *type, const char *body)
{
    cr_assert_geq(zmq_send(sock, type, strlen(type), ZMQ_SNDMORE), 0);
    cr_assert_geq(zmq_send(sock, body, strlen(body), 0), 0);
}

/* The next answer (30 s at most): its type into type[32], its body into body. */
static void s_answer(void *sock, char *type, char *body, size_t cap, const char *what)
{
    cr_assert(tc_recv_answer(sock, type, body, cap), "no answer to %s in 30 s", what);
}

static long s_job_id(const char *body)
{
    json_t *v = json_loads(body, 0, NULL);
    long id = (long)json_integer_value(json_object_get(v, "job"));
    const char *state = json_string_value(json_object_get(v, "state"));
    bool queued = state && !strcmp(state, "queued");
    json_decref(v);
    return queued ? id : 0;
}

Test(slow_disk, the_loop_answers_while_commits_crawl_and_accepted_is_durable, .timeout = 300)
{
    tc_cluster_t c;
    char model[600], good[1024], bad[512], type[32], body[4096];
    memset(&c, 0, sizeof(c));
    tc_mkdtemp(c.dir, sizeof(c.dir));
    snprintf(c.ep, sizeof(c.ep), "tcp://127.0.0.1:%d", tc_free_port());
    tc_use_state_dir(&c);
    cr_assert_eq(tc_make_model(c.dir, "m", ""), 0, "pl-mkmodel failed");
    snprintf(model, sizeof(model), "%s/m", c.dir);
    /* placed on a node that is not there: it waits queued, no daemon needed */
    snprintf(good, sizeof(good),
             "{" TC_PROTO "\"model\": \"%s\", \"nodes\": [\"elsewhere\"], \"gen\": "
             "{\"max_new_tokens\": 1, \"prompts\": [[1, 2, 3]]}}",
             model);
    snprintf(bad, sizeof(bad),
             "{" TC_PROTO "\"model\": \"/no/such/model\", \"gen\": {\"prompts\": [[1, 2]]}}");
    s_coord(&c, true);

    pl_tx_ctx_t *ctx;
    cr_assert_eq(pl_tx_ctx_new(&ctx), PL_OK);
    static s_probe_t p;
    p.sock = s_probe(ctx, c.ep);
    pthread_t beat;
    cr_assert_eq(pthread_create(&beat, NULL, s_beats, &p), 0);

    void *zctx = zmq_ctx_new();
    void *a = tc_dealer_local(zctx, NULL, "admin", c.ep),
         *b = tc_dealer_local(zctx, NULL, "admin", c.ep);
    int rcv = 30000;
    zmq_setsockopt(a, ZMQ_RCVTIMEO, &rcv, sizeof(rcv));
    zmq_setsockopt(b, ZMQ_RCVTIMEO, &rcv, sizeof(rcv));
    usleep(300 * 1000); /* both connected, CURVE done, a few heartbeats answered */
    double t_sent = pl_now();
    s_send(a, "SUBMIT", good);
    s_send(a, "SUBMIT", bad);
    s_send(a, "SUBMIT", good);
    s_send(a, "JOBS", "{" TC_PROTO "\"x\": 0}");
    usleep(200 * 1000); /* the first SUBMIT is at the loop, its commit under way */
    s_send(b, "JOBS", "{" TC_PROTO "\"x\": 0}");

    /* both clients' answers as they arrive, each stamped */
    static char types[5][32], bodies[5][4096];
    double at[5];
    int na = 0, nb = 0;
    for (double end = pl_now() + 30; (na < 4 || nb < 1) && pl_now() < end;) {
        zmq_pollitem_t it[2] = {{.socket = a, .events = ZMQ_POLLIN},
                                {.socket = b, .events = ZMQ_POLLIN}};
        if (zmq_poll(it, 2, 100) <= 0)
            continue;
        for (int k = 0; k < 2; k++) {
            if (!(it[k].revents & ZMQ_POLLIN))
                continue;
            int slot = k == 0 ? na++ : 4 + nb++;
            cr_assert(slot < 5, "more answers than requests");
            s_answer(it[k].socket, types[slot], bodies[slot], sizeof(bodies[slot]), "a request");
            at[slot] = pl_now();
        }
    }
    cr_assert(na == 4 && nb == 1, "answers: %d of 4 to the first client, %d of 1 to the other", na,
              nb);
    double t_first = at[0], t_other = at[4];
    cr_assert_str_eq(types[4], "REPLY", "the other client's JOBS: %s", bodies[4]);
    /* the first client: its answers in the order it asked */
    cr_assert_str_eq(types[0], "REPLY", "first answer: %s %s", types[0], bodies[0]);
    long id1 = s_job_id(bodies[0]);
    cr_assert_gt(id1, 0, "first answer is no \"queued\": %s", bodies[0]);
    cr_assert_str_eq(types[1], "ERROR", "second answer: %s %s", types[1], bodies[1]);
    cr_assert(strstr(bodies[1], "no/such/model"), "second answer: %s", bodies[1]);
    cr_assert_str_eq(types[2], "REPLY", "third answer: %s %s", types[2], bodies[2]);
    long id2 = s_job_id(bodies[2]);
    cr_assert_gt(id2, id1, "third answer is no later \"queued\": %s", bodies[2]);
    cr_assert_str_eq(types[3], "REPLY", "fourth answer: %s %s", types[3], bodies[3]);
    cr_assert(strstr(bodies[3], "\"jobs\""), "fourth answer: %s", bodies[3]);

    /* heartbeats answered while the first SUBMIT's commit sat in fsync (1.5 s): on a loop that
     * commits itself, none is answered from the moment it takes the SUBMIT to its answer */
    int during = 0, n = atomic_load(&p.n);
    for (int i = 0; i < n; i++)
        during += p.answered_at[i] > t_sent + 0.3 && p.answered_at[i] < t_first;
    fprintf(stderr,
            "slow_disk: fsync %d ms; first \"queued\" after %.0f ms, the last answer after "
            "%.0f ms, the other client's JOBS %.0f ms after it asked; %d heartbeats "
            "answered before the first \"queued\"\n",
            S_FSYNC_MS, (t_first - t_sent) * 1e3, (at[3] - t_sent) * 1e3,
            (t_other - t_sent - 0.2) * 1e3, during);
    atomic_store(&p.stop, true);
    pthread_join(beat, NULL);

    /* kill -9 the moment "queued" arrives: the job is on disk already. A KILL first, so that
     * the writer is in that commit's fsync while the SUBMIT's row waits in its queue (a row
     * written and waiting in fsync would survive a kill -9 in the page cache anyway). */
    char kill_body[128];
    snprintf(kill_body, sizeof(kill_body), "{" TC_PROTO "\"job\": %ld}", id1);
    s_send(a, "KILL", kill_body);
    s_send(a, "SUBMIT", good);
    s_answer(a, type, body, sizeof(body), "the KILL");
    cr_assert_str_eq(type, "REPLY", "the KILL's answer: %s %s", type, body);
    s_answer(a, type, body, sizeof(body), "the last SUBMIT");
    kill(c.coord, SIGKILL);
    waitpid(c.coord, NULL, 0);
    long id3 = s_job_id(body);
    cr_assert_gt(id3, id2, "last answer is no later \"queued\": %s", body);
    zmq_close(a);
    zmq_close(b);
    zmq_ctx_term(zctx);
    pl_tx_sock_destroy(&p.sock);
    pl_tx_ctx_destroy(&ctx);
    s_coord(&c, false);
    json_t *st = NULL;
    for (int i = 0; i < 100 && !st; i++, usleep(100 * 1000))
        st = tc_status_json(&c, (int)id3);
    cr_assert_not_null(st, "no status of job %ld after the restart", id3);
    cr_assert_str_eq(tc_status_state(st), "queued", "job %ld after the restart", id3);
    json_decref(st);
    /* asserted last, so that a loop that answers before its commit fails on durability above */
    cr_assert_lt(t_other, t_first, "the other client's query waited for the first SUBMIT's commit");
    cr_assert_geq(during, 3, "%d heartbeats answered while the first SUBMIT's commit ran", during);
    cr_assert_eq(p.lost, 0, "the probe was declared lost");
    tc_cluster_end(&c, true);
}
