/* Integration: the coordinator's state across restarts (SQLite), job ids that never repeat,
 * assignment epochs that refuse a stale stage, and the bounds: queue, registry, placement time.
 * Real processes on loopback, results compared with the single-process reference (pl-generate). */
#include "job_util.h"
#include "transport/msg.h"

#include <criterion/criterion.h>
#include <zmq.h>

static tc_cluster_t s_c;
static int s_passed; /* logs are shown only when a test did not get to its end */

static const char *s_prompts = "[1, 15, 27, 99]\n"
                               "[1, 7]\n"
                               "[3, 200, 5, 17, 9]\n";

static void s_teardown(void)
{
    tc_cluster_end(&s_c, s_passed);
}

TestSuite(restart, .fini = s_teardown, .timeout = 180);

static void s_model(void)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/prompts.jsonl", s_c.dir);
    tc_write(path, s_prompts);
    cr_assert_eq(tc_make_model(s_c.dir, "m",
                               "--layers 4 --hidden 64 --intermediate 160 "
                               "--heads 4 --kv-heads 2 --vocab 256 --seed 11"),
                 0);
}

/* A fresh scratch directory and a coordinator with `extra` lines under `coordinator:` (a cluster
 * file), its database in the directory; no daemons. */
static void s_coord(const char *extra)
{
    tc_cluster_init(&s_c);
    s_model();
    if (extra)
        tc_start_coord_file(&s_c, extra);
    else
        tc_start_coord(&s_c, s_c.ep);
}

static void s_restart_coord(void)
{
    kill(s_c.coord, SIGKILL); /* no goodbye: what was durable is what comes back */
    waitpid(s_c.coord, NULL, 0);
    tc_start_coord(&s_c, s_c.ep);
}

/* pipectl's output of a command (stdout and stderr), and its exit status. */
__attribute__((noinline)) /* gcc -O3 otherwise sees a dangling pointer into its frame */
static char *s_ctl(int *rc_p, const char *fmt, const char *arg)
{
    char cmd[1024], *out;
    snprintf(cmd, sizeof(cmd), fmt, arg);
    int rc = tc_sh(&out, "%s/pipectl -c %s --timeout 5 %s 2>&1", tc_bin(), s_c.ep, cmd);
    if (rc_p)
        *rc_p = rc;
    return out;
}

static int s_submit_nowait(const char *job)
{
    char path[512];
    snprintf(path, sizeof(path), "submit %s/%s.yaml", s_c.dir, job);
    int rc;
    char *out = s_ctl(&rc, "%s", path);
    cr_assert_eq(rc, 0, "submit %s: %s", job, out);
    int id = 0;
    cr_assert_eq(sscanf(out, "job %d submitted", &id), 1, "%s", out);
    free(out);
    return id;
}

/* Poll `pipectl status ID` until its JSON contains `want` (or the job ends). */
static char *s_wait_status(int id, const char *want, double timeout_s)
{
    char *st = NULL, arg[64];
    snprintf(arg, sizeof(arg), "-o json status %d", id);
    for (int i = 0; i < timeout_s * 20; i++) {
        free(st);
        st = s_ctl(NULL, "%s", arg);
        if (strstr(st, want) || strstr(st, "\"state\": \"failed\"") ||
            strstr(st, "\"state\": \"done\"") || strstr(st, "\"state\": \"canceled\""))
            break;
        usleep(50 * 1000);
    }
    return st;
}

/* `pipectl results ID` as pipectl submit --wait prints them. */
static char *s_results(int id)
{
    char arg[32];
    int rc;
    snprintf(arg, sizeof(arg), "results %d", id);
    char *st = s_wait_status(id, "\"state\": \"done\"", 120);
    cr_assert(strstr(st, "\"state\": \"done\""), "job %d did not finish: %s", id, st);
    free(st);
    char *out; /* stdout only: the throughput line goes to stderr */
    rc = tc_sh(&out, "%s/pipectl -c %s --timeout 5 %s 2>/dev/null", tc_bin(), s_c.ep, arg);
    cr_assert_eq(rc, 0, "results %d: %s", id, out);
    return out;
}

/* The reproduction: the coordinator is killed while job 1 runs. Job 1 resumes from its
 * stored progress, the next job is job 2 (not a second job 1), and each gets its own correct result,
 * though the daemons still ran the old job 1 when the new coordinator came up. */
