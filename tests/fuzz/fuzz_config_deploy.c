/* libFuzzer harness for the deployment file's loader (not part of the CMake build). From the
 * repository root:
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -I. \
 *     tests/fuzz/fuzz_config_deploy.c common/config*.c common/yaml_schema.c \
 *     common/yaml_tree.c common/status.c common/util.c common/log.c -lyaml -lpthread -lm \
 *     -o /tmp/fuzz_config_deploy
 *   mkdir -p /tmp/corpus_deploy && cp etc/deploy-tiny.yaml /tmp/corpus_deploy/
 *   /tmp/fuzz_config_deploy -max_total_time=60 -max_len=4096 /tmp/corpus_deploy
 */
#include "common/config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void s_check_str(const char *s, size_t size)
{
    if (!memchr(s, '\0', size))
        abort(); /* a string field must always be terminated inside its buffer */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* An exact-size copy, so that any read past `size` is an ASan report. */
    char *text = malloc(size ? size : 1);
    static pl_cfg_deploy_t d;
    if (!text)
        return 0;
    memcpy(text, data, size);
    pl_status_t st = pl_cfg_deploy_parse(text, size, "f", "/base", &d);
    if (st == PL_OK) {
        if (!d.name[0] || d.model[0] != '/' || d.kv_slots < 1 ||
            d.kv_slots > PL_CFG_DEPLOY_MAX_SLOTS || d.max_queue < 0 ||
            d.max_queue > PL_CFG_DEPLOY_MAX_QUEUE || d.max_tokens < 1 || d.step_tokens < 1 ||
            d.n_nodes < 0 || d.n_nodes > PL_CFG_MAX_NODES || d.stages < 0 || d.stages > 64)
            abort();
        s_check_str(d.name, sizeof(d.name));
        s_check_str(d.model, sizeof(d.model));
        s_check_str(d.planner, sizeof(d.planner));
        s_check_str(d.wire_dtype, sizeof(d.wire_dtype));
    }
    if (st != PL_OK && strncmp(pl_error_msg(), "f:", 2) != 0)
        abort(); /* every error names its origin */
    free(text);
    return 0;
}
