/* pipeld's part in serving: a deployment's SEQ_ADD / SEQ_CANCEL from the coordinator to the
 * executor of (job, stage, epoch), and that executor's SEQ_OUT back, stamped with the epoch. */
#ifndef PL_DAEMON_NODE_SERVE_H
#define PL_DAEMON_NODE_SERVE_H

#include "common/metrics.h"
#include "pipeline/exec.h"
#include "transport/msg.h"

#include <stdint.h>

/* SEQ_ADD or SEQ_CANCEL m to the executor among execs[0..n) (epochs[i]: the assignment each
 * runs) that runs exactly m's (job, stage, epoch) as a deployment's stage. Any other is dropped:
 * counted in `dropped` (a counter, label reason "unknown" or "busy"; NULL counts nothing) and
 * logged (rate-limited). Returns whether it was forwarded. */
bool pl_node_serve_route(pl_exec_t *const *execs, const uint32_t *epochs, int n, const pl_msg_t *m,
                         pl_metric_t *dropped);

#endif
