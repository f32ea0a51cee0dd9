/* A deployment's stages as real executors in this process (UCX between them), this test playing
 * pipeld and the coordinator: START, then SEQ_ADD / SEQ_CANCEL through the node's router
 * (daemon/node_serve.c), SEQ_OUT read off the last stage's socket. Every request's tokens, text
 * and finish equal the same prompt run alone as a one-prompt job (pl_gen_local_run: its own
 * feeder and sink), whatever shared its microbatches; cancels free slots on every stage. */
#include "common/util.h"
#include "daemon/node_serve.h"
#include "gen_util.h"
#include "js_ref.h"
#include "pipeline/exec.h"
#include "pipeline/gen_local.h"
#include "pipeline/gen_text.h"
#include "transport/act_token.h"
#include "transport/msg.h"

#include <criterion/criterion.h>
#include <unistd.h>

#define S_JOB 9u
#define S_EPOCH 3u
#define S_LAYERS 4
#define S_MAX_CTX 160
#define S_STEP 24
#define S_MAX_REQS 40
#define LLAMA3 JS_LENML "/tokenizer-llama3/models"

static char s_dir[256], s_model[300];

static void s_setup(void)
{
    tc_mkdtemp(s_dir, sizeof(s_dir));
    snprintf(s_model, sizeof(s_model), "%s/m", s_dir);
    if (access(LLAMA3 "/tokenizer.json", R_OK) != 0)
        cr_skip_test("the npm tokenizer models are not installed in tests/js/node_modules");
    /* a small vocabulary (the ids the test samples decode as any of the tokenizer's), and the
     * tokenizer copied beside it for text and stop strings */
    cr_assert_eq(tc_make_model(s_dir, "m",
                               "--layers 4 --hidden 64 --intermediate 128 "
                               "--heads 4 --kv-heads 2 --seed 5 --max-pos 256 "
                               "--vocab 512 --eos 2"),
                 0);
    cr_assert_eq(
        tc_sh(NULL, "cp %s/tokenizer.json %s/tokenizer_config.json %s/", LLAMA3, LLAMA3, s_model),
        0);
}

static void s_teardown(void)
{
    tc_sh(NULL, "rm -rf %s", s_dir);
}

TestSuite(exec_serve, .init = s_setup, .fini = s_teardown, .timeout = 300);

/* One request as the test sends it, and what came back in its SEQ_OUTs. */
typedef struct {
    int32_t prompt[64];
    int n_prompt;
    pl_job_gen_t gen;
    int resumed;
    /* results */
    int32_t tokens[128];
    int n_tokens;
    char text[4096];
    size_t text_len;
    int n_outs;
    pl_finish_t finish;
    bool done;
    long first_out, last_out; /* the deployment's SEQ_OUT count at its first and last */
} s_req_t;

typedef struct {
    pl_tx_ctx_t *ctx;
    int n;
    pl_be_device_t *dev[3];
    pl_exec_t *x[3];
    uint32_t epoch[3];
    pl_metrics_t *reg[3];
    pl_metric_t *kv[3];
    pl_metrics_t *node_reg;
    pl_metric_t *dropped;
    long n_outs; /* SEQ_OUTs read */
} s_dep_t;

