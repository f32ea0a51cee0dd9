/* Planner glue shared by the coordinator and pipectl: the heterogeneous planner's inputs (model,
 * job shape, devices of a live or described cluster), the placement modes of a job, and the plan
 * as JSON. The planner itself (scheduler/plan.h) stays pure; everything here knows the system. */
#ifndef PL_DAEMON_PLANNING_H
#define PL_DAEMON_PLANNING_H

#include "common/config.h"
#include "common/job_spec.h"
#include "model/model.h"
#include "scheduler/plan.h"

#include <jansson.h>
#include <stdbool.h>


/* The planner's model: shape from the config; weight and KV element sizes 4 when any CPU device
 * is among the candidates (the CPU backend holds both as f32 whatever the file's dtype), else
 * the size of config.json's torch_dtype in model_dir (2 when absent). */
pl_status_t pl_planning_model(const char *model_dir, const pl_model_config_t *cfg, bool any_cpu,
                              pl_sched_model_t *m);

/* The job shape of a typed job (prompts, max_new_tokens, microbatches), checked against the
 * model; ctx is the longest prompt + max_new_tokens. */
pl_status_t pl_planning_shape(const pl_job_spec_t *spec, const pl_model_config_t *cfg,
                              pl_sched_job_t *job);

/* Plan over the devices with alive[i] (NULL: all). stages 0: every candidate device (auto: any
 * number); N: exactly N (auto: at most N), the N fastest for this model when there are more.
 * At least min(stages, sequences) microbatches unless the job asks for more. */
pl_status_t pl_planning_run(const pl_plan_input_t *in, const bool *alive, pl_planner_t mode,
                            int stages, pl_plan_t **plan_p);

/* True (and the sentence in buf) when the plan keeps fewer sequences resident than the job has:
 * the runtime keeps every sequence of a job resident, so such a job cannot run as one. */
bool pl_planning_waves_note(const pl_plan_t *plan, char *buf, size_t len);

/* The roofline parts of a stage's predicted compute per microbatch call, for comparing with
 * measured times and learning effective rates: each phase's compute-only and memory-only time. */
typedef struct {
    double pre_flop_s, pre_mem_s; /* prefill: flops / rate, bytes / bandwidth */
    double dec_flop_s, dec_mem_s; /* one decode step */
} pl_planning_terms_t;

pl_status_t pl_planning_terms(const pl_plan_input_t *in, const pl_plan_t *plan, int stage,
                              pl_planning_terms_t *terms);

/* The plan as JSON: pl_plan_to_json plus "planner", "table" (the explained plan) and per stage
 * "gflops", "mem_gbps" (the device figures used) and "compute_prefill_s", "compute_decode_s"
 * (predicted compute per call, without the transfer). NULL when out of memory. */
json_t *pl_planning_json(const pl_plan_t *plan, const pl_plan_input_t *in, pl_planner_t mode);
/* The plan's table as a new string (caller frees); NULL when out of memory. */
char *pl_planning_table(const pl_plan_t *plan);

/* Devices and links of a described cluster (nodes[].devices, links): catalogue kinds become
 * their published figures (scaled by the efficiencies), node addresses are hosts. *devs_p and
 * *links_p (n * n, NULL when the file has no links) are the caller's to free. */
pl_status_t pl_planning_whatif(const pl_cfg_cluster_t *cl, pl_sched_device_t **devs_p, int *n_p,
                               pl_sched_link_t **links_p);

#endif
