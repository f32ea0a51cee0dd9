/* libFuzzer harness for the credit grant a sender receives from its peer's inbox: no input may
 * crash the decoder, a grant is accepted only under the expected token, and whatever it accepts
 * must re-encode to exactly the same bytes. Built by tests/fuzz/CMakeLists.txt (tools/fuzz.sh
 * runs it). Input: a byte choosing the sender's room for credits (x17), a byte whose low bit
 * says which token is expected (1: the one the message itself carries, so the fuzzer reaches
 * the count; 0: a fixed one it cannot guess), then the message. */
#include "transport/ucx_grant.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    uint32_t max = size > 0 ? (uint32_t)data[0] * 17u : 4096u, n = 0;
    bool own = size > 1 && (data[1] & 1);
    unsigned char again[PL_UCX_GRANT_BYTES];
    pl_act_token_t want;
    void *copy;
    size_t skip = size < 2 ? size : 2;
    data += skip;
    size -= skip;
    for (unsigned i = 0; i < PL_ACT_TOKEN_BYTES; i++)
        want.b[i] = (uint8_t)(0xa5 ^ (i * 37));
    if (own && size >= PL_UCX_GRANT_BYTES)
        memcpy(want.b, data + 8, PL_ACT_TOKEN_BYTES);
    copy = malloc(size ? size : 1); /* exact size: a read past the end is caught */
    memcpy(copy, data, size);
    pl_status_t st = pl_ucx_grant_decode(copy, size, &want, max, &n);
    if (st == PL_OK) {
        if (n == 0 || n > max)
            abort();
        pl_ucx_grant_encode(n, &want, again);
        if (size != PL_UCX_GRANT_BYTES || memcmp(again, copy, size) != 0)
            abort();
    } else if (st != PL_ERR_PROTOCOL && st != PL_ERR_PERMISSION && st != PL_ERR_RANGE) {
        abort();
    } else if (st == PL_ERR_RANGE && memcmp((const unsigned char *)copy + 8, want.b,
                                            PL_ACT_TOKEN_BYTES) != 0) {
        abort(); /* a count was looked at without the token */
    }
    free(copy);
    return 0;
}
