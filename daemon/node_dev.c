/* pipeld's devices (node_dev.h): every device of the backends the node file wants, opened,
 * calibrated and sized as the node file says; the backends that offer none, with the reason. */
#include "daemon/node_dev.h"

#include "common/log.h"
#include "common/util.h"

#include <stdio.h>
#include <string.h>

static bool s_backend_wanted(const pl_cfg_node_t *cfg, const char *name)
{
    if (cfg->n_devices == 0)
        return true;
    for (int i = 0; i < cfg->n_devices; i++)
        if (strcmp(cfg->devices[i], name) == 0)
            return true;
    return false;
}

/* A backend that offers no device, for HELLO (and so for `pipectl health`). */
static void s_unavailable(pl_node_devs_t *n, const char *backend, const char *why)
{
    if (n->n_unavailable == PL_MSG_MAX_UNAVAILABLE)
        return;
    pl_msg_unavailable_t *u = &n->unavailable[n->n_unavailable++];
    snprintf(u->backend, sizeof(u->backend), "%s", backend);
    snprintf(u->why, sizeof(u->why), "%s", why);
}

pl_status_t pl_node_devs_discover(const pl_cfg_node_t *cfg, pl_node_devs_t *n)
{
    pl_be_entry_t be[8];
    int nb = pl_be_registry_list(be, 8);
    for (int b = 0; b < nb; b++) {
        if (!s_backend_wanted(cfg, be[b].name))
            continue;
        pl_be_device_info_t infos[PL_NODE_MAX_DEVS];
        int nd = 0;
        if (!be[b].backend) {
            pl_log_info("backend %s: unavailable: %s", be[b].name, be[b].why);
            s_unavailable(n, be[b].name, be[b].why);
            continue;
        }
        pl_status_t st = pl_be_probe(be[b].backend, infos, PL_NODE_MAX_DEVS, &nd);
        if (st) {
            pl_log_info("backend %s: no devices: %s", be[b].name, pl_error_msg());
            s_unavailable(n, be[b].name, pl_error_msg());
            continue;
        }
        for (int d = 0; d < nd && n->n_devs < PL_NODE_MAX_DEVS; d++) {
            pl_node_dev_t *dv = &n->devs[n->n_devs];
            dv->info = infos[d];
            if ((st = pl_be_device_open(be[b].backend, infos[d].index, cfg->threads, &dv->dev))) {
                pl_log_warn("device %s:%d: cannot open: %s", be[b].name, d, pl_error_msg());
                continue;
            }
            /* a CPU device computes with the threads it was opened with, not every core of the
             * host: HELLO's cores is what the planner splits shared CPUs by */
            if (!strcmp(infos[d].backend, "cpu") && cfg->threads > 0 &&
                cfg->threads < dv->info.cores)
                dv->info.cores = cfg->threads;
            /* testing (node file `slowdown`): the device really runs that many times slower,
             * and calibrates accordingly */
            if (cfg->slowdown > 1.0f && !strcmp(infos[d].backend, "cpu")) {
                pl_be_device_set_slowdown(dv->dev, cfg->slowdown);
                pl_log_warn("device %s:%d: slowed down %.2fx for testing", be[b].name, d,
                            (double)cfg->slowdown);
            }
            double t0 = pl_now();
            if ((st = pl_be_device_calibrate(dv->dev, &dv->calib))) {
                pl_log_warn("device %s:%d: calibration failed: %s", be[b].name, d, pl_error_msg());
                pl_be_device_close(&dv->dev);
                continue;
            }
            uint64_t reserve = (uint64_t)cfg->memory_reserve_mb << 20;
            dv->info.mem_bytes = dv->info.mem_bytes > reserve ? dv->info.mem_bytes - reserve : 0;
            uint64_t cap = (uint64_t)cfg->memory_limit_mb << 20;
            if (cap && dv->info.mem_bytes > cap)
                dv->info.mem_bytes = cap;
            char id[sizeof(dv->id)];
            snprintf(id, sizeof(id), "%.15s:%d", infos[d].backend, infos[d].index);
            memcpy(dv->id, id, sizeof(id));
            pl_log_info("device %s: %s, %d cores, %.1f GiB usable, %.1f GFLOP/s, %.1f GB/s, "
                        "decode rows %.1f GFLOP/s, prefill passes %.2f GB/s, attention %.1f "
                        "GFLOP/s, host %.1f GB/s (calibrated in %.2f s)",
                        dv->id, dv->info.name, dv->info.cores, dv->info.mem_bytes / 1073741824.0,
                        dv->calib.gflops, dv->calib.mem_gbps, dv->calib.dec_gflops,
                        dv->calib.pass_gbps, dv->calib.attn_gflops, dv->calib.host_gbps,
                        pl_now() - t0);
            n->n_devs++;
        }
    }
    if (n->n_devs == 0)
        return pl_error(PL_ERR_NO_DEVICE, "no usable device on this node");
    return PL_OK;
}

void pl_node_devs_close(pl_node_devs_t *n)
{
    for (int i = 0; i < n->n_devs; i++)
        pl_be_device_close(&n->devs[i].dev);
}
