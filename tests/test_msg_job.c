/* The job spec's codec and the stage messages (ASSIGN, READY, START, DONE, FAIL, CANCEL): every
 * field survives encode -> wire text -> decode, the wire shape is pinned by hand-written JSON,
 * and bad bodies are refused with an error naming the field, the output untouched. */
#include "msg_util.h"
#include "transport/msg.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* tm_refused, and the message names the type too. */
static void s_refused(pl_msg_type_t type, const char *json, const char *needle)
{
    tm_refused(type, json, needle);
    cr_assert(strstr(pl_error_msg(), pl_msg_name(type)), "%s", pl_error_msg());
}

static void s_spec(pl_job_spec_t *s)
{
    static const int32_t p0[] = {1, 2, 3}, p1[] = {2147483647};
    pl_job_spec_init(s);
    snprintf(s->model, sizeof(s->model), "/models/tiny");
    s->n_prompts = 2;
    s->prompts = calloc(2, sizeof(*s->prompts));
    s->prompt_len = calloc(2, sizeof(int));
    s->prompts[0] = malloc(sizeof(p0));
    memcpy(s->prompts[0], p0, sizeof(p0));
    s->prompt_len[0] = 3;
    s->prompts[1] = malloc(sizeof(p1));
    memcpy(s->prompts[1], p1, sizeof(p1));
    s->prompt_len[1] = 1;
    s->gen = (pl_job_gen_t){.max_new_tokens = 77,
                            .min_new_tokens = 5,
                            .stop_at_eos = false,
                            .temperature = 0.7f,
                            .top_k = 40,
                            .top_p = 0.95f,
                            .seed = UINT64_MAX,
                            .prefill_chunk = 64,
                            .prefill_sched = {.n = 3, .len = {100, 50, 7}},
                            .wire_dtype = "bf16",
                            .n_stop = 2,
                            .stop = {"\n\n", "END"}};
    s->text = true;
    s->microbatches = 3;
    s->stages = 2;
    s->planner = PL_PLANNER_EVEN;
    s->n_nodes = 2;
    snprintf(s->nodes[0], sizeof(s->nodes[0]), "node0");
    snprintf(s->nodes[1], sizeof(s->nodes[1]), "node-1.b");
}

static void s_spec_eq(const pl_job_spec_t *a, const pl_job_spec_t *b)
{
    cr_assert_str_eq(a->model, b->model);
    cr_assert_eq(a->n_prompts, b->n_prompts);
    for (int i = 0; i < a->n_prompts; i++) {
        cr_assert_eq(a->prompt_len[i], b->prompt_len[i]);
        cr_assert_arr_eq(a->prompts[i], b->prompts[i], (size_t)a->prompt_len[i] * 4);
    }
    cr_assert_eq(a->gen.max_new_tokens, b->gen.max_new_tokens);
    cr_assert_eq(a->gen.min_new_tokens, b->gen.min_new_tokens);
    cr_assert_eq(a->gen.prefill_chunk, b->gen.prefill_chunk);
    cr_assert_eq(a->gen.prefill_sched.n, b->gen.prefill_sched.n);
    for (int i = 0; i < a->gen.prefill_sched.n; i++)
        cr_assert_eq(a->gen.prefill_sched.len[i], b->gen.prefill_sched.len[i]);
    cr_assert_str_eq(a->gen.wire_dtype, b->gen.wire_dtype);
    cr_assert_eq(a->gen.stop_at_eos, b->gen.stop_at_eos);
    cr_assert_eq(a->gen.temperature, b->gen.temperature);
    cr_assert_eq(a->gen.top_k, b->gen.top_k);
    cr_assert_eq(a->gen.top_p, b->gen.top_p);
    cr_assert_eq(a->gen.seed, b->gen.seed);
    cr_assert_eq(a->text, b->text);
    cr_assert_eq(a->gen.n_stop, b->gen.n_stop);
    for (int i = 0; i < a->gen.n_stop; i++)
        cr_assert_str_eq(a->gen.stop[i], b->gen.stop[i]);
    cr_assert_eq(a->microbatches, b->microbatches);
    cr_assert_eq(a->stages, b->stages);
    cr_assert_eq(a->planner, b->planner);
    cr_assert_eq(a->n_nodes, b->n_nodes);
    for (int i = 0; i < a->n_nodes; i++)
        cr_assert_str_eq(a->nodes[i], b->nodes[i]);
}

