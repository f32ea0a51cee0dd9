/* AdamW for a stage's training: f32 master weights (borrowed) with moments and gradient buffers
 * (owned) per tensor, accumulation over microbatches, global-norm clipping, warmup + cosine LR. */
#ifndef PL_PIPELINE_TRAIN_ADAMW_H
#define PL_PIPELINE_TRAIN_ADAMW_H

#include "common/status.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    float lr, min_lr;        /* peak and final learning rate */
    int warmup_steps;        /* linear from lr / warmup_steps up to lr */
    int total_steps;         /* cosine from lr at warmup_steps to min_lr at total_steps */
    float beta1, beta2, eps; /* the Adam moments */
    float weight_decay;      /* decoupled, on tensors added with decay */
    float clip_norm;         /* global gradient-norm limit; 0: no clipping */
} pl_adamw_cfg_t;

/* The usual settings: lr 1e-3, min_lr 0, no warmup, 1 step, betas 0.9 / 0.999, eps 1e-8,
 * weight decay 0.01, no clipping. */
pl_adamw_cfg_t pl_adamw_cfg_default(void);
/* Check every field (names the bad one in the error). */
pl_status_t pl_adamw_cfg_check(const pl_adamw_cfg_t *cfg);
/* The learning rate of 0-based step `step`. */
double pl_adamw_lr(const pl_adamw_cfg_t *cfg, int step);

typedef struct pl_adamw pl_adamw_t;

pl_status_t pl_adamw_create(const pl_adamw_cfg_t *cfg, pl_adamw_t **opt_p);
void pl_adamw_destroy(pl_adamw_t **opt_p);
/* Own the optimizer state of the n-float master tensor w (borrowed; updated in place by
 * pl_adamw_step); *grad_p gets its zeroed gradient buffer (the optimizer's) that backward
 * passes add into. */
pl_status_t pl_adamw_add(pl_adamw_t *opt, float *w, size_t n, bool decay, float **grad_p);
/* Zero every gradient buffer (the start of a step's accumulation). */
void pl_adamw_zero_grad(pl_adamw_t *opt);
/* This stage's sum of squared gradients, in double, tensors in the order added. */
double pl_adamw_grad_sumsq(const pl_adamw_t *opt);
/* One update with the gradients accumulated: clipped by clip_norm against sqrt(global_sumsq),
 * the sum of every stage's pl_adamw_grad_sumsq; then gradients are zeroed. Returns the
 * clipping factor applied (1 when none) through clip_p (may be NULL). */
void pl_adamw_step(pl_adamw_t *opt, double global_sumsq, float *clip_p);
/* Steps taken so far. */
int pl_adamw_steps(const pl_adamw_t *opt);
/* What a checkpoint saves and a resume restores: the tensors (in the order added), tensor i's
 * two moments (owned by the optimizer, i < pl_adamw_n_tensors) and the steps taken (their bias
 * corrections and the learning rate's position; PL_ERR_RANGE beyond total_steps). */
int pl_adamw_n_tensors(const pl_adamw_t *opt);
/* Tensor i's gradient buffer (owned by the optimizer), for a reduction across replicas. */
void pl_adamw_grad(pl_adamw_t *opt, int i, float **g_p, size_t *n_p);
void pl_adamw_moments(pl_adamw_t *opt, int i, float **m_p, float **v_p, size_t *n_p);
pl_status_t pl_adamw_set_steps(pl_adamw_t *opt, int steps);
/* Bytes of optimizer state (two moments) and gradients per float of weight. */
#define PL_ADAMW_STATE_BYTES_PER_PARAM 8
#define PL_ADAMW_GRAD_BYTES_PER_PARAM 4

#endif
