/* The in-process pipelined trainer: a model's layers split into S stages, each stage running its
 * schedule's op list (scheduler/train_sched.h) in one process, activations and gradients passed
 * between stages through per-link mailboxes. The reference the distributed trainer will match. */
#ifndef PL_PIPELINE_TRAIN_LOCAL_H
#define PL_PIPELINE_TRAIN_LOCAL_H

#include "backends/cpu/cpu_train_layer.h"
#include "common/train_ops.h"
#include "pipeline/train_adamw.h"

#include <stdint.h>

/* A Llama model's f32 master weights (borrowed; the trainer updates them in place). */
typedef struct {
    float *embed;            /* [vocab][hidden] */
    pl_cpu_tlayer_t *layers; /* [n_layers] */
    float *final_norm;       /* [hidden] */
    float *head;             /* [vocab][hidden], untied */
} pl_train_weights_t;

typedef struct {
    pl_cpu_tdims_t dims;
    int n_layers, vocab, seq_len;
    int n_mb;               /* microbatches of one sequence each per step */
    const double *inv_freq; /* [head_dim / 2] (pl_model_rope_inv_freq) */
    bool recompute;         /* keep only each layer's input from F to B */
    pl_adamw_cfg_t opt;
} pl_train_local_cfg_t;

typedef struct pl_train_local pl_train_local_t;

/* A trainer over w with n_stages stages of counts[i] layers (summing to n_layers) running
 * schedule sched (n_stages and n_mb matching cfg; borrowed, must outlive the trainer). */
pl_status_t pl_train_local_create(const pl_train_local_cfg_t *cfg, pl_train_weights_t *w,
                                  const int *counts, int n_stages, const pl_train_ops_t *sched,
                                  pl_train_local_t **tl_p);
void pl_train_local_destroy(pl_train_local_t **tl_p);
/* Stage `stage`'s optimizer (borrowed): what checkpoints save and a resume restores. */
pl_adamw_t *pl_train_local_opt(pl_train_local_t *tl, int stage);

typedef struct {
    double loss;                                  /* mean cross-entropy per token over the step */
    double grad_norm;                             /* global gradient norm before clipping */
    float clip;                                   /* clipping factor applied */
    size_t peak_stash_bytes[PL_TRAIN_MAX_STAGES]; /* most activation bytes a stage held */
} pl_train_step_t;

/* One optimizer step over n_mb sequences tokens [n_mb][seq_len + 1] (each predicts its next
 * token; ids checked < vocab): every stage runs its op list, then the global norm is summed over
 * stages and each stage's AdamW steps. */
pl_status_t pl_train_local_step(pl_train_local_t *tl, const int32_t *tokens, pl_train_step_t *out);

#endif
