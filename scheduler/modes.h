/* The placement modes a job asks for (optimal, auto, even) on top of the planner, with device
 * selection for a fixed stage count. What the coordinator and pipectl call to plan a job. */
#ifndef PL_SCHEDULER_MODES_H
#define PL_SCHEDULER_MODES_H

#include "common/job_spec.h"
#include "scheduler/plan.h"

#include <stdbool.h>
#include <stddef.h>

/* Plan over the devices with alive[i] (NULL: all). stages 0: every candidate device (auto: any
 * number); N: exactly N (auto: at most N), the N fastest for this model when there are more.
 * At least min(stages, sequences) microbatches unless the job asks for more. */
pl_status_t pl_sched_plan_mode(const pl_plan_input_t *in, const bool *alive, pl_planner_t mode,
                               int stages, pl_plan_t **plan_p);

/* True (and the sentence in buf) when the plan keeps fewer sequences resident than the job has:
 * the runtime keeps every sequence of a job resident, so such a job cannot run as one. */
bool pl_sched_waves_note(const pl_plan_t *plan, char *buf, size_t len);

#endif
