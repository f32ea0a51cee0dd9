/* Helpers the message codecs share (transport/ only): finishing an encode, owned optional
 * strings. */
#ifndef PL_TRANSPORT_MSG_INT_H
#define PL_TRANSPORT_MSG_INT_H

#include "common/status.h"

#include <jansson.h>
#include <stddef.h>

/* *body_p = body, or PL_ERR_INVALID naming `what` when building it failed (json_pack returns
 * NULL for a NaN or infinite number, a non-UTF-8 string, or no memory). */
pl_status_t pl_msg_int_done(json_t *body, const char *what, json_t **body_p);

/* Optional string field of 1..max_len bytes without NUL, copied into a new *out (NULL when
 * absent or null). */
pl_status_t pl_msg_int_strdup_opt(const json_t *obj, const char *key, size_t max_len, char **out);

/* job, stage (min_stage .. PL_MSG_MAX_STAGES - 1) and epoch, the first fields of every stage
 * message; set only on success. */
pl_status_t pl_msg_int_ids(const json_t *body, int64_t min_stage, uint32_t *job, int *stage,
                           uint32_t *epoch);

/* A required string as pl_json_str, and non-empty. */
pl_status_t pl_msg_int_name(const json_t *obj, const char *key, char *out, size_t max_len);

#endif
