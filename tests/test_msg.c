/* The node and query messages (HELLO, WELCOME, HEARTBEAT, ERROR, STATUS/RESULTS/KILL, HEALTH,
 * NODES, SHUTDOWN, REPLY and the typed replies) round trip field by field, refuse bad bodies
 * naming the field; and the socket wrapper carries typed messages both ways, naming the sender
 * and the type of a message that breaks the protocol. */
#include "msg_util.h"
#include "transport/sock.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

static void s_heartbeat(pl_msg_heartbeat_t *h)
{
    memset(h, 0, sizeof(*h));
    snprintf(h->node, sizeof(h->node), "node0");
    h->n_stages = 2;
    h->stages[0] =
        (pl_msg_progress_t){.job = 7, .stage = 2, .epoch = 3000000000u, .generated = 1234567890123};
    h->stages[1] = (pl_msg_progress_t){.job = 8, .stage = 0, .generated = 0};
    /* stage 0's streamed piece: three characters at byte 17 of its text */
    memcpy(h->text, "\xe9\xbe\x98\n\xc3\xa7", 6);
    h->text_used = 6;
    h->stages[0].text_at = 17;
    h->stages[0].text_len = 6;
    h->rss_kb = 5000;
    h->load1 = 0.75;
}

static void s_heartbeat_eq(const pl_msg_heartbeat_t *a, const pl_msg_heartbeat_t *b)
{
    cr_assert_str_eq(a->node, b->node);
    cr_assert_eq(a->n_stages, b->n_stages);
    for (int i = 0; i < a->n_stages; i++) {
        cr_assert_eq(a->stages[i].job, b->stages[i].job);
        cr_assert_eq(a->stages[i].stage, b->stages[i].stage);
        cr_assert_eq(a->stages[i].epoch, b->stages[i].epoch);
        cr_assert_eq(a->stages[i].generated, b->stages[i].generated);
        cr_assert_eq(a->stages[i].text_len, b->stages[i].text_len);
        if (a->stages[i].text_len) {
            cr_assert_eq(a->stages[i].text_at, b->stages[i].text_at);
            cr_assert(memcmp(a->text + a->stages[i].text_off, b->text + b->stages[i].text_off,
                             a->stages[i].text_len) == 0);
        }
    }
    cr_assert_eq(a->rss_kb, b->rss_kb);
    cr_assert_eq(a->load1, b->load1);
}

