/* The UCX data plane's endings, with real workers in this process (and one in a child process):
 * destroy with a message half-arrived or stuck, flush while the peer is silent, disconnect with
 * sends pending, and peers destroyed or killed, each reported in bounded time. */
#include "common/log.h"
#include "ucx_util.h"

#include <criterion/criterion.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Leave b with a matched rendezvous message whose data cannot come (a never progresses).
 * Returns whether that state was reached (no criterion asserts: also used in a child). */
static bool s_stuck_receive(pl_ucx_t *a, pl_ucx_t *b)
{
    char *addr = NULL;
    pl_ucx_ep_t *ab = NULL;
    void *buf;
    size_t len;
    if (pl_ucx_address(b, &addr) != PL_OK || pl_ucx_connect(a, addr, &ab) != PL_OK)
        return false;
    free(addr);
    if (tu_send(a, ab, 9, TU_BIG, 1) != PL_OK)
        return false;
    /* time, not a count: on a loaded machine the connection and the rendezvous request take a
     * while; the data itself cannot flow before b posts its receive */
    for (double t0 = pl_now(); pl_now() - t0 < 0.5;) {
        pl_ucx_progress(a);
        pl_ucx_progress(b);
        usleep(1000);
    }
    pl_status_t st = pl_ucx_recv(b, 9, ~0ULL, TU_BIG, &buf, &len, NULL, 300, NULL);
    if (st != PL_ERR_TIMEOUT || !strstr(pl_error_msg(), "still arriving")) {
        fprintf(stderr, "stuck receive: %d %s\n", st, pl_error_msg());
        return false;
    }
    return true;
}

static void *s_progress_until(void *arg)
{
    void **args = arg;
    pl_ucx_t *u = args[0];
    volatile int *stop = args[1];
    while (!__atomic_load_n(stop, __ATOMIC_SEQ_CST))
        pl_ucx_progress(u);
    return NULL;
}

Test(ucx, destroy_finishes_a_message_still_arriving)
{
    pl_ucx_t *a = tu_create(), *b = tu_create();
    cr_assert(s_stuck_receive(a, b));
    /* The sender's owner thread comes back to life while the receiver is destroyed. */
    volatile int stop = 0;
    void *args[2] = {a, (void *)&stop};
    pthread_t th;
    pthread_create(&th, NULL, s_progress_until, args);
    double t0 = pl_now();
    pl_ucx_destroy(&b);
    cr_assert_lt(pl_now() - t0, 2.0);
    __atomic_store_n(&stop, 1, __ATOMIC_SEQ_CST);
    pthread_join(th, NULL);
    cr_assert_eq(pl_ucx_flush(a, 1000), PL_OK, "the send completed: %s", pl_error_msg());
    pl_ucx_destroy(&a);
}

Test(ucx, destroy_with_a_message_stuck_does_not_abort, .timeout = 30)
{
    /* In a child, so the deliberate leak stays out of this process's leak check. */
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        pl_ucx_t *a = NULL, *b = NULL;
        if (pl_ucx_create(&a) != PL_OK || pl_ucx_create(&b) != PL_OK)
            _exit(2);
        if (!s_stuck_receive(a, b))
            _exit(4);
        pl_ucx_destroy(&b);
        pl_ucx_destroy(&a);
        _exit(b == NULL && a == NULL ? 0 : 3);
    }
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status), "child died of signal %d", WTERMSIG(status));
    cr_assert_eq(WEXITSTATUS(status), 0);
}

Test(ucx, flush_times_out_while_peer_is_silent)
{
    pl_ucx_t *a = tu_create(), *b = tu_create();
    pl_ucx_ep_t *ab = tu_connect(a, b);
    cr_assert_eq(tu_send(a, ab, 9, TU_BIG, 1), PL_OK);
    double t0 = pl_now();
    cr_assert_eq(pl_ucx_flush(a, 200), PL_ERR_TIMEOUT);
    cr_assert_lt(pl_now() - t0, 1.0);
    cr_assert(strstr(pl_error_msg(), "1 sends still pending") != NULL, "%s", pl_error_msg());
    pl_ucx_destroy(&a);
    pl_ucx_destroy(&b);
}

