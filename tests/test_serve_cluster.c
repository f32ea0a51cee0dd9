/* Serving through the coordinator's loop (daemon/coord_deploy.c), driven through the hub from
 * the test as the HTTP front would (no HTTP): the coordinator runs in this process on a
 * loopback port, with its state in the test's directory. */
#include "cluster_util.h"
#include "daemon/coord.h"
#include "daemon/serve_req.h"

#include <criterion/criterion.h>
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

static void s_start(void)
{
    char yaml[512];
    tc_mkdtemp(s_dir, sizeof(s_dir));
    snprintf(yaml, sizeof(yaml), "coordinator:\n  endpoint: tcp://127.0.0.1:%d\n"
                                 "security:\n  insecure: true\n", tc_free_port());
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
