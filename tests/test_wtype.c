/* Tests of the weight types: every block type's dequantizer against a per-element reference
 * written here from the format's byte layout, and every quantizer's round trip within its bound. */
#include "common/status.h"
#include "common/util.h"
#include "model/wtype.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the reference: reads bytes at their documented offsets, one element at a time ---- */

static float s_ref_half(const uint8_t *p)
{
    unsigned h = (unsigned)p[0] | (unsigned)p[1] << 8;
    int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    cr_assert_neq(e, 31, "test blocks carry finite scales");
    return (float)(sign ? -v : v);
}

/* The 6-bit scale and min of sub-block s of the 12 packed bytes (ggml's get_scale_min_k4). */
static void s_ref_k_scale(const uint8_t *k, int s, int *sc, int *m)
{
    if (s < 4) {
        *sc = k[s] & 0x3F;
        *m = k[s + 4] & 0x3F;
    } else {
        *sc = (k[s + 4] & 0x0F) | ((k[s - 4] & 0xC0) >> 2);
        *m = ((k[s + 4] & 0xF0) >> 4) | ((k[s] & 0xC0) >> 2);
    }
}

/* Element e of one block at b. Layouts (byte offsets) from ggml-common.h:
 * Q8_0 d@0 qs@2 (int8); Q4_0 d@0 qs@2: element e<16 low nibble of qs[e], else high of qs[e-16];
 * Q4_K d@0 dmin@2 scales@4 qs@16: element e in 64-chunk c=e/64, low nibble of qs[32c+e%32] for
 *   e%64<32 else high, sub-block e/32;  Q5_K as Q4_K with qh@16 (bit e/32 of qh[e%32]), qs@48;
 * Q6_K ql@0 qh@128 scales@192 d@208: half h=e/128, quarter p=(e%128)/32, l=e%32: low 4 bits
 *   from ql[64h+l+32(p&1)] (low nibble for p<2), high 2 bits (2p) of qh[32h+l], scale e/16. */
static float s_ref_elem(pl_wtype_t dt, const uint8_t *b, int e)
{
    int sc, m, q;
    switch (dt) {
    case PL_WT_Q8_0:
        return s_ref_half(b) * (float)(int8_t)b[2 + e];
    case PL_WT_Q4_0:
        q = e < 16 ? (b[2 + e] & 15) : (b[2 + e - 16] >> 4);
        return s_ref_half(b) * (float)(q - 8);
    case PL_WT_Q4_K:
    case PL_WT_Q5_K: {
        const uint8_t *qs = b + (dt == PL_WT_Q4_K ? 16 : 48);
        int c = e / 64, s = e / 32;
        q = (e % 64) < 32 ? (qs[32 * c + e % 32] & 15) : (qs[32 * c + e % 32] >> 4);
        if (dt == PL_WT_Q5_K)
            q += ((b[16 + e % 32] >> s) & 1) * 16;
        s_ref_k_scale(b + 4, s, &sc, &m);
        float ds = s_ref_half(b) * (float)sc, dm = s_ref_half(b + 2) * (float)m;
        return ds * (float)q - dm;
    }
    case PL_WT_Q6_K: {
        int h = e / 128, p = (e % 128) / 32, l = e % 32;
        int lo = b[64 * h + l + 32 * (p & 1)];
        lo = p < 2 ? lo & 15 : lo >> 4;
        int hi = (b[128 + 32 * h + l] >> (2 * p)) & 3;
        float d = s_ref_half(b + 208);
        return d * (float)(int8_t)b[192 + e / 16] * (float)((lo | hi << 4) - 32);
    }
    default:
        cr_assert_fail("not a block type");
    }
    return 0.0f;
}

static const pl_wtype_t s_quants[] = {PL_WT_Q8_0, PL_WT_Q4_0, PL_WT_Q4_K, PL_WT_Q5_K, PL_WT_Q6_K};
static const size_t s_d_off[][2] = {{0, 0}, {0, 0}, {0, 2}, {0, 2}, {208, 208}}; /* f16 fields */

