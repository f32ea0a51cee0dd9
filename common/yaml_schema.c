/* Schema-driven YAML loading: walks the document tree against field tables, applies defaults,
 * checks types, ranges and lengths, and names the key and position of the first problem. */
#include "common/yaml_schema.h"

#include "common/yaml_tree.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define S_PATH_MAX 512
#define S_MAX_FIELDS 64

typedef struct {
    const char *origin;
    void *user;
    char path[S_PATH_MAX]; /* dotted key path of the value being read, "" at the root */
} s_ctx_t;

static pl_status_t s_fail(const s_ctx_t *c, const pl_yt_node_t *at, pl_status_t st, const char *fmt,
                          ...) __attribute__((format(printf, 4, 5)));

static pl_status_t s_fail(const s_ctx_t *c, const pl_yt_node_t *at, pl_status_t st, const char *fmt,
                          ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return pl_error(st, "%s:%zu:%zu: %s", c->origin, at->line, at->col, msg);
}

/* An error about the value at the current path: "key 'a.b': msg" ("msg" alone at the root). */
static pl_status_t s_fail_key(const s_ctx_t *c, const pl_yt_node_t *at, pl_status_t st,
                              const char *msg)
{
    if (!c->path[0])
        return s_fail(c, at, st, "%s", msg);
    return s_fail(c, at, st, "key '%s': %s", c->path, msg);
}

/* Append ".key" or "[i]" to the path; returns the old length for s_path_pop. */
static size_t s_path_push_key(s_ctx_t *c, const char *key)
{
    size_t old = strlen(c->path);
    snprintf(c->path + old, sizeof(c->path) - old, "%s%s", old ? "." : "", key);
    return old;
}

static size_t s_path_push_index(s_ctx_t *c, size_t i)
{
    size_t old = strlen(c->path);
    snprintf(c->path + old, sizeof(c->path) - old, "[%zu]", i);
    return old;
}

static void s_path_pop(s_ctx_t *c, size_t old)
{
    c->path[old] = '\0';
}

static void s_defaults(const pl_ys_field_t *fields, char *base)
{
    for (const pl_ys_field_t *f = fields; f->type != PL_YS_END; f++) {
        char *p = base + f->offset;
        switch (f->type) {
        case PL_YS_STR:
            assert(!f->def_str || strlen(f->def_str) < f->size);
            snprintf(p, f->size, "%s", f->def_str ? f->def_str : "");
            break;
        case PL_YS_INT:
            *(int *)p = (int)f->def;
            break;
        case PL_YS_U64:
            *(uint64_t *)p = (uint64_t)f->def;
            break;
        case PL_YS_FLOAT:
            *(float *)p = (float)f->def;
            break;
        case PL_YS_BOOL:
            *(bool *)p = f->def != 0;
            break;
        case PL_YS_MAP:
            s_defaults(f->fields, p);
            break;
        case PL_YS_SEQ:
            *(int *)(base + f->count_offset) = 0;
            break;
        case PL_YS_END:
            break;
        }
    }
}

/* Whether d is one or more decimal digits and nothing else. */
static bool s_all_digits(const char *d)
{
    if (!*d)
        return false;
    for (; *d; d++)
        if (*d < '0' || *d > '9')
            return false;
    return true;
}

/* Decimal integer with optional sign; -1: not an integer, -2: does not fit a long long. */
static int s_parse_ll(const char *s, long long *out)
{
    if (!s_all_digits(s + (*s == '+' || *s == '-')))
        return -1;
    errno = 0;
    *out = strtoll(s, NULL, 10);
    return errno == ERANGE ? -2 : 0;
}

/* Decimal integer with optional '+'; -1: not one, -2: does not fit 64 bits unsigned. */
static int s_parse_u64(const char *s, uint64_t *out)
{
    const char *d = s + (*s == '+');
    if (!s_all_digits(d))
        return -1;
    errno = 0;
    *out = strtoull(d, NULL, 10);
    return errno == ERANGE ? -2 : 0;
}

