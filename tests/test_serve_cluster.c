/* Serving through the coordinator's loop (daemon/coord_deploy.c), driven through the hub from
 * the test as the HTTP front would (no HTTP): the coordinator runs in this process on a
 * loopback port, with its state in the test's directory. */
#include "cluster_util.h"
#include "daemon/coord.h"
#include "daemon/serve_req.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>

static char s_dir[256];
static pl_cfg_cluster_t s_cfg;
static pl_serve_hub_t *s_hub;
static volatile sig_atomic_t s_stop;
static pthread_t s_thread;
static pl_status_t s_rc;

static void *s_coord_main(void *arg)
{
    char db[512];
    snprintf(db, sizeof(db), "%s/coord.db", s_dir);
    s_rc = pl_coord_serve(&s_cfg, db, false, s_hub, &s_stop);
    return NULL;
}

static char s_ep[96];

/* The coordinator on loopback with the local cluster's keys in the test's state directory, so
 * that pipectl and pipeld children (which inherit PIPELD_STATE_DIR) are admitted. */
static void s_start(void)
{
    char yaml[512], state[512];
    tc_mkdtemp(s_dir, sizeof(s_dir));
    snprintf(state, sizeof(state), "%s/state", s_dir);
    setenv("PIPELD_STATE_DIR", state, 1);
    snprintf(s_ep, sizeof(s_ep), "tcp://127.0.0.1:%d", tc_free_port());
    snprintf(yaml, sizeof(yaml), "coordinator:\n  endpoint: %s\n", s_ep);
    cr_assert_eq(pl_cfg_cluster_parse(yaml, strlen(yaml), "c.yaml", &s_cfg), PL_OK, "%s",
                 pl_error_msg());
    cr_assert_eq(pl_serve_hub_create(&s_hub), PL_OK);
    cr_assert_eq(pthread_create(&s_thread, NULL, s_coord_main, NULL), 0);
    /* it answers (its keys made, its socket bound) before a test's pipectl asks anything */
    int rc = 1;
    for (int i = 0; i < 300 && rc; i++) {
        rc = tc_sh(NULL, "%s/pipectl -c %s --timeout 1 nodes >/dev/null 2>&1", tc_bin(), s_ep);
        if (rc)
            usleep(100 * 1000);
    }
    cr_assert_eq(rc, 0, "the coordinator did not answer");
}

static tc_cluster_t s_c; /* the test's daemons (the coordinator is this process's thread) */

/* Stop the coordinator's thread (a restart starts another on the same state db). */
static void s_coord_stop(void)
{
    s_stop = 1;
    pthread_join(s_thread, NULL);
    cr_assert_eq(s_rc, PL_OK, "coordinator: %s", pl_error_msg());
    s_stop = 0;
}

static void s_finish(void)
{
    s_coord_stop();
    tc_cluster_stop(&s_c);
    pl_serve_hub_destroy(&s_hub);
    tc_sh(NULL, "rm -rf %s", s_dir);
}

static pl_serve_req_t *s_request(const char *deployment)
{
    int32_t *p = malloc(2 * sizeof(int32_t));
    p[0] = 5, p[1] = 6;
    pl_serve_in_t in = {.prompt = p, .n_prompt = 2, .gen = {.max_new_tokens = 4, .top_p = 1}};
    snprintf(in.deployment, sizeof(in.deployment), "%s", deployment);
    pl_serve_req_t *r;
    cr_assert_eq(pl_serve_req_create(&in, &r), PL_OK, "%s", pl_error_msg());
    return r;
}

/* The end of a request, waited for up to 10 s. */
static pl_serve_end_t s_end_of(pl_serve_req_t *r)
{
    pl_serve_end_t end = {0};
    size_t at = 0;
    for (int i = 0; i < 100 && end.finish == PL_SERVE_RUNNING; i++) {
        char *text = NULL;
        size_t len;
        int n;
        cr_assert_eq(pl_serve_req_wait(r, 0.1, &at, &text, &len, &n, &end), PL_OK);
        free(text);
    }
    return end;
}