Test(msg_job, spec_round_trips_every_field)
{
    pl_msg_t m, out;
    pl_msg_init(&m, PL_MSG_SUBMIT);
    s_spec(&m.submit);
    tm_round_trip(&m, &out);
    s_spec_eq(&m.submit, &out.submit);
    pl_msg_clear(&out);
    m.type = PL_MSG_PLAN; /* the same body */
    tm_round_trip(&m, &out);
    s_spec_eq(&m.submit, &out.submit);
    pl_msg_clear(&out);
    pl_msg_clear(&m);
    pl_msg_clear(&m); /* twice is harmless */
}

Test(msg_job, spec_defaults_from_a_minimal_body)
{
    pl_msg_t out;
    const char *j = "{\"model\": \"/m\", \"gen\": {\"prompts\": [[5]]}}";
    cr_assert_eq(pl_msg_decode_wire("SUBMIT", 6, j, strlen(j), &out), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(out.submit.gen.max_new_tokens, 16);
    cr_assert_eq(out.submit.gen.min_new_tokens, 0);
    cr_assert_eq(out.submit.gen.prefill_sched.n, 0); /* optional: equal chunks without it */
    cr_assert(out.submit.gen.stop_at_eos);
    cr_assert_eq(out.submit.gen.top_p, 1.0f);
    cr_assert_eq(out.submit.gen.temperature, 0.0f);
    cr_assert_eq(out.submit.planner, PL_PLANNER_AUTO);
    cr_assert_eq(out.submit.microbatches, 0);
    cr_assert_eq(out.submit.n_nodes, 0);
    cr_assert_eq(out.submit.prompts[0][0], 5);
    pl_msg_clear(&out);
}

Test(msg_job, spec_wire_shape)
{
    pl_job_spec_t s;
    json_t *body;
    s_spec(&s);
    cr_assert_eq(pl_job_spec_encode(&s, &body), PL_OK);
    json_t *want = json_loads(
        "{\"model\": \"/models/tiny\", \"gen\": {\"prompts\": [[1, 2, 3], [2147483647]], "
        "\"max_new_tokens\": 77, \"min_new_tokens\": 5, \"stop_at_eos\": false, "
        "\"text\": true, \"stop\": [\"\\n\\n\", \"END\"], "
        "\"sampling\": {\"temperature\": 0.699999988079071, \"top_k\": 40, "
        "\"top_p\": 0.949999988079071, \"seed\": \"18446744073709551615\"}, "
        "\"prefill_chunk\": 64, \"prefill_schedule\": [100, 50, 7], \"wire_dtype\": \"bf16\", "
        "\"trace\": false}, "
        "\"microbatches\": 3, \"stages\": 2, \"planner\": \"even\", "
        "\"nodes\": [\"node0\", \"node-1.b\"]}",
        0, NULL);
    cr_assert_not_null(want);
    /* floats go out as the double of the float: compare those by value */
    json_t *ws = json_object_get(json_object_get(want, "gen"), "sampling");
    json_t *gs = json_object_get(json_object_get(body, "gen"), "sampling");
    cr_assert_eq((float)json_real_value(json_object_get(gs, "temperature")), 0.7f);
    cr_assert_eq((float)json_real_value(json_object_get(gs, "top_p")), 0.95f);
    json_object_del(ws, "temperature"), json_object_del(ws, "top_p");
    json_object_del(gs, "temperature"), json_object_del(gs, "top_p");
    char *got = json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS);
    cr_assert(json_equal(body, want), "got %s", got);
    free(got);
    json_decref(want);
    json_decref(body);
    pl_job_spec_clear(&s);
}

