/* Tests of the activation messages' wire dtypes (act_dtype.c): f16 and bf16 conversions against
 * the compiler and a reference, the hidden payload in each dtype, encoding into a given buffer. */
#include "act_util.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reference bf16 rounding, written differently: of the two bf16 values around f (truncated, and
 * one unit above in magnitude), the nearer in double arithmetic, ties to the even one. */
static uint16_t s_ref_bf16(float f)
{
    uint32_t u = ta_f2u(f);
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
    if ((u & 0xffff) == 0)
        return lo;
    double dl = fabs((double)f - (double)ta_u2f((uint32_t)lo << 16));
    double dh = fabs((double)ta_u2f((uint32_t)hi << 16) - (double)f);
    if (isinf(ta_u2f((uint32_t)hi << 16))) /* above the largest bf16: compare with 2^128 */
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
        cr_assert_eq(ta_f2u(f), ta_f2u((float)ref), "0x%04x", h);
        cr_assert_eq(pl_act_f32_to_f16(f), hh, "0x%04x", h);
    }
    /* f32 -> f16 on a sweep of bit patterns (every exponent, many mantissas, ties included) */
    for (uint64_t u = 0; u <= 0xffffffffu; u += 0x1fffu) {
        for (uint32_t d = 0; d < 3; d++) {
            float f = ta_u2f((uint32_t)u + d * 0x1000u);
            if (isnan(f))
                continue;
            _Float16 ref = (_Float16)f;
            uint16_t want;
            memcpy(&want, &ref, 2);
            cr_assert_eq(pl_act_f32_to_f16(f), want, "0x%08x", ta_f2u(f));
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
            float f = ta_u2f(v);
            if (isnan(f)) {
                cr_assert(isnan(pl_act_bf16_to_f32(pl_act_f32_to_bf16(f))), "0x%08x", v);
                continue;
            }
            cr_assert_eq(pl_act_f32_to_bf16(f), s_ref_bf16(f), "0x%08x", v);
        }
    }
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = pl_act_bf16_to_f32((uint16_t)h);
        cr_assert_eq(ta_f2u(f), h << 16);
        cr_assert_eq(pl_act_f32_to_bf16(f), h, "0x%04x round trip", h);
    }
    cr_assert_eq(pl_act_f32_to_bf16(ta_u2f(0x7f7fffffu)), 0x7f80, "the largest float: infinity");
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
        pl_act_limits_t lim = ta_limits;
        ta_hidden(&h, seqs, payload);
        payload[3] = 1.0f / 3.0f; /* not exact in a half type */
        payload[7] = 70000.0f;    /* beyond f16 */
        h.dtype = dts[d];
        lim.dtype = dts[d];
        unsigned char *buf = ta_encode_ok(&h, seqs, payload, &len);
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
            cr_assert_eq(ta_f2u(f32[i]), ta_f2u(want[i]), "dtype %zu value %d", d, i);
        }
        if (dts[d] == PL_ACT_F32) {
            cr_assert_eq((const void *)f32, pl, "f32 is read where it arrived");
            cr_assert_eq(ta_f2u(want[3]), ta_f2u(1.0f / 3.0f));
        } else {
            cr_assert_eq(f32, scratch);
            cr_assert_neq(ta_f2u(want[3]), ta_f2u(1.0f / 3.0f));
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

/* Encoding into the caller's buffer gives the bytes of pl_act_encode (checked against the
 * reference layout above) for every dtype and kind, also with the payload computed in place at
 * pl_act_payload_offset; a buffer too small is refused and left untouched. */
Test(act, encode_into_matches_encode_also_in_place)
{
    pl_act_hdr_t h;
    pl_act_seq_t seqs[2];
    float payload[12];
    ta_hidden(&h, seqs, payload);
    payload[3] = 1.0f / 3.0f; /* rounds differently in bf16 and f16 */
    for (uint32_t dt = 0; dt < PL_ACT_DTYPE_COUNT; dt++) {
        h.dtype = dt;
        size_t ref_len, len = 0;
        unsigned char *ref = ta_encode_ok(&h, seqs, payload, &ref_len);
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
