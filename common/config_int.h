/* Internals shared by the YAML config loaders (config.c and config_{cluster,node,job}.c): the
 * schema-entry macros, the value checks and tables more than one file kind uses, the loaders. */
#ifndef PL_COMMON_CONFIG_INT_H
#define PL_COMMON_CONFIG_INT_H

#include "common/config.h"
#include "common/yaml_schema.h"

#include <stdbool.h>
#include <stddef.h>

/* Schema entries of the common shapes: a string (with an optional check), an int with its range
 * and default, a float likewise, a string of a fixed set of words with a default. */
#define PL_CFG_STR(k, flg, T, member, chk)                                                         \
    {                                                                                              \
        .key = k, .type = PL_YS_STR, .flags = flg, .offset = offsetof(T, member),                  \
        .size = sizeof(((T *)0)->member), .check = chk                                             \
    }
#define PL_CFG_INT(k, T, member, lo, hi, dflt)                                                     \
    {                                                                                              \
        .key = k, .type = PL_YS_INT, .offset = offsetof(T, member), .min = lo, .max = hi,          \
        .def = dflt                                                                                \
    }
#define PL_CFG_FLOAT(k, flg, T, member, lo, hi, dflt)                                              \
    {                                                                                              \
        .key = k, .type = PL_YS_FLOAT, .flags = flg, .offset = offsetof(T, member), .min = lo,     \
        .max = hi, .def = dflt                                                                     \
    }
#define PL_CFG_CHOICE(k, T, member, dflt, words)                                                   \
    {                                                                                              \
        .key = k, .type = PL_YS_STR, .offset = offsetof(T, member),                                \
        .size = sizeof(((T *)0)->member), .def_str = dflt, .choices = words                        \
    }

/* Value checks (pl_ys_field_t.check): a name [A-Za-z0-9_.-]+, a ZeroMQ endpoint, a Z85 key. */
bool pl_cfg_name_check(char *value, size_t size, void *user, char *err, size_t err_len);
bool pl_cfg_endpoint_check(char *value, size_t size, void *user, char *err, size_t err_len);
bool pl_cfg_z85_key_check(char *value, size_t size, void *user, char *err, size_t err_len);
/* A job file's path: a relative one is taken from the file's directory (`user`, may be NULL). */
bool pl_cfg_path_resolve(char *value, size_t size, void *user, char *err, size_t err_len);

bool pl_cfg_ip_check(char *value, size_t size, void *user, char *err, size_t err_len);

/* The keys every http section has (the node's is exactly these; the coordinator's adds the API's
 * keys). */
#define PL_CFG_HTTP_COMMON_FIELDS                                                                  \
    {.key = "address",                                                                             \
     .type = PL_YS_STR,                                                                            \
     .offset = offsetof(pl_cfg_http_t, address),                                                   \
     .size = sizeof(((pl_cfg_http_t *)0)->address),                                                \
     .def_str = "127.0.0.1",                                                                       \
     .check = pl_cfg_ip_check},                                                                    \
        {.key = "port",                                                                            \
         .type = PL_YS_INT,                                                                        \
         .flags = PL_YS_REQUIRED,                                                                  \
         .offset = offsetof(pl_cfg_http_t, port),                                                  \
         .min = 1,                                                                                 \
         .max = 65535},                                                                            \
        PL_CFG_INT("max_connections", pl_cfg_http_t, max_connections, 1, 4096,                    \
                   PL_CFG_HTTP_MAX_CONNS),                                                         \
        PL_CFG_INT("max_body_kb", pl_cfg_http_t, max_body_kb, 1, 65536, 1024)

/* A sequence element that is a checked name; the device kinds (cpu, cuda, hip, NULL-ended); the
 * http section's fields (a node's). */
extern const pl_ys_field_t pl_cfg_name_elem;
extern const char *const pl_cfg_device_kinds[];
extern const pl_ys_field_t pl_cfg_http_fields[];

/* Parse text against `root` into a zeroed scratch copy of `size` bytes; copy it to `out` only on
 * success. Errors name `origin` ("<config>" when NULL). */
pl_status_t pl_cfg_schema_parse(const char *text, size_t len, const char *origin,
                                const pl_ys_field_t *root, void *user, void *out, size_t size);
/* Read the file at `path` (at most PL_CFG_MAX_BYTES) and hand it to `parse` as its origin. */
pl_status_t pl_cfg_file_load(const char *path,
                             pl_status_t (*parse)(const char *, size_t, const char *, void *),
                             void *out);

#endif
