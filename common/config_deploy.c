/* The deployment file's schema (pipectl serve): the model, its planning as a job's, and the
 * serving limits (KV slots, queue, token caps, per-step budget); its loaders. */
#include "common/config.h"
#include "common/config_int.h"

#include "common/job_gen.h"
#include "common/util.h"
#include "common/yaml_schema.h"

#include <limits.h>
#include <stdio.h>

static const pl_ys_field_t s_deploy_placement[] = {
    {.key = "nodes",
     .type = PL_YS_SEQ,
     .flags = PL_YS_UNIQUE,
     .offset = offsetof(pl_cfg_deploy_t, nodes),
     .size = PL_CFG_NAME_MAX + 1,
     .elem = &pl_cfg_name_elem,
     .count_offset = offsetof(pl_cfg_deploy_t, n_nodes),
     .max_count = PL_CFG_MAX_NODES},
    {.type = PL_YS_END},
};

static const char *const s_planners[] = {"optimal", "auto", "even", NULL};
static const char *const s_wire_dtypes[] = {"f32", "bf16", "f16", NULL};

static const pl_ys_field_t s_deploy_fields[] = {
    PL_CFG_STR("name", PL_YS_REQUIRED, pl_cfg_deploy_t, name, pl_cfg_name_check),
    PL_CFG_STR("model", PL_YS_REQUIRED, pl_cfg_deploy_t, model, pl_cfg_path_resolve),
    PL_CFG_INT("stages", pl_cfg_deploy_t, stages, 0, 64, 0),
    PL_CFG_CHOICE("planner", pl_cfg_deploy_t, planner, "auto", s_planners),
    {.key = "placement", .type = PL_YS_MAP, .fields = s_deploy_placement},
    PL_CFG_INT("microbatches", pl_cfg_deploy_t, microbatches, 0, 1024, 0),
    PL_CFG_INT("kv_slots", pl_cfg_deploy_t, kv_slots, 1, PL_CFG_DEPLOY_MAX_SLOTS, 16),
    PL_CFG_INT("max_queue", pl_cfg_deploy_t, max_queue, 0, PL_CFG_DEPLOY_MAX_QUEUE, 64),
    PL_CFG_INT("max_tokens", pl_cfg_deploy_t, max_tokens, 1, PL_JOB_MAX_NEW_TOKENS, 512),
    PL_CFG_INT("step_tokens", pl_cfg_deploy_t, step_tokens, 1, PL_JOB_MAX_PREFILL_CHUNK, 256),
    PL_CFG_CHOICE("wire_dtype", pl_cfg_deploy_t, wire_dtype, "f32", s_wire_dtypes),
    {.type = PL_YS_END},
};

static const pl_ys_field_t s_deploy_root = {.type = PL_YS_MAP, .fields = s_deploy_fields};

pl_status_t pl_cfg_deploy_parse(const char *text, size_t len, const char *origin,
                                const char *base_dir, pl_cfg_deploy_t *out)
{
    return pl_cfg_schema_parse(text, len, origin, &s_deploy_root, (void *)base_dir, out,
                               sizeof(*out));
}

static pl_status_t s_deploy_parse_cb(const char *text, size_t len, const char *origin, void *out)
{
    char base_dir[PATH_MAX];
    pl_path_dirname(origin, base_dir, sizeof(base_dir));
    return pl_cfg_deploy_parse(text, len, origin, base_dir, out);
}

pl_status_t pl_cfg_deploy_load(const char *path, pl_cfg_deploy_t *out)
{
    return pl_cfg_file_load(path, s_deploy_parse_cb, out);
}
