/* Deferred credit grants on the UCX data plane (ucx_inbox.c): rings of 2 and 3 workers at windows
 * 1 and 2, with and without progress threads, never deadlock and never exceed their credits;
 * credits released in a row travel in fewer grants and add up to exactly the slots released. */
#include "ucx_util.h"

#include <pthread.h>
#include <stdio.h>

#define S_MARK_TAG 0x300ULL
#define S_MAX_NODES 3

/* One worker of a ring: it receives from prev into its inbox, sends to next from its outbox. */
typedef struct {
    pl_ucx_t *ucx;
    pl_ucx_ep_t *next, *prev; /* the same endpoint in a ring of 2 */
    pl_ucx_inbox_t *in;
    pl_ucx_outbox_t *out;
    int id, n_nodes, iters;
    size_t len;
    bool starts; /* sends before its first receive */
    pl_status_t st;
    char msg[256];
} s_node_t;

/* The byte k of message i from node `from`. */
static unsigned char s_byte(int from, int i, size_t k)
{
    return (unsigned char)((k * 131u + (unsigned)i * 7u + (unsigned)from * 57u) & 0xff);
}

static bool s_fail(s_node_t *n, const char *what, int i)
{
    snprintf(n->msg, sizeof(n->msg), "node %d, message %d: %s: %s", n->id, i, what,
             pl_error_msg());
    return false;
}

static bool s_send(s_node_t *n, int i)
{
    void *buf;
    size_t cap;
    if ((n->st = pl_ucx_outbox_get(n->out, &buf, &cap, 20000, NULL)) != PL_OK)
        return s_fail(n, "send buffer", i);
    for (size_t k = 0; k < n->len; k++)
        ((unsigned char *)buf)[k] = s_byte(n->id, i, k);
    if ((n->st = pl_ucx_outbox_send(n->out, TU_DATA_TAG | (uint64_t)(i & 0xff), buf, n->len, 20000,
                                    NULL)) != PL_OK)
        return s_fail(n, "send", i);
    return true;
}

static bool s_recv(s_node_t *n, int i)
{
    const void *buf;
    size_t len;
    uint64_t tag;
    int from = (n->id + n->n_nodes - 1) % n->n_nodes;
    if ((n->st = pl_ucx_inbox_recv(n->in, &buf, &len, &tag, 20000, NULL)) != PL_OK)
        return s_fail(n, "receive", i);
    bool ok = len == n->len && tag == (TU_DATA_TAG | (uint64_t)(i & 0xff));
    for (size_t k = 0; ok && k < len; k++)
        ok = ((const unsigned char *)buf)[k] == s_byte(from, i, k);
    if (!ok) {
        n->st = PL_ERR_PROTOCOL;
        snprintf(n->msg, sizeof(n->msg), "node %d, message %d: %zu bytes, tag 0x%llx: not what "
                 "node %d sent", n->id, i, len, (unsigned long long)tag, from);
        pl_ucx_inbox_release(n->in);
        return false;
    }
    if ((n->st = pl_ucx_inbox_release(n->in)) != PL_OK)
        return s_fail(n, "release", i);
    return true;
}

static void *s_node_main(void *arg)
{
    s_node_t *n = arg;
    for (int i = 0; i < n->iters; i++)
        if (n->starts ? !s_send(n, i) || !s_recv(n, i) : !s_recv(n, i) || !s_send(n, i))
            return NULL;
    if ((n->st = pl_ucx_flush(n->ucx, 20000)) != PL_OK)
        s_fail(n, "flush", n->iters);
    return NULL;
}

/* A ring of n_nodes workers, each with an inbox of `window` slots from the one before; every
 * node sends first when all_start (each waits for its successor's grant while its predecessor
 * waits for its own), else node 0 alone (a ping-pong around the ring). */
