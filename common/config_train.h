/* The training job file (`pipectl train TRAIN.yaml`): the model and how its weights start, the
 * data, the batch shape, the optimizer, the pipeline schedule and the checkpoints, as one value. */
#ifndef PL_COMMON_CONFIG_TRAIN_H
#define PL_COMMON_CONFIG_TRAIN_H

#include "common/config.h"

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#define PL_CFG_TRAIN_MAX_SEQ_LEN 65536
#define PL_CFG_TRAIN_MAX_STEPS 10000000
#define PL_CFG_TRAIN_MAX_BATCH 4096 /* sequences of one step (PL_TRAIN_MAX_MB microbatches) */
#define PL_CFG_TRAIN_MAX_REPLICAS 16

/* optimizer.*: AdamW with warmup, then cosine down to min_lr (or constant at lr). */
typedef struct {
    float lr, min_lr;      /* default 1e-3, 0 */
    int warmup_steps;      /* default 0; below `steps` */
    char lr_schedule[16];  /* "cosine" (default), "constant" (min_lr unused) */
    float beta1, beta2;    /* default 0.9, 0.999 */
    float eps;             /* default 1e-8 */
    float weight_decay;    /* default 0.01, decoupled */
    float clip_norm;       /* global gradient norm limit; default 0: none */
} pl_cfg_train_opt_t;

typedef struct {
    char model[PATH_MAX];       /* model directory (config.json, tokenizer), resolved */
    char init[16];              /* "weights" (default): from the model's files; "random" */
    uint64_t seed;              /* random init's seed, default 0 */
    char data_tokens[PATH_MAX]; /* data.tokens: token ids, decimal, whitespace-separated */
    char data_text[PATH_MAX];   /* data.text: UTF-8 text for the model's tokenizer */
    int seq_len;                /* tokens a sequence predicts (each window is seq_len + 1) */
    int micro_batch;            /* sequences per microbatch: 1 (the CPU trainer's) */
    int global_batch;           /* sequences per step: global_batch / micro_batch microbatches */
    int steps;                  /* optimizer steps */
    pl_cfg_train_opt_t opt;
    char schedule[16];          /* "auto" (default: the planner's choice), "gpipe", "1f1b", "zb-h1" */
    bool recompute;             /* keep only each layer's input from F to B; default false */
    int stages;                 /* pipeline stages; 0: the planner's choice */
    int replicas;               /* data-parallel pipelines, default 1 */
    int checkpoint_every;       /* steps between checkpoints; 0 (default): at the end only if a
                                 * checkpoint_dir is given */
    char checkpoint_dir[PATH_MAX];  /* "" : no checkpoints */
    char resume_from[PATH_MAX];     /* a checkpoint directory to continue from; "" : start anew */
    int n_nodes;                    /* placement.nodes; 0: any */
    char nodes[PL_CFG_MAX_NODES][PL_CFG_NAME_MAX + 1];
} pl_cfg_train_t;

/* Load from a path (errors carry path:line:col) or from text (errors carry `origin`); relative
 * paths are taken from `base_dir` (the file's directory; NULL: as written). */
pl_status_t pl_cfg_train_load(const char *path, pl_cfg_train_t *out);
pl_status_t pl_cfg_train_parse(const char *text, size_t len, const char *origin,
                               const char *base_dir, pl_cfg_train_t *out);

/* The same value as text that pl_cfg_train_parse reads back to it (a JSON-flow YAML document:
 * strings JSON-escaped, floats to 17 digits, defaults written out; empty strings left out): how
 * a training job travels in the job spec, so that one schema checks the file and the message.
 * *text_p is the caller's to free. */
pl_status_t pl_cfg_train_format(const pl_cfg_train_t *t, char **text_p);

#endif
