/* libyaml events to a plain tree, rejecting what a config file has no use for (anchors,
 * aliases, tags, several documents) and keeping every node's position for error messages. */
#include "common/yaml_tree.h"

#include <stdlib.h>
#include <string.h>
#include <yaml.h>

static pl_status_t s_fail_at(const char *origin, size_t line, size_t col, pl_status_t st,
                             const char *what)
{
    return pl_error(st, "%s:%zu:%zu: %s", origin, line, col, what);
}

/* libyaml marks are 0-based; messages are 1-based like every editor. */
static pl_status_t s_fail_mark(const char *origin, yaml_mark_t mark, const char *what)
{
    return s_fail_at(origin, mark.line + 1, mark.column + 1, PL_ERR_INVALID, what);
}

static pl_status_t s_parser_error(const yaml_parser_t *parser, const char *text, size_t len,
                                  const char *origin)
{
    const char *problem = parser->problem ? parser->problem : "malformed YAML";

    if (parser->error == YAML_MEMORY_ERROR)
        return pl_error(PL_ERR_NOMEM, "%s: out of memory while parsing", origin);
    if (parser->error == YAML_READER_ERROR) {
        /* Reader errors (bad encoding) carry a byte offset, not a mark. */
        size_t line = 1, col = 1;
        for (size_t i = 0; i < parser->problem_offset && i < len; i++) {
            if (text[i] == '\n') {
                line++;
                col = 1;
            } else {
                col++;
            }
        }
        return pl_error(PL_ERR_INVALID, "%s:%zu:%zu: syntax error: %s", origin, line, col, problem);
    }
    if (parser->context)
        return pl_error(PL_ERR_INVALID, "%s:%zu:%zu: syntax error: %s (%s at %zu:%zu)", origin,
                        parser->problem_mark.line + 1, parser->problem_mark.column + 1, problem,
                        parser->context, parser->context_mark.line + 1,
                        parser->context_mark.column + 1);
    return pl_error(PL_ERR_INVALID, "%s:%zu:%zu: syntax error: %s", origin,
                    parser->problem_mark.line + 1, parser->problem_mark.column + 1, problem);
}

static pl_yt_node_t *s_node_new(pl_yt_kind_t kind, yaml_mark_t mark)
{
    pl_yt_node_t *node = calloc(1, sizeof(*node));
    if (!node)
        return NULL;
    node->kind = kind;
    node->line = mark.line + 1;
    node->col = mark.column + 1;
    return node;
}

static bool s_add_kid(pl_yt_node_t *parent, pl_yt_node_t *kid)
{
    if (parent->n_kids == parent->cap_kids) {
        size_t cap = parent->cap_kids ? parent->cap_kids * 2 : 8;
        pl_yt_node_t **kids = realloc(parent->kids, cap * sizeof(*kids));
        if (!kids)
            return false;
        parent->kids = kids;
        parent->cap_kids = cap;
    }
    parent->kids[parent->n_kids++] = kid;
    return true;
}

void pl_yt_free(pl_yt_node_t **node_p)
{
    pl_yt_node_t *node = node_p ? *node_p : NULL;
    if (!node)
        return;
    for (size_t i = 0; i < node->n_kids; i++)
        pl_yt_free(&node->kids[i]);
    free(node->kids);
    free(node->value);
    free(node);
    *node_p = NULL;
}

bool pl_yt_is_null(const pl_yt_node_t *node)
{
    static const char *const nulls[] = {"", "~", "null", "Null", "NULL"};
    if (node->kind != PL_YT_SCALAR || !node->plain)
        return false;
    for (size_t i = 0; i < sizeof(nulls) / sizeof(nulls[0]); i++)
        if (node->len == strlen(nulls[i]) && memcmp(node->value, nulls[i], node->len) == 0)
            return true;
    return false;
}

