/* A deployment's plan through the coordinator's loop: KV slots lowered to what the stages'
 * memory holds, by the optimal and the even planner alike, every stage told the same count. */
#include "serve_cluster_util.h"

TestSuite(serve_cluster, .init = s_start, .fini = s_finish, .timeout = 60);

/* Stages whose memory holds fewer KV slots than asked: the plan (`planner`) lowers them (every
 * stage is told the same count in its ASSIGN), `pipectl deployments` shows both, and it serves. */
static void s_lowered(const char *planner)
{
    char keys[128];
    snprintf(keys, sizeof(keys), "planner: %s\nkv_slots: 4096\nmax_queue: 4\nmax_tokens: 16\n",
             planner);
    s_nodes(2, "memory_limit_mb: 24\n");
    s_deploy(keys);
    char *out = NULL;
    cr_assert_eq(s_ctl(&out, "-o json deployments"), 0, "%s", out);
    json_t *v = json_loads(out, 0, NULL), *d = json_array_get(json_object_get(v, "deployments"), 0);
    json_int_t slots = json_integer_value(json_object_get(d, "kv_slots"));
    cr_assert(slots >= 1 && slots < 4096, "%s", out);
    cr_assert_eq(json_integer_value(json_object_get(d, "kv_slots_asked")), 4096, "%s", out);
    cr_log_info("%s planner: 4096 KV slots asked, %lld fit", planner, (long long)slots);
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

Test(serve_cluster, kv_slots_are_lowered_to_what_the_stages_hold, .timeout = 240)
{
    s_lowered("optimal");
}

/* The even split lowers them as the optimal planner does (it used to fail to plan). */
Test(serve_cluster, even_planner_lowers_kv_slots_too, .timeout = 240)
{
    s_lowered("even");
}
