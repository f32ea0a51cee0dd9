/* pipecoord: node registry with liveness, job queue, planning, stage assignment, results. */
#ifndef PL_DAEMON_COORD_H
#define PL_DAEMON_COORD_H

#include "common/config.h"

#include <signal.h>

/* Serve the cluster until SHUTDOWN or *stop. */
pl_status_t pl_coord_run(const pl_cfg_cluster_t *cfg, volatile sig_atomic_t *stop);

#endif
