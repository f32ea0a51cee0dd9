/* Integration: the OpenAI API on a live local cluster — a coordinator with coordinator.http, two
 * daemons, a 2-stage deployment made by `pipectl serve` — checked by tests/js/serve_check.mjs
 * (the official openai client and the tokenizer references) and by curl for a client that
 * leaves mid-stream, for the errors and a full queue; the same conversations as batch jobs on
 * the deployment and on stages of their own; `pipectl deployments` and `undeploy`. */
#include "job_util.h"
#include "js_ref.h"

#include <criterion/criterion.h>
#include <jansson.h>

#define S_TOK JS_LENML "/tokenizer-llama3/models"

static tc_cluster_t s_c;
static int s_http;

static void s_fini(void)
{
    tc_cluster_stop(&s_c);
}

static void s_require(void)
{
    js_ref_require(S_TOK);
    if (access(JS_DIR "/node_modules/openai/package.json", R_OK) != 0 ||
        system("curl --version >/dev/null 2>&1") != 0) {
        if (getenv("CI") && !strcmp(getenv("CI"), "true"))
            cr_assert_fail("the openai package or curl is missing (tools/setup.sh installs them)");
        cr_skip_test("the openai npm package or curl is missing: run tools/setup.sh");
    }
}

/* A local coordinator with its HTTP front (--http) on a free port, and two daemons. */
static void s_start(void)
{
    char bin[512], log[512], db[512], http[64], path[512], cluster[1024];
    memset(&s_c, 0, sizeof(s_c));
    tc_mkdtemp(s_c.dir, sizeof(s_c.dir));
    snprintf(s_c.ep, sizeof(s_c.ep), "tcp://127.0.0.1:%d", tc_free_port());
    s_http = tc_free_port();
    tc_use_state_dir(&s_c);
    snprintf(bin, sizeof(bin), "%s/pipecoord", tc_bin());
    snprintf(log, sizeof(log), "%s/pipecoord.log", s_c.dir);
    snprintf(db, sizeof(db), "%s/coord.db", s_c.dir);
    snprintf(http, sizeof(http), "127.0.0.1:%d", s_http);
    char *argv[] = {bin,          "--endpoint", s_c.ep,        "--http", http,
                    "--state-db", db,           "--log-level", "debug",  NULL};
    s_c.coord = tc_spawn(argv, log);
    tc_start_node(&s_c, "node0", 1, NULL);
    tc_start_node(&s_c, "node1", 1, NULL);
    cr_assert_eq(tc_wait_idle(&s_c, 2, 60), 0, "nodes did not register");
    cr_assert_eq(tc_make_model(s_c.dir, "t",
                               "--layers 4 --hidden 64 --intermediate 128 --heads 4 "
                               "--kv-heads 2 --seed 11 --max-pos 512 --tokenizer " S_TOK),
                 0);
    /* the tiny deployment of etc/, on this test's model */
    snprintf(path, sizeof(path), "%s/deploy.yaml", s_c.dir);
    snprintf(cluster, sizeof(cluster),
             "name: tiny\nmodel: %s/t\nstages: 2\nplanner: even\nkv_slots: 16\nmax_queue: 16\n"
             "max_tokens: 64\n",
             s_c.dir);
    tc_write(path, cluster);
    char *out = NULL;
    int rc = tc_sh(&out, "%s/pipectl -c %s serve %s 2>&1", tc_bin(), s_c.ep, path);
    if (rc != 0)
        tc_dump_logs(&s_c);
    cr_assert_eq(rc, 0, "pipectl serve: %s", out);
    free(out);
    /* ready: a completion answers 200 (503 while the stages load) */
    for (int i = 0; i < 600; i++) {
        rc = tc_sh(&out,
                   "curl -s -o /dev/null -w '%%{http_code}' -H 'Content-Type: application/json' "
                   "-d '{\"model\":\"tiny\",\"prompt\":\"x\",\"max_tokens\":1}' "
                   "http://127.0.0.1:%d/v1/completions",
                   s_http);
        bool ok = out && !strcmp(out, "200");
        free(out);
        if (ok)
            return;
        usleep(100 * 1000);
    }
    tc_dump_logs(&s_c);
    cr_assert_fail("the deployment never answered");
}

