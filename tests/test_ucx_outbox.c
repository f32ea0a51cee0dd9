/* The send pool of the UCX data plane, with real workers in this process: bit-exact transfers from
 * registered buffers into an inbox, a buffer never handed out while its send is in flight (a
 * receiver that progresses late), no allocation per send, misuse refused. */
#include "ucx_util.h"

#include <pthread.h>
#include <stdio.h>

typedef struct {
    tu_link_t *l;
    const size_t *sizes;
    int n;
    pl_status_t st;
    char msg[256];
    int busy_seen; /* buffers handed out while the pool counted every buffer in flight */
} s_sender_t;

/* Fill each message into a pool buffer, byte by byte (so a buffer still being read by UCX would
 * reach the receiver changed), and send it. */
static void *s_sender_main(void *arg)
{
    s_sender_t *s = arg;
    for (int i = 0; i < s->n; i++) {
        void *buf;
        size_t cap;
        pl_ucx_outbox_stats_t os;
        s->st = pl_ucx_outbox_get(s->l->out, &buf, &cap, 30000, NULL);
        if (s->st != PL_OK) {
            snprintf(s->msg, sizeof(s->msg), "get %d: %s", i, pl_error_msg());
            return NULL;
        }
        pl_ucx_outbox_stats(s->l->out, &os);
        s->busy_seen += os.sending >= os.bufs;
        for (size_t k = 0; k < s->sizes[i]; k++)
            ((unsigned char *)buf)[k] = tu_byte(k, (unsigned)i);
        s->st = pl_ucx_outbox_send(s->l->out, TU_DATA_TAG | (uint64_t)(i & 0xff), buf, s->sizes[i],
                                   30000, NULL);
        if (s->st != PL_OK) {
            snprintf(s->msg, sizeof(s->msg), "send %d: %s", i, pl_error_msg());
            return NULL;
        }
    }
    s->st = pl_ucx_flush(s->l->a, 30000);
    if (s->st != PL_OK)
        snprintf(s->msg, sizeof(s->msg), "flush: %s", pl_error_msg());
    return NULL;
}

/* Receive every message, checking each byte; sleep hold_us before each receive. */
static void s_receive_all(tu_link_t *l, const size_t *sizes, int n, int hold_us)
{
    for (int i = 0; i < n; i++) {
        if (hold_us > 0)
            usleep((useconds_t)hold_us);
        tu_take(l, sizes[i], i);
        cr_assert_eq(pl_ucx_inbox_release(l->in), PL_OK, "%s", pl_error_msg());
    }
}

static void s_run(size_t bytes, int slots, int bufs, bool b_progress, const size_t *sizes, int n,
                  int hold_us, pl_ucx_outbox_stats_t *os)
{
    tu_link_t l;
    pthread_t t;
    tu_link(&l, bytes, slots, bufs, TU_PROGRESS_A | (b_progress ? TU_PROGRESS_B : 0));
    s_sender_t s = {.l = &l, .sizes = sizes, .n = n};
    cr_assert_eq(pthread_create(&t, NULL, s_sender_main, &s), 0);
    s_receive_all(&l, sizes, n, hold_us);
    pthread_join(t, NULL);
    cr_assert_eq(s.st, PL_OK, "%s", s.msg);
    cr_assert_eq(s.busy_seen, 0, "a buffer was handed out while every one was in flight");
    pl_ucx_outbox_stats(l.out, os);
    cr_assert_eq(os->bufs, bufs);
    cr_assert_eq(os->buf_bytes, (bytes + 63) / 64 * 64);
    cr_assert_eq(os->sends, n);
    cr_assert_eq(os->sending, 0);
    cr_assert_leq(os->max_sending, bufs);
    /* no send from the pool allocated; a's worker sent nothing else */
    cr_assert_eq(os->send_allocs, 0, "%lld sends allocated", (long long)os->send_allocs);
    pl_ucx_credit_stats_t cs;
    pl_ucx_ep_credit_stats(l.ab, &cs);
    cr_assert_leq(cs.max_in_flight, slots);
    cr_assert_eq(cs.sent, n);
    cr_assert_eq(cs.granted, slots);
    cr_assert_leq(cs.waits, n);
    cr_assert_geq(cs.wait_s, 0.0);
    /* the grants both ways allocated nothing: b's credits left from its inbox's own buffers,
     * a took them into its endpoint's; neither worker made an allocating send or receive */
    pl_ucx_alloc_stats_t aa, ab;
    pl_ucx_alloc_stats(l.a, &aa);
    pl_ucx_alloc_stats(l.b, &ab);
    cr_assert_eq(aa.sends + aa.recvs, 0, "a: %lld sends, %lld receives allocated",
                 (long long)aa.sends, (long long)aa.recvs);
    cr_assert_eq(ab.sends + ab.recvs, 0, "b: %lld sends, %lld receives allocated",
                 (long long)ab.sends, (long long)ab.recvs);
    tu_unlink(&l);
}

TestSuite(ucx_outbox, .timeout = 120);

Test(ucx_outbox, few_bytes_to_16_mib_arrive_bit_exact)
{
    static const size_t sizes[] = {0,         1,     3,
                                   63,        64,    65,
                                   4097,      65537, 1u << 20,
                                   17,        5,     (3u << 20) + 7,
                                   16u << 20, 8,     (16u << 20) - 1,
                                   100};
    pl_ucx_outbox_stats_t os;
    s_run(16u << 20, 2, 3, true, sizes, (int)(sizeof(sizes) / sizeof(sizes[0])), 0, &os);
}