TestSuite(serve_cluster, .init = s_start, .fini = s_finish, .timeout = 60);

/* A request naming no deployment is refused 404, with the name in its message; nothing is
 * published while nothing is deployed; the loop goes on taking requests. */
Test(serve_cluster, unknown_deployment_is_refused_404)
{
    pl_serve_req_t *r = s_request("no-such-model");
    pl_serve_hub_put(s_hub, r);
    pl_serve_end_t end = s_end_of(r);
    cr_assert_eq(end.finish, PL_SERVE_REFUSED, "finish %d", end.finish);
    cr_assert_eq(end.http_status, 404);
    cr_assert(strstr(end.message, "'no-such-model'"), "%s", end.message);
    pl_serve_req_unref(&r);
    pl_serve_deployment_t deps[PL_SERVE_MAX_DEPLOYMENTS];
    cr_assert_eq(pl_serve_hub_deployments(s_hub, deps), 0);
    /* several at once, one canceled by its client before the loop saw it */
    pl_serve_req_t *rs[5];
    for (int i = 0; i < 5; i++) {
        rs[i] = s_request("other");
        if (i == 2)
            pl_serve_req_cancel(rs[i]);
        pl_serve_hub_put(s_hub, rs[i]);
    }
    for (int i = 0; i < 5; i++) {
        end = s_end_of(rs[i]);
        cr_assert(end.finish == PL_SERVE_REFUSED || (i == 2 && end.finish == PL_SERVE_CANCELED),
                  "request %d: finish %d", i, end.finish);
        pl_serve_req_unref(&rs[i]);
    }
}

/* pipectl against the test's coordinator: its exit status, its output (stdout and stderr) in
 * *out_p when not NULL. */
static int s_ctl(char **out_p, const char *args)
{
    char *out = NULL;
    int rc = tc_sh(&out, "%s/pipectl -c %s --timeout 10 %s 2>&1", tc_bin(), s_ep, args);
    if (out_p)
        *out_p = out;
    else
        free(out);
    return rc;
}

/* The published deployments, waited for up to 10 s to number n. */
static int s_published(pl_serve_deployment_t deps[PL_SERVE_MAX_DEPLOYMENTS], int n)
{
    int got = 0;
    for (int i = 0; i < 100 && (got = pl_serve_hub_deployments(s_hub, deps)) != n; i++)
        usleep(100 * 1000);
    return got;
}

/* A deployment's life without a node to run it: `pipectl serve` submits it, the hub publishes
 * it not ready with the model's context, requests get 503 while it waits to be planned, a
 * second serve of the name is refused (exit 1), `deployments` lists it planning, `undeploy`
 * ends it: unpublished, requests get 404 again, a second undeploy is refused. */
