/* The tokenizer on small hand-written tokenizer.json files: merge order worked out by hand,
 * unknown characters, byte fallback, and every bad-input path with the message it must give. */
#include "model/tokenizer.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* merges: "b c" first, then "a b", then "a bc" */
static const char s_tiny[] =
    "{\"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"fuse_unk\": true,"
    " \"byte_fallback\": true,"
    " \"vocab\": {\"a\": 0, \"b\": 1, \"c\": 2, \"ab\": 3, \"bc\": 4, \"abc\": 5, \"<unk>\": 6,"
    "  \"<0x78>\": 7, \" \": 8},"
    " \"merges\": [\"b c\", \"a b\", [\"a\", \"bc\"]]},"
    " \"added_tokens\": [{\"id\": 9, \"content\": \"<end>\", \"special\": true}],"
    " \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"String\": \" \"},"
    "  \"behavior\": \"Isolated\"}}";

static pl_tokenizer_t *s_parse_ok(const char *json, const char *config)
{
    pl_tokenizer_t *tok = NULL;
    cr_assert_eq(pl_tokenizer_parse(json, strlen(json), config, config ? strlen(config) : 0,
                                    "tiny.json", &tok), PL_OK, "%s", pl_error_msg());
    return tok;
}

static void s_expect_ids(pl_tokenizer_t *tok, const char *text, const int32_t *want, size_t n_want)
{
    int32_t *ids;
    size_t n;
    cr_assert_eq(pl_tokenizer_encode(tok, text, strlen(text), PL_TOK_ENCODE_DEFAULT, &ids, &n),
                 PL_OK, "%s", pl_error_msg());
    cr_assert_eq(n, n_want, "'%s': %zu tokens, want %zu", text, n, n_want);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(ids[i], want[i], "'%s': token %zu is %d, want %d", text, i, ids[i], want[i]);
    free(ids);
}

Test(tokenizer_errors, merges_apply_in_rank_order)
{
    pl_tokenizer_t *tok = s_parse_ok(s_tiny, NULL);
    s_expect_ids(tok, "abc", (int32_t[]){5}, 1);         /* b+c, then a+bc */
    s_expect_ids(tok, "abab", (int32_t[]){3, 3}, 2);
    s_expect_ids(tok, "cab", (int32_t[]){2, 3}, 2);
    s_expect_ids(tok, "abcabc", (int32_t[]){5, 5}, 2);
    s_expect_ids(tok, "ab abc", (int32_t[]){3, 8, 5}, 3);
    s_expect_ids(tok, "", NULL, 0);
    pl_tokenizer_destroy(&tok);
    pl_tokenizer_destroy(&tok);
}

Test(tokenizer_errors, unknown_characters_byte_fallback_and_added_tokens)
{
    pl_tokenizer_t *tok = s_parse_ok(s_tiny, NULL);
    s_expect_ids(tok, "x", (int32_t[]){7}, 1);            /* <0x78> */
    s_expect_ids(tok, "zzqa", (int32_t[]){6, 0}, 2);      /* fused <unk> */
    s_expect_ids(tok, "ab<end>c", (int32_t[]){3, 9, 2}, 3);
    s_expect_ids(tok, "<en", (int32_t[]){6}, 1);
    pl_tokenizer_destroy(&tok);
}

Test(tokenizer_errors, config_sets_bos_and_eos)
{
    pl_tokenizer_t *tok = s_parse_ok(s_tiny, "{\"bos_token\": \"a\", \"eos_token\": "
                                             "{\"content\": \"<end>\"}, \"add_bos_token\": true,"
                                             " \"add_eos_token\": true, \"model_max_length\": "
                                             "1000000000000000019884624838656}");
    const int *eos;
    s_expect_ids(tok, "bc", (int32_t[]){0, 4, 9}, 3);
    cr_assert_eq(pl_tokenizer_eos(tok, &eos), 1);
    cr_assert_eq(eos[0], 9);
    pl_tokenizer_destroy(&tok);
}

