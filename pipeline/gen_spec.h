/* The typed job spec (common/job_spec.h) from the generation settings' JSON form that the
 * coordinator and pipectl still pass around; goes when the job travels typed end to end. */
#ifndef PL_PIPELINE_GEN_SPEC_H
#define PL_PIPELINE_GEN_SPEC_H

#include "common/job_spec.h"
#include "model/model.h"

#include <jansson.h>

/* Fill *spec (pl_job_spec_init'ed here; free with pl_job_spec_clear) from `gen` ("prompts",
 * "max_new_tokens", "stop_at_eos", "sampling", "microbatches"), checked as pl_gen_job_from_json
 * checks it against the model. The model path, planner and placement stay at their defaults. */
pl_status_t pl_gen_spec_from_json(const json_t *gen, const pl_model_config_t *cfg,
                                  pl_job_spec_t *spec);

#endif
