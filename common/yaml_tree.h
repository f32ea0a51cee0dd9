/* A YAML document as a plain tree of scalars, sequences and mappings with 1-based positions,
 * built from libyaml events; the schema loader walks it. Internal to common/. */
#ifndef PL_COMMON_YAML_TREE_H
#define PL_COMMON_YAML_TREE_H

#include "common/status.h"

#include <stdbool.h>
#include <stddef.h>

typedef enum { PL_YT_SCALAR, PL_YT_SEQ, PL_YT_MAP } pl_yt_kind_t;

typedef struct pl_yt_node {
    pl_yt_kind_t kind;
    size_t line, col;         /* 1-based start position */
    char *value;              /* SCALAR: NUL-terminated (may hold NULs before len) */
    size_t len;               /* SCALAR: bytes in value */
    bool plain;               /* SCALAR: unquoted, so it may be a number, boolean or null */
    struct pl_yt_node **kids; /* SEQ: items; MAP: key, value, key, value, ... */
    size_t n_kids, cap_kids;
} pl_yt_node_t;

/* Parse exactly one document of at most `max_depth` nested collections into a tree. Anchors,
 * aliases and explicit tags are rejected. Errors start with "ORIGIN:LINE:COL: ". *root_p is
 * the caller's to free with pl_yt_free. */
pl_status_t pl_yt_load(const char *text, size_t len, const char *origin, int max_depth,
                       pl_yt_node_t **root_p);

/* Free a tree and null the pointer; safe on NULL. */
void pl_yt_free(pl_yt_node_t **node_p);

/* True for a plain scalar YAML reads as null: empty, "~", "null", "Null", "NULL". */
bool pl_yt_is_null(const pl_yt_node_t *node);

#endif