Test(serve_cluster, a_deployment_is_published_refused_while_planning_and_undeployed)
{
    char path[512], yaml[1024], *out = NULL;
    cr_assert_eq(tc_make_model(s_dir, "t",
                               "--layers 4 --hidden 64 --intermediate 128 --heads 4 "
                               "--kv-heads 2 --seed 11 --max-pos 512"),
                 0);
    snprintf(path, sizeof(path), "%s/deploy.yaml", s_dir);
    snprintf(yaml, sizeof(yaml),
             "name: tiny\nmodel: %s/t\nstages: 2\nkv_slots: 8\nmax_queue: 4\nmax_tokens: 64\n",
             s_dir);
    tc_write(path, yaml);
    char args[700];
    snprintf(args, sizeof(args), "serve %s", path);
    cr_assert_eq(s_ctl(&out, args), 0, "%s", out);
    cr_assert(strstr(out, "deployment tiny submitted (job 1)"), "%s", out);
    free(out);

    pl_serve_deployment_t deps[PL_SERVE_MAX_DEPLOYMENTS];
    cr_assert_eq(s_published(deps, 1), 1);
    cr_assert_str_eq(deps[0].name, "tiny");
    cr_assert(strstr(deps[0].model, "/t"), "%s", deps[0].model);
    cr_assert_eq(deps[0].context, 512); /* the model's positions: below 4096 + max_tokens */
    cr_assert_eq(deps[0].max_tokens, 64);
    cr_assert_not(deps[0].ready);

    pl_serve_req_t *r = s_request("tiny");
    pl_serve_hub_put(s_hub, r);
    pl_serve_end_t end = s_end_of(r);
    cr_assert_eq(end.finish, PL_SERVE_REFUSED);
    cr_assert_eq(end.http_status, 503, "%d: %s", end.http_status, end.message);
    cr_assert(strstr(end.message, "planning"), "%s", end.message);
    pl_serve_req_unref(&r);

    cr_assert_eq(s_ctl(&out, args), 1, "%s", out);
    cr_assert(strstr(out, "deployment 'tiny' is deployed already (job 1"), "%s", out);
    free(out);

    cr_assert_eq(s_ctl(&out, "-o json deployments"), 0, "%s", out);
    json_t *v = json_loads(out, 0, NULL), *d = json_array_get(json_object_get(v, "deployments"), 0);
    cr_assert_not_null(d, "%s", out);
    cr_assert_eq(json_array_size(json_object_get(v, "deployments")), 1, "%s", out);
    cr_assert_str_eq(json_string_value(json_object_get(d, "state")), "planning");
    cr_assert_eq(json_integer_value(json_object_get(d, "kv_slots")), 8);
    cr_assert_eq(json_integer_value(json_object_get(d, "context")), 512);
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(d, "requests"),
                                                    "refused_503")), 1, "%s", out);
    json_decref(v);
    free(out);
    cr_assert_eq(s_ctl(&out, "deployments"), 0, "%s", out);
    cr_assert(strstr(out, "tiny") && strstr(out, "planning"), "%s", out);
    free(out);

    cr_assert_eq(s_ctl(&out, "undeploy tiny"), 0, "%s", out);
    cr_assert(strstr(out, "deployment tiny undeployed (job 1 canceled)"), "%s", out);
    free(out);
    cr_assert_eq(s_published(deps, 0), 0);
    r = s_request("tiny");
    pl_serve_hub_put(s_hub, r);
    end = s_end_of(r);
    cr_assert_eq(end.http_status, 404, "%d: %s", end.http_status, end.message);
    pl_serve_req_unref(&r);
    cr_assert_eq(s_ctl(&out, "undeploy tiny"), 1, "%s", out);
    cr_assert(strstr(out, "no deployment named 'tiny'"), "%s", out);
    free(out);
    cr_assert_eq(s_ctl(&out, "-o json deployments"), 0, "%s", out);
    cr_assert(strstr(out, "\"deployments\": []"), "%s", out);
    free(out);
}

/* ---- with daemons: the deployment's stages run (the node side, daemon/node_serve.c) ---- */

/* n daemons on the test's coordinator (node-file lines `extra`, may be NULL), registered. */
static void s_nodes(int n, const char *extra)
{
    snprintf(s_c.dir, sizeof(s_c.dir), "%s", s_dir);
    snprintf(s_c.ep, sizeof(s_c.ep), "%s", s_ep);
    for (int i = 0; i < n; i++) {
        char name[16];
        snprintf(name, sizeof(name), "node%d", s_c.n_nodes);
        tc_start_node_file(&s_c, s_c.n_nodes, name, 1, extra);
    }
    cr_assert_eq(tc_wait_idle(&s_c, n, 60), 0, "nodes did not register");
}

/* Deployment `tiny` of model dir/t (made once: 4 layers, 512 positions), serve.* from `keys`,
 * waited for until ready. */
