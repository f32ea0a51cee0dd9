/* Text jobs in one process: prompts lines (ids, text, messages) tokenized as the Hugging Face
 * references do, their error messages, and the last stage's text: stop strings and streaming. */
#include "js_ref.h"
#include "model/tokenizer.h"
#include "pipeline/gen.h"
#include "pipeline/gen_text.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <string.h>

#define LLAMA3 JS_LENML "/tokenizer-llama3/models"

static const char *const s_texts[] = {
    "Hello, wörld — 世界! Привет, мир. مرحبا",
    "  leading and trailing blanks\t\n",
    "code:\n\tif (x) {\n\t\treturn 42;\n\t}",
    "👩‍👩‍👧 emoji 🦙 and digits 1234567",
};

static pl_tokenizer_t *s_load(void)
{
    pl_tokenizer_t *tok;
    js_ref_require(LLAMA3);
    cr_assert_eq(pl_tokenizer_load(LLAMA3, &tok), PL_OK, "%s", pl_error_msg());
    return tok;
}

/* A prompts file from lines, each a JSON value. */
static char *s_file(json_t *lines)
{
    size_t i, cap = 1 << 16, n = 0;
    json_t *v;
    char *out = calloc(1, cap);
    json_array_foreach(lines, i, v)
    {
        char *l = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        n += (size_t)snprintf(out + n, cap - n, "%s\n", l);
        free(l);
    }
    cr_assert_lt(n, cap);
    return out;
}

static void s_parse_ok(const char *text, const pl_gen_prompts_ctx_t *ctx, pl_job_spec_t *spec)
{
    pl_job_spec_init(spec);
    cr_assert_eq(pl_gen_prompts_parse(text, strlen(text), "p.jsonl", ctx, spec), PL_OK, "%s",
                 pl_error_msg());
}

static void s_refused(const char *text, const pl_gen_prompts_ctx_t *ctx, const char *needle)
{
    pl_job_spec_t spec;
    pl_job_spec_init(&spec);
    cr_assert_neq(pl_gen_prompts_parse(text, strlen(text), "p.jsonl", ctx, &spec), PL_OK,
                  "accepted: %s", text);
    cr_assert(strstr(pl_error_msg(), needle), "'%s' not in '%s' (input %s)", needle, pl_error_msg(),
              text);
    cr_assert_eq(spec.n_prompts, 0, "half-done on error");
    pl_job_spec_clear(&spec);
}

static void s_ids_eq(const pl_job_spec_t *spec, int idx, const json_t *ref_ids)
{
    cr_assert_eq((size_t)spec->prompt_len[idx], json_array_size(ref_ids),
                 "prompt %d: %d ids, "
                 "the reference %zu",
                 idx, spec->prompt_len[idx], json_array_size(ref_ids));
    for (int t = 0; t < spec->prompt_len[idx]; t++)
        cr_assert_eq(spec->prompts[idx][t], json_integer_value(json_array_get(ref_ids, (size_t)t)),
                     "prompt %d, token %d", idx, t);
}

Test(gen_text, text_prompts_tokenize_as_the_reference, .timeout = 60)
{
    pl_tokenizer_t *tok = s_load();
    pl_gen_prompts_ctx_t ctx = {.tok = tok};
    json_t *lines = json_array(), *cases = json_array();
    for (size_t i = 0; i < PL_ARRAY_SIZE(s_texts); i++) {
        json_array_append_new(lines, json_pack("{s:s}", "text", s_texts[i]));
        json_array_append_new(cases, json_string(s_texts[i]));
    }
    json_array_append_new(lines, json_pack("[i,i,i]", 1, 2, 3)); /* ids beside text */
    char *file = s_file(lines);
    pl_job_spec_t spec;
    s_parse_ok(file, &ctx, &spec);
    cr_assert(spec.text);
    cr_assert_eq(spec.n_prompts, (int)PL_ARRAY_SIZE(s_texts) + 1);
    json_t *ref = js_ref_run("tokenize.mjs", LLAMA3, cases);
    for (size_t i = 0; i < PL_ARRAY_SIZE(s_texts); i++)
        s_ids_eq(&spec, (int)i, json_object_get(json_array_get(ref, i), "ids"));
    cr_assert_eq(spec.prompt_len[4], 3);
    cr_assert_eq(spec.prompts[4][2], 3);
    /* ids only: no text */
    pl_job_spec_t ids;
    s_parse_ok("[5, 6]\n", &ctx, &ids);
    cr_assert_not(ids.text);
    pl_job_spec_clear(&ids);
    pl_job_spec_clear(&spec);
    json_decref(ref), json_decref(lines), json_decref(cases);
    free(file);
    pl_tokenizer_destroy(&tok);
}

