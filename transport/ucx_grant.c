/* Encoding and validation of the credit grant (ucx_grant.h): the one message of the data plane
 * that is not an activation, checked like one, token first. */
#include "transport/ucx_grant.h"

#include <string.h>

void pl_ucx_grant_encode(uint32_t credits, const pl_act_token_t *token,
                         unsigned char out[PL_UCX_GRANT_BYTES])
{
    for (int i = 0; i < 4; i++) {
        out[i] = (unsigned char)(PL_UCX_GRANT_MAGIC >> (8 * i));
        out[4 + i] = (unsigned char)(credits >> (8 * i));
    }
    memcpy(out + 8, token->b, PL_ACT_TOKEN_BYTES);
}

pl_status_t pl_ucx_grant_decode(const void *buf, size_t len, const pl_act_token_t *token,
                                uint32_t max_credits, uint32_t *credits_p)
{
    const unsigned char *p = buf;
    uint32_t magic = 0, n = 0;
    pl_act_token_t got;
    if (len != PL_UCX_GRANT_BYTES)
        return pl_error(PL_ERR_PROTOCOL, "ucx: credit grant of %zu bytes (expected %u)", len,
                        PL_UCX_GRANT_BYTES);
    for (int i = 0; i < 4; i++)
        magic |= (uint32_t)p[i] << (8 * i);
    if (magic != PL_UCX_GRANT_MAGIC)
        return pl_error(PL_ERR_PROTOCOL, "ucx: credit grant with bad magic 0x%08x", magic);
    memcpy(got.b, p + 8, PL_ACT_TOKEN_BYTES);
    if (!pl_act_token_equal(&got, token))
        return pl_error(PL_ERR_PERMISSION, "ucx: credit grant without the job's token");
    for (int i = 0; i < 4; i++)
        n |= (uint32_t)p[4 + i] << (8 * i);
    if (n == 0 || n > max_credits)
        return pl_error(PL_ERR_RANGE, "ucx: credit grant of %u credits (1..%u allowed)", n,
                        max_credits);
    *credits_p = n;
    return PL_OK;
}
