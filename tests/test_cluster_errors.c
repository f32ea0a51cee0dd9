/* Integration: bad input to a real coordinator and its daemons on loopback (jobs it must refuse,
 * malformed control messages, pipectl's failures) gets a clear one-line answer, and the
 * coordinator and the daemons keep running: a good job after it all equals the reference. */
#include "job_util.h"
#include "transport/ctl.h"

#include <criterion/criterion.h>
#include <zmq.h>

static tc_cluster_t s_c;
static int s_passed; /* set at the end of a test body: logs are shown only when it is not */

static void s_teardown(void)
{
    tc_cluster_end(&s_c, s_passed);
}

static void s_start(int n)
{
    cr_assert_eq(tc_cluster_start(&s_c, n, NULL), 0, "nodes did not register");
    tc_prompts_and_model(&s_c);
}

TestSuite(cluster_errors, .fini = s_teardown, .timeout = 120);

static void s_expect_rejected(const char *job, const char *needle)
{
    int rc;
    char *out = tc_submit(&s_c, job, &rc), *err = tc_err(&s_c, job);
    cr_expect_neq(rc, 0, "job %s was accepted", job);
    cr_expect(strstr(err, needle) || (!strcmp(needle, "truncated") && strstr(err, "beyond the")),
              "job %s: expected '%s' in: %s", job, needle, err);
    cr_expect(!strchr(err, '\n') || strchr(err, '\n') == err + strlen(err) - 1,
              "not a one-line error: %s", err);
    free(out), free(err);
}

Test(cluster_errors, bad_jobs_get_clear_errors_and_the_cluster_keeps_running)
{
    s_start(2);
    tc_job(&s_c, "nomodel", "does-not-exist", "");
    s_expect_rejected("nomodel", "does-not-exist");

    tc_sh(NULL,
          "mkdir -p %s/gpt2 && cp %s/m/model.safetensors %s/gpt2/ && "
          "sed 's/\"llama\"/\"gpt2\"/; s/LlamaForCausalLM/GPT2LMHeadModel/' %s/m/config.json "
          "> %s/gpt2/config.json",
          s_c.dir, s_c.dir, s_c.dir, s_c.dir, s_c.dir);
    tc_job(&s_c, "gpt2", "gpt2", "");
    s_expect_rejected("gpt2", "Llama");

    tc_sh(NULL,
          "mkdir -p %s/trunc && cp %s/m/config.json %s/trunc/ && "
          "head -c 100000 %s/m/model.safetensors > %s/trunc/model.safetensors",
          s_c.dir, s_c.dir, s_c.dir, s_c.dir, s_c.dir);
    tc_job(&s_c, "trunc", "trunc", "");
    s_expect_rejected("trunc", "truncated");

    char path[512];
    snprintf(path, sizeof(path), "%s/vocab.jsonl", s_c.dir);
    tc_write(path, "[1, 2, 3]\n[1, 256]\n");
    snprintf(path, sizeof(path), "%s/vocab.yaml", s_c.dir);
    tc_write(path, "model: m\nprompts: vocab.jsonl\n");
    s_expect_rejected("vocab", "vocabulary");

    tc_job(&s_c, "badkey", "m", "max_new_tokns: 3\n");
    s_expect_rejected("badkey", "badkey.yaml:4:1");

    /* after all that, a good job still runs */
    tc_job(&s_c, "good", "m", "max_new_tokens: 4\n");
    tc_expect_reference(&s_c, "good");
    s_passed = 1;
}

static void s_raw(void *sock, int parts, const char *type, const void *body, size_t len)
{
    if (parts == 1) {
        zmq_send(sock, type, strlen(type), 0);
        return;
    }
    zmq_send(sock, type, strlen(type), ZMQ_SNDMORE);
    zmq_send(sock, body, len, parts > 2 ? ZMQ_SNDMORE : 0);
    if (parts > 2)
        zmq_send(sock, "x", 1, 0);
}

Test(cluster_errors, malformed_control_messages_are_answered_not_fatal)
{
    s_start(2);
    void *ctx = zmq_ctx_new(), *sock = tc_dealer(ctx, NULL, 2000);
    tc_curve_local(sock, "admin");
    cr_assert_eq(zmq_connect(sock, s_c.ep), 0);
    s_raw(sock, 1, "HELLO", NULL, 0);
    s_raw(sock, 2, "NOSUCHTYPE", "{}", 2);
    s_raw(sock, 2, "STATUS", "not json", 8);
    s_raw(sock, 2, "STATUS", "[1,2]", 5);
    s_raw(sock, 3, "NODES", "{}", 2);
    s_raw(sock, 2, "STATUS", "{\"job\": \"abc\"}", 14);
    s_raw(sock, 2, "HELLO", "{\"proto\": 1}", 12);
    s_raw(sock, 2, "READY", "{\"job\": 99999, \"stage\": 0}", 26);
    s_raw(sock, 2, "SUBMIT", "{\"model\": 5}", 12);
    size_t big = PL_CTL_MAX_BODY + 1024;
    char *huge = malloc(big);
    memset(huge, ' ', big);
    huge[0] = '{';
    huge[big - 1] = '}';
    s_raw(sock, 2, "STATUS", huge, big);
    free(huge);
    /* each bad message the coordinator could attribute got an ERROR answer */
    int errors = 0;
    char buf[4096];
    for (int i = 0; i < 40; i++) {
        int n = zmq_recv(sock, buf, sizeof(buf) - 1, 0);
        if (n < 0)
            break;
        buf[n < (int)sizeof(buf) - 1 ? n : (int)sizeof(buf) - 1] = '\0';
        if (strcmp(buf, "ERROR") == 0)
            errors++;
    }
    cr_expect_geq(errors, 6, "only %d ERROR answers", errors);
    zmq_close(sock);
    zmq_ctx_term(ctx);
    /* coordinator and daemons are still there */
    cr_assert_eq(tc_wait_idle(&s_c, 2, 10), 0);
    cr_assert_eq(kill(s_c.coord, 0), 0);
    s_passed = 1;
}

Test(cluster_errors, pipectl_errors_are_one_line_and_nonzero)
{
    s_start(1);
    char *err;
    cr_expect_neq(tc_sh(&err, "%s/pipectl -c %s status 42 2>&1", tc_bin(), s_c.ep), 0);
    cr_expect(strstr(err, "no job 42"), "%s", err);
    free(err);
    cr_expect_neq(tc_sh(&err, "%s/pipectl -c %s health nosuchnode 2>&1", tc_bin(), s_c.ep), 0);
    cr_expect(strstr(err, "no node"), "%s", err);
    free(err);
    cr_expect_neq(tc_sh(&err, "%s/pipectl -c tcp://127.0.0.1:%d --timeout 1 nodes 2>&1", tc_bin(),
                        tc_free_port()),
                  0);
    cr_expect(strstr(err, "no answer"), "%s", err);
    free(err);
    cr_expect_eq(tc_sh(&err, "%s/pipectl -c %s health node0", tc_bin(), s_c.ep), 0);
    cr_expect(strstr(err, "cpu:0"), "%s", err);
    free(err);
    s_passed = 1;
}