static void s_deploy(const char *keys)
{
    char path[512], yaml[1024], args[700], *out = NULL, model[600];
    snprintf(model, sizeof(model), "%s/t/config.json", s_dir);
    if (access(model, R_OK) != 0)
        cr_assert_eq(tc_make_model(s_dir, "t",
                                   "--layers 4 --hidden 64 --intermediate 128 --heads 4 "
                                   "--kv-heads 2 --seed 11 --max-pos 512"),
                     0);
    snprintf(path, sizeof(path), "%s/deploy.yaml", s_dir);
    snprintf(yaml, sizeof(yaml), "name: tiny\nmodel: %s/t\nstages: 2\n%s%s", s_dir,
             strstr(keys, "planner:") ? "" : "planner: even\n", keys);
    tc_write(path, yaml);
    snprintf(args, sizeof(args), "serve --wait %s", path);
    int rc = s_ctl(&out, args);
    if (rc)
        tc_dump_logs(&s_c);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "deployment tiny ready"), "%s", out);
    free(out);
}

/* A request of prompt p[0..n) for deployment `tiny`, greedy, max_new new tokens, no EOS stop. */
static pl_serve_req_t *s_ids(const int32_t *p, int n, int max_new)
{
    pl_serve_in_t in = {.n_prompt = n, .gen = {.max_new_tokens = max_new, .top_p = 1}};
    cr_assert_not_null(in.prompt = malloc((size_t)n * sizeof(int32_t)));
    memcpy(in.prompt, p, (size_t)n * sizeof(int32_t));
    snprintf(in.deployment, sizeof(in.deployment), "tiny");
    pl_serve_req_t *r;
    cr_assert_eq(pl_serve_req_create(&in, &r), PL_OK, "%s", pl_error_msg());
    free(in.prompt);
    return r;
}

/* The end of r, waited for up to `s` seconds. */
static pl_serve_end_t s_wait_end(pl_serve_req_t *r, double s)
{
    pl_serve_end_t end = {0};
    size_t at = SIZE_MAX;
    double t0 = tc_now();
    while (end.finish == PL_SERVE_RUNNING && tc_now() - t0 < s) {
        char *text = NULL;
        size_t len;
        int n;
        cr_assert_eq(pl_serve_req_wait(r, 0.1, &at, &text, &len, &n, &end), PL_OK);
        free(text);
    }
    return end;
}

/* r's tokens as a JSON array text, "[1,2,3]", for comparison with a job's results. */
static char *s_tokens_json(pl_serve_req_t *r)
{
    int32_t *t;
    int n;
    cr_assert_eq(pl_serve_req_tokens(r, &t, &n), PL_OK);
    char *b = malloc(16 * (size_t)n + 3);
    size_t k = 0;
    b[k++] = '[';
    for (int i = 0; i < n; i++)
        k += (size_t)sprintf(b + k, "%s%d", i ? "," : "", t[i]);
    b[k++] = ']';
    b[k] = '\0';
    free(t);
    return b;
}

/* The prompts of these tests: prompt i has 3 + 7 * i tokens. */
#define S_NP 4
static int s_prompt(int i, int32_t *p)
{
    int n = 3 + 7 * i;
    for (int k = 0; k < n; k++)
        p[k] = (int32_t)(5 + (i * 31 + k * 17) % 250);
    return n;
}

/* The reference: the prompts as one job run by pl-generate in this process's child (one stage,
 * one microbatch), each result's tokens as compact JSON. */
#define S_GREEDY "  temperature: 0\n"
#define S_SAMPLED "  temperature: 0.9\n  top_k: 20\n  seed: 7\n"

