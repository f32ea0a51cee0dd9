/* Tests of the activation message codec: byte layout against an encoder written here, round
 * trips of every kind, and rejection of every truncation and every broken field. */
#include "transport/act.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const pl_act_limits_t s_limits = {.max_seq = 8, .max_tokens = 64, .dim = 3,
                                         .max_pos = 100};

/* Independent little-endian writer for the reference encoding. */
static size_t put32(unsigned char *b, size_t o, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        b[o + i] = (unsigned char)(v >> (8 * i));
    return o + 4;
}

static size_t put16(unsigned char *b, size_t o, uint16_t v)
{
    b[o] = (unsigned char)v;
    b[o + 1] = (unsigned char)(v >> 8);
    return o + 2;
}

static uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* A two-sequence hidden message: seq 5 (positions 10..12) and seq 2 (position 40). */
static void s_hidden(pl_act_hdr_t *h, pl_act_seq_t seqs[2], float payload[12])
{
    *h = (pl_act_hdr_t){.kind = PL_ACT_HIDDEN, .job = 7, .mb = 1, .step = 0, .n_seq = 2,
                        .n_tokens = 4, .dim = 3};
    seqs[0] = (pl_act_seq_t){.seq = 5, .pos0 = 10, .n_tok = 3, .flags = 0, .token = -1};
    seqs[1] = (pl_act_seq_t){.seq = 2, .pos0 = 40, .n_tok = 1, .flags = PL_ACT_FINISHED,
                             .token = 9};
    for (int i = 0; i < 12; i++)
        payload[i] = (float)i * 0.5f - 2.0f;
}

static void *s_encode_ok(const pl_act_hdr_t *h, const pl_act_seq_t *seqs, const void *payload,
                         size_t *len)
{
    void *buf = NULL;
    cr_assert_eq(pl_act_encode(h, seqs, payload, &buf, len), PL_OK, "%s", pl_error_msg());
    cr_assert_not_null(buf);
    cr_assert_eq(*len, pl_act_size(h));
    return buf;
}

static pl_status_t s_decode(const void *buf, size_t len)
{
    pl_act_hdr_t h;
    pl_act_seq_t seqs[64];
    const void *payload;
    pl_act_limits_t lim = s_limits;
    lim.max_seq = 64;
    lim.max_tokens = 128;
    return pl_act_decode(buf, len, &lim, &h, seqs, &payload);
}

Test(act, size_known_values)
{
    pl_act_hdr_t h = {.kind = PL_ACT_HIDDEN, .n_seq = 2, .n_tokens = 5, .dim = 3};
    cr_assert_eq(pl_act_size(&h), 48 + 2 * 20 + 5 * 3 * 4);
    h = (pl_act_hdr_t){.kind = PL_ACT_TOKENS, .n_seq = 3, .n_tokens = 3};
    cr_assert_eq(pl_act_size(&h), 48 + 3 * 20);
    h = (pl_act_hdr_t){.kind = PL_ACT_STOP};
    cr_assert_eq(pl_act_size(&h), 48);
    cr_assert_eq(PL_ACT_HDR_BYTES, 48);
    cr_assert_eq(PL_ACT_SEQ_BYTES, 20);
}

Test(act, size_overflow_is_size_max)
{
    pl_act_hdr_t h = {.kind = PL_ACT_HIDDEN, .n_seq = 1, .n_tokens = UINT32_MAX, .dim = UINT32_MAX};
    /* 4 * (2^32-1)^2 does not fit in 64 bits. */
    cr_assert_eq(pl_act_size(&h), SIZE_MAX);
    void *buf = (void *)1;
    size_t len = 77;
    pl_act_seq_t seq = {.seq = 0, .n_tok = UINT32_MAX};
    cr_assert_eq(pl_act_encode(&h, &seq, "", &buf, &len), PL_ERR_RANGE);
    cr_assert_eq(buf, (void *)1, "output untouched on error");
    cr_assert_eq(len, 77);
}

Test(act, hidden_bytes_match_reference_layout)
{
    pl_act_hdr_t h;
    pl_act_seq_t seqs[2];
    float payload[12];
    unsigned char ref[48 + 40 + 48];
    size_t o = 0, len;

    s_hidden(&h, seqs, payload);
    for (int i = 0; i < 16; i++)
        h.token.b[i] = (uint8_t)(0xa0 + i);
    o = put32(ref, o, 0x504c4131u);
    o = put16(ref, o, 3);
    ref[o++] = PL_ACT_HIDDEN;
    ref[o++] = PL_ACT_F32;
    o = put32(ref, o, 7);
    o = put32(ref, o, 1);
    o = put32(ref, o, 0);
    o = put32(ref, o, 2);
    o = put32(ref, o, 4);
    o = put32(ref, o, 3);
    for (int i = 0; i < 16; i++)
        ref[o++] = (unsigned char)(0xa0 + i);
    for (int i = 0; i < 2; i++) {
        o = put32(ref, o, seqs[i].seq);
        o = put32(ref, o, seqs[i].pos0);
        o = put32(ref, o, seqs[i].n_tok);
        o = put32(ref, o, seqs[i].flags);
        o = put32(ref, o, (uint32_t)seqs[i].token);
    }
    for (int i = 0; i < 12; i++)
        o = put32(ref, o, f2u(payload[i]));
    cr_assert_eq(o, sizeof(ref));

    unsigned char *buf = s_encode_ok(&h, seqs, payload, &len);
    cr_assert_eq(len, sizeof(ref));
    cr_assert_arr_eq(buf, ref, sizeof(ref));
    free(buf);
}

