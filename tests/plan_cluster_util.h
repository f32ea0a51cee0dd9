/* What the plan suites share (test_plan_cluster on a live cluster, test_plan_whatif on described
 * ones): the test's cluster and directory, files written into it, and a plan's JSON read. */
#ifndef PL_TESTS_PLAN_CLUSTER_UTIL_H
#define PL_TESTS_PLAN_CLUSTER_UTIL_H

#include "job_util.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static tc_cluster_t s_c;
static int s_passed; /* set last: a failed assertion keeps the test's files */

/* The file `name` in the test's directory, holding the printf-formatted text. */
static inline void s_write(const char *name, const char *fmt, ...)
{
    char path[512], text[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    snprintf(path, sizeof(path), "%s/%s", s_c.dir, name);
    tc_write(path, text);
}

/* n prompts of len tokens each (ids 3..199), one JSON array per line. */
static inline void s_prompts(const char *name, int n, int len)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", s_c.dir, name);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    for (int i = 0; i < n; i++) {
        fputc('[', f);
        for (int t = 0; t < len; t++)
            fprintf(f, "%s%d", t ? ", " : "", 3 + (i * 37 + t * 11) % 197);
        fputs("]\n", f);
    }
    fclose(f);
}

static inline double s_num(const json_t *o, const char *k)
{
    return json_number_value(json_object_get(o, k));
}

static inline const char *s_str(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

/* The stage of a plan's JSON that runs on `node`, or NULL. */
static inline json_t *s_stage_on(json_t *plan, const char *node)
{
    json_t *st = json_object_get(plan, "stages");
    for (size_t i = 0; i < json_array_size(st); i++)
        if (!strcmp(s_str(json_array_get(st, i), "node"), node))
            return json_array_get(st, i);
    return NULL;
}

/* Stages cover layers 0..L-1 in order, each at least one, within memory. */
static inline void s_expect_cover(json_t *plan, int L)
{
    json_t *st = json_object_get(plan, "stages");
    int next = 0;
    cr_assert_gt(json_array_size(st), 0);
    for (size_t i = 0; i < json_array_size(st); i++) {
        json_t *s = json_array_get(st, i);
        cr_expect_eq((int)s_num(s, "first_layer"), next, "stage %zu starts at the wrong layer", i);
        cr_expect_eq((int)s_num(s, "n_layers"),
                     (int)s_num(s, "last_layer") - (int)s_num(s, "first_layer") + 1);
        cr_expect_geq(s_num(s, "n_layers"), 1);
        cr_expect_leq(s_num(s, "mem_used"), s_num(s, "mem_avail"), "stage %zu over memory", i);
        next = (int)s_num(s, "last_layer") + 1;
    }
    cr_expect_eq(next, L, "the stages end at layer %d of %d", next, L);
}

#endif
