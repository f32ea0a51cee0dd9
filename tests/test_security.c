/* Integration: the control plane's authentication and authorisation with real processes —
 * refused clients (NULL, unknown key) told why on both sides, roles, forged HELLO and DONE, and
 * models.allow. The keys are the local state directory's plus keys made by pipectl keygen. */
#include "common/log.h"
#include "common/util.h"
#include "job_util.h"
#include "transport/msg.h"

#include <criterion/criterion.h>
#include <zmq.h>

static tc_cluster_t s_c;
static int s_passed;

static const char *s_prompts = "[1, 15, 27, 99]\n[1, 7]\n[3, 200, 5, 17, 9]\n";

static void s_teardown(void)
{
    tc_cluster_end(&s_c, s_passed);
}

TestSuite(security, .fini = s_teardown, .timeout = 120);

/* pipectl keygen dir/NAME; the public key it printed. */
static void s_keygen(const char *name, char pub[41])
{
    char *out;
    cr_assert_eq(tc_sh(&out, "%s/pipectl keygen %s/%s", tc_bin(), s_c.dir, name), 0);
    cr_assert_eq(strlen(out), 41, "keygen printed '%s'", out);
    memcpy(pub, out, 40);
    pub[40] = '\0';
    free(out);
}

static char *s_coord_log(void)
{
    char *out;
    tc_sh(&out, "cat %s/pipecoord.log", s_c.dir);
    return out;
}

/* `pipectl nodes -o json`'s security counter `key`. */
static long s_counter(const char *key)
{
    char *out, needle[64];
    tc_sh(&out, "%s/pipectl -c %s -o json nodes", tc_bin(), s_c.ep);
    snprintf(needle, sizeof(needle), "\"%s\": ", key);
    char *p = strstr(out, needle);
    long v = p ? strtol(p + strlen(needle), NULL, 10) : -1;
    free(out);
    return v;
}

static char *s_local_server_pub(void)
{
    char *out;
    tc_sh(&out, "cat %s/state/keys/coordinator.pub", s_c.dir);
    out[strcspn(out, "\n")] = '\0';
    return out;
}

Test(security, null_and_unknown_key_clients_are_refused_and_told_why)
{
    cr_assert_eq(tc_cluster_start(&s_c, 1, NULL), 0);
    char *err, *log, *server = s_local_server_pub(), fresh[41];
    /* NULL mechanism: a client that does not use CURVE */
    cr_expect_neq(
        tc_sh(&err, "PIPELD_INSECURE=1 %s/pipectl -c %s --timeout 2 nodes 2>&1", tc_bin(), s_c.ep),
        0);
    cr_expect(strstr(err, "not admitted"), "client side says why: %s", err);
    free(err);
    /* a CURVE client whose key is on no allow-list */
    s_keygen("stranger", fresh);
    cr_expect_neq(tc_sh(&err,
                        "%s/pipectl -c %s -k '%s' --key %s/stranger.key --timeout 2 nodes "
                        "2>&1",
                        tc_bin(), s_c.ep, server, s_c.dir),
                  0);
    cr_expect(strstr(err, "refused this client's key (ZAP status 400)"), "%s", err);
    free(err);
    /* a throwaway key (only the server's public key known): refused as well */
    cr_expect_neq(
        tc_sh(&err, "%s/pipectl -c %s -k '%s' --timeout 2 nodes 2>&1", tc_bin(), s_c.ep, server),
        0);
    cr_expect(strstr(err, "not admitted"), "%s", err);
    free(err);
    /* a daemon with no keys never registers, and logs why */
    tc_sh(NULL,
          "PIPELD_INSECURE=1 timeout 3 %s/pipeld --name ghost --coordinator %s "
          "--threads 1 >%s/ghost.log 2>&1",
          tc_bin(), s_c.ep, s_c.dir);
    tc_sh(&err, "cat %s/ghost.log", s_c.dir);
    cr_expect(strstr(err, "coordinator refused the connection"), "%s", err);
    free(err);
    usleep(1200 * 1000); /* the coordinator's refusal lines are rate-limited to one a second */
    log = s_coord_log();
    cr_expect(strstr(log, "not on the allow-list"), "coordinator logs the unknown key");
    cr_expect(strstr(log, "does not use CURVE"), "coordinator logs the NULL client");
    cr_expect(!strstr(log, "node ghost registered"));
    free(log);
    cr_expect_geq(s_counter("refused_handshakes"), 3);
    /* an admitted client still works */
    cr_expect_eq(tc_sh(NULL, "%s/pipectl -c %s nodes >/dev/null", tc_bin(), s_c.ep), 0);
    free(server);
    s_passed = 1;
}

