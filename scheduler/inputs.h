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

/* Rates that differ by less than this fraction between devices of one kind are measurement
 * noise: two runs of the same calibration or jobs of different shapes on identical devices. */
#define PL_SCHED_RATE_BAND 0.2
/* Calibrations of identical CPUs taken while the machine is busy differ by more (1-thread sgemm
 * 18.7 and 28.0 GFLOP/s on two cores of one VM, load 24), and a slowed or different device by
 * 2x or more: the band within which calibrations say "the same device". */
#define PL_SCHED_CALIB_BAND 0.5

/* Give identical devices one rate (rates.c): among devs[0..n) with cand[i] (NULL: all), devices
 * of one backend and model name whose calibrated GFLOP/s (and, separately, GB/s) lie within
 * `band` of the smallest of a run of them (sorted) all take the mean of their rates. calib[i]
 * holds device i's calibration (NULL: group by the rates themselves): what jobs of different
 * shapes taught two identical devices differs by more than their calibrations do, so the
 * calibration says which are alike and the lessons are pooled. learned[i] (NULL: none) says
 * device i's rate is a lesson, not its calibration: where a group has lessons, their mean is the
 * group's rate (a device that just joined plans as its peers ran). Deterministic: the result
 * does not depend on the devices' order. A device really faster by more than the band keeps its
 * rate. */
void pl_sched_rates_equalize(pl_sched_device_t *devs, const pl_sched_device_t *calib,
                             const bool *learned, int n, const bool *cand, double band);

/* The share of its CPUs each CPU device gets while the devices of used[] (NULL: all) compute:
 * devices of one host whose CPU sets overlap (cpu_mask[i], bit c: CPU c; 0: unknown, share 1)
 * split those CPUs among their threads (threads[i], at most one per CPU of the set, spread
 * evenly over it), each thread wanting them for busy[e] of the time (its stage's busy fraction,
 * pl_sched_plan_busy; NULL: all of it). share[i] = min(1, |CPUs of i| / threads wanting them);
 * 1 for other devices. Two 1-thread daemons pinned to one core whose stages are always busy get
 * 1/2 each; three unpinned on 2 cores 2/3; two on one core whose stages are busy 1/2 and 1 (they
 * alternate: one waits while the other computes) 2/3 each. A stage's device computes at
 * share x its rate. */
void pl_sched_cpu_shares(const pl_sched_device_t *devs, int n, const uint64_t *cpu_mask,
                         const int *threads, const bool *used, const double *busy, double *share);

/* The share of its read bandwidth (mem_gbps, as devs[] has it: after its CPU share) each CPU
 * device gets while the devices of used[] (NULL: all) compute, each streaming busy[e] of the time
 * (NULL: always): the CPU devices of one host with a host bandwidth (host_gbps > 0; the host's
 * figure is the largest of theirs) draw on that total, share[i] = min(1, host_gbps / sum_e
 * mem_gbps[e] * busy[e]), the same for all of them: each stream slows alike when their sum is
 * more than the host gives. 1 for other devices. Two stages at 37 GB/s each, always busy, on a
 * host of 50: 50 / 74 each; one of them alone: 1. A stage's decode reads at share x mem_gbps. */
void pl_sched_host_bw_shares(const pl_sched_device_t *devs, int n, const bool *used,
                             const double *busy, double *share);

/* Each device's busy fraction in `plan` made from `in` (in->n_devices entries; 0 for a device
 * the plan does not use): its stage's compute over a wave (the K messages of its prefill and
 * the max_new_tokens - 1 decode steps of each microbatch) at the device's own rate, the plan's
 * times x share[d] (the share of its CPUs the plan charged it, NULL: 1), over the same for the
 * busiest stage: the pipeline runs at its slowest stage's pace and the others wait. */
void pl_sched_plan_busy(const pl_plan_input_t *in, const pl_plan_t *plan, const double *share,
                        double *busy);

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
