/* A small schema-driven YAML loader: a table of fields per mapping (key, type, range, default,
 * where the value goes) fills a C struct and reports "ORIGIN:LINE:COL: key 'a.b': problem". */
#ifndef PL_COMMON_YAML_SCHEMA_H
#define PL_COMMON_YAML_SCHEMA_H

#include "common/status.h"

#include <stdbool.h>
#include <stddef.h>

typedef enum {
    PL_YS_END = 0, /* terminates a field table */
    PL_YS_STR,     /* char[size], non-empty, NUL-free, never truncated */
    PL_YS_INT,     /* int within [min, max] */
    PL_YS_U64,     /* uint64_t, decimal */
    PL_YS_FLOAT,   /* float within [min, max] (or (min, max] with PL_YS_MIN_EXCL) */
    PL_YS_BOOL,    /* bool: true/false/yes/no */
    PL_YS_MAP,     /* nested mapping; its fields are relative to base + offset */
    PL_YS_SEQ,     /* `elem`s at base + offset, stride `size`, int count at count_offset */
} pl_ys_type_t;

enum {
    PL_YS_REQUIRED = 1u << 0, /* the key must be present */
    PL_YS_MIN_EXCL = 1u << 1, /* FLOAT: min itself is out of range */
    PL_YS_UNIQUE = 1u << 2,   /* SEQ of STR: no value twice */
};

typedef struct pl_ys_field pl_ys_field_t;

/* Extra check (and optional rewrite, e.g. path resolution) of a STR value in its buffer of
 * `size` bytes. Returns false after writing a short phrase ("must match [a-z]+") into err. */
typedef bool (*pl_ys_check_fn)(char *value, size_t size, void *user, char *err, size_t err_len);
/* Cross-field check of a filled MAP at `base`; false after writing a phrase into err. The
 * error is reported at the mapping's own position. */
typedef bool (*pl_ys_post_fn)(void *base, void *user, char *err, size_t err_len);

struct pl_ys_field {
    const char *key;
    pl_ys_type_t type;
    unsigned flags;
    size_t offset;               /* where the value lives, from the enclosing base */
    size_t size;                 /* STR: buffer size; SEQ: element stride */
    double min, max;             /* INT, FLOAT */
    double def;                  /* default of INT, U64, FLOAT, BOOL when the key is absent */
    const char *def_str;         /* default of STR ("" when NULL) */
    const char *const *choices;  /* STR: NULL-terminated list of allowed values */
    pl_ys_check_fn check;        /* STR: optional */
    const pl_ys_field_t *fields; /* MAP: its fields (table ended by PL_YS_END) */
    pl_ys_post_fn post;          /* MAP: optional cross-field check */
    const pl_ys_field_t *elem;   /* SEQ: element description (offset 0) */
    size_t count_offset;         /* SEQ: int element count, from the enclosing base */
    int max_count;               /* SEQ: at most this many elements */
    const char *unique_key;      /* SEQ of MAP: this STR key's value must differ per element */
};

/* Parse one YAML document of `len` bytes whose root is the MAP `root`, filling `base`: absent
 * keys get their defaults, present ones are checked and stored. On error `base` is partly
 * written (parse into a scratch copy) and the message starts with "ORIGIN:LINE:COL: ".
 * Anchors, aliases, tags and any number of documents but one are rejected. */
pl_status_t pl_ys_parse(const char *text, size_t len, const char *origin, const pl_ys_field_t *root,
                        void *base, void *user);

/* Maximum nesting of mappings and sequences in a document. */
#define PL_YS_MAX_DEPTH 32

#endif
