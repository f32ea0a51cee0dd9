/* The cluster file's schema (coordinator, security, models, nodes and their described devices,
 * links) with its cross-field checks, and its loaders. */
#include "common/config.h"
#include "common/config_int.h"

#include "common/log.h"
#include "common/util.h"
#include "common/yaml_schema.h"

#include <stdio.h>
#include <string.h>

static bool s_check_host(char *value, size_t size, void *user, char *err, size_t err_len)
{
    static const char ok[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-:%[]";
    for (const char *p = value; *p; p++) {
        if (!strchr(ok, *p)) {
            snprintf(err, err_len, "'%s' is not a host name or IP address", value);
            return false;
        }
    }
    return true;
}

/* ---- cross-field checks ---- */

static bool s_post_coordinator(void *base, void *user, char *err, size_t err_len)
{
    const pl_cfg_cluster_t *c = base;
    if (c->dead_after_ms <= c->heartbeat_ms) {
        snprintf(err, err_len, "dead_after_ms (%d) must be greater than heartbeat_ms (%d)",
                 c->dead_after_ms, c->heartbeat_ms);
        return false;
    }
    return true;
}

static bool s_post_client(void *base, void *user, char *err, size_t err_len)
{
    const pl_cfg_client_t *k = base;
    if (!k->public_key[0] == !k->public_key_file[0]) {
        snprintf(err, err_len, "give exactly one of public_key and public_key_file");
        return false;
    }
    if (strcmp(k->name, "*") == 0 && strcmp(k->role, "node") != 0) {
        snprintf(err, err_len, "name '*' (any node name) is only for role node");
        return false;
    }
    return true;
}

static bool s_post_security(void *base, void *user, char *err, size_t err_len)
{
    const pl_cfg_cluster_t *c = base;
    if (c->secret_key[0] && c->secret_key_file[0]) {
        snprintf(err, err_len, "give coordinator_secret_key or coordinator_secret_key_file, "
                               "not both");
        return false;
    }
    if (c->secret_key[0] && !c->public_key[0]) {
        snprintf(err, err_len, "coordinator_secret_key given without coordinator_public_key");
        return false;
    }
    return true;
}

/* A described device: a catalogue kind, or all three explicit figures (never both). */
static bool s_post_device(void *base, void *user, char *err, size_t err_len)
{
    const pl_cfg_device_t *d = base;
    bool any = d->gflops > 0 || d->mem_gbps > 0 || d->mem_gb > 0;
    bool all = d->gflops > 0 && d->mem_gbps > 0 && d->mem_gb > 0;
    if (d->kind[0] && any) {
        snprintf(err, err_len, "give either 'kind' or explicit gflops, mem_gbps and mem_gb, "
                               "not both");
        return false;
    }
    if (!d->kind[0] && !all) {
        snprintf(err, err_len, "needs a catalogue 'kind', or all of gflops, mem_gbps and mem_gb");
        return false;
    }
    if (!d->kind[0] && !d->name[0]) {
        snprintf(err, err_len, "a device with explicit figures needs a 'name'");
        return false;
    }
    return true;
}

static bool s_post_link(void *base, void *user, char *err, size_t err_len)
{
    const pl_cfg_link_t *l = base;
    if (strcmp(l->from, l->to) == 0) {
        snprintf(err, err_len, "a link joins two different nodes, not '%s' to itself", l->from);
        return false;
    }
    return true;
}

/* ---- schemas ---- */

/* A bearer token: visible ASCII without spaces (it travels in an Authorization header). */
static bool s_check_api_key(char *value, size_t size, void *user, char *err, size_t err_len)
{
    for (const char *p = value; *p; p++) {
        if ((unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f) {
            snprintf(err, err_len, "an API key is visible ASCII without spaces");
            return false;
        }
    }
    return true;
}

static const pl_ys_field_t s_api_key_elem = {
    .type = PL_YS_STR, .size = PL_CFG_API_KEY_MAX + 1, .check = s_check_api_key};

static bool s_post_http(void *base, void *user, char *err, size_t err_len)
{
    const pl_cfg_http_t *h = base;
    if (h->n_api_keys && h->api_keys_file[0]) {
        snprintf(err, err_len, "give api_keys or api_keys_file, not both");
        return false;
    }
    return true;
}

/* coordinator.http: the node's keys and the OpenAI API's tokens. */
static const pl_ys_field_t s_cluster_http[] = {
    PL_CFG_HTTP_COMMON_FIELDS,
    {.key = "api_keys",
     .type = PL_YS_SEQ,
     .flags = PL_YS_UNIQUE,
     .offset = offsetof(pl_cfg_http_t, api_keys),
     .size = PL_CFG_API_KEY_MAX + 1,
     .elem = &s_api_key_elem,
     .count_offset = offsetof(pl_cfg_http_t, n_api_keys),
     .max_count = PL_CFG_MAX_API_KEYS},
    PL_CFG_STR("api_keys_file", 0, pl_cfg_http_t, api_keys_file, NULL),
    {.type = PL_YS_END},
};

static const pl_ys_field_t s_cluster_coordinator[] = {
    PL_CFG_STR("endpoint", PL_YS_REQUIRED, pl_cfg_cluster_t, endpoint, pl_cfg_endpoint_check),
    PL_CFG_STR("node_endpoint", 0, pl_cfg_cluster_t, node_endpoint, pl_cfg_endpoint_check),
    PL_CFG_INT("heartbeat_ms", pl_cfg_cluster_t, heartbeat_ms, 10, 60000, 500),
    PL_CFG_INT("dead_after_ms", pl_cfg_cluster_t, dead_after_ms, 20, 3600000, 3000),
    {.key = "http",
     .type = PL_YS_MAP,
     .offset = offsetof(pl_cfg_cluster_t, http),
     .fields = s_cluster_http,
     .post = s_post_http},
    PL_CFG_STR("state_db", 0, pl_cfg_cluster_t, state_db, NULL),
    PL_CFG_INT("max_queued_jobs", pl_cfg_cluster_t, max_queued_jobs, 1, 1000000, 256),
    PL_CFG_INT("max_job_mb", pl_cfg_cluster_t, max_job_mb, 1, 4096, 64),
    PL_CFG_INT("results_kept", pl_cfg_cluster_t, results_kept, 1, 1000000, 1024),
    PL_CFG_INT("place_timeout_ms", pl_cfg_cluster_t, place_timeout_ms, 10, 86400000, 300000),
    PL_CFG_INT("load_timeout_ms", pl_cfg_cluster_t, load_timeout_ms, 10, 86400000, 300000),
    PL_CFG_INT("node_expire_ms", pl_cfg_cluster_t, node_expire_ms, 10, 86400000, 600000),
    PL_CFG_CHOICE("log_level", pl_cfg_cluster_t, log_level, "info", pl_log_level_names),
    PL_CFG_CHOICE("log_format", pl_cfg_cluster_t, log_format, "text", pl_log_format_names),
    PL_CFG_CHOICE("log_target", pl_cfg_cluster_t, log_target, "stderr", pl_log_target_names),
    {.type = PL_YS_END},
};

static bool s_check_client_name(char *value, size_t size, void *user, char *err, size_t len)
{
    return strcmp(value, "*") == 0 || pl_cfg_name_check(value, size, user, err, len);
}

static const char *const s_roles[] = {"node", "user", "admin", NULL};

static const pl_ys_field_t s_cluster_client[] = {
    PL_CFG_STR("name", PL_YS_REQUIRED, pl_cfg_client_t, name, s_check_client_name),
    {.key = "role",
     .type = PL_YS_STR,
     .flags = PL_YS_REQUIRED,
     .offset = offsetof(pl_cfg_client_t, role),
     .size = sizeof(((pl_cfg_client_t *)0)->role),
     .choices = s_roles},
    PL_CFG_STR("public_key", 0, pl_cfg_client_t, public_key, pl_cfg_z85_key_check),
    PL_CFG_STR("public_key_file", 0, pl_cfg_client_t, public_key_file, NULL),
    {.type = PL_YS_END},
};

static const pl_ys_field_t s_cluster_client_elem = {
    .type = PL_YS_MAP, .fields = s_cluster_client, .post = s_post_client};

static const pl_ys_field_t s_cluster_security[] = {
    PL_CFG_STR("coordinator_public_key", 0, pl_cfg_cluster_t, public_key, pl_cfg_z85_key_check),
    PL_CFG_STR("coordinator_secret_key", 0, pl_cfg_cluster_t, secret_key, pl_cfg_z85_key_check),
    PL_CFG_STR("coordinator_secret_key_file", 0, pl_cfg_cluster_t, secret_key_file, NULL),
    {.key = "insecure", .type = PL_YS_BOOL, .offset = offsetof(pl_cfg_cluster_t, insecure)},
    {.key = "clients",
     .type = PL_YS_SEQ,
     .offset = offsetof(pl_cfg_cluster_t, clients),
     .size = sizeof(pl_cfg_client_t),
     .elem = &s_cluster_client_elem,
     .count_offset = offsetof(pl_cfg_cluster_t, n_clients),
     .max_count = PL_CFG_MAX_CLIENTS},
    {.type = PL_YS_END},
};

static const pl_ys_field_t s_model_dir_elem = {.type = PL_YS_STR, .size = PATH_MAX};

static const pl_ys_field_t s_cluster_models[] = {
    {.key = "allow",
     .type = PL_YS_SEQ,
     .flags = PL_YS_UNIQUE,
     .offset = offsetof(pl_cfg_cluster_t, model_dirs),
     .size = PATH_MAX,
     .elem = &s_model_dir_elem,
     .count_offset = offsetof(pl_cfg_cluster_t, n_model_dirs),
     .max_count = PL_CFG_MAX_MODEL_DIRS},
    {.type = PL_YS_END},
};

static const pl_ys_field_t s_cluster_device[] = {
    PL_CFG_STR("kind", 0, pl_cfg_device_t, kind, NULL),
    PL_CFG_STR("name", 0, pl_cfg_device_t, name, NULL),
    {.key = "backend",
     .type = PL_YS_STR,
     .offset = offsetof(pl_cfg_device_t, backend),
     .size = sizeof(((pl_cfg_device_t *)0)->backend),
     .choices = pl_cfg_device_kinds},
    PL_CFG_INT("count", pl_cfg_device_t, count, 1, PL_CFG_MAX_DEVICE_COUNT, 1),
    PL_CFG_FLOAT("gflops", PL_YS_MIN_EXCL, pl_cfg_device_t, gflops, 0, 1e9, 0),
    PL_CFG_FLOAT("mem_gbps", PL_YS_MIN_EXCL, pl_cfg_device_t, mem_gbps, 0, 1e7, 0),
    PL_CFG_FLOAT("mem_gb", PL_YS_MIN_EXCL, pl_cfg_device_t, mem_gb, 0, 1e7, 0),
    PL_CFG_FLOAT("compute_efficiency", PL_YS_MIN_EXCL, pl_cfg_device_t, compute_efficiency, 0, 1,
                 1),
    PL_CFG_FLOAT("memory_efficiency", PL_YS_MIN_EXCL, pl_cfg_device_t, memory_efficiency, 0, 1, 1),
    PL_CFG_FLOAT("reserve_gb", 0, pl_cfg_device_t, reserve_gb, 0, 1e6, 0.5),
    {.type = PL_YS_END},
};

static const pl_ys_field_t s_cluster_device_elem = {
    .type = PL_YS_MAP, .fields = s_cluster_device, .post = s_post_device};

static const pl_ys_field_t s_cluster_link[] = {
    PL_CFG_STR("from", PL_YS_REQUIRED, pl_cfg_link_t, from, pl_cfg_name_check),
    PL_CFG_STR("to", PL_YS_REQUIRED, pl_cfg_link_t, to, pl_cfg_name_check),
    PL_CFG_FLOAT("gbps", PL_YS_REQUIRED | PL_YS_MIN_EXCL, pl_cfg_link_t, gbps, 0, 1e6, 0),
    PL_CFG_FLOAT("latency_us", PL_YS_REQUIRED, pl_cfg_link_t, latency_us, 0, 1e7, 0),
    {.type = PL_YS_END},
};

static const pl_ys_field_t s_cluster_link_elem = {
    .type = PL_YS_MAP, .fields = s_cluster_link, .post = s_post_link};

static const pl_ys_field_t s_cluster_node[] = {
    PL_CFG_STR("name", PL_YS_REQUIRED, pl_cfg_node_entry_t, name, pl_cfg_name_check),
    {.key = "address",
     .type = PL_YS_STR,
     .offset = offsetof(pl_cfg_node_entry_t, address),
     .size = PL_CFG_NAME_MAX + 1,
     .def_str = "127.0.0.1",
     .check = s_check_host},
    PL_CFG_INT("threads", pl_cfg_node_entry_t, threads, 0, 4096, 0),
    PL_CFG_INT("max_devices", pl_cfg_node_entry_t, max_devices, 0, 1024, 0),
    {.key = "labels",
     .type = PL_YS_SEQ,
     .flags = PL_YS_UNIQUE,
     .offset = offsetof(pl_cfg_node_entry_t, labels),
     .size = PL_CFG_NAME_MAX + 1,
     .elem = &pl_cfg_name_elem,
     .count_offset = offsetof(pl_cfg_node_entry_t, n_labels),
     .max_count = PL_CFG_MAX_LABELS},
    {.key = "devices",
     .type = PL_YS_SEQ,
     .offset = offsetof(pl_cfg_node_entry_t, devices),
     .size = sizeof(pl_cfg_device_t),
     .elem = &s_cluster_device_elem,
     .count_offset = offsetof(pl_cfg_node_entry_t, n_devices),
     .max_count = PL_CFG_MAX_NODE_DEVICES},
    {.type = PL_YS_END},
};

static const pl_ys_field_t s_cluster_node_elem = {.type = PL_YS_MAP, .fields = s_cluster_node};

static const pl_ys_field_t s_cluster_fields[] = {
    {.key = "coordinator",
     .type = PL_YS_MAP,
     .flags = PL_YS_REQUIRED,
     .fields = s_cluster_coordinator,
     .post = s_post_coordinator},
    {.key = "security", .type = PL_YS_MAP, .fields = s_cluster_security, .post = s_post_security},
    {.key = "models", .type = PL_YS_MAP, .fields = s_cluster_models},
    {.key = "nodes",
     .type = PL_YS_SEQ,
     .offset = offsetof(pl_cfg_cluster_t, nodes),
     .size = sizeof(pl_cfg_node_entry_t),
     .elem = &s_cluster_node_elem,
     .count_offset = offsetof(pl_cfg_cluster_t, n_nodes),
     .max_count = PL_CFG_MAX_NODES,
     .unique_key = "name"},
    {.key = "links",
     .type = PL_YS_SEQ,
     .offset = offsetof(pl_cfg_cluster_t, links),
     .size = sizeof(pl_cfg_link_t),
     .elem = &s_cluster_link_elem,
     .count_offset = offsetof(pl_cfg_cluster_t, n_links),
     .max_count = PL_CFG_MAX_LINKS},
    {.type = PL_YS_END},
};

static const pl_ys_field_t s_cluster_root = {.type = PL_YS_MAP, .fields = s_cluster_fields};

/* ---- loaders ---- */

pl_status_t pl_cfg_cluster_parse(const char *text, size_t len, const char *origin,
                                 pl_cfg_cluster_t *out)
{
    return pl_cfg_schema_parse(text, len, origin, &s_cluster_root, NULL, out, sizeof(*out));
}

static pl_status_t s_cluster_parse_cb(const char *text, size_t len, const char *origin, void *out)
{
    return pl_cfg_cluster_parse(text, len, origin, out);
}

pl_status_t pl_cfg_cluster_load(const char *path, pl_cfg_cluster_t *out)
{
    return pl_cfg_file_load(path, s_cluster_parse_cb, out);
}