/* A deployment of n stages (layers split evenly) with these bounds. */
static void s_dep_start(s_dep_t *d, int n, int kv_slots, int max_queue, int lanes)
{
    *d = (s_dep_t){.n = n};
    pl_act_token_t token;
    pl_msg_t m;
    char *addr[3] = {0};
    cr_assert_eq(pl_tx_ctx_new(&d->ctx), PL_OK);
    cr_assert_eq(pl_act_token_new(&token), PL_OK);
    cr_assert_eq(pl_metrics_new(&d->node_reg), PL_OK);
    cr_assert_eq(pl_metrics_counter(d->node_reg, "pipeld_serve_dropped_total", "dropped", "reason",
                                    &d->dropped),
                 PL_OK);
    int per = S_LAYERS / n, first = 0;
    for (int s = 0; s < n; s++) {
        int layers = s == n - 1 ? S_LAYERS - first : per;
        cr_assert_eq(pl_metrics_new(&d->reg[s]), PL_OK);
        cr_assert_eq(pl_metrics_gauge(d->reg[s], "pipeld_kv_slots_used", "kv", NULL, &d->kv[s]),
                     PL_OK);
        cr_assert_eq(pl_be_device_open(pl_be_cpu(), 0, 1, &d->dev[s]), PL_OK);
        pl_exec_params_t p = {.job_id = S_JOB,
                              .stage = s,
                              .n_stages = n,
                              .first_layer = first,
                              .last_layer = first + layers - 1,
                              .microbatches = lanes,
                              .max_ctx = S_MAX_CTX,
                              .max_tokens = S_STEP,
                              .dev = d->dev[s],
                              .threads = 1,
                              .metrics = {.kv_slots = d->kv[s]}};
        first += layers;
        pl_job_spec_init(&p.spec);
        snprintf(p.spec.model, sizeof(p.spec.model), "%s", s_model);
        p.spec.serve = (pl_job_serve_t){.on = true,
                                        .name = "t",
                                        .kv_slots = kv_slots,
                                        .max_queue = max_queue,
                                        .max_tokens = 64,
                                        .step_tokens = S_STEP};
        cr_assert_eq(pl_exec_start(d->ctx, &p, &d->x[s]), PL_OK, "%s", pl_error_msg());
        d->epoch[s] = S_EPOCH;
    }
    for (int s = 0; s < n; s++) {
        cr_assert_eq(pl_tx_recv(pl_exec_socket(d->x[s]), 30000, NULL, NULL, &m), PL_OK);
        cr_assert_eq(m.type, PL_MSG_READY, "stage %d: %s (%s)", s, pl_msg_name(m.type),
                     m.type == PL_MSG_FAIL ? m.fail.error : "");
        addr[s] = m.ready.ucx_addr;
        m.ready.ucx_addr = NULL;
        pl_msg_clear(&m);
    }
    for (int s = 0; s < n; s++) {
        pl_msg_init(&m, PL_MSG_START);
        m.start = (pl_msg_start_t){.job = S_JOB, .stage = s, .epoch = S_EPOCH, .token = token};
        if (n > 1)
            m.start.next = addr[(s + 1) % n], m.start.prev = addr[(s + n - 1) % n];
        cr_assert_eq(pl_tx_send(pl_exec_socket(d->x[s]), NULL, &m), PL_OK);
    }
    for (int s = 0; s < n; s++)
        free(addr[s]);
}

static void s_dep_stop(s_dep_t *d)
{
    for (int s = 0; s < d->n; s++) {
        pl_exec_destroy(&d->x[s]);
        pl_be_device_close(&d->dev[s]);
        pl_metrics_destroy(&d->reg[s]);
    }
    pl_metrics_destroy(&d->node_reg);
    pl_tx_ctx_destroy(&d->ctx);
}

/* The first value of metric `name` in a registry's text (-1 when absent). */
static double s_metric(pl_metrics_t *r, const char *name)
{
    char *text;
    size_t len;
    cr_assert_eq(pl_metrics_render(r, &text, &len), PL_OK);
    char want[128];
    snprintf(want, sizeof(want), "\n%s", name);
    const char *at = strstr(text, want);
    double v = -1;
    if (at && (at = strchr(at + 1, ' ')))
        v = strtod(at + 1, NULL);
    free(text);
    return v;
}

/* Through the node's router, as the coordinator's messages come: to the stage's executor. */
static bool s_route(s_dep_t *d, const pl_msg_t *m)
{
    return pl_node_serve_route(d->x, d->epoch, d->n, m, d->dropped);
}