static void s_ring(int n_nodes, int window, bool progress, bool all_start, size_t len, int iters)
{
    s_node_t nodes[S_MAX_NODES] = {0};
    pthread_t t[S_MAX_NODES];
    for (int j = 0; j < n_nodes; j++) {
        cr_assert_eq(pl_ucx_create(&nodes[j].ucx), PL_OK, "%s", pl_error_msg());
        if (progress)
            cr_assert_eq(pl_ucx_progress_start(nodes[j].ucx), PL_OK, "%s", pl_error_msg());
    }
    for (int j = 0; j < n_nodes; j++) {
        s_node_t *n = &nodes[j];
        *n = (s_node_t){.ucx = n->ucx, .id = j, .n_nodes = n_nodes, .iters = iters, .len = len,
                        .starts = all_start || j == 0};
        n->next = tu_connect(n->ucx, nodes[(j + 1) % n_nodes].ucx);
        n->prev =
            n_nodes == 2 ? n->next : tu_connect(n->ucx, nodes[(j + n_nodes - 1) % n_nodes].ucx);
        pl_ucx_ep_use_credits(n->next, TU_CREDIT_TAG);
    }
    for (int j = 0; j < n_nodes; j++) {
        s_node_t *n = &nodes[j];
        cr_assert_eq(pl_ucx_inbox_create(n->ucx, n->prev, TU_DATA_TAG, TU_DATA_MASK, TU_CREDIT_TAG,
                                         len, window, &n->in),
                     PL_OK, "%s", pl_error_msg());
        cr_assert_eq(pl_ucx_outbox_create(n->ucx, n->next, len, window + 1, &n->out), PL_OK,
                     "%s", pl_error_msg());
    }
    for (int j = 0; j < n_nodes; j++)
        cr_assert_eq(pthread_create(&t[j], NULL, s_node_main, &nodes[j]), 0);
    for (int j = 0; j < n_nodes; j++)
        pthread_join(t[j], NULL);
    for (int j = 0; j < n_nodes; j++) {
        s_node_t *n = &nodes[j];
        cr_assert_eq(n->st, PL_OK, "%d nodes, window %d: %s", n_nodes, window, n->msg);
        pl_ucx_credit_stats_t cs;
        pl_ucx_ep_credit_stats(n->next, &cs);
        cr_assert_eq(cs.granted, window);
        cr_assert_eq(cs.sent, iters);
        cr_assert_leq(cs.max_in_flight, window, "node %d: %lld in flight on %d credits", j,
                      (long long)cs.max_in_flight, window);
        /* never more grants than one per slot released and the first */
        cr_assert_leq(pl_ucx_inbox_grants(n->in), 1 + iters);
    }
    for (int j = 0; j < n_nodes; j++) {
        pl_ucx_outbox_destroy(&nodes[j].out);
        pl_ucx_inbox_destroy(&nodes[j].in);
    }
    for (int j = 0; j < n_nodes; j++)
        pl_ucx_destroy(&nodes[j].ucx);
}

TestSuite(ucx_credit, .timeout = 240);

Test(ucx_credit, ping_pong_at_windows_1_and_2)
{
    for (int w = 1; w <= 2; w++) {
        s_ring(2, w, true, false, 64, 2000);
        s_ring(2, w, false, false, 64, 500);
    }
}

Test(ucx_credit, ring_of_3_where_every_node_sends_first)
{
    for (int w = 1; w <= 2; w++) {
        s_ring(3, w, true, true, 1000, 500);
        s_ring(3, w, false, true, 1000, 300);
        s_ring(3, w, true, false, 64, 500);
    }
}

Test(ucx_credit, large_messages_in_a_ring_of_2)
{
    s_ring(2, 1, true, true, 3u << 20, 20);
    s_ring(2, 2, true, true, (1u << 20) + 7, 40);
}

/* Messages already waiting: the releases of 8 slots in a row owe their credits and grant them
 * in fewer messages than 8, adding up to exactly the 8 slots: 8 more sends go, a 9th does not. */
