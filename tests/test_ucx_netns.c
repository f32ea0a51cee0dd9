/* The data plane between two "hosts": each side in its own network, UTS, IPC and mount namespace
 * (the namespace's own /sys, where UCX finds its network devices), joined by a veth pair, so UCX
 * must use TCP; transfers from a few bytes to 64 MiB, odd sizes, many in flight arrive bit-exact
 * through inboxes and credits. Needs root and `ip`; skipped with the reason otherwise. */
#include "cluster_util.h"
#include "ucx_util.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>

#define S_SLOTS 4
#define S_SLOT_BYTES (64u << 20)

static char s_ns[2][24], s_veth[24];
static int s_k;

static void s_teardown(void)
{
    if (s_ns[0][0])
        tc_sh(NULL, "{ ip netns del %s; ip netns del %s; ip link del %s; } >/dev/null 2>&1",
              s_ns[0], s_ns[1], s_veth);
}

static void s_setup(void)
{
    if (geteuid() != 0)
        cr_skip_test("needs root to create network namespaces and veth links");
    if (tc_sh(NULL, "command -v ip >/dev/null") != 0)
        cr_skip_test("needs the `ip` (iproute2) command");
    int pid = (int)getpid();
    s_k = 1 + pid % 250;
    snprintf(s_ns[0], sizeof(s_ns[0]), "plu%da", pid);
    snprintf(s_ns[1], sizeof(s_ns[1]), "plu%db", pid);
    snprintf(s_veth, sizeof(s_veth), "plu%dv", pid);
    s_teardown();
    if (tc_sh(NULL, "ip netns add %s >/dev/null 2>&1", s_ns[0]) != 0) {
        s_ns[0][0] = '\0';
        cr_skip_test("`ip netns add` failed: no network namespace support");
    }
    cr_assert_eq(tc_sh(NULL,
                       "ip netns add %s && ip link add %s type veth peer name %sb && "
                       "ip link set %s netns %s && ip link set %sb netns %s && "
                       "ip -n %s addr add 10.216.%d.1/24 dev %s && "
                       "ip -n %s addr add 10.216.%d.2/24 dev %sb && "
                       "ip -n %s link set %s up && ip -n %s link set %sb up && "
                       "ip -n %s link set lo up && ip -n %s link set lo up",
                       s_ns[1], s_veth, s_veth, s_veth, s_ns[0], s_veth, s_ns[1], s_ns[0], s_k,
                       s_veth, s_ns[1], s_k, s_veth, s_ns[0], s_veth, s_ns[1], s_veth, s_ns[0],
                       s_ns[1]),
                 0, "cannot set up the namespaces");
}

/* In a child: become another host (network namespace `ns`, new UTS/IPC/mount namespaces with
 * this network namespace's /sys). */
static int s_become_host(const char *ns, const char *hostname)
{
    char path[128];
    snprintf(path, sizeof(path), "/var/run/netns/%s", ns);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0 ||
        unshare(CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWNS) != 0 ||
        mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        umount2("/sys", MNT_DETACH) != 0 || mount("sysfs", "/sys", "sysfs", 0, NULL) != 0 ||
        sethostname(hostname, strlen(hostname)) != 0)
        return -1;
    close(fd);
    return 0;
}

static size_t s_size(int i)
{
    static const size_t fixed[] = {0,
                                   1,
                                   3,
                                   8,
                                   63,
                                   65,
                                   4097,
                                   65537,
                                   (1u << 20) + 13,
                                   (8u << 20) - 1,
                                   64u << 20,
                                   17,
                                   (32u << 20) + 3};
    int nf = (int)(sizeof(fixed) / sizeof(fixed[0]));
    if (i < nf)
        return fixed[i];
    return ((size_t)(i * 2654435761u) >> 7) % (300u << 10) + (size_t)(i % 5); /* odd sizes */
}

#define S_MESSAGES 120

/* One side, in its own host: connect, then send S_MESSAGES patterned messages (credited) or
 * receive and check them; exit status 0 when every byte arrived in order. */
