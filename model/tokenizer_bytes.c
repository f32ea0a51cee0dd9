/* Byte-level helpers: GPT-2's map of the 256 byte values onto printable code points (the form
 * byte-level vocabularies are written in), and the UTF-8 checks encode and decode share. */
#include "model/tokenizer_impl.h"

/* Printable Latin-1 bytes map to themselves; the other 68 take code points 256.. in order. */
static bool s_printable(unsigned b)
{
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t pl_tok_byte_to_cp(uint8_t b)
{
    if (s_printable(b))
        return b;
    if (b <= 0x20)
        return 256u + b;
    if (b >= 0x7F && b <= 0xA0)
        return 256u + 33 + (b - 0x7Fu);
    return 256u + 67; /* 0xAD */
}

int pl_tok_cp_to_byte(uint32_t cp)
{
    if (cp < 256)
        return s_printable(cp) ? (int)cp : -1;
    cp -= 256;
    if (cp < 33)
        return (int)cp;
    if (cp < 67)
        return (int)(0x7F + cp - 33);
    return cp == 67 ? 0xAD : -1;
}

/* Length of a valid UTF-8 sequence starting at s, 0 when invalid (*bad: the bytes of its
 * maximal valid prefix, replaced by one U+FFFD), -1 when s ends inside it. */
static int s_seq_len(const uint8_t *s, size_t len, int *bad)
{
    uint8_t c = s[0];
    int n;
    uint32_t cp;

    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        n = 2, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF)
        n = 3, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4)
        n = 4, cp = c & 0x07;
    else
        return *bad = 1, 0;
    for (int i = 1; i < n; i++) {
        if ((size_t)i >= len)
            return -1;
        if ((s[i] & 0xC0) != 0x80)
            return *bad = i, 0;
        cp = cp << 6 | (s[i] & 0x3F);
        /* reject overlong forms and surrogates as soon as the second byte shows them */
        if (i == 1 && ((n == 3 && c == 0xE0 && s[1] < 0xA0) || (n == 3 && c == 0xED && s[1] > 0x9F) ||
                       (n == 4 && c == 0xF0 && s[1] < 0x90) || (n == 4 && c == 0xF4 && s[1] > 0x8F)))
            return *bad = 1, 0;
    }
    (void)cp;
    return n;
}

size_t pl_tok_utf8_valid_prefix(const char *s, size_t len)
{
    size_t i = 0;
    int bad;
    while (i < len) {
        int n = s_seq_len((const uint8_t *)s + i, len - i, &bad);
        if (n <= 0)
            break;
        i += (size_t)n;
    }
    return i;
}

int pl_tok_utf8_seq(const char *s, size_t len, int *bad)
{
    return s_seq_len((const uint8_t *)s, len, bad);
}

int pl_tok_utf8_next(const char *s, size_t len, uint32_t *cp)
{
    const uint8_t *u = (const uint8_t *)s;
    int bad, n = len ? s_seq_len(u, len, &bad) : 0;

    if (n <= 1) {
        *cp = len ? u[0] : 0;
        return len ? 1 : 0;
    }
    *cp = u[0] & (0xFF >> (n + 1));
    for (int i = 1; i < n; i++)
        *cp = *cp << 6 | (u[i] & 0x3F);
    return n;
}

int pl_tok_utf8_put(uint32_t cp, char out[4])
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}