Test(ucx_credit, releases_in_a_row_are_granted_together_and_exactly)
{
    enum { W = 8 };
    tu_link_t l;
    tu_link(&l, 256, W, 0, TU_PROGRESS_BOTH);
    pl_ucx_t *a = l.a, *b = l.b;
    pl_ucx_ep_t *ab = l.ab;
    pl_ucx_inbox_t *in = l.in;
    for (int i = 0; i < W; i++)
        cr_assert_eq(
            pl_ucx_send_credited(a, ab, TU_DATA_TAG | (uint64_t)i, calloc(1, 100), 100, 5000, NULL),
            PL_OK, "%s", pl_error_msg());
    /* the marker comes behind the W messages on the same endpoint: once it is here, so are they */
    cr_assert_eq(pl_ucx_send(a, ab, S_MARK_TAG, calloc(1, 8), 8), PL_OK);
    void *mark;
    size_t mlen;
    cr_assert_eq(pl_ucx_recv(b, S_MARK_TAG, ~0ULL, 64, &mark, &mlen, NULL, 5000, NULL), PL_OK,
                 "%s", pl_error_msg());
    free(mark);
    cr_assert_eq(pl_ucx_inbox_grants(in), 1);
    for (int i = 0; i < W; i++) {
        const void *buf;
        size_t len;
        uint64_t tag;
        cr_assert_eq(pl_ucx_inbox_recv(in, &buf, &len, &tag, 5000, NULL), PL_OK, "%s",
                     pl_error_msg());
        cr_assert_eq(tag, TU_DATA_TAG | (uint64_t)i);
        cr_assert_eq(pl_ucx_inbox_release(in), PL_OK);
    }
    /* b waits: whatever it still owes goes now */
    const void *buf;
    size_t len;
    cr_assert_eq(pl_ucx_inbox_recv(in, &buf, &len, NULL, 50, NULL), PL_ERR_TIMEOUT);
    int64_t grants = pl_ucx_inbox_grants(in);
    cr_assert_geq(grants, 2);
    cr_assert_lt(grants, 1 + W, "%lld grants: every release sent its own", (long long)grants);
    for (int i = 0; i < W; i++)
        cr_assert_eq(
            pl_ucx_send_credited(a, ab, TU_DATA_TAG | (uint64_t)i, calloc(1, 100), 100, 5000, NULL),
            PL_OK, "send %d of the second round: %s", i, pl_error_msg());
    cr_assert_eq(pl_ucx_send_credited(a, ab, TU_DATA_TAG, calloc(1, 100), 100, 300, NULL),
                 PL_ERR_TIMEOUT, "a credit beyond the slots released");
    pl_ucx_credit_stats_t cs;
    pl_ucx_ep_credit_stats(ab, &cs);
    cr_assert_eq(cs.sent, 2 * W);
    cr_assert_eq(cs.in_flight, W);
    cr_assert_eq(cs.max_in_flight, W);
    tu_unlink(&l);
}

/* Without a progress thread the owner's exit grants what it owes: a receiver that releases and
 * then stays away from the API still lets its sender go on. */
Test(ucx_credit, without_a_progress_thread_a_release_grants_at_once)
{
    tu_link_t l;
    tu_link(&l, 256, 1, 0, 0);
    pl_ucx_t *a = l.a;
    pl_ucx_ep_t *ab = l.ab;
    pl_ucx_inbox_t *in = l.in;
    cr_assert_eq(pl_ucx_send_credited(a, ab, TU_DATA_TAG, calloc(1, 10), 10, 5000, NULL), PL_OK,
                 "%s", pl_error_msg());
    const void *buf;
    size_t len;
    cr_assert_eq(pl_ucx_inbox_recv(in, &buf, &len, NULL, 5000, NULL), PL_OK, "%s",
                 pl_error_msg());
    cr_assert_eq(pl_ucx_inbox_release(in), PL_OK);
    cr_assert_eq(pl_ucx_inbox_grants(in), 2);
    /* b makes no call while a waits for the credit: it is already on its way */
    cr_assert_eq(pl_ucx_send_credited(a, ab, TU_DATA_TAG | 1, calloc(1, 10), 10, 5000, NULL), PL_OK,
                 "%s", pl_error_msg());
    cr_assert_eq(pl_ucx_flush(a, 5000), PL_OK, "%s", pl_error_msg());
    tu_unlink(&l);
}

/* With a progress thread, a receiver that releases and goes computing (no call for a while)
 * still has its credit granted: the progress thread sends it. */
Test(ucx_credit, a_receiver_gone_computing_grants_through_its_progress_thread)
{
    tu_link_t l;
    tu_link(&l, 256, 1, 0, TU_PROGRESS_B);
    pl_ucx_t *a = l.a;
    pl_ucx_ep_t *ab = l.ab;
    pl_ucx_inbox_t *in = l.in;
    cr_assert_eq(pl_ucx_send_credited(a, ab, TU_DATA_TAG, calloc(1, 10), 10, 5000, NULL), PL_OK,
                 "%s", pl_error_msg());
    const void *buf;
    size_t len;
    cr_assert_eq(pl_ucx_inbox_recv(in, &buf, &len, NULL, 5000, NULL), PL_OK, "%s",
                 pl_error_msg());
    cr_assert_eq(pl_ucx_inbox_release(in), PL_OK);
    /* b's owner makes no call from here until a's send went */
    cr_assert_eq(pl_ucx_send_credited(a, ab, TU_DATA_TAG | 1, calloc(1, 10), 10, 5000, NULL), PL_OK,
                 "%s", pl_error_msg());
    cr_assert_eq(pl_ucx_inbox_grants(in), 2);
    cr_assert_eq(pl_ucx_flush(a, 5000), PL_OK, "%s", pl_error_msg());
    tu_unlink(&l);
}
