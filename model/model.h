/* A decoder model (Llama, Mistral, Qwen2, Qwen3) read from a Hugging Face directory (config.json
 * plus model.safetensors or the shards named in model.safetensors.index.json) or a GGUF file.
 * Files are mmapped, so a stage touches only the pages of its own layers. Every header field is
 * checked before use. */
#ifndef PL_MODEL_MODEL_H
#define PL_MODEL_MODEL_H

#include "common/status.h"
#include "model/wtype.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PL_MODEL_MAX_EOS 8
#define PL_MODEL_CONFIG_MAX_BYTES (1u << 20)

/* Element types of activations and of safetensors tensors; a tensor's stored weight type
 * (model/wtype.h, which adds block-quantized types) has the same value for these three. */
typedef enum { PL_DT_F32 = 0, PL_DT_F16 = 1, PL_DT_BF16 = 2 } pl_dtype_t;
size_t pl_dtype_size(pl_dtype_t dt);
const char *pl_dtype_name(pl_dtype_t dt);

typedef enum { PL_ROPE_NONE = 0, PL_ROPE_LLAMA3 = 1 } pl_rope_scaling_t;

/* Decoder families: one Llama-shaped layer with the differences below. */
typedef enum {
    PL_FAMILY_LLAMA = 0, /* Llama 1, 2, 3.x */
    PL_FAMILY_MISTRAL,   /* Llama's layer; a sliding window in v0.1 */
    PL_FAMILY_QWEN2,     /* Qwen2 and Qwen2.5: biases on q, k and v */
    PL_FAMILY_QWEN3,     /* RMSNorm over each head of q and k before RoPE */
    PL_FAMILY_COUNT
} pl_model_family_t;

/* "llama", "mistral", "qwen2", "qwen3"; "?" outside the enum. */
const char *pl_model_family_name(pl_model_family_t f);

typedef struct {
    pl_model_family_t family; /* model_type, else architectures */
    bool qkv_bias;            /* q/k/v projections have biases (Qwen2) */
    bool qk_norm;             /* per-head RMSNorm of q and k (Qwen3) */
    int sliding_window;       /* attention reaches this many positions back; 0: unlimited */
    int hidden;        /* hidden_size */
    int intermediate;  /* intermediate_size */
    int n_layers;      /* num_hidden_layers */
    int n_heads;       /* num_attention_heads */
    int n_kv_heads;    /* num_key_value_heads (defaults to n_heads) */
    int head_dim;      /* head_dim when given, else hidden / n_heads */
    int vocab;         /* vocab_size */
    int max_pos;       /* max_position_embeddings */
    float rms_eps;     /* rms_norm_eps */
    float rope_theta;  /* rope_theta (default 10000) */
    pl_rope_scaling_t rope_scaling;
    float rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_orig_max_pos;
    bool tie_embeddings; /* tie_word_embeddings */
    int n_eos;
    int eos_ids[PL_MODEL_MAX_EOS]; /* eos_token_id: int or list */
    int bos_id;                    /* -1 when absent */
    pl_dtype_t dtype; /* torch_dtype: the weights' element type as stored (bf16 when absent) */
} pl_model_config_t;

/* Parse and validate config.json text. The family comes from model_type ("llama", "mistral",
 * "qwen2", "qwen3"), else from architectures (LlamaForCausalLM, ...); any other is refused with
 * its name, as are features of a family this project does not implement. */
pl_status_t pl_model_config_parse(const char *text, size_t len, pl_model_config_t *cfg);
/* Read dir/config.json and parse it. */
pl_status_t pl_model_config_load(const char *dir, pl_model_config_t *cfg);

/* A tensor in a mapped shard: data points into the mapping (borrowed, valid until the model is
 * destroyed). */
typedef struct {
    pl_dtype_t dtype; /* meaningful when wtype is F32, F16 or BF16 */
    pl_wtype_t wtype; /* how the elements are stored */
    int ndim;
    int64_t shape[4];
    int64_t numel;
    const void *data;
    size_t nbytes;
} pl_tensor_view_t;

