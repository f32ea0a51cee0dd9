/* The node verbs: `nodes` (the cluster's nodes and devices), `health [NODE]` (each node's state,
 * heartbeat, host and device health; answered also when some nodes are down, naming them),
 * `describe node NAME`, and `drain` / `undrain NODE` (an admin's: no new stages there). */
#include "tools/pipectl/pipectl.h"

#include "common/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_STR pl_pipectl_str
#define S_NUM pl_pipectl_num

/* A figure the node reported, or "-" (absent or -1: unknown). */
static const char *s_fig(const json_t *o, const char *k, const char *fmt, double scale, char *b,
                         size_t n)
{
    const json_t *v = json_object_get(o, k);
    if (!json_is_number(v) || json_number_value(v) < 0)
        return "-";
    snprintf(b, n, fmt, json_number_value(v) * scale);
    return b;
}

static int s_fetch_nodes(pl_pipectl_t *c, json_t **r_p)
{
    pl_msg_t q;
    pl_msg_init(&q, PL_MSG_NODES);
    int rc = pl_pipectl_call(c, &q, r_p);
    if (rc)
        return rc;
    json_t *sec = json_object_get(*r_p, "security");
    static bool warned;
    if (!warned && json_is_true(json_object_get(sec, "insecure")))
        fprintf(stderr,
                "pipectl: WARNING: this cluster runs with security.insecure: anyone who "
                "reaches %s may submit, read every result and shut it down\n",
                c->endpoint);
    warned = true;
    return 0;
}

static int s_render_nodes(pl_pipectl_t *c, char **args, int n_args, FILE *f, bool *final_p)
{
    (void)args;
    (void)n_args;
    json_t *r, *n;
    size_t i;
    int rc = s_fetch_nodes(c, &r);
    *final_p = false;
    if (rc)
        return rc;
    if (pl_pipectl_print_answer(c, f, r))
        return 0;
    bool wide = c->out == PL_PIPECTL_OUT_WIDE;
    fprintf(f, "%-12s %-16s %-11s %-5s %-8s %6s %10s %10s %10s", "NODE", "HOST", "STATUS", "JOB",
            "DEVICE", "CORES", "GFLOP/S", "GB/S", "MEM(GiB)");
    fprintf(f, wide ? " %8s %8s %-8s %s\n" : "\n", "HB AGE", "UPTIME", "VERSION", "STAGES");
    json_array_foreach(json_object_get(r, "nodes"), i, n)
    {
        json_t *d = json_array_get(json_object_get(n, "devices"), 0);
        fprintf(f, "%-12s %-16s %-11s %-5d %-8s %6d %10.1f %10.1f %10.2f", S_STR(n, "name"),
                S_STR(n, "host"), S_STR(n, "status"), (int)S_NUM(n, "job"),
                d ? S_STR(d, "id") : "-", d ? (int)S_NUM(d, "cores") : 0,
                d ? S_NUM(d, "gflops") : 0, d ? S_NUM(d, "mem_gbps") : 0,
                d ? S_NUM(d, "mem_bytes") / 1073741824.0 : 0);
        if (wide) {
            char a[24], b[24], st[128] = "";
            size_t k, m = 0;
            json_t *s;
            json_array_foreach(json_object_get(n, "stages"), k, s)
            {
                if (m < sizeof(st))
                    m += (size_t)snprintf(st + m, sizeof(st) - m, "%s%d/%d", k ? "," : "",
                                          (int)S_NUM(s, "job"), (int)S_NUM(s, "stage"));
            }
            fprintf(f, " %8s %8s %-8s %s", s_fig(n, "last_seen_s", "%.1fs", 1, a, sizeof(a)),
                    s_fig(n, "uptime_s", "%.0fs", 1, b, sizeof(b)),
                    *S_STR(n, "version") ? S_STR(n, "version") : "-", m ? st : "-");
        }
        fputc('\n', f);
    }
    json_decref(r);
    return 0;
}

int pl_pipectl_nodes(pl_pipectl_t *c, char **args, int n_args)
{
    return pl_pipectl_watch(c, s_render_nodes, args, n_args);
}

