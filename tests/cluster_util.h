/* Helpers for integration tests that run a cluster of real processes: a coordinator and
 * daemons started with their logs in a scratch directory and the test's own state directory,
 * waited for until idle, stopped (the logs shown when a test fails). Processes, shell and files
 * are proc_util.h's, raw control messages wire_util.h's, jobs job_util.h's. */
#ifndef PL_TESTS_CLUSTER_UTIL_H
#define PL_TESTS_CLUSTER_UTIL_H

#include "proc_util.h"
#include "wire_util.h"

#define TC_MAX_PROCS 16

typedef struct {
    char dir[256]; /* scratch directory: logs, model, job files */
    char ep[96];   /* coordinator endpoint */
    pid_t coord;
    pid_t node[TC_MAX_PROCS];
    int n_nodes;
} tc_cluster_t;

/* Each test's processes share a state directory of their own (the local cluster's keys), which
 * the pipeld and pipectl children inherit through the environment. */
static inline void tc_use_state_dir(tc_cluster_t *c)
{
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/state", c->dir);
    setenv("PIPELD_STATE_DIR", dir, 1);
}

static inline void tc_start_coord(tc_cluster_t *c, const char *bind_ep)
{
    char bin[512], log[512], db[512];
    tc_use_state_dir(c);
    snprintf(bin, sizeof(bin), "%s/pipecoord", tc_bin());
    snprintf(log, sizeof(log), "%s/pipecoord.log", c->dir);
    snprintf(db, sizeof(db), "%s/coord.db", c->dir); /* each test its own state: ids from 1 */
    char *argv[] = {bin, "--endpoint",  (char *)bind_ep, "--state-db",
                    db,  "--log-level", "debug",         NULL};
    c->coord = tc_spawn(argv, log);
}

/* A coordinator on c->ep from the cluster file c->dir/cluster.yaml: its endpoint, then the YAML
 * lines `extra` (may be NULL); its database in c->dir, the test's own state directory. */
static inline void tc_start_coord_file(tc_cluster_t *c, const char *extra)
{
    char path[512], text[4096], bin[512], log[512], db[512];
    tc_use_state_dir(c);
    snprintf(path, sizeof(path), "%s/cluster.yaml", c->dir);
    int len =
        snprintf(text, sizeof(text), "coordinator:\n  endpoint: %s\n%s", c->ep, extra ? extra : "");
    cr_assert(len > 0 && (size_t)len < sizeof(text), "cluster file of %d bytes", len);
    tc_write(path, text);
    snprintf(bin, sizeof(bin), "%s/pipecoord", tc_bin());
    snprintf(log, sizeof(log), "%s/pipecoord.log", c->dir);
    snprintf(db, sizeof(db), "%s/coord.db", c->dir);
    char *argv[] = {bin, "--cluster", path, "--state-db", db, "--log-level", "debug", NULL};
    c->coord = tc_spawn(argv, log);
}

/* Start a daemon; `wrap` (may be NULL) is a prefix command line such as
 * "ip netns exec ns0 unshare --uts --ipc --". */
static inline void tc_start_node(tc_cluster_t *c, const char *name, int threads, const char *wrap)
{
    char cmd[1024], log[512];
    snprintf(log, sizeof(log), "%s/%s.log", c->dir, name);
    snprintf(cmd, sizeof(cmd), "exec %s %s/pipeld --name %s --coordinator %s --threads %d",
             wrap ? wrap : "", tc_bin(), name, c->ep, threads);
    char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    c->node[c->n_nodes++] = tc_spawn(argv, log);
}

/* Start daemon `name` into slot i (i == c->n_nodes: a new one; else it replaces a stopped one)
 * from a node file of its own: name, coordinator, threads and the YAML lines `extra` (may be
 * NULL), e.g. "memory_limit_mb: 8\n". */
static inline void tc_start_node_file(tc_cluster_t *c, int i, const char *name, int threads,
                                      const char *extra)
{
    char cmd[1024], log[512], path[512], text[1024];
    snprintf(log, sizeof(log), "%s/%s.log", c->dir, name);
    snprintf(path, sizeof(path), "%s/%s.node.yaml", c->dir, name);
    snprintf(text, sizeof(text), "name: %s\ncoordinator: %s\nthreads: %d\n%s", name, c->ep,
             threads, extra ? extra : "");
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "exec %s/pipeld --config %s", tc_bin(), path);
    char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    c->node[i] = tc_spawn(argv, log);
    if (i == c->n_nodes)
        c->n_nodes++;
}