Test(msg_job, spec_bad_fields_are_named)
{
#define G(x) "{\"model\": \"/m\", \"gen\": {" x "}}"
    s_refused(PL_MSG_SUBMIT, "{\"model\": 5}", "model");
    s_refused(PL_MSG_SUBMIT, "{\"model\": \"rel/m\", \"gen\": {\"prompts\": [[1]]}}", "absolute");
    s_refused(PL_MSG_SUBMIT, "{\"model\": \"/m\"}", "gen");
    s_refused(PL_MSG_SUBMIT, G(""), "prompts");
    s_refused(PL_MSG_SUBMIT, G("\"prompts\": []"), "no prompts");
    s_refused(PL_MSG_SUBMIT, G("\"prompts\": [[1], []]"), "prompt 1");
    s_refused(PL_MSG_SUBMIT, G("\"prompts\": [[1, \"x\"]]"), "integer");
    s_refused(PL_MSG_SUBMIT, G("\"prompts\": [[-1]]"), "vocabulary");
    s_refused(PL_MSG_SUBMIT, G("\"prompts\": [[2147483648]]"), "vocabulary");
    s_refused(PL_MSG_SUBMIT, G("\"prompts\": [[1]], \"max_new_tokens\": 0"), "max_new_tokens");
    s_refused(PL_MSG_SUBMIT, G("\"prompts\": [[1]], \"max_new_tokens\": 65537"), "max_new_tokens");
    s_refused(PL_MSG_SUBMIT, G("\"prompts\": [[1]], \"stop_at_eos\": 1"), "stop_at_eos");
    s_refused(PL_MSG_SUBMIT, G("\"prompts\": [[1]], \"trace\": \"yes\""), "trace");
    s_refused(PL_MSG_SUBMIT, G("\"prompts\": [[1]], \"max_new_tokens\": 4, \"min_new_tokens\": 5"),
              "min_new_tokens");
    s_refused(PL_MSG_SUBMIT, G("\"prompts\": [[1]], \"min_new_tokens\": -1"), "min_new_tokens");
    s_refused(PL_MSG_SUBMIT, G("\"prompts\": [[1]], \"prefill_chunk\": -1"), "prefill_chunk");
    s_refused(PL_MSG_SUBMIT, G("\"prompts\": [[1]], \"prefill_chunk\": 65537"), "prefill_chunk");
    s_refused(PL_MSG_SUBMIT, G("\"prompts\": [[1]], \"prefill_schedule\": 64"), "prefill_schedule");
    s_refused(PL_MSG_SUBMIT, G("\"prompts\": [[1]], \"prefill_schedule\": [64, 0]"), "entry 1");
    s_refused(PL_MSG_SUBMIT, G("\"prompts\": [[1]], \"prefill_schedule\": [65537]"), "entry 0");
    s_refused(PL_MSG_SUBMIT, G("\"prompts\": [[1]], \"prefill_schedule\": [\"8\"]"), "entry 0");
    s_refused(PL_MSG_SUBMIT,
              G("\"prompts\": [[1]], \"prefill_schedule\": [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,"
                "1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,"
                "1,1,1,1,1]"),
              "at most 64");
    s_refused(PL_MSG_SUBMIT, G("\"prompts\": [[1]], \"wire_dtype\": \"fp8\""), "wire_dtype");
    s_refused(PL_MSG_SUBMIT, G("\"prompts\": [[1]], \"wire_dtype\": 16"), "wire_dtype");
    s_refused(PL_MSG_SUBMIT, G("\"prompts\": [[1]], \"sampling\": 3"), "sampling");
    s_refused(PL_MSG_SUBMIT, G("\"prompts\": [[1]], \"text\": 1"), "text");
    s_refused(PL_MSG_SUBMIT, G("\"prompts\": [[1]], \"stop\": \"x\""), "stop");
    s_refused(PL_MSG_SUBMIT, G("\"prompts\": [[1]], \"stop\": [\"\"]"), "stop");
    s_refused(PL_MSG_SUBMIT, G("\"prompts\": [[1]], \"stop\": [\"a\", 3]"), "entry 1");
    s_refused(PL_MSG_SUBMIT, G("\"prompts\": [[1]], \"stop\": [\"a\\u0000\"]"), "not allowed");
    s_refused(PL_MSG_SUBMIT,
              G("\"prompts\": [[1]], \"stop\": [\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\"]"),
              "at most 8");
    s_refused(PL_MSG_SUBMIT, G("\"prompts\": [[1]], \"sampling\": {\"top_p\": 2}"), "top_p");
    s_refused(PL_MSG_SUBMIT, G("\"prompts\": [[1]], \"sampling\": {\"temperature\": -1}"),
              "temperature");
    s_refused(PL_MSG_SUBMIT, G("\"prompts\": [[1]], \"sampling\": {\"seed\": \"12x\"}"), "seed");
    s_refused(PL_MSG_SUBMIT, G("\"prompts\": [[1]], \"sampling\": {\"seed\": \"-1\"}"), "seed");
    s_refused(PL_MSG_SUBMIT,
              G("\"prompts\": [[1]], \"sampling\": {\"seed\": "
                "\"18446744073709551616\"}"),
              "seed");
    s_refused(PL_MSG_SUBMIT, "{\"model\": \"/m\", \"stages\": 65, \"gen\": {\"prompts\": [[1]]}}",
              "stages");
    s_refused(PL_MSG_SUBMIT,
              "{\"model\": \"/m\", \"microbatches\": -1, \"gen\": {\"prompts\": [[1]]}}",
              "microbatches");
    s_refused(PL_MSG_PLAN,
              "{\"model\": \"/m\", \"planner\": \"fast\", \"gen\": {\"prompts\": "
              "[[1]]}}",
              "planner");
    s_refused(PL_MSG_PLAN, "{\"model\": \"/m\", \"nodes\": [\"\"], \"gen\": {\"prompts\": [[1]]}}",
              "nodes");
    s_refused(PL_MSG_PLAN, "{\"model\": \"/m\", \"nodes\": \"a\", \"gen\": {\"prompts\": [[1]]}}",
              "nodes");
#undef G
}

