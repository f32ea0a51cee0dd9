/* config.json of a Hugging Face decoder (Llama, Mistral, Qwen2, Qwen3): parsing, defaults and
 * sanity bounds, so that a hostile file can neither pick an unsupported architecture nor request
 * absurd sizes. */
#include "model/gguf_model.h"
#include "model/model.h"

#include "common/json.h"
#include "common/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_HIDDEN 65536
#define S_MAX_INTER (1 << 20)
#define S_MAX_LAYERS 1024
#define S_MAX_HEADS 1024
#define S_MAX_HEAD_DIM 1024
#define S_MAX_VOCAB (1 << 22)
#define S_MAX_POS (1 << 24)

#define S_FAMILIES "Llama, Mistral, Qwen2, Qwen3"

static const struct {
    const char *type, *arch;
} s_families[PL_FAMILY_COUNT] = {
    [PL_FAMILY_LLAMA] = {"llama", "LlamaForCausalLM"},
    [PL_FAMILY_MISTRAL] = {"mistral", "MistralForCausalLM"},
    [PL_FAMILY_QWEN2] = {"qwen2", "Qwen2ForCausalLM"},
    [PL_FAMILY_QWEN3] = {"qwen3", "Qwen3ForCausalLM"},
};

const char *pl_model_family_name(pl_model_family_t f)
{
    return (unsigned)f < PL_FAMILY_COUNT ? s_families[f].type : "?";
}

/* The family named by model_type, else by the first architecture we know; anything else is
 * refused with the name the file gave. */
static pl_status_t s_family(const json_t *root, pl_model_family_t *family_p)
{
    const char *type = NULL, *first_arch = NULL;
    json_t *arch = json_object_get(root, "architectures");
    pl_status_t st = pl_json_str_opt(root, "model_type", 64, &type);

    if (st)
        return st;
    for (int f = 0; type && f < PL_FAMILY_COUNT; f++)
        if (strcmp(type, s_families[f].type) == 0) {
            *family_p = (pl_model_family_t)f;
            return PL_OK;
        }
    if (!type && json_is_array(arch)) {
        size_t i;
        json_t *a;
        json_array_foreach(arch, i, a) {
            if (!json_is_string(a))
                continue;
            first_arch = first_arch ? first_arch : json_string_value(a);
            for (int f = 0; f < PL_FAMILY_COUNT; f++)
                if (strcmp(json_string_value(a), s_families[f].arch) == 0) {
                    *family_p = (pl_model_family_t)f;
                    return PL_OK;
                }
        }
    }
    if (type)
        return pl_error(PL_ERR_UNSUPPORTED, "model family '%s' (model_type) is not supported "
                        "(" S_FAMILIES " are)", type);
    if (first_arch)
        return pl_error(PL_ERR_UNSUPPORTED, "model architecture '%.64s' is not supported "
                        "(" S_FAMILIES " are)", first_arch);
    return pl_error(PL_ERR_UNSUPPORTED, "no model family: neither model_type nor architectures "
                    "name one (" S_FAMILIES " are supported)");
}

static pl_status_t s_int(const json_t *root, const char *key, int64_t min, int64_t max, int *out)
{
    int64_t v;
    pl_status_t st = pl_json_int(root, key, min, max, &v);
    if (!st)
        *out = (int)v;
    return st;
}

static pl_status_t s_int_opt(const json_t *root, const char *key, int64_t min, int64_t max,
                             int *out)
{
    int64_t v = *out;
    pl_status_t st = pl_json_int_opt(root, key, min, max, &v);
    if (!st)
        *out = (int)v;
    return st;
}

