/* bench_stream: the activation stream between two processes exactly as stages use it (send
 * buffers from a registered pool, inbox slots, credits, progress threads): bandwidth per message
 * size and small-message latency, and this host's memcpy bandwidth per size as the reference.
 * bench_stream.sh prints it beside ucx_perftest's tag_bw / tag_lat on the same path. */
#include "common/util.h"
#include "transport/ucx.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define S_DATA 0x100ULL
#define S_MASK 0xf00ULL
#define S_CREDIT 0x200ULL
#define S_SLOTS 2 /* credits, as a stage with up to 2 microbatches has (PL_BENCH_CREDITS) */

static int s_slots = S_SLOTS;

typedef struct {
    pl_ucx_t *ucx;
    pl_ucx_ep_t *ep;
    pl_ucx_inbox_t *in;
    pl_ucx_outbox_t *out; /* one buffer per credit the peer grants and one to fill */
} s_side_t;

static int s_die(const char *what)
{
    fprintf(stderr, "bench_stream: %s: %s\n", what, pl_error_msg());
    return 1;
}

static int s_put(int fd, const char *s)
{
    size_t n = strlen(s) + 1;
    return write(fd, s, n) == (ssize_t)n ? 0 : 1;
}

static int s_get(int fd, char *out, size_t cap)
{
    size_t got = 0;
    for (ssize_t r; (got == 0 || out[got - 1] != '\0') && got < cap &&
                    (r = read(fd, out + got, cap - got)) > 0;)
        got += (size_t)r;
    return got > 0 && out[got - 1] == '\0' ? 0 : 1;
}

/* Worker, address swap over the pipes, endpoint with credits, inbox of slot_bytes. */
static int s_setup(s_side_t *s, int rd, int wr, size_t slot_bytes, bool first)
{
    char *mine = NULL, peer[8192];
    if (pl_ucx_create(&s->ucx) || pl_ucx_address(s->ucx, &mine))
        return s_die("worker");
    if (getenv("PL_UCX_PROGRESS_THREAD") == NULL || strcmp(getenv("PL_UCX_PROGRESS_THREAD"), "0"))
        if (pl_ucx_progress_start(s->ucx))
            return s_die("progress thread");
    int rc = first ? (s_put(wr, mine) || s_get(rd, peer, sizeof(peer)))
                   : (s_get(rd, peer, sizeof(peer)) || s_put(wr, mine));
    free(mine);
    if (rc)
        return 1;
    if (pl_ucx_connect(s->ucx, peer, &s->ep))
        return s_die("connect");
    pl_ucx_ep_use_credits(s->ep, S_CREDIT);
    if (pl_ucx_inbox_create(s->ucx, s->ep, S_DATA, S_MASK, S_CREDIT, slot_bytes, s_slots, &s->in))
        return s_die("inbox");
    if (pl_ucx_outbox_create(s->ucx, s->ep, slot_bytes, s_slots + 1, &s->out))
        return s_die("send buffers");
    return 0;
}

/* A message from the pool, as a stage sends one (it computed into the buffer; here the buffer
 * keeps what it held). */
static int s_send(s_side_t *s, size_t len)
{
    void *buf;
    size_t cap;
    if (pl_ucx_outbox_get(s->out, &buf, &cap, 30000, NULL))
        return s_die("send buffer");
    return pl_ucx_outbox_send(s->out, S_DATA, buf, len, 30000, NULL) ? s_die("send") : 0;
}

static int s_recv(s_side_t *s)
{
    const void *buf;
    size_t len;
    if (pl_ucx_inbox_recv(s->in, &buf, &len, NULL, 30000, NULL))
        return s_die("receive");
    return pl_ucx_inbox_release(s->in) ? s_die("release") : 0;
}