Test(act, hidden_round_trip)
{
    pl_act_hdr_t h, got;
    pl_act_seq_t seqs[2], out[8];
    float payload[12];
    const void *pl = NULL;
    size_t len;

    s_hidden(&h, seqs, payload);
    void *buf = s_encode_ok(&h, seqs, payload, &len);
    cr_assert_eq(pl_act_decode(buf, len, &s_limits, &got, out, &pl), PL_OK, "%s",
                 pl_error_msg());
    cr_assert_eq(memcmp(&got, &h, sizeof(h)), 0);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(out[i].seq, seqs[i].seq);
        cr_assert_eq(out[i].pos0, seqs[i].pos0);
        cr_assert_eq(out[i].n_tok, seqs[i].n_tok);
        cr_assert_eq(out[i].flags, seqs[i].flags);
        cr_assert_eq(out[i].token, seqs[i].token);
    }
    cr_assert_eq((const char *)pl, (const char *)buf + 48 + 40, "payload points into buf");
    cr_assert_eq((uintptr_t)pl % _Alignof(float), 0);
    cr_assert_arr_eq(pl, payload, sizeof(payload));
    free(buf);
}

Test(act, tokens_round_trip)
{
    pl_act_hdr_t h = {.kind = PL_ACT_TOKENS, .job = 3, .mb = 2, .step = 17, .n_seq = 3,
                      .n_tokens = 3, .dim = 0};
    pl_act_seq_t seqs[3] = {{.seq = 0, .pos0 = 20, .n_tok = 1, .token = 31999},
                            {.seq = 7, .pos0 = 25, .n_tok = 1, .flags = PL_ACT_FINISHED,
                             .token = 2},
                            {.seq = 4, .pos0 = 99, .n_tok = 1, .token = 0}};
    pl_act_hdr_t got;
    pl_act_seq_t out[8];
    const void *pl = (void *)1;
    size_t len;
    void *buf = s_encode_ok(&h, seqs, NULL, &len);
    cr_assert_eq(len, 48 + 60);
    cr_assert_eq(pl_act_decode(buf, len, &s_limits, &got, out, &pl), PL_OK, "%s",
                 pl_error_msg());
    cr_assert_eq(memcmp(&got, &h, sizeof(h)), 0);
    cr_assert_null(pl);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(out[i].seq, seqs[i].seq);
        cr_assert_eq(out[i].token, seqs[i].token);
        cr_assert_eq(out[i].flags, seqs[i].flags);
        cr_assert_eq(out[i].pos0, seqs[i].pos0);
    }
    free(buf);
}

Test(act, stop_round_trip)
{
    pl_act_hdr_t h = {.kind = PL_ACT_STOP, .job = 0xfffff, .mb = 9, .step = 123};
    pl_act_hdr_t got;
    pl_act_seq_t out[1];
    size_t len;
    void *buf = s_encode_ok(&h, NULL, NULL, &len);
    cr_assert_eq(len, 48);
    cr_assert_eq(pl_act_decode(buf, len, &s_limits, &got, out, NULL), PL_OK, "%s",
                 pl_error_msg());
    cr_assert_eq(memcmp(&got, &h, sizeof(h)), 0);
    free(buf);
}