Test(wtype, geometry)
{
    static const struct {
        pl_wtype_t dt;
        const char *name;
        int block;
        size_t bytes;
    } want[] = {{PL_WT_F32, "F32", 1, 4},        {PL_WT_F16, "F16", 1, 2},
                {PL_WT_BF16, "BF16", 1, 2},      {PL_WT_Q8_0, "Q8_0", 32, 34},
                {PL_WT_Q4_0, "Q4_0", 32, 18},    {PL_WT_Q4_K, "Q4_K", 256, 144},
                {PL_WT_Q5_K, "Q5_K", 256, 176},  {PL_WT_Q6_K, "Q6_K", 256, 210}};
    size_t bytes;
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        cr_assert_str_eq(pl_wtype_name(want[i].dt), want[i].name);
        cr_assert_eq(pl_wtype_info(want[i].dt)->block, want[i].block);
        cr_assert_eq(pl_wtype_info(want[i].dt)->block_bytes, want[i].bytes);
        cr_assert_eq(pl_wtype_info(want[i].dt)->quantized, want[i].block > 1);
        cr_assert_eq(pl_wtype_row_bytes(want[i].dt, 3 * want[i].block, &bytes), PL_OK);
        cr_assert_eq(bytes, 3 * want[i].bytes);
        if (want[i].block > 1) {
            bytes = 7;
            cr_assert_eq(pl_wtype_row_bytes(want[i].dt, want[i].block + 1, &bytes),
                         PL_ERR_INVALID);
            cr_assert_eq(bytes, 7, "output untouched on error");
            cr_assert(strstr(pl_error_msg(), want[i].name), "%s", pl_error_msg());
        }
    }
    cr_assert_str_eq(pl_wtype_name((pl_wtype_t)99), "?");
    pl_wtype_t t = PL_WT_F32;
    cr_assert_eq(pl_wtype_parse("q4_k", &t), PL_OK);
    cr_assert_eq(t, PL_WT_Q4_K);
    cr_assert_eq(pl_wtype_parse("Q8_0", &t), PL_OK);
    cr_assert_eq(t, PL_WT_Q8_0);
    cr_assert_eq(pl_wtype_parse("q4_1", &t), PL_ERR_UNSUPPORTED);
    cr_assert_eq(t, PL_WT_Q8_0, "output untouched on error");
    cr_assert_eq(pl_wtype_row_bytes((pl_wtype_t)99, 1, &bytes), PL_ERR_UNSUPPORTED);
    cr_assert_eq(pl_wtype_row_bytes(PL_WT_F32, -1, &bytes), PL_ERR_INVALID);
}

/* Random bytes everywhere, except finite scales; the conversion must equal the reference. */
Test(wtype, dequant_equals_reference)
{
    enum { NB = 37 };
    for (size_t t = 0; t < sizeof(s_quants) / sizeof(s_quants[0]); t++) {
        pl_wtype_t dt = s_quants[t];
        size_t bb = pl_wtype_info(dt)->block_bytes;
        int blk = pl_wtype_info(dt)->block;
        uint8_t *buf = malloc(NB * bb + 1);
        float *out = malloc(NB * (size_t)blk * sizeof(float));
        uint8_t *blocks = buf + 1; /* misaligned on purpose: the mapping need not be aligned */
        for (size_t i = 0; i < NB * bb; i++)
            blocks[i] = (uint8_t)pl_rand_u64(t + 1, i);
        for (int b = 0; b < NB; b++) {
            for (int k = 0; k < 2; k++) {
                float v = (pl_rand_uniform(77 + t, (uint64_t)(2 * b + k)) - 0.5f) * 0.1f;
                uint16_t h = pl_f32_to_f16(v);
                memcpy(blocks + (size_t)b * bb + s_d_off[t][k], &h, 2);
            }
        }
        pl_wtype_to_f32(dt, blocks, (size_t)NB * blk, out);
        for (int b = 0; b < NB; b++)
            for (int e = 0; e < blk; e++) {
                float want = s_ref_elem(dt, blocks + (size_t)b * bb, e);
                cr_assert(out[b * blk + e] == want, "%s block %d element %d: %g, reference %g",
                          pl_wtype_name(dt), b, e, out[b * blk + e], want);
            }
        free(buf);
        free(out);
    }
}

/* Test data of several shapes: uniform, gaussian-like, outliers, one-signed, constant, zero. */
static void s_fill(int kind, uint64_t seed, float *x, int n)
{
    for (int i = 0; i < n; i++) {
        float u = pl_rand_uniform(seed, (uint64_t)i) * 2.0f - 1.0f;
        float g = 0.0f;
        for (int k = 0; k < 4; k++)
            g += pl_rand_uniform(seed + 1000, (uint64_t)(4 * i + k)) - 0.5f;
        switch (kind) {
        case 0: x[i] = 0.05f * u; break;
        case 1: x[i] = 0.3f * g; break;
        case 2: x[i] = (i % 97 == 5) ? 4.0f * u : 0.02f * u; break;
        case 3: x[i] = 1.0f + fabsf(u); break;
        case 4: x[i] = -0.5f - fabsf(u); break;
        case 5: x[i] = 0.75f; break;
        default: x[i] = 0.0f; break;
        }
    }
}

/* Upper bound of an f16 rounded up from v >= 0. */
static double s_up(double v)
{
    return v * (1.0 + 1.0 / 512) + ldexp(1.0, -24);
}