/* Wait until `n` nodes are registered and idle; returns 0 when they are. */
static inline int tc_wait_idle(tc_cluster_t *c, int n, double timeout_s)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        char *out = NULL;
        tc_sh(&out, "%s/pipectl -c %s --timeout 2 -o json nodes 2>/dev/null", tc_bin(), c->ep);
        int idle = 0;
        for (char *p = out; (p = strstr(p, "\"state\": \"idle\"")); p++)
            idle++;
        free(out);
        if (idle >= n)
            return 0;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) * 1e-9 > timeout_s)
            return -1;
        usleep(100 * 1000);
    }
}

/* A fresh scratch directory, the test's own state directory and a free loopback endpoint in c;
 * nothing started. */
static inline void tc_cluster_init(tc_cluster_t *c)
{
    memset(c, 0, sizeof(*c));
    tc_mkdtemp(c->dir, sizeof(c->dir));
    tc_use_state_dir(c);
    snprintf(c->ep, sizeof(c->ep), "tcp://127.0.0.1:%d", tc_free_port());
}

/* Start a coordinator and n local daemons with the given thread counts on loopback. */
static inline int tc_cluster_start(tc_cluster_t *c, int n, const int *threads)
{
    tc_cluster_init(c);
    tc_start_coord(c, c->ep);
    for (int i = 0; i < n; i++) {
        char name[16];
        snprintf(name, sizeof(name), "node%d", i);
        tc_start_node(c, name, threads ? threads[i] : 1, NULL);
    }
    return tc_wait_idle(c, n, 60);
}

/* n more daemons (node0, node1, ... after the ones started) of one thread each; asserts that all
 * of the cluster's daemons registered and are idle. */
static inline void tc_start_nodes(tc_cluster_t *c, int n)
{
    for (int i = 0; i < n; i++) {
        char name[16];
        snprintf(name, sizeof(name), "node%d", c->n_nodes);
        tc_start_node(c, name, 1, NULL);
    }
    cr_assert_eq(tc_wait_idle(c, c->n_nodes, 60), 0, "daemons did not register");
}

/* tc_cluster_init, a coordinator from a cluster file with `extra` (tc_start_coord_file) and n
 * daemons registered and idle. */
static inline void tc_cluster_start_file(tc_cluster_t *c, const char *extra, int n)
{
    tc_cluster_init(c);
    tc_start_coord_file(c, extra);
    tc_start_nodes(c, n);
}

static inline void tc_cluster_stop(tc_cluster_t *c)
{
    if (c->coord > 0)
        tc_sh(NULL, "%s/pipectl -c %s --timeout 2 shutdown >/dev/null 2>&1", tc_bin(), c->ep);
    for (int i = 0; i < c->n_nodes; i++)
        if (c->node[i] > 0)
            kill(c->node[i], SIGTERM);
    if (c->coord > 0)
        kill(c->coord, SIGTERM);
    for (int i = 0; i < c->n_nodes; i++)
        if (c->node[i] > 0)
            waitpid(c->node[i], NULL, 0);
    if (c->coord > 0)
        waitpid(c->coord, NULL, 0);
    c->coord = 0;
    c->n_nodes = 0;
}

/* Print every log of the cluster (on failure, to see why). */
static inline void tc_dump_logs(const tc_cluster_t *c)
{
    tc_sh(NULL, "for f in %s/*.log; do echo \"== $f\" >&2; tail -n 30 \"$f\" >&2; done", c->dir);
}

/* The end of a cluster test: its daemons and coordinator stopped; their logs shown when the test
 * did not get to its end (`passed` false), else its directory removed. */
static inline void tc_cluster_end(tc_cluster_t *c, bool passed)
{
    if (c->coord > 0 && !passed)
        tc_dump_logs(c);
    tc_cluster_stop(c);
    if (passed && c->dir[0]) /* keep the logs of a failed test */
        tc_sh(NULL, "rm -rf %s", c->dir);
}

#endif
