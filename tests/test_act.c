/* Tests of the activation message codec: byte layout against an encoder written here, round
 * trips of every kind, rejection of every truncation and every broken field, the tag layouts. */
#include "act_util.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pl_status_t s_decode(const void *buf, size_t len)
{
    pl_act_hdr_t h;
    pl_act_seq_t seqs[64];
    const void *payload;
    pl_act_limits_t lim = ta_limits;
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

    ta_hidden(&h, seqs, payload);
    for (int i = 0; i < 16; i++)
        h.token.b[i] = (uint8_t)(0xa0 + i);
    o = ta_put32(ref, o, 0x504c4131u);
    o = ta_put16(ref, o, 3);
    ref[o++] = PL_ACT_HIDDEN;
    ref[o++] = PL_ACT_F32;
    o = ta_put32(ref, o, 7);
    o = ta_put32(ref, o, 1);
    o = ta_put32(ref, o, 0);
    o = ta_put32(ref, o, 2);
    o = ta_put32(ref, o, 4);
    o = ta_put32(ref, o, 3);
    for (int i = 0; i < 16; i++)
        ref[o++] = (unsigned char)(0xa0 + i);
    for (int i = 0; i < 2; i++) {
        o = ta_put32(ref, o, seqs[i].seq);
        o = ta_put32(ref, o, seqs[i].pos0);
        o = ta_put32(ref, o, seqs[i].n_tok);
        o = ta_put32(ref, o, seqs[i].flags);
        o = ta_put32(ref, o, (uint32_t)seqs[i].token);
    }
    for (int i = 0; i < 12; i++)
        o = ta_put32(ref, o, ta_f2u(payload[i]));
    cr_assert_eq(o, sizeof(ref));

    unsigned char *buf = ta_encode_ok(&h, seqs, payload, &len);
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

    ta_hidden(&h, seqs, payload);
    void *buf = ta_encode_ok(&h, seqs, payload, &len);
    cr_assert_eq(pl_act_decode(buf, len, &ta_limits, &got, out, &pl), PL_OK, "%s", pl_error_msg());
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
    void *buf = ta_encode_ok(&h, seqs, NULL, &len);
    cr_assert_eq(len, 48 + 60);
    cr_assert_eq(pl_act_decode(buf, len, &ta_limits, &got, out, &pl), PL_OK, "%s", pl_error_msg());
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
    void *buf = ta_encode_ok(&h, NULL, NULL, &len);
    cr_assert_eq(len, 48);
    cr_assert_eq(pl_act_decode(buf, len, &ta_limits, &got, out, NULL), PL_OK, "%s", pl_error_msg());
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
    ta_hidden(&h, seqs, payload);
    h.kind = PL_ACT_GRAD;
    void *buf = ta_encode_ok(&h, seqs, payload, &len);
    cr_assert_eq(((unsigned char *)buf)[6], 8, "kind byte on the wire");
    cr_assert_eq(pl_act_decode(buf, len, &ta_limits, &got, out, &pl), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(memcmp(&got, &h, sizeof(h)), 0);
    cr_assert_arr_eq(pl, payload, sizeof(payload));
    free(buf);

    double v[3] = {0.1, -1e300, 5e-324}, back[3];
    pl_act_hdr_t s = {.kind = PL_ACT_SUM, .job = 7, .mb = 1, .step = 99, .dim = 3};
    buf = ta_encode_ok(&s, NULL, v, &len);
    cr_assert_eq(len, 48 + 24);
    unsigned char *b = buf;
    uint64_t u;
    memcpy(&u, &v[0], 8);
    for (int i = 0; i < 8; i++) /* little-endian IEEE binary64 */
        cr_assert_eq(b[48 + i], (unsigned char)(u >> (8 * i)));
    cr_assert_eq(pl_act_decode(buf, len, &ta_limits, &got, out, &pl), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(memcmp(&got, &s, sizeof(s)), 0);
    pl_act_payload_f64(&got, pl, back);
    cr_assert_eq(memcmp(back, v, sizeof(v)), 0);
    cr_assert_eq(pl_act_decode(buf, len - 8, &ta_limits, &got, out, &pl), PL_ERR_PROTOCOL);
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

    ta_hidden(&h, seqs, payload);
    unsigned char *buf = ta_encode_ok(&h, seqs, payload, &len);
    for (size_t n = 0; n < len; n++) {
        /* A fresh allocation of exactly n bytes, so ASan sees any read past the end. */
        unsigned char *cut = malloc(n ? n : 1);
        memcpy(cut, buf, n);
        cr_assert_eq(pl_act_decode(cut, n, &ta_limits, &got, out, &pl), PL_ERR_PROTOCOL,
                     "length %zu", n);
        cr_assert_neq(pl_error_msg()[0], '\0');
        free(cut);
    }
    cr_assert_eq(got.job, 424242, "header untouched on error");
    cr_assert_eq(pl, (void *)1, "payload untouched on error");
    /* One byte too many is just as wrong. */
    unsigned char *longer = calloc(1, len + 1);
    memcpy(longer, buf, len);
    cr_assert_eq(pl_act_decode(longer, len + 1, &ta_limits, &got, out, &pl), PL_ERR_PROTOCOL);
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
    ta_hidden(&h, seqs, payload);
    unsigned char *buf = ta_encode_ok(&h, seqs, payload, &len);
    ta_put32(buf, off, value);
    cr_assert_eq(pl_act_decode(buf, len, &ta_limits, &got, out, NULL), PL_ERR_PROTOCOL,
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
    ta_hidden(&h, seqs, payload);
    seqs[0].pos0 = 97; /* 97 + 3 == max_pos */
    seqs[1].pos0 = 99;
    seqs[0].seq = 7;   /* max_seq - 1 */
    void *buf = ta_encode_ok(&h, seqs, payload, &len);
    cr_assert_eq(pl_act_decode(buf, len, &ta_limits, &got, out, NULL), PL_OK, "%s", pl_error_msg());
    free(buf);
}

Test(act, tokens_rules)
{
    pl_act_hdr_t h = {.kind = PL_ACT_TOKENS, .n_seq = 2, .n_tokens = 2};
    pl_act_seq_t seqs[2] = {{.seq = 0, .n_tok = 1, .token = 5}, {.seq = 1, .n_tok = 1, .token = 6}};
    pl_act_hdr_t got;
    pl_act_seq_t out[8];
    size_t len;
    unsigned char *buf = ta_encode_ok(&h, seqs, NULL, &len);

    ta_put32(buf, 48 + 20 + 16, (uint32_t)-3); /* negative token */
    cr_assert_eq(pl_act_decode(buf, len, &ta_limits, &got, out, NULL), PL_ERR_PROTOCOL);
    cr_assert(strstr(pl_error_msg(), "token") != NULL, "%s", pl_error_msg());
    ta_put32(buf, 48 + 20 + 16, 6);
    ta_put32(buf, 28, 3); /* dim must be 0 */
    cr_assert_eq(pl_act_decode(buf, len, &ta_limits, &got, out, NULL), PL_ERR_PROTOCOL);
    ta_put32(buf, 28, 0);
    cr_assert_eq(pl_act_decode(buf, len, &ta_limits, &got, out, NULL), PL_OK);
    free(buf);

    /* Two tokens for one sequence is not a tokens message. */
    h = (pl_act_hdr_t){.kind = PL_ACT_TOKENS, .n_seq = 1, .n_tokens = 1};
    pl_act_seq_t one = {.seq = 0, .n_tok = 1};
    buf = ta_encode_ok(&h, &one, NULL, &len);
    ta_put32(buf, 48 + 8, 2);
    ta_put32(buf, 24, 2);
    cr_assert_eq(pl_act_decode(buf, len, &ta_limits, &got, out, NULL), PL_ERR_PROTOCOL);
    free(buf);
}

Test(act, stop_rules)
{
    pl_act_hdr_t h = {.kind = PL_ACT_STOP}, got;
    pl_act_seq_t out[8];
    size_t len;
    unsigned char *buf = ta_encode_ok(&h, NULL, NULL, &len);
    ta_put32(buf, 24, 1); /* n_tokens on a stop */
    cr_assert_eq(pl_act_decode(buf, len, &ta_limits, &got, out, NULL), PL_ERR_PROTOCOL);
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
    unsigned char *buf = ta_encode_ok(&h, seqs, NULL, &len);
    cr_assert_eq(s_decode(buf, len), PL_OK, "%s", pl_error_msg());
    ta_put32(buf, 48 + 20 * 39, 17); /* last entry repeats seq 17 */
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
    ta_put32(buf, 0, PL_ACT_MAGIC);
    ta_put16(buf, 4, 3);
    buf[6] = PL_ACT_HIDDEN;
    ta_put32(buf, 20, UINT32_MAX);
    ta_put32(buf, 24, UINT32_MAX);
    ta_put32(buf, 28, UINT32_MAX);
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