static pl_status_t s_rope_scaling(const json_t *root, pl_model_config_t *cfg)
{
    json_t *rs = json_object_get(root, "rope_scaling");
    const char *type = NULL;
    double v;
    int64_t orig;
    pl_status_t st;

    cfg->rope_scaling = PL_ROPE_NONE;
    if (!rs || json_is_null(rs))
        return PL_OK;
    if (!json_is_object(rs))
        return pl_error(PL_ERR_INVALID, "field 'rope_scaling': expected an object or null");
    st = pl_json_str_opt(rs, "rope_type", 64, &type);
    if (!st && !type)
        st = pl_json_str_opt(rs, "type", 64, &type);
    if (st)
        return pl_error_prefix(st, "rope_scaling: ");
    if (!type)
        return pl_error(PL_ERR_INVALID, "rope_scaling: missing field 'rope_type'");
    if (strcmp(type, "default") == 0)
        return PL_OK;
    if (strcmp(type, "llama3") != 0)
        return pl_error(PL_ERR_UNSUPPORTED, "rope_scaling type '%s' is not supported (llama3 is)",
                        type);
    cfg->rope_scaling = PL_ROPE_LLAMA3;
    if ((st = pl_json_num(rs, "factor", 1.0, 1024.0, &v)))
        goto err;
    cfg->rope_factor = (float)v;
    if ((st = pl_json_num(rs, "low_freq_factor", 1e-3, 1e6, &v)))
        goto err;
    cfg->rope_low_freq_factor = (float)v;
    if ((st = pl_json_num(rs, "high_freq_factor", 1e-3, 1e6, &v)))
        goto err;
    cfg->rope_high_freq_factor = (float)v;
    if ((st = pl_json_int(rs, "original_max_position_embeddings", 1, S_MAX_POS, &orig)))
        goto err;
    cfg->rope_orig_max_pos = (int)orig;
    if (!(cfg->rope_high_freq_factor > cfg->rope_low_freq_factor))
        return pl_error(PL_ERR_INVALID, "rope_scaling: high_freq_factor %g must exceed "
                        "low_freq_factor %g", cfg->rope_high_freq_factor,
                        cfg->rope_low_freq_factor);
    return PL_OK;
err:
    return pl_error_prefix(st, "rope_scaling: ");
}

static pl_status_t s_eos(const json_t *root, pl_model_config_t *cfg)
{
    json_t *eos = json_object_get(root, "eos_token_id"), *a;
    size_t i;

    cfg->n_eos = 0;
    if (!eos || json_is_null(eos))
        return PL_OK;
    if (json_is_integer(eos)) {
        int64_t id = 0;
        pl_status_t st = pl_json_int(root, "eos_token_id", 0, cfg->vocab - 1, &id);
        if (st)
            return st;
        cfg->eos_ids[cfg->n_eos++] = (int)id;
        return PL_OK;
    }
    if (!json_is_array(eos))
        return pl_error(PL_ERR_INVALID, "field 'eos_token_id': expected an integer or a list");
    if (json_array_size(eos) > PL_MODEL_MAX_EOS)
        return pl_error(PL_ERR_RANGE, "field 'eos_token_id': %zu ids, at most %d allowed",
                        json_array_size(eos), PL_MODEL_MAX_EOS);
    json_array_foreach(eos, i, a) {
        if (!json_is_integer(a) || json_integer_value(a) < 0 ||
            json_integer_value(a) >= cfg->vocab)
            return pl_error(PL_ERR_INVALID, "field 'eos_token_id': entry %zu is not a token id "
                            "in [0, %d)", i, cfg->vocab);
        cfg->eos_ids[cfg->n_eos++] = (int)json_integer_value(a);
    }
    return PL_OK;
}

/* Fields that would change the computation in ways this project does not implement, and the
 * per-family structure: Qwen2's q/k/v biases, Qwen3's q/k norms, Mistral's sliding window. */