/* s_tiny with `from` replaced by `to` must fail with `want` and a message containing `part`. */
static void s_expect_bad(const char *from, const char *to, pl_status_t want, const char *part)
{
    const char *at = strstr(s_tiny, from);
    char buf[4096];
    pl_tokenizer_t *tok = NULL;
    pl_status_t st;

    cr_assert_not_null(at, "test bug: '%s' not in the fixture", from);
    snprintf(buf, sizeof(buf), "%.*s%s%s", (int)(at - s_tiny), s_tiny, to, at + strlen(from));
    st = pl_tokenizer_parse(buf, strlen(buf), NULL, 0, "bad/tokenizer.json", &tok);
    cr_assert_eq(st, want, "'%s' -> '%s': status %d (%s)", from, to, st, pl_error_msg());
    cr_assert_null(tok);
    cr_assert_not_null(strstr(pl_error_msg(), part), "message '%s' lacks '%s'", pl_error_msg(),
                       part);
    cr_assert_not_null(strstr(pl_error_msg(), "bad/tokenizer.json"), "message '%s' lacks the file",
                       pl_error_msg());
}

Test(tokenizer_errors, bad_files_are_named_errors)
{
    s_expect_bad("\"BPE\"", "\"Unigram\"", PL_ERR_UNSUPPORTED, "model type 'Unigram'");
    s_expect_bad("{\"type\": \"Split\"", "{\"type\": \"Whitespace\"", PL_ERR_UNSUPPORTED,
                 "pre_tokenizer type 'Whitespace'");
    s_expect_bad("\"Isolated\"", "\"Sideways\"", PL_ERR_UNSUPPORTED, "behavior 'Sideways'");
    s_expect_bad("{\"String\": \" \"}", "{\"Regex\": \"(\"}", PL_ERR_UNSUPPORTED,
                 "regex does not compile");
    s_expect_bad("\"b c\"", "\"b q\"", PL_ERR_INVALID, "merges[0]: 'q'");
    s_expect_bad("\"b c\"", "\"bc\"", PL_ERR_INVALID, "merges[0]");
    s_expect_bad("\"c\": 2", "\"c\": 1", PL_ERR_INVALID, "used twice");
    s_expect_bad("\"c\": 2", "\"c\": -2", PL_ERR_INVALID, "model.vocab['c']");
    s_expect_bad("\"c\": 2", "\"c\": \"two\"", PL_ERR_INVALID, "model.vocab['c']");
    s_expect_bad("\"<unk>\", \"fuse", "\"<nope>\", \"fuse", PL_ERR_INVALID, "unk_token '<nope>'");
    s_expect_bad("\"content\": \"<end>\"", "\"content\": \"\"", PL_ERR_INVALID,
                 "added_tokens[0]: content");
    s_expect_bad("\"id\": 9", "\"id\": \"9\"", PL_ERR_INVALID, "added_tokens[0].id");
    s_expect_bad("\"merges\": [", "\"merges\": {\"x\": [", PL_ERR_INVALID, "malformed JSON");
    s_expect_bad("\"merges\"", "\"merged\"", PL_ERR_INVALID, "model.merges: missing");
    s_expect_bad("\"vocab\"", "\"vocabulary\"", PL_ERR_INVALID, "model.vocab");
    s_expect_bad("\"pre_tokenizer\"", "\"decoder\"", PL_ERR_UNSUPPORTED, "decoder type 'Split'");
    s_expect_bad("\"pre_tokenizer\"", "\"normalizer\"", PL_ERR_UNSUPPORTED,
                 "normalizer type 'Split'");
    s_expect_bad("\"pre_tokenizer\"", "\"post_processor\"", PL_ERR_UNSUPPORTED,
                 "post_processor type 'Split'");
}

Test(tokenizer_errors, malformed_json_names_line_and_column)
{
    pl_tokenizer_t *tok = NULL;
    const char *bad = "{\"model\":\n {\"type\": \"BPE\",,}}";
    cr_assert_eq(pl_tokenizer_parse(bad, strlen(bad), NULL, 0, "m/tokenizer.json", &tok),
                 PL_ERR_INVALID);
    cr_assert_not_null(strstr(pl_error_msg(), "m/tokenizer.json: tokenizer.json: malformed JSON "
                                              "at line 2"), "%s", pl_error_msg());
    cr_assert_eq(pl_tokenizer_parse(s_tiny, strlen(s_tiny), "{\"bos_token\": 3}", 16, "t", &tok),
                 PL_ERR_INVALID);
    cr_assert_not_null(strstr(pl_error_msg(), "bos_token"), "%s", pl_error_msg());
    cr_assert_eq(pl_tokenizer_parse(s_tiny, strlen(s_tiny), "{\"eos_token\": \"zz\"}", 19, "t",
                                    &tok), PL_ERR_INVALID);
    cr_assert_not_null(strstr(pl_error_msg(), "eos_token 'zz' is not a token"), "%s",
                       pl_error_msg());
    cr_assert_null(tok);
}

