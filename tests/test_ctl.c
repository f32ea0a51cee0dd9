/* Tests of the control-plane framing over real ZeroMQ sockets: round trips of every message type
 * both ways, and every malformed message rejected with the socket still usable afterwards. */
#include "transport/ctl.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

typedef struct {
    void *ctx, *router, *dealer;
} pair_t;

/* ROUTER bound on inproc, DEALER with identity "node1" connected and known to the ROUTER. */
static pair_t s_pair(bool setup)
{
    pair_t p;
    p.ctx = zmq_ctx_new();
    cr_assert_not_null(p.ctx);
    p.router = zmq_socket(p.ctx, ZMQ_ROUTER);
    p.dealer = zmq_socket(p.ctx, ZMQ_DEALER);
    if (setup) {
        cr_assert_eq(pl_ctl_socket_setup(p.router), PL_OK, "%s", pl_error_msg());
        cr_assert_eq(pl_ctl_socket_setup(p.dealer), PL_OK, "%s", pl_error_msg());
    } else {
        int zero = 0;
        zmq_setsockopt(p.router, ZMQ_LINGER, &zero, sizeof(zero));
        zmq_setsockopt(p.dealer, ZMQ_LINGER, &zero, sizeof(zero));
    }
    cr_assert_eq(zmq_setsockopt(p.dealer, ZMQ_ROUTING_ID, "node1", 5), 0);
    cr_assert_eq(zmq_bind(p.router, "inproc://ctl-test"), 0);
    cr_assert_eq(zmq_connect(p.dealer, "inproc://ctl-test"), 0);
    return p;
}

static void s_close(pair_t *p)
{
    zmq_close(p->dealer);
    zmq_close(p->router);
    zmq_ctx_term(p->ctx);
}

/* Blocking receive with a safety timeout, so a broken test fails instead of hanging. */
static pl_status_t s_recv(void *sock, bool with_identity, pl_ctl_msg_t *msg)
{
    zmq_pollitem_t item = {.socket = sock, .events = ZMQ_POLLIN};
    if (zmq_poll(&item, 1, 2000) != 1)
        cr_assert_fail("nothing arrived within 2 s");
    return pl_ctl_recv(sock, with_identity, 0, msg);
}

/* Send raw parts from a socket (the last one without SNDMORE). */
static void s_raw(void *sock, int n, const char *const parts[], const size_t lens[])
{
    for (int i = 0; i < n; i++)
        cr_assert_geq(zmq_send(sock, parts[i], lens[i], i + 1 < n ? ZMQ_SNDMORE : 0), 0);
}

