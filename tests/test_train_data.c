/* Tests of a training job's data (pipeline/train_data.c): the ids file parsed exactly, every bad
 * word refused naming the line and the token, text through the model's tokenizer, and the step
 * windows at the positions the header states, tiling the stream and wrapping. */
#include "pipeline/train_data.h"
#include "status_util.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pl_status_t s_parse(const char *text, int vocab, pl_train_data_t **d)
{
    return pl_train_data_parse_ids(text, strlen(text), "d.tok", vocab, d);
}

Test(train_data, ids_parse_exactly)
{
    pl_train_data_t *d = NULL;
    cr_assert_eq(s_parse(" 3 1\n4\t1  5\r\n9\n\n2", 10, &d), PL_OK, "%s", pl_error_msg());
    static const int32_t want[] = {3, 1, 4, 1, 5, 9, 2};
    cr_assert_eq(pl_train_data_len(d), 7);
    int32_t got[7];
    /* one window of the whole stream is the stream */
    cr_assert_eq(pl_train_data_step(d, 6, 1, 0, got), PL_OK);
    cr_assert_eq(memcmp(got, want, sizeof(want)), 0);
    pl_train_data_destroy(&d);
    cr_assert_null(d);
    pl_train_data_destroy(&d);
    /* leading zeros are still decimal */
    cr_assert_eq(s_parse("007", 10, &d), PL_OK);
    cr_assert_eq(pl_train_data_step(d, 1, 1, 0, got), PL_ERR_RANGE, "one token is no window");
    pl_train_data_destroy(&d);
}

Test(train_data, bad_words_are_refused_by_line_and_token)
{
    pl_train_data_t *d = NULL;
    EXPECT_ST(s_parse("1 2\n3 x4\n", 10, &d), PL_ERR_INVALID,
              "d.tok:2: token 3: expected a decimal id, got 'x4'");
    EXPECT_ST(s_parse("1,2", 10, &d), PL_ERR_INVALID,
              "d.tok:1: token 0: expected a decimal id, got '1,2'");
    EXPECT_ST(s_parse("-1", 10, &d), PL_ERR_INVALID,
              "d.tok:1: token 0: expected a decimal id, got '-1'");
    EXPECT_ST(s_parse("1\n2\n\n10", 10, &d), PL_ERR_RANGE,
              "d.tok:4: token 2: id 10 is not below the vocabulary size 10");
    EXPECT_ST(s_parse("5 99999999999999999999999999999", 10, &d), PL_ERR_RANGE,
              "d.tok:1: token 1: id 99999999999999999999 is not below the vocabulary size 10");
    EXPECT_ST(s_parse(" \n\t", 10, &d), PL_ERR_INVALID, "d.tok: no token ids");
    EXPECT_ST(pl_train_data_parse_ids("1\0002", 3, "d.tok", 10, &d), PL_ERR_INVALID,
              "d.tok:1: token 0: expected a decimal id, got '1'");
    cr_assert_null(d);
    EXPECT_ST(pl_train_data_load_ids("/nonexistent/d.tok", 10, &d), PL_ERR_NOT_FOUND,
              "/nonexistent/d.tok: No such file or directory");
}

