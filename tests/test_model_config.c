/* Tests of config.json parsing: defaults, GQA, head_dim, llama3 rope scaling, eos lists, ties,
 * and rejection of non-Llama models, missing or mistyped fields and absurd sizes. */
#include "common/status.h"
#include "model/model.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char s_base[] =
    "{\"model_type\": \"llama\", \"hidden_size\": 256, \"intermediate_size\": 688,"
    " \"num_hidden_layers\": 4, \"num_attention_heads\": 8, \"vocab_size\": 512,"
    " \"rms_norm_eps\": 1e-05}";

static pl_status_t s_parse(const char *text, pl_model_config_t *cfg)
{
    return pl_model_config_parse(text, strlen(text), cfg);
}

/* Parse the base config with `key` set to the JSON `value` (or removed when value is NULL). */
static pl_status_t s_parse_with(const char *key, const char *value, pl_model_config_t *cfg)
{
    json_t *root = json_loads(s_base, 0, NULL);
    cr_assert_not_null(root);
    if (value) {
        json_t *v = json_loads(value, JSON_DECODE_ANY, NULL);
        cr_assert_not_null(v, "bad test value %s", value);
        json_object_set_new(root, key, v);
    } else {
        json_object_del(root, key);
    }
    char *text = json_dumps(root, 0);
    pl_status_t st = s_parse(text, cfg);
    free(text);
    json_decref(root);
    return st;
}

static void s_expect_error(const char *key, const char *value, pl_status_t want,
                           const char *msg_part)
{
    pl_model_config_t cfg;
    pl_status_t st = s_parse_with(key, value, &cfg);
    cr_assert_eq(st, want, "%s=%s: status %d, want %d (%s)", key, value ? value : "(removed)", st,
                 want, pl_error_msg());
    cr_assert_not_null(strstr(pl_error_msg(), msg_part), "%s=%s: message '%s' lacks '%s'", key,
                       value ? value : "(removed)", pl_error_msg(), msg_part);
}

Test(model_config, defaults)
{
    pl_model_config_t c;
    cr_assert_eq(s_parse(s_base, &c), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(c.hidden, 256);
    cr_assert_eq(c.intermediate, 688);
    cr_assert_eq(c.n_layers, 4);
    cr_assert_eq(c.n_heads, 8);
    cr_assert_eq(c.n_kv_heads, 8);
    cr_assert_eq(c.head_dim, 32);
    cr_assert_eq(c.vocab, 512);
    cr_assert_eq(c.max_pos, 4096);
    cr_assert_float_eq(c.rms_eps, 1e-5f, 1e-12);
    cr_assert_float_eq(c.rope_theta, 10000.0f, 1e-3);
    cr_assert_eq(c.rope_scaling, PL_ROPE_NONE);
    cr_assert_eq(c.tie_embeddings, false);
    cr_assert_eq(c.n_eos, 0);
    cr_assert_eq(c.bos_id, -1);
    cr_assert_eq(c.dtype, PL_DT_BF16); /* no torch_dtype */
}

Test(model_config, torch_dtype)
{
    static const struct {
        const char *json;
        pl_dtype_t want;
    } ok[] = {{"\"float32\"", PL_DT_F32}, {"\"float\"", PL_DT_F32},
              {"\"float16\"", PL_DT_F16}, {"\"half\"", PL_DT_F16},
              {"\"bfloat16\"", PL_DT_BF16}};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        pl_model_config_t c;
        cr_assert_eq(s_parse_with("torch_dtype", ok[i].json, &c), PL_OK, "%s: %s", ok[i].json,
                     pl_error_msg());
        cr_expect_eq(c.dtype, ok[i].want, "%s", ok[i].json);
    }
    s_expect_error("torch_dtype", "\"int8\"", PL_ERR_UNSUPPORTED, "torch_dtype");
    s_expect_error("torch_dtype", "32", PL_ERR_INVALID, "torch_dtype");
}

