/* Integration: pipecoord and three pipeld, each daemon in its own network, UTS and IPC namespaces
 * (its own host name and address on a bridge the test makes), so that UCX must carry activations
 * over TCP as between real hosts; results equal the single-process reference, and a cut link
 * mid-job: the job resumes on the other two daemons to the undisturbed output (greedy and
 * seeded), detection and recovery times printed.
 * Needs root, `ip` and `unshare`; skipped with the reason otherwise. */
#include "job_util.h"

#include <criterion/criterion.h>
#include <jansson.h>

#define S_NODES 3
#define S_DEAD_AFTER_S 3.0 /* the embedded default cluster's dead_after_ms */

/* The test's own network: bridge plNNNbr with 10.213.K.1/24 in the root namespace, and per
 * daemon a namespace plNNNn<i> holding one end of a veth pair (veth0, 10.213.K.<10+i>) whose other
 * end plNNNv<i> is a port of the bridge. NNN is the test process's pid, so concurrent runs (and
 * criterion's per-test processes) never share a name. */
typedef struct {
    int k;                  /* third octet of the subnet */
    char br[16];            /* bridge */
    char ns[S_NODES][16];   /* network namespaces */
    char veth[S_NODES][16]; /* root-namespace ends of the veth pairs */
    char cleanup[1024];     /* shell command that removes all of the above */
    pid_t guard;            /* runs `cleanup` when this process ends, however it ends */
    int guard_fd;
} s_net_t;

static s_net_t s_n;
static tc_cluster_t s_c;
static int s_passed; /* set at the end of a test body: logs are shown only when it is not */

/* A child in its own session that waits for EOF on a pipe only this process holds, then runs
 * the cleanup command: a crash, a criterion timeout or SIGKILL of the test still removes the
 * namespaces, veths and bridge (daemons die with the test through PR_SET_PDEATHSIG). */
static void s_guard_start(void)
{
    int fds[2];
    cr_assert_eq(pipe2(fds, O_CLOEXEC), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        int null = open("/dev/null", O_RDWR);
        setsid();
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
        for (int fd = 3; fd < 1024; fd++)
            if (fd != fds[0])
                close(fd);
        for (char c;;) {
            ssize_t r = read(fds[0], &c, 1);
            if (r == 0 || (r < 0 && errno != EINTR))
                break;
        }
        execl("/bin/sh", "sh", "-c", s_n.cleanup, (char *)NULL);
        _exit(127);
    }
    close(fds[0]);
    s_n.guard = pid;
    s_n.guard_fd = fds[1];
}

static void s_guard_stop(void)
{
    if (s_n.guard <= 0)
        return;
    close(s_n.guard_fd);
    waitpid(s_n.guard, NULL, 0);
    s_n.guard = 0;
}

/* Pick a 10.213.K.0/24 no interface or route of this host uses, starting from the pid. */
static int s_free_subnet(void)
{
    for (int i = 0; i < 250; i++) {
        int k = 1 + (getpid() + i) % 250;
        if (tc_sh(NULL,
                  "ip -4 -o addr show | grep -q 'inet 10\\.213\\.%d\\.' || "
                  "ip -4 route show | grep -q '^10\\.213\\.%d\\.'",
                  k, k) != 0)
            return k;
    }
    return -1;
}

