/* Tests of the GGUF reader: files built byte by byte here (independent of the writer) for every
 * metadata type, every malformation, and the tokenizer keys. (Whole models: test_gguf_model.c.) */
#include "common/status.h"
#include "common/util.h"
#include "model/gguf.h"
#include "model/gguf_vocab.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a byte builder for GGUF files ---- */

typedef struct {
    unsigned char b[1 << 16];
    size_t n;
} s_buf_t;

static void s_put(s_buf_t *f, const void *p, size_t n)
{
    cr_assert_leq(f->n + n, sizeof(f->b));
    memcpy(f->b + f->n, p, n);
    f->n += n;
}

static void s_le(s_buf_t *f, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        f->b[f->n++] = (unsigned char)(v >> (8 * i));
}

static void s_str(s_buf_t *f, const char *s)
{
    s_le(f, strlen(s), 8);
    s_put(f, s, strlen(s));
}

static void s_head(s_buf_t *f, uint32_t version, uint64_t n_t, uint64_t n_kv)
{
    f->n = 0;
    s_put(f, "GGUF", 4);
    s_le(f, version, 4);
    s_le(f, n_t, 8);
    s_le(f, n_kv, 8);
}

static void s_kv_u32(s_buf_t *f, const char *k, uint32_t v)
{
    s_str(f, k);
    s_le(f, 4, 4);
    s_le(f, v, 4);
}

static void s_kv_str(s_buf_t *f, const char *k, const char *v)
{
    s_str(f, k);
    s_le(f, 8, 4);
    s_str(f, v);
}

static void s_tinfo(s_buf_t *f, const char *name, int nd, const uint64_t *ne, uint32_t type,
                    uint64_t off)
{
    s_str(f, name);
    s_le(f, (uint64_t)nd, 4);
    for (int d = 0; d < nd; d++)
        s_le(f, ne[d], 8);
    s_le(f, type, 4);
    s_le(f, off, 8);
}

static void s_pad(s_buf_t *f, size_t align)
{
    while (f->n % align)
        f->b[f->n++] = 0;
}

/* A valid file: every metadata type, two tensors (f32 [4] and q8_0 [32, 2]). */
static void s_valid(s_buf_t *f, uint32_t version)
{
    uint64_t ne_a[1] = {4}, ne_b[2] = {32, 2};
    float vals[4] = {1.5f, -2.0f, 0.25f, 8.0f};
    s_head(f, version, 2, 8);
    s_kv_str(f, "general.architecture", "llama");
    s_kv_u32(f, "general.alignment", 64);
    s_str(f, "k.i8");
    s_le(f, 1, 4);
    s_le(f, 0xF6, 1); /* -10 */
    s_str(f, "k.u64");
    s_le(f, 10, 4);
    s_le(f, 1ull << 40, 8);
    s_str(f, "k.f32");
    s_le(f, 6, 4);
    uint32_t bits;
    float x = 0.5f;
    memcpy(&bits, &x, 4);
    s_le(f, bits, 4);
    s_str(f, "k.bool");
    s_le(f, 7, 4);
    s_le(f, 1, 1);
    s_str(f, "k.strs");
    s_le(f, 9, 4);
    s_le(f, 8, 4);
    s_le(f, 3, 8);
    s_str(f, "a");
    s_str(f, "");
    s_str(f, "ccc");
    s_str(f, "k.i32s");
    s_le(f, 9, 4);
    s_le(f, 5, 4);
    s_le(f, 2, 8);
    s_le(f, (uint32_t)-7, 4);
    s_le(f, 9, 4);
    s_tinfo(f, "a", 1, ne_a, 0, 0);
    s_tinfo(f, "b", 2, ne_b, 8, 64);
    s_pad(f, 64);
    s_put(f, vals, sizeof(vals));
    s_pad(f, 64);
    for (int r = 0; r < 2; r++) {
        uint16_t d = pl_f32_to_f16(0.5f);
        s_put(f, &d, 2);
        for (int j = 0; j < 32; j++)
            s_le(f, (uint64_t)(int8_t)(j - 16 + r), 1);
    }
}

static pl_status_t s_parse(const s_buf_t *f, pl_gguf_t **g)
{
    return pl_gguf_parse("t.gguf", f->b, f->n, g);
}

