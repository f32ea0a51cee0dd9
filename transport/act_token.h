/* The job token of the data plane: a random 128-bit value the coordinator makes for each
 * (job, assignment epoch) and sends in START over the authenticated control plane; every
 * activation message carries it and a stage drops those that do not (transport/act_recv.h). */
#ifndef PL_TRANSPORT_ACT_TOKEN_H
#define PL_TRANSPORT_ACT_TOKEN_H

#include "common/status.h"

#include <stdbool.h>
#include <stdint.h>

#define PL_ACT_TOKEN_BYTES 16u
/* Its text form in control messages: lowercase hex, two characters a byte. */
#define PL_ACT_TOKEN_HEX (2u * PL_ACT_TOKEN_BYTES)

typedef struct {
    uint8_t b[PL_ACT_TOKEN_BYTES];
} pl_act_token_t;

/* A fresh token from the kernel's random source (getrandom); PL_ERR_IO when there is none. */
pl_status_t pl_act_token_new(pl_act_token_t *token_p);
/* Whether a and b are the same token, in time that does not depend on where they differ. */
bool pl_act_token_equal(const pl_act_token_t *a, const pl_act_token_t *b);
/* The token as PL_ACT_TOKEN_HEX hex digits and a NUL into out. Never log it. */
void pl_act_token_hex(const pl_act_token_t *token, char out[PL_ACT_TOKEN_HEX + 1]);
/* Parse exactly PL_ACT_TOKEN_HEX hex digits (either case); PL_ERR_INVALID otherwise, with a
 * message that does not quote the text. */
pl_status_t pl_act_token_parse(const char *hex, pl_act_token_t *token_p);

#endif