/* [+-]? (D+ (. D*)? | . D+) ([eE] [+-]? D+)? — no hex, inf or nan, which strtod would take. */
static bool s_parse_double(const char *s, double *out)
{
    const char *q = s + (*s == '+' || *s == '-');
    size_t int_digits = 0, frac_digits = 0;
    while (*q >= '0' && *q <= '9')
        q++, int_digits++;
    if (*q == '.') {
        q++;
        while (*q >= '0' && *q <= '9')
            q++, frac_digits++;
    }
    if (int_digits + frac_digits == 0)
        return false;
    if (*q == 'e' || *q == 'E') {
        q++;
        q += (*q == '+' || *q == '-');
        if (*q < '0' || *q > '9')
            return false;
        while (*q >= '0' && *q <= '9')
            q++;
    }
    if (*q)
        return false;
    *out = strtod(s, NULL);
    return true;
}

static bool s_is_plain_value(const pl_yt_node_t *node)
{
    return node->kind == PL_YT_SCALAR && node->plain && !pl_yt_is_null(node) &&
           strlen(node->value) == node->len;
}

static pl_status_t s_str(s_ctx_t *c, const pl_ys_field_t *f, const pl_yt_node_t *node, char *p)
{
    char msg[512];

    if (node->kind != PL_YT_SCALAR || pl_yt_is_null(node))
        return s_fail_key(c, node, PL_ERR_INVALID, "expected a string");
    if (strlen(node->value) != node->len)
        return s_fail_key(c, node, PL_ERR_INVALID, "string contains a NUL byte");
    if (node->len == 0)
        return s_fail_key(c, node, PL_ERR_INVALID, "must not be empty");
    if (node->len >= f->size) {
        snprintf(msg, sizeof(msg), "string of %zu bytes is longer than the limit of %zu", node->len,
                 f->size - 1);
        return s_fail_key(c, node, PL_ERR_RANGE, msg);
    }
    if (f->choices) {
        size_t n = 0;
        bool found = false;
        for (const char *const *ch = f->choices; *ch; ch++) {
            found = found || strcmp(*ch, node->value) == 0;
            if (n < sizeof(msg))
                n += (size_t)snprintf(msg + n, sizeof(msg) - n, "%s%s",
                                      ch == f->choices ? "expected one of " : ", ", *ch);
        }
        if (!found)
            return s_fail_key(c, node, PL_ERR_INVALID, msg);
    }
    memcpy(p, node->value, node->len + 1);
    if (f->check && !f->check(p, f->size, c->user, msg, sizeof(msg)))
        return s_fail_key(c, node, PL_ERR_INVALID, msg);
    return PL_OK;
}

static pl_status_t s_number(s_ctx_t *c, const pl_ys_field_t *f, const pl_yt_node_t *node, char *p)
{
    char msg[512];
    const char *text = node->value;
    char lo = (f->flags & PL_YS_MIN_EXCL) ? '(' : '[';

    switch (f->type) {
    case PL_YS_INT: {
        long long v = 0;
        int rc = s_is_plain_value(node) ? s_parse_ll(text, &v) : -1;
        if (rc == -1)
            return s_fail_key(c, node, PL_ERR_INVALID, "expected an integer");
        if (rc == -2 || (double)v < f->min || (double)v > f->max) {
            snprintf(msg, sizeof(msg), "value %s out of range [%.0f, %.0f]", text, f->min, f->max);
            return s_fail_key(c, node, PL_ERR_RANGE, msg);
        }
        *(int *)p = (int)v;
        return PL_OK;
    }
    case PL_YS_U64: {
        uint64_t v = 0;
        int rc = s_is_plain_value(node) ? s_parse_u64(text, &v) : -1;
        if (rc == -1)
            return s_fail_key(c, node, PL_ERR_INVALID, "expected a non-negative integer");
        if (rc == -2) {
            snprintf(msg, sizeof(msg), "value %s out of range [0, %llu]", text,
                     (unsigned long long)UINT64_MAX);
            return s_fail_key(c, node, PL_ERR_RANGE, msg);
        }
        *(uint64_t *)p = v;
        return PL_OK;
    }
    case PL_YS_FLOAT: {
        double d = 0;
        if (!s_is_plain_value(node) || !s_parse_double(text, &d))
            return s_fail_key(c, node, PL_ERR_INVALID, "expected a number");
        /* the range holds for the value as stored: a float, where 1e-300 is 0 */
        float v = (float)d;
        if (!isfinite(d) || !isfinite(v) || v > f->max || v < f->min ||
            ((f->flags & PL_YS_MIN_EXCL) && v == f->min)) {
            snprintf(msg, sizeof(msg), "value %s out of range %c%g, %g]", text, lo, f->min, f->max);
            return s_fail_key(c, node, PL_ERR_RANGE, msg);
        }
        *(float *)p = v;
        return PL_OK;
    }
    case PL_YS_BOOL:
        if (s_is_plain_value(node) &&
            (strcasecmp(text, "true") == 0 || strcasecmp(text, "yes") == 0)) {
            *(bool *)p = true;
            return PL_OK;
        }
        if (s_is_plain_value(node) &&
            (strcasecmp(text, "false") == 0 || strcasecmp(text, "no") == 0)) {
            *(bool *)p = false;
            return PL_OK;
        }
        return s_fail_key(c, node, PL_ERR_INVALID, "expected a boolean (true, false, yes, no)");
    default:
        assert(!"not a number type");
        return PL_ERR_INVALID;
    }
}