Test(act, training_kinds_round_trip)
{
    /* a gradient is shaped as a hidden message; a sum carries doubles bit for bit */
    pl_act_hdr_t h, got;
    pl_act_seq_t seqs[2], out[8];
    float payload[12];
    const void *pl;
    size_t len;
    s_hidden(&h, seqs, payload);
    h.kind = PL_ACT_GRAD;
    void *buf = s_encode_ok(&h, seqs, payload, &len);
    cr_assert_eq(((unsigned char *)buf)[6], 8, "kind byte on the wire");
    cr_assert_eq(pl_act_decode(buf, len, &s_limits, &got, out, &pl), PL_OK, "%s",
                 pl_error_msg());
    cr_assert_eq(memcmp(&got, &h, sizeof(h)), 0);
    cr_assert_arr_eq(pl, payload, sizeof(payload));
    free(buf);

    double v[3] = {0.1, -1e300, 5e-324}, back[3];
    pl_act_hdr_t s = {.kind = PL_ACT_SUM, .job = 7, .mb = 1, .step = 99, .dim = 3};
    buf = s_encode_ok(&s, NULL, v, &len);
    cr_assert_eq(len, 48 + 24);
    unsigned char *b = buf;
    uint64_t u;
    memcpy(&u, &v[0], 8);
    for (int i = 0; i < 8; i++) /* little-endian IEEE binary64 */
        cr_assert_eq(b[48 + i], (unsigned char)(u >> (8 * i)));
    cr_assert_eq(pl_act_decode(buf, len, &s_limits, &got, out, &pl), PL_OK, "%s",
                 pl_error_msg());
    cr_assert_eq(memcmp(&got, &s, sizeof(s)), 0);
    pl_act_payload_f64(&got, pl, back);
    cr_assert_eq(memcmp(back, v, sizeof(v)), 0);
    cr_assert_eq(pl_act_decode(buf, len - 8, &s_limits, &got, out, &pl), PL_ERR_PROTOCOL);
    free(buf);
    s.dim = PL_ACT_SUM_MAX + 1;
    cr_assert_eq(pl_act_encode(&s, NULL, v, &buf, &len), PL_ERR_INVALID);
    s.dim = 0;
    cr_assert_eq(pl_act_encode(&s, NULL, v, &buf, &len), PL_ERR_INVALID);
    s.dim = 1, s.dtype = PL_ACT_BF16;
    cr_assert_eq(pl_act_encode(&s, NULL, v, &buf, &len), PL_ERR_INVALID);
    s.dtype = 0, s.n_seq = 1, s.n_tokens = 1;
    pl_act_seq_t e = {.n_tok = 1};
    cr_assert_eq(pl_act_encode(&s, &e, v, &buf, &len), PL_ERR_INVALID);
}

Test(act, every_truncation_fails_cleanly)
{
    pl_act_hdr_t h, got = {.job = 424242};
    pl_act_seq_t seqs[2], out[8];
    float payload[12];
    const void *pl = (void *)1;
    size_t len;

    s_hidden(&h, seqs, payload);
    unsigned char *buf = s_encode_ok(&h, seqs, payload, &len);
    for (size_t n = 0; n < len; n++) {
        /* A fresh allocation of exactly n bytes, so ASan sees any read past the end. */
        unsigned char *cut = malloc(n ? n : 1);
        memcpy(cut, buf, n);
        cr_assert_eq(pl_act_decode(cut, n, &s_limits, &got, out, &pl), PL_ERR_PROTOCOL,
                     "length %zu", n);
        cr_assert_neq(pl_error_msg()[0], '\0');
        free(cut);
    }
    cr_assert_eq(got.job, 424242, "header untouched on error");
    cr_assert_eq(pl, (void *)1, "payload untouched on error");
    /* One byte too many is just as wrong. */
    unsigned char *longer = calloc(1, len + 1);
    memcpy(longer, buf, len);
    cr_assert_eq(pl_act_decode(longer, len + 1, &s_limits, &got, out, &pl), PL_ERR_PROTOCOL);
    cr_assert(strstr(pl_error_msg(), "bytes received") != NULL, "%s", pl_error_msg());
    free(longer);
    free(buf);
}

/* Encode the standard hidden message, patch a u32 at `off`, expect decode to fail naming `what`. */
static void s_patched(size_t off, uint32_t value, const char *what)
{
    pl_act_hdr_t h, got;
    pl_act_seq_t seqs[2], out[8];
    float payload[12];
    size_t len;
    s_hidden(&h, seqs, payload);
    unsigned char *buf = s_encode_ok(&h, seqs, payload, &len);
    put32(buf, off, value);
    cr_assert_eq(pl_act_decode(buf, len, &s_limits, &got, out, NULL), PL_ERR_PROTOCOL,
                 "patch at %zu = %u should fail", off, value);
    cr_assert(strstr(pl_error_msg(), what) != NULL, "message '%s' should name '%s'",
              pl_error_msg(), what);
    free(buf);
}

Test(act, broken_header_fields)
{
    s_patched(0, 0x504c4132u, "magic");
    s_patched(4, 2 | (PL_ACT_HIDDEN << 16), "version"); /* the layout before the token */
    s_patched(4, 4 | (PL_ACT_HIDDEN << 16), "version");
    s_patched(4, 3 | (0u << 16), "kind");
    s_patched(4, 3 | (9u << 16), "kind");
    s_patched(4, 3 | (PL_ACT_HIDDEN << 16) | (3u << 24), "dtype"); /* unknown dtype */
    s_patched(4, 3 | (PL_ACT_HIDDEN << 16) | (1u << 24), "dtype"); /* not the job's */
    s_patched(20, 0, "n_seq");            /* hidden with no sequences */
    s_patched(20, 9, "n_seq");            /* above max_seq */
    s_patched(20, 3, "bytes");            /* one more entry than present */
    s_patched(24, 5, "bytes");            /* the length no longer matches the header */
    s_patched(24, 65, "n_tokens");        /* above max_tokens */
    s_patched(28, 4, "dim");              /* dim mismatch */
    s_patched(28, 0, "dim");
}