/* After a bad message, a good one must come through intact. */
static void s_expect_good_next(pair_t *p)
{
    pl_ctl_msg_t msg;
    json_t *body = json_pack("{s:i}", "after", 1);
    cr_assert_eq(pl_ctl_send(p->dealer, NULL, 0, PL_MSG_HEARTBEAT, body), PL_OK);
    cr_assert_eq(s_recv(p->router, true, &msg), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(msg.type, PL_MSG_HEARTBEAT);
    cr_assert(json_equal(msg.body, body));
    pl_ctl_msg_clear(&msg);
    json_decref(body);
}

/* Send raw parts from the DEALER; the ROUTER must reject them with PL_ERR_PROTOCOL, a message
 * naming the sender and containing `what`, and then carry on. */
static void s_expect_rejected(int n, const char *const parts[], const size_t lens[],
                              const char *what)
{
    pair_t p = s_pair(false);
    pl_ctl_msg_t msg;
    s_raw(p.dealer, n, parts, lens);
    cr_assert_eq(s_recv(p.router, true, &msg), PL_ERR_PROTOCOL, "'%s' should be rejected", what);
    cr_assert_null(msg.body);
    cr_assert_eq(msg.identity_len, 5);
    cr_assert_str_eq(msg.identity, "node1");
    cr_assert(strstr(pl_error_msg(), "message from 'node1': ") != NULL, "%s", pl_error_msg());
    cr_assert(strstr(pl_error_msg(), what) != NULL, "'%s' should mention '%s'", pl_error_msg(),
              what);
    s_expect_good_next(&p);
    s_close(&p);
}

Test(ctl, names_round_trip)
{
    static const char *const expected[] = {
        NULL,      "HELLO",  "WELCOME", "HEARTBEAT", "ASSIGN", "READY",  "START",
        "DONE",   "FAIL",    "CANCEL",    "SUBMIT", "STATUS", "RESULTS",
        "KILL",    "NODES",  "HEALTH",  "REPLY",     "ERROR",  "SHUTDOWN", "PLAN",
        "BYE",     "JOBS",   "DRAIN",  "TRACE",  "TRACED", "SEQ_ADD", "SEQ_CANCEL",
        "SEQ_OUT", "PROGRESS", "TRAIN_STEP", "DEPLOYMENTS"};
    cr_assert_eq(sizeof(expected) / sizeof(expected[0]), PL_MSG_COUNT_);
    for (int t = 1; t < PL_MSG_COUNT_; t++) {
        pl_msg_type_t got = 0;
        cr_assert_str_eq(pl_msg_name(t), expected[t]);
        cr_assert_eq(pl_msg_parse_name(expected[t], strlen(expected[t]), &got), PL_OK);
        cr_assert_eq(got, t);
    }
    cr_assert_str_eq(pl_msg_name(0), "UNKNOWN");
    cr_assert_str_eq(pl_msg_name(PL_MSG_COUNT_), "UNKNOWN");
    cr_assert_str_eq(pl_msg_name((pl_msg_type_t)-3), "UNKNOWN");
}

Test(ctl, parse_name_rejects_near_misses)
{
    pl_msg_type_t t = PL_MSG_DONE;
    cr_assert_eq(pl_msg_parse_name("HELL", 4, &t), PL_ERR_PROTOCOL);
    cr_assert_eq(pl_msg_parse_name("HELLOX", 6, &t), PL_ERR_PROTOCOL);
    cr_assert_eq(pl_msg_parse_name("hello", 5, &t), PL_ERR_PROTOCOL);
    cr_assert_eq(pl_msg_parse_name("", 0, &t), PL_ERR_PROTOCOL);
    cr_assert_eq(pl_msg_parse_name("HELLO\0", 6, &t), PL_ERR_PROTOCOL);
    cr_assert(strstr(pl_error_msg(), "unknown type 'HELLO\\x00'") != NULL, "%s", pl_error_msg());
    cr_assert_eq(t, PL_MSG_DONE, "output untouched on error");
}

Test(ctl, escape)
{
    char out[64];
    cr_assert_eq(pl_ctl_escape("ab\x01'\\\xff", 6, out, sizeof(out)), strlen(out));
    cr_assert_str_eq(out, "ab\\x01\\x27\\x5c\\xff");
    /* Stops rather than overflows, and never splits an escape. */
    cr_assert_eq(pl_ctl_escape("abc\x01", 4, out, 6), 3);
    cr_assert_str_eq(out, "abc");
    cr_assert_eq(pl_ctl_escape("abc", 3, out, 1), 0);
    cr_assert_str_eq(out, "");
}

Test(ctl, every_type_round_trips_both_ways)
{
    pair_t p = s_pair(true);
    for (int t = 1; t < PL_MSG_COUNT_; t++) {
        pl_ctl_msg_t msg;
        json_t *body = json_pack("{s:i, s:s, s:[i,f], s:{s:b}}", "n", t, "name", pl_msg_name(t),
                                 "list", 1, 2.5, "obj", "ok", 1);
        /* daemon -> coordinator */
        cr_assert_eq(pl_ctl_send(p.dealer, NULL, 0, t, body), PL_OK, "%s", pl_error_msg());
        cr_assert_eq(s_recv(p.router, true, &msg), PL_OK, "%s", pl_error_msg());
        cr_assert_eq(msg.type, t);
        cr_assert_eq(msg.identity_len, 5);
        cr_assert_arr_eq(msg.identity, "node1", 6);
        cr_assert(json_equal(msg.body, body), "body of %s differs", pl_msg_name(t));
        /* coordinator -> daemon, addressed by the identity just received */
        cr_assert_eq(pl_ctl_send(p.router, msg.identity, msg.identity_len, t, body), PL_OK, "%s",
                     pl_error_msg());
        pl_ctl_msg_clear(&msg);
        cr_assert_null(msg.body);
        cr_assert_eq(s_recv(p.dealer, false, &msg), PL_OK, "%s", pl_error_msg());
        cr_assert_eq(msg.type, t);
        cr_assert_eq(msg.identity_len, 0);
        cr_assert(json_equal(msg.body, body));
        pl_ctl_msg_clear(&msg);
        pl_ctl_msg_clear(&msg); /* twice is harmless */
        json_decref(body);
    }
    pl_ctl_msg_clear(NULL);
    s_close(&p);
}

Test(ctl, wire_format_is_type_then_compact_json)
{
    pair_t p = s_pair(false);
    json_t *body = json_pack("{s:i}", "a", 1);
    char buf[64];
    int more = 0;
    size_t more_len = sizeof(more);
    cr_assert_eq(pl_ctl_send(p.dealer, NULL, 0, PL_MSG_READY, body), PL_OK);
    cr_assert_eq(zmq_recv(p.router, buf, sizeof(buf), 0), 5); /* identity */
    cr_assert_eq(zmq_recv(p.router, buf, sizeof(buf), 0), 5);
    cr_assert_arr_eq(buf, "READY", 5);
    cr_assert_eq(zmq_recv(p.router, buf, sizeof(buf), 0), 7);
    cr_assert_arr_eq(buf, "{\"a\":1}", 7);
    zmq_getsockopt(p.router, ZMQ_RCVMORE, &more, &more_len);
    cr_assert_eq(more, 0);
    /* A NULL body is "{}". */
    cr_assert_eq(pl_ctl_send(p.dealer, NULL, 0, PL_MSG_HEARTBEAT, NULL), PL_OK);
    zmq_recv(p.router, buf, sizeof(buf), 0);
    zmq_recv(p.router, buf, sizeof(buf), 0);
    cr_assert_eq(zmq_recv(p.router, buf, sizeof(buf), 0), 2);
    cr_assert_arr_eq(buf, "{}", 2);
    json_decref(body);
    s_close(&p);
}

Test(ctl, nothing_waiting_is_busy)
{
    pair_t p = s_pair(true);
    pl_ctl_msg_t msg;
    cr_assert_eq(pl_ctl_recv(p.router, true, ZMQ_DONTWAIT, &msg), PL_ERR_BUSY);
    cr_assert_eq(pl_ctl_recv(p.dealer, false, ZMQ_DONTWAIT, &msg), PL_ERR_BUSY);
    s_close(&p);
}

Test(ctl, rejects_wrong_part_counts)
{
    const char *one[] = {"HELLO"};
    const size_t one_len[] = {5};
    s_expect_rejected(1, one, one_len, "2 parts (expected 3)");
    const char *three[] = {"HELLO", "{}", "{}"};
    const size_t three_len[] = {5, 2, 2};
    s_expect_rejected(3, three, three_len, "4 parts (expected 3)");
    const char *many[] = {"A", "B", "C", "D", "E", "F"};
    const size_t many_len[] = {1, 1, 1, 1, 1, 1};
    s_expect_rejected(6, many, many_len, "7 parts (expected 3)");
}

Test(ctl, rejects_unknown_type)
{
    const char *parts[] = {"FOO", "{}"};
    const size_t lens[] = {3, 2};
    s_expect_rejected(2, parts, lens, "unknown type 'FOO'");
    const char *bin[] = {"HE\nLO", "{}"};
    const size_t bin_lens[] = {5, 2};
    s_expect_rejected(2, bin, bin_lens, "unknown type 'HE\\x0aLO'");
    static char longname[200];
    memset(longname, 'A', sizeof(longname));
    const char *lng[] = {longname, "{}"};
    const size_t lng_lens[] = {sizeof(longname), 2};
    s_expect_rejected(2, lng, lng_lens, "type name of 200 bytes");
}

Test(ctl, rejects_bad_bodies)
{
    const char *nonjson[] = {"HELLO", "{\"a\":"};
    const size_t nonjson_len[] = {5, 5};
    s_expect_rejected(2, nonjson, nonjson_len, "HELLO: body is not JSON");
    const char *array[] = {"HELLO", "[1,2]"};
    const size_t array_len[] = {5, 5};
    s_expect_rejected(2, array, array_len, "not a JSON object");
    const char *scalar[] = {"HELLO", "3"};
    const size_t scalar_len[] = {5, 1};
    s_expect_rejected(2, scalar, scalar_len, "not JSON");
    const char *empty[] = {"HELLO", ""};
    const size_t empty_len[] = {5, 0};
    s_expect_rejected(2, empty, empty_len, "not JSON");
    const char *dup[] = {"HELLO", "{\"a\":1,\"a\":2}"};
    const size_t dup_len[] = {5, 13};
    s_expect_rejected(2, dup, dup_len, "duplicate");
    const char *trailing[] = {"HELLO", "{} {}"};
    const size_t trailing_len[] = {5, 5};
    s_expect_rejected(2, trailing, trailing_len, "not JSON");
    const char *nul[] = {"HELLO", "{\"a\":\"\\u0000\"}"};
    const size_t nul_len[] = {5, 14};
    s_expect_rejected(2, nul, nul_len, "not JSON");
}

Test(ctl, rejects_oversized_body)
{
    /* Sockets without pl_ctl_socket_setup, so ZeroMQ itself lets the message through. */
    size_t n = PL_CTL_MAX_BODY + 1;
    char *big = malloc(n);
    memset(big, ' ', n);
    big[0] = '{';
    big[n - 1] = '}';
    const char *parts[] = {"DONE", big};
    const size_t lens[] = {4, n};
    s_expect_rejected(2, parts, lens, "exceeds");
    free(big);
}

Test(ctl, body_at_the_limit_is_accepted)
{
    size_t n = PL_CTL_MAX_BODY;
    char *big = malloc(n);
    pl_ctl_msg_t msg = {0};
    memset(big, ' ', n);
    memcpy(big, "{\"k\":1", 6);
    big[n - 1] = '}';
    cr_assert_eq(pl_ctl_decode("DONE", 4, big, n, &msg), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(msg.type, PL_MSG_DONE);
    cr_assert_eq(json_integer_value(json_object_get(msg.body, "k")), 1);
    pl_ctl_msg_clear(&msg);
    free(big);
}

Test(ctl, decode_sets_output_only_on_success)
{
    pl_ctl_msg_t msg = {.type = PL_MSG_DONE, .body = NULL};
    cr_assert_eq(pl_ctl_decode("DONE", 4, "[]", 2, &msg), PL_ERR_PROTOCOL);
    cr_assert_eq(msg.type, PL_MSG_DONE);
    cr_assert_null(msg.body);
    cr_assert_eq(pl_ctl_decode("FAIL", 4, "{\"e\":\"x\"}", 9, &msg), PL_OK);
    cr_assert_eq(msg.type, PL_MSG_FAIL);
    cr_assert_str_eq(json_string_value(json_object_get(msg.body, "e")), "x");
    pl_ctl_msg_clear(&msg);
}

Test(ctl, dealer_side_rejects_and_recovers)
{
    pair_t p = s_pair(false);
    pl_ctl_msg_t msg;
    /* ROUTER sends only [identity][type]: the DEALER sees one part. */
    cr_assert_geq(zmq_send(p.router, "node1", 5, ZMQ_SNDMORE), 0);
    cr_assert_geq(zmq_send(p.router, "START", 5, 0), 0);
    cr_assert_eq(s_recv(p.dealer, false, &msg), PL_ERR_PROTOCOL);
    cr_assert(strstr(pl_error_msg(), "control message: 1 parts (expected 2)") != NULL, "%s",
              pl_error_msg());
    cr_assert_eq(msg.identity_len, 0);
    /* Unknown type, then a good message. */
    cr_assert_geq(zmq_send(p.router, "node1", 5, ZMQ_SNDMORE), 0);
    cr_assert_geq(zmq_send(p.router, "NOPE", 4, ZMQ_SNDMORE), 0);
    cr_assert_geq(zmq_send(p.router, "{}", 2, 0), 0);
    cr_assert_eq(s_recv(p.dealer, false, &msg), PL_ERR_PROTOCOL);
    cr_assert(strstr(pl_error_msg(), "unknown type 'NOPE'") != NULL, "%s", pl_error_msg());
    json_t *body = json_pack("{s:s}", "error", "no such job");
    cr_assert_eq(pl_ctl_send(p.router, "node1", 5, PL_MSG_ERROR, body), PL_OK);
    cr_assert_eq(s_recv(p.dealer, false, &msg), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(msg.type, PL_MSG_ERROR);
    cr_assert(json_equal(msg.body, body));
    pl_ctl_msg_clear(&msg);
    json_decref(body);
    s_close(&p);
}

Test(ctl, binary_identity_is_escaped)
{
    pair_t p = s_pair(false);
    void *d2 = zmq_socket(p.ctx, ZMQ_DEALER);
    pl_ctl_msg_t msg;
    int zero = 0;
    zmq_setsockopt(d2, ZMQ_LINGER, &zero, sizeof(zero));
    cr_assert_eq(zmq_setsockopt(d2, ZMQ_ROUTING_ID, "n\x01\xff", 3), 0);
    cr_assert_eq(zmq_connect(d2, "inproc://ctl-test"), 0);
    cr_assert_geq(zmq_send(d2, "BOGUS", 5, ZMQ_SNDMORE), 0);
    cr_assert_geq(zmq_send(d2, "{}", 2, 0), 0);
    cr_assert_eq(s_recv(p.router, true, &msg), PL_ERR_PROTOCOL);
    cr_assert_eq(msg.identity_len, 3);
    cr_assert_arr_eq(msg.identity, "n\x01\xff", 3);
    cr_assert(strstr(pl_error_msg(), "from 'n\\x01\\xff': unknown type 'BOGUS'") != NULL, "%s",
              pl_error_msg());
    /* The reply reaches the binary identity. */
    cr_assert_eq(pl_ctl_send(p.router, msg.identity, msg.identity_len, PL_MSG_ERROR, NULL), PL_OK);
    cr_assert_eq(s_recv(d2, false, &msg), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(msg.type, PL_MSG_ERROR);
    pl_ctl_msg_clear(&msg);
    zmq_close(d2);
    s_close(&p);
}

Test(ctl, send_rejects_bad_arguments)
{
    pair_t p = s_pair(true);
    json_t *arr = json_array();
    char long_id[PL_CTL_MAX_IDENTITY + 1];
    memset(long_id, 'x', sizeof(long_id));
    cr_assert_eq(pl_ctl_send(p.dealer, NULL, 0, PL_MSG_HELLO, arr), PL_ERR_INVALID);
    cr_assert_eq(pl_ctl_send(p.dealer, NULL, 0, 0, NULL), PL_ERR_INVALID);
    cr_assert_eq(pl_ctl_send(p.dealer, NULL, 0, PL_MSG_COUNT_, NULL), PL_ERR_INVALID);
    cr_assert_eq(pl_ctl_send(p.router, long_id, sizeof(long_id), PL_MSG_HELLO, NULL),
                 PL_ERR_INVALID);
    cr_assert_eq(pl_ctl_send(p.router, "", 0, PL_MSG_HELLO, NULL), PL_ERR_INVALID);
    json_decref(arr);
    /* Nothing was sent by any of those. */
    pl_ctl_msg_t msg;
    cr_assert_eq(pl_ctl_recv(p.router, true, ZMQ_DONTWAIT, &msg), PL_ERR_BUSY);
    cr_assert_eq(pl_ctl_recv(p.dealer, false, ZMQ_DONTWAIT, &msg), PL_ERR_BUSY);
    s_close(&p);
}

Test(ctl, send_to_unknown_identity_is_an_error)
{
    pair_t p = s_pair(true);
    cr_assert_eq(pl_ctl_send(p.router, "ghost", 5, PL_MSG_WELCOME, NULL), PL_ERR_TRANSPORT);
    cr_assert(strstr(pl_error_msg(), "not connected") != NULL, "%s", pl_error_msg());
    s_close(&p);
}

Test(ctl, full_queue_is_busy)
{
    void *ctx = zmq_ctx_new();
    void *dealer = zmq_socket(ctx, ZMQ_DEALER);
    cr_assert_eq(pl_ctl_socket_setup(dealer), PL_OK);
    /* A DEALER with no peer has nowhere to queue the message. */
    cr_assert_eq(pl_ctl_send(dealer, NULL, 0, PL_MSG_HELLO, NULL), PL_ERR_BUSY);
    zmq_close(dealer);
    zmq_ctx_term(ctx);
}

Test(ctl, socket_setup_sets_limits)
{
    void *ctx = zmq_ctx_new();
    void *router = zmq_socket(ctx, ZMQ_ROUTER);
    int64_t max = 0;
    int linger = -1, hwm = 0;
    size_t len = sizeof(max);
    cr_assert_eq(pl_ctl_socket_setup(router), PL_OK);
    zmq_getsockopt(router, ZMQ_MAXMSGSIZE, &max, &len);
    cr_assert_eq(max, (int64_t)PL_CTL_MAX_BODY + 4096);
    len = sizeof(linger);
    zmq_getsockopt(router, ZMQ_LINGER, &linger, &len);
    cr_assert_eq(linger, 0);
    len = sizeof(hwm);
    zmq_getsockopt(router, ZMQ_RCVHWM, &hwm, &len);
    cr_assert_gt(hwm, 0);
    zmq_close(router);
    zmq_ctx_term(ctx);
}

Test(ctl, tcp_round_trip_large_body)
{
    void *ctx = zmq_ctx_new();
    void *router = zmq_socket(ctx, ZMQ_ROUTER), *dealer = zmq_socket(ctx, ZMQ_DEALER);
    char endpoint[256];
    size_t len = sizeof(endpoint);
    pl_ctl_msg_t msg;
    cr_assert_eq(pl_ctl_socket_setup(router), PL_OK);
    cr_assert_eq(pl_ctl_socket_setup(dealer), PL_OK);
    cr_assert_eq(zmq_bind(router, "tcp://127.0.0.1:0"), 0);
    cr_assert_eq(zmq_getsockopt(router, ZMQ_LAST_ENDPOINT, endpoint, &len), 0);
    cr_assert_eq(zmq_connect(dealer, endpoint), 0);
    /* A 1 MiB string field survives the trip. */
    size_t n = 1u << 20;
    char *s = malloc(n + 1);
    for (size_t i = 0; i < n; i++)
        s[i] = (char)('a' + i % 26);
    s[n] = '\0';
    json_t *body = json_pack("{s:s}", "blob", s);
    /* The DEALER may not be connected yet: retry while busy. */
    pl_status_t st;
    for (int i = 0; (st = pl_ctl_send(dealer, NULL, 0, PL_MSG_DONE, body)) == PL_ERR_BUSY &&
                    i < 200;
         i++)
        zmq_poll(NULL, 0, 10);
    cr_assert_eq(st, PL_OK, "%s", pl_error_msg());
    cr_assert_eq(s_recv(router, true, &msg), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(msg.type, PL_MSG_DONE);
    cr_assert_str_eq(json_string_value(json_object_get(msg.body, "blob")), s);
    pl_ctl_msg_clear(&msg);
    json_decref(body);
    free(s);
    zmq_close(dealer);
    zmq_close(router);
    zmq_ctx_term(ctx);
}