Test(ucx_outbox, many_sends_reuse_few_buffers)
{
    enum { N = 400 };
    size_t sizes[N];
    unsigned r = 777;
    for (int i = 0; i < N; i++) {
        r = r * 1103515245u + 12345u;
        sizes[i] = (r >> 8) % (200u << 10) + (size_t)(i % 5);
    }
    pl_ucx_outbox_stats_t os;
    s_run(200u << 10 | 7, 4, 5, true, sizes, N, 0, &os);
}

/* One buffer, four credits, and a receiver that lets its worker move only when it comes back:
 * each large (rendezvous) send stays in flight until then, so the next take must wait for it,
 * and a buffer handed out early would be rewritten under the transfer and arrive changed. */
Test(ucx_outbox, slow_receiver_never_gets_a_buffer_still_in_flight)
{
    enum { N = 12 };
    size_t sizes[N];
    for (int i = 0; i < N; i++)
        sizes[i] = (2u << 20) + (size_t)i * 4099;
    pl_ucx_outbox_stats_t os;
    s_run(3u << 20, 4, 1, false, sizes, N, 20000, &os);
    cr_assert_gt(os.waits, 0, "the sender never waited for its one buffer");
    cr_assert_eq(os.max_sending, 1);
}

Test(ucx_outbox, misuse_is_refused_and_the_buffer_comes_back)
{
    tu_link_t l;
    void *b1, *b2, *b3;
    size_t cap;
    char other[16];
    tu_link(&l, 1000, 2, 2, TU_PROGRESS_BOTH);
    cr_assert_eq(pl_ucx_outbox_get(l.out, &b1, &cap, 1000, NULL), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(cap, 1024);
    cr_assert_eq((uintptr_t)b1 % 64, 0);
    cr_assert_eq(pl_ucx_outbox_get(l.out, &b2, &cap, 1000, NULL), PL_OK, "%s", pl_error_msg());
    cr_assert_neq(b1, b2);
    /* both with the caller: none will come back by waiting */
    cr_assert_eq(pl_ucx_outbox_get(l.out, &b3, &cap, 1000, NULL), PL_ERR_BUSY);
    cr_assert_eq(pl_ucx_outbox_send(l.out, TU_DATA_TAG, other, 8, 1000, NULL), PL_ERR_INVALID);
    cr_assert_eq(pl_ucx_outbox_send(l.out, TU_DATA_TAG, (char *)b1 + 1, 8, 1000, NULL),
                 PL_ERR_INVALID);
    cr_assert_eq(pl_ucx_outbox_send(l.out, TU_DATA_TAG, b1, 1025, 1000, NULL), PL_ERR_RANGE);
    /* b1 is the pool's again; sending it now is not a taken buffer's send */
    cr_assert_eq(pl_ucx_outbox_send(l.out, TU_DATA_TAG, b1, 8, 1000, NULL), PL_ERR_INVALID);
    cr_assert_eq(pl_ucx_outbox_get(l.out, &b3, &cap, 1000, NULL), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(b3, b1);
    pl_ucx_outbox_unget(l.out, b2);
    cr_assert_eq(pl_ucx_outbox_get(l.out, &b2, &cap, 1000, NULL), PL_OK, "%s", pl_error_msg());
    memset(b3, 0x5a, 8);
    cr_assert_eq(pl_ucx_outbox_send(l.out, TU_DATA_TAG | 1, b3, 8, 5000, NULL), PL_OK, "%s",
                 pl_error_msg());
    const void *got;
    size_t len;
    cr_assert_eq(pl_ucx_inbox_recv(l.in, &got, &len, NULL, 5000, NULL), PL_OK, "%s",
                 pl_error_msg());
    cr_assert_eq(len, 8);
    cr_assert_eq(memcmp(got, "\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a", 8), 0);
    cr_assert_eq(pl_ucx_inbox_release(l.in), PL_OK);
    pl_ucx_outbox_unget(l.out, b2);
    cr_assert_eq(pl_ucx_flush(l.a, 5000), PL_OK, "%s", pl_error_msg());
    /* the counter the no-allocation check reads does count the unpooled path */
    pl_ucx_outbox_stats_t os;
    pl_ucx_outbox_stats(l.out, &os);
    cr_assert_eq(os.send_allocs, 0);
    cr_assert_eq(pl_ucx_send_credited(l.a, l.ab, TU_DATA_TAG | 2, calloc(1, 4), 4, 5000, NULL),
                 PL_OK, "%s", pl_error_msg());
    pl_ucx_outbox_stats(l.out, &os);
    cr_assert_eq(os.send_allocs, 1);
    cr_assert_eq(pl_ucx_outbox_create(l.a, l.ab, 0, 1, &(pl_ucx_outbox_t *){NULL}), PL_ERR_RANGE);
    cr_assert_eq(pl_ucx_outbox_create(l.a, l.ab, 8, 0, &(pl_ucx_outbox_t *){NULL}), PL_ERR_RANGE);
    cr_assert_eq(pl_ucx_inbox_recv(l.in, &got, &len, NULL, 5000, NULL), PL_OK, "%s",
                 pl_error_msg());
    cr_assert_eq(pl_ucx_inbox_release(l.in), PL_OK);
    tu_unlink(&l);
}
