/* The pipectl user file's schema (coordinator, keys, output format, timeout) and its loaders;
 * flags and the environment override what it says (tools/pipectl.c). */
#include "common/config.h"
#include "common/config_int.h"

#include "common/yaml_schema.h"

const char *const pl_cfg_output_names[] = {"table", "wide", "json", "yaml", NULL};

static const pl_ys_field_t s_pipectl_fields[] = {
    PL_CFG_STR("coordinator", 0, pl_cfg_pipectl_t, coordinator, pl_cfg_endpoint_check),
    PL_CFG_STR("coordinator_public_key", 0, pl_cfg_pipectl_t, coordinator_key,
               pl_cfg_z85_key_check),
    PL_CFG_STR("key_file", 0, pl_cfg_pipectl_t, key_file, NULL),
    PL_CFG_CHOICE("output", pl_cfg_pipectl_t, output, "table", pl_cfg_output_names),
    {.key = "timeout_s",
     .type = PL_YS_FLOAT,
     .flags = PL_YS_MIN_EXCL,
     .offset = offsetof(pl_cfg_pipectl_t, timeout_s),
     .min = 0,
     .max = 3600,
     .def = 10},
    {.type = PL_YS_END},
};

static const pl_ys_field_t s_pipectl_root = {.type = PL_YS_MAP, .fields = s_pipectl_fields};

pl_status_t pl_cfg_pipectl_parse(const char *text, size_t len, const char *origin,
                                 pl_cfg_pipectl_t *out)
{
    return pl_cfg_schema_parse(text, len, origin, &s_pipectl_root, NULL, out, sizeof(*out));
}

static pl_status_t s_parse_cb(const char *text, size_t len, const char *origin, void *out)
{
    return pl_cfg_pipectl_parse(text, len, origin, out);
}

pl_status_t pl_cfg_pipectl_load(const char *path, pl_cfg_pipectl_t *out)
{
    return pl_cfg_file_load(path, s_parse_cb, out);
}
