/* One training stage's compute and state: its layers' stashes, gradients and AdamW, and the F, B
 * and W of a microbatch. Shared by the in-process trainer (train_local.c) and the distributed one
 * (train_exec.c), which differ only in how activations and gradients reach a stage. */
#ifndef PL_PIPELINE_TRAIN_STAGE_H
#define PL_PIPELINE_TRAIN_STAGE_H

#include "backends/cpu/cpu_train_head.h"
#include "pipeline/train_local.h"

typedef struct {
    const pl_train_local_cfg_t *cfg; /* borrowed */
    pl_train_weights_t *w;           /* borrowed; only this stage's tensors are touched */
    const float *cos_tab, *sin_tab;  /* borrowed rope tables [seq_len][head_dim / 2] */
    int l0, l1;                      /* layers [l0, l1) */
    bool first, last;
    pl_adamw_t *opt;
    pl_cpu_tlayer_t *grads; /* [l1 - l0] into the optimizer's buffers */
    float *g_embed, *g_norm, *g_head;
    pl_cpu_tstash_t **stash;                /* [(l1 - l0) * n_mb] */
    pl_cpu_thead_t **head;                  /* [n_mb], last stage */
    float **x_in, **y_out, **g_in, **g_out; /* [n_mb] each, seq_len * hidden */
    float *tmp;
    const int32_t *tokens; /* the step's [n_mb][seq_len + 1], borrowed during a step */
    double loss_sum;       /* last stage: the step's summed (scaled) losses */
} pl_train_stage_t;

/* Set up stage g (zeroed by the caller) over layers [l0, l1) of w; first / last say whether it
 * embeds and whether it holds the head and the loss. On error g is left for _fini. */
pl_status_t pl_train_stage_init(pl_train_stage_t *g, const pl_train_local_cfg_t *cfg,
                                pl_train_weights_t *w, const float *cos_tab, const float *sin_tab,
                                int l0, int l1, bool first, bool last);
/* Free what init made; safe on a stage that init left half-made, and twice. */
void pl_train_stage_fini(pl_train_stage_t *g);
/* The rope tables for positions 0 .. seq_len - 1 (caller frees both). */
pl_status_t pl_train_rope_tables(const pl_train_local_cfg_t *cfg, float **cos_p, float **sin_p);
/* PL_ERR_RANGE naming the first token id of the step not below vocab. */
pl_status_t pl_train_tokens_check(const pl_train_local_cfg_t *cfg, const int32_t *tokens);

/* Forward of microbatch m (from x_in[m], or the embedding on the first stage) into y_out[m];
 * the last stage adds its loss to loss_sum. */
pl_status_t pl_train_stage_forward(pl_train_stage_t *g, int m);
/* Input gradient of m into g_out[m] (from g_in[m], or the loss on the last stage). */
pl_status_t pl_train_stage_backward_input(pl_train_stage_t *g, int m);
/* Weight gradient of m, added into the optimizer's buffers. */
void pl_train_stage_backward_weight(pl_train_stage_t *g, int m);
/* Activation bytes the stage holds now. */
size_t pl_train_stage_stash_bytes(const pl_train_stage_t *g);
/* Drop a failed step's gradients and stashes (the weights were not touched). */
pl_status_t pl_train_stage_reset(pl_train_stage_t *g);

/* n buffers of `floats` floats each (NULL when out of memory, nothing left allocated), and
 * their release (safe on NULL): a microbatch's slots, for both trainers. */
float **pl_train_bufs_new(int n, size_t floats);
void pl_train_bufs_free(float **b, int n);

#endif