Test(gen_text, messages_render_through_the_template_as_jinja_does, .timeout = 60)
{
    pl_tokenizer_t *tok = s_load();
    pl_gen_prompts_ctx_t ctx = {.tok = tok};
    json_t *msgs =
        json_pack("[{s:s,s:s},{s:s,s:s}]", "role", "system", "content", "You answer in one word.",
                  "role", "user", "content", "Capital of France? ça va — 世界");
    json_t *lines = json_pack("[{s:O}]", "messages", msgs);
    char *file = s_file(lines);
    pl_job_spec_t spec;
    s_parse_ok(file, &ctx, &spec);
    cr_assert(spec.text);
    /* the reference: @huggingface/jinja renders the real template, then the reference
     * tokenizer encodes the text without adding special tokens (apply_chat_template) */
    json_t *in =
        json_pack("{s:s,s:s,s:s,s:[{s:O,s:b}]}", "template", pl_tokenizer_chat_template(tok),
                  "bos_token", pl_tokenizer_bos_text(tok), "eos_token", pl_tokenizer_eos_text(tok),
                  "cases", "messages", msgs, "add_generation_prompt", 1);
    json_t *rendered = js_ref_run("chat.mjs", "-", in);
    const char *text = json_string_value(json_object_get(json_array_get(rendered, 0), "text"));
    cr_assert_not_null(text);
    cr_assert(strstr(text, "<|start_header_id|>assistant<|end_header_id|>"), "%s", text);
    json_t *ref = js_ref_run("tokenize.mjs", LLAMA3 "' 'raw", json_pack("[s]", text));
    s_ids_eq(&spec, 0, json_object_get(json_array_get(ref, 0), "ids"));
    /* chat_format chooses the family: chatml renders differently, and as ChatML does */
    pl_job_spec_t chatml;
    ctx.chat_format = "chatml";
    s_parse_ok(file, &ctx, &chatml);
    cr_assert(chatml.prompt_len[0] != spec.prompt_len[0] ||
              memcmp(chatml.prompts[0], spec.prompts[0], (size_t)spec.prompt_len[0] * 4));
    pl_job_spec_clear(&chatml);
    pl_job_spec_clear(&spec);
    json_decref(ref), json_decref(rendered), json_decref(in), json_decref(lines);
    json_decref(msgs);
    free(file);
    pl_tokenizer_destroy(&tok);
}

Test(gen_text, bad_prompt_lines_name_the_line, .timeout = 60)
{
    pl_tokenizer_t *tok = s_load();
    pl_gen_prompts_ctx_t ctx = {.tok = tok, .max_pos = 64, .max_new_tokens = 8};
    s_refused("[1, 2] [3]\n", &ctx, "p.jsonl:1");
    s_refused("[1]\n[1, 2] [3]\n", &ctx, "p.jsonl:2");
    s_refused("[1]\n{\"text\": \"a\"} x\n", &ctx, "p.jsonl:2");
    s_refused("[1]\n\n{\"text\": \"caf\xff\"}\n", &ctx, "p.jsonl:3"); /* invalid UTF-8 */
    s_refused("{\"text\": \"\\udc00\"}\n", &ctx, "p.jsonl:1");        /* a lone surrogate */
    s_refused("{\"text\": \"a\\u0000b\"}\n", &ctx, "p.jsonl:1");
    s_refused("{\"text\": 5}\n", &ctx, "field 'text'");
    s_refused("{\"text\": \"a\", \"extra\": 1}\n", &ctx, "exactly one key");
    s_refused("{\"prompt\": \"a\"}\n", &ctx, "exactly one key");
    s_refused("\"just a string\"\n", &ctx, "p.jsonl:1");
    s_refused("{\"messages\": []}\n", &ctx, "field 'messages'");
    s_refused("{\"messages\": [{\"role\": \"user\"}]}\n", &ctx, "message 0");
    s_refused("{\"messages\": [{\"role\": \"user\", \"content\": 3}]}\n", &ctx,
              "message 0: field 'content'");
    s_refused("{\"messages\": [{\"role\": 1, \"content\": \"x\"}]}\n", &ctx,
              "message 0: field 'role'");
    s_refused("[1]\n[1, -2]\n", &ctx, "p.jsonl:2: token 1");
    s_refused("[]\n", &ctx, "p.jsonl:1");
    /* too long for the context: 60 tokens of text + 8 new > 64 positions */
    char long_text[1024] = "{\"text\": \"";
    for (int i = 0; i < 60; i++)
        strcat(long_text, " hello");
    strcat(long_text, "\"}\n");
    char two[1100];
    snprintf(two, sizeof(two), "{\"text\": \"short\"}\n%s", long_text);
    s_refused(two, &ctx, "p.jsonl:2: the prompt is");
    s_refused(two, &ctx, "context of 64 positions");
    /* no tokenizer: a text or messages line is an error naming it */
    pl_gen_prompts_ctx_t none = {0};
    s_refused("[1]\n{\"text\": \"hi\"}\n", &none,
              "p.jsonl:2: a text prompt needs the model's "
              "tokenizer");
    s_refused("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}\n", NULL,
              "p.jsonl:1: a messages prompt");
    pl_tokenizer_destroy(&tok);
}