static void s_reference_job(int max_new, const char *sampling, char *ref[S_NP])
{
    char path[512], line[1024];
    snprintf(path, sizeof(path), "%s/prompts.jsonl", s_dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    for (int i = 0; i < S_NP; i++) {
        int32_t p[64];
        int n = s_prompt(i, p);
        size_t k = 0;
        line[k++] = '[';
        for (int t = 0; t < n; t++)
            k += (size_t)sprintf(line + k, "%s%d", t ? "," : "", p[t]);
        fprintf(f, "%.*s]\n", (int)k, line);
    }
    fclose(f);
    char extra[256];
    snprintf(extra, sizeof(extra),
             "max_new_tokens: %d\nstop_at_eos: false\nsampling:\n%s", max_new, sampling);
    tc_job(&s_c, "ref", "t", extra);
    char *out = tc_reference(&s_c, "ref"), *save = NULL;
    int i = 0;
    for (char *l = strtok_r(out, "\n", &save); l && i < S_NP; l = strtok_r(NULL, "\n", &save)) {
        json_t *v = json_loads(l, 0, NULL);
        if (!v)
            continue;
        ref[i++] = json_dumps(json_object_get(v, "tokens"), JSON_COMPACT);
        json_decref(v);
    }
    cr_assert_eq(i, S_NP, "reference: %d results", i);
    free(out);
}

static void s_reference(int max_new, char *ref[S_NP])
{
    s_reference_job(max_new, S_GREEDY, ref);
}

/* Requests on a live 2-stage deployment of 2 KV slots and a queue of 2: four at once are taken
 * (two wait for a slot), a fifth and sixth are refused 429 with Retry-After; each answer equals
 * the same prompt in a job run by pl-generate; a prompt + max_tokens beyond the context and a
 * token id outside the vocabulary are 400; a request canceled by its client frees its slot
 * (four more after it all complete); a batch job naming the deployment gets the reference's
 * tokens; `pipectl deployments` counts what completed. */
Test(serve_cluster, requests_on_a_two_stage_deployment, .timeout = 240)
{
    s_nodes(2, NULL);
    s_deploy("kv_slots: 2\nmax_queue: 2\nmax_tokens: 16\n");
    char *ref[S_NP];
    s_reference(12, ref);
    pl_serve_deployment_t deps[PL_SERVE_MAX_DEPLOYMENTS];
    cr_assert_eq(pl_serve_hub_deployments(s_hub, deps), 1);
    cr_assert(deps[0].ready);

    pl_serve_req_t *rs[S_NP + 2];
    for (int i = 0; i < S_NP + 2; i++) {
        int32_t p[64];
        int n = s_prompt(i % S_NP, p);
        rs[i] = s_ids(p, n, 12);
        pl_serve_hub_put(s_hub, rs[i]);
    }
    for (int i = 0; i < S_NP + 2; i++) {
        pl_serve_end_t end = s_wait_end(rs[i], 60);
        if (i >= S_NP) {
            cr_assert_eq(end.finish, PL_SERVE_REFUSED, "request %d: %d", i, end.finish);
            cr_assert_eq(end.http_status, 429, "request %d: %d %s", i, end.http_status,
                         end.message);
            cr_assert(end.retry_after_s > 0);
        } else {
            cr_assert_eq(end.finish, PL_SERVE_LENGTH, "request %d: %d %s", i, end.finish,
                         end.message);
            char *got = s_tokens_json(rs[i]);
            cr_assert_str_eq(got, ref[i], "request %d", i);
            free(got);
        }
        pl_serve_req_unref(&rs[i]);
    }

    int32_t big[500];
    for (int k = 0; k < 500; k++)
        big[k] = 7;
    pl_serve_req_t *r = s_ids(big, 500, 16); /* 500 + 16 > 512 */
    pl_serve_hub_put(s_hub, r);
    pl_serve_end_t end = s_wait_end(r, 10);
    cr_assert_eq(end.http_status, 400, "%d %s", end.http_status, end.message);
    cr_assert(strstr(end.message, "context"), "%s", end.message);
    pl_serve_req_unref(&r);
    int32_t oov[2] = {5, 1 << 20};
    r = s_ids(oov, 2, 4);
    pl_serve_hub_put(s_hub, r);
    end = s_wait_end(r, 10);
    cr_assert_eq(end.http_status, 400, "%d %s", end.http_status, end.message);
    pl_serve_req_unref(&r);

    /* a client that leaves: canceled at once, its slot free again for the next four */
    int32_t p[64];
    int n = s_prompt(3, p);
    r = s_ids(p, n, 16);
    pl_serve_hub_put(s_hub, r);
    usleep(20 * 1000);
    pl_serve_req_cancel(r);
    end = s_wait_end(r, 10);
    cr_assert(end.finish == PL_SERVE_CANCELED || end.finish == PL_SERVE_LENGTH, "%d",
              end.finish);
    pl_serve_req_unref(&r);
    for (int i = 0; i < S_NP; i++) {
        n = s_prompt(i, p);
        rs[i] = s_ids(p, n, 12);
        pl_serve_hub_put(s_hub, rs[i]);
    }
    for (int i = 0; i < S_NP; i++) {
        end = s_wait_end(rs[i], 60);
        cr_assert_eq(end.finish, PL_SERVE_LENGTH, "request %d after the cancel: %d %s", i,
                     end.finish, end.message);
        pl_serve_req_unref(&rs[i]);
    }

    /* a batch job on the deployment */
    tc_job(&s_c, "onit", "t",
           "max_new_tokens: 12\nstop_at_eos: false\nsampling:\n  temperature: 0\n"
           "deployment: tiny\n");
    int rc;
    char *res = tc_submit(&s_c, "onit", &rc), *save = NULL;
    if (rc)
        tc_dump_logs(&s_c);
    cr_assert_eq(rc, 0, "%s", res);
    int i = 0;
    for (char *l = strtok_r(res, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        json_t *v = json_loads(l, 0, NULL);
        if (!v)
            continue;
        char *t = json_dumps(json_object_get(v, "tokens"), JSON_COMPACT);
        cr_assert(i < S_NP);
        cr_assert_str_eq(t, ref[i], "job result %d", i);
        free(t);
        json_decref(v);
        i++;
    }
    cr_assert_eq(i, S_NP, "%d results", i);
    free(res);

    /* a sampled batch job on the deployment: prompt s samples as prompt s of the same job on
     * stages of its own (pl-generate), not as a request alone */
    char *sref[S_NP];
    s_reference_job(12, S_SAMPLED, sref);
    tc_job(&s_c, "onit_s", "t",
           "max_new_tokens: 12\nstop_at_eos: false\nsampling:\n" S_SAMPLED "deployment: tiny\n");
    res = tc_submit(&s_c, "onit_s", &rc), save = NULL;
    if (rc)
        tc_dump_logs(&s_c);
    cr_assert_eq(rc, 0, "%s", res);
    i = 0;
    int differs = 0;
    for (char *l = strtok_r(res, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        json_t *v = json_loads(l, 0, NULL);
        if (!v)
            continue;
        char *t = json_dumps(json_object_get(v, "tokens"), JSON_COMPACT);
        cr_assert(i < S_NP);
        cr_assert_str_eq(t, sref[i], "sampled job result %d", i);
        differs += strcmp(t, ref[i]) != 0; /* sampling did change something */
        free(t);
        json_decref(v);
        i++;
    }
    cr_assert_eq(i, S_NP, "%d results", i);
    cr_assert(differs > 0, "the sampled job gave the greedy tokens");
    free(res);
    for (int k = 0; k < S_NP; k++)
        free(sref[k]);

    char *out = NULL;
    cr_assert_eq(s_ctl(&out, "-o json deployments"), 0, "%s", out);
    json_t *v = json_loads(out, 0, NULL), *d = json_array_get(json_object_get(v, "deployments"), 0);
    cr_assert_str_eq(json_string_value(json_object_get(d, "state")), "ready", "%s", out);
    /* the canceled one may have ended first; two batch jobs of S_NP each */
    json_int_t done = json_integer_value(json_object_get(d, "completed"));
    cr_assert(done == 4 * S_NP || done == 4 * S_NP + 1, "%s", out);
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(d, "requests"),
                                                    "refused_429")), 2, "%s", out);
    cr_assert_eq(json_array_size(json_object_get(d, "stages")), 2, "%s", out);
    json_decref(v);
    free(out);
    for (int k = 0; k < S_NP; k++)
        free(ref[k]);
}

