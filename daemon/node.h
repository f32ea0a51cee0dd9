/* pipeld's main loop: discover and calibrate devices, register with the coordinator, heartbeat,
 * and run assigned stages on executor threads. Heartbeats never wait on compute. */
#ifndef PL_DAEMON_NODE_H
#define PL_DAEMON_NODE_H

#include "common/config.h"

#include <signal.h>

/* Run until SHUTDOWN from the coordinator or *stop becomes non-zero. */
pl_status_t pl_node_run(const pl_cfg_node_t *cfg, volatile sig_atomic_t *stop);

#endif
