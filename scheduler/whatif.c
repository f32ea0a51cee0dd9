/* Described ("what-if") clusters: the devices and links of a cluster file's nodes[].devices and
 * links, for planning before anything is bought or started. */
#include "scheduler/whatif.h"

#include "common/util.h"
#include "scheduler/catalog.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_GIB (1024.0 * 1024.0 * 1024.0)

static int s_node_index(const pl_cfg_cluster_t *cl, const char *name)
{
    for (int i = 0; i < cl->n_nodes; i++)
        if (strcmp(cl->nodes[i].name, name) == 0)
            return i;
    return -1;
}

/* One planner device from entry e of node nd; idx is its index within its backend there. */
static pl_status_t s_device(const pl_cfg_node_entry_t *nd, int k, const pl_cfg_device_t *e, int idx,
                            pl_sched_device_t *out)
{
    pl_sched_device_t d = {0};
    if (e->kind[0]) {
        if (pl_sched_catalog_device(e->kind, e->compute_efficiency, e->memory_efficiency, nd->name,
                                    nd->address, &d))
            return pl_error_prefix(PL_ERR_NOT_FOUND, "node '%s', devices[%d]: ", nd->name, k);
        if (e->backend[0])
            snprintf(d.backend, sizeof(d.backend), "%s", e->backend);
    } else {
        snprintf(d.node, sizeof(d.node), "%s", nd->name);
        snprintf(d.host, sizeof(d.host), "%s", nd->address);
        snprintf(d.backend, sizeof(d.backend), "%s", e->backend[0] ? e->backend : "cuda");
        d.gflops = e->gflops;
        d.mem_gbps = e->mem_gbps;
        d.mem_bytes = (uint64_t)llround(e->mem_gb * S_GIB);
    }
    if (e->name[0])
        snprintf(d.name, sizeof(d.name), "%s", e->name);
    d.index = idx;
    d.reserve_bytes = (uint64_t)llround(e->reserve_gb * S_GIB);
    *out = d;
    return PL_OK;
}

pl_status_t pl_sched_whatif(const pl_cfg_cluster_t *cl, pl_sched_device_t **devs_p, int *n_p,
                               pl_sched_link_t **links_p)
{
    int n = 0, node_of[PL_SCHED_MAX_DEVICES];
    for (int i = 0; i < cl->n_nodes; i++) {
        if (cl->nodes[i].n_devices == 0)
            return pl_error(PL_ERR_INVALID,
                            "node '%s' lists no devices: a described cluster gives every node's "
                            "devices (nodes[].devices)",
                            cl->nodes[i].name);
        for (int k = 0; k < cl->nodes[i].n_devices; k++)
            n += cl->nodes[i].devices[k].count;
    }
    if (n == 0)
        return pl_error(PL_ERR_INVALID, "the cluster file describes no nodes with devices");
    if (n > PL_SCHED_MAX_DEVICES)
        return pl_error(PL_ERR_RANGE, "%d devices described; the planner takes at most %d", n,
                        PL_SCHED_MAX_DEVICES);
    pl_sched_device_t *devs = calloc((size_t)n, sizeof(*devs));
    pl_sched_link_t *links = NULL;
    pl_status_t st = PL_OK;
    if (!devs)
        return pl_error(PL_ERR_NOMEM, "what-if devices: out of memory");
    int at = 0;
    for (int i = 0; i < cl->n_nodes; i++) {
        const pl_cfg_node_entry_t *nd = &cl->nodes[i];
        for (int k = 0; k < nd->n_devices; k++) {
            for (int c = 0; c < nd->devices[k].count; c++) {
                int idx = 0; /* index within its backend on this node */
                pl_sched_device_t d;
                if ((st = s_device(nd, k, &nd->devices[k], 0, &d)))
                    goto err;
                for (int j = 0; j < at; j++)
                    idx += node_of[j] == i && !strcmp(devs[j].backend, d.backend);
                d.index = idx;
                node_of[at] = i;
                devs[at++] = d;
            }
        }
    }
    if (cl->n_links > 0) {
        links = calloc((size_t)n * (size_t)n, sizeof(*links));
        if (!links) {
            st = pl_error(PL_ERR_NOMEM, "what-if links: out of memory");
            goto err;
        }
        for (int l = 0; l < cl->n_links; l++) {
            const pl_cfg_link_t *e = &cl->links[l];
            int a = s_node_index(cl, e->from), b = s_node_index(cl, e->to);
            if (a < 0 || b < 0) {
                st = pl_error(PL_ERR_INVALID, "links[%d].%s: no node '%s' in the cluster file", l,
                              a < 0 ? "from" : "to", a < 0 ? e->from : e->to);
                goto err;
            }
            pl_sched_link_t v = {.gbps = e->gbps, .latency_s = e->latency_us * 1e-6};
            for (int x = 0; x < n; x++)
                for (int y = 0; y < n; y++)
                    if ((node_of[x] == a && node_of[y] == b) ||
                        (node_of[x] == b && node_of[y] == a))
                        links[(size_t)x * n + y] = v;
        }
    }
    *devs_p = devs;
    *n_p = n;
    *links_p = links;
    return PL_OK;
err:
    free(devs);
    free(links);
    return st;
}
