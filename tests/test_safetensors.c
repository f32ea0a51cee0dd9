/* Tests of the safetensors reader and model directories: hand-written files (independent of
 * pl-mkmodel) for values and every header error, then whole pl-mkmodel models in three dtypes. */
#include "common/status.h"
#include "model/model.h"
#include "model/safetensors.h"

#define SCRATCH_TEMPLATE "/tmp/pl_st_XXXXXX"
#include "scratch_util.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- a byte writer for safetensors files, independent of the reader ---- */

typedef struct {
    char hdr[16384];
    size_t hlen;
    unsigned char data[65536];
    size_t dlen;
    int raw; /* header text is complete: do not close the object */
} s_st_t;

static void s_begin(s_st_t *b)
{
    b->hlen = (size_t)snprintf(b->hdr, sizeof(b->hdr), "{\"__metadata__\":{\"format\":\"pt\"}");
    b->dlen = 0;
    b->raw = 0;
}

/* Add a header entry exactly as given (may lie); no data is added. */
static void s_entry(s_st_t *b, const char *name, const char *dtype, const char *shape,
                    unsigned long long begin, unsigned long long end)
{
    b->hlen += (size_t)snprintf(b->hdr + b->hlen, sizeof(b->hdr) - b->hlen,
                                ",\"%s\":{\"dtype\":\"%s\",\"shape\":%s,"
                                "\"data_offsets\":[%llu,%llu]}",
                                name, dtype, shape, begin, end);
    cr_assert_lt(b->hlen, sizeof(b->hdr));
}

static void s_bytes(s_st_t *b, const void *p, size_t n)
{
    cr_assert_leq(b->dlen + n, sizeof(b->data));
    memcpy(b->data + b->dlen, p, n);
    b->dlen += n;
}

/* Add a tensor with its data appended, dims given as a JSON list. */
static void s_tensor(s_st_t *b, const char *name, const char *dtype, const char *shape,
                     const void *data, size_t nbytes)
{
    s_entry(b, name, dtype, shape, b->dlen, b->dlen + nbytes);
    s_bytes(b, data, nbytes);
}

static void s_write_raw(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s", path);
    cr_assert_eq(fwrite(p, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
}

/* Write the file; hlen_override != 0 puts that value in the length prefix instead. */
static void s_write(s_st_t *b, const char *path, unsigned long long hlen_override,
                    size_t pad)
{
    size_t close = b->raw ? 0 : 1, hl = b->hlen + close + pad; /* brace and padding spaces */
    unsigned char *buf = malloc(8 + hl + b->dlen);
    unsigned long long n = hlen_override ? hlen_override : hl;
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)(n >> (8 * i));
    memcpy(buf + 8, b->hdr, b->hlen);
    if (close)
        buf[8 + b->hlen] = '}';
    memset(buf + 8 + b->hlen + close, ' ', pad);
    memcpy(buf + 8 + hl, b->data, b->dlen);
    s_write_raw(path, buf, 8 + hl + b->dlen);
    free(buf);
}

/* ---- independent references for the half formats ---- */

static float s_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* bf16 nearest to x, ties to even, found by comparing the two candidates in double. */
static uint16_t s_ref_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
    double dl = fabs((double)s_bits_f32((uint32_t)lo << 16) - x);
    double dh = fabs((double)s_bits_f32((uint32_t)hi << 16) - x);
    if (dl < dh || (dl == dh && !(lo & 1)))
        return lo;
    return hi;
}

/* Open path expecting failure `want` with `part` in the message. */
static void s_open_fails(const char *path, pl_status_t want, const char *part)
{
    pl_st_file_t *f = NULL;
    pl_status_t st = pl_st_open(path, &f);
    cr_assert_eq(st, want, "status %d want %d: %s", st, want, pl_error_msg());
    cr_assert_null(f);
    cr_assert_not_null(strstr(pl_error_msg(), part), "message '%s' lacks '%s'", pl_error_msg(),
                       part);
}

