/* A deployment's life through the coordinator's loop: published, refused while it plans,
 * undeployed, also with requests in flight (its stages released). */
#include "serve_cluster_util.h"

TestSuite(serve_cluster, .init = s_start, .fini = s_finish, .timeout = 60);

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
