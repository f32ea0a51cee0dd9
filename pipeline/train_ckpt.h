/* Training checkpoints in the Hugging Face layout: each stage writes its tensors under the HF
 * Llama names into model-0000k-of-0000n.safetensors; stage 0 writes the shard index and copies
 * the model's config.json, so the directory opens as a model (pipeld generates from it). */
#ifndef PL_PIPELINE_TRAIN_CKPT_H
#define PL_PIPELINE_TRAIN_CKPT_H

#include "model/safetensors_write.h"
#include "pipeline/train_local.h"

#define PL_TRAIN_CKPT_NAME 96

/* The tensors of a stage (layers [l0, l1); the embedding when first, final norm and LM head when
 * last) in checkpoint order: HF name (into names), shape, and w's pointer (NULL when w is NULL).
 * out and names hold 9 * (l1 - l0) + 3 entries; returns the count. The one place the trainer's
 * tensors meet their HF names: checkpoints write through it and pl_train_master_load reads. */
size_t pl_train_ckpt_stage_tensors(const pl_train_local_cfg_t *c, const pl_train_weights_t *w,
                                   bool first, bool last, int l0, int l1, pl_st_out_t *out,
                                   char (*names)[PL_TRAIN_CKPT_NAME]);

/* "model-<stage+1>-of-<n_stages>.safetensors" (5 digits): stage's file of a checkpoint. */
void pl_train_ckpt_shard_name(int stage, int n_stages, char *out, size_t len);

/* Write stage `stage` of n_stages (layers [l0, l1); the embedding when first, final norm and
 * LM head when last) from w as dir/model-<stage+1>-of-<n_stages>.safetensors (5 digits, F32). */
pl_status_t pl_train_ckpt_stage_write(const char *dir, const pl_train_local_cfg_t *cfg,
                                      const pl_train_weights_t *w, int stage, int n_stages, int l0,
                                      int l1);
/* Write dir/model.safetensors.index.json for n_stages stages of counts[s] layers and, when
 * model_dir is not NULL, copy its config.json into dir. */
pl_status_t pl_train_ckpt_index_write(const char *dir, const pl_train_local_cfg_t *cfg,
                                      const int *counts, int n_stages, const char *model_dir);

#endif