Test(gguf, reads_every_type_v2_and_v3)
{
    static s_buf_t f;
    for (uint32_t v = 2; v <= 3; v++) {
        pl_gguf_t *g = NULL;
        const pl_gguf_kv_t *kv;
        const char *s;
        size_t len;
        int64_t i;
        double d;
        bool b;
        float out[64];
        s_valid(&f, v);
        cr_assert_eq(s_parse(&f, &g), PL_OK, "%s", pl_error_msg());
        cr_assert_eq(g->version, v);
        cr_assert_eq(g->alignment, 64);
        cr_assert_eq(pl_gguf_get_int(g, "k.i8", -100, 100, &i), PL_OK);
        cr_assert_eq(i, -10);
        cr_assert_eq(pl_gguf_get_int(g, "k.u64", 0, INT64_MAX, &i), PL_OK);
        cr_assert_eq(i, 1ll << 40);
        cr_assert_eq(pl_gguf_get_int(g, "k.u64", 0, 5, &i), PL_ERR_RANGE);
        cr_assert(strstr(pl_error_msg(), "k.u64"), "%s", pl_error_msg());
        cr_assert_eq(pl_gguf_get_int(g, "k.f32", 0, 5, &i), PL_ERR_INVALID);
        cr_assert_eq(pl_gguf_get_num(g, "k.f32", &d), PL_OK);
        cr_assert_eq(d, 0.5);
        cr_assert_eq(pl_gguf_get_bool(g, "k.bool", &b), PL_OK);
        cr_assert(b);
        cr_assert_eq(pl_gguf_get_int(g, "absent", 0, 1, &i), PL_ERR_NOT_FOUND);
        cr_assert_eq(pl_gguf_get_str(g, "general.architecture", &s, &len), PL_OK);
        cr_assert_eq(len, 5);
        cr_assert_eq(memcmp(s, "llama", 5), 0);
        cr_assert_eq(pl_gguf_get_arr(g, "k.strs", PL_GGUF_STR, &kv), PL_OK);
        cr_assert_eq(kv->n, 3);
        pl_gguf_arr_str(g, kv, 2, &s, &len);
        cr_assert_eq(len, 3);
        cr_assert_eq(memcmp(s, "ccc", 3), 0);
        pl_gguf_arr_str(g, kv, 1, &s, &len);
        cr_assert_eq(len, 0);
        cr_assert_eq(pl_gguf_get_arr(g, "k.strs", PL_GGUF_F32, &kv), PL_ERR_INVALID);
        cr_assert_eq(pl_gguf_get_arr(g, "k.i32s", PL_GGUF_I32, &kv), PL_OK);
        cr_assert_eq(pl_gguf_arr_int(g, kv, 0), -7);
        cr_assert_eq(pl_gguf_arr_int(g, kv, 1), 9);
        const pl_gguf_tensor_t *ta = pl_gguf_tensor(g, "a"), *tb = pl_gguf_tensor(g, "b");
        cr_assert(ta && tb && !pl_gguf_tensor(g, "c"));
        cr_assert_eq(ta->wtype, PL_WT_F32);
        cr_assert_eq(tb->wtype, PL_WT_Q8_0);
        cr_assert_eq(tb->nbytes, 68);
        cr_assert_eq(tb->ne[1], 2);
        pl_wtype_to_f32(ta->wtype, pl_gguf_tensor_data(g, ta), 4, out);
        cr_assert(out[0] == 1.5f && out[3] == 8.0f);
        pl_wtype_to_f32(tb->wtype, pl_gguf_tensor_data(g, tb), 64, out);
        cr_assert(out[0] == -8.0f && out[32 + 31] == 8.0f, "%g %g", out[0], out[63]);
        pl_gguf_free(&g);
        cr_assert_null(g);
        pl_gguf_free(&g);
    }
}

Test(gguf, every_truncation_is_refused)
{
    static s_buf_t f;
    s_valid(&f, 3);
    for (size_t n = 0; n < f.n; n++) {
        pl_gguf_t *g = NULL;
        pl_status_t st = pl_gguf_parse("t.gguf", f.b, n, &g);
        cr_assert_neq(st, PL_OK, "a file cut at %zu of %zu bytes was accepted", n, f.n);
        cr_assert_null(g);
        cr_assert(strstr(pl_error_msg(), "t.gguf"), "%s", pl_error_msg());
    }
}

