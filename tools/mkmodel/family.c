/* pl-mkmodel's model per family: its config.json and the canonical tensor list, each tensor's
 * values a deterministic random stream keyed by the seed and its place in that list. */
#include "tools/mkmodel/mkmodel_int.h"
#include "common/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static const char *s_torch_dtype(pl_dtype_t dt)
{
    return dt == PL_DT_F32 ? "float32" : dt == PL_DT_F16 ? "float16" : "bfloat16";
}

json_t *pl_mkmodel_config_json(const pl_mkmodel_opts_t *o)
{
    json_t *c = json_object(), *eos;
    static const char *const archs[PL_FAMILY_COUNT] = {
        [PL_FAMILY_LLAMA] = "LlamaForCausalLM", [PL_FAMILY_MISTRAL] = "MistralForCausalLM",
        [PL_FAMILY_QWEN2] = "Qwen2ForCausalLM", [PL_FAMILY_QWEN3] = "Qwen3ForCausalLM"};
    json_object_set_new(c, "architectures", json_pack("[s]", archs[o->family]));
    json_object_set_new(c, "model_type", json_string(pl_model_family_name(o->family)));
    json_object_set_new(c, "torch_dtype", json_string(s_torch_dtype(o->dtype)));
    json_object_set_new(c, "hidden_act", json_string("silu"));
    if (o->family != PL_FAMILY_QWEN2) /* Qwen2's q/k/v biases come with the family */
        json_object_set_new(c, "attention_bias", json_false());
    if (o->family == PL_FAMILY_QWEN2 || o->family == PL_FAMILY_QWEN3)
        json_object_set_new(c, "use_sliding_window", json_false());
    if (o->family == PL_FAMILY_MISTRAL)
        json_object_set_new(c, "sliding_window", json_null()); /* v0.2 and later */
    json_object_set_new(c, "mlp_bias", json_false());
    json_object_set_new(c, "hidden_size", json_integer(o->hidden));
    json_object_set_new(c, "intermediate_size", json_integer(o->inter));
    json_object_set_new(c, "num_hidden_layers", json_integer(o->layers));
    json_object_set_new(c, "num_attention_heads", json_integer(o->heads));
    json_object_set_new(c, "num_key_value_heads", json_integer(o->kv_heads));
    json_object_set_new(c, "head_dim", json_integer(o->head_dim));
    json_object_set_new(c, "vocab_size", json_integer(o->vocab));
    json_object_set_new(c, "max_position_embeddings", json_integer(o->max_pos));
    json_object_set_new(c, "rms_norm_eps", json_real(1e-5));
    json_object_set_new(c, "rope_theta", json_real(o->rope_llama3 ? 500000.0 : 10000.0));
    if (o->rope_llama3)
        json_object_set_new(c, "rope_scaling",
                            json_pack("{s:f, s:f, s:f, s:i, s:s}", "factor", 8.0,
                                      "low_freq_factor", 1.0, "high_freq_factor", 4.0,
                                      "original_max_position_embeddings", 8192, "rope_type",
                                      "llama3"));
    else
        json_object_set_new(c, "rope_scaling", json_null());
    json_object_set_new(c, "tie_word_embeddings", json_boolean(o->tie));
    if (o->bos != -1)
        json_object_set_new(c, "bos_token_id",
                            json_integer(o->bos >= 0 ? o->bos : o->vocab > 1 ? 1 : 0));
    if (o->n_eos == 1) {
        eos = json_integer(o->eos[0]);
    } else {
        eos = json_array();
        for (int i = 0; i < o->n_eos; i++)
            json_array_append_new(eos, json_integer(o->eos[i]));
    }
    json_object_set_new(c, "eos_token_id", eos);
    return c;
}

static void s_add(pl_mkmodel_tensor_t *t, size_t *n, const char *name, int ndim, int64_t d0,
                  int64_t d1, pl_mkmodel_kind_t kind, int shard)
{
    pl_mkmodel_tensor_t *e = &t[*n];
    snprintf(e->name, sizeof(e->name), "%s", name);
    e->ndim = ndim;
    e->shape[0] = d0;
    e->shape[1] = d1;
    e->kind = kind;
    e->idx = *n;
    e->shard = shard;
    (*n)++;
}

