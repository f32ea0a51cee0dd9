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
}

static void s_finish(void)
{
    s_stop = 1;
    pthread_join(s_thread, NULL);
    cr_assert_eq(s_rc, PL_OK, "coordinator: %s", pl_error_msg());
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