Test(security, roles_user_cannot_shut_down_or_read_others_jobs)
{
    char alice[41], bob[41], extra[1024], *out, *err, *server;
    int rc;
    memset(&s_c, 0, sizeof(s_c));
    tc_mkdtemp(s_c.dir, sizeof(s_c.dir));
    s_keygen("alice", alice);
    s_keygen("bob", bob);
    char dir[256];
    snprintf(dir, sizeof(dir), "%s", s_c.dir);
    snprintf(extra, sizeof(extra),
             "security:\n  clients:\n    - {name: alice, role: user, public_key_file: %s/alice.pub}"
             "\n    - {name: bob, role: user, public_key: \"%s\"}\n",
             dir, bob);
    /* tc_cluster_start_file makes its own scratch directory; the keys stay readable where they are
     */
    tc_cluster_start_file(&s_c, extra, 1);
    server = s_local_server_pub();
    snprintf(extra, sizeof(extra), "%s/prompts.jsonl", s_c.dir);
    tc_write(extra, s_prompts);
    cr_assert_eq(tc_make_model(s_c.dir, "m",
                               "--layers 2 --hidden 64 --intermediate 160 "
                               "--heads 4 --kv-heads 2 --vocab 256 --seed 3"),
                 0);
    tc_job(&s_c, "j", "m", "max_new_tokens: 4\n");
#define AS(who) "%s/pipectl -c %s -k '%s' --key %s/" who ".key --timeout 5 "
    rc = tc_sh(&out, AS("alice") "submit %s/j.yaml --wait 2>/dev/null", tc_bin(), s_c.ep, server,
               dir, s_c.dir);
    cr_assert_eq(rc, 0, "alice's job");
    char *ref = tc_reference(&s_c, "j");
    cr_expect_str_eq(out, ref);
    free(out), free(ref);
    /* bob may not read or cancel alice's job; the admin (the local key) may read it */
    cr_expect_neq(tc_sh(&err, AS("bob") "results 1 2>&1", tc_bin(), s_c.ep, server, dir), 0);
    cr_expect(strstr(err, "belongs to another user"), "%s", err);
    free(err);
    cr_expect_neq(tc_sh(&err, AS("bob") "cancel 1 2>&1", tc_bin(), s_c.ep, server, dir), 0);
    cr_expect(strstr(err, "belongs to another user"), "%s", err);
    free(err);
    cr_expect_eq(tc_sh(NULL, AS("alice") "results 1 >/dev/null", tc_bin(), s_c.ep, server, dir), 0);
    cr_expect_eq(tc_sh(NULL, "%s/pipectl -c %s results 1 >/dev/null", tc_bin(), s_c.ep), 0);
    /* a user key cannot shut the cluster down */
    cr_expect_neq(tc_sh(&err, AS("alice") "shutdown 2>&1", tc_bin(), s_c.ep, server, dir), 0);
    cr_expect(strstr(err, "SHUTDOWN is not allowed to a user key"), "%s", err);
    free(err);
    usleep(300 * 1000);
    cr_expect_eq(kill(s_c.coord, 0), 0, "the coordinator is still running");
    cr_expect_eq(tc_wait_idle(&s_c, 1, 10), 0);
    cr_expect_geq(s_counter("refused_messages"), 3);
#undef AS
    free(server);
    tc_sh(NULL, "rm -rf %s", dir);
    s_passed = 1;
}

/* A raw DEALER with identity id and key pair `key` (NULL: the local node key), connected to the
 * node endpoint (node) or the client endpoint. */