/* The canonical tensor list; the order fixes each tensor's random stream. */
pl_mkmodel_tensor_t *pl_mkmodel_tensor_list(const pl_mkmodel_opts_t *o, size_t *n_p)
{
    int64_t h = o->hidden, q = (int64_t)o->heads * o->head_dim;
    int64_t kv = (int64_t)o->kv_heads * o->head_dim, f = o->inter;
    pl_mkmodel_tensor_t *t = calloc((size_t)o->layers * 14 + 3, sizeof(*t));
    size_t n = 0;
    char name[96];

    if (!t)
        return NULL;
    s_add(t, &n, "model.embed_tokens.weight", 2, o->vocab, h, PL_MKMODEL_EMBED, 0);
    for (int l = 0; l < o->layers; l++) {
        int sh = (int)((int64_t)l * o->shards / o->layers);
        const struct {
            const char *suffix;
            int ndim;
            int64_t d0, d1;
            pl_mkmodel_kind_t kind;
        } per[] = {{"input_layernorm", 1, h, 0, PL_MKMODEL_NORM},
                   {"self_attn.q_proj", 2, q, h, PL_MKMODEL_PROJ},
                   {"self_attn.k_proj", 2, kv, h, PL_MKMODEL_PROJ},
                   {"self_attn.v_proj", 2, kv, h, PL_MKMODEL_PROJ},
                   {"self_attn.o_proj", 2, h, q, PL_MKMODEL_PROJ},
                   {"post_attention_layernorm", 1, h, 0, PL_MKMODEL_NORM},
                   {"mlp.gate_proj", 2, f, h, PL_MKMODEL_PROJ},
                   {"mlp.up_proj", 2, f, h, PL_MKMODEL_PROJ},
                   {"mlp.down_proj", 2, h, f, PL_MKMODEL_PROJ}};
        for (size_t i = 0; i < PL_ARRAY_SIZE(per); i++) {
            snprintf(name, sizeof(name), "model.layers.%d.%s.weight", l, per[i].suffix);
            s_add(t, &n, name, per[i].ndim, per[i].d0, per[i].d1, per[i].kind, sh);
        }
        /* after a layer's Llama tensors, so a Llama model's random streams never move */
        for (int i = 1; o->family == PL_FAMILY_QWEN2 && i <= 3; i++) {
            snprintf(name, sizeof(name), "model.layers.%d.%s.bias", l, per[i].suffix);
            s_add(t, &n, name, 1, per[i].d0, 0, PL_MKMODEL_BIAS, sh);
        }
        for (int i = 0; o->family == PL_FAMILY_QWEN3 && i < 2; i++) {
            snprintf(name, sizeof(name), "model.layers.%d.self_attn.%s_norm.weight", l,
                     i ? "k" : "q");
            s_add(t, &n, name, 1, o->head_dim, 0, PL_MKMODEL_NORM, sh);
        }
    }
    s_add(t, &n, "model.norm.weight", 1, h, 0, PL_MKMODEL_NORM, o->shards - 1);
    if (!o->tie)
        s_add(t, &n, "lm_head.weight", 2, o->vocab, h, PL_MKMODEL_PROJ, o->shards - 1);
    *n_p = n;
    return t;
}

int64_t pl_mkmodel_tensor_numel(const pl_mkmodel_tensor_t *t)
{
    return t->ndim == 1 ? t->shape[0] : t->shape[0] * t->shape[1];
}

/* The f32 values of tensor t from element `at` on; other dtypes store these values rounded.
 * Each tensor's stream is keyed by (seed, canonical index), so sharding never changes a value. */
void pl_mkmodel_tensor_values(const pl_mkmodel_opts_t *o, const pl_mkmodel_tensor_t *t, int64_t at,
                              size_t k, float *out)
{
    uint64_t key = pl_rand_key(o->seed, t->idx, 0x6d6b6d6f64656cULL);
    float scale = t->kind == PL_MKMODEL_EMBED ? 0.5f
                  : t->kind == PL_MKMODEL_NORM || t->kind == PL_MKMODEL_BIAS
                      ? 0.1f
                      : 1.0f / sqrtf((float)t->shape[1]);
    float base = t->kind == PL_MKMODEL_NORM ? 1.0f : 0.0f;
    for (size_t i = 0; i < k; i++) {
        float u = 2.0f * pl_rand_uniform(key, (uint64_t)at + i) - 1.0f; /* [-1, 1) */
        out[i] = base + scale * u;
    }
}
