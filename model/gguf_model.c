/* A GGUF file as a model: the "<arch>.*" metadata turned into the config.json fields the one
 * config validator checks, and the mapping between GGUF and Hugging Face tensor names. */
#include "model/gguf_model.h"

#include "common/util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_ARCH 32

static const struct {
    const char *gguf, *hf;
} s_layer_names[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
}, s_global_names[] = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};

/* "PREFIXN.rest" with N a plain decimal layer number: N and rest, else false. */
static bool s_layer_of(const char *name, const char *prefix, int *layer, const char **rest)
{
    size_t n = strlen(prefix);
    long v = 0;
    const char *p = name + n;

    if (strncmp(name, prefix, n) != 0 || *p < '0' || *p > '9' || (p[0] == '0' && p[1] != '.'))
        return false;
    for (; *p >= '0' && *p <= '9' && v < 1000000; p++)
        v = v * 10 + (*p - '0');
    if (*p != '.')
        return false;
    *layer = (int)v;
    *rest = p + 1;
    return true;
}

void pl_gguf_hf_name(const char *gguf_name, char *out, size_t len)
{
    const char *rest;
    int layer;

    for (size_t i = 0; i < PL_ARRAY_SIZE(s_global_names); i++)
        if (strcmp(gguf_name, s_global_names[i].gguf) == 0) {
            snprintf(out, len, "%s", s_global_names[i].hf);
            return;
        }
    if (s_layer_of(gguf_name, "blk.", &layer, &rest))
        for (size_t i = 0; i < PL_ARRAY_SIZE(s_layer_names); i++)
            if (strcmp(rest, s_layer_names[i].gguf) == 0) {
                snprintf(out, len, "model.layers.%d.%s", layer, s_layer_names[i].hf);
                return;
            }
    snprintf(out, len, "%s", gguf_name);
}

bool pl_gguf_name_of(const char *hf_name, char *out, size_t len)
{
    const char *rest;
    int layer;

    for (size_t i = 0; i < PL_ARRAY_SIZE(s_global_names); i++)
        if (strcmp(hf_name, s_global_names[i].hf) == 0) {
            snprintf(out, len, "%s", s_global_names[i].gguf);
            return true;
        }
    if (s_layer_of(hf_name, "model.layers.", &layer, &rest))
        for (size_t i = 0; i < PL_ARRAY_SIZE(s_layer_names); i++)
            if (strcmp(rest, s_layer_names[i].hf) == 0) {
                snprintf(out, len, "blk.%d.%s", layer, s_layer_names[i].gguf);
                return true;
            }
    return false;
}

int64_t pl_gguf_llama_qk_row(int64_t r, int64_t head_dim)
{
    int64_t h = r / head_dim, i = r % head_dim;
    return h * head_dim + (i % 2) * (head_dim / 2) + i / 2;
}

/* Copy the integer at "<arch>.<suffix>" into json field `field`; absent is an error only when
 * required. */
static pl_status_t s_int(const pl_gguf_t *g, json_t *c, const char *arch, const char *suffix,
                         const char *field, bool required, int64_t *v_p)
{
    char key[96];
    int64_t v;
    pl_status_t st;

    snprintf(key, sizeof(key), "%s.%s", arch, suffix);
    st = pl_gguf_get_int(g, key, 0, INT32_MAX, &v);
    if (st == PL_ERR_NOT_FOUND && !required)
        return PL_OK;
    if (st == PL_ERR_NOT_FOUND)
        return pl_error(PL_ERR_INVALID, "%s: metadata '%s' is missing", g->label, key);
    if (st)
        return st;
    if (field)
        json_object_set_new(c, field, json_integer(v));
    if (v_p)
        *v_p = v;
    return PL_OK;
}

/* What this project does not compute: refused by name rather than run wrongly. */
static pl_status_t s_unsupported(const pl_gguf_t *g, const char *arch, int64_t head_dim)
{
    char key[96];
    const char *s;
    size_t n;
    int64_t v;

    snprintf(key, sizeof(key), "%s.rope.scaling.type", arch);
    if (pl_gguf_get_str(g, key, &s, &n) == PL_OK && !(n == 4 && memcmp(s, "none", 4) == 0))
        return pl_error(PL_ERR_UNSUPPORTED, "%s: metadata '%s' = '%.*s' is not supported",
                        g->label, key, (int)(n > 32 ? 32 : n), s);
    if (pl_gguf_tensor(g, "rope_freqs.weight"))
        return pl_error(PL_ERR_UNSUPPORTED, "%s: tensor 'rope_freqs.weight' (per-frequency rope "
                        "factors, as llama 3.1 files have) is not supported", g->label);
    snprintf(key, sizeof(key), "%s.expert_count", arch);
    if (pl_gguf_get_int(g, key, 0, 0, &v) == PL_ERR_RANGE)
        return pl_error_prefix(PL_ERR_UNSUPPORTED, "mixture of experts: ");
    snprintf(key, sizeof(key), "%s.rope.dimension_count", arch);
    if (pl_gguf_get_int(g, key, head_dim, head_dim, &v) == PL_ERR_RANGE)
        return pl_error_prefix(PL_ERR_UNSUPPORTED, "partial rotary embeddings: ");
    snprintf(key, sizeof(key), "%s.attention.value_length", arch);
    if (pl_gguf_get_int(g, key, head_dim, head_dim, &v) == PL_ERR_RANGE)
        return pl_error_prefix(PL_ERR_UNSUPPORTED, "value heads unlike key heads: ");
    return PL_OK;
}