/* One node's health, as `health` and `describe node` show it. */
static void s_health_of(FILE *f, const json_t *r, bool detail)
{
    const json_t *hb = json_object_get(r, "heartbeat"), *sys = json_object_get(hb, "system");
    char a[32], b[32], c[32], d[32], e[32], g[32];
    size_t i;
    json_t *v;
    fprintf(f, "node:       %s (%s)\n", S_STR(r, "name"), S_STR(r, "host"));
    if (json_is_number(json_object_get(r, "last_seen_s")))
        fprintf(f, "state:      %s, last heartbeat %.2f s ago, up %.0f s, version %s\n",
                S_STR(r, "status"), S_NUM(r, "last_seen_s"), S_NUM(r, "uptime_s"),
                *S_STR(r, "version") ? S_STR(r, "version") : "-");
    else
        fprintf(f, "state:      %s (never registered)\n", S_STR(r, "status"));
    if (json_is_object(hb))
        fprintf(f,
                "host:       load %.2f / %s / %s, memory %s of %s GiB free, cpu %s MHz, "
                "rss %.1f MiB\n",
                S_NUM(hb, "load1"), s_fig(sys, "load5", "%.2f", 1, a, sizeof(a)),
                s_fig(sys, "load15", "%.2f", 1, b, sizeof(b)),
                s_fig(sys, "mem_avail_kb", "%.1f", 1.0 / 1048576, c, sizeof(c)),
                s_fig(sys, "mem_total_kb", "%.1f", 1.0 / 1048576, d, sizeof(d)),
                s_fig(sys, "cpu_mhz", "%.0f", 1, e, sizeof(e)), S_NUM(hb, "rss_kb") / 1024.0);
    json_array_foreach(json_object_get(r, "devices"), i, v)
    {
        const json_t *l = json_object_get(v, "learned"), *h = NULL, *x;
        size_t k;
        json_array_foreach(json_object_get(sys, "devices"), k, x)
        {
            if (!strcmp(S_STR(x, "id"), S_STR(v, "id")))
                h = x;
        }
        fprintf(f, "device:     %s  %s, %d cores, %.2f GiB, %.1f GFLOP/s, %.1f GB/s",
                S_STR(v, "id"), S_STR(v, "name"), (int)S_NUM(v, "cores"),
                S_NUM(v, "mem_bytes") / 1073741824.0, S_NUM(v, "gflops"), S_NUM(v, "mem_gbps"));
        if (S_NUM(v, "host_gbps") > 0) /* what the stages of daemons on its host share */
            fprintf(f, " (host %.1f GB/s)", S_NUM(v, "host_gbps"));
        fputc('\n', f);
        if (h)
            fprintf(f,
                    "            memory %s / %s GiB used, utilisation %s%%, %s C, %s W, "
                    "errors %s\n",
                    s_fig(h, "memory_used_bytes", "%.2f", 1.0 / 1073741824, a, sizeof(a)),
                    s_fig(h, "memory_total_bytes", "%.2f", 1.0 / 1073741824, b, sizeof(b)),
                    s_fig(h, "utilization_pct", "%.0f", 1, c, sizeof(c)),
                    s_fig(h, "temperature_c", "%.0f", 1, d, sizeof(d)),
                    s_fig(h, "power_w", "%.1f", 1, e, sizeof(e)),
                    s_fig(h, "errors", "%.0f", 1, g, sizeof(g)));
        if (json_is_object(l))
            fprintf(f, "            planned with %.1f GFLOP/s, %.1f GB/s (learned from %d job%s)\n",
                    S_NUM(l, "gflops"), S_NUM(l, "mem_gbps"), (int)S_NUM(l, "jobs"),
                    S_NUM(l, "jobs") == 1 ? "" : "s");
    }
    char tl[256] = "", st[256] = "";
    size_t m = 0;
    json_array_foreach(json_object_get(r, "transports"), i, v)
    {
        if (m < sizeof(tl))
            m += (size_t)snprintf(tl + m, sizeof(tl) - m, "%s%s", i ? ", " : "",
                                  json_string_value(v));
    }
    m = 0;
    json_array_foreach(json_object_get(r, "stages"), i, v)
    {
        if (m < sizeof(st))
            m += (size_t)snprintf(st + m, sizeof(st) - m, "%sjob %d stage %d", i ? ", " : "",
                                  (int)S_NUM(v, "job"), (int)S_NUM(v, "stage"));
    }
    fprintf(f, "stages:     %s\n", st[0] ? st : "none");
    if (detail || tl[0])
        fprintf(f, "transports: %s\n", tl[0] ? tl : "none measured yet");
    char ux[512] = "";
    m = 0;
    json_array_foreach(json_object_get(sys, "ucx_transports"), i, v)
    {
        if (m < sizeof(ux))
            m += (size_t)snprintf(ux + m, sizeof(ux) - m, "%s%s", i ? ", " : "",
                                  json_string_value(v));
    }
    if (detail || ux[0])
        fprintf(f, "ucx has:    %s\n", ux[0] ? ux : "not reported");
    json_array_foreach(json_object_get(r, "unavailable"), i, v)
        fprintf(f, "no %-8s %s\n", S_STR(v, "backend"), S_STR(v, "why"));
}

