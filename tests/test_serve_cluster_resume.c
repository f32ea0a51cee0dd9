/* A deployment that resumes: deployed again by a restarted coordinator, or re-planned on the
 * nodes left after a lost stage with its requests in flight added again, each answer the
 * undisturbed run's. */
#include "serve_cluster_util.h"

TestSuite(serve_cluster, .init = s_start, .fini = s_finish, .timeout = 60);

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
    /* its event says what the resume did: the requests in flight, not a job's tokens */
    cr_assert_eq(s_ctl(&out, "-o json logs 1"), 0, "%s", out);
    cr_assert(strstr(out, "resumes with its 4 request(s) in flight re-added (") &&
                  !strstr(out, "generated tokens"),
              "%s", out);
    free(out);
    for (int k = 0; k < S_NP; k++)
        free(ref[k]);
}