Test(act, broken_entries)
{
    const size_t e0 = 48, e1 = 68;
    s_patched(e1 + 0, 5, "seq 5");            /* duplicate seq */
    s_patched(e1 + 0, 8, "seq 8");            /* seq >= max_seq */
    s_patched(e1 + 4, 100, "positions");      /* pos0 + n_tok = 101 > 100 */
    s_patched(e1 + 4, UINT32_MAX, "positions");/* pos0 + n_tok overflows 32 bits */
    s_patched(e0 + 4, 98, "positions");       /* 98 + 3 > 100 */
    s_patched(e0 + 8, 0, "n_tok");            /* n_tok 0 */
    s_patched(e0 + 8, 2, "n_tokens");         /* sum 3 != n_tokens 4 */
    s_patched(e0 + 8, UINT32_MAX, "positions");
    s_patched(e0 + 12, 2, "flags");           /* unknown flag bit */
}

Test(act, positions_at_the_limit_are_fine)
{
    pl_act_hdr_t h, got;
    pl_act_seq_t seqs[2], out[8];
    float payload[12];
    size_t len;
    s_hidden(&h, seqs, payload);
    seqs[0].pos0 = 97; /* 97 + 3 == max_pos */
    seqs[1].pos0 = 99;
    seqs[0].seq = 7;   /* max_seq - 1 */
    void *buf = s_encode_ok(&h, seqs, payload, &len);
    cr_assert_eq(pl_act_decode(buf, len, &s_limits, &got, out, NULL), PL_OK, "%s",
                 pl_error_msg());
    free(buf);
}

Test(act, tokens_rules)
{
    pl_act_hdr_t h = {.kind = PL_ACT_TOKENS, .n_seq = 2, .n_tokens = 2};
    pl_act_seq_t seqs[2] = {{.seq = 0, .n_tok = 1, .token = 5}, {.seq = 1, .n_tok = 1, .token = 6}};
    pl_act_hdr_t got;
    pl_act_seq_t out[8];
    size_t len;
    unsigned char *buf = s_encode_ok(&h, seqs, NULL, &len);

    put32(buf, 48 + 20 + 16, (uint32_t)-3); /* negative token */
    cr_assert_eq(pl_act_decode(buf, len, &s_limits, &got, out, NULL), PL_ERR_PROTOCOL);
    cr_assert(strstr(pl_error_msg(), "token") != NULL, "%s", pl_error_msg());
    put32(buf, 48 + 20 + 16, 6);
    put32(buf, 28, 3); /* dim must be 0 */
    cr_assert_eq(pl_act_decode(buf, len, &s_limits, &got, out, NULL), PL_ERR_PROTOCOL);
    put32(buf, 28, 0);
    cr_assert_eq(pl_act_decode(buf, len, &s_limits, &got, out, NULL), PL_OK);
    free(buf);

    /* Two tokens for one sequence is not a tokens message. */
    h = (pl_act_hdr_t){.kind = PL_ACT_TOKENS, .n_seq = 1, .n_tokens = 1};
    pl_act_seq_t one = {.seq = 0, .n_tok = 1};
    buf = s_encode_ok(&h, &one, NULL, &len);
    put32(buf, 48 + 8, 2);
    put32(buf, 24, 2);
    cr_assert_eq(pl_act_decode(buf, len, &s_limits, &got, out, NULL), PL_ERR_PROTOCOL);
    free(buf);
}

Test(act, stop_rules)
{
    pl_act_hdr_t h = {.kind = PL_ACT_STOP}, got;
    pl_act_seq_t out[8];
    size_t len;
    unsigned char *buf = s_encode_ok(&h, NULL, NULL, &len);
    put32(buf, 24, 1); /* n_tokens on a stop */
    cr_assert_eq(pl_act_decode(buf, len, &s_limits, &got, out, NULL), PL_ERR_PROTOCOL);
    cr_assert(strstr(pl_error_msg(), "stop") != NULL, "%s", pl_error_msg());
    free(buf);
}