/* Push ids through a decoder, collecting what streaming would have sent (the stable prefix as
 * it grows); returns the index of the token that stopped the sequence, or n. */
static size_t s_run(pl_gen_text_t *t, const int32_t *ids, size_t n, char *streamed, size_t cap,
                    int *held_p)
{
    size_t sent = 0, i;
    *held_p = 0;
    for (i = 0; i < n; i++) {
        bool stopped;
        size_t before, after;
        pl_gen_text_get(t, 0, &before);
        cr_assert_eq(pl_gen_text_push(t, 0, ids[i], i + 1 == n, &stopped), PL_OK, "%s",
                     pl_error_msg());
        pl_gen_text_get(t, 0, &after);
        if (after == before && !stopped)
            (*held_p)++;
        size_t st = pl_gen_text_stable(t, 0);
        const char *text = pl_gen_text_get(t, 0, &after);
        cr_assert_geq(st, sent, "the stable text shrank");
        cr_assert_lt(st, cap);
        cr_assert(st == after || ((unsigned char)text[st] & 0xC0) != 0x80,
                  "a streamed piece ends inside a character");
        memcpy(streamed + sent, text + sent, st - sent);
        sent = st;
        streamed[sent] = '\0';
        if (stopped)
            return i;
    }
    return n;
}

Test(gen_text, streaming_holds_a_split_character_and_equals_the_text, .timeout = 60)
{
    pl_tokenizer_t *tok = s_load();
    /* a rare CJK character and an emoji that Llama 3 spells as several byte tokens */
    const char *text = "x 龘 🦙 y";
    int32_t *ids;
    size_t n;
    cr_assert_eq(pl_tokenizer_encode(tok, text, strlen(text), 0, &ids, &n), PL_OK);
    pl_job_gen_t gen = {.max_new_tokens = 64};
    pl_gen_text_t *t;
    cr_assert_eq(pl_gen_text_create(LLAMA3, 1, &gen, &t), PL_OK, "%s", pl_error_msg());
    char streamed[256];
    int held;
    cr_assert_eq(s_run(t, ids, n, streamed, sizeof(streamed), &held), n);
    cr_assert_gt(held, 0, "no token ended inside a character: the test shows nothing");
    size_t len;
    cr_assert_str_eq(pl_gen_text_get(t, 0, &len), text);
    cr_assert_str_eq(streamed, text);
    cr_assert_neq(pl_gen_text_push(t, 0, ids[0], true, &(bool){0}), PL_OK, "pushed after end");
    pl_gen_text_destroy(&t);
    free(ids);
    pl_tokenizer_destroy(&tok);
}

