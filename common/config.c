/* The cluster, node and job YAML schemas, and the loaders that check a file against them into
 * a scratch copy, so that the caller's struct is written only when the whole file is valid. */
#include "common/config.h"

#include "common/util.h"
#include "common/yaml_schema.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- value checks ---- */

static bool s_check_name(char *value, size_t size, void *user, char *err, size_t err_len)
{
    for (const char *p = value; *p; p++) {
        if (!strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-", *p)) {
            snprintf(err, err_len, "'%s' must match [A-Za-z0-9_.-]+", value);
            return false;
        }
    }
    return true;
}

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

/* What an HTTP listener binds: an IPv4 or IPv6 literal (a name would need a resolver). */
static bool s_check_ip(char *value, size_t size, void *user, char *err, size_t err_len)
{
    unsigned char buf[sizeof(struct in6_addr)];
    if (inet_pton(AF_INET, value, buf) == 1 || inet_pton(AF_INET6, value, buf) == 1)
        return true;
    snprintf(err, err_len, "'%s' is not an IPv4 or IPv6 address", value);
    return false;
}

/* A ZeroMQ endpoint we can use: tcp://, ipc:// or inproc:// with something after it. */
static bool s_check_endpoint(char *value, size_t size, void *user, char *err, size_t err_len)
{
    static const char *const schemes[] = {"tcp://", "ipc://", "inproc://"};
    for (size_t i = 0; i < PL_ARRAY_SIZE(schemes); i++) {
        size_t n = strlen(schemes[i]);
        if (strncmp(value, schemes[i], n) == 0 && value[n]) {
            for (const char *p = value; *p; p++) {
                if ((unsigned char)*p <= ' ' || *p == 0x7f) {
                    snprintf(err, err_len, "endpoint '%s' contains a space or control character",
                             value);
                    return false;
                }
            }
            return true;
        }
    }
    snprintf(err, err_len,
             "'%s' is not an endpoint like tcp://HOST:PORT, ipc://PATH or inproc://NAME", value);
    return false;
}