static int s_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sender: `iters` messages of `len` (after warm-up), then one back to say the receiver's clock
 * may stop; or ping-pong when lat, each round trip timed: out[0] the median one-way time (what
 * ucx_perftest's tag_lat calls typical, the median of its iterations), out[1] the mean. */
static int s_run(s_side_t *s, bool sender, size_t len, int iters, bool lat, double out[2])
{
    int warm = iters / 10 + 1;
    double t0 = 0, ti = 0;
    double *rtt = lat ? calloc((size_t)iters, sizeof(double)) : NULL;
    if (lat && !rtt)
        return 1;
    for (int i = 0; i < warm + iters; i++) {
        if (i == warm)
            t0 = pl_now();
        if (lat) {
            if (sender ? (s_send(s, len) || s_recv(s)) : (s_recv(s) || s_send(s, len))) {
                free(rtt);
                return 1;
            }
            double now = pl_now();
            if (i >= warm)
                rtt[i - warm] = now - (i == warm ? t0 : ti);
            ti = now;
        } else if (sender ? s_send(s, len) : s_recv(s)) {
            return 1;
        }
    }
    if (!lat && (sender ? s_recv(s) : s_send(s, 1))) /* the end, acknowledged */
        return 1;
    double t = pl_now() - t0;
    if (lat) {
        qsort(rtt, (size_t)iters, sizeof(double), s_cmp_double);
        out[0] = rtt[iters / 2] / 2 * 1e6;
        out[1] = t / iters / 2 * 1e6;
        free(rtt);
    } else {
        out[0] = out[1] = (double)len * iters / t / 1e6;
    }
    if (getenv("PL_BENCH_STATS")) { /* where the time went */
        pl_ucx_wait_stats_t ws;
        pl_ucx_wait_stats(s->ucx, &ws); /* warm-up and set-up included */
        fprintf(stderr, "bench_stream: %s: %d messages: its waits slept %lld times, spun %.1f ms\n",
                sender ? "sender" : "receiver", warm + iters, (long long)ws.sleeps,
                ws.spun_s * 1e3);
    }
    if (sender && getenv("PL_BENCH_STATS")) { /* where the sender's time went */
        pl_ucx_credit_stats_t cs;
        pl_ucx_ep_credit_stats(s->ep, &cs);
        fprintf(stderr,
                "bench_stream: %.1f ms for %d messages; %lld credit waits, %.1f ms; the "
                "sender's inbox sent %lld grants\n",
                t * 1e3, iters, (long long)cs.waits, cs.wait_s * 1e3,
                (long long)pl_ucx_inbox_grants(s->in));
    }
    return pl_ucx_flush(s->ucx, 30000) ? s_die("flush") : 0;
}

/* One side: the receiver (writes nothing back) or the sender (writes its figure to res). */
static int s_side(bool sender, int rd, int wr, int res, bool lat, size_t len, int iters)
{
    s_side_t s = {0};
    double v[2] = {0, 0};
    char line[64];
    if (s_setup(&s, rd, wr, len + 64, !sender) || s_run(&s, sender, len, iters, lat, v))
        return 1;
    /* A clean end: each side says its peer may go before the other can learn it is done (over
     * TCP the first side to close fails the other's connection, a failure otherwise logged). */
    if (sender) {
        snprintf(line, sizeof(line), "%.3f %.3f", v[0], v[1]);
        pl_ucx_expect_close(s.ucx);
        s_put(res, line);
        if (s_get(rd, line, sizeof(line))) /* wait for the receiver's goodbye */
            line[0] = 0;
    } else {
        if (s_get(res, line, sizeof(line)))
            line[0] = 0;
        pl_ucx_expect_close(s.ucx);
        s_put(wr, "bye");
        /* bandwidth as the receiver saw it; latency as the sender timed it */
        if (!lat)
            snprintf(line, sizeof(line), "%.3f", v[0]);
        printf("%s\n", line);
    }
    pl_ucx_outbox_destroy(&s.out);
    pl_ucx_inbox_destroy(&s.in);
    pl_ucx_destroy(&s.ucx);
    return 0;
}

/* The reference: memcpy of `len` bytes between two buffers touched beforehand, MB/s. */
static int s_memcpy(size_t len, int iters)
{
    unsigned char *a = malloc(len ? len : 1), *b = malloc(len ? len : 1);
    if (!a || !b)
        return 1;
    memset(a, 0x5a, len);
    memset(b, 0xa5, len);
    int warm = iters / 10 + 1;
    double t0 = 0;
    for (int i = 0; i < warm + iters; i++) {
        if (i == warm)
            t0 = pl_now();
        memcpy((i & 1) ? a : b, (i & 1) ? b : a, len);
        __asm__ volatile("" ::: "memory"); /* every copy happens */
    }
    printf("%.3f\n", (double)len * iters / (pl_now() - t0) / 1e6);
    free(a);
    free(b);
    return 0;
}

/* What a stage waiting for input costs: one process, its worker (progress thread and all) with
 * an inbox on an endpoint to itself, waiting `ms` for a message that never comes; prints the CPU
 * time of all its threads per second of the wait, in milliseconds. */
static int s_idle(int ms)
{
    s_side_t s = {0};
    char *mine = NULL;
    const void *buf;
    size_t len;
    struct rusage r0, r1;
    if (pl_ucx_create(&s.ucx) || pl_ucx_address(s.ucx, &mine) || pl_ucx_progress_start(s.ucx) ||
        pl_ucx_connect(s.ucx, mine, &s.ep))
        return s_die("worker");
    free(mine);
    pl_ucx_ep_use_credits(s.ep, S_CREDIT);
    if (pl_ucx_inbox_create(s.ucx, s.ep, S_DATA, S_MASK, S_CREDIT, 4096, s_slots, &s.in))
        return s_die("inbox");
    getrusage(RUSAGE_SELF, &r0);
    double t0 = pl_now();
    if (pl_ucx_inbox_recv(s.in, &buf, &len, NULL, ms, NULL) != PL_ERR_TIMEOUT)
        return s_die("idle wait (expected a timeout)");
    double wall = pl_now() - t0;
    getrusage(RUSAGE_SELF, &r1);
    double cpu = (double)(r1.ru_utime.tv_sec - r0.ru_utime.tv_sec + r1.ru_stime.tv_sec -
                          r0.ru_stime.tv_sec) +
                 (double)(r1.ru_utime.tv_usec - r0.ru_utime.tv_usec + r1.ru_stime.tv_usec -
                          r0.ru_stime.tv_usec) *
                     1e-6;
    printf("%.3f\n", cpu / wall * 1e3);
    pl_ucx_inbox_destroy(&s.in);
    pl_ucx_destroy(&s.ucx);
    return 0;
}

/* Run a side in network namespace `ns` with fresh UTS and IPC namespaces, so that UCX sees
 * another host: through `ip netns exec` (which also shows the namespace's own /sys, where UCX
 * finds its network devices) and `unshare`, both of which keep the pipes. */
static int s_side_in(const char *ns, char *self, bool sender, int rd, int wr, int res, char **args)
{
    if (!ns || !*ns)
        return s_side(sender, rd, wr, res, strcmp(args[0], "lat") == 0, strtoull(args[1], NULL, 10),
                      atoi(args[2]));
    char f[3][16], host[64];
    snprintf(host, sizeof(host), "pl-bench-%s", ns);
    setenv("PL_BENCH_HOSTNAME", host, 1);
    snprintf(f[0], sizeof(f[0]), "%d", rd);
    snprintf(f[1], sizeof(f[1]), "%d", wr);
    snprintf(f[2], sizeof(f[2]), "%d", res);
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0)
        return 1;
    exe[n] = '\0';
    (void)self;
    char *argv[] = {"ip",
                    "netns",
                    "exec",
                    (char *)ns,
                    "unshare",
                    "--uts",
                    "--ipc",
                    "--",
                    exe,
                    "--side",
                    sender ? "send" : "recv",
                    f[0],
                    f[1],
                    f[2],
                    args[0],
                    args[1],
                    args[2],
                    NULL};
    execvp("ip", argv);
    fprintf(stderr, "bench_stream: exec: %s\n", strerror(errno));
    return 1;
}