static pl_status_t s_family_features(const json_t *root, pl_model_config_t *c)
{
    const char *act = NULL;
    bool bias = false, sliding = c->family == PL_FAMILY_MISTRAL;
    pl_status_t st = pl_json_str_opt(root, "hidden_act", 64, &act);

    if (st)
        return st;
    if (act && strcmp(act, "silu") != 0)
        return pl_error(PL_ERR_UNSUPPORTED, "hidden_act '%s' is not supported (silu is)", act);
    /* Qwen2 always has q/k/v biases and no o_proj bias, whatever attention_bias says; elsewhere
     * attention_bias also biases o_proj, which this project does not implement. */
    if (c->family != PL_FAMILY_QWEN2) {
        if ((st = pl_json_bool_opt(root, "attention_bias", &bias)))
            return st;
        if (bias)
            return pl_error(PL_ERR_UNSUPPORTED, "attention_bias true is not supported for %s",
                            pl_model_family_name(c->family));
    }
    c->qkv_bias = c->family == PL_FAMILY_QWEN2;
    c->qk_norm = c->family == PL_FAMILY_QWEN3;
    bias = false;
    if ((st = pl_json_bool_opt(root, "mlp_bias", &bias)))
        return st;
    if (bias)
        return pl_error(PL_ERR_UNSUPPORTED, "mlp_bias true is not supported");
    /* Qwen configs carry a window that applies only with use_sliding_window true. */
    if ((st = pl_json_bool_opt(root, "use_sliding_window", &sliding)))
        return st;
    c->sliding_window = 0;
    if (sliding) {
        json_t *w = json_object_get(root, "sliding_window");
        if (c->family != PL_FAMILY_MISTRAL)
            return pl_error(PL_ERR_UNSUPPORTED, "use_sliding_window true is not supported for %s",
                            pl_model_family_name(c->family));
        if (w && !json_is_null(w) &&
            (st = s_int_opt(root, "sliding_window", 1, S_MAX_POS, &c->sliding_window)))
            return st;
    }
    return PL_OK;
}

/* torch_dtype, the element type the weights were saved in (Hugging Face spells float32 also
 * "float", float16 also "half"); bf16 when absent, as most Llama checkpoints are. */
static pl_status_t s_torch_dtype(const json_t *root, pl_model_config_t *c)
{
    static const struct {
        const char *name;
        pl_dtype_t dt;
    } names[] = {{"float32", PL_DT_F32}, {"float", PL_DT_F32},    {"float16", PL_DT_F16},
                 {"half", PL_DT_F16},    {"bfloat16", PL_DT_BF16}};
    const char *dt = NULL;
    pl_status_t st = pl_json_str_opt(root, "torch_dtype", 32, &dt);
    if (st)
        return st;
    c->dtype = PL_DT_BF16;
    if (!dt)
        return PL_OK;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(dt, names[i].name) == 0) {
            c->dtype = names[i].dt;
            return PL_OK;
        }
    return pl_error(PL_ERR_UNSUPPORTED,
                    "field 'torch_dtype': '%s' is not supported (float32, float16, bfloat16 are)",
                    dt);
}