static pl_status_t s_value(s_ctx_t *c, const pl_ys_field_t *f, const pl_yt_node_t *node,
                           char *base);

static const pl_ys_field_t *s_find(const pl_ys_field_t *fields, const char *key)
{
    for (const pl_ys_field_t *f = fields; f->type != PL_YS_END; f++)
        if (strcmp(f->key, key) == 0)
            return f;
    return NULL;
}

/* The value node of `key` in a mapping node, or NULL. */
static const pl_yt_node_t *s_lookup(const pl_yt_node_t *map, const char *key)
{
    for (size_t i = 0; i + 1 < map->n_kids; i += 2)
        if (map->kids[i]->kind == PL_YT_SCALAR && strcmp(map->kids[i]->value, key) == 0)
            return map->kids[i + 1];
    return NULL;
}

static pl_status_t s_map(s_ctx_t *c, const pl_ys_field_t *mf, const pl_yt_node_t *node, char *base)
{
    bool seen[S_MAX_FIELDS] = {false};
    char msg[512];
    pl_status_t st;

    if (node->kind != PL_YT_MAP)
        return s_fail_key(c, node, PL_ERR_INVALID, "expected a mapping");
    for (size_t i = 0; i + 1 < node->n_kids; i += 2) {
        const pl_yt_node_t *key = node->kids[i];
        const pl_ys_field_t *f;
        size_t old;

        if (key->kind != PL_YT_SCALAR || strlen(key->value) != key->len)
            return s_fail_key(c, key, PL_ERR_INVALID, "expected a string key");
        f = s_find(mf->fields, key->value);
        if (!f)
            return s_fail(c, key, PL_ERR_INVALID, "unknown key '%s%s%.200s'", c->path,
                          c->path[0] ? "." : "", key->value);
        assert(f - mf->fields < S_MAX_FIELDS);
        if (seen[f - mf->fields])
            return s_fail(c, key, PL_ERR_INVALID, "duplicate key '%s%s%s'", c->path,
                          c->path[0] ? "." : "", f->key);
        seen[f - mf->fields] = true;
        old = s_path_push_key(c, f->key);
        st = s_value(c, f, node->kids[i + 1], base);
        s_path_pop(c, old);
        if (st != PL_OK)
            return st;
    }
    for (const pl_ys_field_t *f = mf->fields; f->type != PL_YS_END; f++)
        if ((f->flags & PL_YS_REQUIRED) && !seen[f - mf->fields])
            return s_fail(c, node, PL_ERR_INVALID, "missing required key '%s%s%s'", c->path,
                          c->path[0] ? "." : "", f->key);
    if (mf->post && !mf->post(base, c->user, msg, sizeof(msg)))
        return s_fail_key(c, node, PL_ERR_INVALID, msg);
    return PL_OK;
}

