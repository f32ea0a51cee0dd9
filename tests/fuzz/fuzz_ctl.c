/* libFuzzer harness for control-message validation (the socket-free half of pl_ctl_recv): no
 * input may crash it, and an accepted body must survive a compact re-serialization. Not part of
 * the CMake build:
 *   clang -g -O1 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -I. \
 *       tests/fuzz/fuzz_ctl.c transport/ctl.c common/status.c -ljansson -lzmq -o /tmp/fuzz_ctl
 *   /tmp/fuzz_ctl -max_total_time=60 -max_len=65536 /tmp/fuzz_ctl_corpus
 * Input: one byte n, then n bytes of type name (n taken modulo 48), then the body. */
#include "transport/ctl.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pl_ctl_msg_t msg = {0}, again = {0};
    char shown[4 * 64 + 1];
    size_t type_len;
    char *type, *body, *text;

    if (size < 1)
        return 0;
    type_len = data[0] % 48;
    if (type_len > size - 1)
        type_len = size - 1;
    /* Exact-size heap copies of both parts, so any read past either end is caught. */
    type = malloc(type_len ? type_len : 1);
    body = malloc(size - 1 - type_len ? size - 1 - type_len : 1);
    memcpy(type, data + 1, type_len);
    memcpy(body, data + 1 + type_len, size - 1 - type_len);

    pl_ctl_escape(type, type_len, shown, sizeof(shown));
    if (pl_ctl_decode(type, type_len, body, size - 1 - type_len, &msg) == PL_OK) {
        if (msg.type <= 0 || msg.type >= PL_MSG_COUNT_ || !json_is_object(msg.body))
            abort();
        if (strlen(pl_msg_name(msg.type)) != type_len ||
            memcmp(pl_msg_name(msg.type), type, type_len) != 0)
            abort();
        text = json_dumps(msg.body, JSON_COMPACT);
        if (!text)
            abort();
        if (pl_ctl_decode(type, type_len, text, strlen(text), &again) != PL_OK ||
            again.type != msg.type || !json_equal(again.body, msg.body))
            abort();
        free(text);
        pl_ctl_msg_clear(&again);
        pl_ctl_msg_clear(&msg);
    } else if (msg.body) {
        abort(); /* output must be untouched on error */
    }
    free(type);
    free(body);
    return 0;
}
