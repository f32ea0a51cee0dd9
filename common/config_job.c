/* The job file's schema (model, prompts, generation and sampling, planning and placement), its
 * paths resolved against the file's directory, and its loaders. */
#include "common/config.h"
#include "common/config_int.h"

#include "common/util.h"
#include "common/yaml_schema.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool pl_cfg_path_resolve(char *value, size_t size, void *user, char *err, size_t err_len)
{
    const char *base_dir = user;
    char *joined;
    int n;

    if (!base_dir || !base_dir[0] || value[0] == '/')
        return true;
    joined = malloc(size);
    if (!joined) {
        snprintf(err, err_len, "out of memory");
        return false;
    }
    n = snprintf(joined, size, "%s/%s", base_dir, value);
    if (n < 0 || (size_t)n >= size) {
        snprintf(err, err_len, "path is longer than %zu bytes once joined to '%.200s'", size - 1,
                 base_dir);
        free(joined);
        return false;
    }
    memcpy(value, joined, (size_t)n + 1);
    free(joined);
    return true;
}

static const pl_ys_field_t s_stop_elem = {.type = PL_YS_STR, .size = PL_JOB_STOP_MAX + 1};

/* model/chat_template.h's family names (common/ cannot include model/). */
static const char *const s_chat_formats[] = {"llama3", "llama2", "mistral", "chatml",
                                             "gemma",  "phi3",   NULL};

static const pl_ys_field_t s_job_sampling[] = {
    {.key = "temperature",
     .type = PL_YS_FLOAT,
     .offset = offsetof(pl_cfg_job_t, gen.temperature),
     .min = 0,
     .max = 100,
     .def = 0},
    PL_CFG_INT("top_k", pl_cfg_job_t, gen.top_k, 0, 1000000, 0),
    {.key = "top_p",
     .type = PL_YS_FLOAT,
     .flags = PL_YS_MIN_EXCL,
     .offset = offsetof(pl_cfg_job_t, gen.top_p),
     .min = 0,
     .max = 1,
     .def = 1},
    {.key = "seed", .type = PL_YS_U64, .offset = offsetof(pl_cfg_job_t, gen.seed), .def = 0},
    {.type = PL_YS_END},
};

static const pl_ys_field_t s_job_placement[] = {
    {.key = "nodes",
     .type = PL_YS_SEQ,
     .flags = PL_YS_UNIQUE,
     .offset = offsetof(pl_cfg_job_t, nodes),
     .size = PL_CFG_NAME_MAX + 1,
     .elem = &pl_cfg_name_elem,
     .count_offset = offsetof(pl_cfg_job_t, n_nodes),
     .max_count = PL_CFG_MAX_NODES},
    {.type = PL_YS_END},
};

static const char *const s_planners[] = {"optimal", "auto", "even", NULL};
static const char *const s_wire_dtypes[] = {"f32", "bf16", "f16", NULL};

static const pl_ys_field_t s_job_fields[] = {
    PL_CFG_STR("model", PL_YS_REQUIRED, pl_cfg_job_t, model, pl_cfg_path_resolve),
    PL_CFG_STR("prompts", PL_YS_REQUIRED, pl_cfg_job_t, prompts, pl_cfg_path_resolve),
    PL_CFG_STR("deployment", 0, pl_cfg_job_t, deployment, pl_cfg_name_check),
    PL_CFG_INT("max_new_tokens", pl_cfg_job_t, gen.max_new_tokens, 1, PL_JOB_MAX_NEW_TOKENS, 16),
    PL_CFG_INT("min_new_tokens", pl_cfg_job_t, gen.min_new_tokens, 0, PL_JOB_MAX_NEW_TOKENS, 0),
    {.key = "sampling", .type = PL_YS_MAP, .fields = s_job_sampling},
    PL_CFG_INT("microbatches", pl_cfg_job_t, microbatches, 0, 1024, 0),
    PL_CFG_INT("prefill_chunk", pl_cfg_job_t, gen.prefill_chunk, 0, PL_JOB_MAX_PREFILL_CHUNK, 0),
    PL_CFG_INT("stages", pl_cfg_job_t, stages, 0, 64, 0),
    {.key = "planner",
     .type = PL_YS_STR,
     .offset = offsetof(pl_cfg_job_t, planner),
     .size = sizeof(((pl_cfg_job_t *)0)->planner),
     .def_str = "auto",
     .choices = s_planners},
    {.key = "wire_dtype",
     .type = PL_YS_STR,
     .offset = offsetof(pl_cfg_job_t, gen.wire_dtype),
     .size = sizeof(((pl_cfg_job_t *)0)->gen.wire_dtype),
     .def_str = "f32",
     .choices = s_wire_dtypes},
    {.key = "stop_at_eos",
     .type = PL_YS_BOOL,
     .offset = offsetof(pl_cfg_job_t, gen.stop_at_eos),
     .def = 1},
    {.key = "trace", .type = PL_YS_BOOL, .offset = offsetof(pl_cfg_job_t, gen.trace), .def = 1},
    {.key = "placement", .type = PL_YS_MAP, .fields = s_job_placement},
    {.key = "stop",
     .type = PL_YS_SEQ,
     .offset = offsetof(pl_cfg_job_t, gen.stop),
     .size = PL_JOB_STOP_MAX + 1,
     .elem = &s_stop_elem,
     .count_offset = offsetof(pl_cfg_job_t, gen.n_stop),
     .max_count = PL_JOB_MAX_STOP},
    {.key = "chat_format",
     .type = PL_YS_STR,
     .offset = offsetof(pl_cfg_job_t, chat_format),
     .size = sizeof(((pl_cfg_job_t *)0)->chat_format),
     .choices = s_chat_formats},
    {.type = PL_YS_END},
};

static const pl_ys_field_t s_job_root = {.type = PL_YS_MAP, .fields = s_job_fields};

/* ---- loaders ---- */

pl_status_t pl_cfg_job_parse(const char *text, size_t len, const char *origin, const char *base_dir,
                             pl_cfg_job_t *out)
{
    return pl_cfg_schema_parse(text, len, origin, &s_job_root, (void *)base_dir, out, sizeof(*out));
}

static pl_status_t s_job_parse_cb(const char *text, size_t len, const char *origin, void *out)
{
    char base_dir[PATH_MAX];
    pl_path_dirname(origin, base_dir, sizeof(base_dir));
    return pl_cfg_job_parse(text, len, origin, base_dir, out);
}

pl_status_t pl_cfg_job_load(const char *path, pl_cfg_job_t *out)
{
    return pl_cfg_file_load(path, s_job_parse_cb, out);
}
