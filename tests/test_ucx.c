/* Tests of the UCX data plane with real workers in this process: tagged messages both ways,
 * rendezvous-sized ones, a ring, tag masks, limits, timeouts, cancellation, order. Its endings
 * (destroy, disconnect, peers that go away) are test_ucx_close.c's. */
#include "transport/act.h"
#include "ucx_util.h"

#include <criterion/criterion.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

Test(ucx, create_address_destroy)
{
    pl_ucx_t *a = tu_create(), *b = tu_create();
    char *aa = NULL, *ba = NULL;
    void *raw = NULL;
    size_t raw_len = 0;
    cr_assert_eq(pl_ucx_address(a, &aa), PL_OK);
    cr_assert_eq(pl_ucx_address(b, &ba), PL_OK);
    cr_assert_gt(strlen(aa), 8);
    cr_assert_str_neq(aa, ba);
    cr_assert_eq(pl_base64_decode(aa, &raw, &raw_len), PL_OK, "address is base64");
    cr_assert_gt(raw_len, 0);
    cr_assert_eq(pl_ucx_pending(a), 0);
    free(raw);
    free(aa);
    free(ba);
    pl_ucx_destroy(&a);
    cr_assert_null(a);
    pl_ucx_destroy(&a); /* safe twice */
    pl_ucx_destroy(NULL);
    pl_ucx_destroy(&b);
}

Test(ucx, connect_rejects_bad_addresses)
{
    pl_ucx_t *a = tu_create();
    pl_ucx_ep_t *ep = (pl_ucx_ep_t *)1;
    cr_assert_eq(pl_ucx_connect(a, "not base64!", &ep), PL_ERR_INVALID);
    cr_assert(strstr(pl_error_msg(), "worker address") != NULL, "%s", pl_error_msg());
    cr_assert_eq(pl_ucx_connect(a, "", &ep), PL_ERR_INVALID);
    char *huge = malloc(200000);
    memset(huge, 'A', 199999);
    huge[199999] = '\0';
    cr_assert_eq(pl_ucx_connect(a, huge, &ep), PL_ERR_INVALID);
    free(huge);
    cr_assert_eq(ep, (pl_ucx_ep_t *)1, "output untouched on error");
    pl_ucx_destroy(&a);
}

Test(ucx, small_messages_both_ways)
{
    pl_ucx_t *a = tu_create(), *b = tu_create();
    pl_ucx_ep_t *ab = tu_connect(a, b), *ba = tu_connect(b, a);
    void *buf;
    size_t len;
    uint64_t tag;
    for (unsigned i = 0; i < 20; i++) {
        size_t n = 1 + i * 97;
        cr_assert_eq(tu_send(a, ab, 100 + i, n, i), PL_OK, "%s", pl_error_msg());
        cr_assert_eq(tu_recv_with(b, a, 100 + i, ~0ULL, 1 << 20, &buf, &len, &tag, 5000), PL_OK,
                     "%s", pl_error_msg());
        cr_assert_eq(len, n);
        cr_assert_eq(tag, 100 + i);
        cr_assert(tu_pattern_ok(buf, len, i));
        free(buf);
        cr_assert_eq(tu_send(b, ba, 200 + i, n, i + 1), PL_OK);
        cr_assert_eq(tu_recv_with(a, b, 0, 0, 1 << 20, &buf, &len, &tag, 5000), PL_OK, "%s",
                     pl_error_msg());
        cr_assert_eq(tag, 200 + i, "mask 0 takes any tag");
        cr_assert(tu_pattern_ok(buf, len, i + 1));
        free(buf);
    }
    /* A zero-length message still yields a buffer. */
    cr_assert_eq(pl_ucx_send(a, ab, 7, malloc(1), 0), PL_OK);
    cr_assert_eq(tu_recv_with(b, a, 7, ~0ULL, 16, &buf, &len, NULL, 5000), PL_OK);
    cr_assert_eq(len, 0);
    cr_assert_not_null(buf);
    free(buf);
    cr_assert_eq(pl_ucx_flush(a, 1000), PL_OK);
    cr_assert_eq(pl_ucx_ep_status(ab), PL_OK);
    pl_ucx_destroy(&a);
    pl_ucx_destroy(&b);
}