Test(msg_job, deployment_spec_round_trips_and_is_checked)
{
    pl_job_spec_t s, *got = calloc(1, sizeof(*got));
    pl_msg_t m, out;
    pl_job_spec_init(&s);
    snprintf(s.model, sizeof(s.model), "/models/tiny");
    s.serve = (pl_job_serve_t){.on = true, .kv_slots = 16, .max_queue = 64, .max_tokens = 512,
                               .step_tokens = 256};
    snprintf(s.serve.name, sizeof(s.serve.name), "tiny-1.b");
    pl_msg_init(&m, PL_MSG_SUBMIT);
    m.submit = s;
    tm_round_trip(&m, &out);
    *got = out.submit;
    cr_assert(got->serve.on);
    cr_assert_str_eq(got->serve.name, "tiny-1.b");
    cr_assert_eq(got->serve.kv_slots, 16);
    cr_assert_eq(got->serve.max_queue, 64);
    cr_assert_eq(got->serve.max_tokens, 512);
    cr_assert_eq(got->serve.step_tokens, 256);
    cr_assert_eq(got->n_prompts, 0);
    cr_assert_eq(got->deployment[0], 0);
    pl_msg_clear(&out);
    free(got);

    /* a batch job naming a deployment */
    int32_t p0[] = {1, 2, 3}, *pp[] = {p0};
    int len[] = {3};
    pl_job_spec_init(&s);
    snprintf(s.model, sizeof(s.model), "/models/tiny");
    s.n_prompts = 1, s.prompts = pp, s.prompt_len = len;
    snprintf(s.deployment, sizeof(s.deployment), "tiny");
    m.submit = s;
    tm_round_trip(&m, &out);
    cr_assert_str_eq(out.submit.deployment, "tiny");
    cr_assert(!out.submit.serve.on);
    cr_assert_eq(out.submit.n_prompts, 1);
    pl_msg_clear(&out);

#define D(x) "{\"model\": \"/m\", \"serve\": {" x "}, \"gen\": {\"prompts\": []}}"
#define OK_SERVE "\"name\": \"t\", \"kv_slots\": 4, \"max_queue\": 1, \"max_tokens\": 8"
    s_refused(PL_MSG_SUBMIT, D(OK_SERVE), "step_tokens");
    s_refused(PL_MSG_SUBMIT, D(OK_SERVE ", \"step_tokens\": 0"), "step_tokens");
    s_refused(PL_MSG_SUBMIT,
              D("\"name\": \"a b\", \"kv_slots\": 4, \"max_queue\": 1, \"max_tokens\": 8, "
                "\"step_tokens\": 8"),
              "serve.name");
    s_refused(PL_MSG_SUBMIT,
              D("\"name\": \"t\", \"kv_slots\": 0, \"max_queue\": 1, \"max_tokens\": 8, "
                "\"step_tokens\": 8"),
              "kv_slots");
    s_refused(PL_MSG_SUBMIT, "{\"model\": \"/m\", \"serve\": 3, \"gen\": {\"prompts\": []}}",
              "serve");
    s_refused(PL_MSG_SUBMIT,
              "{\"model\": \"/m\", \"serve\": {" OK_SERVE ", \"step_tokens\": 8}, "
              "\"gen\": {\"prompts\": [[1]]}}",
              "takes none");
    s_refused(PL_MSG_SUBMIT,
              "{\"model\": \"/m\", \"deployment\": \"x y\", \"gen\": {\"prompts\": [[1]]}}",
              "deployment");
    s_refused(PL_MSG_SUBMIT,
              "{\"model\": \"/m\", \"deployment\": \"t\", \"serve\": {" OK_SERVE
              ", \"step_tokens\": 8}, \"gen\": {\"prompts\": []}}",
              "cannot name");
#undef OK_SERVE
#undef D
}

