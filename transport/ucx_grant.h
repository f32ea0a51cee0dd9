/* The credit grant: the message an inbox sends upstream for the slots it hands back, one or
 * several (magic "PLC2", the credit count: u32 little-endian each, then the assignment's 16-byte
 * token as the activations carry it). Internal to transport/. */
#ifndef PL_TRANSPORT_UCX_GRANT_H
#define PL_TRANSPORT_UCX_GRANT_H

#include "common/status.h"
#include "transport/act_token.h"

#include <stddef.h>
#include <stdint.h>

#define PL_UCX_GRANT_BYTES (8u + PL_ACT_TOKEN_BYTES)
#define PL_UCX_GRANT_MAGIC 0x32434c50u

void pl_ucx_grant_encode(uint32_t credits, const pl_act_token_t *token,
                         unsigned char out[PL_UCX_GRANT_BYTES]);
/* PL_OK with *credits_p in 1..max_credits. Else, with the field named: PL_ERR_PROTOCOL for what
 * is no grant of this layout (length, magic), PL_ERR_PERMISSION for one without `token`
 * (compared in constant time before the count is looked at): both are dropped as forged;
 * PL_ERR_RANGE for the job's token with a count out of range: a broken peer of the job. */
pl_status_t pl_ucx_grant_decode(const void *buf, size_t len, const pl_act_token_t *token,
                                uint32_t max_credits, uint32_t *credits_p);

#endif
