/* The planner's model, costs and job shape from the parsed model config, the model's stored
 * tensor bytes and the typed job spec; no I/O: model/ read the files, the job's codec the job. */
#include "scheduler/inputs.h"

#include "common/util.h"
#include "scheduler/modes.h"

#include <string.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

pl_status_t pl_sched_model_from_config(const pl_model_config_t *cfg, bool any_cpu,
                                       pl_sched_model_t *m)
{
    if (!cfg || cfg->n_layers < 1)
        return pl_error(PL_ERR_INVALID, "model: no layers");
    double wb = any_cpu ? 4.0 : (double)pl_dtype_size(cfg->dtype);
    *m = (pl_sched_model_t){.n_layers = cfg->n_layers,
                            .hidden = cfg->hidden,
                            .intermediate = cfg->intermediate,
                            .n_heads = cfg->n_heads,
                            .n_kv_heads = cfg->n_kv_heads,
                            .head_dim = cfg->head_dim,
                            .vocab = cfg->vocab,
                            .weight_bytes = wb,
                            .kv_bytes = wb,
                            .act_bytes = 4.0,
                            .tie_embeddings = cfg->tie_embeddings};
    return PL_OK;
}

pl_status_t pl_sched_costs_from_stored(const pl_sched_model_t *model, const pl_model_bytes_t *b,
                                       bool any_cpu, pl_sched_costs_t **costs_p)
{
    pl_sched_costs_t *c = NULL;
    pl_status_t st;
    if (!model || !b)
        return pl_error(PL_ERR_INVALID, "model: no shape or no tensor bytes");
    if (b->n_layers != model->n_layers)
        return pl_error(PL_ERR_INVALID, "model: tensor bytes of %d layers for a config of %d",
                        b->n_layers, model->n_layers);
    pl_sched_model_t m = *model;
    if (!any_cpu) {
        const pl_wtype_info_t *wi = pl_wtype_info(b->matrix_wtype);
        m.kv_bytes = wi && !wi->quantized ? (double)wi->block_bytes : 4.0;
    }
    if ((st = pl_sched_costs_from_model(&m, &c)))
        return st;
    pl_sched_layer_cost_t *layers = (pl_sched_layer_cost_t *)c->layers; /* ours until returned */
    for (int l = 0; l < c->n_layers; l++)
        layers[l].weight_bytes = (double)b->layer[l];
    c->embed_weight_bytes = (double)b->embed;
    c->embed_bytes_per_token = (double)b->embed / m.vocab; /* one row as stored */
    c->head_weight_bytes = (double)b->head;
    c->tied_bytes = (double)b->tied;
    *costs_p = c;
    return PL_OK;
}

void pl_sched_refusals_find(const pl_sched_device_t *devs, int n, const pl_model_bytes_t *b,
                            pl_sched_refusals_t *r)
{
    memset(r, 0, sizeof(*r));
    if (!b || b->quantized == PL_WT_COUNT)
        return;
    snprintf(r->why, sizeof(r->why),
             "the model's weights are quantized (%s) and the GPU backends have no quantized "
             "kernels yet",
             pl_wtype_name(b->quantized));
    for (int i = 0; i < n && i < PL_SCHED_MAX_DEVICES; i++)
        if (strcmp(devs[i].backend, "cpu") != 0) {
            r->refused[i] = r->why;
            r->n_refused++;
        }
}