static void *s_raw(void *ctx, const char *id, const char *key, const char *server, bool node)
{
    void *s = tc_dealer(ctx, id, 3000);
    if (key) {
        char path[600];
        pl_tx_keypair_t p;
        snprintf(path, sizeof(path), "%s/%s.key", s_c.dir, key);
        cr_assert_eq(pl_tx_key_load_secret(path, &p), 0, "%s", pl_error_msg());
        zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, server, 40);
        zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, p.public_key, 40);
        zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, p.secret_key, 40);
    } else {
        tc_curve_local(s, "node");
    }
    char ep[128];
    if (node)
        tc_node_ep(s_c.ep, ep, sizeof(ep));
    else
        snprintf(ep, sizeof(ep), "%s", s_c.ep);
    cr_assert_eq(zmq_connect(s, ep), 0);
    return s;
}

Test(security, forged_hello_is_refused)
{
    char n0[41], u[41], extra[1024], type[32], body[1024];
    memset(&s_c, 0, sizeof(s_c));
    tc_mkdtemp(s_c.dir, sizeof(s_c.dir));
    s_keygen("node0", n0);
    s_keygen("user", u);
    snprintf(extra, sizeof(extra),
             "security:\n  clients:\n    - {name: node0, role: node, public_key: \"%s\"}\n"
             "    - {name: eve, role: user, public_key: \"%s\"}\n",
             n0, u);
    char keydir[256];
    snprintf(keydir, sizeof(keydir), "%s", s_c.dir);
    tc_cluster_start_file(&s_c, extra, 1);
    tc_sh(NULL, "cp %s/node0.key %s/user.key %s/ && chmod 600 %s/*.key", keydir, keydir, s_c.dir,
          s_c.dir);
    char *server = s_local_server_pub();
    void *ctx = zmq_ctx_new();
    pl_msg_t m;
    pl_msg_init(&m, PL_MSG_HELLO);
    snprintf(m.hello.host, sizeof(m.hello.host), "evil");
    m.hello.n_devices = 1;
    snprintf(m.hello.devices[0].id, sizeof(m.hello.devices[0].id), "cpu:0");
    snprintf(m.hello.devices[0].backend, sizeof(m.hello.devices[0].backend), "cpu");
    snprintf(m.hello.devices[0].name, sizeof(m.hello.devices[0].name), "fake");
    m.hello.devices[0].cores = 1;
    m.hello.devices[0].mem_bytes = 1ull << 52;
    m.hello.devices[0].gflops = 1e9;
    m.hello.devices[0].mem_gbps = 1e6;
    /* a user key cannot register a node: on the client endpoint it is told so */
    snprintf(m.hello.node, sizeof(m.hello.node), "fake1");
    snprintf(m.hello.health.node, sizeof(m.hello.health.node), "fake1");
    void *s = s_raw(ctx, "fake1", "user", server, false);
    tc_send_msg(s, &m);
    tc_recv_answer(s, type, body, sizeof(body));
    cr_expect_str_eq(type, "ERROR");
    cr_expect(strstr(body, "HELLO is not allowed to a user key"), "%s", body);
    zmq_close(s);
    /* and on the node endpoint it gets no session at all (ZAP admits node keys only there) */
    s = s_raw(ctx, "fake1", "user", server, true);
    tc_send_msg(s, &m);
    tc_recv_answer(s, type, body, sizeof(body));
    cr_expect_str_eq(type, "", "a user key was answered on the node endpoint: %s %s", type, body);
    zmq_close(s);
    /* a node key registers on the node endpoint only: the client endpoint says where to go */
    snprintf(m.hello.node, sizeof(m.hello.node), "node0");
    snprintf(m.hello.health.node, sizeof(m.hello.health.node), "node0");
    s = s_raw(ctx, "node0", "node0", server, false);
    tc_send_msg(s, &m);
    tc_recv_answer(s, type, body, sizeof(body));
    cr_expect_str_eq(type, "ERROR");
    cr_expect(strstr(body, "HELLO is a node message") && strstr(body, "node endpoint"), "%s",
              body);
    zmq_close(s);
    /* node0's key cannot register another node's name */
    snprintf(m.hello.node, sizeof(m.hello.node), "node7");
    snprintf(m.hello.health.node, sizeof(m.hello.health.node), "node7");
    s = s_raw(ctx, "node7", "node0", server, true);
    tc_send_msg(s, &m);
    tc_recv_answer(s, type, body, sizeof(body));
    cr_expect_str_eq(type, "ERROR");
    cr_expect(strstr(body, "this key belongs to node 'node0'"), "%s", body);
    zmq_close(s);
    pl_msg_clear(&m);
    zmq_ctx_term(ctx);
    char *out;
    tc_sh(&out, "%s/pipectl -c %s -o json nodes", tc_bin(), s_c.ep);
    cr_expect(!strstr(out, "fake1") && !strstr(out, "node7"), "%s", out);
    free(out);
    cr_expect_geq(s_counter("refused_messages"), 3);
    /* the refused handshake is logged, naming the lane */
    cr_expect_eq(tc_sh(NULL, "grep -q 'user key .* on the node endpoint' %s/pipecoord.log",
                       s_c.dir), 0, "the coordinator did not log the user key on the node lane");
    free(server);
    tc_sh(NULL, "rm -rf %s", keydir);
    s_passed = 1;
}