Test(msg_job, assign_round_trips_the_plan_beside_the_spec)
{
    pl_msg_t m, out;
    pl_msg_init(&m, PL_MSG_ASSIGN);
    m.assign = (pl_msg_assign_t){.job = 4000000000u,
                                 .stage = 2,
                                 .epoch = 4000000001u,
                                 .n_stages = 3,
                                 .first = 5,
                                 .last = 7,
                                 .max_ctx = 1000,
                                 .max_tokens = 512,
                                 .microbatches = 6};
    snprintf(m.assign.device, sizeof(m.assign.device), "cpu:0");
    s_spec(&m.assign.spec);
    tm_round_trip(&m, &out);
    cr_assert_eq(out.assign.job, 4000000000u);
    cr_assert_eq(out.assign.stage, 2);
    cr_assert_eq(out.assign.epoch, 4000000001u);
    cr_assert_eq(out.assign.n_stages, 3);
    cr_assert_str_eq(out.assign.device, "cpu:0");
    cr_assert_eq(out.assign.first, 5);
    cr_assert_eq(out.assign.last, 7);
    cr_assert_eq(out.assign.max_ctx, 1000);
    cr_assert_eq(out.assign.max_tokens, 512);
    cr_assert_eq(out.assign.microbatches, 6);
    s_spec_eq(&m.assign.spec, &out.assign.spec);
    cr_assert_eq(out.assign.spec.microbatches, 3, "the user's value stays the user's");
    pl_msg_clear(&out);
    pl_msg_clear(&m);

    const char *spec = "\"spec\": {\"model\": \"/m\", \"gen\": {\"prompts\": [[1]]}}";
    char j[512];
    snprintf(j, sizeof(j),
             "{\"job\": 1, \"epoch\": 1, \"stage\": 2, \"n_stages\": 2, \"device\": \"cpu:0\", "
             "\"first\": 0, \"last\": 1, \"max_ctx\": 8, \"max_tokens\": 8, "
             "\"microbatches\": 1, %s}",
             spec);
    s_refused(PL_MSG_ASSIGN, j, "n_stages");
    snprintf(j, sizeof(j),
             "{\"job\": 1, \"epoch\": 1, \"stage\": 0, \"n_stages\": 1, \"device\": \"cpu:0\", "
             "\"first\": 3, \"last\": 1, \"max_ctx\": 8, \"max_tokens\": 8, "
             "\"microbatches\": 1, %s}",
             spec);
    s_refused(PL_MSG_ASSIGN, j, "last");
    s_refused(PL_MSG_ASSIGN,
              "{\"job\": 1, \"epoch\": 1, \"stage\": 0, \"n_stages\": 1, \"device\": \"cpu:0\", "
              "\"first\": 0, \"last\": 1, \"max_ctx\": 8, \"max_tokens\": 8, "
              "\"microbatches\": 1}",
              "spec");
    s_refused(PL_MSG_ASSIGN,
              "{\"job\": 1, \"epoch\": 1, \"stage\": 0, \"n_stages\": 1, \"device\": \"cpu:0\", "
              "\"first\": 0, \"last\": 1, \"max_ctx\": 8, \"max_tokens\": 8, "
              "\"microbatches\": 1, \"spec\": {\"model\": \"/m\", \"gen\": "
              "{\"prompts\": [[]]}}}",
              "spec: prompt 0");
    s_refused(PL_MSG_ASSIGN, "{\"job\": 0}", "job");
    /* an assignment always has an epoch (0 is only an executor's not-yet-stamped message) */
    snprintf(j, sizeof(j),
             "{\"job\": 1, \"stage\": 0, \"epoch\": 0, \"n_stages\": 1, \"device\": \"cpu:0\", "
             "\"first\": 0, \"last\": 1, \"max_ctx\": 8, \"max_tokens\": 8, "
             "\"microbatches\": 1, %s}",
             spec);
    s_refused(PL_MSG_ASSIGN, j, "epoch");
}