Test(msg, hello_round_trips_devices_and_health)
{
    pl_msg_t m, out;
    pl_msg_init(&m, PL_MSG_HELLO);
    pl_msg_hello_t *h = &m.hello;
    snprintf(h->node, sizeof(h->node), "node0");
    snprintf(h->host, sizeof(h->host), "box.example");
    h->pid = 4242;
    h->n_devices = 2;
    h->devices[0] = (pl_msg_device_t){.id = "cpu:0",
                                      .backend = "cpu",
                                      .name = "Xeon",
                                      .isa = "avx2",
                                      .cores = 16,
                                      .mem_bytes = 1ull << 40,
                                      .gflops = 123.5,
                                      .mem_gbps = 45.25,
                                      .dec_gflops = 77.75,
                                      .pass_gbps = 2.5,
                                      .attn_gflops = 26.125,
                                      .host_gbps = 61.5,
                                      .cpu_mask = 0x5};
    h->devices[1] = (pl_msg_device_t){.id = "cuda:1",
                                      .backend = "cuda",
                                      .name = "H200",
                                      .cores = 132,
                                      .mem_bytes = 141ull << 30,
                                      .gflops = 9e5,
                                      .mem_gbps = 4800};
    h->n_unavailable = 1;
    snprintf(h->unavailable[0].backend, 16, "hip");
    snprintf(h->unavailable[0].why, 256, "libamdhip64.so: not found");
    s_heartbeat(&h->health);
    tm_round_trip(&m, &out);
    const pl_msg_hello_t *g = &out.hello;
    cr_assert_eq(out.proto, PL_PROTO_VERSION, "every message names its protocol");
    cr_assert_str_eq(g->node, "node0");
    cr_assert_str_eq(g->host, "box.example");
    cr_assert_eq(g->pid, 4242);
    cr_assert_eq(g->n_devices, 2);
    for (int i = 0; i < 2; i++) {
        cr_assert_str_eq(g->devices[i].id, h->devices[i].id);
        cr_assert_str_eq(g->devices[i].backend, h->devices[i].backend);
        cr_assert_str_eq(g->devices[i].name, h->devices[i].name);
        cr_assert_str_eq(g->devices[i].isa, h->devices[i].isa);
        cr_assert_eq(g->devices[i].cores, h->devices[i].cores);
        cr_assert_eq(g->devices[i].mem_bytes, h->devices[i].mem_bytes);
        cr_assert_eq(g->devices[i].gflops, h->devices[i].gflops);
        cr_assert_eq(g->devices[i].mem_gbps, h->devices[i].mem_gbps);
        cr_assert_eq(g->devices[i].dec_gflops, h->devices[i].dec_gflops); /* the GPU's: 0 */
        cr_assert_eq(g->devices[i].pass_gbps, h->devices[i].pass_gbps);
        cr_assert_eq(g->devices[i].attn_gflops, h->devices[i].attn_gflops);
        cr_assert_eq(g->devices[i].host_gbps, h->devices[i].host_gbps); /* the GPU's: 0 */
        cr_assert_eq(g->devices[i].cpu_mask, h->devices[i].cpu_mask);
    }
    cr_assert_eq(g->n_unavailable, 1);
    cr_assert_str_eq(g->unavailable[0].why, "libamdhip64.so: not found");
    s_heartbeat_eq(&h->health, &g->health);

    tm_refused(PL_MSG_HELLO, "{\"proto\": 1}", "node");
    tm_refused(PL_MSG_HELLO,
              "{\"proto\": 2, \"node\": \"n\", \"host\": \"h\", \"devices\": "
              "[{\"id\": \"cpu:0\", \"backend\": \"cpu\", \"name\": \"x\", "
              "\"cores\": -1, \"mem_bytes\": 0, \"gflops\": 1, \"mem_gbps\": 1}]}",
              "device 0: field 'cores'");
    tm_refused(PL_MSG_HELLO,
              "{\"proto\": 2, \"node\": \"n\", \"host\": \"h\", \"devices\": "
              "[{\"id\": \"cpu:0\", \"backend\": \"cpu\", \"name\": \"x\", \"cores\": 1, "
              "\"mem_bytes\": 0, \"gflops\": 1, \"mem_gbps\": 1, \"cpu_mask\": -1}]}",
              "cpu_mask");
    tm_refused(PL_MSG_HELLO,
              "{\"proto\": 2, \"node\": \"n\", \"host\": \"h\", \"devices\": "
              "[{\"id\": \"cpu:0\", \"backend\": \"cpu\", \"name\": \"x\", \"cores\": 1, "
              "\"mem_bytes\": 0, \"gflops\": 1, \"mem_gbps\": 1, \"dec_gflops\": -2}]}",
              "dec_gflops");
    tm_refused(PL_MSG_HELLO,
              "{\"proto\": 2, \"node\": \"n\", \"host\": \"h\", \"devices\": "
              "[{\"id\": \"cpu:0\", \"backend\": \"cpu\", \"name\": \"x\", \"cores\": 1, "
              "\"mem_bytes\": 0, \"gflops\": 1, \"mem_gbps\": 1, \"attn_gflops\": -2}]}",
              "attn_gflops");
    /* the host's bandwidth: 0 or absent is "not measured", a tiny or huge figure a fault */
    const char *bad_host[] = {"-2", "1e-9", "1e8"};
    for (size_t i = 0; i < sizeof(bad_host) / sizeof(bad_host[0]); i++) {
        char body[512];
        snprintf(body, sizeof(body),
                 "{\"proto\": 2, \"node\": \"n\", \"host\": \"h\", \"devices\": "
                 "[{\"id\": \"cpu:0\", \"backend\": \"cpu\", \"name\": \"x\", \"cores\": 1, "
                 "\"mem_bytes\": 0, \"gflops\": 1, \"mem_gbps\": 1, \"host_gbps\": %s}]}",
                 bad_host[i]);
        tm_refused(PL_MSG_HELLO, body, "host_gbps");
    }
    tm_refused(PL_MSG_HELLO,
              "{\"proto\": 2, \"node\": \"n\", \"host\": \"h\", \"devices\": "
              "[1,2,3,4,5,6,7,8,9]}",
              "devices");
    tm_refused(PL_MSG_HELLO, "{\"proto\": 2, \"node\": \"\", \"host\": \"h\", \"devices\": []}",
              "node");
}