/* SEQ_ADD of request id (1-based) to stage 0 and the last stage. */
static void s_add(s_dep_t *d, uint64_t id, const s_req_t *r)
{
    for (int s = 0; s<d->n; s += d->n> 1 ? d->n - 1 : 1) {
        pl_msg_t m;
        pl_msg_init(&m, PL_MSG_SEQ_ADD);
        m.seq_add = (pl_msg_seq_add_t){.job = S_JOB,
                                       .stage = s,
                                       .epoch = S_EPOCH,
                                       .req = id,
                                       .n_prompt = r->n_prompt,
                                       .prompt = (int32_t *)r->prompt,
                                       .resumed = r->resumed,
                                       .gen = r->gen};
        cr_assert(s_route(d, &m), "SEQ_ADD %llu to stage %d", (unsigned long long)id, s);
    }
}

static void s_cancel(s_dep_t *d, uint64_t id)
{
    for (int s = 0; s<d->n; s += d->n> 1 ? d->n - 1 : 1) {
        pl_msg_t m;
        pl_msg_init(&m, PL_MSG_SEQ_CANCEL);
        m.seq_cancel = (pl_msg_seq_cancel_t){.job = S_JOB, .stage = s, .epoch = S_EPOCH, .req = id};
        cr_assert(s_route(d, &m));
    }
}

/* The next SEQ_OUT of the deployment into its request (reqs[id - 1]); false on timeout. */
static bool s_read(s_dep_t *d, s_req_t *reqs, int n_reqs, int timeout_ms)
{
    pl_msg_t m;
    pl_status_t st = pl_tx_recv(pl_exec_socket(d->x[d->n - 1]), timeout_ms, NULL, NULL, &m);
    if (st == PL_ERR_BUSY)
        return false;
    cr_assert_eq(st, PL_OK, "%s", pl_error_msg());
    cr_assert_eq(m.type, PL_MSG_SEQ_OUT, "%s (%s)", pl_msg_name(m.type),
                 m.type == PL_MSG_FAIL ? m.fail.error : "");
    const pl_msg_seq_out_t *o = &m.seq_out;
    cr_assert_eq(o->job, S_JOB);
    cr_assert_eq(o->stage, d->n - 1);
    cr_assert(o->req >= 1 && o->req <= (uint64_t)n_reqs, "SEQ_OUT for request %llu",
              (unsigned long long)o->req);
    s_req_t *r = &reqs[o->req - 1];
    cr_assert_not(r->done, "request %llu: SEQ_OUT after its finish", (unsigned long long)o->req);
    if (r->n_outs++ == 0)
        r->first_out = d->n_outs;
    r->last_out = d->n_outs++;
    for (int i = 0; i < o->n_tokens; i++) {
        cr_assert_lt(r->n_tokens, (int)PL_ARRAY_SIZE(r->tokens));
        r->tokens[r->n_tokens++] = o->tokens[i];
    }
    size_t tl = o->text ? strlen(o->text) : 0;
    cr_assert_lt(r->text_len + tl, sizeof(r->text));
    memcpy(r->text + r->text_len, o->text ? o->text : "", tl);
    r->text_len += tl;
    r->text[r->text_len] = '\0';
    r->finish = o->finish;
    r->done = o->finish != PL_FINISH_NONE;
    pl_msg_clear(&m);
    return true;
}

/* The request alone as a one-prompt job on the whole model: its result object. */
static json_t *s_alone(const s_req_t *r)
{
    return tg_alone(s_model, r->prompt, r->n_prompt, &r->gen, S_STEP, NULL, 1);
}

/* Request r's results equal ref's (tokens, finish, and the text of its tokens as `gt`, a decoder
 * of n >= 1 sequences, gives it in sequence i % n). */