Test(tokenizer_errors, missing_directory_names_the_file)
{
    pl_tokenizer_t *tok = NULL;
    cr_assert_eq(pl_tokenizer_load("/nonexistent/model", &tok), PL_ERR_NOT_FOUND);
    cr_assert_not_null(strstr(pl_error_msg(), "/nonexistent/model/tokenizer.json"), "%s",
                       pl_error_msg());
    cr_assert_null(tok);
}

Test(tokenizer_errors, invalid_utf8_text_names_the_byte)
{
    pl_tokenizer_t *tok = s_parse_ok(s_tiny, NULL);
    int32_t *ids = NULL;
    size_t n = 0;
    static const char *bad[] = {"ab\xff", "ab\xc3", "ab\xed\xa0\x80", "ab\xc0\xaf", "ab\xf4\x90\x80\x80"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cr_assert_eq(pl_tokenizer_encode(tok, bad[i], strlen(bad[i]), 0, &ids, &n), PL_ERR_INVALID);
        cr_assert_not_null(strstr(pl_error_msg(), "not valid UTF-8 at byte 2"), "%s",
                           pl_error_msg());
    }
    cr_assert_null(ids);
    pl_tokenizer_destroy(&tok);
}

/* Split behaviours on "the-final--countdown", as the Hugging Face documentation lists them;
 * ignore_merges makes every piece that is in the vocabulary one token, so pieces are visible. */
Test(tokenizer_errors, split_behaviours_cut_as_documented)
{
    static const char *pieces[] = {"t", "h", "e", "-", "f", "i", "n", "a", "l", "c", "o", "u",
                                   "d", "w", "the", "final", "countdown", "the-", "final-",
                                   "-final", "-countdown", "--"};
    static const struct {
        const char *behavior, *invert;
        const char *want[7];
    } cases[] = {
        {"Removed", "false", {"the", "final", "countdown"}},
        {"Isolated", "false", {"the", "-", "final", "-", "-", "countdown"}},
        {"MergedWithPrevious", "false", {"the-", "final-", "-", "countdown"}},
        {"MergedWithNext", "false", {"the", "-final", "-", "-countdown"}},
        {"Contiguous", "false", {"the", "-", "final", "--", "countdown"}},
        /* invert: the words are the delimiters; each "-" is its own match */
        {"Removed", "true", {"-", "-", "-"}},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        char json[4096], *p = json;
        p += sprintf(p, "{\"model\": {\"type\": \"BPE\", \"ignore_merges\": true, \"merges\": [],"
                        " \"vocab\": {");
        for (size_t i = 0; i < sizeof(pieces) / sizeof(pieces[0]); i++)
            p += sprintf(p, "%s\"%s\": %zu", i ? ", " : "", pieces[i], i);
        sprintf(p, "}}, \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"String\": \"-\"},"
                   " \"behavior\": \"%s\", \"invert\": %s}}", cases[c].behavior, cases[c].invert);
        pl_tokenizer_t *tok = s_parse_ok(json, NULL);
        int32_t want[7];
        size_t n = 0;
        for (; n < 7 && cases[c].want[n]; n++)
            want[n] = pl_tokenizer_token_id(tok, cases[c].want[n]);
        s_expect_ids(tok, "the-final--countdown", want, n);
        pl_tokenizer_destroy(&tok);
    }
}

/* lstrip / rstrip added tokens swallow the whitespace beside them. */
Test(tokenizer_errors, added_tokens_strip_whitespace_beside_them)
{
    const char *at = strstr(s_tiny, "{\"id\": 9");
    char json[4096];
    snprintf(json, sizeof(json), "%.*s{\"id\": 10, \"content\": \"<m>\", \"lstrip\": true, "
             "\"rstrip\": true}, %s", (int)(at - s_tiny), s_tiny, at);
    pl_tokenizer_t *tok = s_parse_ok(json, NULL);
    s_expect_ids(tok, "a  <m> \t b", (int32_t[]){0, 10, 1}, 3);
    s_expect_ids(tok, "a <end> b", (int32_t[]){0, 8, 9, 8, 1}, 5);
    cr_assert_eq(pl_tokenizer_vocab_size(tok), 11);
    pl_tokenizer_destroy(&tok);
}