/* The bound for element i of block values x (blk of them), from the data alone. */
static double s_bound(pl_wtype_t dt, const float *x, int i)
{
    int blk = pl_wtype_info(dt)->block;
    double amax = 0, eps = 0;
    for (int k = 0; k < blk; k++)
        amax = fmax(amax, fabs(x[k]));
    eps = 4e-7 * amax;
    switch (dt) {
    case PL_WT_Q8_0: return 0.5 * s_up(amax / 127) + eps;
    case PL_WT_Q4_0: return 0.5 * s_up(amax / 7.5) + eps;
    case PL_WT_Q4_K:
    case PL_WT_Q5_K: {
        double qmax = dt == PL_WT_Q4_K ? 15 : 31, lo[8], hi[8], max_mn = 0, max_r = 0;
        for (int j = 0; j < 8; j++) {
            lo[j] = 0;
            hi[j] = -INFINITY;
            for (int l = 0; l < 32; l++) {
                lo[j] = fmin(lo[j], x[32 * j + l]);
                hi[j] = fmax(hi[j], x[32 * j + l]);
            }
            max_mn = fmax(max_mn, -lo[j]);
        }
        double dmin = s_up(max_mn / 63);
        for (int j = 0; j < 8; j++)
            max_r = fmax(max_r, hi[j] - lo[j]);
        double d = s_up((max_r + dmin) / qmax / 63);
        int j = i / 32;
        return 0.5 * ((hi[j] - lo[j] + dmin) / qmax + d) + eps;
    }
    case PL_WT_Q6_K: {
        double max_a = 0, a = 0;
        for (int j = 0; j < 16; j++) {
            double aj = 0;
            for (int l = 0; l < 16; l++)
                aj = fmax(aj, fabs(x[16 * j + l]));
            max_a = fmax(max_a, aj);
            if (j == i / 16)
                a = aj;
        }
        return 0.5 * (a / 31 + s_up(max_a / 31 / 127)) + eps;
    }
    case PL_WT_F16: return fabs(x[i]) * ldexp(1.0, -11) + ldexp(1.0, -25); /* subnormals */
    case PL_WT_BF16: return fabs(x[i]) * ldexp(1.0, -8);
    default: return 0;
    }
}

Test(wtype, round_trip_within_bound)
{
    enum { N = 4 * 256 };
    static const pl_wtype_t all[] = {PL_WT_F32, PL_WT_F16, PL_WT_BF16, PL_WT_Q8_0,
                                     PL_WT_Q4_0, PL_WT_Q4_K, PL_WT_Q5_K, PL_WT_Q6_K};
    float x[N], y[N];
    unsigned char q[N * 4];
    for (size_t t = 0; t < sizeof(all) / sizeof(all[0]); t++) {
        pl_wtype_t dt = all[t];
        int blk = pl_wtype_info(dt)->block;
        for (int kind = 0; kind < 7; kind++) {
            double worst = 0, sq = 0, sq_x = 0;
            s_fill(kind, 10 * t + (uint64_t)kind, x, N);
            pl_wtype_from_f32(dt, x, N, q);
            pl_wtype_to_f32(dt, q, N, y);
            for (int i = 0; i < N; i++) {
                double err = fabs((double)x[i] - y[i]);
                double bound = s_bound(dt, x + i / blk * blk, i % blk);
                cr_assert(err <= bound, "%s data %d element %d: %g -> %g, error %g > bound %g",
                          pl_wtype_name(dt), kind, i, x[i], y[i], err, bound);
                worst = fmax(worst, err / (bound > 0 ? bound : 1));
                sq += err * err;
                sq_x += (double)x[i] * x[i];
            }
            if (kind == 0 && pl_wtype_info(dt)->quantized)
                cr_assert(sqrt(sq / sq_x) < 0.1, "%s: relative rms error %g", pl_wtype_name(dt),
                          sqrt(sq / sq_x));
        }
    }
}

/* A value that does not fit (here every element equal and negative) must still round-trip:
 * the min of a K-quant block is not allowed to clamp. */
Test(wtype, k_quant_min_side)
{
    float x[256], y[256];
    pl_block_q4_k_t b4;
    pl_block_q5_k_t b5;
    for (int i = 0; i < 256; i++)
        x[i] = i < 32 ? -2.0f : 0.001f * (float)i;
    pl_wtype_from_f32(PL_WT_Q4_K, x, 256, &b4);
    pl_wtype_to_f32(PL_WT_Q4_K, &b4, 256, y);
    for (int i = 0; i < 32; i++)
        cr_assert_float_eq(y[i], -2.0f, 0.02f);
    pl_wtype_from_f32(PL_WT_Q5_K, x, 256, &b5);
    pl_wtype_to_f32(PL_WT_Q5_K, &b5, 256, y);
    for (int i = 32; i < 256; i++)
        cr_assert_float_eq(y[i], x[i], 0.01f);
}