static void s_assert_alone(const s_req_t *r, const json_t *ref, int i, pl_gen_text_t *gt, int n)
{
    json_t *toks = json_object_get(ref, "tokens");
    cr_assert_eq((size_t)r->n_tokens, json_array_size(toks), "request %d: %d tokens, alone %zu", i,
                 r->n_tokens, json_array_size(toks));
    for (int k = 0; k < r->n_tokens; k++)
        cr_assert_eq(r->tokens[k], json_integer_value(json_array_get(toks, (size_t)k)),
                     "request %d token %d", i, k);
    cr_assert_str_eq(tg_finish_name(r->finish), json_string_value(json_object_get(ref, "finish")),
                     "request %d", i);
    /* the text of the reference's tokens, NUL bytes left out as SEQ_OUT leaves them out (a
     * job's results stop at the first: where the reference has text, it must begin it) */
    bool stopped = false;
    size_t tl;
    int seq = i % n;
    cr_assert_eq(pl_gen_text_begin(gt, seq, &r->gen), PL_OK, "%s", pl_error_msg());
    for (size_t k = 0; k < json_array_size(toks) && !stopped; k++)
        cr_assert_eq(pl_gen_text_push(gt, seq, (int32_t)json_integer_value(json_array_get(toks, k)),
                                      k + 1 == json_array_size(toks), &stopped),
                     PL_OK);
    const char *t = pl_gen_text_get(gt, seq, &tl);
    char want[4096];
    size_t k = 0;
    for (size_t j = 0; j < tl && k + 1 < sizeof(want); j++)
        if (t[j])
            want[k++] = t[j];
    want[k] = '\0';
    const char *job_text = json_string_value(json_object_get(ref, "text"));
    cr_assert(!job_text || strncmp(t, job_text, strlen(job_text)) == 0, "request %d", i);
    cr_assert_str_eq(r->text, want, "request %d: text \"%s\", alone \"%s\"", i, r->text, want);
}

/* A decoder of n sequences for s_assert_alone. */
static pl_gen_text_t *s_decoder(int n)
{
    pl_job_gen_t none = {.max_new_tokens = 1};
    pl_gen_text_t *gt;
    cr_assert_eq(pl_gen_text_create(s_model, n, &none, &gt), PL_OK, "%s", pl_error_msg());
    return gt;
}

/* Request i's settings: prompts of 1..60 tokens (some in chunks), greedy and seeded sampling,
 * top-k / top-p, EOS on or off, different max_tokens. */
static void s_make(s_req_t *r, int i)
{
    *r = (s_req_t){.n_prompt = 1 + (i * 13 + 5) % 60};
    for (int k = 0; k < r->n_prompt; k++)
        r->prompt[k] = 3 + (i * 31 + k * 17) % 500;
    r->gen = (pl_job_gen_t){.max_new_tokens = 2 + (i * 7) % 19,
                            .stop_at_eos = i % 3 != 0,
                            .temperature = i % 2 ? 0.9f : 0.0f,
                            .top_k = i % 4 == 1 ? 40 : 0,
                            .top_p = i % 4 == 3 ? 0.9f : 1.0f,
                            .seed = 100 + (uint64_t)i,
                            .min_new_tokens = i % 5 == 0 ? 2 : 0};
}

/* A stop string the request's completion alone meets: two characters of its middle. */
static void s_with_stop(s_req_t *r, pl_gen_text_t *gt)
{
    json_t *ref = s_alone(r), *toks = json_object_get(ref, "tokens");
    bool stopped;
    size_t n;
    cr_assert_eq(pl_gen_text_begin(gt, 0, &r->gen), PL_OK);
    for (size_t k = 0; k < json_array_size(toks); k++)
        cr_assert_eq(pl_gen_text_push(gt, 0, (int32_t)json_integer_value(json_array_get(toks, k)),
                                      k + 1 == json_array_size(toks), &stopped),
                     PL_OK);
    const char *t = pl_gen_text_get(gt, 0, &n);
    if (n >= 6) {
        size_t at = n / 2;
        while (at > 0 && ((unsigned char)t[at] & 0xC0) == 0x80)
            at--;
        size_t end = at + 1;
        while (end < n && ((unsigned char)t[end] & 0xC0) == 0x80)
            end++;
        if (end - at <= 8 && memchr(t + at, '\0', end - at) == NULL) {
            memcpy(r->gen.stop[0], t + at, end - at);
            r->gen.stop[0][end - at] = '\0';
            r->gen.n_stop = 1;
        }
    }
    json_decref(ref);
}

