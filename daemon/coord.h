/* pipecoord: node registry with liveness, job queue, planning, stage assignment, results. */
#ifndef PL_DAEMON_COORD_H
#define PL_DAEMON_COORD_H

#include "common/config.h"
#include "daemon/serve_req.h"

#include <signal.h>
#include <stdbool.h>

/* Serve the cluster until SHUTDOWN or *stop. Jobs and counters persist in the SQLite file
 * state_db (NULL: in memory only, nothing survives a restart). Embedded: cfg is the embedded
 * default cluster, whose keys come from the local state directory whatever the endpoint (a
 * cluster file without keys gets them only on a loopback endpoint). */
pl_status_t pl_coord_run(const pl_cfg_cluster_t *cfg, const char *state_db, bool embedded,
                         volatile sig_atomic_t *stop);
/* The same, taking serving requests from `hub` (borrowed, outlives the call; the HTTP front of
 * the same process, or a test, puts them there): each is routed to the deployment it names and
 * ended by this loop. pl_coord_run makes its own hub. */
pl_status_t pl_coord_serve(const pl_cfg_cluster_t *cfg, const char *state_db, bool embedded,
                           pl_serve_hub_t *hub, volatile sig_atomic_t *stop);

#endif
