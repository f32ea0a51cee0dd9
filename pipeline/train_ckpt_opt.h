/* What a resume needs beside the weights: each stage's AdamW moments as
 * optimizer-0000k-of-0000n.safetensors (NAME.exp_avg, NAME.exp_avg_sq under the weights' HF
 * names) and trainer_state.json (steps taken, the next step's learning rate, the data position). */
#ifndef PL_PIPELINE_TRAIN_CKPT_OPT_H
#define PL_PIPELINE_TRAIN_CKPT_OPT_H

#include "pipeline/train_local.h"

#include <stdint.h>

/* Stage `stage` of n_stages (layers [l0, l1)): opt's moments, its tensors in the stage's
 * checkpoint order (train_stage.c adds them so). */
pl_status_t pl_train_ckpt_opt_write(const char *dir, const pl_train_local_cfg_t *cfg,
                                    pl_adamw_t *opt, int stage, int n_stages, int l0, int l1);
/* Restore them: every tensor present, F32, of the stage's shape (checked for all before any is
 * copied: on error opt is untouched). The steps come from the state file. */
pl_status_t pl_train_ckpt_opt_read(const char *dir, const pl_train_local_cfg_t *cfg,
                                   pl_adamw_t *opt, int stage, int n_stages, int l0, int l1);

/* Whether the files stage `stage` of n_stages reads to resume from dir are there on this node:
 * the state, config.json, the shard index, its weights and its optimizer state. PL_ERR_NOT_FOUND
 * naming the missing file and why it may be missing (each stage writes its part of a checkpoint
 * on its own node: the nodes must share one file system, or the checkpoint be copied). */
pl_status_t pl_train_ckpt_stage_readable(const char *dir, int stage, int n_stages);

typedef struct {
    int step;           /* optimizer steps taken */
    int n_stages;       /* the split that wrote the optimizer files */
    int64_t data_step;  /* the next step's windows (pl_train_data_step) */
    double lr;          /* the learning rate the next step uses (informational) */
    int split[PL_TRAIN_MAX_STAGES]; /* layers per stage (n_stages of them), so that a resume
                                     * makes the same stages; all 0 when the file has none */
    char schedule[16]; /* the schedule that ran (pl_train_kind_name), which a resume keeps too;
                        * "" when the file has none */
} pl_train_state_t;

/* dir/trainer_state.json, written to a temporary file and renamed. */
pl_status_t pl_train_ckpt_state_write(const char *dir, const pl_train_state_t *st);
/* Read and check it (every field present, an integer in range; errors name the field; "split",
 * when there, n_stages layer counts of 1..4096; "schedule", when there, a schedule's name). */
pl_status_t pl_train_ckpt_state_read(const char *dir, pl_train_state_t *st);

#endif
