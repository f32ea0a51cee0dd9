/* What the YAML config loaders share: the value checks and tables more than one file kind uses,
 * the loaders that fill the caller's struct only when the whole file is valid, the --http flag,
 * the coordinator's node endpoint derived from its client endpoint. */
#include "common/config.h"
#include "common/config_int.h"

#include "common/util.h"
#include "common/yaml_schema.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- value checks ---- */

bool pl_cfg_name_ok(const char *name)
{
    if (!name[0])
        return false;
    for (const char *p = name; *p; p++)
        if (!strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-", *p))
            return false;
    return true;
}

bool pl_cfg_name_check(char *value, size_t size, void *user, char *err, size_t err_len)
{
    if (value[0] && !pl_cfg_name_ok(value)) {
        snprintf(err, err_len, "'%s' must match [A-Za-z0-9_.-]+", value);
        return false;
    }
    return true;
}

/* What an HTTP listener binds: an IPv4 or IPv6 literal (a name would need a resolver). */
bool pl_cfg_ip_check(char *value, size_t size, void *user, char *err, size_t err_len)
{
    unsigned char buf[sizeof(struct in6_addr)];
    if (inet_pton(AF_INET, value, buf) == 1 || inet_pton(AF_INET6, value, buf) == 1)
        return true;
    snprintf(err, err_len, "'%s' is not an IPv4 or IPv6 address", value);
    return false;
}

/* A ZeroMQ endpoint we can use: tcp://, ipc:// or inproc:// with something after it. */
bool pl_cfg_endpoint_check(char *value, size_t size, void *user, char *err, size_t err_len)
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
bool pl_cfg_z85_key_check(char *value, size_t size, void *user, char *err, size_t err_len)
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

/* ---- shared tables ---- */

const pl_ys_field_t pl_cfg_name_elem = {
    .type = PL_YS_STR, .size = PL_CFG_NAME_MAX + 1, .check = pl_cfg_name_check};

const char *const pl_cfg_device_kinds[] = {"cpu", "cuda", "hip", NULL};

const pl_ys_field_t pl_cfg_http_fields[] = {
    PL_CFG_HTTP_COMMON_FIELDS,
    {.type = PL_YS_END},
};

/* ---- loaders ---- */

/* Parse into a zeroed scratch copy of `size` bytes; copy to `out` only on success. */
pl_status_t pl_cfg_schema_parse(const char *text, size_t len, const char *origin,
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

pl_status_t pl_cfg_file_load(const char *path,
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

pl_status_t pl_cfg_http_parse(const char *text, const char *origin, pl_cfg_http_t *out)
{
    static const pl_cfg_http_t zero;
    pl_cfg_http_t h = zero;
    char err[160];
    const char *colon = strrchr(text, ':');
    size_t alen = colon ? (size_t)(colon - text) : 0;
    if (alen >= 2 && text[0] == '[' && text[alen - 1] == ']') /* [::1]:9100 */
        text++, alen -= 2;
    if (!colon || alen == 0 || alen >= sizeof(h.address))
        return pl_error(PL_ERR_INVALID, "%s: '%s' is not ADDRESS:PORT", origin, text);
    memcpy(h.address, text, alen);
    if (!pl_cfg_ip_check(h.address, sizeof(h.address), NULL, err, sizeof(err)))
        return pl_error(PL_ERR_INVALID, "%s: %s", origin, err);
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (!colon[1] || *end || port < 1 || port > 65535)
        return pl_error(PL_ERR_RANGE, "%s: port '%s' is not 1-65535", origin, colon + 1);
    memcpy(out->address, h.address, sizeof(out->address));
    out->port = (int)port;
    if (!out->max_connections)
        out->max_connections = PL_CFG_HTTP_MAX_CONNS;
    if (!out->max_body_kb)
        out->max_body_kb = 1024;
    return PL_OK;
}

pl_status_t pl_cfg_node_endpoint(const char *endpoint, const char *node_endpoint, char *out,
                                 size_t len)
{
    int n;
    if (node_endpoint && node_endpoint[0]) {
        n = snprintf(out, len, "%s", node_endpoint);
    } else if (strncmp(endpoint, "tcp://", 6) == 0) {
        /* tcp://HOST:PORT -> tcp://HOST:PORT+1 (HOST may be [v6]) */
        const char *colon = strrchr(endpoint + 6, ':');
        char *end;
        long port = colon ? strtol(colon + 1, &end, 10) : 0;
        if (!colon || !colon[1] || *end || port < 1 || port >= 65535)
            return pl_error(PL_ERR_INVALID,
                            "coordinator endpoint '%.200s' has no numeric port below 65535 to "
                            "derive the node endpoint from (port + 1): set "
                            "coordinator.node_endpoint (pipeld: coordinator_node_endpoint)",
                            endpoint);
        n = snprintf(out, len, "%.*s:%ld", (int)(colon - endpoint), endpoint, port + 1);
    } else if (strncmp(endpoint, "ipc://", 6) == 0 || strncmp(endpoint, "inproc://", 9) == 0) {
        n = snprintf(out, len, "%s.nodes", endpoint);
    } else {
        return pl_error(PL_ERR_INVALID, "'%.200s' is not a tcp://, ipc:// or inproc:// endpoint",
                        endpoint);
    }
    if (n < 0 || (size_t)n >= len)
        return pl_error(PL_ERR_RANGE, "the node endpoint for '%.200s' is longer than %zu bytes",
                        endpoint, len - 1);
    return PL_OK;
}
