/* pipecoord: node registry with liveness, job queue, planning, stage assignment, results. */
#ifndef PL_DAEMON_COORD_H
#define PL_DAEMON_COORD_H

#include "common/config.h"

#include <signal.h>

/* Serve the cluster until SHUTDOWN or *stop. Jobs and counters persist in the SQLite file
 * state_db (NULL: in memory only, nothing survives a restart). */
pl_status_t pl_coord_run(const pl_cfg_cluster_t *cfg, const char *state_db,
                         volatile sig_atomic_t *stop);

#endif