/* Every slot of every stage given back: the gauges at 0 (they settle as the notices travel). */
static void s_assert_slots_free(s_dep_t *d)
{
    double t0 = pl_now();
    for (int s = 0; s < d->n; s++)
        while (s_metric(d->reg[s], "pipeld_kv_slots_used") != 0 && pl_now() - t0 < 10)
            usleep(2000);
    for (int s = 0; s < d->n; s++)
        cr_assert_eq(s_metric(d->reg[s], "pipeld_kv_slots_used"), 0, "stage %d holds slots", s);
}

/* 32 requests, 12 at once and the others as earlier ones finish, on n stages. */
static void s_run_32(int n, int lanes)
{
    enum { N = 32 };
    static s_req_t reqs[N];
    pl_gen_text_t *gt = s_decoder(N);
    for (int i = 0; i < N; i++) {
        s_make(&reqs[i], i);
        if (i % 4 == 2)
            s_with_stop(&reqs[i], gt);
    }
    s_dep_t d;
    s_dep_start(&d, n, 6, N, lanes);
    int sent = 0, done = 0;
    for (; sent < 12; sent++)
        s_add(&d, (uint64_t)sent + 1, &reqs[sent]);
    double t0 = pl_now();
    while (done < N) {
        cr_assert_lt(pl_now() - t0, 120, "%d of %d requests done", done, N);
        if (!s_read(&d, reqs, N, 200))
            continue;
        int now_done = 0;
        for (int i = 0; i < N; i++)
            now_done += reqs[i].done;
        for (; done < now_done; done++) /* a finished one makes room for the next */
            if (sent < N) {
                s_add(&d, (uint64_t)sent + 1, &reqs[sent]);
                sent++;
            }
    }
    int stops = 0, joined_mid = 0;
    for (int i = 0; i < N; i++) {
        json_t *ref = s_alone(&reqs[i]);
        s_assert_alone(&reqs[i], ref, i, gt, N);
        json_decref(ref);
        stops += reqs[i].finish == PL_FINISH_STOP;
    }
    pl_gen_text_destroy(&gt);
    for (int j = 12; j < N; j++) /* it began while one admitted before it still decoded */
        for (int i = 0; i < j && !joined_mid; i++)
            joined_mid +=
                reqs[j].first_out > reqs[i].first_out && reqs[j].first_out < reqs[i].last_out;
    cr_assert_gt(stops, 0, "no request ended on its stop string");
    cr_assert_gt(joined_mid, 0, "no request joined while others decoded");
    s_assert_slots_free(&d);
    cr_assert_eq(s_metric(d.node_reg, "pipeld_serve_dropped_total"), -1, "a message dropped");
    s_dep_stop(&d);
}

Test(exec_serve, one_stage_requests_give_their_tokens_alone)
{
    s_run_32(1, 2);
}

Test(exec_serve, two_stages_requests_give_their_tokens_alone)
{
    s_run_32(2, 3);
}

Test(exec_serve, three_stages_requests_give_their_tokens_alone)
{
    s_run_32(3, 3);
}

/* Two slots: A and B decode, C waits; A canceled mid-decode gives its slot up on every stage
 * and C takes it; A's SEQ_OUTs stop; B and C give their tokens alone. */