static pl_status_t s_parse_root(const json_t *root, pl_model_config_t *c)
{
    double d;
    int64_t head_dim = 0;
    pl_status_t st;

    if (!json_is_object(root))
        return pl_error(PL_ERR_INVALID, "config is not a JSON object");
    if ((st = s_family(root, &c->family)) || (st = s_family_features(root, c)))
        return st;
    if ((st = s_int(root, "hidden_size", 1, S_MAX_HIDDEN, &c->hidden)) ||
        (st = s_int(root, "intermediate_size", 1, S_MAX_INTER, &c->intermediate)) ||
        (st = s_int(root, "num_hidden_layers", 1, S_MAX_LAYERS, &c->n_layers)) ||
        (st = s_int(root, "num_attention_heads", 1, S_MAX_HEADS, &c->n_heads)) ||
        (st = s_int(root, "vocab_size", 1, S_MAX_VOCAB, &c->vocab)))
        return st;
    if ((st = pl_json_num(root, "rms_norm_eps", 1e-12, 1.0, &d)))
        return st;
    c->rms_eps = (float)d;

    c->n_kv_heads = c->n_heads;
    if ((st = s_int_opt(root, "num_key_value_heads", 1, c->n_heads, &c->n_kv_heads)))
        return st;
    if (c->n_heads % c->n_kv_heads != 0)
        return pl_error(PL_ERR_INVALID, "field 'num_key_value_heads': %d does not divide "
                        "num_attention_heads %d", c->n_kv_heads, c->n_heads);
    if ((st = pl_json_int_opt(root, "head_dim", 1, S_MAX_HEAD_DIM, &head_dim)))
        return st;
    if (head_dim == 0) {
        if (c->hidden % c->n_heads != 0)
            return pl_error(PL_ERR_INVALID, "field 'hidden_size': %d is not a multiple of "
                            "num_attention_heads %d (and no head_dim given)", c->hidden,
                            c->n_heads);
        head_dim = c->hidden / c->n_heads;
    }
    if (head_dim % 2 != 0 || head_dim > S_MAX_HEAD_DIM)
        return pl_error(PL_ERR_INVALID, "head_dim %lld must be even and at most %d (rotary "
                        "embeddings rotate pairs)", (long long)head_dim, S_MAX_HEAD_DIM);
    c->head_dim = (int)head_dim;
    if ((int64_t)c->n_heads * c->head_dim > 4 * S_MAX_HIDDEN)
        return pl_error(PL_ERR_RANGE, "num_attention_heads * head_dim = %lld is too large",
                        (long long)c->n_heads * c->head_dim);

    c->max_pos = 4096;
    if ((st = s_int_opt(root, "max_position_embeddings", 1, S_MAX_POS, &c->max_pos)))
        return st;
    d = 10000.0;
    if ((st = pl_json_num_opt(root, "rope_theta", 1.0, 1e12, &d)))
        return st;
    c->rope_theta = (float)d;
    if ((st = s_rope_scaling(root, c)))
        return st;
    c->tie_embeddings = false;
    if ((st = pl_json_bool_opt(root, "tie_word_embeddings", &c->tie_embeddings)))
        return st;
    if ((st = s_eos(root, c)))
        return st;
    c->bos_id = -1;
    if ((st = s_int_opt(root, "bos_token_id", 0, c->vocab - 1, &c->bos_id)))
        return st;
    return s_torch_dtype(root, c);
}

/* jansson's reason without the "near '...'" it appends: an error never quotes file contents
 * (a config.json may be a link to a file the reader should not see). */
static const char *s_json_reason(json_error_t *jerr)
{
    char *near = strstr(jerr->text, " near ");
    if (near)
        *near = '\0';
    return jerr->text;
}

pl_status_t pl_model_config_parse(const char *text, size_t len, pl_model_config_t *cfg)
{
    json_error_t jerr;
    json_t *root;
    pl_model_config_t c;
    pl_status_t st;

    if (len > PL_MODEL_CONFIG_MAX_BYTES)
        return pl_error(PL_ERR_RANGE, "config: %zu bytes, more than the limit of %u", len,
                        PL_MODEL_CONFIG_MAX_BYTES);
    root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return pl_error(PL_ERR_INVALID, "config: line %d column %d: %s", jerr.line, jerr.column,
                        s_json_reason(&jerr));
    memset(&c, 0, sizeof(c));
    st = s_parse_root(root, &c);
    json_decref(root);
    if (st)
        return st;
    *cfg = c;
    return PL_OK;
}

pl_status_t pl_model_config_load(const char *dir, pl_model_config_t *cfg)
{
    char path[4096];
    char *text;
    size_t len;
    pl_status_t st;

    if (pl_gguf_is_file(dir)) /* a model is a directory or a GGUF file */
        return pl_gguf_config_load(dir, cfg);
    if ((st = pl_path_join(dir, "config.json", path, sizeof(path))))
        return st;
    if ((st = pl_file_read(path, PL_MODEL_CONFIG_MAX_BYTES, &text, &len)))
        return st;
    st = pl_model_config_parse(text, len, cfg);
    free(text);
    if (st)
        return pl_error_prefix(st, "%s: ", path);
    return PL_OK;
}