Test(restart, mid_job_ids_continue_and_each_job_gets_its_own_result)
{
    s_coord(NULL);
    tc_start_nodes(&s_c, 2);
    tc_job(&s_c, "long", "m", "max_new_tokens: 400\nstop_at_eos: false\nstages: 2\n");
    tc_job(&s_c, "short", "m",
           "max_new_tokens: 7\nstages: 2\nsampling:\n  temperature: 0.8\n  seed: 5\n");
    cr_assert_eq(s_submit_nowait("long"), 1);
    char *st = s_wait_status(1, "\"state\": \"running\"", 30);
    cr_assert(strstr(st, "\"state\": \"running\""), "job 1 never ran: %s", st);
    free(st);
    pid_t n0 = s_c.node[0], n1 = s_c.node[1];
    s_restart_coord();
    /* the daemons come back by themselves, still the same processes */
    cr_assert_eq(s_submit_nowait("short"), 2, "job ids started again after the restart");
    char *ref_long = tc_reference(&s_c, "long"), *ref_short = tc_reference(&s_c, "short");
    char *got_long = s_results(1), *got_short = s_results(2);
    cr_assert_str_eq(got_short, ref_short, "job 2 got another job's tokens");
    cr_assert_str_eq(got_long, ref_long, "job 1, resumed after the restart, differs");
    cr_assert_eq(kill(n0, 0), 0);
    cr_assert_eq(kill(n1, 0), 0);
    char *log;
    tc_sh(&log, "cat %s/pipecoord.log", s_c.dir);
    cr_assert(strstr(log, "queued again after the restart"), "%s", log);
    free(log);
    free(ref_long), free(ref_short), free(got_long), free(got_short);
    s_passed = 1;
}

/* Finished results are served by the next coordinator; a job that waited in the queue (its
 * placement names a node not yet there) runs after the restart once the node comes. */
Test(restart, results_served_and_queued_jobs_run_after_restart)
{
    int rc;
    s_coord(NULL);
    tc_start_nodes(&s_c, 1);
    tc_job(&s_c, "first", "m", "max_new_tokens: 6\n");
    tc_job(&s_c, "later", "m", "max_new_tokens: 5\nplacement:\n  nodes: [late]\n");
    char *ref1 = tc_reference(&s_c, "first"), *ref2 = tc_reference(&s_c, "later");
    char *got1 = tc_submit(&s_c, "first", &rc);
    cr_assert_eq(rc, 0, "%s", tc_err(&s_c, "first"));
    cr_assert_str_eq(got1, ref1);
    free(got1);
    cr_assert_eq(s_submit_nowait("later"), 2);
    char *st = s_wait_status(2, "not registered", 10);
    cr_assert(strstr(st, "placement names node 'late', which is not registered"),
              "status does not say why it waits: %s", st);
    free(st);
    s_restart_coord();
    got1 = s_results(1);
    cr_assert_str_eq(got1, ref1, "job 1's results after the restart differ");
    st = s_wait_status(2, "\"state\": \"queued\"", 10);
    cr_assert(strstr(st, "\"state\": \"queued\""), "job 2 is not queued: %s", st);
    free(st);
    tc_start_node(&s_c, "late", 1, NULL);
    char *got2 = s_results(2);
    cr_assert_str_eq(got2, ref2);
    cr_assert_eq(tc_wait_idle(&s_c, 2, 20), 0, "node0 did not re-register by itself");
    free(ref1), free(ref2), free(got1), free(got2);
    s_passed = 1;
}

/* ---- a hand-driven node over raw ZeroMQ: what a stale or forged stage would send ---- */

/* The next message of `type` (others skipped), decoded into *m; false on timeout. */
static bool s_recv_msg(void *sock, pl_msg_type_t type, pl_msg_t *m)
{
    static char type_buf[64], body[1 << 20];
    for (int k = 0; k < 50; k++) {
        int tn = zmq_recv(sock, type_buf, sizeof(type_buf), 0);
        if (tn < 0)
            return false;
        int more = 0;
        size_t ml = sizeof(more);
        zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &ml);
        int bn = more ? zmq_recv(sock, body, sizeof(body), 0) : 0;
        if (bn < 0)
            return false;
        if (pl_msg_decode_wire(type_buf, (size_t)tn, body, (size_t)bn, m) != PL_OK)
            continue;
        if (m->type == type)
            return true;
        pl_msg_clear(m);
    }
    return false;
}

