/* The node verbs: `nodes` (the cluster's nodes and devices) and `health NODE` (one node's
 * devices, heartbeat and missing backends). */
#include "tools/pipectl/pipectl.h"

#include "common/config.h"

#include <stdio.h>
#include <string.h>


static int s_nodes(pl_pipectl_t *c)
{
    json_t *r, *n;
    size_t i;
    pl_msg_t q;
    pl_msg_init(&q, PL_MSG_NODES);
    if (pl_pipectl_call(c, &q, &r))
        return 1;
    json_t *sec = json_object_get(r, "security");
    if (json_is_true(json_object_get(sec, "insecure")))
        fprintf(stderr, "pipectl: WARNING: this cluster runs with security.insecure: anyone who "
                        "reaches %s may submit, read every result and shut it down\n",
                c->endpoint);
    if (c->json) {
        pl_pipectl_print_json(r);
        json_decref(r);
        return 0;
    }
    printf("%-12s %-16s %-8s %-5s %-8s %6s %10s %10s %10s\n", "NODE", "HOST", "STATE", "JOB",
           "DEVICE", "CORES", "GFLOP/S", "GB/S", "MEM(GiB)");
    json_array_foreach(json_object_get(r, "nodes"), i, n)
    {
        json_t *d = json_array_get(json_object_get(n, "devices"), 0);
        printf("%-12s %-16s %-8s %-5d %-8s %6d %10.1f %10.1f %10.2f\n", pl_pipectl_str(n, "name"),
               pl_pipectl_str(n, "host"), pl_pipectl_str(n, "state"), (int)pl_pipectl_num(n, "job"),
               d ? pl_pipectl_str(d, "id") : "-", d ? (int)pl_pipectl_num(d, "cores") : 0,
               d ? pl_pipectl_num(d, "gflops") : 0, d ? pl_pipectl_num(d, "mem_gbps") : 0,
               d ? pl_pipectl_num(d, "mem_bytes") / 1073741824.0 : 0);
    }
    json_decref(r);
    return 0;
}

static int s_health(pl_pipectl_t *c, const char *node)
{
    json_t *r, *d;
    size_t i;
    pl_msg_t q;
    pl_msg_init(&q, PL_MSG_HEALTH);
    if (strlen(node) > PL_CFG_NAME_MAX)
        return pl_pipectl_die("no node '%s'", node);
    snprintf(q.health.node, sizeof(q.health.node), "%s", node);
    if (pl_pipectl_call(c, &q, &r))
        return 1;
    if (c->json) {
        pl_pipectl_print_json(r);
        json_decref(r);
        return 0;
    }
    json_t *hb = json_object_get(r, "heartbeat");
    printf("node:       %s (%s)\n", pl_pipectl_str(r, "name"), pl_pipectl_str(r, "host"));
    printf("state:      %s, last heartbeat %.2f s ago, up %.0f s\n", pl_pipectl_str(r, "state"),
           pl_pipectl_num(r, "last_seen_s"), pl_pipectl_num(r, "uptime_s"));
    printf("load:       %.2f   rss: %.1f MiB   stages: %zu\n", pl_pipectl_num(hb, "load1"),
           pl_pipectl_num(hb, "rss_kb") / 1024.0, json_array_size(json_object_get(hb, "stages")));
    json_array_foreach(json_object_get(r, "devices"), i, d)
    {
        const json_t *l = json_object_get(d, "learned");
        printf("device:     %s  %s, %d cores, %.2f GiB, %.1f GFLOP/s, %.1f GB/s\n",
               pl_pipectl_str(d, "id"), pl_pipectl_str(d, "name"), (int)pl_pipectl_num(d, "cores"),
               pl_pipectl_num(d, "mem_bytes") / 1073741824.0, pl_pipectl_num(d, "gflops"), pl_pipectl_num(d, "mem_gbps"));
        if (json_is_object(l))
            printf("            planned with %.1f GFLOP/s, %.1f GB/s (learned from %d job%s)\n",
                   pl_pipectl_num(l, "gflops"), pl_pipectl_num(l, "mem_gbps"), (int)pl_pipectl_num(l, "jobs"),
                   pl_pipectl_num(l, "jobs") == 1 ? "" : "s");
    }
    json_array_foreach(json_object_get(r, "unavailable"), i, d)
        printf("no %-8s %s\n", pl_pipectl_str(d, "backend"), pl_pipectl_str(d, "why"));
    json_decref(r);
    return 0;
}

int pl_pipectl_nodes(pl_pipectl_t *c, char **args, int n_args)
{
    (void)args;
    (void)n_args;
    return s_nodes(c);
}

int pl_pipectl_health(pl_pipectl_t *c, char **args, int n_args)
{
    (void)n_args;
    return s_health(c, args[0]);
}
