/* The node file's schema (pipeld: its name, coordinator, devices, threads, keys, logging, HTTP
 * front) and its loaders. */
#include "common/config.h"
#include "common/config_int.h"

#include "common/log.h"
#include "common/util.h"
#include "common/yaml_schema.h"

static const pl_ys_field_t s_device_elem = {
    .type = PL_YS_STR, .size = 16, .choices = pl_cfg_device_kinds};

static const pl_ys_field_t s_node_fields[] = {
    PL_CFG_STR("name", PL_YS_REQUIRED, pl_cfg_node_t, name, pl_cfg_name_check),
    PL_CFG_STR("coordinator", PL_YS_REQUIRED, pl_cfg_node_t, coordinator, pl_cfg_endpoint_check),
    PL_CFG_STR("coordinator_node_endpoint", 0, pl_cfg_node_t, coordinator_node,
               pl_cfg_endpoint_check),
    {.key = "devices",
     .type = PL_YS_SEQ,
     .flags = PL_YS_UNIQUE,
     .offset = offsetof(pl_cfg_node_t, devices),
     .size = sizeof(((pl_cfg_node_t *)0)->devices[0]),
     .elem = &s_device_elem,
     .count_offset = offsetof(pl_cfg_node_t, n_devices),
     .max_count = (int)PL_ARRAY_SIZE(((pl_cfg_node_t *)0)->devices)},
    PL_CFG_INT("threads", pl_cfg_node_t, threads, 0, 4096, 0),
    PL_CFG_INT("memory_reserve_mb", pl_cfg_node_t, memory_reserve_mb, 0, 1 << 20, 512),
    PL_CFG_INT("memory_limit_mb", pl_cfg_node_t, memory_limit_mb, 0, 1 << 30, 0),
    PL_CFG_INT("heartbeat_ms", pl_cfg_node_t, heartbeat_ms, 10, 60000, 500),
    {.key = "log_level",
     .type = PL_YS_STR,
     .offset = offsetof(pl_cfg_node_t, log_level),
     .size = sizeof(((pl_cfg_node_t *)0)->log_level),
     .def_str = "info",
     .choices = pl_log_level_names},
    PL_CFG_FLOAT("slowdown", 0, pl_cfg_node_t, slowdown, 1, 1000, 1),
    PL_CFG_STR("coordinator_public_key", 0, pl_cfg_node_t, coordinator_key, pl_cfg_z85_key_check),
    PL_CFG_STR("key_file", 0, pl_cfg_node_t, key_file, NULL),
    {.key = "http",
     .type = PL_YS_MAP,
     .offset = offsetof(pl_cfg_node_t, http),
     .fields = pl_cfg_http_fields},
    PL_CFG_CHOICE("log_format", pl_cfg_node_t, log_format, "text", pl_log_format_names),
    PL_CFG_CHOICE("log_target", pl_cfg_node_t, log_target, "stderr", pl_log_target_names),
    {.type = PL_YS_END},
};

static const pl_ys_field_t s_node_root = {.type = PL_YS_MAP, .fields = s_node_fields};

/* ---- loaders ---- */

pl_status_t pl_cfg_node_parse(const char *text, size_t len, const char *origin, pl_cfg_node_t *out)
{
    return pl_cfg_schema_parse(text, len, origin, &s_node_root, NULL, out, sizeof(*out));
}

static pl_status_t s_node_parse_cb(const char *text, size_t len, const char *origin, void *out)
{
    return pl_cfg_node_parse(text, len, origin, out);
}

pl_status_t pl_cfg_node_load(const char *path, pl_cfg_node_t *out)
{
    return pl_cfg_file_load(path, s_node_parse_cb, out);
}