static void *s_fake_node(void *ctx, const char *name)
{
    char node_ep[128];
    tc_node_ep(s_c.ep, node_ep, sizeof(node_ep));
    /* the local cluster's node key: admitted, any node name */
    void *sock = tc_dealer_local(ctx, name, "node", node_ep);
    pl_msg_t m;
    tc_hello(&m, name);
    m.hello.n_devices = 1;
    m.hello.devices[0] =
        (pl_msg_device_t){.cores = 1, .mem_bytes = 8ull << 30, .gflops = 5, .mem_gbps = 5};
    snprintf(m.hello.devices[0].id, sizeof(m.hello.devices[0].id), "cpu:0");
    snprintf(m.hello.devices[0].backend, sizeof(m.hello.devices[0].backend), "cpu");
    snprintf(m.hello.devices[0].name, sizeof(m.hello.devices[0].name), "fake");
    tc_send_msg(sock, &m);
    return sock;
}

static void s_done(void *sock, uint32_t job, uint32_t epoch, int32_t token)
{
    pl_msg_result_t res[3];
    int32_t toks[3] = {token, token, token};
    for (int i = 0; i < 3; i++)
        res[i] = (pl_msg_result_t){
            .seq = i, .n_tokens = 1, .tokens = &toks[i], .finish = PL_FINISH_LENGTH};
    pl_msg_t m;
    pl_msg_init(&m, PL_MSG_DONE);
    m.done =
        (pl_msg_done_t){.job = job, .stage = 0, .epoch = epoch, .n_results = 3, .results = res};
    m.done.stats = (pl_msg_stats_t){.wall_s = 1, .has_sink = true, .generated = 3};
    tc_send_msg(sock, &m); /* borrowed results: not cleared */
}

/* A DONE (or READY) that carries an earlier epoch of the job is refused: a stale stage can never
 * answer for the job's current assignment. */
Test(restart, a_stage_message_with_a_stale_epoch_is_refused)
{
    s_coord(NULL);
    void *ctx = zmq_ctx_new(), *sock = s_fake_node(ctx, "fake0");
    pl_msg_t m;
    cr_assert(s_recv_msg(sock, PL_MSG_WELCOME, &m), "no WELCOME");
    tc_job(&s_c, "j", "m", "max_new_tokens: 1\nstages: 1\n");
    cr_assert_eq(s_submit_nowait("j"), 1);
    cr_assert(s_recv_msg(sock, PL_MSG_ASSIGN, &m), "no ASSIGN");
    uint32_t job = m.assign.job, epoch = m.assign.epoch;
    pl_msg_clear(&m);
    cr_assert_eq(job, 1);
    cr_assert_geq(epoch, 1);
    pl_msg_init(&m, PL_MSG_READY);
    m.ready = (pl_msg_ready_t){.job = job, .stage = 0, .epoch = epoch + 1};
    tc_send_msg(sock, &m); /* an epoch that is not the job's: refused, the job keeps loading */
    m.ready.epoch = epoch;
    tc_send_msg(sock, &m);
    cr_assert(s_recv_msg(sock, PL_MSG_START, &m), "no START");
    cr_assert_eq(m.start.epoch, epoch, "START does not carry the assignment's epoch");
    pl_msg_clear(&m);
    if (epoch > 1)
        s_done(sock, job, epoch - 1, 77);
    s_done(sock, job, 0, 77);
    s_done(sock, job, epoch + 1, 77);
    usleep(300 * 1000);
    char *st = s_wait_status(1, "\"state\": \"running\"", 5);
    cr_assert(strstr(st, "\"state\": \"running\""), "a stale DONE ended the job: %s", st);
    free(st);
    s_done(sock, job, epoch, 42); /* the current assignment's answer */
    char *res = s_results(1);
    cr_assert(strstr(res, "42") && !strstr(res, "77"), "%s", res);
    free(res);
    char *log;
    tc_sh(&log, "grep -c 'stale epoch' %s/pipecoord.log", s_c.dir);
    cr_assert_geq(atoi(log), 3, "the refusals are not logged: %s", log);
    free(log);
    zmq_close(sock);
    zmq_ctx_term(ctx);
    s_passed = 1;
}

/* 64 distinct HELLOs fill the registry; once those nodes are lost longer than node_expire_ms
 * their registrations go, and a real daemon registers. */