Test(ucx, event_fd_wakes_an_outside_poll)
{
    pl_ucx_t *a, *b;
    pl_ucx_ep_t *ab;
    tu_pair(&a, &b, &ab, 10);
    void *buf;
    size_t len;
    /* Idle: arm succeeds and the fd stays quiet. */
    pl_status_t st;
    for (int i = 0; i < 1000 && (st = pl_ucx_arm(b)) == PL_ERR_BUSY; i++)
        pl_ucx_progress(b);
    cr_assert_eq(st, PL_OK, "%s", pl_error_msg());
    struct pollfd pfd = {.fd = pl_ucx_efd(b), .events = POLLIN};
    cr_assert_eq(poll(&pfd, 1, 50), 0, "no event without a message");
    /* A message wakes the poll. */
    cr_assert_eq(tu_send(a, ab, 2, 10, 2), PL_OK);
    for (int i = 0; i < 100; i++)
        pl_ucx_progress(a);
    cr_assert_eq(poll(&pfd, 1, 2000), 1, "the message should wake the event fd");
    cr_assert_eq(pl_ucx_recv(b, 2, ~0ULL, 10, &buf, &len, NULL, 1000, NULL), PL_OK);
    cr_assert(tu_pattern_ok(buf, len, 2));
    free(buf);
    pl_ucx_destroy(&a);
    pl_ucx_destroy(&b);
}

Test(ucx, one_host_uses_shared_memory)
{
    if (getenv("UCX_TLS"))
        cr_skip_test("UCX_TLS is set; transport choice is the user's");
    pl_ucx_t *a, *b;
    pl_ucx_ep_t *ab;
    tu_pair(&a, &b, &ab, 64);
    const char *tl = pl_ucx_ep_transport(ab);
    cr_assert(strstr(tl, "sysv") || strstr(tl, "posix") || strstr(tl, "cma"),
              "transport '%s' should be shared memory", tl);
    cr_assert_null(strstr(tl, "tcp"), "transport '%s'", tl);
    pl_ucx_destroy(&a);
    pl_ucx_destroy(&b);
}

typedef struct {
    pl_ucx_t *ucx;
    pl_ucx_ep_t *to;
    uint64_t send_tag, recv_tag;
    size_t len;
    unsigned seed_out, seed_in;
    bool recv_first;
    pl_status_t st;
    const char *what;
    char msg[256];
} peer_t;

/* One owner thread per worker: optionally receive first, send, receive, flush. */
static void *s_peer_main(void *arg)
{
    peer_t *p = arg;
    void *buf = NULL;
    size_t len = 0;
    uint64_t tag = 0;
    p->st = PL_OK;
    if (!p->recv_first && (p->st = tu_send(p->ucx, p->to, p->send_tag, p->len, p->seed_out)))
        goto out;
    p->st = pl_ucx_recv(p->ucx, p->recv_tag, ~0ULL, p->len, &buf, &len, &tag, 20000, NULL);
    if (p->st != PL_OK)
        goto out;
    if (len != p->len || tag != p->recv_tag || !tu_pattern_ok(buf, len, p->seed_in)) {
        p->st = PL_ERR_PROTOCOL;
        snprintf(p->msg, sizeof(p->msg), "received %zu bytes tag %llu, content %s", len,
                 (unsigned long long)tag, tu_pattern_ok(buf, len, p->seed_in) ? "ok" : "wrong");
        free(buf);
        return NULL;
    }
    free(buf);
    if (p->recv_first && (p->st = tu_send(p->ucx, p->to, p->send_tag, p->len, p->seed_out)))
        goto out;
    p->st = pl_ucx_flush(p->ucx, 20000);
out:
    if (p->st != PL_OK && !p->msg[0])
        snprintf(p->msg, sizeof(p->msg), "%s", pl_error_msg());
    return NULL;
}

