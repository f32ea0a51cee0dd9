/* pipeld's metric families and the device gauges, read from the backend's health JSON (the
 * keys the GPU plugins write; a backend without health reports none). */
#include "daemon/node_metrics.h"

#include "common/util.h"
#include "transport/act_recv.h"

#include <jansson.h>

/* One forward call of a stage, seconds: a tiny CPU layer to a large prefill. */
static const double s_compute_bounds[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                          0.1,    0.25,  0.5,    1,     2.5,  5,     10};

pl_status_t pl_node_metrics_init(pl_node_metrics_t *m, pl_metrics_t *r)
{
    pl_status_t st;
    if ((st = pl_metrics_histogram(r, "pipeld_stage_compute_seconds",
                                   "Time of one stage forward call (one microbatch step).", NULL,
                                   s_compute_bounds, (int)PL_ARRAY_SIZE(s_compute_bounds),
                                   &m->exec.compute_s)) ||
        (st = pl_metrics_counter(r, "pipeld_microbatches_total",
                                 "Microbatch steps computed by this node's stages.", NULL,
                                 &m->exec.microbatches)) ||
        (st = pl_metrics_counter(r, "pipeld_link_bytes_total",
                                 "Activation bytes sent to the next stage, by that stage.", "peer",
                                 &m->exec.link_bytes)) ||
        (st = pl_metrics_gauge(r, "pipeld_kv_slots_used",
                               "KV cache slots (sequences) held by this node's stages.", NULL,
                               &m->exec.kv_slots)) ||
        (st = pl_metrics_counter(r, "pipeld_act_dropped_total",
                                 "Data-plane messages this node's stages refused: not the job's "
                                 "token, malformed, or longer than a slot.",
                                 "reason", &m->exec.act_dropped)) ||
        (st = pl_metrics_counter(r, "pipeld_tokens_generated_total",
                                 "Tokens sampled by last stages running on this node.", NULL,
                                 &m->tokens)) ||
        (st = pl_metrics_counter(r, "pipeld_heartbeat_misses_total",
                                 "Heartbeats the coordinator did not answer before the next.", NULL,
                                 &m->hb_misses)) ||
        (st = pl_metrics_gauge(r, "pipeld_stages", "Stages loaded on this node.", NULL,
                               &m->stages)) ||
        (st = pl_metrics_gauge(r, "pipeld_process_resident_memory_bytes",
                               "Resident memory of the daemon process.", NULL, &m->rss)) ||
        (st = pl_metrics_gauge(r, "pipeld_device_memory_used_bytes",
                               "Device memory in use, where the backend reports it.", "device",
                               &m->mem_used)) ||
        (st = pl_metrics_gauge(r, "pipeld_device_memory_total_bytes",
                               "Device memory in all, where the backend reports it.", "device",
                               &m->mem_total)) ||
        (st = pl_metrics_gauge(r, "pipeld_device_utilization_ratio",
                               "Device busy share (0-1), where the backend reports it.", "device",
                               &m->util)) ||
        (st = pl_metrics_gauge(r, "pipeld_device_temperature_celsius",
                               "Device temperature, where the backend reports it.", "device",
                               &m->temp)) ||
        (st = pl_metrics_gauge(r, "pipeld_device_power_watts",
                               "Device power draw, where the backend reports it.", "device",
                               &m->power)))
        return st;
    pl_metrics_set(m->stages, NULL, 0);
    pl_metrics_set(m->exec.kv_slots, NULL, 0);
    pl_metrics_add(m->tokens, NULL, 0);
    pl_metrics_add(m->hb_misses, NULL, 0);
    pl_metrics_add(m->exec.microbatches, NULL, 0);
    for (int i = 0; i < PL_ACT_DROP_COUNT; i++) /* every reason shows, also at 0 */
        pl_metrics_add(m->exec.act_dropped, pl_act_drop_reason((pl_act_drop_t)i), 0);
    return PL_OK;
}

/* A number of the health object, scaled, into a gauge; absent or not a number: left out. */
static void s_gauge(pl_metric_t *g, const char *id, json_t *h, const char *key, double scale)
{
    json_t *v = json_object_get(h, key);
    if (json_is_number(v))
        pl_metrics_set(g, id, json_number_value(v) * scale);
}

pl_status_t pl_node_metrics_device(pl_node_metrics_t *m, const char *id, pl_be_device_t *dev)
{
    json_t *h = NULL;
    pl_status_t st = pl_be_device_health(dev, &h);
    if (st)
        return st;
    s_gauge(m->mem_used, id, h, "memory_used_bytes", 1);
    s_gauge(m->mem_total, id, h, "memory_total_bytes", 1);
    s_gauge(m->util, id, h, "utilization_gpu_pct", 0.01);
    s_gauge(m->temp, id, h, "temperature_c", 1);
    s_gauge(m->power, id, h, "power_w", 1);
    json_decref(h);
    return PL_OK;
}
