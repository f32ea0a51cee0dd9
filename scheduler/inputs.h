/* The planner's inputs from what the system already parsed: the model's shape and element sizes
 * from its config (model/), the job's shape from the typed job spec (common/job_spec.h). */
#ifndef PL_SCHEDULER_INPUTS_H
#define PL_SCHEDULER_INPUTS_H

#include "common/job_spec.h"
#include "model/model.h"
#include "scheduler/plan.h"

#include <stdbool.h>

/* The planner's model: shape from the config; weight and KV element sizes 4 when any CPU device
 * is among the candidates (the CPU backend holds both as f32 whatever the file's dtype), else
 * the size of the config's dtype (torch_dtype). */
pl_status_t pl_sched_model_from_config(const pl_model_config_t *cfg, bool any_cpu,
                                       pl_sched_model_t *m);

/* The job shape of a spec: sequences, average and longest prompt, max_new_tokens, the requested
 * microbatches, and ctx = the longest prompt + max_new_tokens. Checked against the model's
 * positions; PL_ERR_INVALID / PL_ERR_RANGE naming the prompt or field. */
pl_status_t pl_sched_job_from_spec(const pl_job_spec_t *spec, const pl_model_config_t *cfg,
                                   pl_sched_job_t *job);

/* Plan the job `spec` on the model `cfg` over devs[n] and links (n * n, NULL: defaults), with
 * candidates cand[i] (NULL: all): the model's element sizes from cfg and whether a CPU device is
 * a candidate (act_bytes > 0: the bytes of one activation element on the links, the job's wire
 * dtype), the job's shape from the spec, then the spec's planner mode and stage count
 * (pl_sched_plan_mode). The one sequence the coordinator and pipectl's what-if plans share;
 * *model and *in (which points at *model and the borrowed devices and links) are what the plan
 * was made from, for pl_plan_to_json_full and pl_sched_terms. All three set only on success. */
pl_status_t pl_sched_plan_spec(const pl_job_spec_t *spec, const pl_model_config_t *cfg,
                               const pl_sched_device_t *devs, int n, const pl_sched_link_t *links,
                               const bool *cand, double act_bytes, pl_sched_model_t *model,
                               pl_plan_input_t *in, pl_plan_t **plan_p);

#endif
