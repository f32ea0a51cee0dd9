/* A scratch directory per test (SCRATCH_TEMPLATE, a mkdtemp template defined before the include)
 * for suites that write files: made by the suite's init, removed by its fini, paths inside it. */
#ifndef PL_TESTS_SCRATCH_UTIL_H
#define PL_TESTS_SCRATCH_UTIL_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef SCRATCH_TEMPLATE
#define SCRATCH_TEMPLATE "/tmp/pl_test_XXXXXX"
#endif

static char s_dir[64];

static inline void s_mkdir(void)
{
    snprintf(s_dir, sizeof(s_dir), SCRATCH_TEMPLATE);
    cr_assert_not_null(mkdtemp(s_dir));
}

static inline void s_rmdir(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", s_dir);
    cr_assert_eq(system(cmd), 0);
}

/* dir/name, in one of 4 rotating buffers (so a call may take a few). */
static inline const char *s_path(const char *name)
{
    static char p[4][160];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof(p[k]), "%s/%s", s_dir, name);
    return p[k];
}

#endif