/* Undeploy with requests in flight (slow stages): each ends CANCELED, the stages are released
 * (the nodes are idle again). */
Test(serve_cluster, undeploy_ends_requests_in_flight, .timeout = 240)
{
    s_nodes(2, "slowdown: 1000\n");
    s_deploy("kv_slots: 2\nmax_queue: 4\nmax_tokens: 64\n");
    pl_serve_req_t *rs[4];
    for (int i = 0; i < 4; i++) {
        int32_t p[64];
        int n = s_prompt(i, p);
        rs[i] = s_ids(p, n, 64);
        pl_serve_hub_put(s_hub, rs[i]);
    }
    usleep(300 * 1000);
    char *out = NULL;
    cr_assert_eq(s_ctl(&out, "undeploy tiny"), 0, "%s", out);
    free(out);
    for (int i = 0; i < 4; i++) {
        pl_serve_end_t end = s_wait_end(rs[i], 30);
        cr_assert_eq(end.finish, PL_SERVE_CANCELED, "request %d: %d %s", i, end.finish,
                     end.message);
        pl_serve_req_unref(&rs[i]);
    }
    cr_assert_eq(tc_wait_idle(&s_c, 2, 60), 0, "the stages were not released");
}

/* A restarted coordinator deploys again what it had deployed (its state db) and answers. */
Test(serve_cluster, a_deployment_survives_a_coordinator_restart, .timeout = 240)
{
    s_nodes(2, NULL);
    s_deploy("kv_slots: 2\nmax_queue: 2\nmax_tokens: 16\n");
    char *ref[S_NP];
    s_reference(12, ref);
    s_coord_stop();
    cr_assert_eq(pthread_create(&s_thread, NULL, s_coord_main, NULL), 0);
    pl_serve_deployment_t deps[PL_SERVE_MAX_DEPLOYMENTS];
    bool ready = false;
    for (int i = 0; i < 600 && !ready; i++) {
        ready = pl_serve_hub_deployments(s_hub, deps) == 1 && deps[0].ready;
        if (!ready)
            usleep(100 * 1000);
    }
    if (!ready)
        tc_dump_logs(&s_c);
    cr_assert(ready, "not deployed again after the restart");
    int32_t p[64];
    int n = s_prompt(2, p);
    pl_serve_req_t *r = s_ids(p, n, 12);
    pl_serve_hub_put(s_hub, r);
    pl_serve_end_t end = s_wait_end(r, 60);
    cr_assert_eq(end.finish, PL_SERVE_LENGTH, "%d %s", end.finish, end.message);
    char *got = s_tokens_json(r);
    cr_assert_str_eq(got, ref[2]);
    free(got);
    pl_serve_req_unref(&r);
    for (int k = 0; k < S_NP; k++)
        free(ref[k]);
}

