/* A small metrics registry both processes share: counters, gauges and fixed-bucket histograms
 * with at most one label, rendered in the Prometheus text exposition format 0.0.4. */
#ifndef PL_COMMON_METRICS_H
#define PL_COMMON_METRICS_H

#include "common/status.h"

#include <stddef.h>

#define PL_METRICS_MAX_FAMILIES 64
#define PL_METRICS_MAX_SERIES 64  /* label values per family; later ones are dropped */
#define PL_METRICS_MAX_BUCKETS 16 /* histogram upper bounds, +Inf besides */
#define PL_METRICS_LABEL_MAX 96   /* bytes of a label value kept */

typedef enum { PL_METRIC_COUNTER, PL_METRIC_GAUGE, PL_METRIC_HISTOGRAM } pl_metric_kind_t;

typedef struct pl_metrics pl_metrics_t;
typedef struct pl_metric pl_metric_t;

/* Every function below is safe from any thread; a registry's metrics live as long as it. */
pl_status_t pl_metrics_new(pl_metrics_t **metrics_p);
/* Free the registry and its metrics; *metrics_p NULL; safe on NULL. */
void pl_metrics_destroy(pl_metrics_t **metrics_p);

/* Register a metric family. `name` follows Prometheus naming ([a-zA-Z_:][a-zA-Z0-9_:]*, a
 * counter ends in _total), `label` is NULL or one label name; a histogram takes `n_bounds`
 * increasing upper bounds. Misuse (bad name, duplicate, full registry) is an error. */
pl_status_t pl_metrics_counter(pl_metrics_t *r, const char *name, const char *help,
                               const char *label, pl_metric_t **metric_p);
pl_status_t pl_metrics_gauge(pl_metrics_t *r, const char *name, const char *help, const char *label,
                             pl_metric_t **metric_p);
pl_status_t pl_metrics_histogram(pl_metrics_t *r, const char *name, const char *help,
                                 const char *label, const double *bounds, int n_bounds,
                                 pl_metric_t **metric_p);

/* Update the series of `label_value` (NULL for a family without label; created on first use).
 * add: counters (v >= 0, else ignored) and gauges; set: gauges; observe: histograms. A NULL
 * metric is a no-op, so optional recording needs no branches at the call sites. */
void pl_metrics_add(pl_metric_t *m, const char *label_value, double v);
void pl_metrics_set(pl_metric_t *m, const char *label_value, double v);
void pl_metrics_observe(pl_metric_t *m, const char *label_value, double v);
/* Drop every series of a gauge (before setting a fresh breakdown, such as jobs by state). */
void pl_metrics_clear(pl_metric_t *m);

/* The whole registry as exposition text (caller frees *text_p). */
pl_status_t pl_metrics_render(pl_metrics_t *r, char **text_p, size_t *len_p);

#endif