static pl_status_t s_vocab(const pl_gguf_t *g, json_t *c, const char *arch)
{
    const pl_gguf_kv_t *tokens;
    const pl_gguf_tensor_t *embd = pl_gguf_tensor(g, "token_embd.weight");
    int64_t v = 0;
    pl_status_t st = s_int(g, c, arch, "vocab_size", "vocab_size", false, &v);

    if (st || v)
        return st;
    st = pl_gguf_get_arr(g, "tokenizer.ggml.tokens", PL_GGUF_STR, &tokens);
    if (st == PL_OK) {
        json_object_set_new(c, "vocab_size", json_integer((json_int_t)tokens->n));
        return PL_OK;
    }
    if (st != PL_ERR_NOT_FOUND)
        return st;
    if (embd && embd->ndim == 2) {
        json_object_set_new(c, "vocab_size", json_integer(embd->ne[1]));
        return PL_OK;
    }
    return pl_error(PL_ERR_INVALID, "%s: no vocabulary size (neither '%s.vocab_size', "
                    "tokenizer.ggml.tokens nor token_embd.weight)", g->label, arch);
}

static pl_status_t s_build(const pl_gguf_t *g, const char *arch, json_t *c)
{
    char key[96];
    int64_t heads = 0, hidden = 0, head_dim = 0, v;
    double d;
    pl_status_t st;

    json_object_set_new(c, "model_type", json_string(arch));
    json_object_set_new(c, "hidden_act", json_string("silu"));
    if ((st = s_int(g, c, arch, "embedding_length", "hidden_size", true, &hidden)) ||
        (st = s_int(g, c, arch, "feed_forward_length", "intermediate_size", true, NULL)) ||
        (st = s_int(g, c, arch, "block_count", "num_hidden_layers", true, NULL)) ||
        (st = s_int(g, c, arch, "attention.head_count", "num_attention_heads", true, &heads)) ||
        (st = s_int(g, c, arch, "attention.head_count_kv", "num_key_value_heads", false,
                    NULL)) ||
        (st = s_int(g, c, arch, "attention.key_length", "head_dim", false, &head_dim)) ||
        (st = s_int(g, c, arch, "context_length", "max_position_embeddings", false, NULL)) ||
        (st = s_vocab(g, c, arch)))
        return st;
    if (head_dim == 0 && heads > 0)
        head_dim = hidden / heads;
    if ((st = s_unsupported(g, arch, head_dim)))
        return st;
    snprintf(key, sizeof(key), "%s.attention.layer_norm_rms_epsilon", arch);
    if ((st = pl_gguf_get_num(g, key, &d)) == PL_ERR_NOT_FOUND)
        return pl_error(PL_ERR_INVALID, "%s: metadata '%s' is missing", g->label, key);
    if (st)
        return st;
    json_object_set_new(c, "rms_norm_eps", json_real(d));
    snprintf(key, sizeof(key), "%s.rope.freq_base", arch);
    if ((st = pl_gguf_get_num(g, key, &d)) == PL_OK)
        json_object_set_new(c, "rope_theta", json_real(d));
    else if (st != PL_ERR_NOT_FOUND)
        return st;
    json_object_set_new(c, "tie_word_embeddings",
                        json_boolean(pl_gguf_tensor(g, "output.weight") == NULL));
    if ((st = pl_gguf_get_int(g, "tokenizer.ggml.bos_token_id", 0, INT32_MAX, &v)) == PL_OK)
        json_object_set_new(c, "bos_token_id", json_integer(v));
    else if (st != PL_ERR_NOT_FOUND)
        return st;
    if ((st = pl_gguf_get_int(g, "tokenizer.ggml.eos_token_id", 0, INT32_MAX, &v)) == PL_OK)
        json_object_set_new(c, "eos_token_id", json_integer(v));
    else if (st != PL_ERR_NOT_FOUND)
        return st;
    return PL_OK;
}

pl_status_t pl_gguf_model_config(const pl_gguf_t *g, pl_model_config_t *cfg, bool *permute_qk_p)
{
    char arch[S_MAX_ARCH + 1];
    const char *s;
    size_t n;
    char *text;
    json_t *c;
    pl_model_config_t out;
    pl_status_t st = pl_gguf_get_str(g, "general.architecture", &s, &n);

    if (st == PL_ERR_NOT_FOUND)
        return pl_error(PL_ERR_INVALID, "%s: metadata 'general.architecture' is missing",
                        g->label);
    if (st)
        return st;
    if (n == 0 || n > S_MAX_ARCH || memchr(s, 0, n) || memchr(s, '.', n))
        return pl_error(PL_ERR_INVALID, "%s: general.architecture is not a plain name of up to "
                        "%d bytes", g->label, S_MAX_ARCH);
    memcpy(arch, s, n);
    arch[n] = '\0';
    if (!(c = json_object()))
        return pl_error(PL_ERR_NOMEM, "out of memory");
    if ((st = s_build(g, arch, c))) {
        json_decref(c);
        return st;
    }
    text = json_dumps(c, JSON_COMPACT);
    json_decref(c);
    if (!text)
        return pl_error(PL_ERR_NOMEM, "out of memory");
    st = pl_model_config_parse(text, strlen(text), &out);
    free(text);
    if (st)
        return pl_error_prefix(st, "%s: metadata of architecture '%s' as config.json: ",
                               g->label, arch);
    *cfg = out;
    *permute_qk_p = strcmp(arch, "llama") == 0;
    return PL_OK;
}

pl_status_t pl_gguf_config_load(const char *path, pl_model_config_t *cfg)
{
    pl_gguf_t *g;
    bool permute;
    pl_status_t st = pl_gguf_open(path, &g);

    if (st)
        return st;
    st = pl_gguf_model_config(g, cfg, &permute);
    pl_gguf_free(&g);
    return st;
}