static void s_net_setup(void)
{
    int pid = (int)getpid();

    if (geteuid() != 0)
        cr_skip_test("needs root to create network namespaces and veth links");
    if (tc_sh(NULL, "command -v ip >/dev/null && command -v unshare >/dev/null") != 0)
        cr_skip_test("needs the `ip` (iproute2) and `unshare` (util-linux) commands");
    snprintf(s_n.br, sizeof(s_n.br), "pl%dbr", pid);
    size_t o = 0;
    for (int i = 0; i < S_NODES; i++) {
        snprintf(s_n.ns[i], sizeof(s_n.ns[i]), "pl%dn%d", pid, i);
        snprintf(s_n.veth[i], sizeof(s_n.veth[i]), "pl%dv%d", pid, i);
        o += (size_t)snprintf(s_n.cleanup + o, sizeof(s_n.cleanup) - o,
                              "ip netns del %s; ip link del %s; ", s_n.ns[i], s_n.veth[i]);
    }
    snprintf(s_n.cleanup + o, sizeof(s_n.cleanup) - o, "ip link del %s; true", s_n.br);
    /* leftovers of an earlier run that had this pid and crashed before its cleanup */
    tc_sh(NULL, "{ %s; } >/dev/null 2>&1", s_n.cleanup);
    s_guard_start();
    if (tc_sh(NULL, "ip netns add %s >/dev/null 2>&1", s_n.ns[0]) != 0)
        cr_skip_test("`ip netns add` failed: no network namespace support or no CAP_SYS_ADMIN");
    s_n.k = s_free_subnet();
    cr_assert_geq(s_n.k, 1, "every 10.213.K.0/24 is in use on this host");
    cr_assert_eq(tc_sh(NULL,
                       "ip link add %s type bridge && ip addr add 10.213.%d.1/24 dev %s && "
                       "ip link set %s up",
                       s_n.br, s_n.k, s_n.br, s_n.br),
                 0, "cannot create bridge %s", s_n.br);
    for (int i = 0; i < S_NODES; i++) {
        const char *ns = s_n.ns[i], *v = s_n.veth[i];
        cr_assert_eq(tc_sh(NULL,
                           "{ [ %d = 0 ] || ip netns add %s; } && "
                           "ip link add %s type veth peer name veth0 netns %s && "
                           "ip link set %s master %s up && "
                           "ip -n %s addr add 10.213.%d.%d/24 dev veth0 && "
                           "ip -n %s link set veth0 up && ip -n %s link set lo up",
                           i, ns, v, ns, v, s_n.br, ns, s_n.k, 10 + i, ns, ns),
                     0, "cannot set up namespace %s", ns);
    }
}

static void s_teardown(void)
{
    if (s_c.coord > 0 && !s_passed)
        tc_dump_logs(&s_c);
    tc_cluster_stop(&s_c);
    s_guard_stop();
    if (s_passed && s_c.dir[0]) /* keep the logs of a failed test */
        tc_sh(NULL, "rm -rf %s", s_c.dir);
}

/* Coordinator in the root namespace on the bridge's address; daemon i in namespace i with the
 * host name pl<pid>h<i>. UCX is left to choose its devices (no UCX_NET_DEVICES): each namespace
 * has only lo and veth0, and UCX must not pick lo to reach a peer; pinning veth0 here would hide
 * that mistake from the test. */
static void s_start(void)
{
    s_net_setup();
    tc_mkdtemp(s_c.dir, sizeof(s_c.dir));
    snprintf(s_c.ep, sizeof(s_c.ep), "tcp://10.213.%d.1:%d", s_n.k, tc_free_port());
    tc_start_coord(&s_c, s_c.ep);
    for (int i = 0; i < S_NODES; i++) {
        char name[16], wrap[256];
        snprintf(name, sizeof(name), "node%d", i);
        /* `ip netns exec` and `unshare` exec in place, so the spawned pid becomes pipeld's */
        snprintf(wrap, sizeof(wrap),
                 "ip netns exec %s unshare --uts --ipc -- sh -c '"
                 "{ hostname pl%dh%d || echo pl%dh%d >/proc/sys/kernel/hostname; } 2>/dev/null "
                 "&& exec \"$@\"' sh",
                 s_n.ns[i], (int)getpid(), i, (int)getpid(), i);
        /* slowed (node file `slowdown`), so that on a quiet machine a job still runs for
         * several heartbeats while its link is cut */
        char path[512], cmd[1024], log[512], text[256];
        snprintf(path, sizeof(path), "%s/%s.node.yaml", s_c.dir, name);
        snprintf(text, sizeof(text), "name: %s\ncoordinator: %s\nthreads: 1\nslowdown: 10\n",
                 name, s_c.ep);
        tc_write(path, text);
        snprintf(log, sizeof(log), "%s/%s.log", s_c.dir, name);
        snprintf(cmd, sizeof(cmd), "exec %s %s/pipeld --config %s", wrap, tc_bin(), path);
        char *argv[] = {"/bin/sh", "-c", cmd, NULL};
        s_c.node[s_c.n_nodes++] = tc_spawn(argv, log);
    }
    cr_assert_eq(tc_wait_idle(&s_c, S_NODES, 30), 0,
                 "daemons in namespaces did not register with %s (is traffic on bridge %s "
                 "blocked, e.g. by br_netfilter and an iptables FORWARD policy?)",
                 s_c.ep, s_n.br);
    tc_prompts_and_model(&s_c);
}

/* `pipectl -o json ARGS` parsed; the test fails when it is not a JSON object. */
static json_t *s_ctl_json(const char *args)
{
    char *out;
    tc_sh(&out, "%s/pipectl -c %s --timeout 3 -o json %s 2>/dev/null", tc_bin(), s_c.ep, args);
    json_error_t e;
    json_t *j = json_loads(out, 0, &e);
    cr_assert(json_is_object(j), "pipectl %s: not JSON (%s): %s", args, e.text, out);
    free(out);
    return j;
}