Test(act, duplicate_check_with_many_entries)
{
    /* More entries than the pairwise check handles: the sorting path. */
    enum { N = 40 };
    pl_act_hdr_t h = {.kind = PL_ACT_TOKENS, .n_seq = N, .n_tokens = N};
    pl_act_seq_t seqs[N];
    for (int i = 0; i < N; i++)
        seqs[i] = (pl_act_seq_t){.seq = (uint32_t)(N - 1 - i), .n_tok = 1, .token = i};
    size_t len;
    unsigned char *buf = s_encode_ok(&h, seqs, NULL, &len);
    cr_assert_eq(s_decode(buf, len), PL_OK, "%s", pl_error_msg());
    put32(buf, 48 + 20 * 39, 17); /* last entry repeats seq 17 */
    cr_assert_eq(s_decode(buf, len), PL_ERR_PROTOCOL);
    cr_assert(strstr(pl_error_msg(), "seq 17") != NULL, "%s", pl_error_msg());
    free(buf);
}

Test(act, huge_counts_do_not_overflow)
{
    unsigned char buf[48] = {0};
    pl_act_hdr_t got;
    pl_act_seq_t out[1];
    pl_act_limits_t lim = {.max_seq = UINT32_MAX, .max_tokens = UINT32_MAX, .dim = UINT32_MAX,
                           .max_pos = UINT32_MAX};
    put32(buf, 0, PL_ACT_MAGIC);
    put16(buf, 4, 3);
    buf[6] = PL_ACT_HIDDEN;
    put32(buf, 20, UINT32_MAX);
    put32(buf, 24, UINT32_MAX);
    put32(buf, 28, UINT32_MAX);
    cr_assert_eq(pl_act_decode(buf, sizeof(buf), &lim, &got, out, NULL), PL_ERR_PROTOCOL);
}

Test(act, encode_rejects_inconsistent_headers)
{
    pl_act_seq_t seqs[2] = {{.seq = 0, .n_tok = 2}, {.seq = 1, .n_tok = 1}};
    float payload[9] = {0};
    void *buf = NULL;
    size_t len = 0;
    pl_act_hdr_t h = {.kind = PL_ACT_HIDDEN, .n_seq = 2, .n_tokens = 4, .dim = 3};
    cr_assert_eq(pl_act_encode(&h, seqs, payload, &buf, &len), PL_ERR_INVALID); /* sum 3 != 4 */
    h.n_tokens = 3;
    cr_assert_eq(pl_act_encode(&h, seqs, NULL, &buf, &len), PL_ERR_INVALID); /* no payload */
    h.kind = 0;
    cr_assert_eq(pl_act_encode(&h, seqs, payload, &buf, &len), PL_ERR_INVALID);
    h = (pl_act_hdr_t){.kind = PL_ACT_TOKENS, .n_seq = 2, .n_tokens = 3};
    cr_assert_eq(pl_act_encode(&h, seqs, NULL, &buf, &len), PL_ERR_INVALID);
    h = (pl_act_hdr_t){.kind = PL_ACT_STOP, .n_seq = 1};
    cr_assert_eq(pl_act_encode(&h, seqs, NULL, &buf, &len), PL_ERR_INVALID);
    cr_assert_null(buf);
    cr_assert_eq(len, 0);
}

Test(act, tag_layout)
{
    uint64_t t = pl_act_tag(1, PL_ACT_HIDDEN, 2, 3);
    cr_assert_eq(t, (1ULL << 44) | (1ULL << 40) | (2ULL << 24) | 3ULL);
    cr_assert_eq(pl_act_tag(0xfffff, PL_ACT_STOP, 0xffff, 0xffffff), 0xfffff3ffffffffffULL);
    /* Fields wider than their slot are truncated, never spill into the neighbour. */
    cr_assert_eq(pl_act_tag(0x100001, PL_ACT_TOKENS, 0x10002, 0x1000003),
                 pl_act_tag(1, PL_ACT_TOKENS, 2, 3));
    cr_assert_eq(pl_act_tag_job(5), 5ULL << 44);
    cr_assert_eq(t & PL_ACT_TAG_JOB_MASK, pl_act_tag_job(1));
    cr_assert_neq(t & PL_ACT_TAG_JOB_MASK, pl_act_tag_job(2));
    cr_assert_eq(PL_ACT_TAG_JOB_MASK, pl_act_tag_job(0xfffff));
}

/* ---- wire dtypes ---- */

static float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Reference bf16 rounding, written differently: of the two bf16 values around f (truncated, and
 * one unit above in magnitude), the nearer in double arithmetic, ties to the even one. */
static uint16_t s_ref_bf16(float f)
{
    uint32_t u = f2u(f);
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
    if ((u & 0xffff) == 0)
        return lo;
    double dl = fabs((double)f - (double)u2f((uint32_t)lo << 16));
    double dh = fabs((double)u2f((uint32_t)hi << 16) - (double)f);
    if (isinf(u2f((uint32_t)hi << 16))) /* above the largest bf16: compare with 2^128 */
        dh = fabs(ldexp(1.0, 128) * (f < 0 ? -1 : 1) - (double)f);
    if (dl < dh)
        return lo;
    if (dh < dl)
        return hi;
    return (lo & 1) ? hi : lo;
}