/* A lost stage (its daemon killed mid-request): the deployment is re-planned on the nodes left
 * and its requests in flight are added again with their tokens so far; none is dropped and each
 * gets the tokens of the same prompt run undisturbed. */
Test(serve_cluster, requests_survive_a_lost_stage, .timeout = 400)
{
    s_nodes(3, "slowdown: 100\n");
    s_deploy("kv_slots: 4\nmax_queue: 4\nmax_tokens: 48\n");
    char *ref[S_NP];
    s_reference(24, ref);
    char *out = NULL, victim[32];
    cr_assert_eq(s_ctl(&out, "-o json deployments"), 0, "%s", out);
    json_t *v = json_loads(out, 0, NULL);
    json_t *st = json_object_get(json_array_get(json_object_get(v, "deployments"), 0), "stages");
    const char *last = json_string_value(json_object_get(json_array_get(st, 1), "node"));
    cr_assert(last && !strncmp(last, "node", 4), "%s", out);
    snprintf(victim, sizeof(victim), "\"node\": \"%s\"", last);
    int vi = atoi(last + 4); /* nodeK is s_c.node[K] */
    json_decref(v);
    free(out);
    pl_serve_req_t *rs[S_NP];
    for (int i = 0; i < S_NP; i++) {
        int32_t p[64];
        int n = s_prompt(i, p);
        rs[i] = s_ids(p, n, 24);
        pl_serve_hub_put(s_hub, rs[i]);
    }
    /* every request has tokens, none has ended: then the last stage's node dies */
    bool started = false;
    for (int k = 0; k < 400 && !started; k++) {
        started = true;
        for (int i = 0; i < S_NP; i++) {
            size_t at = SIZE_MAX, len;
            int n;
            char *text = NULL;
            pl_serve_end_t end;
            cr_assert_eq(pl_serve_req_wait(rs[i], 0, &at, &text, &len, &n, &end), PL_OK);
            cr_assert_eq(end.finish, PL_SERVE_RUNNING, "request %d ended before the loss", i);
            started = started && n >= 1;
        }
        if (!started)
            usleep(25 * 1000);
    }
    cr_assert(started, "the requests did not start");
    kill(s_c.node[vi], SIGKILL); /* the node of the last stage, which samples */
    waitpid(s_c.node[vi], NULL, 0);
    s_c.node[vi] = 0;
    for (int i = 0; i < S_NP; i++) {
        pl_serve_end_t end = s_wait_end(rs[i], 200); /* slow stages, under a sanitizer too */
        if (end.finish != PL_SERVE_LENGTH)
            tc_dump_logs(&s_c);
        cr_assert_eq(end.finish, PL_SERVE_LENGTH, "request %d: %d %s", i, end.finish,
                     end.message);
        char *got = s_tokens_json(rs[i]);
        cr_assert_str_eq(got, ref[i], "request %d after the loss", i);
        free(got);
        pl_serve_req_unref(&rs[i]);
    }
    cr_assert_eq(s_ctl(&out, "-o json deployments"), 0, "%s", out);
    cr_assert(strstr(out, "\"resumes\": 1") && !strstr(out, victim), "%s", out);
    free(out);
    for (int k = 0; k < S_NP; k++)
        free(ref[k]);
}

