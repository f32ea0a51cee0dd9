/* Validated getters over jansson objects. */
#include "common/json.h"

#include <string.h>

static pl_status_t s_need(const json_t *obj, const char *key, json_t **v)
{
    if (!json_is_object(obj))
        return pl_error(PL_ERR_INVALID, "expected an object holding '%s'", key);
    *v = json_object_get(obj, key);
    if (!*v)
        return pl_error(PL_ERR_INVALID, "missing field '%s'", key);
    return PL_OK;
}

pl_status_t pl_json_int(const json_t *obj, const char *key, int64_t min, int64_t max, int64_t *out)
{
    json_t *v = NULL;
    pl_status_t st = s_need(obj, key, &v);
    if (st)
        return st;
    if (!json_is_integer(v))
        return pl_error(PL_ERR_INVALID, "field '%s': expected an integer", key);
    json_int_t i = json_integer_value(v);
    if (i < min || i > max)
        return pl_error(PL_ERR_RANGE, "field '%s': %lld not in [%lld, %lld]", key, (long long)i,
                        (long long)min, (long long)max);
    *out = i;
    return PL_OK;
}

pl_status_t pl_json_int_opt(const json_t *obj, const char *key, int64_t min, int64_t max,
                            int64_t *out)
{
    json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
    if (!v || json_is_null(v))
        return PL_OK;
    return pl_json_int(obj, key, min, max, out);
}

pl_status_t pl_json_num(const json_t *obj, const char *key, double min, double max, double *out)
{
    json_t *v = NULL;
    pl_status_t st = s_need(obj, key, &v);
    if (st)
        return st;
    if (!json_is_number(v))
        return pl_error(PL_ERR_INVALID, "field '%s': expected a number", key);
    double d = json_number_value(v);
    if (!(d >= min && d <= max))
        return pl_error(PL_ERR_RANGE, "field '%s': %g not in [%g, %g]", key, d, min, max);
    *out = d;
    return PL_OK;
}

pl_status_t pl_json_num_opt(const json_t *obj, const char *key, double min, double max,
                            double *out)
{
    json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
    if (!v || json_is_null(v))
        return PL_OK;
    return pl_json_num(obj, key, min, max, out);
}

pl_status_t pl_json_bool_opt(const json_t *obj, const char *key, bool *out)
{
    json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
    if (!v || json_is_null(v))
        return PL_OK;
    if (!json_is_boolean(v))
        return pl_error(PL_ERR_INVALID, "field '%s': expected true or false", key);
    *out = json_is_true(v);
    return PL_OK;
}

pl_status_t pl_json_str(const json_t *obj, const char *key, char *out, size_t max_len)
{
    json_t *v = NULL;
    pl_status_t st = s_need(obj, key, &v);
    if (st)
        return st;
    if (!json_is_string(v))
        return pl_error(PL_ERR_INVALID, "field '%s': expected a string", key);
    size_t n = json_string_length(v);
    if (n > max_len)
        return pl_error(PL_ERR_RANGE, "field '%s': %zu bytes, at most %zu allowed", key, n,
                        max_len);
    if (strlen(json_string_value(v)) != n)
        return pl_error(PL_ERR_INVALID, "field '%s': embedded NUL", key);
    memcpy(out, json_string_value(v), n + 1);
    return PL_OK;
}

pl_status_t pl_json_str_opt(const json_t *obj, const char *key, size_t max_len, const char **out)
{
    json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
    *out = NULL;
    if (!v || json_is_null(v))
        return PL_OK;
    if (!json_is_string(v))
        return pl_error(PL_ERR_INVALID, "field '%s': expected a string", key);
    if (json_string_length(v) > max_len)
        return pl_error(PL_ERR_RANGE, "field '%s': longer than %zu bytes", key, max_len);
    *out = json_string_value(v);
    return PL_OK;
}

pl_status_t pl_json_array(const json_t *obj, const char *key, size_t max_len, json_t **out)
{
    json_t *v = NULL;
    pl_status_t st = s_need(obj, key, &v);
    if (st)
        return st;
    if (!json_is_array(v))
        return pl_error(PL_ERR_INVALID, "field '%s': expected an array", key);
    if (json_array_size(v) > max_len)
        return pl_error(PL_ERR_RANGE, "field '%s': %zu entries, at most %zu allowed", key,
                        json_array_size(v), max_len);
    *out = v;
    return PL_OK;
}