Test(act, f16_conversion_matches_the_compiler)
{
    /* every half value converts to f32 exactly and back */
    for (uint32_t h = 0; h < 0x10000; h++) {
        _Float16 ref;
        uint16_t hh = (uint16_t)h;
        memcpy(&ref, &hh, 2);
        float f = pl_act_f16_to_f32(hh);
        if (isnan((float)ref)) {
            cr_assert(isnan(f), "0x%04x", h);
            cr_assert_eq(pl_act_f32_to_f16(f), hh, "NaN 0x%04x keeps its payload", h);
            continue;
        }
        cr_assert_eq(f2u(f), f2u((float)ref), "0x%04x", h);
        cr_assert_eq(pl_act_f32_to_f16(f), hh, "0x%04x", h);
    }
    /* f32 -> f16 on a sweep of bit patterns (every exponent, many mantissas, ties included) */
    for (uint64_t u = 0; u <= 0xffffffffu; u += 0x1fffu) {
        for (uint32_t d = 0; d < 3; d++) {
            float f = u2f((uint32_t)u + d * 0x1000u);
            if (isnan(f))
                continue;
            _Float16 ref = (_Float16)f;
            uint16_t want;
            memcpy(&want, &ref, 2);
            cr_assert_eq(pl_act_f32_to_f16(f), want, "0x%08x", f2u(f));
        }
    }
    cr_assert_eq(pl_act_f32_to_f16(65504.0f), 0x7bff);
    cr_assert_eq(pl_act_f32_to_f16(65520.0f), 0x7c00);
    cr_assert_eq(pl_act_f32_to_f16(-INFINITY), 0xfc00);
    cr_assert_eq(pl_act_f32_to_f16(ldexpf(1, -24)), 1);
    cr_assert_eq(pl_act_f32_to_f16(ldexpf(1, -25)), 0, "a tie rounds to even: zero");
    cr_assert(isnan(pl_act_f16_to_f32(pl_act_f32_to_f16(NAN))));
}

Test(act, bf16_conversion_matches_a_reference)
{
    for (uint64_t u = 0; u <= 0xffffffffu; u += 0x3fffu) {
        for (uint32_t d = 0; d < 3; d++) {
            uint32_t v = (uint32_t)u + d * 0x8000u; /* d = 1: exact ties */
            float f = u2f(v);
            if (isnan(f)) {
                cr_assert(isnan(pl_act_bf16_to_f32(pl_act_f32_to_bf16(f))), "0x%08x", v);
                continue;
            }
            cr_assert_eq(pl_act_f32_to_bf16(f), s_ref_bf16(f), "0x%08x", v);
        }
    }
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = pl_act_bf16_to_f32((uint16_t)h);
        cr_assert_eq(f2u(f), h << 16);
        cr_assert_eq(pl_act_f32_to_bf16(f), h, "0x%04x round trip", h);
    }
    cr_assert_eq(pl_act_f32_to_bf16(u2f(0x7f7fffffu)), 0x7f80, "the largest float: infinity");
}

