/* libFuzzer harness for the credit grant a sender receives from its peer's inbox: no input may
 * crash the decoder, and whatever it accepts must re-encode to exactly the same bytes. Built by
 * tests/fuzz/CMakeLists.txt (tools/fuzz.sh runs it); by hand:
 *   clang -g -O1 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -I. \
 *       tests/fuzz/fuzz_grant.c transport/ucx_grant.c common/status.c -o /tmp/fuzz_grant
 *   /tmp/fuzz_grant -max_total_time=30 -max_len=64 */
#include "transport/ucx_grant.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    /* the first byte, when present, chooses the sender's room for credits */
    uint32_t max = size > 0 ? (uint32_t)data[0] * 17u : 4096u, n = 0;
    unsigned char again[PL_UCX_GRANT_BYTES];
    void *copy;
    if (size > 0) {
        data++;
        size--;
    }
    copy = malloc(size ? size : 1); /* exact size: a read past the end is caught */
    memcpy(copy, data, size);
    if (pl_ucx_grant_decode(copy, size, max, &n) == PL_OK) {
        if (n == 0 || n > max)
            abort();
        pl_ucx_grant_encode(n, again);
        if (size != PL_UCX_GRANT_BYTES || memcmp(again, copy, size) != 0)
            abort();
    }
    free(copy);
    return 0;
}