Test(train_data, windows_tile_the_stream_and_wrap)
{
    enum { N = 50, TL = 8, MBS = 3 };
    char text[N * 4];
    size_t at = 0;
    for (int i = 0; i < N; i++)
        at += (size_t)snprintf(text + at, sizeof(text) - at, "%d ", i);
    pl_train_data_t *d = NULL;
    cr_assert_eq(s_parse(text, 1000, &d), PL_OK, "%s", pl_error_msg());
    for (int step = 0; step < 7; step++) {
        int32_t tok[MBS * (TL + 1)];
        cr_assert_eq(pl_train_data_step(d, TL, MBS, step, tok), PL_OK);
        for (int m = 0; m < MBS; m++) {
            int g = step * MBS + m, start = (g * TL) % (N - TL);
            for (int i = 0; i <= TL; i++)
                cr_assert_eq(tok[m * (TL + 1) + i], start + i, "step %d mb %d pos %d", step, m,
                             i);
        }
    }
    /* a resumed run asks for step k alone and gets what the whole run read at step k */
    int32_t a[MBS * (TL + 1)], b[MBS * (TL + 1)];
    cr_assert_eq(pl_train_data_step(d, TL, MBS, 5, a), PL_OK);
    cr_assert_eq(pl_train_data_step(d, TL, MBS, 5, b), PL_OK);
    cr_assert_eq(memcmp(a, b, sizeof(a)), 0);
    /* a far step does not overflow: the position is taken modulo the span */
    cr_assert_eq(pl_train_data_step(d, TL, MBS, INT64_C(1) << 40, a), PL_OK);
    for (int i = 0; i <= TL; i++)
        cr_assert_eq(a[i], a[0] + i);
    EXPECT_ST(pl_train_data_step(d, N, 1, 0, a), PL_ERR_RANGE,
              "training data: 50 tokens, fewer than one window of seq_len 50 + 1 (or step 0, 1 "
              "microbatches)");
    pl_train_data_destroy(&d);
}

static const char s_tok_json[] =
    "{\"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"fuse_unk\": true,"
    " \"byte_fallback\": true,"
    " \"vocab\": {\"a\": 0, \"b\": 1, \"c\": 2, \"ab\": 3, \"bc\": 4, \"abc\": 5, \"<unk>\": 6,"
    "  \"<0x78>\": 7, \" \": 8},"
    " \"merges\": [\"b c\", \"a b\", [\"a\", \"bc\"]]},"
    " \"added_tokens\": [{\"id\": 9, \"content\": \"<end>\", \"special\": true}],"
    " \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"String\": \" \"},"
    "  \"behavior\": \"Isolated\"}}";

Test(train_data, text_goes_through_the_models_tokenizer)
{
    char dir[] = "/tmp/pl_tdata_XXXXXX", path[256], cmd[300];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
    FILE *f = fopen(path, "w");
    cr_assert(f && fputs(s_tok_json, f) >= 0 && fclose(f) == 0);
    snprintf(path, sizeof(path), "%s/corpus.txt", dir);
    f = fopen(path, "w");
    cr_assert(f && fputs("abc ab c<end>", f) >= 0 && fclose(f) == 0);
    pl_train_data_t *d = NULL;
    cr_assert_eq(pl_train_data_load_text(path, dir, 10, &d), PL_OK, "%s", pl_error_msg());
    static const int32_t want[] = {5, 8, 3, 8, 2, 9}; /* BPE by hand; <end> is special */
    cr_assert_eq(pl_train_data_len(d), 6);
    int32_t got[6];
    cr_assert_eq(pl_train_data_step(d, 5, 1, 0, got), PL_OK);
    cr_assert_eq(memcmp(got, want, sizeof(want)), 0);
    pl_train_data_destroy(&d);
    /* the model's vocabulary is smaller than the tokenizer's ids */
    char want_msg[400];
    snprintf(want_msg, sizeof(want_msg), "%s: token 1: the tokenizer's id 8 is not below the "
                                         "model's vocabulary size 6", path);
    EXPECT_ST(pl_train_data_load_text(path, dir, 6, &d), PL_ERR_RANGE, want_msg);
    cr_assert_null(d);
    /* invalid UTF-8 names the file */
    f = fopen(path, "w");
    cr_assert(f && fputs("ab\xff", f) >= 0 && fclose(f) == 0);
    cr_assert_eq(pl_train_data_load_text(path, dir, 10, &d), PL_ERR_INVALID);
    cr_assert(strstr(pl_error_msg(), path) && strstr(pl_error_msg(), "UTF-8"), "%s",
              pl_error_msg());
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}
