/* Described ("what-if") clusters: the planner's devices and links from a parsed cluster file's
 * nodes[].devices and links, for planning before anything is bought or started. */
#ifndef PL_SCHEDULER_WHATIF_H
#define PL_SCHEDULER_WHATIF_H

#include "common/config.h"
#include "scheduler/plan.h"

/* Devices and links of a described cluster (nodes[].devices, links): catalogue kinds become
 * their published figures (scaled by the efficiencies), node addresses are hosts. *devs_p and
 * *links_p (n * n, NULL when the file has no links) are the caller's to free. */
pl_status_t pl_sched_whatif(const pl_cfg_cluster_t *cl, pl_sched_device_t **devs_p, int *n_p,
                            pl_sched_link_t **links_p);

#endif
