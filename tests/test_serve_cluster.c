/* Serving through the coordinator's loop (daemon/coord_deploy.c), driven through the hub from
 * the test as the HTTP front would (no HTTP): requests refused and answered on a live 2-stage
 * deployment, batch jobs on it (serve_cluster_util.h has the coordinator and the reference). */
#include "serve_cluster_util.h"

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

/* Batch job `name` of the prompts on deployment tiny, 12 new tokens with `sampling`: its results'
 * tokens. */
static void s_job_on_tiny(const char *name, const char *sampling, char *tok[S_NP])
{
    char extra[256];
    int rc;
    snprintf(extra, sizeof(extra),
             "max_new_tokens: 12\nstop_at_eos: false\nsampling:\n%sdeployment: tiny\n", sampling);
    tc_job(&s_c, name, "t", extra);
    char *res = tc_submit(&s_c, name, &rc);
    if (rc)
        tc_dump_logs(&s_c);
    cr_assert_eq(rc, 0, "%s", res);
    s_result_tokens(res, name, tok);
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
    char *got[S_NP];
    s_job_on_tiny("onit", S_GREEDY, got);
    for (int i = 0; i < S_NP; i++) {
        cr_assert_str_eq(got[i], ref[i], "job result %d", i);
        free(got[i]);
    }

    /* a sampled batch job on the deployment: prompt s samples as prompt s of the same job on
     * stages of its own (pl-generate), not as a request alone */
    char *sref[S_NP];
    s_reference_job(12, S_SAMPLED, sref);
    s_job_on_tiny("onit_s", S_SAMPLED, got);
    int differs = 0;
    for (int i = 0; i < S_NP; i++) {
        cr_assert_str_eq(got[i], sref[i], "sampled job result %d", i);
        differs += strcmp(got[i], ref[i]) != 0; /* sampling did change something */
        free(got[i]);
        free(sref[i]);
    }
    cr_assert(differs > 0, "the sampled job gave the greedy tokens");

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