Test(gen_text, a_stop_string_ends_the_text_where_the_unstopped_run_shows_it, .timeout = 60)
{
    pl_tokenizer_t *tok = s_load();
    const char *full = "The answer is 42.\nUser: and then? END of the story END again 龘 🦙 Z";
    const char *stops[] = {"END", "\nUser:", "ory E", "42", "ag", "龘 🦙 Z"};
    int32_t *ids;
    size_t n;
    cr_assert_eq(pl_tokenizer_encode(tok, full, strlen(full), 0, &ids, &n), PL_OK);
    for (size_t s = 0; s < PL_ARRAY_SIZE(stops); s++) {
        pl_job_gen_t gen = {.max_new_tokens = 64, .n_stop = 2};
        snprintf(gen.stop[0], sizeof(gen.stop[0]), "%s", stops[s]);
        snprintf(gen.stop[1], sizeof(gen.stop[1]), "never there");
        /* expected from the unstopped text: cut before the first occurrence, and the token
         * that ends the sequence is the first whose decoded prefix contains the string */
        const char *at = strstr(full, stops[s]);
        cr_assert_not_null(at);
        size_t want_len = (size_t)(at - full), want_tok = n;
        for (size_t k = 1; k <= n && want_tok == n; k++) {
            char *pre;
            size_t pl;
            cr_assert_eq(pl_tokenizer_decode(tok, ids, k, PL_TOK_SKIP_SPECIAL, &pre, &pl), PL_OK);
            if (strstr(pre, stops[s]))
                want_tok = k - 1;
            free(pre);
        }
        pl_gen_text_t *t;
        cr_assert_eq(pl_gen_text_create(LLAMA3, 1, &gen, &t), PL_OK, "%s", pl_error_msg());
        char streamed[256];
        int held;
        size_t got_tok = s_run(t, ids, n, streamed, sizeof(streamed), &held);
        size_t len;
        const char *got = pl_gen_text_get(t, 0, &len);
        cr_assert_eq(got_tok, want_tok, "stop '%s': stopped at token %zu, expected %zu", stops[s],
                     got_tok, want_tok);
        cr_assert_eq(len, want_len, "stop '%s': '%s'", stops[s], got);
        cr_assert(strncmp(got, full, want_len) == 0);
        cr_assert_str_eq(streamed, got, "stop '%s': streamed text differs", stops[s]);
        pl_gen_text_destroy(&t);
    }
    free(ids);
    pl_tokenizer_destroy(&tok);
}

/* One decoder whose sequence is begun again for each request (a deployment's slot): each run
 * takes its own stop strings and ends as a fresh decoder's would, whatever ran before. */
Test(gen_text, a_sequence_begun_again_takes_its_own_stop_strings, .timeout = 60)
{
    pl_tokenizer_t *tok = s_load();
    const char *full = "The answer is 42.\nUser: and then? END of the story 龘 🦙 Z";
    const char *stops[] = {"END", "\nUser:", "", "42", "🦙"};
    int32_t *ids;
    size_t n;
    cr_assert_eq(pl_tokenizer_encode(tok, full, strlen(full), 0, &ids, &n), PL_OK);
    pl_job_gen_t none = {.max_new_tokens = 64};
    pl_gen_text_t *t;
    cr_assert_eq(pl_gen_text_create(LLAMA3, 1, &none, &t), PL_OK, "%s", pl_error_msg());
    for (size_t s = 0; s < PL_ARRAY_SIZE(stops); s++) {
        pl_job_gen_t gen = {.max_new_tokens = 64, .n_stop = stops[s][0] ? 1 : 0};
        snprintf(gen.stop[0], sizeof(gen.stop[0]), "%s", stops[s]);
        cr_assert_eq(pl_gen_text_begin(t, 0, &gen), PL_OK, "%s", pl_error_msg());
        pl_gen_text_t *fresh;
        cr_assert_eq(pl_gen_text_create(LLAMA3, 1, &gen, &fresh), PL_OK);
        char a[256], b[256];
        int held;
        size_t ta = s_run(t, ids, n, a, sizeof(a), &held);
        size_t tb = s_run(fresh, ids, n, b, sizeof(b), &held);
        size_t la, lb;
        cr_assert_eq(ta, tb, "stop '%s'", stops[s]);
        cr_assert_str_eq(pl_gen_text_get(t, 0, &la), pl_gen_text_get(fresh, 0, &lb), "stop '%s'",
                         stops[s]);
        cr_assert_str_eq(a, b);
        if (stops[s][0])
            cr_assert_null(strstr(a, stops[s]), "stop '%s' left in the text", stops[s]);
        else
            cr_assert_str_eq(a, full, "no stop strings: the whole text");
        pl_gen_text_destroy(&fresh);
    }
    pl_gen_text_destroy(&t);
    free(ids);
    pl_tokenizer_destroy(&tok);
}

Test(gen_text, a_model_without_tokenizer_is_named)
{
    pl_job_gen_t gen = {.max_new_tokens = 4};
    pl_gen_text_t *t = NULL;
    cr_assert_neq(pl_gen_text_create("/nonexistent-model", 1, &gen, &t), PL_OK);
    cr_assert(strstr(pl_error_msg(), "/nonexistent-model"), "%s", pl_error_msg());
    cr_assert_null(t);
}