static const char *s_str(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return json_is_string(v) ? json_string_value(v) : "";
}

static json_t *s_node(json_t *nodes, const char *name)
{
    json_t *arr = json_object_get(nodes, "nodes");
    for (size_t i = 0; i < json_array_size(arr); i++)
        if (!strcmp(s_str(json_array_get(arr, i), "name"), name))
            return json_array_get(arr, i);
    return NULL;
}

/* Every stage of `job` reported a next-hop link over TCP, never shared memory. */
static void s_expect_tcp_links(int job, int n_stages)
{
    char args[32];
    snprintf(args, sizeof(args), "status %d", job);
    json_t *st = s_ctl_json(args), *stages = json_object_get(st, "stages");
    cr_assert_eq(json_array_size(stages), (size_t)n_stages, "job %d: stages", job);
    if (getenv("UCX_TLS")) {
        cr_log_info("UCX_TLS is set: the transport choice is the user's, links not checked");
        json_decref(st);
        return;
    }
    for (size_t i = 0; i < json_array_size(stages); i++) {
        const char *link = s_str(json_object_get(json_array_get(stages, i), "stats"), "link");
        cr_expect(strstr(link, "tcp"), "job %d stage %zu: link '%s' is not tcp", job, i, link);
        cr_expect(!strstr(link, "posix") && !strstr(link, "sysv") && !strstr(link, "cma") &&
                      !strstr(link, "xpmem") && !strstr(link, "knem"),
                  "job %d stage %zu: link '%s' is shared memory between namespaces", job, i, link);
    }
    json_decref(st);
}

/* Read /proc/PID/ns/WHAT ("net:[4026531992]"). */
static void s_ns_id(pid_t pid, const char *what, char *out, size_t len)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/ns/%s", (int)pid, what);
    ssize_t n = readlink(path, out, len - 1);
    cr_assert_gt(n, 0, "readlink %s: %s", path, strerror(errno));
    out[n] = '\0';
}

TestSuite(netns, .fini = s_teardown, .timeout = 90);

Test(netns, three_hosts_over_tcp_equal_single_process)
{
    int rc;
    s_start();
    /* each daemon really is its own host: own network, UTS and IPC namespaces and host name */
    const char *kinds[] = {"net", "uts", "ipc"};
    for (int k = 0; k < 3; k++) {
        char ids[S_NODES + 1][64];
        s_ns_id(getpid(), kinds[k], ids[S_NODES], sizeof(ids[0]));
        for (int i = 0; i < S_NODES; i++) {
            s_ns_id(s_c.node[i], kinds[k], ids[i], sizeof(ids[0]));
            for (int j = 0; j <= S_NODES; j++)
                if (j < i || j == S_NODES)
                    cr_expect_str_neq(ids[i], ids[j], "node%d shares its %s namespace", i,
                                      kinds[k]);
        }
    }
    json_t *nodes = s_ctl_json("nodes");
    for (int i = 0; i < S_NODES; i++) {
        char name[16], host[32];
        snprintf(name, sizeof(name), "node%d", i);
        snprintf(host, sizeof(host), "pl%dh%d", (int)getpid(), i);
        json_t *n = s_node(nodes, name);
        cr_assert(n, "%s is not registered", name);
        cr_expect_str_eq(s_str(n, "host"), host, "%s reported the wrong host name", name);
    }
    json_decref(nodes);

    tc_job(&s_c, "greedy", "m", "max_new_tokens: 12\nstages: 3\n");
    char *ref = tc_reference(&s_c, "greedy"), *got = tc_submit(&s_c, "greedy", &rc);
    cr_assert_eq(rc, 0, "pipectl failed: %s", tc_err(&s_c, "greedy"));
    cr_assert_str_eq(got, ref);
    s_expect_tcp_links(1, 3);
    free(ref), free(got);
    s_passed = 1;
}

/* Poll a job's state until it is `want` (or a terminal state); returns the parsed status. */
static json_t *s_wait_state(int job, const char *want, double timeout_s)
{
    char args[32];
    snprintf(args, sizeof(args), "status %d", job);
    json_t *st = NULL;
    for (int i = 0; i < timeout_s * 20; i++) {
        json_decref(st);
        st = s_ctl_json(args);
        const char *state = s_str(st, "state");
        if (!strcmp(state, want) || !strcmp(state, "failed") || !strcmp(state, "done"))
            break;
        usleep(50 * 1000);
    }
    return st;
}