typedef struct pl_model pl_model_t;

/* Open a model directory: parse config.json and every shard header (not the weights).
 * Fails with a clear message on a missing file, a truncated or malformed header, offsets outside
 * the file, overlapping tensors, unknown dtypes, or shapes that disagree with the config. */
pl_status_t pl_model_open(const char *dir, pl_model_t **model_p);
/* Unmap everything and free; sets *model_p to NULL; safe on NULL. */
void pl_model_destroy(pl_model_t **model_p);
const pl_model_config_t *pl_model_config(const pl_model_t *model);
const char *pl_model_dir(const pl_model_t *model);
/* The GGUF file of a model opened from one (its tokenizer keys: model/gguf_vocab.h); NULL for a
 * Hugging Face directory. Borrowed, valid until the model is destroyed. */
const struct pl_gguf *pl_model_gguf(const pl_model_t *model);
/* Total bytes of all tensors as stored. */
uint64_t pl_model_weight_bytes(const pl_model_t *model);

/* The bytes of a model's tensors as stored, by pipeline part: what a stage holding a part keeps
 * and reads (the planner's weight costs). One allocation, layer[] inside. */
typedef struct {
    int n_layers;
    uint64_t *layer;         /* n_layers entries: every tensor a stage loads for layer l */
    uint64_t embed;          /* model.embed_tokens.weight */
    uint64_t head;           /* model.norm.weight + the LM head (the embedding table when tied) */
    uint64_t tied;           /* what embedding and head share: the table when tied, else 0 */
    pl_wtype_t matrix_wtype; /* layer 0's q_proj (no layers: the head's): a GPU stage's dtype */
    pl_wtype_t quantized;    /* the first quantized type among them; PL_WT_COUNT when none */
} pl_model_bytes_t;

/* The stored bytes of each part of an opened model, from its tensor headers (no weight is read).
 * *bytes_p is the caller's to free with pl_model_bytes_destroy. */
pl_status_t pl_model_bytes_new(const pl_model_t *model, pl_model_bytes_t **bytes_p);
/* Free; nulls the pointer; safe on NULL. */
void pl_model_bytes_destroy(pl_model_bytes_t **bytes_p);
/* A model known only by its config: every tensor pl_model_open would check for, in the config's
 * dtype (model_bytes.c). For planning with a described model; freed as above. */
pl_status_t pl_model_bytes_estimate(const pl_model_config_t *cfg, pl_model_bytes_t **bytes_p);
/* True when dir holds a config.json but no weights (neither model.safetensors nor its index):
 * a model described for planning only. */
bool pl_model_is_described(const char *dir);

/* Look a tensor up by its Hugging Face name ("model.layers.3.mlp.up_proj.weight"). */
pl_status_t pl_model_tensor(pl_model_t *model, const char *name, pl_tensor_view_t *view);
/* Same, also checking the shape equals `shape[0..ndim)` exactly. */
pl_status_t pl_model_tensor_shaped(pl_model_t *model, const char *name, int ndim,
                                   const int64_t *shape, pl_tensor_view_t *view);
/* Tensor as f32: for f32 tensors returns the mapped data (*owned_p false, no copy; the mapping is
 * read-only, never write through it); f16, bf16 and misaligned f32 are converted into a new buffer
 * (*owned_p true, caller frees). Shape is checked as above; a NULL shape skips the check.
 * Thread-safe: several executor threads may load from one model at once. */
pl_status_t pl_model_tensor_f32(pl_model_t *model, const char *name, int ndim,
                                const int64_t *shape, float **data_p, bool *owned_p);

/* inv_freq[i] for i < head_dim / 2: rope_theta^(-2i/head_dim), llama3-scaled when configured. */
void pl_model_rope_inv_freq(const pl_model_config_t *cfg, double *inv_freq);

#endif