Test(security, forged_done_for_another_nodes_stage_is_refused_and_counted)
{
    char path[512], type[32], body[1024];
    int rc;
    cr_assert_eq(tc_cluster_start(&s_c, 2, NULL), 0);
    snprintf(path, sizeof(path), "%s/prompts.jsonl", s_c.dir);
    tc_write(path, s_prompts);
    cr_assert_eq(tc_make_model(s_c.dir, "m",
                               "--layers 4 --hidden 64 --intermediate 160 "
                               "--heads 4 --kv-heads 2 --vocab 256 --seed 5"),
                 0);
    tc_job(&s_c, "j", "m", "max_new_tokens: 24\n");
    cr_assert_eq(
        tc_sh(NULL, "%s/pipectl -c %s submit %s/j.yaml >/dev/null", tc_bin(), s_c.ep, s_c.dir), 0);
    /* a process holding a node key, but not assigned the job's last stage, reports it done */
    void *ctx = zmq_ctx_new(), *s = s_raw(ctx, "mallory", NULL, NULL, true);
    pl_msg_t m;
    pl_msg_init(&m, PL_MSG_DONE);
    m.done.job = 1;
    m.done.epoch = 1; /* the job's real assignment epoch (a fresh database starts at 1) */
    m.done.stage = 1;
    m.done.n_results = 3;
    m.done.results = calloc(3, sizeof(pl_msg_result_t));
    for (int i = 0; i < 3; i++) {
        m.done.results[i] = (pl_msg_result_t){.seq = i, .n_tokens = 1, .finish = PL_FINISH_EOS};
        m.done.results[i].tokens = calloc(1, sizeof(int32_t));
        m.done.results[i].tokens[0] = 66;
    }
    for (int k = 0; k < 2; k++) {
        m.done.stage = k;
        tc_send_msg(s, &m);
    }
    pl_msg_clear(&m);
    tc_recv_answer(s, type, body, sizeof(body)); /* no answer is due; just let it land */
    zmq_close(s);
    zmq_ctx_term(ctx);
    char *ref = tc_reference(&s_c, "j"), *got;
    for (int i = 0; i < 200; i++) {
        rc = tc_sh(&got, "%s/pipectl -c %s results 1 2>/dev/null", tc_bin(), s_c.ep);
        if (rc == 0)
            break;
        free(got);
        got = NULL;
        usleep(100 * 1000);
    }
    cr_assert_eq(rc, 0, "job 1 did not finish");
    cr_expect_str_eq(got, ref, "the job's output is its own, not the forged one");
    free(got), free(ref);
    cr_expect_geq(s_counter("refused_stage_messages"), 2);
    char *log = s_coord_log();
    cr_expect(strstr(log, "assigned to another node"), "coordinator logs the forged DONE");
    free(log);
    s_passed = 1;
}