Test(msg_job, ready_and_start_with_and_without_addresses)
{
    pl_msg_t m, out;
    pl_msg_init(&m, PL_MSG_READY);
    m.ready = (pl_msg_ready_t){.job = 9, .stage = 1, .epoch = 77, .ucx_addr = "QUJD"};
    tm_round_trip(&m, &out);
    cr_assert_eq(out.ready.job, 9);
    cr_assert_eq(out.ready.stage, 1);
    cr_assert_eq(out.ready.epoch, 77);
    cr_assert_str_eq(out.ready.ucx_addr, "QUJD");
    pl_msg_clear(&out);
    m.ready.ucx_addr = NULL; /* a single-stage job has none */
    tm_round_trip(&m, &out);
    cr_assert_null(out.ready.ucx_addr);
    pl_msg_clear(&out);

    pl_msg_init(&m, PL_MSG_START);
    m.start = (pl_msg_start_t){
        .job = 9, .stage = 0, .epoch = UINT32_MAX, .next = "bmV4dA==", .prev = "cHJldg=="};
    for (int i = 0; i < 16; i++)
        m.start.token.b[i] = (uint8_t)(0xf0 ^ (i * 37));
    tm_round_trip(&m, &out);
    cr_assert_eq(out.start.epoch, UINT32_MAX);
    cr_assert_eq(memcmp(out.start.token.b, m.start.token.b, 16), 0, "the token travels whole");
    cr_assert_str_eq(out.start.next, "bmV4dA==");
    cr_assert_str_eq(out.start.prev, "cHJldg==");
    pl_msg_clear(&out);
    m.start.next = m.start.prev = NULL;
    tm_round_trip(&m, &out);
    cr_assert_null(out.start.next);
    cr_assert_null(out.start.prev);
    pl_msg_clear(&out);

    s_refused(PL_MSG_READY, "{\"job\": 1, \"epoch\": 1, \"stage\": 64}", "stage");
    s_refused(PL_MSG_READY, "{\"job\": 1, \"epoch\": 1, \"stage\": 0, \"ucx_addr\": 7}",
              "ucx_addr");
    s_refused(PL_MSG_READY, "{\"job\": 1, \"epoch\": 1, \"stage\": 0, \"ucx_addr\": \"\"}",
              "ucx_addr");
    s_refused(PL_MSG_START,
              "{\"job\": 1, \"epoch\": 1, \"stage\": 0, \"next\": \"\", "
              "\"token\": \"00112233445566778899aabbccddeeff\"}",
              "next");
    /* the data-plane token: required, exactly 32 hex digits */
    s_refused(PL_MSG_START, "{\"job\": 1, \"epoch\": 1, \"stage\": 0}", "token");
    s_refused(PL_MSG_START,
              "{\"job\": 1, \"epoch\": 1, \"stage\": 0, \"token\": \"0011223344556677\"}",
              "token");
    s_refused(PL_MSG_START,
              "{\"job\": 1, \"epoch\": 1, \"stage\": 0, "
              "\"token\": \"00112233445566778899aabbccddeefx\"}",
              "token");
    s_refused(PL_MSG_START, "{\"job\": 1, \"epoch\": 1, \"stage\": 0, \"token\": 7}",
              "token");
    s_refused(PL_MSG_START, "{\"stage\": 0}", "job");
    s_refused(PL_MSG_READY, "{\"job\": 1, \"stage\": 0}", "epoch"); /* every stage message */
    s_refused(PL_MSG_START, "{\"job\": 1, \"stage\": 0, \"epoch\": -1}", "epoch");
    s_refused(PL_MSG_DONE, "{\"job\": 1, \"stage\": 0, \"epoch\": 4294967296}", "epoch");
}