Test(act, hidden_payload_travels_in_the_wire_dtype)
{
    static const pl_act_dtype_t dts[] = {PL_ACT_F32, PL_ACT_BF16, PL_ACT_F16};
    for (size_t d = 0; d < 3; d++) {
        pl_act_hdr_t h, got;
        pl_act_seq_t seqs[2], out[8];
        float payload[12], scratch[12];
        const void *pl;
        const float *f32;
        size_t len;
        pl_act_limits_t lim = s_limits;
        s_hidden(&h, seqs, payload);
        payload[3] = 1.0f / 3.0f; /* not exact in a half type */
        payload[7] = 70000.0f;    /* beyond f16 */
        h.dtype = dts[d];
        lim.dtype = dts[d];
        unsigned char *buf = s_encode_ok(&h, seqs, payload, &len);
        cr_assert_eq(len, 48 + 40 + 12 * pl_act_dtype_size(dts[d]));
        cr_assert_eq(buf[7], dts[d]);
        cr_assert_eq(pl_act_decode(buf, len, &lim, &got, out, &pl), PL_OK, "%s", pl_error_msg());
        cr_assert_eq(got.dtype, dts[d]);
        pl_act_payload_f32(&got, pl, scratch, &f32);
        float want[12];
        memcpy(want, payload, sizeof(want));
        pl_act_round(dts[d], want, 12);
        for (int i = 0; i < 12; i++) {
            const unsigned char *p = (const unsigned char *)pl;
            if (dts[d] == PL_ACT_BF16)
                cr_assert_eq(p[2 * i] | p[2 * i + 1] << 8, s_ref_bf16(payload[i]));
            if (dts[d] == PL_ACT_F16) {
                _Float16 r = (_Float16)payload[i];
                uint16_t w;
                memcpy(&w, &r, 2);
                cr_assert_eq(p[2 * i] | p[2 * i + 1] << 8, w);
            }
            cr_assert_eq(f2u(f32[i]), f2u(want[i]), "dtype %zu value %d", d, i);
        }
        if (dts[d] == PL_ACT_F32) {
            cr_assert_eq((const void *)f32, pl, "f32 is read where it arrived");
            cr_assert_eq(f2u(want[3]), f2u(1.0f / 3.0f));
        } else {
            cr_assert_eq(f32, scratch);
            cr_assert_neq(f2u(want[3]), f2u(1.0f / 3.0f));
        }
        /* a job of another wire dtype refuses it */
        lim.dtype = dts[(d + 1) % 3];
        cr_assert_eq(pl_act_decode(buf, len, &lim, &got, out, &pl), PL_ERR_PROTOCOL);
        cr_assert(strstr(pl_error_msg(), "dtype"), "%s", pl_error_msg());
        free(buf);
    }
    pl_act_dtype_t dt;
    cr_assert_eq(pl_act_dtype_parse("bf16", &dt), PL_OK);
    cr_assert_eq(dt, PL_ACT_BF16);
    cr_assert_eq(pl_act_dtype_parse("fp16", &dt), PL_ERR_INVALID);
    cr_assert_str_eq(pl_act_dtype_name(PL_ACT_F16), "f16");
    cr_assert_null(pl_act_dtype_name((pl_act_dtype_t)3));
    /* tokens and stop messages carry dtype 0 only */
    pl_act_seq_t ts[1] = {{.seq = 0, .n_tok = 1, .token = 4}};
    pl_act_hdr_t th = {.kind = PL_ACT_TOKENS, .n_seq = 1, .n_tokens = 1, .dtype = PL_ACT_BF16};
    void *b = NULL;
    size_t l = 0;
    cr_assert_eq(pl_act_encode(&th, ts, NULL, &b, &l), PL_ERR_INVALID);
}

Test(act, probe_tag_layout)
{
    /* the literal layout: job in the top 20 bits, kind 0xf, type in the mb field, seq in step */
    cr_assert_eq(pl_act_probe_tag(5, 2, 7), (5ULL << 44) | (0xfULL << 40) | (2ULL << 24) | 7ULL);
    cr_assert_eq(pl_act_probe_tag(0x100005, 0x10002, 0x1000007), pl_act_probe_tag(5, 2, 7));
    uint32_t type = 99, seq = 99;
    cr_assert(pl_act_probe_tag_decode(0xfffffffffffffffeULL, &type, &seq));
    cr_assert_eq(type, 0xffff);
    cr_assert_eq(seq, 0xfffffe);
    cr_assert(pl_act_probe_tag_decode(pl_act_probe_tag(3, 4, 0x123456), &type, &seq));
    cr_assert_eq(type, 4);
    cr_assert_eq(seq, 0x123456);
    cr_assert(pl_act_probe_tag_decode(pl_act_probe_tag(3, 4, 5), NULL, NULL));
    /* no activation message's tag is a probe tag, and a refusal leaves the outputs alone */
    const pl_act_kind_t kinds[] = {PL_ACT_HIDDEN, PL_ACT_TOKENS, PL_ACT_STOP};
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        type = seq = 99;
        cr_assert_not(pl_act_probe_tag_decode(pl_act_tag(0xfffff, kinds[i], 0xffff, 0xffffff),
                                              &type, &seq));
        cr_assert_eq(type, 99);
        cr_assert_eq(seq, 99);
    }
    cr_assert_not(pl_act_probe_tag_decode(0, NULL, NULL));
    /* the receive mask keeps a job's probes apart from its activations and other jobs' probes */
    uint64_t want = pl_act_probe_tag(3, 0, 0);
    cr_assert_eq(pl_act_probe_tag(3, 4, 9) & PL_ACT_TAG_PROBE_MASK, want);
    cr_assert_neq(pl_act_probe_tag(4, 4, 9) & PL_ACT_TAG_PROBE_MASK, want);
    cr_assert_neq(pl_act_tag(3, PL_ACT_HIDDEN, 0, 0) & PL_ACT_TAG_PROBE_MASK, want);
    cr_assert_eq(PL_ACT_TAG_PROBE_MASK, 0xffffff0000000000ULL);
}

/* Encoding into the caller's buffer gives the bytes of pl_act_encode (checked against the
 * reference layout above) for every dtype and kind, also with the payload computed in place at
 * pl_act_payload_offset; a buffer too small is refused and left untouched. */
