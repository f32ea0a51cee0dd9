/* A process's HTTP front: its metrics registry and /metrics, /livez, /readyz on the shared HTTP
 * server; other routes (the OpenAI API) join through pl_front_start's extra routes. */
#ifndef PL_DAEMON_FRONT_H
#define PL_DAEMON_FRONT_H

#include "common/config.h"
#include "common/metrics.h"
#include "daemon/http.h"

#include <stdbool.h>

typedef struct pl_front pl_front_t;

/* Create the registry and, when cfg->port is set, serve it at cfg's address (0 ports: no
 * server, metrics are still recorded). Starts not ready. */
pl_status_t pl_front_start(const pl_cfg_http_t *cfg, const pl_http_route_t *extra, int n_extra,
                           pl_front_t **front_p);
pl_metrics_t *pl_front_metrics(pl_front_t *front);
/* The port served; 0 when off. */
int pl_front_port(const pl_front_t *front);
/* Its own routes (/metrics, /livez, /readyz) into out[0..2]; returns 3. For servers and
 * harnesses that route requests themselves. */
int pl_front_routes(pl_front_t *front, pl_http_route_t out[3]);
/* Publish readiness for /readyz (why: shown while not ready). Any thread. */
void pl_front_set_ready(pl_front_t *front, bool ready, const char *why);
/* Stop the server and free the registry; *front_p NULL; safe on NULL. */
void pl_front_stop(pl_front_t **front_p);

#endif
