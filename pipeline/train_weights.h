/* A training stage's f32 master weights, owned: read from a model directory's tensors (any dtype
 * the loader converts) or made at random from a seed, the same per tensor whatever the split. */
#ifndef PL_PIPELINE_TRAIN_WEIGHTS_H
#define PL_PIPELINE_TRAIN_WEIGHTS_H

#include "common/config_train.h"
#include "model/model.h"
#include "pipeline/train_local.h"

/* The trainer's shape from a model's config: dims, layers, vocab, and inv_freq (caller's,
 * [head_dim / 2], filled; cfg->inv_freq points at it). seq_len and n_mb as given; recompute
 * false; opt untouched. PL_ERR_UNSUPPORTED naming what the trainer lacks (q/k/v biases, q/k
 * norms, a sliding window shorter than seq_len); PL_ERR_RANGE when seq_len exceeds max_pos. */
pl_status_t pl_train_cfg_from_model(const pl_model_config_t *mc, int seq_len, int n_mb,
                                    double *inv_freq, pl_train_local_cfg_t *cfg);

/* The whole trainer config of a training job file on this model: the shape as above with
 * seq_len, global_batch / micro_batch microbatches and recompute from the file, and AdamW from
 * its optimizer section (total_steps = steps; lr_schedule constant: min_lr = lr), checked. */
pl_status_t pl_train_cfg_from_job(const pl_cfg_train_t *job, const pl_model_config_t *mc,
                                  double *inv_freq, pl_train_local_cfg_t *cfg);

typedef struct pl_train_master pl_train_master_t;

/* Stage [l0, l1) (the embedding when first, final norm and head when last) from model m's
 * tensors, shapes checked against cfg; a tied model's head starts as a copy of its embedding
 * (the trained head is then its own: checkpoints write lm_head). */
pl_status_t pl_train_master_load(pl_model_t *m, const pl_train_local_cfg_t *cfg, int l0, int l1,
                                 bool first, bool last, pl_train_master_t **tm_p);
/* The same stage at random: each tensor from its own stream of (seed, its index in model
 * order), so every split of one seed starts from the same weights. Norms 1; projections,
 * embedding and head uniform with standard deviation 1/sqrt(fan-in) (embedding: 0.02). */
pl_status_t pl_train_master_random(const pl_train_local_cfg_t *cfg, uint64_t seed, int l0,
                                   int l1, bool first, bool last, pl_train_master_t **tm_p);
/* The weights (layers indexed 0..n_layers-1; only the stage's set, the rest NULL). Borrowed. */
pl_train_weights_t *pl_train_master_weights(pl_train_master_t *tm);
void pl_train_master_destroy(pl_train_master_t **tm_p);

#endif
