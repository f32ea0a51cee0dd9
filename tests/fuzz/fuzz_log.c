/* libFuzzer harness for the log sink's escaping (built by tests/fuzz/CMakeLists.txt; tools/fuzz.sh runs it): any bytes as a
 * message and a node name give exactly one line; the text line unescapes to the input, the
 * JSON line parses (jansson) back to it when the input is UTF-8. From the repository root:
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -I. tests/fuzz/fuzz_log.c \
 *     common/log.c common/status.c -ljansson -lpthread -o /tmp/fuzz_log
 *   /tmp/fuzz_log -max_total_time=60 -max_len=2048
 */
#include "common/log.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Undo the text escaping of [s, s+n) into out; returns its length. */
static size_t s_unescape(const char *s, size_t n, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\') {
            out[o++] = s[i];
            continue;
        }
        if (++i == n)
            abort(); /* a lone backslash at the end */
        switch (s[i]) {
        case '\\':
            out[o++] = '\\';
            break;
        case 'n':
            out[o++] = '\n';
            break;
        case 't':
            out[o++] = '\t';
            break;
        case 'r':
            out[o++] = '\r';
            break;
        case 'x': {
            if (i + 2 >= n)
                abort();
            char hex[3] = {s[i + 1], s[i + 2], 0};
            out[o++] = (char)strtol(hex, NULL, 16);
            i += 2;
            break;
        }
        default:
            abort(); /* an escape the sink never writes */
        }
    }
    return o;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char msg[2049], *buf = NULL;
    size_t len = 0;
    if (size > 2048)
        return 0;
    memcpy(msg, data, size);
    msg[size] = 0;
    size_t mlen = strlen(msg); /* a message is a C string */

    FILE *f = open_memstream(&buf, &len);
    pl_log_set_stream(f);
    pl_log_set_node("n\n1");
    pl_log_set_format(PL_LOG_TEXT);
    pl_log_info("%s", msg);
    fflush(f);
    if (memchr(buf, '\n', len) != buf + len - 1)
        abort(); /* not exactly one line */
    const char *body = strstr(buf, " info: ");
    if (!body || strncmp(buf + 13, "pipeld[n\\n1]", 12) != 0)
        abort();
    body += 7;
    char *back = malloc(len + 1);
    size_t blen = s_unescape(body, (size_t)(buf + len - 1 - body), back);
    if (blen != mlen || memcmp(back, msg, mlen) != 0)
        abort();
    free(back);

    rewind(f);
    pl_log_set_format(PL_LOG_JSON);
    pl_log_info("%s", msg);
    fflush(f);
    if (memchr(buf, '\n', len) != buf + len - 1)
        abort();
    json_error_t err;
    json_t *j = json_loadb(buf, len - 1, 0, &err);
    json_t *probe = json_stringn(msg, mlen); /* jansson takes it only when it is UTF-8 */
    int utf8 = probe != NULL;
    json_decref(probe);
    if (utf8) {
        const char *m = j ? json_string_value(json_object_get(j, "msg")) : NULL;
        if (!m || strcmp(m, msg) != 0 ||
            strcmp(json_string_value(json_object_get(j, "node")), "n\n1") != 0)
            abort();
    }
    json_decref(j);
    pl_log_set_stream(NULL);
    fclose(f);
    free(buf);
    return 0;
}