Test(ucx, disconnect_drops_pending_sends)
{
    pl_ucx_t *a = tu_create(), *b = tu_create(), *c = tu_create();
    pl_ucx_ep_t *ab = tu_connect(a, b), *ac = tu_connect(a, c);
    void *buf;
    size_t len;
    cr_assert_eq(tu_send(a, ab, 9, TU_BIG, 1), PL_OK);
    cr_assert_eq(tu_send(a, ac, 9, TU_BIG, 2), PL_OK);
    cr_assert_eq(pl_ucx_pending(a), 2);
    double t0 = pl_now();
    pl_ucx_disconnect(a, &ab);
    cr_assert_lt(pl_now() - t0, 3.0);
    cr_assert_null(ab);
    cr_assert_eq(pl_ucx_pending(a), 1, "only the other endpoint's send is left");
    /* The other endpoint is untouched: its message arrives whole. */
    cr_assert_eq(tu_recv_with(c, a, 9, ~0ULL, TU_BIG, &buf, &len, NULL, 10000), PL_OK, "%s",
                 pl_error_msg());
    cr_assert(tu_pattern_ok(buf, len, 2));
    free(buf);
    cr_assert_eq(pl_ucx_flush(a, 5000), PL_OK, "%s", pl_error_msg());
    pl_ucx_destroy(&a);
    pl_ucx_destroy(&b);
    pl_ucx_destroy(&c);
}

Test(ucx, peer_destroyed_in_process_is_bounded)
{
    pl_ucx_t *a, *b;
    pl_ucx_ep_t *ab;
    tu_pair(&a, &b, &ab, 64);
    void *buf;
    size_t len;
    pl_ucx_destroy(&b);
    double t0 = pl_now();
    pl_status_t st = pl_ucx_recv(a, 2, ~0ULL, 64, &buf, &len, NULL, 300, NULL);
    cr_assert(st == PL_ERR_TIMEOUT || st == PL_ERR_TRANSPORT, "%d %s", st, pl_error_msg());
    st = tu_send(a, ab, 3, TU_BIG, 2);
    cr_assert(st == PL_OK || st == PL_ERR_TRANSPORT, "%d %s", st, pl_error_msg());
    st = pl_ucx_flush(a, 300);
    cr_assert(st == PL_ERR_TIMEOUT || st == PL_ERR_TRANSPORT, "%d %s", st, pl_error_msg());
    cr_assert_lt(pl_now() - t0, 3.0);
    pl_ucx_destroy(&a);
}

/* Child: publish a worker address on `fd`, take one message, then die without cleaning up. */
static void s_child(int fd)
{
    pl_ucx_t *c = NULL;
    char *addr = NULL;
    void *buf;
    size_t len;
    if (pl_ucx_create(&c) != PL_OK || pl_ucx_address(c, &addr) != PL_OK)
        _exit(2);
    if (tu_put(fd, addr) != 0)
        _exit(3);
    if (pl_ucx_recv(c, 1, ~0ULL, 1 << 20, &buf, &len, NULL, 10000, NULL) != PL_OK)
        _exit(4);
    _exit(0);
}

Test(ucx, peer_process_death_is_reported, .timeout = 60)
{
    int fds[2];
    char addr[8192];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        s_child(fds[1]);
    }
    close(fds[1]);
    /* Read up to the NUL: the child stays alive (and the pipe open) until our message. */
    int got = tu_get(fds[0], addr, sizeof(addr));
    close(fds[0]);
    cr_assert(got == 0 && addr[0], "child sent no address");

    /* UCX usually notices at once (the shared-memory peer is gone); a short keepalive bounds it
     * where it does not, instead of UCX's default 20 s. */
    setenv("UCX_KEEPALIVE_INTERVAL", "100ms", 1);
    pl_ucx_t *a = tu_create();
    pl_ucx_ep_t *ep = NULL;
    cr_assert_eq(pl_ucx_connect(a, addr, &ep), PL_OK, "%s", pl_error_msg());
    /* A rendezvous send the child never takes, then the one it waits for. */
    cr_assert_eq(tu_send(a, ep, 5, TU_BIG, 5), PL_OK);
    cr_assert_eq(tu_send(a, ep, 1, 100, 1), PL_OK);
    /* Progress (wireup, the eager send) until the child has taken its message and died. */
    int status = 0;
    pid_t done = 0;
    for (double end = pl_now() + 10; done == 0 && pl_now() < end;) {
        pl_ucx_progress(a);
        done = waitpid(pid, &status, WNOHANG);
    }
    cr_assert_eq(done, pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);

    double t0 = pl_now();
    void *buf;
    size_t len;
    pl_status_t st = pl_ucx_recv(a, 2, ~0ULL, 100, &buf, &len, NULL, 20000, NULL);
    cr_assert_eq(st, PL_ERR_TRANSPORT, "%s", pl_error_msg());
    cr_assert_lt(pl_now() - t0, 15.0);
    cr_assert_eq(pl_ucx_ep_status(ep), PL_ERR_TRANSPORT);
    cr_assert_eq(tu_send(a, ep, 1, 100, 1), PL_ERR_TRANSPORT);
    /* The rendezvous send failed with the peer: flush reports it instead of waiting. */
    t0 = pl_now();
    cr_assert_eq(pl_ucx_flush(a, 10000), PL_ERR_TRANSPORT, "%s", pl_error_msg());
    cr_assert_lt(pl_now() - t0, 5.0);
    cr_assert_eq(pl_ucx_pending(a), 0);
    /* Once the dead peer is disconnected, receives wait again instead of failing. */
    pl_ucx_disconnect(a, &ep);
    cr_assert_null(ep);
    pl_ucx_disconnect(a, &ep);
    st = pl_ucx_recv(a, 2, ~0ULL, 100, &buf, &len, NULL, 100, NULL);
    cr_assert_eq(st, PL_ERR_TIMEOUT, "%s", pl_error_msg());
    pl_ucx_destroy(&a);
}