Test(model_config, gqa_head_dim_and_tie)
{
    pl_model_config_t c;
    const char *text =
        "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 5120,"
        " \"intermediate_size\": 14336, \"num_hidden_layers\": 40, \"num_attention_heads\": 32,"
        " \"num_key_value_heads\": 8, \"head_dim\": 128, \"vocab_size\": 131072,"
        " \"rms_norm_eps\": 1e-5, \"max_position_embeddings\": 131072, \"rope_theta\": 1000000.0,"
        " \"tie_word_embeddings\": true, \"bos_token_id\": 1, \"eos_token_id\": 2,"
        " \"rope_scaling\": null, \"torch_dtype\": \"bfloat16\", \"hidden_act\": \"silu\"}";
    cr_assert_eq(s_parse(text, &c), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(c.n_kv_heads, 8);
    cr_assert_eq(c.head_dim, 128); /* not hidden / heads = 160 */
    cr_assert_eq(c.max_pos, 131072);
    cr_assert_float_eq(c.rope_theta, 1e6f, 1.0);
    cr_assert(c.tie_embeddings);
    cr_assert_eq(c.bos_id, 1);
    cr_assert_eq(c.n_eos, 1);
    cr_assert_eq(c.eos_ids[0], 2);
}

Test(model_config, llama3_rope_scaling)
{
    pl_model_config_t c;
    cr_assert_eq(s_parse_with("rope_scaling",
                              "{\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": "
                              "4.0, \"original_max_position_embeddings\": 8192, \"rope_type\": "
                              "\"llama3\"}",
                              &c),
                 PL_OK, "%s", pl_error_msg());
    cr_assert_eq(c.rope_scaling, PL_ROPE_LLAMA3);
    cr_assert_float_eq(c.rope_factor, 8.0f, 0);
    cr_assert_float_eq(c.rope_low_freq_factor, 1.0f, 0);
    cr_assert_float_eq(c.rope_high_freq_factor, 4.0f, 0);
    cr_assert_eq(c.rope_orig_max_pos, 8192);

    /* older configs spell the key "type" */
    cr_assert_eq(s_parse_with("rope_scaling",
                              "{\"factor\": 32, \"low_freq_factor\": 1, \"high_freq_factor\": 4,"
                              " \"original_max_position_embeddings\": 8192, \"type\": \"llama3\"}",
                              &c),
                 PL_OK, "%s", pl_error_msg());
    cr_assert_eq(c.rope_scaling, PL_ROPE_LLAMA3);
    cr_assert_float_eq(c.rope_factor, 32.0f, 0);

    cr_assert_eq(s_parse_with("rope_scaling", "{\"rope_type\": \"default\"}", &c), PL_OK);
    cr_assert_eq(c.rope_scaling, PL_ROPE_NONE);
}

Test(model_config, rope_scaling_errors)
{
    s_expect_error("rope_scaling", "{\"rope_type\": \"yarn\", \"factor\": 4}", PL_ERR_UNSUPPORTED,
                   "'yarn'");
    s_expect_error("rope_scaling", "{\"type\": \"linear\", \"factor\": 2}", PL_ERR_UNSUPPORTED,
                   "'linear'");
    s_expect_error("rope_scaling", "{\"rope_type\": \"llama3\", \"factor\": 8}", PL_ERR_INVALID,
                   "low_freq_factor");
    s_expect_error("rope_scaling",
                   "{\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 4, "
                   "\"high_freq_factor\": 1, \"original_max_position_embeddings\": 8192}",
                   PL_ERR_INVALID, "high_freq_factor");
    s_expect_error("rope_scaling", "[1, 2]", PL_ERR_INVALID, "rope_scaling");
    s_expect_error("rope_scaling", "{\"factor\": 8}", PL_ERR_INVALID, "rope_type");
}

Test(model_config, eos_forms)
{
    pl_model_config_t c;
    cr_assert_eq(s_parse_with("eos_token_id", "[7, 9, 11]", &c), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(c.n_eos, 3);
    cr_assert_eq(c.eos_ids[0], 7);
    cr_assert_eq(c.eos_ids[1], 9);
    cr_assert_eq(c.eos_ids[2], 11);
    cr_assert_eq(s_parse_with("eos_token_id", "null", &c), PL_OK);
    cr_assert_eq(c.n_eos, 0);
    s_expect_error("eos_token_id", "[1,2,3,4,5,6,7,8,9]", PL_ERR_RANGE, "eos_token_id");
    s_expect_error("eos_token_id", "512", PL_ERR_RANGE, "eos_token_id");
    s_expect_error("eos_token_id", "[1, \"2\"]", PL_ERR_INVALID, "eos_token_id");
    s_expect_error("eos_token_id", "\"2\"", PL_ERR_INVALID, "eos_token_id");
    s_expect_error("bos_token_id", "-1", PL_ERR_RANGE, "bos_token_id");
}

Test(model_config, rejects_other_families)
{
    pl_model_config_t c;
    s_expect_error("model_type", "\"gpt2\"", PL_ERR_UNSUPPORTED,
                   "model family 'gpt2' (model_type) is not supported (Llama, Mistral, Qwen2, "
                   "Qwen3 are)");
    s_expect_error("model_type", "\"bert\"", PL_ERR_UNSUPPORTED, "'bert'");
    s_expect_error("model_type", "\"gemma2\"", PL_ERR_UNSUPPORTED, "'gemma2'");
    s_expect_error("model_type", NULL, PL_ERR_UNSUPPORTED, "no model family");
    cr_assert_eq(s_parse("{\"architectures\": [\"GemmaForCausalLM\"], \"hidden_size\": 64}", &c),
                 PL_ERR_UNSUPPORTED);
    cr_assert_not_null(strstr(pl_error_msg(), "architecture 'GemmaForCausalLM'"), "%s",
                       pl_error_msg());
    /* architectures alone is enough */
    cr_assert_eq(s_parse("{\"architectures\": [\"Foo\", \"LlamaForCausalLM\"], "
                         "\"hidden_size\": 64, \"intermediate_size\": 128, "
                         "\"num_hidden_layers\": 1, \"num_attention_heads\": 2, "
                         "\"vocab_size\": 10, \"rms_norm_eps\": 1e-6}",
                         &c),
                 PL_OK, "%s", pl_error_msg());
    s_expect_error("hidden_act", "\"gelu\"", PL_ERR_UNSUPPORTED, "gelu");
    s_expect_error("attention_bias", "true", PL_ERR_UNSUPPORTED, "attention_bias");
}

/* Each family from model_type and from architectures alone, with its structure. */
Test(model_config, families)
{
    static const struct {
        const char *type, *arch;
        pl_model_family_t family;
        bool bias, norm;
    } fams[] = {{"llama", "LlamaForCausalLM", PL_FAMILY_LLAMA, false, false},
                {"mistral", "MistralForCausalLM", PL_FAMILY_MISTRAL, false, false},
                {"qwen2", "Qwen2ForCausalLM", PL_FAMILY_QWEN2, true, false},
                {"qwen3", "Qwen3ForCausalLM", PL_FAMILY_QWEN3, false, true}};
    pl_model_config_t c;
    char q[64];
    for (size_t i = 0; i < sizeof(fams) / sizeof(fams[0]); i++) {
        snprintf(q, sizeof(q), "\"%s\"", fams[i].type);
        cr_assert_eq(s_parse_with("model_type", q, &c), PL_OK, "%s: %s", q, pl_error_msg());
        cr_expect_eq(c.family, fams[i].family, "%s", q);
        cr_expect_eq(c.qkv_bias, fams[i].bias, "%s", q);
        cr_expect_eq(c.qk_norm, fams[i].norm, "%s", q);
        cr_expect_str_eq(pl_model_family_name(c.family), fams[i].type);
        json_t *root = json_loads(s_base, 0, NULL);
        json_object_del(root, "model_type");
        json_object_set_new(root, "architectures", json_pack("[s]", fams[i].arch));
        char *text = json_dumps(root, 0);
        cr_assert_eq(s_parse(text, &c), PL_OK, "%s: %s", fams[i].arch, pl_error_msg());
        cr_expect_eq(c.family, fams[i].family, "%s", fams[i].arch);
        free(text);
        json_decref(root);
    }
    cr_expect_str_eq(pl_model_family_name(PL_FAMILY_COUNT), "?");
}

/* Mistral's sliding window is kept (stages refuse contexts past it); Qwen's unused window is
 * ignored; features a family does not have are refused with the family's name. */
Test(model_config, family_features)
{
    pl_model_config_t c;
    static const char mistral[] =
        "{\"model_type\": \"mistral\", \"hidden_size\": 64, \"intermediate_size\": 128, "
        "\"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"vocab_size\": 10, "
        "\"rms_norm_eps\": 1e-6, \"sliding_window\": %s}";
    char text[512];
    snprintf(text, sizeof(text), mistral, "4096");
    cr_assert_eq(s_parse(text, &c), PL_OK, "%s", pl_error_msg());
    cr_expect_eq(c.sliding_window, 4096);
    snprintf(text, sizeof(text), mistral, "null");
    cr_assert_eq(s_parse(text, &c), PL_OK, "%s", pl_error_msg());
    cr_expect_eq(c.sliding_window, 0);
    snprintf(text, sizeof(text), mistral, "\"big\"");
    cr_expect_eq(s_parse(text, &c), PL_ERR_INVALID);
    cr_expect_not_null(strstr(pl_error_msg(), "sliding_window"), "%s", pl_error_msg());
    cr_assert_eq(s_parse_with("sliding_window", "4096", &c), PL_OK); /* llama: not a field */
    cr_expect_eq(c.sliding_window, 0);

    json_t *root = json_loads(s_base, 0, NULL);
    json_object_set_new(root, "model_type", json_string("qwen2"));
    json_object_set_new(root, "use_sliding_window", json_false());
    json_object_set_new(root, "sliding_window", json_integer(32768));
    json_object_set_new(root, "attention_bias", json_true()); /* ignored: qwen2 has q/k/v bias */
    char *t = json_dumps(root, 0);
    cr_assert_eq(s_parse(t, &c), PL_OK, "%s", pl_error_msg());
    cr_expect(c.qkv_bias && c.sliding_window == 0);
    free(t);
    json_object_set_new(root, "use_sliding_window", json_true());
    t = json_dumps(root, 0);
    cr_expect_eq(s_parse(t, &c), PL_ERR_UNSUPPORTED);
    cr_expect_not_null(strstr(pl_error_msg(), "use_sliding_window true is not supported for qwen2"),
                       "%s", pl_error_msg());
    free(t);
    json_object_set_new(root, "model_type", json_string("qwen3"));
    json_object_set_new(root, "use_sliding_window", json_false());
    t = json_dumps(root, 0);
    cr_expect_eq(s_parse(t, &c), PL_ERR_UNSUPPORTED);
    cr_expect_not_null(strstr(pl_error_msg(), "attention_bias true is not supported for qwen3"),
                       "%s", pl_error_msg());
    free(t);
    json_decref(root);
}

Test(model_config, missing_and_mistyped_fields)
{
    static const char *const required[] = {"hidden_size", "intermediate_size",
                                           "num_hidden_layers", "num_attention_heads",
                                           "vocab_size", "rms_norm_eps"};
    for (size_t i = 0; i < sizeof(required) / sizeof(required[0]); i++) {
        s_expect_error(required[i], NULL, PL_ERR_INVALID, required[i]);
        s_expect_error(required[i], "\"256\"", PL_ERR_INVALID, required[i]);
    }
    s_expect_error("hidden_size", "256.5", PL_ERR_INVALID, "hidden_size");
    s_expect_error("tie_word_embeddings", "1", PL_ERR_INVALID, "tie_word_embeddings");
    s_expect_error("num_key_value_heads", "\"4\"", PL_ERR_INVALID, "num_key_value_heads");
    s_expect_error("rope_theta", "\"1e4\"", PL_ERR_INVALID, "rope_theta");
}

Test(model_config, head_and_kv_constraints)
{
    pl_model_config_t c;
    s_expect_error("num_key_value_heads", "3", PL_ERR_INVALID, "num_key_value_heads");
    s_expect_error("num_key_value_heads", "16", PL_ERR_RANGE, "num_key_value_heads");
    s_expect_error("num_key_value_heads", "0", PL_ERR_RANGE, "num_key_value_heads");
    s_expect_error("head_dim", "33", PL_ERR_INVALID, "head_dim");
    s_expect_error("num_attention_heads", "7", PL_ERR_INVALID, "hidden_size"); /* 256 % 7 */
    cr_assert_eq(s_parse_with("num_key_value_heads", "2", &c), PL_OK);
    cr_assert_eq(c.n_kv_heads, 2);
    cr_assert_eq(s_parse_with("head_dim", "64", &c), PL_OK);
    cr_assert_eq(c.head_dim, 64);
}

Test(model_config, absurd_sizes)
{
    s_expect_error("hidden_size", "1048576", PL_ERR_RANGE, "hidden_size");
    s_expect_error("hidden_size", "0", PL_ERR_RANGE, "hidden_size");
    s_expect_error("hidden_size", "-256", PL_ERR_RANGE, "hidden_size");
    s_expect_error("num_hidden_layers", "100000", PL_ERR_RANGE, "num_hidden_layers");
    s_expect_error("vocab_size", "1073741824", PL_ERR_RANGE, "vocab_size");
    s_expect_error("intermediate_size", "9223372036854775807", PL_ERR_RANGE,
                   "intermediate_size");
    s_expect_error("max_position_embeddings", "1000000000", PL_ERR_RANGE,
                   "max_position_embeddings");
    s_expect_error("rms_norm_eps", "0", PL_ERR_RANGE, "rms_norm_eps");
    s_expect_error("rope_theta", "-5", PL_ERR_RANGE, "rope_theta");
}

Test(model_config, malformed_text)
{
    pl_model_config_t c;
    cr_assert_eq(s_parse("{\"model_type\": \"llama\",", &c), PL_ERR_INVALID);
    cr_assert_not_null(strstr(pl_error_msg(), "line"), "%s", pl_error_msg());
    cr_assert_eq(s_parse("[1, 2]", &c), PL_ERR_INVALID);
    cr_assert_eq(s_parse("", &c), PL_ERR_INVALID);
    char dup[] = "{\"hidden_size\": 1, \"hidden_size\": 2}";
    cr_assert_eq(s_parse(dup, &c), PL_ERR_INVALID);
    cr_assert_eq(pl_model_config_parse(s_base, PL_MODEL_CONFIG_MAX_BYTES + 1, &c), PL_ERR_RANGE);
}

Test(model_config, load_from_dir)
{
    char dir[] = "/tmp/pl_cfg_XXXXXX", path[64];
    pl_model_config_t c;
    cr_assert_not_null(mkdtemp(dir));
    cr_assert_eq(pl_model_config_load(dir, &c), PL_ERR_NOT_FOUND);
    cr_assert_not_null(strstr(pl_error_msg(), "config.json"), "%s", pl_error_msg());
    snprintf(path, sizeof(path), "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(s_base, f);
    fclose(f);
    cr_assert_eq(pl_model_config_load(dir, &c), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(c.vocab, 512);
    f = fopen(path, "w");
    fputs("{\"model_type\": \"gpt2\"}", f);
    fclose(f);
    cr_assert_eq(pl_model_config_load(dir, &c), PL_ERR_UNSUPPORTED);
    cr_assert_not_null(strstr(pl_error_msg(), path), "message names the file: %s",
                       pl_error_msg());
    unlink(path);
    rmdir(dir);
}