static void s_cancel_frees(int n)
{
    s_req_t reqs[3];
    for (int i = 0; i < 3; i++) {
        s_make(&reqs[i], i + 1);
        reqs[i].gen.max_new_tokens = 40;
        reqs[i].gen.stop_at_eos = false;
    }
    s_dep_t d;
    s_dep_start(&d, n, 2, 4, 2);
    for (int i = 0; i < 3; i++)
        s_add(&d, (uint64_t)i + 1, &reqs[i]);
    double t0 = pl_now();
    while (reqs[0].n_tokens < 3) {
        cr_assert_lt(pl_now() - t0, 60);
        s_read(&d, reqs, 3, 200);
    }
    cr_assert_eq(reqs[2].n_outs, 0, "C began with both slots taken");
    s_cancel(&d, 1);
    int a_at_cancel = reqs[0].n_outs;
    /* an unknown request's cancel and one of another epoch change nothing */
    s_cancel(&d, 77);
    pl_msg_t m;
    pl_msg_init(&m, PL_MSG_SEQ_CANCEL);
    m.seq_cancel = (pl_msg_seq_cancel_t){.job = S_JOB, .stage = 0, .epoch = S_EPOCH - 1, .req = 2};
    cr_assert_not(s_route(&d, &m), "a wrong epoch's cancel was forwarded");
    cr_assert_eq(s_metric(d.node_reg, "pipeld_serve_dropped_total"), 1);
    while (!reqs[1].done || !reqs[2].done) {
        cr_assert_lt(pl_now() - t0, 60);
        s_read(&d, reqs, 3, 200);
    }
    /* A: nothing once its slot was given up (C took it), and no finish */
    cr_assert_lt(reqs[0].last_out, reqs[2].first_out, "A went on after C took its slot");
    cr_assert_geq(reqs[0].n_outs, a_at_cancel);
    cr_assert_lt(reqs[0].n_tokens, 40);
    cr_assert_not(reqs[0].done);
    pl_gen_text_t *gt = s_decoder(1);
    for (int i = 1; i < 3; i++) {
        json_t *ref = s_alone(&reqs[i]);
        s_assert_alone(&reqs[i], ref, i, gt, 1);
        json_decref(ref);
    }
    pl_gen_text_destroy(&gt);
    cr_assert_gt(reqs[2].first_out, reqs[0].first_out);
    s_assert_slots_free(&d);
    for (int s = 0; s < n; s++)
        cr_assert_eq(pl_exec_seqs_done(d.x[s]), 3, "stage %d freed %llu slots", s,
                     (unsigned long long)pl_exec_seqs_done(d.x[s]));
    s_dep_stop(&d);
}

Test(exec_serve, a_cancel_frees_its_slot_on_every_stage_for_a_queued_request)
{
    s_cancel_frees(2);
}

Test(exec_serve, a_cancel_frees_its_slot_in_a_one_stage_deployment)
{
    s_cancel_frees(1);
}

/* A request resumed on a new assignment (prompt + its first k tokens, resumed = k) ends with
 * the tokens and text of the undisturbed one. */