Test(ucx, large_messages_both_ways, .timeout = 60)
{
    pl_ucx_t *a = tu_create(), *b = tu_create();
    peer_t pa = {.ucx = a,
                 .to = tu_connect(a, b),
                 .send_tag = 1,
                 .recv_tag = 2,
                 .len = TU_BIG,
                 .seed_out = 11,
                 .seed_in = 22};
    peer_t pb = {.ucx = b,
                 .to = tu_connect(b, a),
                 .send_tag = 2,
                 .recv_tag = 1,
                 .len = TU_BIG,
                 .seed_out = 22,
                 .seed_in = 11,
                 .recv_first = true};
    pthread_t tb;
    pthread_create(&tb, NULL, s_peer_main, &pb);
    s_peer_main(&pa);
    pthread_join(tb, NULL);
    cr_assert_eq(pa.st, PL_OK, "a: %s", pa.msg);
    cr_assert_eq(pb.st, PL_OK, "b: %s", pb.msg);
    cr_assert_eq(pl_ucx_pending(a), 0);
    cr_assert_eq(pl_ucx_pending(b), 0);
    pl_ucx_destroy(&a);
    pl_ucx_destroy(&b);
}

Test(ucx, ring_of_three_sends_at_once, .timeout = 60)
{
    enum { N = 3 };
    pl_ucx_t *u[N];
    peer_t p[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++)
        u[i] = tu_create();
    for (int i = 0; i < N; i++) {
        /* Everyone sends a rendezvous-sized message first, then receives: no deadlock. */
        p[i] = (peer_t){.ucx = u[i],
                        .to = tu_connect(u[i], u[(i + 1) % N]),
                        .send_tag = pl_act_tag(1, PL_ACT_HIDDEN, (uint32_t)i, 0),
                        .recv_tag = pl_act_tag(1, PL_ACT_HIDDEN, (uint32_t)((i + N - 1) % N), 0),
                        .len = 2u << 20,
                        .seed_out = (unsigned)i,
                        .seed_in = (unsigned)((i + N - 1) % N)};
    }
    for (int i = 0; i < N; i++)
        pthread_create(&th[i], NULL, s_peer_main, &p[i]);
    for (int i = 0; i < N; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(p[i].st, PL_OK, "stage %d: %s", i, p[i].msg);
        pl_ucx_destroy(&u[i]);
    }
}

Test(ucx, tag_mask_selects_the_job)
{
    pl_ucx_t *a = tu_create(), *b = tu_create();
    pl_ucx_ep_t *ab = tu_connect(a, b);
    void *buf;
    size_t len;
    uint64_t tag;
    uint64_t t2 = pl_act_tag(2, PL_ACT_HIDDEN, 0, 5), t1 = pl_act_tag(1, PL_ACT_TOKENS, 3, 9);
    cr_assert_eq(tu_send(a, ab, t2, 100, 2), PL_OK);
    cr_assert_eq(tu_send(a, ab, t1, 100, 1), PL_OK);
    /* Job 1's message is taken although job 2's arrived first. */
    cr_assert_eq(
        tu_recv_with(b, a, pl_act_tag_job(1), PL_ACT_TAG_JOB_MASK, 1000, &buf, &len, &tag, 5000),
        PL_OK, "%s", pl_error_msg());
    cr_assert_eq(tag, t1);
    cr_assert(tu_pattern_ok(buf, len, 1));
    free(buf);
    /* Nothing for job 3, nor for job 1 again. */
    cr_assert_eq(pl_ucx_recv(b, pl_act_tag_job(3), PL_ACT_TAG_JOB_MASK, 1000, &buf, &len, &tag,
                             100, NULL),
                 PL_ERR_TIMEOUT);
    cr_assert_eq(pl_ucx_recv(b, pl_act_tag_job(1), PL_ACT_TAG_JOB_MASK, 1000, &buf, &len, &tag,
                             100, NULL),
                 PL_ERR_TIMEOUT);
    /* Bits outside the mask in `want` are ignored. */
    cr_assert_eq(pl_ucx_recv(b, pl_act_tag_job(2) | 0xabc, PL_ACT_TAG_JOB_MASK, 1000, &buf, &len,
                             &tag, 1000, NULL),
                 PL_OK, "%s", pl_error_msg());
    cr_assert_eq(tag, t2);
    cr_assert(tu_pattern_ok(buf, len, 2));
    free(buf);
    pl_ucx_destroy(&a);
    pl_ucx_destroy(&b);
}