Test(restart, the_registry_is_bounded_and_lost_nodes_expire)
{
    s_coord("  heartbeat_ms: 100\n  dead_after_ms: 400\n  node_expire_ms: 500\n");
    void *ctx = zmq_ctx_new(), *socks[65];
    int welcomed = 0;
    for (int i = 0; i < 65; i++) {
        char name[32];
        snprintf(name, sizeof(name), "flood%d", i);
        socks[i] = s_fake_node(ctx, name);
    }
    for (int i = 0; i < 65; i++) {
        char type[32];
        int n = zmq_recv(socks[i], type, sizeof(type), 0);
        welcomed += n == 7 && !memcmp(type, "WELCOME", 7);
    }
    cr_assert_eq(welcomed, 64, "the registry took %d of 65 nodes", welcomed);
    for (int i = 0; i < 65; i++)
        zmq_close(socks[i]);
    zmq_ctx_term(ctx);
    usleep(1500 * 1000); /* lost after 0.4 s, forgotten 0.5 s later */
    tc_start_node(&s_c, "node0", 1, NULL);
    cr_assert_eq(tc_wait_idle(&s_c, 1, 30), 0, "a real node could not register");
    char *nodes = s_ctl(NULL, "%s", "-o json nodes");
    cr_assert(!strstr(nodes, "flood"), "expired nodes are still listed: %s", nodes);
    free(nodes);
    s_passed = 1;
}

/* max_queued_jobs: the next SUBMIT is refused with the reason; a job that cannot be placed
 * (more stages than nodes) says why in status, then fails after place_timeout_ms. */
Test(restart, queue_bound_and_unplaceable_jobs_say_why)
{
    int rc;
    s_coord("  max_queued_jobs: 2\n  place_timeout_ms: 2000\n");
    tc_start_nodes(&s_c, 1);
    tc_job(&s_c, "wide", "m", "max_new_tokens: 4\nstages: 3\n");
    tc_job(&s_c, "nowhere", "m", "max_new_tokens: 4\nplacement:\n  nodes: [nosuch]\n");
    cr_assert_eq(s_submit_nowait("wide"), 1);
    cr_assert_eq(s_submit_nowait("nowhere"), 2);
    char path[512];
    snprintf(path, sizeof(path), "submit %s/wide.yaml", s_c.dir);
    char *out = s_ctl(&rc, "%s", path);
    cr_assert_neq(rc, 0, "a third job was queued: %s", out);
    cr_assert(strstr(out, "queue is full") && strstr(out, "max_queued_jobs"), "%s", out);
    free(out);
    char *st = s_ctl(NULL, "%s", "-o json status 1");
    cr_assert(strstr(st, "waiting for 3 idle device(s)"), "%s", st);
    free(st);
    st = s_wait_status(1, "\"state\": \"failed\"", 10);
    cr_assert(strstr(st, "\"state\": \"failed\"") && strstr(st, "could not be placed"), "%s", st);
    free(st);
    st = s_wait_status(2, "\"state\": \"failed\"", 10);
    cr_assert(strstr(st, "could not be placed") && strstr(st, "'nosuch'"), "%s", st);
    free(st);
    /* --wait returns, nonzero, and the queue has room again */
    char *res = tc_submit(&s_c, "nowhere", &rc);
    cr_assert_neq(rc, 0);
    free(res);
    res = tc_err(&s_c, "nowhere");
    cr_assert(strstr(res, "could not be placed"), "%s", res);
    free(res);
    s_passed = 1;
}

/* A daemon stopped by SIGTERM tells the coordinator: its job is interrupted at once naming why
 * (it waits to resume: it asked for 2 stages, 1 node remains), the node shows lost (not planned
 * onto), long before dead_after_ms (here 30 s) could say so. */
Test(restart, a_stopping_daemon_tells_the_coordinator)
{
    s_coord("  dead_after_ms: 30000\n");
    tc_start_nodes(&s_c, 2);
    tc_job(&s_c, "long", "m", "max_new_tokens: 2000\nstop_at_eos: false\nstages: 2\n");
    cr_assert_eq(s_submit_nowait("long"), 1);
    char *st = s_wait_status(1, "\"state\": \"running\"", 30);
    cr_assert(strstr(st, "\"state\": \"running\""), "%s", st);
    free(st);
    kill(s_c.node[1], SIGTERM);
    waitpid(s_c.node[1], NULL, 0);
    s_c.node[1] = -1;
    st = s_wait_status(1, "waiting for 2 idle device(s)", 5);
    cr_assert(strstr(st, "\"state\": \"queued\"") && strstr(st, "the daemon stopped") &&
                  strstr(st, "waiting for 2 idle device(s)"),
              "%s", st);
    free(st);
    char *nodes = s_ctl(NULL, "%s", "-o json nodes");
    cr_assert(strstr(nodes, "\"lost\""), "%s", nodes);
    free(nodes);
    s_passed = 1;
}

