/* The JSON generation settings as a typed job spec: parsed once by pl_gen_job_from_json, the
 * prompts handed over, the microbatch request kept as asked (0: the planner's choice). */
#include "pipeline/gen_spec.h"

#include "common/json.h"
#include "pipeline/gen.h"

pl_status_t pl_gen_spec_from_json(const json_t *gen, const pl_model_config_t *cfg,
                                  pl_job_spec_t *spec)
{
    pl_gen_job_t g;
    int64_t mb = 0;
    pl_status_t st;
    if ((st = pl_json_int_opt(gen, "microbatches", 0, 1024, &mb)) ||
        (st = pl_gen_job_from_json(gen, cfg, &g)))
        return st;
    pl_job_spec_init(spec);
    spec->n_prompts = g.n_seqs;
    spec->prompts = g.prompts;
    spec->prompt_len = g.prompt_len;
    spec->max_new_tokens = g.max_new_tokens;
    spec->stop_at_eos = g.stop_at_eos;
    spec->temperature = g.sampling.temperature;
    spec->top_k = g.sampling.top_k;
    spec->top_p = g.sampling.top_p;
    spec->seed = g.sampling.seed;
    spec->microbatches = (int)mb;
    g.prompts = NULL; /* now the spec's */
    g.prompt_len = NULL;
    g.n_seqs = 0;
    pl_gen_job_clear(&g);
    return PL_OK;
}