Test(exec_serve, a_resumed_request_goes_on_as_if_undisturbed)
{
    s_req_t whole[2], part[2];
    s_dep_t d;
    s_dep_start(&d, 2, 4, 4, 2);
    for (int i = 0; i < 2; i++) {
        s_make(&whole[i], 3 + i); /* seeded, then greedy */
        whole[i].gen.max_new_tokens = 20;
        whole[i].gen.stop_at_eos = false;
        whole[i].gen.min_new_tokens = 12;
        s_add(&d, (uint64_t)i + 1, &whole[i]);
    }
    double t0 = pl_now();
    while (!whole[0].done || !whole[1].done) {
        cr_assert_lt(pl_now() - t0, 60);
        s_read(&d, whole, 2, 200);
    }
    s_dep_stop(&d);
    /* the same on a fresh assignment, from where each stood after k tokens */
    s_dep_start(&d, 2, 4, 4, 2);
    int ks[2] = {7, 1};
    for (int i = 0; i < 2; i++) {
        int k = ks[i];
        part[i] = whole[i];
        part[i].n_tokens = part[i].n_outs = 0;
        part[i].text_len = 0;
        part[i].text[0] = '\0';
        part[i].done = false;
        memcpy(part[i].prompt + part[i].n_prompt, whole[i].tokens, (size_t)k * sizeof(int32_t));
        part[i].n_prompt += k;
        part[i].resumed = k;
        part[i].gen.max_new_tokens = 20 - k;
        s_add(&d, (uint64_t)i + 1, &part[i]);
    }
    t0 = pl_now();
    while (!part[0].done || !part[1].done) {
        cr_assert_lt(pl_now() - t0, 60);
        s_read(&d, part, 2, 200);
    }
    for (int i = 0; i < 2; i++) {
        int k = ks[i];
        cr_assert_eq(part[i].n_tokens, 20 - k);
        for (int t = 0; t < 20 - k; t++)
            cr_assert_eq(part[i].tokens[t], whole[i].tokens[k + t], "request %d token %d", i,
                         k + t);
        cr_assert_eq(part[i].finish, whole[i].finish);
        /* the text: what the undisturbed run had sent after k tokens, then the resumed one's */
        cr_assert_geq(whole[i].text_len, part[i].text_len);
        cr_assert_str_eq(whole[i].text + (whole[i].text_len - part[i].text_len), part[i].text,
                         "request %d: text", i);
    }
    s_assert_slots_free(&d);
    s_dep_stop(&d);
}

/* A bad SEQ_ADD ends its request at once (no tokens, finish length); one for a stage this node
 * does not run, or another epoch, is dropped by the router and counted. */
Test(exec_serve, bad_and_misdirected_requests_end_or_are_dropped)
{
    s_req_t reqs[3];
    s_dep_t d;
    s_dep_start(&d, 2, 2, 2, 2);
    s_make(&reqs[0], 1);
    reqs[0].prompt[0] = 100000; /* beyond the vocabulary */
    s_make(&reqs[1], 2);
    reqs[1].gen.max_new_tokens = S_MAX_CTX; /* beyond the context */
    s_make(&reqs[2], 4);
    s_add(&d, 1, &reqs[0]);
    s_add(&d, 2, &reqs[1]);
    pl_msg_t m;
    pl_msg_init(&m, PL_MSG_SEQ_ADD);
    m.seq_add = (pl_msg_seq_add_t){.job = S_JOB,
                                   .stage = 1,
                                   .epoch = S_EPOCH + 1,
                                   .req = 3,
                                   .n_prompt = reqs[2].n_prompt,
                                   .prompt = reqs[2].prompt,
                                   .gen = reqs[2].gen};
    cr_assert_not(s_route(&d, &m));
    m.seq_add.epoch = S_EPOCH;
    m.seq_add.job = S_JOB + 1;
    cr_assert_not(s_route(&d, &m));
    cr_assert_eq(s_metric(d.node_reg, "pipeld_serve_dropped_total"), 2);
    s_add(&d, 3, &reqs[2]);
    double t0 = pl_now();
    while (!reqs[0].done || !reqs[1].done || !reqs[2].done) {
        cr_assert_lt(pl_now() - t0, 60);
        s_read(&d, reqs, 3, 200);
    }
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(reqs[i].n_tokens, 0, "request %d: %d tokens", i, reqs[i].n_tokens);
        cr_assert_eq(reqs[i].finish, PL_FINISH_LENGTH, "request %d", i);
    }
    pl_gen_text_t *gt = s_decoder(1);
    json_t *ref = s_alone(&reqs[2]);
    s_assert_alone(&reqs[2], ref, 2, gt, 1);
    json_decref(ref);
    pl_gen_text_destroy(&gt);
    s_assert_slots_free(&d);
    s_dep_stop(&d);
}
