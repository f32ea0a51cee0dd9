/* Internal to model/: a GGUF file seen as a model: its config from the metadata (through the one
 * config.json validator) and the Hugging Face names of its tensors. */
#ifndef PL_MODEL_GGUF_MODEL_H
#define PL_MODEL_GGUF_MODEL_H

#include "model/gguf.h"
#include "model/model.h"

/* The config of g from general.architecture and its "<arch>.*" keys, validated as a config.json
 * with the same fields would be. *permute_qk_p: the q/k rows are in llama.cpp's interleaved-rope
 * order (the "llama" architecture) and must be put back into Hugging Face order. */
pl_status_t pl_gguf_model_config(const pl_gguf_t *g, pl_model_config_t *cfg, bool *permute_qk_p);
/* llama.cpp stores a llama model's q and k rows so that its rope rotates adjacent pairs: GGUF row
 * r of a head (head_dim rows) holds Hugging Face row pl_gguf_llama_qk_row(r, head_dim): row 2i + j
 * holds row j * head_dim / 2 + i (convert_hf_to_gguf.py's permute). */
int64_t pl_gguf_llama_qk_row(int64_t r, int64_t head_dim);
/* Map the GGUF file at path just to read its config. */
pl_status_t pl_gguf_config_load(const char *path, pl_model_config_t *cfg);
/* The Hugging Face name of a GGUF tensor name ("blk.3.attn_q.weight" ->
 * "model.layers.3.self_attn.q_proj.weight"); names it does not know are kept as they are. */
void pl_gguf_hf_name(const char *gguf_name, char *out, size_t len);
/* The GGUF name of a Hugging Face tensor name (the inverse, for writers); false when unknown. */
bool pl_gguf_name_of(const char *hf_name, char *out, size_t len);

#endif