/* One malformed file per case: each refused, with a message naming what is wrong. */
Test(gguf, malformed_files_are_refused)
{
    static s_buf_t f;
    uint64_t ne4[1] = {4}, ne32[2] = {32, 2}, ne0[1] = {0}, ne31[1] = {31};
    struct {
        const char *needle;
        pl_status_t st;
    } want[] = {
        {"bad magic", PL_ERR_INVALID},          {"version 1", PL_ERR_UNSUPPORTED},
        {"cannot fit", PL_ERR_INVALID},         {"cannot fit", PL_ERR_INVALID},
        {"unknown value type 13", PL_ERR_INVALID}, {"past the end", PL_ERR_INVALID},
        {"array of 1000000 u32", PL_ERR_INVALID}, {"appears twice", PL_ERR_INVALID},
        {"Q4_1", PL_ERR_UNSUPPORTED},           {"unknown ggml type 99", PL_ERR_UNSUPPORTED},
        {"not a multiple of the alignment", PL_ERR_INVALID},
        {"tensor 'v' appears twice", PL_ERR_INVALID}, {"past the end of the data", PL_ERR_INVALID},
        {"overlap", PL_ERR_INVALID},            {"5 dimensions", PL_ERR_INVALID},
        {"dimension 0 is 0", PL_ERR_INVALID},   {"Q8_0: a row of 31 elements", PL_ERR_INVALID},
        {"general.alignment 48", PL_ERR_INVALID}, {"nested", PL_ERR_UNSUPPORTED},
        {"bool value 2", PL_ERR_INVALID},       {"holds a NUL", PL_ERR_INVALID},
    };
    for (size_t c = 0; c < sizeof(want) / sizeof(want[0]); c++) {
        pl_gguf_t *g = NULL;
        f.n = 0;
        switch (c) {
        case 0: s_head(&f, 3, 0, 0); f.b[0] = 'X'; break;
        case 1: s_head(&f, 1, 0, 0); break;
        case 2: s_head(&f, 3, 0, 1000); break;           /* metadata count past the end */
        case 3: s_head(&f, 3, 1ull << 19, 0); break;     /* tensor count past the end */
        case 4: s_head(&f, 3, 0, 1); s_str(&f, "k"); s_le(&f, 13, 4); s_le(&f, 0, 8); break;
        case 5: /* a string length past the file */
            s_head(&f, 3, 0, 1); s_str(&f, "k"); s_le(&f, 8, 4); s_le(&f, 1ull << 40, 8);
            s_put(&f, "abcdefgh", 8);
            break;
        case 6:
            s_head(&f, 3, 0, 1); s_str(&f, "k"); s_le(&f, 9, 4); s_le(&f, 4, 4);
            s_le(&f, 1000000, 8); s_le(&f, 0, 8);
            break;
        case 7: s_head(&f, 3, 0, 2); s_kv_u32(&f, "k", 1); s_kv_u32(&f, "k", 2); break;
        case 8: case 9:
            s_head(&f, 3, 1, 0); s_tinfo(&f, "w", 1, ne4, c == 8 ? 3 : 99, 0);
            s_pad(&f, 32); s_le(&f, 0, 8); s_le(&f, 0, 8);
            break;
        case 10: case 11: case 12: case 13:
            s_head(&f, 3, 2, 0);
            s_tinfo(&f, "v", 1, ne4, 0, 0);
            s_tinfo(&f, c == 11 ? "v" : "w", 1, ne4, 0, c == 10 ? 8 : c == 12 ? 32 : c == 13 ? 0 : 32);
            s_pad(&f, 32);
            for (int i = 0; i < (c == 12 ? 5 : 8); i++)
                s_le(&f, 0, 8);
            break;
        case 14: {
            uint64_t ne5[5] = {1, 1, 1, 1, 1};
            s_head(&f, 3, 1, 0); s_tinfo(&f, "w", 5, ne5, 0, 0);
            break;
        }
        case 15: s_head(&f, 3, 1, 0); s_tinfo(&f, "w", 1, ne0, 0, 0); s_pad(&f, 32); break;
        case 16:
            s_head(&f, 3, 1, 0); s_tinfo(&f, "w", 1, ne31, 8, 0); s_pad(&f, 32);
            s_put(&f, f.b, 64);
            break;
        case 17: s_head(&f, 3, 0, 1); s_kv_u32(&f, "general.alignment", 48); break;
        case 18:
            s_head(&f, 3, 0, 1); s_str(&f, "k"); s_le(&f, 9, 4); s_le(&f, 9, 4); s_le(&f, 0, 8);
            break;
        case 19: s_head(&f, 3, 0, 1); s_str(&f, "k"); s_le(&f, 7, 4); s_le(&f, 2, 1); break;
        case 20: s_head(&f, 3, 0, 1); s_le(&f, 3, 8); s_put(&f, "a\0b", 3); s_le(&f, 4, 4);
                 s_le(&f, 1, 4); break;
        }
        (void)ne32;
        pl_status_t st = s_parse(&f, &g);
        cr_assert_eq(st, want[c].st, "case %zu: status %d (%s)", c, st, pl_error_msg());
        cr_assert(strstr(pl_error_msg(), want[c].needle), "case %zu: '%s' lacks '%s'", c,
                  pl_error_msg(), want[c].needle);
        cr_assert(strstr(pl_error_msg(), "t.gguf"), "case %zu: %s", c, pl_error_msg());
        cr_assert_null(g);
    }
}