/* A CURVE key in Z85: 40 characters of the Z85 alphabet. */
static bool s_check_z85_key(char *value, size_t size, void *user, char *err, size_t err_len)
{
    static const char z85[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                              ".-:+=^!/*?&<>()[]{}@%$#";
    if (strlen(value) != 40) {
        snprintf(err, err_len, "expected a Z85 key of 40 characters, got %zu", strlen(value));
        return false;
    }
    for (const char *p = value; *p; p++) {
        if (!strchr(z85, *p)) {
            snprintf(err, err_len, "character '%c' is not in the Z85 alphabet", *p);
            return false;
        }
    }
    return true;
}

/* Job paths: relative ones are taken from the job file's directory (`user`, may be NULL). */
static bool s_resolve_path(char *value, size_t size, void *user, char *err, size_t err_len)
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

static bool s_post_security(void *base, void *user, char *err, size_t err_len)
{
    const pl_cfg_cluster_t *c = base;
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

#define S_STR(k, flg, T, member, chk)                                                              \
    {                                                                                              \
        .key = k, .type = PL_YS_STR, .flags = flg, .offset = offsetof(T, member),                  \
        .size = sizeof(((T *)0)->member), .check = chk                                             \
    }
#define S_INT(k, T, member, lo, hi, dflt)                                                          \
    {                                                                                              \
        .key = k, .type = PL_YS_INT, .offset = offsetof(T, member), .min = lo, .max = hi,          \
        .def = dflt                                                                                \
    }

static const pl_ys_field_t s_name_elem = {
    .type = PL_YS_STR, .size = PL_CFG_NAME_MAX + 1, .check = s_check_name};

static const pl_ys_field_t s_http_fields[] = {
    {.key = "address",
     .type = PL_YS_STR,
     .offset = offsetof(pl_cfg_http_t, address),
     .size = sizeof(((pl_cfg_http_t *)0)->address),
     .def_str = "127.0.0.1",
     .check = s_check_ip},
    {.key = "port",
     .type = PL_YS_INT,
     .flags = PL_YS_REQUIRED,
     .offset = offsetof(pl_cfg_http_t, port),
     .min = 1,
     .max = 65535},
    {.type = PL_YS_END},
};

static const pl_ys_field_t s_stop_elem = {.type = PL_YS_STR, .size = PL_JOB_STOP_MAX + 1};

/* model/chat_template.h's family names (common/ cannot include model/). */
static const char *const s_chat_formats[] = {"llama3", "llama2", "mistral", "chatml",
                                             "gemma",  "phi3",   NULL};

static const pl_ys_field_t s_cluster_coordinator[] = {
    S_STR("endpoint", PL_YS_REQUIRED, pl_cfg_cluster_t, endpoint, s_check_endpoint),
    S_INT("heartbeat_ms", pl_cfg_cluster_t, heartbeat_ms, 10, 60000, 500),
    S_INT("dead_after_ms", pl_cfg_cluster_t, dead_after_ms, 20, 3600000, 3000),
    {.key = "http",
     .type = PL_YS_MAP,
     .offset = offsetof(pl_cfg_cluster_t, http),
     .fields = s_http_fields},
    S_STR("state_db", 0, pl_cfg_cluster_t, state_db, NULL),
    S_INT("max_queued_jobs", pl_cfg_cluster_t, max_queued_jobs, 1, 1000000, 256),
    S_INT("max_job_mb", pl_cfg_cluster_t, max_job_mb, 1, 4096, 64),
    S_INT("results_kept", pl_cfg_cluster_t, results_kept, 1, 1000000, 1024),
    S_INT("place_timeout_ms", pl_cfg_cluster_t, place_timeout_ms, 10, 86400000, 300000),
    S_INT("load_timeout_ms", pl_cfg_cluster_t, load_timeout_ms, 10, 86400000, 300000),
    S_INT("node_expire_ms", pl_cfg_cluster_t, node_expire_ms, 10, 86400000, 600000),
    {.type = PL_YS_END},
};

static const pl_ys_field_t s_cluster_security[] = {
    S_STR("coordinator_public_key", 0, pl_cfg_cluster_t, public_key, s_check_z85_key),
    S_STR("coordinator_secret_key", 0, pl_cfg_cluster_t, secret_key, s_check_z85_key),
    {.type = PL_YS_END},
};

#define S_FLOAT(k, flg, T, member, lo, hi, dflt)                                                   \
    {                                                                                              \
        .key = k, .type = PL_YS_FLOAT, .flags = flg, .offset = offsetof(T, member), .min = lo,     \
        .max = hi, .def = dflt                                                                     \
    }

static const char *const s_device_kinds[] = {"cpu", "cuda", "hip", NULL};

static const pl_ys_field_t s_cluster_device[] = {
    S_STR("kind", 0, pl_cfg_device_t, kind, NULL),
    S_STR("name", 0, pl_cfg_device_t, name, NULL),
    {.key = "backend",
     .type = PL_YS_STR,
     .offset = offsetof(pl_cfg_device_t, backend),
     .size = sizeof(((pl_cfg_device_t *)0)->backend),
     .choices = s_device_kinds},
    S_INT("count", pl_cfg_device_t, count, 1, PL_CFG_MAX_DEVICE_COUNT, 1),
    S_FLOAT("gflops", PL_YS_MIN_EXCL, pl_cfg_device_t, gflops, 0, 1e9, 0),
    S_FLOAT("mem_gbps", PL_YS_MIN_EXCL, pl_cfg_device_t, mem_gbps, 0, 1e7, 0),
    S_FLOAT("mem_gb", PL_YS_MIN_EXCL, pl_cfg_device_t, mem_gb, 0, 1e7, 0),
    S_FLOAT("compute_efficiency", PL_YS_MIN_EXCL, pl_cfg_device_t, compute_efficiency, 0, 1, 1),
    S_FLOAT("memory_efficiency", PL_YS_MIN_EXCL, pl_cfg_device_t, memory_efficiency, 0, 1, 1),
    S_FLOAT("reserve_gb", 0, pl_cfg_device_t, reserve_gb, 0, 1e6, 0.5),
    {.type = PL_YS_END},
};

static const pl_ys_field_t s_cluster_device_elem = {
    .type = PL_YS_MAP, .fields = s_cluster_device, .post = s_post_device};

static const pl_ys_field_t s_cluster_link[] = {
    S_STR("from", PL_YS_REQUIRED, pl_cfg_link_t, from, s_check_name),
    S_STR("to", PL_YS_REQUIRED, pl_cfg_link_t, to, s_check_name),
    S_FLOAT("gbps", PL_YS_REQUIRED | PL_YS_MIN_EXCL, pl_cfg_link_t, gbps, 0, 1e6, 0),
    S_FLOAT("latency_us", PL_YS_REQUIRED, pl_cfg_link_t, latency_us, 0, 1e7, 0),
    {.type = PL_YS_END},
};

static const pl_ys_field_t s_cluster_link_elem = {
    .type = PL_YS_MAP, .fields = s_cluster_link, .post = s_post_link};

static const pl_ys_field_t s_cluster_node[] = {
    S_STR("name", PL_YS_REQUIRED, pl_cfg_node_entry_t, name, s_check_name),
    {.key = "address",
     .type = PL_YS_STR,
     .offset = offsetof(pl_cfg_node_entry_t, address),
     .size = PL_CFG_NAME_MAX + 1,
     .def_str = "127.0.0.1",
     .check = s_check_host},
    S_INT("threads", pl_cfg_node_entry_t, threads, 0, 4096, 0),
    S_INT("max_devices", pl_cfg_node_entry_t, max_devices, 0, 1024, 0),
    {.key = "labels",
     .type = PL_YS_SEQ,
     .flags = PL_YS_UNIQUE,
     .offset = offsetof(pl_cfg_node_entry_t, labels),
     .size = PL_CFG_NAME_MAX + 1,
     .elem = &s_name_elem,
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

static const char *const s_log_levels[] = {"error", "warn", "info", "debug", NULL};

static const pl_ys_field_t s_device_elem = {
    .type = PL_YS_STR, .size = 16, .choices = s_device_kinds};

static const pl_ys_field_t s_node_fields[] = {
    S_STR("name", PL_YS_REQUIRED, pl_cfg_node_t, name, s_check_name),
    S_STR("coordinator", PL_YS_REQUIRED, pl_cfg_node_t, coordinator, s_check_endpoint),
    {.key = "devices",
     .type = PL_YS_SEQ,
     .flags = PL_YS_UNIQUE,
     .offset = offsetof(pl_cfg_node_t, devices),
     .size = sizeof(((pl_cfg_node_t *)0)->devices[0]),
     .elem = &s_device_elem,
     .count_offset = offsetof(pl_cfg_node_t, n_devices),
     .max_count = (int)PL_ARRAY_SIZE(((pl_cfg_node_t *)0)->devices)},
    S_INT("threads", pl_cfg_node_t, threads, 0, 4096, 0),
    S_INT("memory_reserve_mb", pl_cfg_node_t, memory_reserve_mb, 0, 1 << 20, 512),
    S_INT("heartbeat_ms", pl_cfg_node_t, heartbeat_ms, 10, 60000, 500),
    {.key = "log_level",
     .type = PL_YS_STR,
     .offset = offsetof(pl_cfg_node_t, log_level),
     .size = sizeof(((pl_cfg_node_t *)0)->log_level),
     .def_str = "info",
     .choices = s_log_levels},
    S_FLOAT("slowdown", 0, pl_cfg_node_t, slowdown, 1, 1000, 1),
    S_STR("coordinator_public_key", 0, pl_cfg_node_t, coordinator_key, s_check_z85_key),
    {.key = "http",
     .type = PL_YS_MAP,
     .offset = offsetof(pl_cfg_node_t, http),
     .fields = s_http_fields},
    {.type = PL_YS_END},
};

static const pl_ys_field_t s_node_root = {.type = PL_YS_MAP, .fields = s_node_fields};

static const pl_ys_field_t s_job_sampling[] = {
    {.key = "temperature",
     .type = PL_YS_FLOAT,
     .offset = offsetof(pl_cfg_job_t, gen.temperature),
     .min = 0,
     .max = 100,
     .def = 0},
    S_INT("top_k", pl_cfg_job_t, gen.top_k, 0, 1000000, 0),
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
     .elem = &s_name_elem,
     .count_offset = offsetof(pl_cfg_job_t, n_nodes),
     .max_count = PL_CFG_MAX_NODES},
    {.type = PL_YS_END},
};

static const char *const s_planners[] = {"optimal", "auto", "even", NULL};
static const char *const s_wire_dtypes[] = {"f32", "bf16", "f16", NULL};

static const pl_ys_field_t s_job_fields[] = {
    S_STR("model", PL_YS_REQUIRED, pl_cfg_job_t, model, s_resolve_path),
    S_STR("prompts", PL_YS_REQUIRED, pl_cfg_job_t, prompts, s_resolve_path),
    S_INT("max_new_tokens", pl_cfg_job_t, gen.max_new_tokens, 1, PL_JOB_MAX_NEW_TOKENS, 16),
    S_INT("min_new_tokens", pl_cfg_job_t, gen.min_new_tokens, 0, PL_JOB_MAX_NEW_TOKENS, 0),
    {.key = "sampling", .type = PL_YS_MAP, .fields = s_job_sampling},
    S_INT("microbatches", pl_cfg_job_t, microbatches, 0, 1024, 0),
    S_INT("prefill_chunk", pl_cfg_job_t, gen.prefill_chunk, 0, PL_JOB_MAX_PREFILL_CHUNK, 0),
    S_INT("stages", pl_cfg_job_t, stages, 0, 64, 0),
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

/* Parse into a zeroed scratch copy of `size` bytes; copy to `out` only on success. */
static pl_status_t s_parse(const char *text, size_t len, const char *origin,
                           const pl_ys_field_t *root, void *user, void *out, size_t size)
{
    void *tmp;
    pl_status_t st;

    if (!origin)
        origin = "<config>";
    if (len > PL_CFG_MAX_BYTES)
        return pl_error(PL_ERR_RANGE, "%s: %zu bytes, more than the limit of %u", origin, len,
                        PL_CFG_MAX_BYTES);
    if (!text && len)
        return pl_error(PL_ERR_INVALID, "%s: no text", origin);
    tmp = calloc(1, size);
    if (!tmp)
        return pl_error(PL_ERR_NOMEM, "%s: out of memory", origin);
    st = pl_ys_parse(text ? text : "", len, origin, root, tmp, user);
    if (st == PL_OK)
        memcpy(out, tmp, size);
    free(tmp);
    return st;
}

static pl_status_t s_load(const char *path,
                          pl_status_t (*parse)(const char *, size_t, const char *, void *),
                          void *out)
{
    char *text = NULL;
    size_t len = 0;
    pl_status_t st = pl_file_read(path, PL_CFG_MAX_BYTES, &text, &len);
    if (st != PL_OK)
        return st;
    st = parse(text, len, path, out);
    free(text);
    return st;
}

pl_status_t pl_cfg_cluster_parse(const char *text, size_t len, const char *origin,
                                 pl_cfg_cluster_t *out)
{
    return s_parse(text, len, origin, &s_cluster_root, NULL, out, sizeof(*out));
}

pl_status_t pl_cfg_node_parse(const char *text, size_t len, const char *origin, pl_cfg_node_t *out)
{
    return s_parse(text, len, origin, &s_node_root, NULL, out, sizeof(*out));
}

pl_status_t pl_cfg_job_parse(const char *text, size_t len, const char *origin, const char *base_dir,
                             pl_cfg_job_t *out)
{
    return s_parse(text, len, origin, &s_job_root, (void *)base_dir, out, sizeof(*out));
}

static pl_status_t s_cluster_parse_cb(const char *text, size_t len, const char *origin, void *out)
{
    return pl_cfg_cluster_parse(text, len, origin, out);
}

static pl_status_t s_node_parse_cb(const char *text, size_t len, const char *origin, void *out)
{
    return pl_cfg_node_parse(text, len, origin, out);
}

static pl_status_t s_job_parse_cb(const char *text, size_t len, const char *origin, void *out)
{
    char base_dir[PATH_MAX];
    pl_path_dirname(origin, base_dir, sizeof(base_dir));
    return pl_cfg_job_parse(text, len, origin, base_dir, out);
}

pl_status_t pl_cfg_cluster_load(const char *path, pl_cfg_cluster_t *out)
{
    return s_load(path, s_cluster_parse_cb, out);
}

pl_status_t pl_cfg_node_load(const char *path, pl_cfg_node_t *out)
{
    return s_load(path, s_node_parse_cb, out);
}

pl_status_t pl_cfg_job_load(const char *path, pl_cfg_job_t *out)
{
    return s_load(path, s_job_parse_cb, out);
}

pl_status_t pl_cfg_http_parse(const char *text, const char *origin, pl_cfg_http_t *out)
{
    pl_cfg_http_t h = {0};
    char err[160];
    const char *colon = strrchr(text, ':');
    size_t alen = colon ? (size_t)(colon - text) : 0;
    if (alen >= 2 && text[0] == '[' && text[alen - 1] == ']') /* [::1]:9100 */
        text++, alen -= 2;
    if (!colon || alen == 0 || alen >= sizeof(h.address))
        return pl_error(PL_ERR_INVALID, "%s: '%s' is not ADDRESS:PORT", origin, text);
    memcpy(h.address, text, alen);
    if (!s_check_ip(h.address, sizeof(h.address), NULL, err, sizeof(err)))
        return pl_error(PL_ERR_INVALID, "%s: %s", origin, err);
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (!colon[1] || *end || port < 1 || port > 65535)
        return pl_error(PL_ERR_RANGE, "%s: port '%s' is not 1-65535", origin, colon + 1);
    h.port = (int)port;
    *out = h;
    return PL_OK;
}