pl_status_t pl_sched_job_from_spec(const pl_job_spec_t *spec, const pl_model_config_t *cfg,
                                   pl_sched_job_t *job)
{
    if (!spec || !cfg)
        return pl_error(PL_ERR_INVALID, "job shape: missing job or model");
    if (spec->n_prompts < 1 || spec->n_prompts > PL_JOB_MAX_SEQS || !spec->prompt_len)
        return pl_error(PL_ERR_RANGE, "field 'prompts': %d prompts, expected 1 to %d",
                        spec->n_prompts, PL_JOB_MAX_SEQS);
    if (spec->gen.max_new_tokens < 1 || spec->gen.max_new_tokens > 65536)
        return pl_error(PL_ERR_RANGE, "field 'max_new_tokens': %d not in [1, 65536]",
                        spec->gen.max_new_tokens);
    if (spec->microbatches < 0 || spec->microbatches > 1024)
        return pl_error(PL_ERR_RANGE, "field 'microbatches': %d not in [0, 1024]",
                        spec->microbatches);
    uint64_t total = 0;
    int pmax = 1;
    for (int i = 0; i < spec->n_prompts; i++) {
        int len = spec->prompt_len[i];
        if (len < 1 || len > cfg->max_pos)
            return pl_error(PL_ERR_RANGE, "prompt %d: %d tokens, the model allows 1 to %d", i, len,
                            cfg->max_pos);
        if (len + spec->gen.max_new_tokens > cfg->max_pos)
            return pl_error(PL_ERR_RANGE,
                            "prompt %d: %d tokens + max_new_tokens %d exceed the model's %d "
                            "positions",
                            i, len, spec->gen.max_new_tokens, cfg->max_pos);
        total += (uint64_t)len;
        pmax = PL_MAX(pmax, len);
    }
    int avg = (int)llround((double)total / spec->n_prompts);
    *job = (pl_sched_job_t){.n_seqs = spec->n_prompts,
                            .prompt_avg = PL_MIN(PL_MAX(avg, 1), pmax),
                            .prompt_max = pmax,
                            .max_new_tokens = spec->gen.max_new_tokens,
                            .microbatches = spec->microbatches,
                            .prefill_chunk = spec->gen.prefill_chunk,
                            .ctx = pmax + spec->gen.max_new_tokens};
    return PL_OK;
}

pl_status_t pl_sched_plan_spec(const pl_job_spec_t *spec, const pl_model_config_t *cfg,
                               const pl_model_bytes_t *bytes, const pl_sched_device_t *devs, int n,
                               const pl_sched_link_t *links, const bool *cand, double act_bytes,
                               pl_sched_plan_inputs_t *pi, pl_plan_t **plan_p)
{
    pl_status_t st;
    memset(pi, 0, sizeof(*pi));
    if (n < 0 || n > PL_SCHED_MAX_DEVICES)
        return pl_error(PL_ERR_RANGE, "plan: %d devices, at most %d", n, PL_SCHED_MAX_DEVICES);
    pl_sched_refusals_find(devs, n, bytes, &pi->refusals);
    bool any_cpu = false; /* among the candidates: what KV elements are charged by */
    for (int i = 0; i < n; i++)
        any_cpu |= (!cand || cand[i]) && !pi->refusals.refused[i] && !strcmp(devs[i].backend, "cpu");
    if ((st = pl_sched_model_from_config(cfg, any_cpu, &pi->model)))
        goto err;
    if (act_bytes > 0)
        pi->model.act_bytes = act_bytes; /* the links carry the job's wire dtype */
    pi->in = (pl_plan_input_t){.model = &pi->model,
                               .devices = devs,
                               .n_devices = n,
                               .links = links,
                               .refused = pi->refusals.refused};
    if ((st = pl_sched_costs_from_stored(&pi->model, bytes, any_cpu, &pi->costs)) ||
        (st = pl_sched_job_from_spec(spec, cfg, &pi->in.job)))
        goto err;
    pi->in.costs = pi->costs;
    if ((st = pl_sched_plan_mode(&pi->in, cand, spec->planner, spec->stages, plan_p)))
        goto err;
    return PL_OK;
err:
    pl_sched_plan_inputs_clear(pi);
    return st;
}

void pl_sched_plan_inputs_clear(pl_sched_plan_inputs_t *pi)
{
    pl_sched_costs_destroy(&pi->costs);
    memset(pi, 0, sizeof(*pi));
}