TestSuite(safetensors, .init = s_mkdir, .fini = s_rmdir);

Test(safetensors, reads_f32_values)
{
    s_st_t b;
    float a[6] = {1.5f, -2.0f, 3.25f, 0.0f, -0.125f, 1e-3f}, c[3] = {7, 8, 9};
    const unsigned char *data;
    pl_st_file_t *f = NULL;

    s_begin(&b);
    s_tensor(&b, "a", "F32", "[2,3]", a, sizeof(a));
    s_tensor(&b, "c", "F32", "[3]", c, sizeof(c));
    s_entry(&b, "empty", "F32", "[0,4]", b.dlen, b.dlen);
    s_write(&b, s_path("x.safetensors"), 0, 3);
    cr_assert_eq(pl_st_open(s_path("x.safetensors"), &f), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(f->hdr.n_entries, 3);
    cr_assert_eq(pl_st_data(f, &data), PL_OK, "%s", pl_error_msg());
    for (size_t i = 0; i < f->hdr.n_entries; i++) {
        const pl_st_entry_t *e = &f->hdr.entries[i];
        float v[6];
        memcpy(v, data + e->begin, e->end - e->begin);
        if (strcmp(e->name, "a") == 0) {
            cr_assert_eq(e->ndim, 2);
            cr_assert_eq(e->shape[0], 2);
            cr_assert_eq(e->shape[1], 3);
            cr_assert_eq(e->numel, 6);
            cr_assert_eq(memcmp(v, a, sizeof(a)), 0);
        } else if (strcmp(e->name, "c") == 0) {
            cr_assert_eq(e->dtype, PL_DT_F32);
            cr_assert_eq(memcmp(v, c, sizeof(c)), 0);
        } else {
            cr_assert_str_eq(e->name, "empty");
            cr_assert_eq(e->numel, 0);
        }
    }
    pl_st_close(&f);
    cr_assert_null(f);
    pl_st_close(&f); /* safe twice */
}

Test(safetensors, truncated_files)
{
    s_st_t b;
    float a[4] = {1, 2, 3, 4};
    s_write_raw(s_path("tiny"), "\x10\0\0", 3);
    s_open_fails(s_path("tiny"), PL_ERR_INVALID, "truncated");
    s_open_fails(s_path("tiny"), PL_ERR_INVALID, s_path("tiny"));

    s_begin(&b);
    s_tensor(&b, "a", "F32", "[4]", a, sizeof(a));
    s_write(&b, s_path("cut"), 5000, 0); /* header says 5000 bytes */
    s_open_fails(s_path("cut"), PL_ERR_INVALID, "truncated: header says 5000 bytes, file has");
    s_open_fails(s_path("cut"), PL_ERR_INVALID, s_path("cut"));

    /* header intact but the data cut short */
    b.dlen -= 4;
    s_write(&b, s_path("short"), 0, 0);
    s_open_fails(s_path("short"), PL_ERR_RANGE, "truncated or corrupt: tensor 'a'");
    s_open_fails(s_path("short"), PL_ERR_RANGE, s_path("short"));

    s_write(&b, s_path("huge"), 200ull * 1000 * 1000, 0);
    s_open_fails(s_path("huge"), PL_ERR_RANGE, "limit");
    s_write(&b, s_path("wrap"), ~0ull, 0);
    s_open_fails(s_path("wrap"), PL_ERR_RANGE, "limit");
    s_open_fails(s_path("absent"), PL_ERR_NOT_FOUND, "absent");
}

Test(safetensors, bad_json)
{
    s_st_t b;
    const char *bad[] = {"{\"a\": ", "[1,2,3]", "\"str\"", "{\"a\": 1}", "{\"a\": {}}",
                         "{\"__metadata__\": 5}", "{\"a\": {\"dtype\": 5, \"shape\": [], "
                         "\"data_offsets\": [0, 4]}}",
                         "{\"a\": {\"dtype\": \"F32\", \"shape\": 1, \"data_offsets\": [0, 4]}}",
                         "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0]}}",
                         "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": "
                         "[\"0\", 4]}}",
                         "{\"a\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}",
                         "{\"a\": {\"dtype\": \"F32\", \"shape\": [1.0], \"data_offsets\": "
                         "[0, 4]}}",
                         "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
                         " \"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        b.hlen = (size_t)snprintf(b.hdr, sizeof(b.hdr), "%s", bad[i]);
        b.raw = 1;
        memset(b.data, 0, 8);
        b.dlen = 8;
        s_write(&b, s_path("bad"), 0, 0);
        pl_st_file_t *f = NULL;
        cr_assert_eq(pl_st_open(s_path("bad"), &f), PL_ERR_INVALID, "case %zu: %s", i,
                     pl_error_msg());
        cr_assert_not_null(strstr(pl_error_msg(), s_path("bad")), "%s", pl_error_msg());
    }
}

Test(safetensors, offsets_and_shapes)
{
    s_st_t b;
    float z[8] = {0};
    /* each file: 32 zero bytes and the entry (after "one" for the overlap), refused naming it */
    static const struct {
        const char *name, *dtype, *shape;
        unsigned long long begin, end;
        pl_status_t want;
        const char *part;
        bool after_one; /* "one" (F32 [4] at 0..16) first */
    } bad[] = {
        {"past", "F32", "[4]", 20, 36, PL_ERR_RANGE, "'past'", false},
        {"backwards", "F32", "[0]", 16, 8, PL_ERR_INVALID, "'backwards'", false},
        {"two", "F32", "[4]", 12, 28, PL_ERR_INVALID, "overlap", true},
        {"mismatch", "F32", "[3]", 0, 16, PL_ERR_INVALID, "'mismatch'", false},
        /* f16 needs 8 bytes */
        {"halfsize", "F16", "[4]", 0, 16, PL_ERR_INVALID, "'halfsize'", false},
        {"five_d", "F32", "[1,1,1,1,1]", 0, 4, PL_ERR_UNSUPPORTED, "'five_d'", false},
        /* numel * 4 wraps around 2^64 to a small number: must not be accepted */
        {"wrap", "F32", "[4611686018427387904, 4]", 0, 0, PL_ERR_RANGE, "'wrap'", false},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        s_begin(&b);
        s_bytes(&b, z, sizeof(z));
        if (bad[i].after_one)
            s_entry(&b, "one", "F32", "[4]", 0, 16);
        s_entry(&b, bad[i].name, bad[i].dtype, bad[i].shape, bad[i].begin, bad[i].end);
        s_write(&b, s_path("f"), 0, 0);
        s_open_fails(s_path("f"), bad[i].want, bad[i].part);
    }

    s_begin(&b);
    s_bytes(&b, z, sizeof(z));
    s_entry(&b, "ok", "F32", "[2, 2]", 0, 16);
    s_entry(&b, "ok2", "BF16", "[2, 2, 2]", 16, 32);
    s_write(&b, s_path("f"), 0, 0);
    pl_st_file_t *f = NULL;
    cr_assert_eq(pl_st_open(s_path("f"), &f), PL_OK, "%s", pl_error_msg());
    pl_st_close(&f);
}

Test(safetensors, unknown_dtype)
{
    s_st_t b;
    int64_t v[2] = {1, 2};
    s_begin(&b);
    s_tensor(&b, "model.ids", "I64", "[2]", v, sizeof(v));
    s_write(&b, s_path("f"), 0, 0);
    s_open_fails(s_path("f"), PL_ERR_UNSUPPORTED, "tensor 'model.ids': dtype 'I64'");
}

Test(safetensors, half_formats_match_f32)
{
    static const struct {
        uint16_t bits;
        float value;
    } f16[] = {{0x3c00, 1.0f},          {0xc000, -2.0f},
               {0x3800, 0.5f},          {0x3555, 0.333251953125f},
               {0x7bff, 65504.0f},      {0x0001, 5.9604644775390625e-08f},
               {0x8400, -6.103515625e-05f}, {0x0000, 0.0f},
               {0x4248, 3.140625f},     {0x3e00, 1.5f}};
    float orig[64];
    uint16_t h[64], bf[64];
    float out[64];
    size_t n16 = sizeof(f16) / sizeof(f16[0]);
    s_st_t b;
    pl_st_file_t *f = NULL;
    const unsigned char *data;

    for (size_t i = 0; i < n16; i++)
        h[i] = f16[i].bits;
    for (int i = 0; i < 64; i++) {
        orig[i] = sinf((float)i * 0.731f) * powf(2.0f, (float)(i % 21 - 10));
        bf[i] = s_ref_bf16(orig[i]);
    }
    s_begin(&b);
    s_tensor(&b, "h", "F16", "[10]", h, n16 * 2);
    s_tensor(&b, "bf", "BF16", "[8, 8]", bf, sizeof(bf));
    s_write(&b, s_path("f"), 0, 1); /* odd header length: data not 4-aligned */
    cr_assert_eq(pl_st_open(s_path("f"), &f), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(pl_st_data(f, &data), PL_OK);
    for (size_t i = 0; i < f->hdr.n_entries; i++) {
        const pl_st_entry_t *e = &f->hdr.entries[i];
        pl_dtype_to_f32(e->dtype, data + e->begin, (size_t)e->numel, out);
        if (e->dtype == PL_DT_F16) {
            for (size_t j = 0; j < n16; j++)
                cr_assert_eq(out[j], f16[j].value, "f16 %04x: %g != %g", f16[j].bits, out[j],
                             f16[j].value);
        } else {
            for (int j = 0; j < 64; j++) {
                float want = s_bits_f32((uint32_t)s_ref_bf16(orig[j]) << 16);
                cr_assert_eq(out[j], want, "bf16 %d: %g != %g", j, out[j], want);
                cr_assert_leq(fabsf(out[j] - orig[j]), fabsf(orig[j]) / 256.0f);
            }
        }
    }
    pl_st_close(&f);
}

Test(safetensors, dtype_helpers)
{
    pl_dtype_t dt;
    cr_assert_eq(pl_dtype_size(PL_DT_F32), 4);
    cr_assert_eq(pl_dtype_size(PL_DT_F16), 2);
    cr_assert_eq(pl_dtype_size(PL_DT_BF16), 2);
    cr_assert_str_eq(pl_dtype_name(PL_DT_BF16), "BF16");
    cr_assert_eq(pl_dtype_parse("F16", &dt), PL_OK);
    cr_assert_eq(dt, PL_DT_F16);
    cr_assert_eq(pl_dtype_parse("f16", &dt), PL_ERR_UNSUPPORTED);
    cr_assert_eq(pl_dtype_parse("F8_E4M3", &dt), PL_ERR_UNSUPPORTED);
}

Test(safetensors, parse_buffer_in_memory)
{
    s_st_t b;
    float a[2] = {1, 2};
    pl_st_header_t hdr;
    unsigned char buf[256];
    s_begin(&b);
    s_tensor(&b, "a", "F32", "[2]", a, sizeof(a));
    s_write(&b, s_path("m"), 0, 0);
    FILE *f = fopen(s_path("m"), "rb");
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    cr_assert_eq(pl_st_parse_buffer("mem", buf, n, &hdr), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(hdr.n_entries, 1);
    cr_assert_eq(hdr.data_off, n - 8);
    pl_st_header_free(&hdr);
    cr_assert_eq(pl_st_parse_buffer("mem", buf, n - 1, &hdr), PL_ERR_RANGE);
    cr_assert_eq(pl_st_parse_buffer("mem", buf, 7, &hdr), PL_ERR_INVALID);
    cr_assert_not_null(strstr(pl_error_msg(), "mem: truncated"), "%s", pl_error_msg());
}
