/* Tests of the UCX data plane's waits: the spin before sleep (PL_UCX_SPIN_US) and the longer one
 * while a transfer streams (PL_UCX_STREAM_SPIN_US) are checked, keep their deadline, leave an
 * idle wait asleep and lose no message; the progress thread still takes over when the owner goes. */
#include "ucx_util.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

Test(ucx_spin, setting_is_checked)
{
    const char *names[] = {"PL_UCX_SPIN_US", "PL_UCX_STREAM_SPIN_US"};
    for (size_t v = 0; v < 2; v++) {
        const char *bad[] = {"", "x", "-1", "10001", "5x", "99999999999999999999"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            pl_ucx_t *u = NULL;
            setenv(names[v], bad[i], 1);
            cr_assert_eq(pl_ucx_create(&u), PL_ERR_RANGE, "%s=\"%s\" accepted", names[v], bad[i]);
            cr_assert_null(u, "no worker on error");
            cr_assert(strstr(pl_error_msg(), names[v]) != NULL, "%s", pl_error_msg());
        }
        const char *good[] = {"0", "50", "10000"};
        for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
            pl_ucx_t *u = NULL;
            setenv(names[v], good[i], 1);
            cr_assert_eq(pl_ucx_create(&u), PL_OK, "%s: %s", good[i], pl_error_msg());
            pl_ucx_destroy(&u);
        }
        unsetenv(names[v]);
    }
}

/* After an event (a message to itself), with the longest stream spin (10 ms), a receive that may
 * wait 5 ms spins through it without sleeping, and one that may wait 1 ms still returns after
 * about that (the spin ends at the caller's deadline). */
Test(ucx_spin, a_wait_after_an_event_spins_to_its_deadline)
{
    setenv("PL_UCX_STREAM_SPIN_US", "10000", 1);
    pl_ucx_t *u = NULL;
    cr_assert_eq(pl_ucx_create(&u), PL_OK, "%s", pl_error_msg());
    pl_ucx_ep_t *self = tu_connect(u, u);
    double best = 1e9;
    for (int i = 0; i < 5; i++) {
        void *buf;
        size_t len;
        unsigned char *m = malloc(64);
        cr_assert_not_null(m);
        memset(m, i, 64);
        cr_assert_eq(pl_ucx_send(u, self, 2, m, 64), PL_OK, "%s", pl_error_msg());
        cr_assert_eq(pl_ucx_recv(u, 2, ~0ULL, 64, &buf, &len, NULL, 5000, NULL), PL_OK, "%s",
                     pl_error_msg());
        free(buf);
        pl_ucx_wait_stats_t w0, w1;
        pl_ucx_wait_stats(u, &w0);
        int ms = i == 0 ? 5 : 1;
        double t0 = pl_now();
        cr_assert_eq(pl_ucx_recv(u, 1, ~0ULL, 64, &buf, &len, NULL, ms, NULL), PL_ERR_TIMEOUT);
        double t = pl_now() - t0;
        pl_ucx_wait_stats(u, &w1);
        if (i == 0) {
            cr_assert_eq(w1.sleeps, w0.sleeps, "a wait 5 ms after an event slept");
            cr_assert_gt(w1.spun_s - w0.spun_s, 0.8 * t, "it spun %.2f ms of its %.2f ms",
                         (w1.spun_s - w0.spun_s) * 1e3, t * 1e3);
        } else {
            best = t < best ? t : best;
        }
    }
    cr_assert_lt(best, 6e-3, "a 1 ms receive took %.1f ms: it spun past its deadline", best * 1e3);
    pl_ucx_destroy(&u);
}

/* A wait with no transfer going (a stage waiting for its input) sleeps: with the longest stream
 * spin and no spin before sleep, a 300 ms wait of a worker that never had an event spins not at
 * all (a stream spin at every wake-up would be 10 ms per 50 ms sleep). */
Test(ucx_spin, an_idle_wait_does_not_stream_spin)
{
    setenv("PL_UCX_STREAM_SPIN_US", "10000", 1);
    setenv("PL_UCX_SPIN_US", "0", 1);
    pl_ucx_t *u = NULL;
    cr_assert_eq(pl_ucx_create(&u), PL_OK, "%s", pl_error_msg());
    void *buf;
    size_t len;
    cr_assert_eq(pl_ucx_recv(u, 1, ~0ULL, 64, &buf, &len, NULL, 300, NULL), PL_ERR_TIMEOUT);
    pl_ucx_wait_stats_t w;
    pl_ucx_wait_stats(u, &w);
    cr_assert_gt(w.sleeps, 0, "an idle 300 ms wait never slept");
    cr_assert_lt(w.spun_s, 2e-3, "an idle 300 ms wait spun %.1f ms", w.spun_s * 1e3);
    pl_ucx_destroy(&u);
}

/* Ping-pong between two threads' workers with and without the spin: every byte arrives. */
typedef struct {
    pl_ucx_t *u;
    pl_ucx_ep_t *ep;
    int n;
    int rc;
} s_echo_t;

