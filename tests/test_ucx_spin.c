/* Tests of the UCX data plane's waits: the spin before sleep (PL_UCX_SPIN_US) is checked, keeps
 * its deadline and loses no message; the progress thread still takes over when the owner goes. */
#include "ucx_util.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

Test(ucx_spin, setting_is_checked)
{
    const char *bad[] = {"", "x", "-1", "10001", "5x", "99999999999999999999"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        pl_ucx_t *u = NULL;
        setenv("PL_UCX_SPIN_US", bad[i], 1);
        cr_assert_eq(pl_ucx_create(&u), PL_ERR_RANGE, "PL_UCX_SPIN_US=\"%s\" accepted", bad[i]);
        cr_assert_null(u, "no worker on error");
        cr_assert(strstr(pl_error_msg(), "PL_UCX_SPIN_US") != NULL, "%s", pl_error_msg());
    }
    const char *good[] = {"0", "50", "10000"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        pl_ucx_t *u = NULL;
        setenv("PL_UCX_SPIN_US", good[i], 1);
        cr_assert_eq(pl_ucx_create(&u), PL_OK, "%s: %s", good[i], pl_error_msg());
        pl_ucx_destroy(&u);
    }
}

/* With the longest spin (10 ms), a receive that may wait 1 ms returns after about that: the spin
 * ends at the caller's deadline. The fastest of a few tries, so that load does not decide it. */
Test(ucx_spin, spin_ends_at_the_deadline)
{
    setenv("PL_UCX_SPIN_US", "10000", 1);
    pl_ucx_t *u = NULL;
    cr_assert_eq(pl_ucx_create(&u), PL_OK, "%s", pl_error_msg());
    double best = 1e9;
    for (int i = 0; i < 5; i++) {
        void *buf;
        size_t len;
        double t0 = pl_now();
        cr_assert_eq(pl_ucx_recv(u, 1, ~0ULL, 64, &buf, &len, NULL, 1, NULL), PL_ERR_TIMEOUT);
        double t = pl_now() - t0;
        best = t < best ? t : best;
    }
    cr_assert_lt(best, 6e-3, "a 1 ms receive took %.1f ms: it spun past its deadline", best * 1e3);
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

static void s_ping_pong(const char *spin)
{
    setenv("PL_UCX_SPIN_US", spin, 1);
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
    s_ping_pong("0");
    s_ping_pong("50");
    s_ping_pong("10000");
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
