/* Checked field access on jansson objects: every getter validates presence, type and range
 * and names the field in its error. Used for network messages and config.json alike. */
#ifndef PL_COMMON_JSON_H
#define PL_COMMON_JSON_H

#include "common/status.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* Required integer field within [min, max]. */
pl_status_t pl_json_int(const json_t *obj, const char *key, int64_t min, int64_t max, int64_t *out);
/* Optional integer: *out keeps its value when the key is absent or null. */
pl_status_t pl_json_int_opt(const json_t *obj, const char *key, int64_t min, int64_t max,
                            int64_t *out);
/* Number (integer or real) within [min, max]. */
pl_status_t pl_json_num(const json_t *obj, const char *key, double min, double max, double *out);
pl_status_t pl_json_num_opt(const json_t *obj, const char *key, double min, double max,
                            double *out);
pl_status_t pl_json_bool_opt(const json_t *obj, const char *key, bool *out);
/* String field of at most max_len bytes, copied into out (size max_len + 1). */
pl_status_t pl_json_str(const json_t *obj, const char *key, char *out, size_t max_len);
/* Borrowed string value; NULL when absent (error only for wrong type or too long). */
pl_status_t pl_json_str_opt(const json_t *obj, const char *key, size_t max_len, const char **out);
/* Array field with at most max_len entries; borrowed. */
pl_status_t pl_json_array(const json_t *obj, const char *key, size_t max_len, json_t **out);

#endif
