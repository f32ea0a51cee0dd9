/* Credit flow control and the progress thread on the UCX data plane, with real workers in this
 * process: bit-exact transfers of many sizes into pre-posted slots, a receiver that holds its
 * slots holds its sender back, a slow receiver bounds what is in flight, bad input is refused. */
#include "ucx_util.h"

#include "transport/ucx_grant.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>

typedef struct {
    tu_link_t *l;
    const size_t *sizes;
    int n;
    pl_status_t st;
    int max_pending;
    char msg[256];
} s_sender_t;

static void *s_sender_main(void *arg)
{
    s_sender_t *s = arg;
    for (int i = 0; i < s->n; i++) {
        s->st =
            pl_ucx_send_credited(s->l->a, s->l->ab, TU_DATA_TAG | (uint64_t)(i & 0xff),
                                 tu_pattern(s->sizes[i], (unsigned)i), s->sizes[i], 30000, NULL);
        int p = pl_ucx_pending(s->l->a);
        if (p > s->max_pending)
            s->max_pending = p;
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

/* Receive n messages in order, checking each byte, sleeping `hold_us` before each release, and
 * checking that nothing waits outside the slots (the sender kept to its credits). */
static void s_receive_all(tu_link_t *l, const size_t *sizes, int n, int hold_us)
{
    for (int i = 0; i < n; i++) {
        tu_take(l, sizes[i], i);
        if (hold_us > 0) {
            usleep((useconds_t)hold_us);
            void *extra;
            size_t elen;
            cr_assert_eq(pl_ucx_recv(l->b, TU_DATA_TAG, TU_DATA_MASK, 1u << 30, &extra, &elen, NULL,
                                     0, NULL),
                         PL_ERR_TIMEOUT, "a message arrived beyond the credits");
        }
        cr_assert_eq(pl_ucx_inbox_release(l->in), PL_OK, "%s", pl_error_msg());
    }
}

static void s_run(size_t slot_bytes, int slots, const size_t *sizes, int n, int hold_us,
                  s_sender_t *out)
{
    tu_link_t l;
    pthread_t t;
    tu_link(&l, slot_bytes, slots, 0, TU_PROGRESS_BOTH);
    *out = (s_sender_t){.l = &l, .sizes = sizes, .n = n};
    cr_assert_eq(pthread_create(&t, NULL, s_sender_main, out), 0);
    s_receive_all(&l, sizes, n, hold_us);
    pthread_join(t, NULL);
    cr_assert_eq(out->st, PL_OK, "%s", out->msg);
    pl_ucx_credit_stats_t cs;
    pl_ucx_ep_credit_stats(l.ab, &cs);
    cr_assert_eq(cs.granted, slots);
    cr_assert_eq(cs.sent, n);
    cr_assert_leq(cs.max_in_flight, slots);
    cr_assert_leq(out->max_pending, slots);
    cr_assert_eq(pl_ucx_inbox_bytes(l.in), (slot_bytes + 63) / 64 * 64 * (size_t)slots);
    cr_assert_eq(pl_ucx_inbox_slots(l.in), slots);
    tu_unlink(&l);
}

TestSuite(ucx_inbox, .timeout = 120);

Test(ucx_inbox, few_bytes_to_64_mib_arrive_bit_exact)
{
    static const size_t sizes[] = {0,        1,
                                   3,        8,
                                   63,       64,
                                   65,       4095,
                                   4097,     8191,
                                   65537,    (1u << 20) + 13,
                                   3u << 20, (8u << 20) - 1,
                                   17,       64u << 20,
                                   5,        (32u << 20) + 3};
    s_sender_t s;
    s_run(64u << 20, 2, sizes, (int)(sizeof(sizes) / sizeof(sizes[0])), 0, &s);
}

Test(ucx_inbox, many_in_flight_of_odd_sizes)
{
    enum { N = 300 };
    size_t sizes[N];
    unsigned r = 12345;
    for (int i = 0; i < N; i++) {
        r = r * 1103515245u + 12345u;
        sizes[i] = (r >> 8) % (300u << 10) + (i % 7);
    }
    s_sender_t s;
    s_run(300u << 10 | 63, 16, sizes, N, 0, &s);
}

Test(ucx_inbox, slow_receiver_bounds_what_is_in_flight)
{
    enum { N = 40 };
    size_t sizes[N];
    for (int i = 0; i < N; i++)
        sizes[i] = (i % 2 ? 256u << 10 : 1000) + (size_t)i;
    s_sender_t s;
    s_run(257u << 10, 3, sizes, N, 5000, &s);
    /* the sender was held back: it had to wait for credits, and did */
    cr_assert_leq(s.max_pending, 3);
}

Test(ucx_inbox, held_slots_hold_the_sender)
{
    tu_link_t l;
    tu_link(&l, 4096, 3, 0, TU_PROGRESS_BOTH);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(pl_ucx_send_credited(l.a, l.ab, TU_DATA_TAG | (uint64_t)i, tu_pattern(100, i),
                                          100, 5000, NULL),
                     PL_OK, "%s", pl_error_msg());
    /* three slots granted, three used: the fourth waits and times out */
    double t0 = pl_now();
    cr_assert_eq(
        pl_ucx_send_credited(l.a, l.ab, TU_DATA_TAG | 3, tu_pattern(100, 3), 100, 300, NULL),
        PL_ERR_TIMEOUT, "%s", pl_error_msg());
    cr_assert_geq(pl_now() - t0, 0.29);
    volatile int cancel = 1;
    cr_assert_eq(
        pl_ucx_send_credited(l.a, l.ab, TU_DATA_TAG | 3, tu_pattern(100, 3), 100, -1, &cancel),
        PL_ERR_CANCELED);
    pl_ucx_credit_stats_t cs;
    pl_ucx_ep_credit_stats(l.ab, &cs);
    cr_assert_eq(cs.in_flight, 3);
    /* one message is taken at a time */
    const void *buf;
    size_t len;
    uint64_t tag;
    cr_assert_eq(pl_ucx_inbox_release(l.in), PL_ERR_INVALID);
    cr_assert_eq(pl_ucx_inbox_recv(l.in, &buf, &len, &tag, 5000, NULL), PL_OK, "%s",
                 pl_error_msg());
    cr_assert_eq(tag, TU_DATA_TAG);
    cr_assert_eq(pl_ucx_inbox_recv(l.in, &buf, &len, &tag, 5000, NULL), PL_ERR_INVALID);
    /* its release returns one credit: one more send goes, and no other */
    cr_assert_eq(pl_ucx_inbox_release(l.in), PL_OK);
    cr_assert_eq(
        pl_ucx_send_credited(l.a, l.ab, TU_DATA_TAG | 3, tu_pattern(100, 3), 100, 5000, NULL),
        PL_OK, "%s", pl_error_msg());
    cr_assert_eq(
        pl_ucx_send_credited(l.a, l.ab, TU_DATA_TAG | 4, tu_pattern(100, 4), 100, 200, NULL),
        PL_ERR_TIMEOUT);
    for (unsigned i = 1; i <= 3; i++) {
        cr_assert_eq(pl_ucx_inbox_recv(l.in, &buf, &len, &tag, 5000, NULL), PL_OK);
        cr_assert_eq(tag, TU_DATA_TAG | i);
        cr_assert(tu_pattern_ok(buf, len, i));
        cr_assert_eq(pl_ucx_inbox_release(l.in), PL_OK);
    }
    cr_assert_eq(pl_ucx_inbox_recv(l.in, &buf, &len, &tag, 100, NULL), PL_ERR_TIMEOUT);
    pl_ucx_ep_credit_stats(l.ab, &cs);
    cr_assert_eq(cs.max_in_flight, 3);
    tu_unlink(&l);
}

Test(ucx_inbox, oversized_message_and_bad_grants_are_refused)
{
    tu_link_t l;
    const void *buf;
    size_t len;
    uint64_t tag;
    tu_link(&l, 1000, 2, 0, TU_PROGRESS_BOTH);
    /* a plain (uncredited) send of more than a slot: refused, and the link carries on */
    cr_assert_eq(pl_ucx_send(l.a, l.ab, TU_DATA_TAG | 1, tu_pattern(5000, 1), 5000), PL_OK);
    cr_assert_eq(pl_ucx_send(l.a, l.ab, TU_DATA_TAG | 2, tu_pattern(900, 2), 900), PL_OK);
    pl_status_t st = pl_ucx_inbox_recv(l.in, &buf, &len, &tag, 5000, NULL);
    cr_assert_eq(st, PL_ERR_PROTOCOL, "%s", pl_error_msg());
    cr_assert(strstr(pl_error_msg(), "5000"), "%s", pl_error_msg());
    cr_assert_eq(pl_ucx_inbox_recv(l.in, &buf, &len, &tag, 5000, NULL), PL_OK, "%s",
                 pl_error_msg());
    cr_assert_eq(len, 900);
    cr_assert(tu_pattern_ok(buf, len, 2));
    cr_assert_eq(pl_ucx_inbox_release(l.in), PL_OK);
    /* grants on the sender's credit tag that are not the job's (wrong length, wrong magic, the
     * layout before the token, another token): dropped and counted, no credit, no failure; one
     * with the token (all zero here on both sides) and an absurd count: a broken peer */
    static const unsigned char bad[][PL_UCX_GRANT_BYTES + 1] = {
        {'P', 'L', 'C', '2', 1, 0, 0, 0},                   /* 8 bytes: the old layout */
        {'X', 'L', 'C', '2', 1, 0, 0, 0},                   /* bad magic */
        {'P', 'L', 'C', '2', 1, 0, 0, 0, 1},                /* another token */
        {'P', 'L', 'C', '2', 0xff, 0xff, 0xff, 0x7f}};      /* the token, an absurd count */
    static const size_t bad_len[] = {8, PL_UCX_GRANT_BYTES, PL_UCX_GRANT_BYTES,
                                     PL_UCX_GRANT_BYTES};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        tu_link_t m;
        bool broken = i == 3;
        tu_link(&m, 1000, 1, 0, TU_PROGRESS_BOTH);
        void *g = malloc(bad_len[i]);
        memcpy(g, bad[i], bad_len[i]);
        cr_assert_eq(pl_ucx_send(m.b, m.ba, TU_CREDIT_TAG, g, bad_len[i]), PL_OK);
        cr_assert_eq(pl_ucx_flush(m.b, 5000), PL_OK);
        /* the good first grant (one credit) may come before or after the forged one */
        for (int k = 0; k < 2; k++) {
            st = pl_ucx_send_credited(m.a, m.ab, TU_DATA_TAG, tu_pattern(10, 0), 10, 1000, NULL);
            if (st != PL_OK)
                break;
        }
        if (broken) {
            cr_assert_eq(st, PL_ERR_RANGE, "grant %zu: %s", i, pl_error_msg());
            cr_assert(strstr(pl_error_msg(), "credit grant"), "%s", pl_error_msg());
        } else {
            cr_assert_eq(st, PL_ERR_TIMEOUT, "forged grant %zu gave a credit: %s", i,
                         pl_error_msg());
            cr_assert_eq(pl_ucx_grants_dropped(m.a), 1, "forged grant %zu", i);
        }
        tu_unlink(&m);
    }
    /* no credits on the endpoint: a misuse, reported */
    cr_assert_eq(pl_ucx_send_credited(l.b, l.ba, TU_DATA_TAG, tu_pattern(10, 0), 10, 0, NULL),
                 PL_ERR_INVALID);
    cr_assert_eq(pl_ucx_inbox_create(l.b, l.ba, TU_DATA_TAG, TU_DATA_MASK, TU_CREDIT_TAG, 0, 1,
                                     &(pl_ucx_inbox_t *){NULL}),
                 PL_ERR_RANGE);
    tu_unlink(&l);
}

Test(ucx_inbox, a_dropped_message_returns_no_credit_and_later_ones_keep_their_lengths)
{
    tu_link_t l;
    const void *buf;
    size_t len;
    uint64_t tag;
    pl_ucx_credit_stats_t cs;
    tu_link(&l, 1000, 2, 0, TU_PROGRESS_BOTH);
    /* a stranger's message (no credit spent) takes a slot while the sender's two credited
     * messages are under way: the second finds no slot posted and waits in UCX's queue */
    cr_assert_eq(pl_ucx_send(l.a, l.ab, TU_DATA_TAG | 9, tu_pattern(52, 9), 52), PL_OK);
    cr_assert_eq(pl_ucx_flush(l.a, 5000), PL_OK);
    cr_assert_eq(pl_ucx_inbox_recv(l.in, &buf, &len, &tag, 5000, NULL), PL_OK, "%s",
                 pl_error_msg());
    cr_assert_eq(len, 52);
    for (unsigned i = 1; i <= 2; i++)
        cr_assert_eq(pl_ucx_send_credited(l.a, l.ab, TU_DATA_TAG | i, tu_pattern(100 * i, i),
                                          100 * i, 5000, NULL),
                     PL_OK, "%s", pl_error_msg());
    cr_assert_eq(pl_ucx_flush(l.a, 5000), PL_OK);
    usleep(100 * 1000); /* both have arrived: one in the free slot, one queued in UCX */
    /* dropped: its slot is posted again and takes the queued message at once */
    cr_assert_eq(pl_ucx_inbox_drop(l.in), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(pl_ucx_inbox_drop(l.in), PL_ERR_INVALID, "nothing taken");
    for (unsigned i = 1; i <= 2; i++) {
        cr_assert_eq(pl_ucx_inbox_recv(l.in, &buf, &len, &tag, 5000, NULL), PL_OK, "%s",
                     pl_error_msg());
        cr_assert_eq(tag, TU_DATA_TAG | i);
        cr_assert_eq(len, 100 * i, "message %u: %zu bytes (its own length, not the one before)",
                     i, len);
        cr_assert(tu_pattern_ok(buf, len, i));
        cr_assert_eq(pl_ucx_inbox_release(l.in), PL_OK);
    }
    /* the two releases gave two credits back, the drop none: two sends go, a third waits */
    for (unsigned i = 3; i <= 4; i++)
        cr_assert_eq(
            pl_ucx_send_credited(l.a, l.ab, TU_DATA_TAG | i, tu_pattern(10, i), 10, 5000, NULL),
            PL_OK, "%s", pl_error_msg());
    cr_assert_eq(pl_ucx_send_credited(l.a, l.ab, TU_DATA_TAG | 5, tu_pattern(10, 5), 10, 300, NULL),
                 PL_ERR_TIMEOUT);
    pl_ucx_ep_credit_stats(l.ab, &cs);
    cr_assert_eq(cs.granted, 2);
    cr_assert_eq(cs.in_flight, 2);
    tu_unlink(&l);
}

/* ---- a peer process that dies ---- */

/* Child: connect to the parent, send two credited messages, then hang until killed. */
static void s_dying_child(int rd, int wr)
{
    char addr[8192];
    pl_ucx_t *c = NULL;
    pl_ucx_ep_t *ep = NULL;
    char *mine = NULL;
    if (tu_get(rd, addr, sizeof(addr)) ||
        pl_ucx_create_with(&(pl_ucx_params_t){.peer_timeout_ms = 1000}, &c) ||
        pl_ucx_progress_start(c) || pl_ucx_connect(c, addr, &ep) || pl_ucx_address(c, &mine))
        _exit(2);
    pl_ucx_ep_use_credits(ep, TU_CREDIT_TAG);
    if (tu_put(wr, mine))
        _exit(3);
    for (unsigned i = 0; i < 2; i++)
        if (pl_ucx_send_credited(c, ep, TU_DATA_TAG | i, tu_pattern(70000, i), 70000, 10000, NULL))
            _exit(4);
    for (;;)
        pause();
}

static void s_peer_killed(const char *tls, const char *want_transport)
{
    int to_child[2], to_parent[2];
    char addr[8192];
    if (tls)
        setenv("UCX_TLS", tls, 1);
    cr_assert_eq(pipe(to_child), 0);
    cr_assert_eq(pipe(to_parent), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        close(to_child[1]);
        close(to_parent[0]);
        s_dying_child(to_child[0], to_parent[1]);
    }
    close(to_child[0]);
    close(to_parent[1]);
    pl_ucx_t *p = NULL;
    pl_ucx_ep_t *ep = NULL;
    pl_ucx_inbox_t *in = NULL;
    char *mine = NULL;
    cr_assert_eq(pl_ucx_create_with(&(pl_ucx_params_t){.peer_timeout_ms = 1000}, &p), PL_OK);
    cr_assert_eq(pl_ucx_progress_start(p), PL_OK);
    cr_assert_eq(pl_ucx_address(p, &mine), PL_OK);
    cr_assert_eq(tu_put(to_child[1], mine), 0);
    free(mine);
    cr_assert_eq(tu_get(to_parent[0], addr, sizeof(addr)), 0, "the child sent no address");
    cr_assert_eq(pl_ucx_connect(p, addr, &ep), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(
        pl_ucx_inbox_create(p, ep, TU_DATA_TAG, TU_DATA_MASK, TU_CREDIT_TAG, 70000, 2, &in), PL_OK,
        "%s", pl_error_msg());
    for (unsigned i = 0; i < 2; i++) {
        const void *buf;
        size_t len;
        cr_assert_eq(pl_ucx_inbox_recv(in, &buf, &len, NULL, 10000, NULL), PL_OK, "%s",
                     pl_error_msg());
        cr_assert(len == 70000 && tu_pattern_ok(buf, len, i));
        cr_assert_eq(pl_ucx_inbox_release(in), PL_OK);
    }
    const char *tr = pl_ucx_ep_transport(ep);
    cr_assert(strstr(tr, want_transport), "transport %s, expected %s", tr, want_transport);
    /* the peer dies without a word (and is reaped: a zombie still looks alive to UCX's check
     * of shared-memory peers): the link reports it within the configured second */
    double t0 = pl_now();
    cr_assert_eq(kill(pid, SIGKILL), 0);
    cr_assert_eq(waitpid(pid, NULL, 0), pid);
    const void *buf;
    size_t len;
    pl_status_t st = pl_ucx_inbox_recv(in, &buf, &len, NULL, 20000, NULL);
    double took = pl_now() - t0;
    cr_assert_eq(st, PL_ERR_TRANSPORT, "%s", pl_error_msg());
    cr_log_info("%s: peer death reported after %.0f ms", tls ? tls : "default", took * 1e3);
    cr_assert_lt(took, 2.0, "reported after %.2f s (timeout 1 s)", took);
    cr_assert_eq(pl_ucx_ep_status(ep), PL_ERR_TRANSPORT);
    pl_ucx_inbox_destroy(&in);
    pl_ucx_destroy(&p);
}

Test(ucx_inbox, killed_peer_fails_its_link_in_time_over_shared_memory)
{
    s_peer_killed(NULL, "sysv");
}

Test(ucx_inbox, killed_peer_fails_its_link_in_time_over_tcp)
{
    /* the user's UCX_TLS is respected, and the transport really used is reported */
    s_peer_killed("tcp", "tcp");
}
