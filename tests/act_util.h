/* What the activation codec suites share: the limits they decode under, an independent
 * little-endian writer for reference encodings, float bits, and a two-sequence hidden message. */
#ifndef PL_TESTS_ACT_UTIL_H
#define PL_TESTS_ACT_UTIL_H

#include "transport/act.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

static const pl_act_limits_t ta_limits = {.max_seq = 8, .max_tokens = 64, .dim = 3, .max_pos = 100};

/* Independent little-endian writer for the reference encoding. */
static inline size_t ta_put32(unsigned char *b, size_t o, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        b[o + i] = (unsigned char)(v >> (8 * i));
    return o + 4;
}

static inline size_t ta_put16(unsigned char *b, size_t o, uint16_t v)
{
    b[o] = (unsigned char)v;
    b[o + 1] = (unsigned char)(v >> 8);
    return o + 2;
}

static inline uint32_t ta_f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* A two-sequence hidden message: seq 5 (positions 10..12) and seq 2 (position 40). */
static inline void ta_hidden(pl_act_hdr_t *h, pl_act_seq_t seqs[2], float payload[12])
{
    *h = (pl_act_hdr_t){
        .kind = PL_ACT_HIDDEN, .job = 7, .mb = 1, .step = 0, .n_seq = 2, .n_tokens = 4, .dim = 3};
    seqs[0] = (pl_act_seq_t){.seq = 5, .pos0 = 10, .n_tok = 3, .flags = 0, .token = -1};
    seqs[1] =
        (pl_act_seq_t){.seq = 2, .pos0 = 40, .n_tok = 1, .flags = PL_ACT_FINISHED, .token = 9};
    for (int i = 0; i < 12; i++)
        payload[i] = (float)i * 0.5f - 2.0f;
}

static inline void *ta_encode_ok(const pl_act_hdr_t *h, const pl_act_seq_t *seqs,
                                 const void *payload, size_t *len)
{
    void *buf = NULL;
    cr_assert_eq(pl_act_encode(h, seqs, payload, &buf, len), PL_OK, "%s", pl_error_msg());
    cr_assert_not_null(buf);
    cr_assert_eq(*len, pl_act_size(h));
    return buf;
}

static inline float ta_u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#endif