/* A stage that never reports READY (here a node that takes ASSIGN and says nothing more) fails
 * the job after load_timeout_ms, naming the stage, and frees the node. */
Test(restart, loading_has_a_timeout)
{
    s_coord("  load_timeout_ms: 800\n  dead_after_ms: 30000\n");
    void *ctx = zmq_ctx_new(), *sock = s_fake_node(ctx, "mute0");
    pl_msg_t m;
    cr_assert(s_recv_msg(sock, PL_MSG_WELCOME, &m), "no WELCOME");
    tc_job(&s_c, "j", "m", "max_new_tokens: 1\nstages: 1\n");
    cr_assert_eq(s_submit_nowait("j"), 1);
    cr_assert(s_recv_msg(sock, PL_MSG_ASSIGN, &m), "no ASSIGN");
    pl_msg_clear(&m);
    char *st = s_wait_status(1, "\"state\": \"failed\"", 10);
    cr_assert(strstr(st, "\"state\": \"failed\"") && strstr(st, "load_timeout_ms") &&
                  strstr(st, "stage 0 (mute0)"),
              "%s", st);
    free(st);
    cr_assert(s_recv_msg(sock, PL_MSG_CANCEL, &m), "the stage was not canceled");
    pl_msg_clear(&m);
    zmq_close(sock);
    zmq_ctx_term(ctx);
    s_passed = 1;
}

/* Cancel during a long forward call (a node slowed 300x for testing, a 2,000-token prefill)
 * does not wait for that call on the thread that heartbeats: the node never looks lost. */
Test(restart, cancel_does_not_block_heartbeats)
{
    s_coord("  heartbeat_ms: 200\n  dead_after_ms: 1500\n");
    char path[512], text[512], cmd[1024], log[512];
    snprintf(path, sizeof(path), "%s/slow.yaml", s_c.dir);
    snprintf(text, sizeof(text),
             "name: slow0\ncoordinator: %s\nthreads: 1\nheartbeat_ms: 200\nslowdown: 300\n",
             s_c.ep);
    tc_write(path, text);
    snprintf(log, sizeof(log), "%s/slow0.log", s_c.dir);
    snprintf(cmd, sizeof(cmd), "exec %s/pipeld --config %s", tc_bin(), path);
    s_c.node[s_c.n_nodes++] = tc_spawn((char *[]){"/bin/sh", "-c", cmd, NULL}, log);
    cr_assert_eq(tc_wait_idle(&s_c, 1, 60), 0, "the slow node did not register");
    snprintf(path, sizeof(path), "%s/long_prompt.jsonl", s_c.dir);
    FILE *f = fopen(path, "w");
    fputc('[', f);
    for (int i = 0; i < 2000; i++)
        fprintf(f, "%s%d", i ? "," : "", 1 + i % 200);
    fputs("]\n", f);
    fclose(f);
    snprintf(path, sizeof(path), "%s/prefill.yaml", s_c.dir);
    tc_write(path, "model: m\nprompts: long_prompt.jsonl\nmax_new_tokens: 1\n");
    cr_assert_eq(s_submit_nowait("prefill"), 1);
    char *st = s_wait_status(1, "\"state\": \"running\"", 30);
    cr_assert(strstr(st, "\"state\": \"running\""), "%s", st);
    free(st);
    usleep(300 * 1000); /* inside the prefill */
    int rc;
    char *out = s_ctl(&rc, "%s", "cancel 1");
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    for (int i = 0; i < 15; i++) { /* 3 s: twice dead_after_ms */
        char *nodes = s_ctl(NULL, "%s", "-o json nodes");
        cr_assert(!strstr(nodes, "\"lost\""), "the node looked lost after cancel: %s", nodes);
        const char *seen = strstr(nodes, "\"last_seen_s\": ");
        double age = seen ? atof(seen + 15) : 1e9;
        cr_assert(age < 1.0, "heartbeats stopped after cancel: %s", nodes);
        free(nodes);
        usleep(200 * 1000);
    }
    tc_sh(&out, "grep -c 'lost' %s/pipecoord.log", s_c.dir);
    cr_assert_eq(atoi(out), 0, "the coordinator declared a node lost");
    free(out);
    kill(s_c.node[0], SIGKILL); /* its reaper may still wait out the slowed call */
    waitpid(s_c.node[0], NULL, 0);
    s_c.node[0] = -1;
    s_passed = 1;
}