static int s_side(bool sender, const char *ns, int rd, int wr)
{
    char host[32], peer[8192], *mine = NULL;
    pl_ucx_t *u = NULL;
    pl_ucx_ep_t *ep = NULL;
    pl_ucx_inbox_t *in = NULL;
    snprintf(host, sizeof(host), "pl-host-%c", sender ? 'b' : 'a');
    if (s_become_host(ns, host) || pl_ucx_create(&u) || pl_ucx_progress_start(u) ||
        pl_ucx_address(u, &mine))
        return 2;
    if (sender ? (tu_get(rd, peer, sizeof(peer)) || tu_put(wr, mine))
               : (tu_put(wr, mine) || tu_get(rd, peer, sizeof(peer))))
        return 3;
    if (pl_ucx_connect(u, peer, &ep))
        return 4;
    pl_ucx_ep_use_credits(ep, TU_CREDIT_TAG);
    if (pl_ucx_inbox_create(u, ep, TU_DATA_TAG, TU_DATA_MASK, TU_CREDIT_TAG,
                            sender ? 64 : S_SLOT_BYTES, sender ? 1 : S_SLOTS, &in))
        return 5;
    int rc = 0;
    for (int i = 0; i < S_MESSAGES && !rc; i++) {
        size_t n = s_size(i);
        if (sender) {
            unsigned char *b = malloc(n ? n : 1);
            for (size_t k = 0; k < n; k++)
                b[k] = tu_byte(k, (unsigned)i);
            if (pl_ucx_send_credited(u, ep, TU_DATA_TAG | (uint64_t)(i & 0xff), b, n, 60000, NULL))
                rc = 6;
            continue;
        }
        const void *buf;
        size_t len;
        uint64_t tag;
        if (pl_ucx_inbox_recv(in, &buf, &len, &tag, 60000, NULL) || len != n ||
            tag != (TU_DATA_TAG | (uint64_t)(i & 0xff)))
            rc = 7;
        for (size_t k = 0; !rc && k < len; k++)
            if (((const unsigned char *)buf)[k] != tu_byte(k, (unsigned)i))
                rc = 8;
        if (!rc && pl_ucx_inbox_release(in))
            rc = 9;
    }
    if (!rc && sender && pl_ucx_flush(u, 60000))
        rc = 10;
    /* between two hosts without RDMA, the transport really used is TCP */
    if (!rc && !strstr(pl_ucx_ep_transport(ep), "tcp"))
        rc = 13;
    /* neither side goes before the other is done, and each expects the other to go */
    pl_ucx_expect_close(u);
    if (!rc && (tu_put(wr, "done") || tu_get(rd, peer, sizeof(peer))))
        rc = 11;
    pl_ucx_credit_stats_t cs;
    pl_ucx_ep_credit_stats(ep, &cs);
    if (!rc && sender && cs.max_in_flight > S_SLOTS)
        rc = 12;
    pl_ucx_inbox_destroy(&in);
    pl_ucx_destroy(&u);
    free(mine);
    return rc;
}

TestSuite(ucx_netns, .init = s_setup, .fini = s_teardown, .timeout = 180);

Test(ucx_netns, tcp_between_hosts_few_bytes_to_64_mib_bit_exact)
{
    int ab[2], ba[2];
    cr_assert(!pipe(ab) && !pipe(ba));
    pid_t kid[2];
    for (int s = 0; s < 2; s++) {
        kid[s] = fork();
        cr_assert_geq(kid[s], 0);
        if (kid[s] == 0) {
            /* a: the receiver, b: the sender; each talks to the other and to the parent */
            int rd = s ? ab[0] : ba[0], wr = s ? ba[1] : ab[1];
            int rc = s_side(s == 1, s_ns[s], rd, wr);
            _exit(rc);
        }
    }
    int status[2];
    for (int s = 0; s < 2; s++)
        cr_assert_eq(waitpid(kid[s], &status[s], 0), kid[s]);
    /* status: 0 every byte in order over tcp; 2-5 setup, 6 send, 7 receive, 8 a byte differs,
     * 9 release, 10 flush, 11 the end, 12 more in flight than credits, 13 not over tcp */
    for (int s = 0; s < 2; s++)
        cr_assert(WIFEXITED(status[s]) && WEXITSTATUS(status[s]) == 0,
                  "%s side failed with status %d", s ? "sending" : "receiving",
                  WIFEXITED(status[s]) ? WEXITSTATUS(status[s]) : -1);
}