/* Element i of a sequence of mappings must differ from the earlier ones in f->unique_key. */
static pl_status_t s_check_unique_key(s_ctx_t *c, const pl_ys_field_t *f,
                                      const pl_yt_node_t *elem_node, char *arr, size_t i)
{
    const pl_ys_field_t *uf = s_find(f->elem->fields, f->unique_key);
    const pl_yt_node_t *at = s_lookup(elem_node, f->unique_key);
    const char *mine;
    char msg[512];

    assert(uf && uf->type == PL_YS_STR);
    mine = arr + i * f->size + uf->offset;
    if (!mine[0])
        return PL_OK;
    for (size_t j = 0; j < i; j++) {
        if (strcmp(arr + j * f->size + uf->offset, mine) == 0) {
            size_t old = s_path_push_key(c, f->unique_key);
            snprintf(msg, sizeof(msg), "duplicate value '%s' (also in entry %zu)", mine, j);
            s_fail_key(c, at ? at : elem_node, PL_ERR_INVALID, msg);
            s_path_pop(c, old);
            return PL_ERR_INVALID;
        }
    }
    return PL_OK;
}

static pl_status_t s_seq(s_ctx_t *c, const pl_ys_field_t *f, const pl_yt_node_t *node, char *base)
{
    char *arr = base + f->offset;
    char msg[512];
    pl_status_t st;

    if (node->kind != PL_YT_SEQ)
        return s_fail_key(c, node, PL_ERR_INVALID, "expected a sequence");
    if (node->n_kids > (size_t)f->max_count) {
        snprintf(msg, sizeof(msg), "more than %d entries", f->max_count);
        return s_fail_key(c, node->kids[f->max_count], PL_ERR_RANGE, msg);
    }
    for (size_t i = 0; i < node->n_kids; i++) {
        const pl_yt_node_t *kid = node->kids[i];
        char *elem = arr + i * f->size;
        size_t old = s_path_push_index(c, i);

        if (f->elem->type == PL_YS_MAP) {
            s_defaults(f->elem->fields, elem);
            st = s_map(c, f->elem, kid, elem);
            if (st == PL_OK && f->unique_key)
                st = s_check_unique_key(c, f, kid, arr, i);
        } else {
            st = s_value(c, f->elem, kid, elem);
            for (size_t j = 0; st == PL_OK && (f->flags & PL_YS_UNIQUE) && j < i; j++) {
                assert(f->elem->type == PL_YS_STR);
                if (strcmp(arr + j * f->size, elem) == 0) {
                    snprintf(msg, sizeof(msg), "duplicate value '%s'", elem);
                    st = s_fail_key(c, kid, PL_ERR_INVALID, msg);
                }
            }
        }
        s_path_pop(c, old);
        if (st != PL_OK)
            return st;
    }
    *(int *)(base + f->count_offset) = (int)node->n_kids;
    return PL_OK;
}

static pl_status_t s_value(s_ctx_t *c, const pl_ys_field_t *f, const pl_yt_node_t *node, char *base)
{
    switch (f->type) {
    case PL_YS_STR:
        return s_str(c, f, node, base + f->offset);
    case PL_YS_MAP:
        return s_map(c, f, node, base + f->offset);
    case PL_YS_SEQ:
        return s_seq(c, f, node, base);
    case PL_YS_END:
        break;
    default:
        return s_number(c, f, node, base + f->offset);
    }
    assert(!"bad field type");
    return PL_ERR_INVALID;
}

pl_status_t pl_ys_parse(const char *text, size_t len, const char *origin, const pl_ys_field_t *root,
                        void *base, void *user)
{
    s_ctx_t *c;
    pl_yt_node_t *tree = NULL;
    pl_status_t st;

    assert(root->type == PL_YS_MAP && root->offset == 0);
    c = calloc(1, sizeof(*c));
    if (!c)
        return pl_error(PL_ERR_NOMEM, "%s: out of memory", origin);
    c->origin = origin;
    c->user = user;
    st = pl_yt_load(text, len, origin, PL_YS_MAX_DEPTH, &tree);
    if (st != PL_OK)
        goto err_load;
    s_defaults(root->fields, base);
    st = s_map(c, root, tree, base);
    pl_yt_free(&tree);
err_load:
    free(c);
    return st;
}