/* Turn one node-starting event into a node. */
static pl_status_t s_event_node(const yaml_event_t *ev, const char *origin, pl_yt_node_t **node_p)
{
    const yaml_char_t *anchor = NULL, *tag = NULL;
    pl_yt_node_t *node;

    switch (ev->type) {
    case YAML_SCALAR_EVENT:
        anchor = ev->data.scalar.anchor;
        tag = ev->data.scalar.tag;
        break;
    case YAML_SEQUENCE_START_EVENT:
        anchor = ev->data.sequence_start.anchor;
        tag = ev->data.sequence_start.tag;
        break;
    case YAML_MAPPING_START_EVENT:
        anchor = ev->data.mapping_start.anchor;
        tag = ev->data.mapping_start.tag;
        break;
    default:
        break;
    }
    if (anchor)
        return s_fail_mark(origin, ev->start_mark, "anchors are not supported");
    if (tag)
        return s_fail_mark(origin, ev->start_mark, "tags are not supported");
    node = s_node_new(ev->type == YAML_SCALAR_EVENT           ? PL_YT_SCALAR
                      : ev->type == YAML_SEQUENCE_START_EVENT ? PL_YT_SEQ
                                                              : PL_YT_MAP,
                      ev->start_mark);
    if (!node)
        return pl_error(PL_ERR_NOMEM, "%s: out of memory", origin);
    if (ev->type == YAML_SCALAR_EVENT) {
        node->len = ev->data.scalar.length;
        node->value = malloc(node->len + 1);
        if (!node->value) {
            free(node);
            return pl_error(PL_ERR_NOMEM, "%s: out of memory", origin);
        }
        memcpy(node->value, ev->data.scalar.value, node->len);
        node->value[node->len] = '\0';
        node->plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
    }
    *node_p = node;
    return PL_OK;
}

pl_status_t pl_yt_load(const char *text, size_t len, const char *origin, int max_depth,
                       pl_yt_node_t **root_p)
{
    yaml_parser_t parser;
    yaml_event_t ev;
    pl_yt_node_t *root = NULL, **stack;
    int depth = 0, n_docs = 0;
    pl_status_t st = PL_OK;
    bool done = false;

    stack = calloc((size_t)max_depth, sizeof(*stack));
    if (!stack)
        return pl_error(PL_ERR_NOMEM, "%s: out of memory", origin);
    if (!yaml_parser_initialize(&parser)) {
        free(stack);
        return pl_error(PL_ERR_NOMEM, "%s: out of memory", origin);
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);

    while (!done) {
        pl_yt_node_t *node = NULL;
        if (!yaml_parser_parse(&parser, &ev)) {
            st = s_parser_error(&parser, text, len, origin);
            goto err_parse;
        }
        switch (ev.type) {
        case YAML_DOCUMENT_START_EVENT:
            if (++n_docs > 1)
                st = s_fail_mark(origin, ev.start_mark,
                                 "more than one document; a config file holds exactly one");
            break;
        case YAML_ALIAS_EVENT:
            st = s_fail_mark(origin, ev.start_mark, "aliases are not supported");
            break;
        case YAML_SCALAR_EVENT:
        case YAML_SEQUENCE_START_EVENT:
        case YAML_MAPPING_START_EVENT:
            st = s_event_node(&ev, origin, &node);
            if (st != PL_OK)
                break;
            if (depth > 0 && !s_add_kid(stack[depth - 1], node)) {
                pl_yt_free(&node);
                st = pl_error(PL_ERR_NOMEM, "%s: out of memory", origin);
                break;
            }
            if (depth == 0)
                root = node; /* one document, so this is the only root */
            if (node->kind != PL_YT_SCALAR) {
                if (depth == max_depth) {
                    st = s_fail_mark(origin, ev.start_mark, "nesting is too deep");
                    break;
                }
                stack[depth++] = node;
            }
            break;
        case YAML_SEQUENCE_END_EVENT:
        case YAML_MAPPING_END_EVENT:
            depth--; /* libyaml guarantees balanced events */
            break;
        case YAML_STREAM_END_EVENT:
            done = true;
            break;
        default:
            break;
        }
        yaml_event_delete(&ev);
        if (st != PL_OK)
            goto err_parse;
    }
    if (!root) {
        st = s_fail_at(origin, 1, 1, PL_ERR_INVALID, "empty document: expected a mapping");
        goto err_parse;
    }
    yaml_parser_delete(&parser);
    free(stack);
    *root_p = root;
    return PL_OK;

err_parse:
    pl_yt_free(&root);
    yaml_parser_delete(&parser);
    free(stack);
    return st;
}
