/* The data plane's job token (act_token.h): made from the kernel's random source, compared in
 * constant time, carried as hex in START. */
#include "transport/act_token.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>

pl_status_t pl_act_token_new(pl_act_token_t *token_p)
{
    pl_act_token_t t;
    size_t got = 0;
    while (got < sizeof(t.b)) {
        ssize_t n = getrandom(t.b + got, sizeof(t.b) - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return pl_error(PL_ERR_IO, "job token: getrandom: %s", strerror(errno));
        got += (size_t)n;
    }
    *token_p = t;
    return PL_OK;
}

bool pl_act_token_equal(const pl_act_token_t *a, const pl_act_token_t *b)
{
    /* every byte is looked at whatever the first difference, and the compiler may not stop early
     * through a volatile accumulator */
    volatile uint8_t diff = 0;
    for (unsigned i = 0; i < PL_ACT_TOKEN_BYTES; i++)
        diff |= (uint8_t)(a->b[i] ^ b->b[i]);
    return diff == 0;
}

void pl_act_token_hex(const pl_act_token_t *token, char out[PL_ACT_TOKEN_HEX + 1])
{
    static const char digits[] = "0123456789abcdef";
    for (unsigned i = 0; i < PL_ACT_TOKEN_BYTES; i++) {
        out[2 * i] = digits[token->b[i] >> 4];
        out[2 * i + 1] = digits[token->b[i] & 0xf];
    }
    out[PL_ACT_TOKEN_HEX] = '\0';
}

static int s_nibble(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

pl_status_t pl_act_token_parse(const char *hex, pl_act_token_t *token_p)
{
    pl_act_token_t t;
    size_t len = strnlen(hex, PL_ACT_TOKEN_HEX + 1);
    if (len != PL_ACT_TOKEN_HEX)
        return pl_error(PL_ERR_INVALID, "job token: %s%zu characters (expected %u hex digits)",
                        len > PL_ACT_TOKEN_HEX ? "more than " : "",
                        len > PL_ACT_TOKEN_HEX ? (size_t)PL_ACT_TOKEN_HEX : len, PL_ACT_TOKEN_HEX);
    for (unsigned i = 0; i < PL_ACT_TOKEN_BYTES; i++) {
        int hi = s_nibble(hex[2 * i]), lo = s_nibble(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return pl_error(PL_ERR_INVALID, "job token: character %u is not a hex digit",
                            hi < 0 ? 2 * i : 2 * i + 1);
        t.b[i] = (uint8_t)(hi << 4 | lo);
    }
    *token_p = t;
    return PL_OK;
}
