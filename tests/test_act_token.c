/* Tests of the activation messages' job token (act_token.c): every byte and bit must match, it is
 * checked before the other fields, and tokens compare and print. */
#include "act_util.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The standard hidden message under a job token `t` (every byte 0x10 + i, and byte `flip`
 * XORed with `x` in the message's copy). */
static pl_status_t s_decode_token(size_t flip, uint8_t x)
{
    pl_act_hdr_t h, got = {.job = 4242};
    pl_act_seq_t seqs[2], out[8];
    float payload[12];
    size_t len;
    pl_act_limits_t lim = ta_limits;
    ta_hidden(&h, seqs, payload);
    for (int i = 0; i < 16; i++)
        lim.token.b[i] = h.token.b[i] = (uint8_t)(0x10 + i);
    h.token.b[flip] ^= x;
    unsigned char *buf = ta_encode_ok(&h, seqs, payload, &len);
    pl_status_t st = pl_act_decode(buf, len, &lim, &got, out, NULL);
    if (st == PL_OK)
        cr_assert_eq(memcmp(got.token.b, lim.token.b, 16), 0, "the decoded header has the token");
    else
        cr_assert_eq(got.job, 4242, "header untouched on a refusal");
    free(buf);
    return st;
}

Test(act, the_token_must_match_in_every_byte_and_bit)
{
    cr_assert_eq(s_decode_token(0, 0), PL_OK, "%s", pl_error_msg());
    for (size_t i = 0; i < 16; i++)
        for (int bit = 0; bit < 8; bit++) {
            cr_assert_eq(s_decode_token(i, (uint8_t)(1u << bit)), PL_ERR_PERMISSION,
                         "byte %zu bit %d", i, bit);
            cr_assert(strstr(pl_error_msg(), "token") != NULL, "%s", pl_error_msg());
        }
}

Test(act, the_token_is_checked_before_the_other_fields)
{
    /* a message with a wrong token and a broken body is refused for its token: nothing of the
     * body was looked at */
    pl_act_hdr_t h, got;
    pl_act_seq_t seqs[2], out[8];
    float payload[12];
    size_t len;
    pl_act_limits_t lim = ta_limits;
    ta_hidden(&h, seqs, payload);
    lim.token.b[3] = 1;
    unsigned char *buf = ta_encode_ok(&h, seqs, payload, &len);
    ta_put32(buf, 28, 99);     /* dim */
    ta_put32(buf, 48 + 0, 77); /* seq */
    cr_assert_eq(pl_act_decode(buf, len - 5, &lim, &got, out, NULL), PL_ERR_PERMISSION);
    /* but a message too short to hold a token, or of the layout before it, is malformed */
    cr_assert_eq(pl_act_decode(buf, 47, &lim, &got, out, NULL), PL_ERR_PROTOCOL);
    ta_put16(buf, 4, 2);
    cr_assert_eq(pl_act_decode(buf, len, &lim, &got, out, NULL), PL_ERR_PROTOCOL);
    free(buf);
}

Test(act, token_equality_and_text)
{
    pl_act_token_t a, b, c;
    char hex[PL_ACT_TOKEN_HEX + 1];
    cr_assert_eq(pl_act_token_new(&a), PL_OK);
    cr_assert_eq(pl_act_token_new(&b), PL_OK);
    cr_assert_not(pl_act_token_equal(&a, &b), "two fresh tokens differ (p = 2^-128)");
    cr_assert(pl_act_token_equal(&a, &a));
    pl_act_token_hex(&a, hex);
    cr_assert_eq(strlen(hex), 32);
    cr_assert_eq(strspn(hex, "0123456789abcdef"), 32);
    cr_assert_eq(pl_act_token_parse(hex, &c), PL_OK, "%s", pl_error_msg());
    cr_assert(pl_act_token_equal(&a, &c));
    cr_assert_eq(memcmp(a.b, c.b, 16), 0);
    /* an independent reading of the text: byte i is hex digits 2i, 2i+1 */
    for (int i = 0; i < 16; i++) {
        unsigned v;
        char two[3] = {hex[2 * i], hex[2 * i + 1], 0};
        cr_assert_eq(sscanf(two, "%2x", &v), 1);
        cr_assert_eq(v, a.b[i]);
    }
    cr_assert_eq(pl_act_token_parse("00112233445566778899AABBCCDDEEFF", &c), PL_OK);
    cr_assert_eq(c.b[0], 0x00);
    cr_assert_eq(c.b[15], 0xff);
    pl_act_token_t keep = c;
    const char *bad[] = {"",
                         "0011",
                         "00112233445566778899aabbccddeeff0",
                         "00112233445566778899aabbccddeefg",
                         "0x112233445566778899aabbccddeeff",
                         " 0112233445566778899aabbccddeeff"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cr_assert_eq(pl_act_token_parse(bad[i], &c), PL_ERR_INVALID, "'%s'", bad[i]);
        cr_assert(strstr(pl_error_msg(), bad[i][0] ? bad[i] : "\x01") == NULL,
                  "the message does not quote the text: %s", pl_error_msg());
        cr_assert(pl_act_token_equal(&c, &keep), "output untouched on error");
    }
}