/* A tokenizer section: case 0 valid; the others each break one rule. */
static void s_vocab_file(s_buf_t *f, int c)
{
    uint32_t one;
    float sc = -1.5f;
    memcpy(&one, &sc, 4);
    s_head(f, 3, 0, 8);
    s_kv_str(f, "tokenizer.ggml.model", "gpt2");
    s_str(f, "tokenizer.ggml.tokens");
    s_le(f, 9, 4), s_le(f, 8, 4), s_le(f, 3, 8);
    s_str(f, "<s>"), s_str(f, "ab"), s_str(f, "c");
    s_str(f, "tokenizer.ggml.scores");
    s_le(f, 9, 4), s_le(f, 6, 4), s_le(f, c == 1 ? 2 : 3, 8);
    for (int i = 0; i < (c == 1 ? 2 : 3); i++)
        s_le(f, one, 4);
    s_str(f, "tokenizer.ggml.token_type");
    s_le(f, 9, 4), s_le(f, 5, 4), s_le(f, 3, 8);
    s_le(f, 3, 4), s_le(f, 1, 4), s_le(f, c == 2 ? 9 : 1, 4);
    s_str(f, "tokenizer.ggml.merges");
    s_le(f, 9, 4), s_le(f, 8, 4), s_le(f, 1, 8);
    s_str(f, c == 3 ? "ab" : "a b");
    s_kv_u32(f, "tokenizer.ggml.bos_token_id", 0);
    s_kv_u32(f, "tokenizer.ggml.eos_token_id", c == 4 ? 3 : 2);
    s_kv_str(f, "tokenizer.chat_template", "{{ x }}");
}

Test(gguf, vocabulary_for_the_tokenizer)
{
    static s_buf_t f;
    static const char *const needles[] = {"", "2 entries for 3 tokens", "token_type[2] is 9",
                                          "merges[0]", "eos_token_id"};
    for (int c = 0; c < 5; c++) {
        pl_gguf_t *g = NULL;
        pl_gguf_vocab_t v;
        s_vocab_file(&f, c);
        cr_assert_eq(s_parse(&f, &g), PL_OK, "%s", pl_error_msg());
        pl_status_t st = pl_gguf_vocab(g, &v);
        if (c > 0) {
            cr_assert_neq(st, PL_OK, "case %d accepted", c);
            cr_assert(strstr(pl_error_msg(), needles[c]), "case %d: %s", c, pl_error_msg());
            pl_gguf_free(&g);
            continue;
        }
        cr_assert_eq(st, PL_OK, "%s", pl_error_msg());
        const char *s, *b;
        size_t len, blen;
        cr_assert_eq(v.n_tokens, 3);
        cr_assert_eq(v.model_len, 4);
        pl_gguf_vocab_token(&v, 1, &s, &len);
        cr_assert(len == 2 && memcmp(s, "ab", 2) == 0);
        cr_assert_float_eq(pl_gguf_vocab_score(&v, 2), -1.5f, 0);
        cr_assert_eq(pl_gguf_vocab_type(&v, 0), 3);
        cr_assert_eq(pl_gguf_vocab_n_merges(&v), 1);
        pl_gguf_vocab_merge(&v, 0, &s, &len, &b, &blen);
        cr_assert(len == 1 && *s == 'a' && blen == 1 && *b == 'b');
        cr_assert_eq(v.bos, 0);
        cr_assert_eq(v.eos, 2);
        cr_assert_eq(v.unk, -1);
        cr_assert(v.chat_template_len == 7 && memcmp(v.chat_template, "{{ x }}", 7) == 0);
        pl_gguf_free(&g);
    }
}