Test(msg_job, done_round_trips_stats_probe_and_results)
{
    int32_t t0[] = {5, 6, 2}, t1[] = {9};
    pl_msg_result_t res[] = {{.seq = 0, .n_tokens = 3, .tokens = t0, .finish = PL_FINISH_EOS},
                             {.seq = 1, .n_tokens = 1, .tokens = t1, .finish = PL_FINISH_LENGTH},
                             {.seq = 2, .n_tokens = 1, .tokens = t1, .finish = PL_FINISH_STOP,
                              .text = "h\xc3\xa9llo \xe4\xb8\x96"}};
    pl_msg_t m, out;
    pl_msg_init(&m, PL_MSG_DONE);
    m.done = (pl_msg_done_t){.job = 3, .stage = 1, .epoch = 5, .n_results = 3, .results = res};
    m.done.stats =
        (pl_msg_stats_t){.wall_s = 1.5,
                         .compute_s = 1.25,
                         .wait_s = 0.125,
                         .messages = 40,
                         .tokens = 99,
                         .has_sink = true,
                         .generated = 4,
                         .prefill_s = 0.5,
                         .prefill_compute_s = 0.25,
                         .decode_compute_s = 1.0,
                         .prefill_calls = 2,
                         .decode_calls = 38,
                         .freed_seqs = 2,
                         .bytes_sent = 123456,
                         .wire_dtype = "f16",
                         .has_overlap = true,
                         .compute_cpu_s = 1.0,
                         .buf_wait_s = 0.0625,
                         .credit_wait_s = 0.03125,
                         .send_s = 0.015625,
                         .sample_s = 0.5,
                         .credit_waits = 7,
                         .max_mb_in_flight = 3,
                         .avg_mb_in_flight = 2.25,
                         .has_data_plane = true,
                         .data_plane = {.inbox_slots = 2,
                                        .inbox_bytes = 4096,
                                        .send_credits = 3,
                                        .max_in_flight = 3,
                                        .bound_bytes = 10240,
                                        .progress_thread = true},
                         .has_probe = true,
                         .probe = {.to_stage = 0, .gbps = 3.5, .latency_s = 1e-5, .took_s = 0.01}};
    snprintf(m.done.stats.link, sizeof(m.done.stats.link), "tcp");
    snprintf(m.done.stats.probe.transport, sizeof(m.done.stats.probe.transport), "tcp");
    tm_round_trip(&m, &out);
    cr_assert_eq(out.done.epoch, 5);
    const pl_msg_stats_t *a = &m.done.stats, *b = &out.done.stats;
    cr_assert_eq(b->wall_s, a->wall_s);
    cr_assert_eq(b->compute_s, a->compute_s);
    cr_assert_eq(b->wait_s, a->wait_s);
    cr_assert_eq(b->messages, 40);
    cr_assert_eq(b->tokens, 99);
    cr_assert(b->has_sink);
    cr_assert_eq(b->generated, 4);
    cr_assert_eq(b->prefill_s, 0.5);
    cr_assert_eq(b->prefill_compute_s, 0.25);
    cr_assert_eq(b->decode_compute_s, 1.0);
    cr_assert_eq(b->prefill_calls, 2);
    cr_assert_eq(b->decode_calls, 38);
    cr_assert_eq(b->freed_seqs, 2);
    cr_assert_eq(b->bytes_sent, 123456);
    cr_assert_str_eq(b->wire_dtype, "f16");
    cr_assert(b->has_overlap);
    cr_assert_eq(b->compute_cpu_s, 1.0);
    cr_assert_eq(b->buf_wait_s, 0.0625);
    cr_assert_eq(b->credit_wait_s, 0.03125);
    cr_assert_eq(b->send_s, 0.015625);
    cr_assert_eq(b->sample_s, 0.5);
    cr_assert_eq(b->credit_waits, 7);
    cr_assert_eq(b->max_mb_in_flight, 3);
    cr_assert_eq(b->avg_mb_in_flight, 2.25);
    cr_assert(b->has_data_plane);
    cr_assert_eq(b->data_plane.inbox_slots, 2);
    cr_assert_eq(b->data_plane.inbox_bytes, 4096);
    cr_assert_eq(b->data_plane.send_credits, 3);
    cr_assert_eq(b->data_plane.max_in_flight, 3);
    cr_assert_eq(b->data_plane.bound_bytes, 10240);
    cr_assert(b->data_plane.progress_thread);
    cr_assert_str_eq(b->link, "tcp");
    cr_assert(b->has_probe);
    cr_assert_eq(b->probe.gbps, 3.5);
    cr_assert_eq(b->probe.latency_s, 1e-5);
    cr_assert_eq(b->probe.took_s, 0.01);
    cr_assert_str_eq(b->probe.transport, "tcp");
    cr_assert_eq(out.done.n_results, 3);
    cr_assert_null(out.done.results[0].text);
    cr_assert_eq(out.done.results[2].finish, PL_FINISH_STOP);
    cr_assert_str_eq(out.done.results[2].text, res[2].text);
    cr_assert_arr_eq(out.done.results[0].tokens, t0, sizeof(t0));
    cr_assert_eq(out.done.results[0].finish, PL_FINISH_EOS);
    cr_assert_eq(out.done.results[1].finish, PL_FINISH_LENGTH);
    cr_assert_eq(out.done.results[1].tokens[0], 9);
    pl_msg_clear(&out);

    /* a middle stage: no sink, no probe, no results; a stats object from before the overlap
     * figures */
    m.done.stats.has_sink = m.done.stats.has_probe = m.done.stats.has_overlap = false;
    m.done.stats.link[0] = '\0';
    m.done.n_results = 0;
    m.done.results = NULL;
    tm_round_trip(&m, &out);
    cr_assert_not(out.done.stats.has_sink);
    cr_assert_not(out.done.stats.has_probe);
    cr_assert_not(out.done.stats.has_overlap);
    cr_assert_str_eq(out.done.stats.link, "");
    cr_assert_eq(out.done.n_results, 0);
    pl_msg_clear(&out);

    /* results as users see them */
    json_t *arr;
    cr_assert_eq(pl_msg_results_encode(res, 2, &arr), PL_OK);
    char *text = json_dumps(arr, JSON_COMPACT | JSON_PRESERVE_ORDER);
    cr_assert_str_eq(text, "[{\"seq\":0,\"tokens\":[5,6,2],\"finish\":\"eos\"},"
                           "{\"seq\":1,\"tokens\":[9],\"finish\":\"length\"}]");
    free(text);
    json_decref(arr);

    const char *stats = "\"stats\": {\"wall_s\": 1, \"compute_s\": 1, \"wait_s\": 0, "
                        "\"messages\": 1, \"tokens\": 1, \"prefill_compute_s\": 0, "
                        "\"prefill_calls\": 0, \"decode_compute_s\": 0, \"decode_calls\": 0, "
                        "\"freed_seqs\": 0";
    char j[1024];
    snprintf(j, sizeof(j), "{\"job\": 1, \"epoch\": 1, \"stage\": 0, %s}}", stats);
    pl_msg_t ok;
    cr_assert_eq(pl_msg_decode_wire("DONE", 4, j, strlen(j), &ok), PL_OK, "%s", pl_error_msg());
    pl_msg_clear(&ok);
    /* each after the good stats (their closing brace included where the tail holds it) */
    static const struct {
        const char *tail, *want;
    } bad[] = {
        /* duplicate keys are refused by the framing */
        {", \"wall_s\": -1}}", "wall_s"},
        {", \"probe\": {\"to_stage\": 1}}}", "probe"},
        {"}, \"results\": [{\"seq\": 1, \"tokens\": [], \"finish\": \"eos\"}]}", "result 0"},
        {"}, \"results\": [{\"seq\": 0, \"tokens\": [1], \"finish\": \"stopped\"}]}", "finish"},
        {"}, \"results\": [{\"seq\": 0, \"tokens\": [1], \"text\": 7, \"finish\": \"stop\"}]}",
         "field 'text'"},
        /* jansson refuses NUL before the codec sees it */
        {"}, \"results\": [{\"seq\": 0, \"tokens\": [1], \"text\": \"a\\u0000b\", "
         "\"finish\": \"stop\"}]}",
         "not allowed"},
        {"}, \"results\": [{\"seq\": 0, \"tokens\": [-3], \"finish\": \"eos\"}]}", "token"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(j, sizeof(j), "{\"job\": 1, \"epoch\": 1, \"stage\": 0, %s%s", stats, bad[i].tail);
        s_refused(PL_MSG_DONE, j, bad[i].want);
    }
    s_refused(PL_MSG_DONE, "{\"job\": 1, \"epoch\": 1, \"stage\": 0}", "stats");
}

Test(msg_job, fail_carries_a_status_code_and_cancel_any_stage)
{
    pl_msg_t m, out;
    pl_msg_init(&m, PL_MSG_FAIL);
    m.fail = (pl_msg_fail_t){.job = 2, .stage = 1, .epoch = 6, .code = PL_ERR_BACKEND};
    snprintf(m.fail.error, sizeof(m.fail.error), "device lost: 'x'");
    tm_round_trip(&m, &out);
    cr_assert_eq(out.fail.code, PL_ERR_BACKEND);
    cr_assert_eq(out.fail.epoch, 6);
    cr_assert_str_eq(out.fail.error, "device lost: 'x'");
    s_refused(PL_MSG_FAIL,
              "{\"job\": 1, \"epoch\": 1, \"stage\": 0, \"code\": 0, \"error\": \"x\"}", "code");
    s_refused(PL_MSG_FAIL, "{\"job\": 1, \"epoch\": 1, \"stage\": 0, \"code\": -1}", "error");

    pl_msg_init(&m, PL_MSG_CANCEL);
    cr_assert_eq(m.cancel.stage, -1, "a fresh CANCEL means every stage of the job");
    m.cancel.job = 12;
    tm_round_trip(&m, &out);
    cr_assert_eq(out.cancel.job, 12);
    cr_assert_eq(out.cancel.stage, -1);
    cr_assert_eq(out.cancel.epoch, 0, "epoch 0: every assignment of the job");
    m.cancel.stage = 3;
    m.cancel.epoch = 9;
    tm_round_trip(&m, &out);
    cr_assert_eq(out.cancel.stage, 3);
    cr_assert_eq(out.cancel.epoch, 9);
    s_refused(PL_MSG_CANCEL, "{\"job\": 1, \"epoch\": 1, \"stage\": -2}", "stage");
}