/* Stages whose memory holds fewer KV slots than asked: the plan lowers them (every stage is
 * told the same count in its ASSIGN), `pipectl deployments` shows both, and it serves. */
Test(serve_cluster, kv_slots_are_lowered_to_what_the_stages_hold, .timeout = 240)
{
    s_nodes(2, "memory_limit_mb: 24\n");
    s_deploy("planner: optimal\nkv_slots: 4096\nmax_queue: 4\nmax_tokens: 16\n");
    char *out = NULL;
    cr_assert_eq(s_ctl(&out, "-o json deployments"), 0, "%s", out);
    json_t *v = json_loads(out, 0, NULL), *d = json_array_get(json_object_get(v, "deployments"), 0);
    json_int_t slots = json_integer_value(json_object_get(d, "kv_slots"));
    cr_assert(slots >= 1 && slots < 4096, "%s", out);
    cr_assert_eq(json_integer_value(json_object_get(d, "kv_slots_asked")), 4096, "%s", out);
    cr_log_info("4096 KV slots asked, %lld fit", (long long)slots);
    json_decref(v);
    free(out);
    char *ref[S_NP];
    s_reference(12, ref);
    int32_t p[64];
    int n = s_prompt(1, p);
    pl_serve_req_t *r = s_ids(p, n, 12);
    pl_serve_hub_put(s_hub, r);
    pl_serve_end_t end = s_wait_end(r, 60);
    cr_assert_eq(end.finish, PL_SERVE_LENGTH, "%d %s", end.finish, end.message);
    char *got = s_tokens_json(r);
    cr_assert_str_eq(got, ref[1]);
    free(got);
    pl_serve_req_unref(&r);
    for (int k = 0; k < S_NP; k++)
        free(ref[k]);
}