Test(serve_live, openai_client_on_a_two_stage_deployment, .fini = s_fini, .timeout = 400)
{
    s_require();
    s_start();
    char in[1024], cmd[2048], *out = NULL;
    snprintf(in, sizeof(in), "%s/check.json", s_c.dir);
    snprintf(cmd, sizeof(cmd),
             "{\"base_url\":\"http://127.0.0.1:%d/v1\",\"model\":\"tiny\",\"model_dir\":\"%s/t\","
             "\"max_tokens\":12,\"concurrent\":32,\"kv_slots\":16}",
             s_http, s_c.dir);
    tc_write(in, cmd);
    int rc = tc_sh(&out, "node %s/serve_check.mjs - < %s", JS_DIR, in);
    json_t *res = out ? json_loads(out, 0, NULL) : NULL;
    if (rc != 0)
        tc_dump_logs(&s_c);
    cr_assert_not_null(res, "serve_check.mjs: %s", out);
    cr_assert(json_is_true(json_object_get(res, "ok")), "%s", out);
    cr_assert_eq(json_integer_value(json_object_get(res, "concurrent_ok")), 32, "%s", out);
    cr_log_info("32 concurrent streams in %lld ms; %lld began while another decoded, %lld after "
                "another had ended (16 KV slots)",
                (long long)json_integer_value(json_object_get(res, "concurrent_ms")),
                (long long)json_integer_value(json_object_get(res, "joined_mid_flight")),
                (long long)json_integer_value(json_object_get(res, "after_a_slot_freed")));
    free(out);

    /* pipectl deployments lists it, ready, with what it served */
    tc_sh(&out, "%s/pipectl -c %s -o json deployments", tc_bin(), s_c.ep);
    json_t *dl = json_loads(out, 0, NULL);
    json_t *d = json_array_get(json_object_get(dl, "deployments"), 0);
    cr_assert_not_null(d, "%s", out);
    cr_assert_str_eq(json_string_value(json_object_get(d, "state")), "ready", "%s", out);
    cr_assert_geq(json_integer_value(json_object_get(d, "completed")), 32 + 32, "%s", out);
    cr_assert_eq(json_array_size(json_object_get(d, "stages")), 2, "%s", out);
    json_decref(dl);
    free(out);
    tc_sh(&out, "%s/pipectl -c %s deployments", tc_bin(), s_c.ep);
    cr_assert(strstr(out, "tiny") && strstr(out, "ready") && strstr(out, "node0[0-1]"), "%s", out);
    free(out);

    /* the same 32 conversations as one batch job: on the deployment, then on stages of its own
     * after undeploy: the same texts as the streams */
    char path[1024], job[2048];
    snprintf(path, sizeof(path), "%s/convs.jsonl", s_c.dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    size_t i;
    json_t *conv;
    json_array_foreach(json_object_get(res, "prompts"), i, conv)
    {
        json_t *o = json_pack("{s:O}", "messages", conv);
        char *line = json_dumps(o, JSON_COMPACT);
        fprintf(f, "%s\n", line);
        free(line);
        json_decref(o);
    }
    fclose(f);
    for (int own = 0; own < 2; own++) {
        if (own) {
            rc = tc_sh(&out, "%s/pipectl -c %s undeploy tiny", tc_bin(), s_c.ep);
            cr_assert_eq(rc, 0, "%s", out);
            free(out);
            tc_sh(&out, "curl -s http://127.0.0.1:%d/v1/models", s_http);
            cr_assert_str_eq(out, "{\"object\":\"list\",\"data\":[]}");
            free(out);
            cr_assert_eq(tc_wait_idle(&s_c, 2, 60), 0, "the stages were not released");
        }
        snprintf(path, sizeof(path), "%s/convs.yaml", s_c.dir);
        snprintf(job, sizeof(job),
                 "model: t\nprompts: convs.jsonl\nmax_new_tokens: 12\nsampling:\n  temperature: "
                 "0\n  seed: 1\nstages: 2\nplanner: even\n%s",
                 own ? "" : "deployment: tiny\n");
        tc_write(path, job);
        rc = tc_sh(&out, "%s/pipectl -c %s submit %s --wait >/dev/null 2>%s/convs.err && "
                         "%s/pipectl -c %s -o json results $(sed -n 's/^job \\([0-9]*\\) "
                         "submitted$/\\1/p' %s/convs.err)",
                   tc_bin(), s_c.ep, path, s_c.dir, tc_bin(), s_c.ep, s_c.dir);
        if (rc)
            tc_dump_logs(&s_c);
        cr_assert_eq(rc, 0, "%s job: %s", own ? "own stages" : "deployment", out);
        json_t *jr = json_loads(out, 0, NULL), *e;
        cr_assert_eq(json_array_size(json_object_get(jr, "results")), 32, "%s", out);
        json_array_foreach(json_object_get(jr, "results"), i, e)
        {
            const char *want = json_string_value(json_array_get(json_object_get(res, "texts"), i));
            const char *got = json_string_value(json_object_get(e, "text"));
            cr_assert(want && got && !strcmp(want, got), "%s job, prompt %zu: %s, streamed %s",
                      own ? "own stages" : "deployment", i, got ? got : "-", want ? want : "-");
        }
        json_decref(jr);
        free(out);
    }
    json_decref(res);
}

Test(serve_live, a_client_that_leaves_mid_stream_and_bad_requests, .fini = s_fini, .timeout = 400)
{
    s_require();
    s_start();
    char *out = NULL;
    /* a long answer cut off after half a second: curl exits 28, the deployment keeps serving */
    tc_sh(&out,
          "curl -s -N --max-time 0.5 -H 'Content-Type: application/json' -d "
          "'{\"model\":\"tiny\",\"stream\":true,\"max_tokens\":64,\"ignore_eos\":true,"
          "\"messages\":[{\"role\":\"user\",\"content\":\"go\"}]}' "
          "http://127.0.0.1:%d/v1/chat/completions",
          s_http);
    free(out);
    /* its slot is free again: the coordinator has no request of it in flight */
    bool freed = false;
    for (int i = 0; i < 100 && !freed; i++) {
        tc_sh(&out, "%s/pipectl -c %s -o json deployments", tc_bin(), s_c.ep);
        freed = out && strstr(out, "\"live\": 0,") && strstr(out, "\"queued\": 0,");
        free(out);
        if (!freed)
            usleep(100 * 1000);
    }
    cr_assert(freed, "the canceled request still holds its slot");
    const char *bad[][2] = {
        {"{\"model\":", "400"},
        {"{\"model\":\"tiny\",\"messages\":[]}", "400"},
        {"{\"model\":\"tiny\",\"max_tokens\":100000,\"messages\":[{\"role\":\"user\","
         "\"content\":\"x\"}]}",
         "400"},
        {"{\"model\":\"other\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "404"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        tc_sh(&out,
              "curl -s -o /dev/null -w '%%{http_code}' -H 'Content-Type: application/json' "
              "-d '%s' http://127.0.0.1:%d/v1/chat/completions",
              bad[i][0], s_http);
        cr_assert_str_eq(out, bad[i][1], "%s", bad[i][0]);
        free(out);
    }
    /* still serving, and the canceled sequence's slots are free again: 16 at once fit */
    for (int k = 0; k < 2; k++) {
        tc_sh(&out,
              "seq 16 | xargs -P 16 -I{} curl -s -o /dev/null -w '%%{http_code}\\n' -H "
              "'Content-Type: application/json' -d '{\"model\":\"tiny\",\"max_tokens\":8,"
              "\"messages\":[{\"role\":\"user\",\"content\":\"n {}\"}]}' "
              "http://127.0.0.1:%d/v1/chat/completions | sort | uniq -c",
              s_http);
        cr_assert(strstr(out, "16 200"), "%s", out);
        free(out);
    }
    /* 56 long requests at once (the front takes 64 connections): beyond 16 slots + a queue of
     * 16 some are answered 429 with Retry-After, the others 200 */
    tc_sh(&out,
          "seq 56 | xargs -P 56 -I{} curl -s -o /dev/null -w '%%{http_code}\\n' -H "
          "'Content-Type: application/json' -d '{\"model\":\"tiny\",\"max_tokens\":64,"
          "\"ignore_eos\":true,\"messages\":[{\"role\":\"user\",\"content\":\"n {}\"}]}' "
          "http://127.0.0.1:%d/v1/chat/completions | sort | uniq -c",
          s_http);
    cr_assert(strstr(out, " 429") && strstr(out, " 200"), "%s", out);
    cr_log_info("56 at once: %s", out);
    free(out);
    tc_sh(&out,
          "seq 56 | xargs -P 56 -I{} curl -s -D - -o /dev/null -H "
          "'Content-Type: application/json' -d '{\"model\":\"tiny\",\"max_tokens\":64,"
          "\"ignore_eos\":true,\"messages\":[{\"role\":\"user\",\"content\":\"n {}\"}]}' "
          "http://127.0.0.1:%d/v1/chat/completions | grep -i -c '^retry-after:'",
          s_http);
    cr_assert(out && atoi(out) >= 1, "no Retry-After: %s", out ? out : "");
    free(out);
    /* the coordinator's metrics counted them, and timed the tokens */
    tc_sh(&out, "curl -s http://127.0.0.1:%d/metrics", s_http);
    const char *want[] = {"pipecoord_serve_requests_total{outcome=\"refused_429\"} ",
                          "pipecoord_serve_requests_total{outcome=\"length\"} ",
                          "pipecoord_serve_time_to_first_token_seconds_count{deployment=\"tiny\"} ",
                          "pipecoord_serve_inter_token_seconds_count{deployment=\"tiny\"} "};
    for (size_t k = 0; k < sizeof(want) / sizeof(*want); k++) {
        const char *at = out ? strstr(out, want[k]) : NULL;
        cr_assert(at && atof(at + strlen(want[k])) >= 1, "%s in %s", want[k], out ? out : "");
    }
    free(out);
}

/* Without daemons too: the coordinator's front serves the API when --http is set (nothing
 * deployed: an empty list, and a 404 naming the model), beside /metrics. */
Test(serve_live, the_coordinator_serves_the_api_on_its_front, .fini = s_fini, .timeout = 120)
{
    char bin[512], log[512], db[512], http[64], *out = NULL;
    if (system("curl --version >/dev/null 2>&1") != 0)
        cr_skip_test("curl is missing: run tools/setup.sh");
    memset(&s_c, 0, sizeof(s_c));
    tc_mkdtemp(s_c.dir, sizeof(s_c.dir));
    snprintf(s_c.ep, sizeof(s_c.ep), "tcp://127.0.0.1:%d", tc_free_port());
    s_http = tc_free_port();
    tc_use_state_dir(&s_c);
    snprintf(bin, sizeof(bin), "%s/pipecoord", tc_bin());
    snprintf(log, sizeof(log), "%s/pipecoord.log", s_c.dir);
    snprintf(db, sizeof(db), "%s/coord.db", s_c.dir);
    snprintf(http, sizeof(http), "127.0.0.1:%d", s_http);
    char *argv[] = {bin, "--endpoint", s_c.ep, "--http", http, "--state-db", db, NULL};
    s_c.coord = tc_spawn(argv, log);
    for (int i = 0; i < 100; i++) {
        tc_sh(&out, "curl -s http://127.0.0.1:%d/v1/models", s_http);
        if (out && strstr(out, "\"object\""))
            break;
        free(out);
        out = NULL;
        usleep(100 * 1000);
    }
    cr_assert(out && !strcmp(out, "{\"object\":\"list\",\"data\":[]}"), "%s", out ? out : "");
    free(out);
    tc_sh(&out,
          "curl -s -w ' %%{http_code}' -H 'Content-Type: application/json' -d "
          "'{\"model\":\"tiny\",\"prompt\":\"x\"}' http://127.0.0.1:%d/v1/completions",
          s_http);
    cr_assert(strstr(out, "model_not_found") && strstr(out, " 404"), "%s", out);
    free(out);
    tc_sh(&out, "curl -s -o /dev/null -w '%%{http_code}' http://127.0.0.1:%d/metrics", s_http);
    cr_assert_str_eq(out, "200");
    free(out);
}
