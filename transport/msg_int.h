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

/* A required string as pl_json_str, and non-empty. */
pl_status_t pl_msg_int_name(const json_t *obj, const char *key, char *out, size_t max_len);

/* A sequence's finish as the wire spells it ("none", "eos", "length", "stop"), and back
 * (PL_ERR_INVALID naming the value). */
const char *pl_msg_int_finish_name(int finish);
pl_status_t pl_msg_int_finish_parse(const char *name, int *finish_p);

#endif
