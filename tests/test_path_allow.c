/* The models.allow rule (common/path_allow.h) on a scratch tree: allowed/ is the allowed
 * directory, outside/ beside it is not; paths that exist, paths not made yet (checkpoint_dir),
 * "..", links out, entries that lead out, and the error's words. */
#include "common/path_allow.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char s_dir[64], s_allow[1][PATH_MAX];

static void s_setup(void)
{
    snprintf(s_dir, sizeof(s_dir), "/tmp/pl-path-XXXXXX");
    cr_assert_not_null(mkdtemp(s_dir));
    char p[PATH_MAX];
    const char *dirs[] = {"allowed", "allowed/model", "allowed/ck", "outside"};
    for (size_t i = 0; i < 4; i++) {
        snprintf(p, sizeof(p), "%s/%s", s_dir, dirs[i]);
        cr_assert_eq(mkdir(p, 0755), 0, "%s", p);
    }
    char target[PATH_MAX];
    snprintf(target, sizeof(target), "%s/outside", s_dir);
    snprintf(p, sizeof(p), "%s/allowed/out", s_dir);
    cr_assert_eq(symlink(target, p), 0);
    snprintf(s_allow[0], sizeof(s_allow[0]), "%s/allowed", s_dir);
}

static void s_teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", s_dir);
    cr_assert_eq(system(cmd), 0);
}

static pl_status_t s_check(const char *rel, bool must_exist)
{
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/%s", s_dir, rel);
    return pl_path_allow_check("checkpoint_dir", p, (const char (*)[PATH_MAX])s_allow, 1,
                               must_exist);
}

static void s_refused(const char *rel, bool must_exist, const char *needle)
{
    cr_assert_eq(s_check(rel, must_exist), PL_ERR_PERMISSION, "%s accepted", rel);
    cr_assert(strstr(pl_error_msg(), "checkpoint_dir '"), "%s: %s", rel, pl_error_msg());
    cr_assert(strstr(pl_error_msg(), needle), "%s: '%s' not in '%s'", rel, needle,
              pl_error_msg());
}

TestSuite(path_allow, .init = s_setup, .fini = s_teardown);

Test(path_allow, existing_and_new_paths_inside_are_allowed)
{
    cr_assert_eq(s_check("allowed/model", true), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(s_check("allowed/ck", false), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(s_check("allowed/ck/checkpoint-8", false), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(s_check("allowed/new/a/b", false), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(s_check("allowed/model/../ck", true), PL_OK, "%s", pl_error_msg());
    /* no allow-list: any path */
    cr_assert_eq(pl_path_allow_check("checkpoint_dir", "/nowhere/at/all", NULL, 0, false),
                 PL_OK);
}

Test(path_allow, paths_out_of_the_allowed_directories_are_refused)
{
    s_refused("outside", true, "models.allow");
    s_refused("outside/ck", false, "models.allow");
    s_refused("allowed/../outside/ck", false, "models.allow");
    s_refused("allowed/out/ck", false, "models.allow");   /* a link out, then a new name */
    s_refused("allowed/out", false, "models.allow");      /* the link itself */
    s_refused("allowed", true, "'out' leads outside");    /* the directory that holds it */
    s_refused("allowed/new/../../outside", false, "plain name"); /* ".." not there yet */
    s_refused("allowed/new/./x", false, "plain name");
    s_refused("allowed/missing", true, "No such file");   /* a model must be there */
    /* a prefix of the name is not the directory */
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/allowedX", s_dir);
    cr_assert_eq(mkdir(p, 0755), 0);
    s_refused("allowedX/ck", false, "models.allow");
}

Test(path_allow, an_entry_leading_out_is_refused_without_its_contents)
{
    char p[PATH_MAX], target[PATH_MAX];
    snprintf(target, sizeof(target), "%s/outside/secret", s_dir);
    FILE *f = fopen(target, "w");
    cr_assert_not_null(f);
    fputs("secretword\n", f);
    fclose(f);
    snprintf(p, sizeof(p), "%s/allowed/ck/checkpoint-8", s_dir);
    cr_assert_eq(symlink(target, p), 0);
    s_refused("allowed/ck", false, "'checkpoint-8' leads outside");
    cr_assert_null(strstr(pl_error_msg(), "secretword"));
    /* the step's own directory through it, too */
    s_refused("allowed/ck/checkpoint-8", false, "models.allow");
    /* a dangling link inside (its target not made yet) would be written through: refused */
    snprintf(p, sizeof(p), "%s/allowed/model/x.tmp", s_dir);
    snprintf(target, sizeof(target), "%s/outside/not-yet", s_dir);
    cr_assert_eq(symlink(target, p), 0);
    s_refused("allowed/model", true, "'x.tmp' leads outside");
}