/* health NODE: that node's HEALTH; health: every node's, from one NODES answer, the
 * unreachable ones named first. */
static int s_render_health(pl_pipectl_t *c, char **args, int n_args, FILE *f, bool *final_p)
{
    json_t *r;
    int rc;
    *final_p = false;
    if (n_args == 1) {
        pl_msg_t q;
        pl_msg_init(&q, PL_MSG_HEALTH);
        if (strlen(args[0]) > PL_CFG_NAME_MAX)
            return pl_pipectl_die("no node '%s'", args[0]);
        snprintf(q.health.node, sizeof(q.health.node), "%s", args[0]);
        if ((rc = pl_pipectl_call(c, &q, &r)))
            return rc;
        if (c->json)
            pl_pipectl_print_to(c, f, r);
        else
            s_health_of(f, r, false);
        json_decref(r);
        return 0;
    }
    if ((rc = s_fetch_nodes(c, &r)))
        return rc;
    json_t *nodes = json_object_get(r, "nodes"), *n, *down = json_array();
    size_t i;
    json_array_foreach(nodes, i, n)
    {
        if (!strcmp(S_STR(n, "status"), "unreachable"))
            json_array_append_new(down, json_string(S_STR(n, "name")));
    }
    if (c->json) {
        json_t *o = json_pack("{s:O, s:o}", "nodes", nodes, "unreachable", down);
        pl_pipectl_print_to(c, f, o);
        json_decref(o);
    } else {
        if (json_array_size(down)) {
            fprintf(f, "unreachable: ");
            json_array_foreach(down, i, n)
            {
                fprintf(f, "%s%s", i ? ", " : "", json_string_value(n));
            }
            fprintf(f, " (%zu of %zu nodes)\n\n", json_array_size(down), json_array_size(nodes));
        }
        json_decref(down);
        json_array_foreach(nodes, i, n)
        {
            if (i)
                fputc('\n', f);
            s_health_of(f, n, false);
        }
    }
    json_decref(r);
    return 0;
}

int pl_pipectl_health(pl_pipectl_t *c, char **args, int n_args)
{
    return pl_pipectl_watch(c, s_render_health, args, n_args);
}

int pl_pipectl_describe_node(pl_pipectl_t *c, const char *name)
{
    json_t *r;
    pl_msg_t q;
    int rc;
    pl_msg_init(&q, PL_MSG_HEALTH);
    if (strlen(name) > PL_CFG_NAME_MAX)
        return pl_pipectl_die("no node '%s'", name);
    snprintf(q.health.node, sizeof(q.health.node), "%s", name);
    if ((rc = pl_pipectl_call(c, &q, &r)))
        return rc;
    if (c->json)
        pl_pipectl_print(c, r);
    else
        s_health_of(stdout, r, true);
    json_decref(r);
    return 0;
}

static int s_drain(pl_pipectl_t *c, const char *node, bool drain)
{
    json_t *r;
    pl_msg_t q;
    int rc;
    pl_msg_init(&q, PL_MSG_DRAIN);
    if (strlen(node) > PL_CFG_NAME_MAX)
        return pl_pipectl_die("no node '%s'", node);
    snprintf(q.drain.node, sizeof(q.drain.node), "%s", node);
    q.drain.drain = drain;
    if ((rc = pl_pipectl_call(c, &q, &r)))
        return rc;
    if (c->json)
        pl_pipectl_print(c, r);
    else
        printf("node %s %s\n", node,
               drain ? "drained: no new stages (running ones finish)" : "undrained");
    json_decref(r);
    return 0;
}

int pl_pipectl_drain(pl_pipectl_t *c, char **args, int n_args)
{
    (void)n_args;
    return s_drain(c, args[0], true);
}

int pl_pipectl_undrain(pl_pipectl_t *c, char **args, int n_args)
{
    (void)n_args;
    return s_drain(c, args[0], false);
}