Test(ucx, oversized_messages_are_dropped_and_reported)
{
    pl_ucx_t *a = tu_create(), *b = tu_create();
    pl_ucx_ep_t *ab = tu_connect(a, b);
    void *buf = (void *)1;
    size_t len = 0;
    /* One over the eager/rendezvous switch, one eager, then one that fits. */
    cr_assert_eq(tu_send(a, ab, 5, 200000, 1), PL_OK);
    cr_assert_eq(tu_send(a, ab, 5, 2000, 2), PL_OK);
    cr_assert_eq(tu_send(a, ab, 5, 1000, 3), PL_OK);
    cr_assert_eq(tu_recv_with(b, a, 5, ~0ULL, 1000, &buf, &len, NULL, 5000), PL_ERR_PROTOCOL);
    cr_assert(strstr(pl_error_msg(), "200000 bytes") != NULL, "%s", pl_error_msg());
    cr_assert_eq(buf, (void *)1, "output untouched on error");
    cr_assert_eq(tu_recv_with(b, a, 5, ~0ULL, 1000, &buf, &len, NULL, 5000), PL_ERR_PROTOCOL);
    cr_assert(strstr(pl_error_msg(), "2000 bytes") != NULL, "%s", pl_error_msg());
    cr_assert_eq(tu_recv_with(b, a, 5, ~0ULL, 1000, &buf, &len, NULL, 5000), PL_OK, "%s",
                 pl_error_msg());
    cr_assert_eq(len, 1000);
    cr_assert(tu_pattern_ok(buf, len, 3));
    free(buf);
    /* The sender is not harmed by the receiver's refusal. */
    for (int i = 0; i < 1000 && pl_ucx_pending(a) > 0; i++) {
        pl_ucx_progress(a);
        pl_ucx_progress(b);
    }
    cr_assert_eq(pl_ucx_flush(a, 2000), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(tu_send(a, ab, 6, 10, 4), PL_OK);
    cr_assert_eq(tu_recv_with(b, a, 6, ~0ULL, 1000, &buf, &len, NULL, 5000), PL_OK);
    free(buf);
    pl_ucx_destroy(&a);
    pl_ucx_destroy(&b);
}

Test(ucx, recv_timeout)
{
    pl_ucx_t *a = tu_create();
    void *buf = (void *)1;
    size_t len = 3;
    double t0 = pl_now();
    cr_assert_eq(pl_ucx_recv(a, 1, ~0ULL, 100, &buf, &len, NULL, 300, NULL), PL_ERR_TIMEOUT);
    double dt = pl_now() - t0;
    cr_assert_geq(dt, 0.29, "waited %.3f s", dt);
    cr_assert_lt(dt, 1.5, "waited %.3f s", dt);
    cr_assert_eq(buf, (void *)1);
    cr_assert_eq(len, 3);
    t0 = pl_now();
    cr_assert_eq(pl_ucx_recv(a, 1, ~0ULL, 100, &buf, &len, NULL, 0, NULL), PL_ERR_TIMEOUT);
    cr_assert_lt(pl_now() - t0, 0.2, "timeout 0 polls once");
    pl_ucx_destroy(&a);
}

typedef struct {
    volatile int *flag;
    int delay_ms;
} canceler_t;

static void *s_cancel_later(void *arg)
{
    canceler_t *c = arg;
    usleep((useconds_t)c->delay_ms * 1000);
    __atomic_store_n(c->flag, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

Test(ucx, recv_cancel)
{
    pl_ucx_t *a = tu_create();
    void *buf;
    size_t len;
    volatile int flag = 1;
    cr_assert_eq(pl_ucx_recv(a, 1, ~0ULL, 100, &buf, &len, NULL, -1, &flag), PL_ERR_CANCELED);
    /* Set from another thread while waiting forever. */
    flag = 0;
    canceler_t c = {.flag = &flag, .delay_ms = 150};
    pthread_t th;
    double t0 = pl_now();
    pthread_create(&th, NULL, s_cancel_later, &c);
    cr_assert_eq(pl_ucx_recv(a, 1, ~0ULL, 100, &buf, &len, NULL, -1, &flag), PL_ERR_CANCELED);
    double dt = pl_now() - t0;
    pthread_join(th, NULL);
    cr_assert_geq(dt, 0.14, "returned after %.3f s", dt);
    cr_assert_lt(dt, 1.0, "returned after %.3f s", dt);
    pl_ucx_destroy(&a);
}

Test(ucx, message_survives_timeout_and_cancel_mid_transfer)
{
    pl_ucx_t *a, *b;
    pl_ucx_ep_t *ab;
    tu_pair(&a, &b, &ab, 10); /* a first exchange completes the connection's wireup */
    void *buf = NULL;
    size_t len = 0;
    uint64_t tag = 0;
    cr_assert_eq(tu_send(a, ab, 4, TU_BIG, 4), PL_OK);
    for (int i = 0; i < 100; i++) {
        pl_ucx_progress(a); /* the announcement goes out, but nothing asks for the data yet */
        pl_ucx_progress(b);
    }
    /* The sender no longer progresses: the message is matched but cannot arrive yet. */
    cr_assert_eq(pl_ucx_recv(b, 4, ~0ULL, TU_BIG, &buf, &len, &tag, 200, NULL), PL_ERR_TIMEOUT);
    cr_assert(strstr(pl_error_msg(), "still arriving") != NULL, "%s", pl_error_msg());
    volatile int flag = 0;
    canceler_t c = {.flag = &flag, .delay_ms = 100};
    pthread_t th;
    pthread_create(&th, NULL, s_cancel_later, &c);
    cr_assert_eq(pl_ucx_recv(b, 4, ~0ULL, TU_BIG, &buf, &len, &tag, -1, &flag), PL_ERR_CANCELED);
    pthread_join(th, NULL);
    /* Another tag meanwhile neither waits for it nor takes it. */
    cr_assert_eq(tu_send(a, ab, 5, 100, 5), PL_OK);
    cr_assert_eq(tu_recv_with(b, a, 5, ~0ULL, TU_BIG, &buf, &len, &tag, 5000), PL_OK, "%s",
                 pl_error_msg());
    cr_assert_eq(tag, 5);
    cr_assert(tu_pattern_ok(buf, len, 5));
    free(buf);
    /* Once the sender progresses, the first message arrives whole. */
    cr_assert_eq(tu_recv_with(b, a, 4, ~0ULL, TU_BIG, &buf, &len, &tag, 10000), PL_OK, "%s",
                 pl_error_msg());
    cr_assert_eq(len, TU_BIG);
    cr_assert_eq(tag, 4);
    cr_assert(tu_pattern_ok(buf, len, 4));
    free(buf);
    cr_assert_eq(pl_ucx_flush(a, 5000), PL_OK, "%s", pl_error_msg());
    pl_ucx_destroy(&a);
    pl_ucx_destroy(&b);
}

Test(ucx, messages_of_one_tag_keep_their_order)
{
    pl_ucx_t *a = tu_create(), *b = tu_create();
    pl_ucx_ep_t *ab = tu_connect(a, b);
    void *buf;
    size_t len;
    /* Rendezvous and eager sizes mixed: each arrives in send order. */
    const size_t sizes[] = {300000, 10, 5000, 1 << 20, 64, 9000};
    for (unsigned i = 0; i < 6; i++)
        cr_assert_eq(tu_send(a, ab, 3, sizes[i], i), PL_OK);
    for (unsigned i = 0; i < 6; i++) {
        cr_assert_eq(tu_recv_with(b, a, 3, ~0ULL, 1 << 20, &buf, &len, NULL, 10000), PL_OK, "%s",
                     pl_error_msg());
        cr_assert_eq(len, sizes[i], "message %u", i);
        cr_assert(tu_pattern_ok(buf, len, i));
        free(buf);
    }
    pl_ucx_destroy(&a);
    pl_ucx_destroy(&b);
}