static double s_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Pull the cable of the daemon that runs stage `stage` mid-job: its bridge port goes down,
 * packets to and from it are dropped silently (no reset), as with a dead switch port, and the
 * daemon itself keeps running. The job resumes on the two others to the reference output. */
static void s_cut_case(int stage, const char *sampling, const char *what)
{
    int rc;
    s_start();
    char extra[256];
    snprintf(extra, sizeof(extra), "max_new_tokens: 300\nstop_at_eos: false\n%s", sampling);
    tc_job(&s_c, "long", "m", extra);
    char *ref = tc_reference(&s_c, "long");
    tc_sh(NULL, "%s/pipectl -c %s submit %s/long.yaml >/dev/null", tc_bin(), s_c.ep, s_c.dir);
    json_t *st = NULL;
    for (int i = 0; i < 600; i++) { /* running, some tokens out */
        json_decref(st);
        st = s_ctl_json("status 1");
        if (!strcmp(s_str(st, "state"), "running") &&
            json_number_value(json_object_get(json_object_get(st, "progress"), "generated")) >=
                40)
            break;
        usleep(50 * 1000);
    }
    cr_assert_str_eq(s_str(st, "state"), "running", "job never ran: %s", s_str(st, "note"));
    char victim[16];
    snprintf(victim, sizeof(victim), "%s",
             s_str(json_array_get(json_object_get(json_object_get(st, "plan"), "stages"),
                                  (size_t)stage),
                   "node"));
    cr_assert(!strncmp(victim, "node", 4), "no stage %d in the plan", stage);
    int v = atoi(victim + 4);
    json_decref(st);

    double t0 = s_now();
    cr_assert_eq(tc_sh(NULL, "ip link set %s down", s_n.veth[v]), 0);
    st = s_wait_state(1, "done", 120);
    cr_assert_str_eq(s_str(st, "state"), "done", "%s: job %s: %s", what, s_str(st, "state"),
                     s_str(st, "note"));
    json_t *rec = json_object_get(st, "recovery");
    cr_assert(json_is_object(rec), "%s: no recovery in the status", what);
    double detected = json_number_value(json_object_get(rec, "detected_at"));
    double first = json_number_value(json_object_get(rec, "first_token_at"));
    double from = json_number_value(json_object_get(rec, "from_tokens"));
    fprintf(stderr,
            "[resume] %-34s detection %.2f s, recovery (to the first new token) %.2f s, "
            "resumed from %.0f tokens (%s)\n",
            what, detected - t0, first - detected, from, s_str(rec, "why"));
    cr_expect_leq(detected - t0, S_DEAD_AFTER_S + 2.0, "%s: detected after %.1f s", what,
                  detected - t0);
    cr_assert_gt(from, 0, "%s: resumed from no tokens", what);
    json_t *ps = json_object_get(json_object_get(st, "plan"), "stages");
    cr_assert_eq(json_array_size(ps), 2, "%s: not re-planned on the two others", what);
    for (size_t i = 0; i < json_array_size(ps); i++)
        cr_expect_str_neq(s_str(json_array_get(ps, i), "node"), victim,
                          "stage %zu planned on the cut node", i);
    json_decref(st);
    char *got = NULL;
    rc = tc_sh(&got, "%s/pipectl -c %s --timeout 5 results 1 2>/dev/null", tc_bin(), s_c.ep);
    cr_assert_eq(rc, 0, "%s: no results", what);
    cr_assert_str_eq(got, ref, "%s: the resumed job's output differs", what);
    free(got);
    s_expect_tcp_links(1, 2);
    /* the coordinator knows the cut node is gone */
    cr_assert_eq(waitpid(s_c.coord, NULL, WNOHANG), 0, "the coordinator exited");
    json_t *nodes = NULL;
    for (int i = 0; i < 100; i++) {
        json_decref(nodes);
        nodes = s_ctl_json("nodes");
        if (!strcmp(s_str(s_node(nodes, victim), "state"), "lost"))
            break;
        usleep(100 * 1000);
    }
    cr_expect_str_eq(s_str(s_node(nodes, victim), "state"), "lost");
    json_decref(nodes);
    free(ref);
    s_passed = 1;
}

Test(netns, link_cut_middle_stage_resumes_greedy)
{
    s_cut_case(1, "", "cut link, middle stage, greedy");
}

Test(netns, link_cut_last_stage_resumes_seeded)
{
    s_cut_case(2, "sampling:\n  temperature: 0.8\n  seed: 21\n", "cut link, last stage, seeded");
}