Test(act, encode_into_matches_encode_also_in_place)
{
    pl_act_hdr_t h;
    pl_act_seq_t seqs[2];
    float payload[12];
    s_hidden(&h, seqs, payload);
    payload[3] = 1.0f / 3.0f; /* rounds differently in bf16 and f16 */
    for (uint32_t dt = 0; dt < PL_ACT_DTYPE_COUNT; dt++) {
        h.dtype = dt;
        size_t ref_len, len = 0;
        unsigned char *ref = s_encode_ok(&h, seqs, payload, &ref_len);
        unsigned char buf[512], in_place[512];
        memset(buf, 0xee, sizeof(buf));
        cr_assert_eq(pl_act_encode_into(&h, seqs, payload, buf, sizeof(buf), &len), PL_OK, "%s",
                     pl_error_msg());
        cr_assert_eq(len, ref_len);
        cr_assert_eq(memcmp(buf, ref, len), 0, "dtype %u", dt);
        cr_assert_eq(buf[len], 0xee, "dtype %u: wrote past the message", dt);
        /* the stage computed its f32 output into the send buffer itself */
        size_t off = pl_act_payload_offset(h.n_seq);
        cr_assert_eq(off, PL_ACT_HDR_BYTES + 2 * PL_ACT_SEQ_BYTES);
        cr_assert_eq(off % 4, 0);
        memset(in_place, 0xee, sizeof(in_place));
        memcpy(in_place + off, payload, sizeof(payload));
        cr_assert_eq(pl_act_encode_into(&h, seqs, in_place + off, in_place, sizeof(in_place), &len),
                     PL_OK, "%s", pl_error_msg());
        cr_assert_eq(len, ref_len);
        cr_assert_eq(memcmp(in_place, ref, len), 0, "dtype %u in place", dt);
        /* one byte short: refused, nothing written */
        memset(buf, 0xee, sizeof(buf));
        size_t kept = 12345;
        cr_assert_eq(pl_act_encode_into(&h, seqs, payload, buf, ref_len - 1, &kept), PL_ERR_RANGE);
        cr_assert_eq(kept, 12345);
        for (size_t i = 0; i < sizeof(buf); i++)
            cr_assert_eq(buf[i], 0xee);
        free(ref);
    }
    pl_act_hdr_t stop = {.kind = PL_ACT_STOP, .job = 3};
    unsigned char sb[PL_ACT_HDR_BYTES];
    size_t sl;
    cr_assert_eq(pl_act_encode_into(&stop, NULL, NULL, sb, sizeof(sb), &sl), PL_OK);
    cr_assert_eq(sl, PL_ACT_HDR_BYTES);
    h.dtype = 0;
    seqs[0].n_tok = 2; /* entries no longer sum to n_tokens */
    cr_assert_eq(pl_act_encode_into(&h, seqs, payload, sb, sizeof(sb), &sl), PL_ERR_INVALID);
}

/* ---- the job token ---- */

/* The standard hidden message under a job token `t` (every byte 0x10 + i, and byte `flip`
 * XORed with `x` in the message's copy). */
static pl_status_t s_decode_token(size_t flip, uint8_t x)
{
    pl_act_hdr_t h, got = {.job = 4242};
    pl_act_seq_t seqs[2], out[8];
    float payload[12];
    size_t len;
    pl_act_limits_t lim = s_limits;
    s_hidden(&h, seqs, payload);
    for (int i = 0; i < 16; i++)
        lim.token.b[i] = h.token.b[i] = (uint8_t)(0x10 + i);
    h.token.b[flip] ^= x;
    unsigned char *buf = s_encode_ok(&h, seqs, payload, &len);
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
    pl_act_limits_t lim = s_limits;
    s_hidden(&h, seqs, payload);
    lim.token.b[3] = 1;
    unsigned char *buf = s_encode_ok(&h, seqs, payload, &len);
    put32(buf, 28, 99);         /* dim */
    put32(buf, 48 + 0, 77);     /* seq */
    cr_assert_eq(pl_act_decode(buf, len - 5, &lim, &got, out, NULL), PL_ERR_PERMISSION);
    /* but a message too short to hold a token, or of the layout before it, is malformed */
    cr_assert_eq(pl_act_decode(buf, 47, &lim, &got, out, NULL), PL_ERR_PROTOCOL);
    put16(buf, 4, 2);
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
    const char *bad[] = {"", "0011", "00112233445566778899aabbccddeeff0",
                         "00112233445566778899aabbccddeefg", "0x112233445566778899aabbccddeeff",
                         " 0112233445566778899aabbccddeeff"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cr_assert_eq(pl_act_token_parse(bad[i], &c), PL_ERR_INVALID, "'%s'", bad[i]);
        cr_assert(strstr(pl_error_msg(), bad[i][0] ? bad[i] : "\x01") == NULL,
                  "the message does not quote the text: %s", pl_error_msg());
        cr_assert(pl_act_token_equal(&c, &keep), "output untouched on error");
    }
}
