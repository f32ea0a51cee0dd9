/* pipeld's metric families: what its stages record (pl_exec_metrics_t) and what the node loop
 * records — tokens, heartbeat misses, device health gauges from the backends' health slot. */
#ifndef PL_DAEMON_NODE_METRICS_H
#define PL_DAEMON_NODE_METRICS_H

#include "backends/backend.h"
#include "common/metrics.h"
#include "pipeline/exec.h"
#include "transport/msg.h"

typedef struct {
    pl_exec_metrics_t exec;
    pl_metric_t *tokens, *hb_misses, *stages, *rss;
    pl_metric_t *serve_dropped; /* SEQ_ADD / SEQ_CANCEL for no stage here, by reason */
    pl_metric_t *mem_used, *mem_total, *util, *temp, *power;
} pl_node_metrics_t;

pl_status_t pl_node_metrics_init(pl_node_metrics_t *m, pl_metrics_t *r);
/* Read a device's health into the device gauges (label device = id) and into *out (id and the
 * figures the backend reports, -1 the others). PL_ERR_UNSUPPORTED when its backend reports none
 * (*out then has none); another error when the device failed to answer. */
pl_status_t pl_node_metrics_device(pl_node_metrics_t *m, const char *id, pl_be_device_t *dev,
                                   pl_msg_dev_health_t *out);
/* The host's load, memory and CPU frequency (/proc) into h; what cannot be read stays -1. */
void pl_node_metrics_host(pl_msg_node_health_t *h);

#endif