/* PL_BENCH_CPUS="A,B": the receiver on CPU A, the sender on B (as bench_stream.sh pins
 * ucx_perftest's server and client); unset: wherever the scheduler puts them. */
static void s_pin(int side)
{
    const char *env = getenv("PL_BENCH_CPUS");
    int cpu[2];
    if (!env || sscanf(env, "%d,%d", &cpu[0], &cpu[1]) != 2 || cpu[side] < 0 ||
        cpu[side] >= CPU_SETSIZE)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu[side], &set);
    if (sched_setaffinity(0, sizeof(set), &set))
        fprintf(stderr, "bench_stream: pin to CPU %d: %s\n", cpu[side], strerror(errno));
}

int main(int argc, char **argv)
{
    const char *credits = getenv("PL_BENCH_CREDITS");
    if (credits && (sscanf(credits, "%d", &s_slots) != 1 || s_slots < 1 || s_slots > 64)) {
        fprintf(stderr, "bench_stream: PL_BENCH_CREDITS=%s (1..64)\n", credits);
        return 2;
    }
    const char *host = getenv("PL_BENCH_HOSTNAME");
    if (argc == 9 && strcmp(argv[1], "--side") == 0 && host && sethostname(host, strlen(host)))
        fprintf(stderr, "bench_stream: hostname %s: %s\n", host, strerror(errno));
    if (argc == 9 && strcmp(argv[1], "--side") == 0)
        return s_side(strcmp(argv[2], "send") == 0, atoi(argv[3]), atoi(argv[4]), atoi(argv[5]),
                      strcmp(argv[6], "lat") == 0, strtoull(argv[7], NULL, 10), atoi(argv[8]));
    if (argc < 4) {
        fprintf(stderr,
                "usage: bench_stream bw|lat|memcpy SIZE ITERS [NETNS_A NETNS_B]\n"
                "       bench_stream idle MS 1\n"
                "  prints MB/s (bw, memcpy), one-way microseconds (lat, ping-pong / 2: the\n"
                "  median round trip's, then the mean) or the\n"
                "  milliseconds of CPU per second a stage waiting MS for input takes (idle)\n");
        return 2;
    }
    if (strcmp(argv[1], "idle") == 0) {
        s_pin(0);
        return s_idle(atoi(argv[2]));
    }
    if (strcmp(argv[1], "memcpy") == 0) {
        s_pin(0);
        return s_memcpy(strtoull(argv[2], NULL, 10), atoi(argv[3]));
    }
    const char *ns_a = argc > 4 ? argv[4] : NULL, *ns_b = argc > 5 ? argv[5] : NULL;
    int ab[2], ba[2], res[2];
    if (pipe(ab) || pipe(ba) || pipe(res))
        return 1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        return 1;
    if (pid == 0) { /* the sender */
        s_pin(1);
        _exit(s_side_in(ns_b, argv[0], true, ab[0], ba[1], res[1], argv + 1));
    }
    s_pin(0);
    if (!ns_a || !*ns_a) {
        int rc = s_side_in(ns_a, argv[0], false, ba[0], ab[1], res[0], argv + 1);
        if (rc)
            kill(pid, SIGKILL);
        int status = 0;
        waitpid(pid, &status, 0);
        return rc || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    /* The receiver runs through ip netns exec too: a child of its own, so that this process
     * returns only once both sides have gone, and the next run never shares the CPUs with this
     * one's teardown. */
    pid_t rpid = fork();
    if (rpid < 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return 1;
    }
    if (rpid == 0)
        _exit(s_side_in(ns_a, argv[0], false, ba[0], ab[1], res[0], argv + 1));
    int rs = 0, ss = 0;
    waitpid(rpid, &rs, 0);
    if (!WIFEXITED(rs) || WEXITSTATUS(rs) != 0)
        kill(pid, SIGKILL);
    waitpid(pid, &ss, 0);
    return !WIFEXITED(rs) || WEXITSTATUS(rs) != 0 || !WIFEXITED(ss) || WEXITSTATUS(ss) != 0;
}