/* Over TCP (in this process) a wired-up pair, b destroyed: a's endpoint fails either way; with
 * pl_ucx_expect_close on a beforehand (a clean end) nothing is logged, without it (a peer gone
 * mid-job) the failure is logged. Returns whether the log named the failure. */
static bool s_peer_leaves_over_tcp(bool expected)
{
    setenv("UCX_TLS", "tcp", 1);
    pl_ucx_t *a = NULL, *b = NULL;
    cr_assert_eq(pl_ucx_create_with(&(pl_ucx_params_t){.peer_timeout_ms = 1000}, &a), PL_OK, "%s",
                 pl_error_msg());
    cr_assert_eq(pl_ucx_create_with(&(pl_ucx_params_t){.peer_timeout_ms = 1000}, &b), PL_OK, "%s",
                 pl_error_msg());
    cr_assert_eq(pl_ucx_progress_start(a), PL_OK);
    pl_ucx_ep_t *ab = tu_connect(a, b), *ba = tu_connect(b, a);
    void *buf;
    size_t len;
    cr_assert_eq(tu_send(a, ab, 1, 64, 1), PL_OK);
    cr_assert_eq(pl_ucx_recv(b, 1, ~0ULL, 64, &buf, &len, NULL, 5000, NULL), PL_OK, "%s",
                 pl_error_msg());
    free(buf);
    cr_assert_eq(tu_send(b, ba, 2, 64, 2), PL_OK);
    cr_assert_eq(pl_ucx_recv(a, 2, ~0ULL, 64, &buf, &len, NULL, 5000, NULL), PL_OK, "%s",
                 pl_error_msg());
    free(buf);
    cr_assert_eq(pl_ucx_flush(b, 5000), PL_OK, "%s", pl_error_msg());
    cr_assert(strstr(pl_ucx_ep_transport(ab), "tcp"), "%s", pl_ucx_ep_transport(ab));
    FILE *log = tmpfile();
    cr_assert_not_null(log);
    pl_log_set_stream(log);
    if (expected)
        pl_ucx_expect_close(a);
    pl_ucx_destroy(&b);
    /* a's progress thread sees the connection go: the endpoint fails, recorded either way */
    double t0 = pl_now();
    while (pl_ucx_ep_status(ab) == PL_OK && pl_now() - t0 < 5)
        usleep(10 * 1000);
    cr_assert_eq(pl_ucx_ep_status(ab), PL_ERR_TRANSPORT, "a's endpoint did not fail");
    pl_ucx_destroy(&a);
    pl_log_set_stream(NULL);
    char text[4096] = "";
    rewind(log);
    size_t n = fread(text, 1, sizeof(text) - 1, log);
    text[n] = '\0';
    fclose(log);
    return strstr(text, "peer endpoint failed") != NULL;
}

Test(ucx, a_peer_gone_after_a_clean_end_is_recorded_not_logged)
{
    cr_assert_not(s_peer_leaves_over_tcp(true), "a clean end was logged as a peer failure");
}

Test(ucx, a_peer_gone_mid_job_is_logged)
{
    cr_assert(s_peer_leaves_over_tcp(false), "a peer's failure went unlogged");
}
