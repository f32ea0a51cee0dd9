/* The credit grant: the 8-byte message an inbox sends upstream for each slot it hands back
 * (magic "PLC1" then the credit count, u32 little-endian each). Internal to transport/. */
#ifndef PL_TRANSPORT_UCX_GRANT_H
#define PL_TRANSPORT_UCX_GRANT_H

#include "common/status.h"

#include <stddef.h>
#include <stdint.h>

#define PL_UCX_GRANT_BYTES 8u
#define PL_UCX_GRANT_MAGIC 0x31434c50u

void pl_ucx_grant_encode(uint32_t credits, unsigned char out[PL_UCX_GRANT_BYTES]);
/* PL_OK with *credits_p in 1..max_credits, else PL_ERR_PROTOCOL naming what is wrong. */
pl_status_t pl_ucx_grant_decode(const void *buf, size_t len, uint32_t max_credits,
                                uint32_t *credits_p);

#endif