/* A HELLO whose first device has `field` set to v (every other rate 1): decoded into *out, or
 * refused (the error names the field). */
static pl_status_t s_hello_rate(const char *field, double v, pl_msg_t *out)
{
    pl_msg_t m;
    json_t *body;
    pl_msg_init(&m, PL_MSG_HELLO);
    snprintf(m.hello.node, sizeof(m.hello.node), "n");
    snprintf(m.hello.host, sizeof(m.hello.host), "h");
    snprintf(m.hello.health.node, sizeof(m.hello.health.node), "n");
    m.hello.n_devices = 1;
    m.hello.devices[0] = (pl_msg_device_t){.id = "cpu:0",
                                           .backend = "cpu",
                                           .name = "x",
                                           .cores = 1,
                                           .gflops = 1,
                                           .mem_gbps = 1,
                                           .dec_gflops = 1,
                                           .pass_gbps = 1,
                                           .attn_gflops = 1};
    cr_assert_eq(pl_msg_encode(&m, &body), PL_OK, "%s", pl_error_msg());
    json_t *dev = json_array_get(json_object_get(body, "devices"), 0);
    cr_assert_eq(json_object_set_new(dev, field, json_real(v)), 0);
    char *text = json_dumps(body, JSON_COMPACT);
    pl_status_t st = pl_msg_decode_wire("HELLO", 5, text, strlen(text), out);
    free(text);
    json_decref(body);
    return st;
}

Test(msg, hello_rates_are_zero_or_within_their_bounds)
{
    static const struct {
        const char *field;
        double max;
    } rates[] = {{"gflops", 1e9},
                 {"mem_gbps", 1e7},
                 {"dec_gflops", 1e9},
                 {"pass_gbps", 1e7},
                 {"attn_gflops", 1e9}};
    /* vanishing (1e-300, the smallest denormal, just under the floor), negative, past the top */
    const double bad[] = {1e-300, 4.9406564584124654e-324, 9.99e-4, -1, 2e10};
    for (size_t f = 0; f < sizeof(rates) / sizeof(rates[0]); f++) {
        char needle[64];
        pl_msg_t out;
        snprintf(needle, sizeof(needle), "device 0: field '%s'", rates[f].field);
        for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
            cr_assert_eq(s_hello_rate(rates[f].field, bad[k], &out), PL_ERR_PROTOCOL,
                         "%s = %g accepted", rates[f].field, bad[k]);
            cr_assert(strstr(pl_error_msg(), needle), "'%s' not in '%s'", needle, pl_error_msg());
        }
        /* 0 (not measured), the floor and the top are taken as they are */
        const double good[] = {0, 1e-3, rates[f].max};
        for (size_t k = 0; k < sizeof(good) / sizeof(good[0]); k++) {
            cr_assert_eq(s_hello_rate(rates[f].field, good[k], &out), PL_OK, "%s = %g: %s",
                         rates[f].field, good[k], pl_error_msg());
            const pl_msg_device_t *d = &out.hello.devices[0];
            double got = f == 0   ? d->gflops
                         : f == 1 ? d->mem_gbps
                         : f == 2 ? d->dec_gflops
                         : f == 3 ? d->pass_gbps
                                  : d->attn_gflops;
            cr_assert_eq(got, good[k], "%s: %g read as %g", rates[f].field, good[k], got);
            pl_msg_clear(&out);
        }
    }
}

Test(msg, heartbeat_and_welcome)
{
    pl_msg_t m, out;
    pl_msg_init(&m, PL_MSG_HEARTBEAT);
    s_heartbeat(&m.heartbeat);
    tm_round_trip(&m, &out);
    s_heartbeat_eq(&m.heartbeat, &out.heartbeat);
    tm_refused(PL_MSG_HEARTBEAT,
              "{\"node\": \"n\", \"stages\": [{\"job\": 0, \"stage\": 0, "
              "\"generated\": 0}], \"rss_kb\": 1, \"load1\": 0}",
              "stages[0]: field 'job'");
    tm_refused(PL_MSG_HEARTBEAT,
              "{\"node\": \"n\", \"stages\": [{\"job\": 1, \"stage\": 0, "
              "\"generated\": 0}], \"rss_kb\": 1, \"load1\": 0}",
              "stages[0]: missing field 'epoch'");
    tm_refused(PL_MSG_HEARTBEAT, "{\"node\": \"n\", \"stages\": [], \"rss_kb\": 1}", "load1");

    pl_msg_init(&m, PL_MSG_WELCOME);
    m.welcome = (pl_msg_welcome_t){.heartbeat_ms = 500, .dead_after_ms = 3000};
    tm_round_trip(&m, &out);
    cr_assert_eq(out.welcome.heartbeat_ms, 500);
    cr_assert_eq(out.welcome.dead_after_ms, 3000);
    tm_refused(PL_MSG_WELCOME, "{\"heartbeat_ms\": 0, \"dead_after_ms\": 1}", "heartbeat_ms");
}

