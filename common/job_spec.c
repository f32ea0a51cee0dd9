/* The typed job: defaults, the planner mode names, a deployment file's spec, and freeing. Its
 * JSON codec lives in transport/. */
#include "common/job_spec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const s_planner_names[] = {"optimal", "auto", "even"};

pl_status_t pl_planner_parse(const char *name, pl_planner_t *mode_p)
{
    for (int i = 0; i < 3; i++)
        if (name && strcmp(name, s_planner_names[i]) == 0) {
            *mode_p = (pl_planner_t)i;
            return PL_OK;
        }
    return pl_error(PL_ERR_INVALID, "planner '%.32s': expected optimal, auto or even",
                    name ? name : "");
}

const char *pl_planner_name(pl_planner_t mode)
{
    return (unsigned)mode < 3 ? s_planner_names[mode] : "?";
}

void pl_job_spec_init(pl_job_spec_t *spec)
{
    memset(spec, 0, sizeof(*spec));
    spec->gen.max_new_tokens = 16;
    spec->gen.stop_at_eos = true;
    spec->gen.trace = true;
    spec->gen.top_p = 1.0f;
    spec->planner = PL_PLANNER_AUTO;
    memcpy(spec->gen.wire_dtype, "f32", 4);
}

void pl_job_spec_clear(pl_job_spec_t *spec)
{
    if (spec->prompts)
        for (int i = 0; i < spec->n_prompts; i++)
            free(spec->prompts[i]);
    free(spec->prompts);
    free(spec->prompt_len);
    free(spec->train);
    pl_job_spec_init(spec);
}

pl_status_t pl_job_spec_from_deploy(const pl_cfg_deploy_t *d, pl_job_spec_t *spec)
{
    pl_job_spec_t s;
    pl_status_t st;
    pl_job_spec_init(&s);
    if (!pl_cfg_name_ok(d->name))
        return pl_error(PL_ERR_INVALID, "field 'name': '%.64s' is not a name ([A-Za-z0-9_.-]+)",
                        d->name);
    if (!realpath(d->model, s.model))
        return pl_error(PL_ERR_NOT_FOUND, "field 'model': %s does not exist", d->model);
    if ((st = pl_planner_parse(d->planner, &s.planner)))
        return pl_error_prefix(st, "field 'planner': ");
    s.stages = d->stages;
    s.microbatches = d->microbatches;
    s.n_nodes = d->n_nodes;
    memcpy(s.nodes, d->nodes, sizeof(s.nodes));
    snprintf(s.gen.wire_dtype, sizeof(s.gen.wire_dtype), "%s", d->wire_dtype[0] ? d->wire_dtype
                                                                                : "f32");
    s.gen.max_new_tokens = d->max_tokens; /* what a request may ask at most */
    char tok[PATH_MAX + 32];
    snprintf(tok, sizeof(tok), "%s/tokenizer.json", s.model);
    s.text = access(tok, R_OK) == 0; /* requests stream text when the model can decode it */
    s.serve = (pl_job_serve_t){.on = true,
                               .kv_slots = d->kv_slots,
                               .max_queue = d->max_queue,
                               .max_tokens = d->max_tokens,
                               .step_tokens = d->step_tokens};
    snprintf(s.serve.name, sizeof(s.serve.name), "%s", d->name);
    *spec = s;
    return PL_OK;
}