Test(security, models_outside_models_allow_are_refused_without_quoting_files)
{
    char extra[1024], *err;
    memset(&s_c, 0, sizeof(s_c));
    tc_mkdtemp(s_c.dir, sizeof(s_c.dir));
    char d[256];
    snprintf(d, sizeof(d), "%s", s_c.dir);
    tc_sh(NULL, "mkdir -p %s/models %s/outside", d, d);
    snprintf(extra, sizeof(extra), "models:\n  allow: [%s/models]\n", d);
    tc_cluster_start_file(&s_c, extra, 1);
    char path[512];
    snprintf(path, sizeof(path), "%s/prompts.jsonl", d);
    tc_write(path, s_prompts);
    const char *mk = "--layers 2 --hidden 64 --intermediate 160 --heads 4 --kv-heads 2 "
                     "--vocab 256 --seed 3";
    cr_assert_eq(tc_make_model(d, "models/ok", mk), 0);
    cr_assert_eq(tc_make_model(d, "outside/m", mk), 0);
    /* a model dir inside whose config.json is a link to a file outside */
    tc_sh(NULL,
          "mkdir %s/models/evil && cp %s/models/ok/*.safetensors %s/models/evil/ && "
          "printf 'secretword other\\n' >%s/outside/secret && "
          "ln -s %s/outside/secret %s/models/evil/config.json",
          d, d, d, d, d, d);
    tc_sh(NULL, "ln -s %s/outside/m %s/models/link", d, d);
    const char *models[] = {"outside/m", "models/../outside/m", "models/link", "models/evil"};
    for (size_t i = 0; i < 4; i++) {
        snprintf(path, sizeof(path), "%s/j%zu.yaml", d, i);
        snprintf(extra, sizeof(extra), "model: %s\nprompts: prompts.jsonl\n", models[i]);
        tc_write(path, extra);
        cr_expect_neq(tc_sh(&err, "%s/pipectl -c %s submit %s 2>&1", tc_bin(), s_c.ep, path), 0,
                      "%s accepted", models[i]);
        cr_expect(strstr(err, "models.allow"), "%s: %s", models[i], err);
        cr_expect(!strstr(err, "secretword"), "the error quotes the file: %s", err);
        free(err);
    }
    /* a flood of refused submissions logs a few lines a second (pl_log_info_limited), not one
     * a refusal, and each is still answered */
    void *ctx = zmq_ctx_new(), *s = tc_dealer_local(ctx, NULL, "admin", s_c.ep);
    int n_flood = 300;
    pl_msg_t m;
    pl_msg_init(&m, PL_MSG_SUBMIT);
    snprintf(path, sizeof(path), "%s/outside/m", d);
    json_t *body = json_pack("{s:s, s:{s:[[i,i]]}}", "model", path, "gen", "prompts", 1, 2);
    cr_assert_eq(pl_job_spec_decode(body, &m.submit), PL_OK, "%s", pl_error_msg());
    json_decref(body);
    double t0 = pl_now();
    for (int i = 0; i < n_flood; i++) {
        char type[32], ans[1024];
        tc_send_msg(s, &m);
        tc_recv_answer(s, type, ans, sizeof(ans));
        cr_assert(strstr(ans, "models.allow"), "refusal %d: '%s' '%s'", i, type, ans);
    }
    double took = pl_now() - t0;
    pl_msg_clear(&m);
    zmq_close(s);
    zmq_ctx_term(ctx);
    usleep(200 * 1000);
    char *out;
    tc_sh(&out, "grep -c 'job from' %s/pipecoord.log", s_c.dir);
    long lines = strtol(out, NULL, 10);
    free(out);
    /* the 4 above, then at most a burst (and its "suppressed" line) per second begun */
    long most = 4 + (PL_LOG_BURST + 1) * ((long)took + 2);
    cr_expect_leq(lines, most, "%ld refusal lines for %d refusals in %.2f s", lines,
                  4 + n_flood, took);
    cr_expect_geq(lines, 5);
    snprintf(path, sizeof(path), "%s/ok.yaml", d);
    tc_write(path, "model: models/ok\nprompts: prompts.jsonl\n");
    cr_expect_eq(tc_sh(&err, "%s/pipectl -c %s plan %s 2>&1", tc_bin(), s_c.ep, path), 0, "%s",
                 err);
    free(err);
    tc_sh(NULL, "rm -rf %s", d);
    s_passed = 1;
}
