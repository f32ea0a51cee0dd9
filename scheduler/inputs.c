/* The planner's model and job shape from the parsed model config and the typed job spec; no
 * I/O: model/ read config.json, the job's codec read the job. */
#include "scheduler/inputs.h"

#include "common/util.h"

#include <math.h>

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