static void *s_echo_main(void *arg)
{
    s_echo_t *e = arg;
    for (int i = 0; i < e->n; i++) {
        void *buf;
        size_t len;
        if (pl_ucx_recv(e->u, 5, ~0ULL, 1 << 16, &buf, &len, NULL, 10000, NULL) != PL_OK ||
            pl_ucx_send(e->u, e->ep, 6, buf, len) != PL_OK) {
            e->rc = 1;
            return NULL;
        }
    }
    e->rc = pl_ucx_flush(e->u, 5000) == PL_OK ? 0 : 1;
    return NULL;
}

static void s_ping_pong(const char *spin, const char *stream_spin)
{
    setenv("PL_UCX_SPIN_US", spin, 1);
    setenv("PL_UCX_STREAM_SPIN_US", stream_spin, 1);
    pl_ucx_t *a = NULL, *b = NULL;
    cr_assert_eq(pl_ucx_create(&a), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(pl_ucx_create(&b), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(pl_ucx_progress_start(a), PL_OK, "%s", pl_error_msg());
    pl_ucx_ep_t *ab = tu_connect(a, b), *ba = tu_connect(b, a);
    s_echo_t e = {.u = b, .ep = ba, .n = 200};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, s_echo_main, &e), 0);
    for (int i = 0; i < e.n; i++) {
        size_t n = 1 + (size_t)i * 211 % 9000;
        unsigned char *out = malloc(n);
        cr_assert_not_null(out);
        for (size_t k = 0; k < n; k++)
            out[k] = (unsigned char)(k * 31 + (size_t)i);
        cr_assert_eq(pl_ucx_send(a, ab, 5, out, n), PL_OK, "%s", pl_error_msg());
        void *buf;
        size_t len;
        cr_assert_eq(pl_ucx_recv(a, 6, ~0ULL, 1 << 16, &buf, &len, NULL, 10000, NULL), PL_OK,
                     "spin %s, message %d: %s", spin, i, pl_error_msg());
        cr_assert_eq(len, n);
        for (size_t k = 0; k < n; k++)
            cr_assert_eq(((unsigned char *)buf)[k], (unsigned char)(k * 31 + (size_t)i));
        free(buf);
    }
    pthread_join(t, NULL);
    cr_assert_eq(e.rc, 0, "the echo thread failed");
    cr_assert_eq(pl_ucx_flush(a, 5000), PL_OK);
    pl_ucx_destroy(&a);
    pl_ucx_destroy(&b);
}

Test(ucx_spin, messages_arrive_with_and_without_the_spin)
{
    s_ping_pong("0", "0");
    s_ping_pong("50", "0");
    s_ping_pong("50", "200");
    s_ping_pong("10000", "10000");
}

/* A rendezvous-sized message finishes only while its receiver progresses: sent while the owner
 * is away (after a long call, so the progress thread was parked), its sender's flush completes
 * before the owner comes back, through the progress thread alone. */
typedef struct {
    pl_ucx_t *u;
    pl_ucx_ep_t *ep;
    size_t n;
    double done_at;
    int rc;
} s_big_t;

static void *s_big_main(void *arg)
{
    s_big_t *b = arg;
    unsigned char *m = malloc(b->n);
    if (!m) {
        b->rc = 1;
        return NULL;
    }
    for (size_t k = 0; k < b->n; k++)
        m[k] = (unsigned char)(k * 7 + 3);
    b->rc = pl_ucx_send(b->u, b->ep, 0x100, m, b->n) == PL_OK && pl_ucx_flush(b->u, 5000) == PL_OK
                ? 0
                : 1;
    b->done_at = pl_now();
    return NULL;
}

Test(ucx_spin, the_progress_thread_takes_over_when_the_owner_goes)
{
    pl_ucx_t *a = NULL, *b = NULL;
    pl_ucx_inbox_t *in = NULL;
    cr_assert_eq(pl_ucx_create(&a), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(pl_ucx_create(&b), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(pl_ucx_progress_start(a), PL_OK, "%s", pl_error_msg());
    pl_ucx_ep_t *ab = tu_connect(a, b), *ba = tu_connect(b, a);
    s_big_t big = {.u = b, .ep = ba, .n = 8u << 20};
    cr_assert_eq(pl_ucx_inbox_create(a, ab, 0x100, 0xf00, 0x200, big.n, 1, &in), PL_OK, "%s",
                 pl_error_msg());
    const void *buf;
    size_t len;
    /* a long call: the progress thread parks until the owner leaves it */
    cr_assert_eq(pl_ucx_inbox_recv(in, &buf, &len, NULL, 50, NULL), PL_ERR_TIMEOUT);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, s_big_main, &big), 0);
    usleep(1500 * 1000); /* the owner computes: no call of ours */
    double back = pl_now();
    pthread_join(t, NULL);
    cr_assert_eq(big.rc, 0, "the send failed");
    cr_assert_lt(big.done_at, back, "the message finished only once the owner came back");
    cr_assert_eq(pl_ucx_inbox_recv(in, &buf, &len, NULL, 5000, NULL), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(len, big.n);
    for (size_t k = 0; k < len; k++)
        cr_assert_eq(((const unsigned char *)buf)[k], (unsigned char)(k * 7 + 3));
    cr_assert_eq(pl_ucx_inbox_release(in), PL_OK);
    pl_ucx_inbox_destroy(&in);
    pl_ucx_destroy(&a);
    pl_ucx_destroy(&b);
}
