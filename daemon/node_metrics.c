/* pipeld's metric families and the device gauges, read from the backend's health JSON (the
 * keys the GPU plugins write; a backend without health reports none). */
#include "daemon/node_metrics.h"

#include "common/util.h"
#include "transport/act_recv.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

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
        (st = pl_metrics_counter(r, "pipeld_serve_dropped_total",
                                 "Serving messages (SEQ_ADD, SEQ_CANCEL) dropped: for no "
                                 "deployment stage of this node at that epoch, or its queue full.",
                                 "reason", &m->serve_dropped)) ||
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

/* An integer of the health object, or -1. */
static int64_t s_int(json_t *h, const char *key)
{
    json_t *v = json_object_get(h, key);
    return json_is_number(v) && json_number_value(v) >= 0 ? (int64_t)json_number_value(v) : -1;
}

static double s_num(json_t *h, const char *key)
{
    json_t *v = json_object_get(h, key);
    return json_is_number(v) && json_number_value(v) >= 0 ? json_number_value(v) : -1;
}

/* The figures of a backend's health object, as the GPU plugins name them (NVML, ROCm SMI). */
static void s_dev_health(json_t *h, pl_msg_dev_health_t *d)
{
    d->mem_used = s_int(h, "memory_used_bytes");
    d->mem_total = s_int(h, "memory_total_bytes");
    if (d->mem_total < 0 && d->mem_used >= 0 && s_int(h, "memory_free_bytes") >= 0)
        d->mem_total = d->mem_used + s_int(h, "memory_free_bytes");
    if (d->mem_used > d->mem_total)
        d->mem_used = d->mem_total < 0 ? -1 : d->mem_total;
    d->util_pct = s_num(h, "utilization_gpu_pct");
    if (d->util_pct > 100)
        d->util_pct = 100;
    d->temp_c = s_num(h, "temperature_c");
    d->power_w = s_num(h, "power_w");
    int64_t e = 0;
    bool any = false;
    static const char *const keys[] = {"ecc_uncorrected_volatile", "ecc_corrected_volatile",
                                       "xid_errors"};
    for (size_t i = 0; i < PL_ARRAY_SIZE(keys); i++)
        if (s_int(h, keys[i]) >= 0) {
            e += s_int(h, keys[i]);
            any = true;
        }
    d->errors = any ? e : -1;
}

void pl_node_metrics_host(pl_msg_node_health_t *h)
{
    double load[3];
    if (getloadavg(load, 3) == 3) {
        h->load5 = load[1] > 0 ? load[1] : 0;
        h->load15 = load[2] > 0 ? load[2] : 0;
    }
    char line[256];
    long long v;
    FILE *f = fopen("/proc/meminfo", "r");
    while (f && fgets(line, sizeof(line), f)) {
        if (sscanf(line, "MemTotal: %lld kB", &v) == 1)
            h->mem_total_kb = v;
        else if (sscanf(line, "MemAvailable: %lld kB", &v) == 1)
            h->mem_avail_kb = v;
    }
    if (f)
        fclose(f);
    if (h->mem_avail_kb > h->mem_total_kb)
        h->mem_avail_kb = h->mem_total_kb;
    double mhz, sum = 0;
    int n = 0;
    f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "cpu MHz : %lf", &mhz) == 1 && mhz > 0 && mhz < 1e6) {
            sum += mhz;
            n++;
        }
    if (f)
        fclose(f);
    h->cpu_mhz = n ? sum / n : -1;
}

pl_status_t pl_node_metrics_device(pl_node_metrics_t *m, const char *id, pl_be_device_t *dev,
                                   pl_msg_dev_health_t *out)
{
    json_t *h = NULL;
    *out = (pl_msg_dev_health_t){.mem_used = -1, .mem_total = -1, .util_pct = -1, .temp_c = -1,
                                 .power_w = -1, .errors = -1};
    snprintf(out->id, sizeof(out->id), "%s", id);
    pl_status_t st = pl_be_device_health(dev, &h);
    if (st)
        return st;
    s_dev_health(h, out);
    s_gauge(m->mem_used, id, h, "memory_used_bytes", 1);
    s_gauge(m->mem_total, id, h, "memory_total_bytes", 1);
    s_gauge(m->util, id, h, "utilization_gpu_pct", 0.01);
    s_gauge(m->temp, id, h, "temperature_c", 1);
    s_gauge(m->power, id, h, "power_w", 1);
    json_decref(h);
    return PL_OK;
}