/* A streamed text piece: a non-empty string with its offset, inside a result's bound, and all of
 * a heartbeat's pieces within PL_MSG_MAX_HB_TEXT bytes. */
static void s_piece_refused(const char *entry_tail, const char *needle)
{
    char body[PL_MSG_MAX_HB_TEXT * 3];
    snprintf(body, sizeof(body),
             "{\"node\": \"n\", \"stages\": [{\"job\": 1, \"stage\": 0, \"epoch\": 1, "
             "\"generated\": 1%s}], \"rss_kb\": 1, \"load1\": 0}",
             entry_tail);
    tm_refused(PL_MSG_HEARTBEAT, body, needle);
}

Test(msg, heartbeat_text_pieces_are_checked)
{
    s_piece_refused(", \"text\": \"ab\"", "stages[0]: missing field 'text_at'");
    s_piece_refused(", \"text_at\": 0", "stages[0]: field 'text_at' without 'text'");
    s_piece_refused(", \"text\": \"\", \"text_at\": 0", "stages[0]: field 'text'");
    s_piece_refused(", \"text\": 5, \"text_at\": 0", "stages[0]: field 'text'");
    s_piece_refused(", \"text\": \"ab\", \"text_at\": -1", "text_at");
    s_piece_refused(", \"text\": \"ab\", \"text_at\": 16777215", "text_at");
    /* two stages' pieces of 2100 bytes each: more than one heartbeat carries */
    char big[2101], tail[2200], body[PL_MSG_MAX_HB_TEXT * 3];
    memset(big, 'x', 2100);
    big[2100] = '\0';
    snprintf(tail, sizeof(tail), ", \"text\": \"%s\", \"text_at\": 0", big);
    snprintf(body, sizeof(body),
             "{\"node\": \"n\", \"stages\": [{\"job\": 1, \"stage\": 0, \"epoch\": 1, "
             "\"generated\": 1%s}, {\"job\": 2, \"stage\": 0, \"epoch\": 1, \"generated\": "
             "1%s}], \"rss_kb\": 1, \"load1\": 0}",
             tail, tail);
    tm_refused(PL_MSG_HEARTBEAT, body, "stages[1]: field 'text'");
    /* one of them fits, next to a stage without text */
    pl_msg_t out;
    snprintf(body, sizeof(body),
             "{\"node\": \"n\", \"stages\": [{\"job\": 2, \"stage\": 0, \"epoch\": 1, "
             "\"generated\": 0}, {\"job\": 1, \"stage\": 0, \"epoch\": 1, \"generated\": "
             "1%s}], \"rss_kb\": 1, \"load1\": 0}",
             tail);
    cr_assert_eq(pl_msg_decode_wire("HEARTBEAT", 9, body, strlen(body), &out), PL_OK, "%s",
                 pl_error_msg());
    cr_assert_eq(out.heartbeat.stages[0].text_len, 0);
    cr_assert_eq(out.heartbeat.stages[1].text_len, 2100);
    cr_assert_eq(out.heartbeat.text_used, 2100);
    cr_assert(memcmp(out.heartbeat.text + out.heartbeat.stages[1].text_off, big, 2100) == 0);
}

