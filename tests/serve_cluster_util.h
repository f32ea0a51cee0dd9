/* What the serving-through-the-coordinator suites share: the coordinator in this process on a
 * loopback port (state in the test's directory), pipectl against it, daemons, a deployment. */
#ifndef PL_TESTS_SERVE_CLUSTER_UTIL_H
#define PL_TESTS_SERVE_CLUSTER_UTIL_H

#include "daemon/coord.h"
#include "daemon/serve_req.h"
#include "job_util.h"

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

static inline void *s_coord_main(void *arg)
{
    char db[512];
    snprintf(db, sizeof(db), "%s/coord.db", s_dir);
    s_rc = pl_coord_serve(&s_cfg, db, false, s_hub, &s_stop);
    return NULL;
}

static char s_ep[96];

/* The coordinator on loopback with the local cluster's keys in the test's state directory, so
 * that pipectl and pipeld children (which inherit PIPELD_STATE_DIR) are admitted. */
static inline void s_start(void)
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
static inline void s_coord_stop(void)
{
    s_stop = 1;
    pthread_join(s_thread, NULL);
    cr_assert_eq(s_rc, PL_OK, "coordinator: %s", pl_error_msg());
    s_stop = 0;
}

static inline void s_finish(void)
{
    s_coord_stop();
    tc_cluster_stop(&s_c);
    pl_serve_hub_destroy(&s_hub);
    tc_sh(NULL, "rm -rf %s", s_dir);
}

static inline pl_serve_req_t *s_request(const char *deployment)
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
static inline pl_serve_end_t s_end_of(pl_serve_req_t *r)
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

/* pipectl against the test's coordinator: its exit status, its output (stdout and stderr) in
 * *out_p when not NULL. */
static inline int s_ctl(char **out_p, const char *args)
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
static inline int s_published(pl_serve_deployment_t deps[PL_SERVE_MAX_DEPLOYMENTS], int n)
{
    int got = 0;
    for (int i = 0; i < 100 && (got = pl_serve_hub_deployments(s_hub, deps)) != n; i++)
        usleep(100 * 1000);
    return got;
}

/* ---- with daemons: the deployment's stages run (the node side, daemon/node_serve.c) ---- */

/* n daemons on the test's coordinator (node-file lines `extra`, may be NULL), registered. */
static inline void s_nodes(int n, const char *extra)
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
static inline void s_deploy(const char *keys)
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
static inline pl_serve_req_t *s_ids(const int32_t *p, int n, int max_new)
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
static inline pl_serve_end_t s_wait_end(pl_serve_req_t *r, double s)
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
static inline char *s_tokens_json(pl_serve_req_t *r)
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
static inline int s_prompt(int i, int32_t *p)
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

/* The tokens of a job's S_NP results (the JSON lines in `out`, which is consumed), each as
 * compact JSON into tok[] (the caller frees them). */
static inline void s_result_tokens(char *out, const char *what, char *tok[S_NP])
{
    char *save = NULL;
    int i = 0;
    for (char *l = strtok_r(out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        json_t *v = json_loads(l, 0, NULL);
        if (!v)
            continue;
        cr_assert(i < S_NP, "%s: more than %d results", what, S_NP);
        tok[i++] = json_dumps(json_object_get(v, "tokens"), JSON_COMPACT);
        json_decref(v);
    }
    cr_assert_eq(i, S_NP, "%s: %d results", what, i);
    free(out);
}

static inline void s_reference_job(int max_new, const char *sampling, char *ref[S_NP])
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
    s_result_tokens(tc_reference(&s_c, "ref"), "reference", ref);
}

static inline void s_reference(int max_new, char *ref[S_NP])
{
    s_reference_job(max_new, S_GREEDY, ref);
}

#endif
