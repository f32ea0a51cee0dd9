/* The planner's inputs from what the system already parsed: the model's shape, its tensors' stored
 * bytes and the devices that cannot hold it (model/), the job's shape (common/job_spec.h). */
#ifndef PL_SCHEDULER_INPUTS_H
#define PL_SCHEDULER_INPUTS_H

#include "common/job_spec.h"
#include "model/model.h"
#include "scheduler/plan.h"

#include <stdbool.h>

/* The planner's model: shape from the config; KV element size 4 when any CPU device is among
 * the candidates (the CPU backend's cache is f32), else the size of the config's dtype; weight
 * element size the same, for callers with no tensor headers (pl_sched_costs_from_stored
 * replaces the weights by the bytes the model stores). */
pl_status_t pl_sched_model_from_config(const pl_model_config_t *cfg, bool any_cpu,
                                       pl_sched_model_t *m);

/* The planner's costs of an opened model: the shape, activation and KV element sizes of m
 * (pl_sched_model_from_config), the weights as the model stores them (b: each layer's tensors,
 * the embedding, the final norm + LM head, the tied table once) on every kind of device, since
 * no backend converts them. Without a CPU among the candidates (any_cpu false) KV elements take
 * the size of b->matrix_wtype, the dtype a GPU keeps its cache in (the CPU's is f32, as m has
 * it then). *costs_p is the caller's to free with pl_sched_costs_destroy. */
pl_status_t pl_sched_costs_from_stored(const pl_sched_model_t *m, const pl_model_bytes_t *b,
                                       bool any_cpu, pl_sched_costs_t **costs_p);

/* Which devices cannot hold a stage of the model: a GPU when the model has quantized weights
 * (the GPU backends have no quantized kernels). refused[i] is what pl_plan_input_t.refused
 * takes; the strings point into why. */
typedef struct {
    char why[PL_SCHED_WHY_MAX + 1];
    const char *refused[PL_SCHED_MAX_DEVICES];
    int n_refused;
} pl_sched_refusals_t;

/* Fill r for devs[0..n) (n <= PL_SCHED_MAX_DEVICES) and the model's bytes b. */
void pl_sched_refusals_find(const pl_sched_device_t *devs, int n, const pl_model_bytes_t *b,
                            pl_sched_refusals_t *r);

/* The job shape of a spec: sequences, average and longest prompt, max_new_tokens, the requested
 * microbatches, and ctx = the longest prompt + max_new_tokens. Checked against the model's
 * positions; PL_ERR_INVALID / PL_ERR_RANGE naming the prompt or field. */
pl_status_t pl_sched_job_from_spec(const pl_job_spec_t *spec, const pl_model_config_t *cfg,
                                   pl_sched_job_t *job);

/* What a plan was made from, for pl_plan_to_json_full and pl_sched_terms: `in` points into this
 * struct (model, costs, refusals) and at the caller's devices and links, so it stays in place
 * while the plan is explained. Free with pl_sched_plan_inputs_clear. */
typedef struct {
    pl_sched_model_t model;
    pl_sched_costs_t *costs; /* owned */
    pl_sched_refusals_t refusals;
    pl_plan_input_t in;
} pl_sched_plan_inputs_t;

/* Plan the job `spec` on the model `cfg` whose tensors store `bytes`, over devs[n] and links
 * (n * n, NULL: defaults), with candidates cand[i] (NULL: all): devices that cannot hold the model
 * refused with the reason (pl_sched_refusals_find), element sizes from cfg and whether a CPU is
 * among the candidates, the weights as stored (pl_sched_costs_from_stored), act_bytes > 0 the
 * bytes of one activation element on the links (the job's wire dtype), the job's shape from the
 * spec, then the spec's planner mode and stage count (pl_sched_plan_mode). The one sequence the
 * coordinator and pipectl's what-if plans share. *pi is filled in place (cleared on error);
 * *plan_p set only on success. */
pl_status_t pl_sched_plan_spec(const pl_job_spec_t *spec, const pl_model_config_t *cfg,
                               const pl_model_bytes_t *bytes, const pl_sched_device_t *devs, int n,
                               const pl_sched_link_t *links, const bool *cand, double act_bytes,
                               pl_sched_plan_inputs_t *pi, pl_plan_t **plan_p);
/* Free what pl_sched_plan_spec kept; safe twice. */
void pl_sched_plan_inputs_clear(pl_sched_plan_inputs_t *pi);

#endif