Test(msg, error_carries_the_code)
{
    pl_msg_t m, out;
    json_t *body;
    pl_msg_init(&m, PL_MSG_ERROR);
    m.error.code = PL_ERR_NOT_FOUND;
    snprintf(m.error.message, sizeof(m.error.message), "node 'n' is not registered");
    cr_assert_eq(pl_msg_encode(&m, &body), PL_OK);
    char *text = json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS);
    cr_assert_str_eq(text, "{\"code\":-4,\"error\":\"node 'n' is not registered\","
                           "\"proto\":3,\"status\":\"not found\"}");
    free(text);
    json_decref(body);
    tm_round_trip(&m, &out);
    cr_assert_eq(out.error.code, PL_ERR_NOT_FOUND);
    cr_assert_str_eq(out.error.message, "node 'n' is not registered");
    tm_refused(PL_MSG_ERROR, "{\"error\": \"x\"}", "code");
    tm_refused(PL_MSG_ERROR, "{\"code\": 3, \"error\": \"x\"}", "code");
    tm_refused(PL_MSG_ERROR, "{\"code\": -1}", "error");
}

Test(msg, queries_and_replies)
{
    pl_msg_t m, out;
    const pl_msg_type_t jobs[] = {PL_MSG_STATUS, PL_MSG_RESULTS, PL_MSG_KILL};
    for (int i = 0; i < 3; i++) {
        pl_msg_init(&m, jobs[i]);
        m.job_ref.job = UINT32_MAX;
        tm_round_trip(&m, &out);
        cr_assert_eq(out.job_ref.job, UINT32_MAX);
        tm_refused(jobs[i], "{\"job\": \"abc\"}", "job");
        tm_refused(jobs[i], "{\"job\": 0}", "job");
    }
    pl_msg_init(&m, PL_MSG_HEALTH);
    snprintf(m.health.node, sizeof(m.health.node), "node2");
    tm_round_trip(&m, &out);
    cr_assert_str_eq(out.health.node, "node2");
    tm_refused(PL_MSG_HEALTH, "{}", "node");
    pl_msg_init(&m, PL_MSG_NODES);
    tm_round_trip(&m, &out);
    pl_msg_init(&m, PL_MSG_SHUTDOWN);
    tm_round_trip(&m, &out);

    pl_msg_init(&m, PL_MSG_REPLY);
    m.reply.body = json_pack("{s:i, s:[s]}", "a", 1, "b", "x");
    tm_round_trip(&m, &out);
    cr_assert(json_equal(out.reply.body, m.reply.body));
    pl_msg_clear(&out);
    cr_assert_null(out.reply.body);
    pl_msg_clear(&m);

    /* the typed replies */
    pl_msg_job_state_t js = {.job = 5, .state = "queued"}, js2;
    json_t *b;
    cr_assert_eq(pl_msg_job_state_encode(&js, &b), PL_OK);
    cr_assert_eq(pl_msg_job_state_decode(b, &js2), PL_OK);
    cr_assert_eq(js2.job, 5);
    cr_assert_str_eq(js2.state, "queued");
    json_decref(b);

    int32_t toks[] = {4, 2};
    pl_msg_result_t res = {.seq = 0, .n_tokens = 2, .tokens = toks, .finish = PL_FINISH_EOS};
    pl_msg_results_reply_t rr = {.job = 5,
                                 .n_results = 1,
                                 .results = &res,
                                 .throughput = json_pack("{s:f}", "tok_s", 12.5)},
                           rr2;
    cr_assert_eq(pl_msg_results_reply_encode(&rr, &b), PL_OK);
    cr_assert_str_eq(json_string_value(json_object_get(b, "state")), "done");
    cr_assert_eq(pl_msg_results_reply_decode(b, &rr2), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(rr2.job, 5);
    cr_assert_eq(rr2.n_results, 1);
    cr_assert_arr_eq(rr2.results[0].tokens, toks, sizeof(toks));
    cr_assert(json_equal(rr2.throughput, rr.throughput));
    pl_msg_results_reply_clear(&rr2);
    json_decref(rr.throughput);
    json_decref(b);
}

Test(msg, every_type_has_a_codec)
{
    for (int t = 1; t < PL_MSG_COUNT_; t++) {
        pl_msg_t m;
        json_t *body;
        pl_msg_init(&m, t);
        if (t == PL_MSG_REPLY)
            m.reply.body = json_object();
        cr_assert_eq(pl_msg_encode(&m, &body), PL_OK, "%s: %s", pl_msg_name(t), pl_error_msg());
        cr_assert(json_is_object(body));
        json_decref(body);
        pl_msg_clear(&m);
    }
    pl_msg_t m = {.type = PL_MSG_COUNT_};
    json_t *body;
    cr_assert_eq(pl_msg_encode(&m, &body), PL_ERR_INVALID);
}

/* Every body names the control protocol: this build's unless the message says another (a forged
 * older sender); a body without one decodes as protocol 0 (older than 3), never as this one; a
 * REPLY's body is named on a copy and read back without it. */
Test(msg, every_message_names_its_protocol)
{
    for (int t = 1; t < PL_MSG_COUNT_; t++) {
        pl_msg_t m;
        json_t *body;
        pl_msg_init(&m, t);
        if (t == PL_MSG_REPLY)
            m.reply.body = json_pack("{s:i}", "a", 1);
        cr_assert_eq(pl_msg_encode(&m, &body), PL_OK, "%s: %s", pl_msg_name(t), pl_error_msg());
        cr_assert_eq(json_integer_value(json_object_get(body, "proto")), PL_PROTO_VERSION, "%s",
                     pl_msg_name(t));
        if (t == PL_MSG_REPLY)
            cr_assert_null(json_object_get(m.reply.body, "proto"), "the caller's body changed");
        json_decref(body);
        pl_msg_clear(&m);
    }
    pl_msg_t m, out;
    pl_msg_init(&m, PL_MSG_STATUS);
    m.job_ref.job = 4;
    m.proto = 2;
    tm_round_trip(&m, &out);
    cr_assert_eq(out.proto, 2);
    cr_assert_eq(pl_msg_decode_wire("STATUS", 6, "{\"job\": 4}", 10, &out), PL_OK);
    cr_assert_eq(out.proto, 0, "a body without a protocol is an older sender's");
    cr_assert_eq(out.job_ref.job, 4);
    tm_refused(PL_MSG_STATUS, "{\"job\": 4, \"proto\": \"3\"}", "proto");
    tm_refused(PL_MSG_STATUS, "{\"job\": 4, \"proto\": 0}", "proto");
    tm_refused(PL_MSG_NODES, "{\"proto\": -1}", "proto");
    pl_msg_init(&m, PL_MSG_REPLY);
    m.reply.body = json_pack("{s:i}", "job", 7);
    tm_round_trip(&m, &out);
    cr_assert_eq(out.proto, PL_PROTO_VERSION);
    cr_assert(json_equal(out.reply.body, m.reply.body), "the answer gained its envelope");
    pl_msg_clear(&out);
    pl_msg_clear(&m);
    /* the sentence every side says */
    char why[256];
    cr_assert_str_eq(pl_msg_proto_mismatch("pipeld", 2, "this coordinator", why, sizeof(why)),
                     "pipeld speaks control protocol 2, this coordinator 3: upgrade pipeld");
    cr_assert_str_eq(pl_msg_proto_mismatch("pipectl", 9, "this coordinator", why, sizeof(why)),
                     "pipectl speaks control protocol 9, this coordinator 3: upgrade this "
                     "coordinator");
    cr_assert_str_eq(pl_msg_proto_mismatch("the coordinator at X", 0, "this pipectl", why,
                                           sizeof(why)),
                     "the coordinator at X speaks a control protocol older than 3 (its messages "
                     "name none), this pipectl 3: upgrade the coordinator at X");
}

/* ROUTER on inproc, DEALER "node1" connected. */
typedef struct {
    pl_tx_ctx_t *ctx;
    pl_tx_sock_t *router, *dealer;
} s_pair_t;

static s_pair_t s_pair(void)
{
    s_pair_t p;
    cr_assert_eq(pl_tx_ctx_new(&p.ctx), PL_OK);
    cr_assert_eq(pl_tx_sock_new(p.ctx, PL_TX_ROUTER, &p.router), PL_OK);
    cr_assert_eq(pl_tx_sock_new(p.ctx, PL_TX_DEALER, &p.dealer), PL_OK);
    cr_assert_eq(pl_tx_sock_identity(p.dealer, "node1"), PL_OK);
    cr_assert_eq(pl_tx_sock_bind(p.router, "inproc://msg-test"), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(pl_tx_sock_connect(p.dealer, "inproc://msg-test"), PL_OK);
    return p;
}

static void s_unpair(s_pair_t *p)
{
    pl_tx_sock_destroy(&p->dealer);
    pl_tx_sock_destroy(&p->router);
    pl_tx_sock_destroy(&p->router); /* twice is harmless */
    pl_tx_ctx_destroy(&p->ctx);
    cr_assert_null(p->ctx);
}

Test(msg, sockets_carry_typed_messages_both_ways)
{
    s_pair_t p = s_pair();
    pl_msg_t m, out;
    pl_tx_peer_t from;
    pl_msg_type_t type;
    bool ready[2];
    pl_tx_sock_t *socks[2] = {p.router, p.dealer};
    cr_assert_eq(pl_tx_recv(p.router, 0, &from, &type, &out), PL_ERR_BUSY);
    cr_assert_eq(pl_tx_poll(socks, 2, 0, ready), PL_OK);
    cr_assert(!ready[0] && !ready[1]);

    pl_msg_init(&m, PL_MSG_HEARTBEAT);
    s_heartbeat(&m.heartbeat);
    cr_assert_eq(pl_tx_send(p.dealer, NULL, &m), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(pl_tx_poll(socks, 2, 2000, ready), PL_OK);
    cr_assert(ready[0] && !ready[1]);
    cr_assert_eq(pl_tx_recv(p.router, 2000, &from, &type, &out), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(type, PL_MSG_HEARTBEAT);
    cr_assert_eq(from.len, 5);
    cr_assert_str_eq(from.id, "node1");
    s_heartbeat_eq(&m.heartbeat, &out.heartbeat);

    pl_msg_init(&m, PL_MSG_ERROR);
    m.error.code = PL_ERR_NOT_FOUND;
    snprintf(m.error.message, sizeof(m.error.message), "who?");
    cr_assert_eq(pl_tx_send(p.router, &from, &m), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(pl_tx_recv(p.dealer, 2000, NULL, NULL, &out), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(out.type, PL_MSG_ERROR);
    cr_assert_eq(out.error.code, PL_ERR_NOT_FOUND);

    /* to a peer that is not there: an error, not a silent drop */
    pl_tx_peer_t nobody = {.id = "ghost", .len = 5};
    cr_assert_eq(pl_tx_send(p.router, &nobody, &m), PL_ERR_TRANSPORT);
    s_unpair(&p);
}

Test(msg, a_bad_field_names_the_sender_and_the_type)
{
    /* a raw ZeroMQ peer (over ipc, another context) sends what no typed sender would */
    char ep[96];
    snprintf(ep, sizeof(ep), "ipc:///tmp/pl-msg-test-%d", (int)getpid());
    pl_tx_ctx_t *ctx;
    pl_tx_sock_t *router;
    cr_assert_eq(pl_tx_ctx_new(&ctx), PL_OK);
    cr_assert_eq(pl_tx_sock_new(ctx, PL_TX_ROUTER, &router), PL_OK);
    cr_assert_eq(pl_tx_sock_bind(router, ep), PL_OK, "%s", pl_error_msg());
    void *zctx = zmq_ctx_new(), *raw = zmq_socket(zctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(raw, ZMQ_LINGER, &zero, sizeof(zero));
    zmq_setsockopt(raw, ZMQ_ROUTING_ID, "raw1", 4);
    cr_assert_eq(zmq_connect(raw, ep), 0);
    zmq_send(raw, "STATUS", 6, ZMQ_SNDMORE);
    zmq_send(raw, "{\"job\": \"abc\"}", 14, 0);
    zmq_send(raw, "HEALTH", 6, ZMQ_SNDMORE);
    zmq_send(raw, "{\"node\": \"n1\"}", 14, 0);

    pl_msg_t out;
    pl_tx_peer_t from;
    pl_msg_type_t type;
    memset(&out, 0x5a, sizeof(out));
    cr_assert_eq(pl_tx_recv(router, 2000, &from, &type, &out), PL_ERR_PROTOCOL);
    cr_assert_eq(type, PL_MSG_STATUS);
    cr_assert_str_eq(from.id, "raw1");
    cr_assert(strstr(pl_error_msg(), "control message from 'raw1': STATUS: field 'job'"), "%s",
              pl_error_msg());
    cr_assert_eq(((unsigned char *)&out)[0], 0x5a, "output untouched");
    /* the socket carries on with the next message */
    cr_assert_eq(pl_tx_recv(router, 2000, &from, &type, &out), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(out.type, PL_MSG_HEALTH);
    cr_assert_str_eq(out.health.node, "n1");
    zmq_close(raw);
    zmq_ctx_term(zctx);
    pl_tx_sock_destroy(&router);
    pl_tx_ctx_destroy(&ctx);
    unlink(ep + 6);
}
