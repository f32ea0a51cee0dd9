/* The typed job: defaults, the planner mode names, and freeing. Its JSON codec lives in
 * transport/. */
#include "common/job_spec.h"

#include <stdlib.h>
#include <string.h>

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
