/* One Llama decoder layer for training in f32: a forward that stashes what the backward needs
 * (or only its input, to recompute), and the backward split into input grad (B) and weight grad
 * (W). */
#ifndef PL_BACKENDS_CPU_CPU_TRAIN_LAYER_H
#define PL_BACKENDS_CPU_CPU_TRAIN_LAYER_H

#include "common/status.h"

#include <stdbool.h>
#include <stddef.h>

/* A layer's shape. */
typedef struct {
    int hidden, inter, n_heads, n_kv, head_dim;
    float eps;
} pl_cpu_tdims_t;

/* A layer's f32 tensors (weights, or their gradients in the same layout), row-major
 * [out][in] for the projections. Borrowed. */
typedef struct {
    float *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *wg, *wu, *wd;
} pl_cpu_tlayer_t;

/* Floats in each tensor of a layer of shape d, in the order of pl_cpu_tlayer_t's fields. */
void pl_cpu_tlayer_sizes(const pl_cpu_tdims_t *d, size_t sizes[9]);
/* Field i of a pl_cpu_tlayer_t (0..8, the order above). */
float **pl_cpu_tlayer_field(pl_cpu_tlayer_t *l, int i);

/* One microbatch's activations of one layer, from its forward until its weight gradient. */
typedef struct pl_cpu_tstash pl_cpu_tstash_t;

/* A stash for sequences of n_tok tokens; recompute: F keeps only the layer's input and B
 * recomputes the rest. Holds nothing until a forward. */
pl_status_t pl_cpu_tstash_create(const pl_cpu_tdims_t *d, int n_tok, bool recompute,
                                 pl_cpu_tstash_t **st_p);
void pl_cpu_tstash_destroy(pl_cpu_tstash_t **st_p);
/* Bytes the stash holds now (what the schedule's memory prediction counts). */
size_t pl_cpu_tstash_bytes(const pl_cpu_tstash_t *st);
/* Bytes kept between F and B, and the extra bytes held between B and W, for such a stash. */
size_t pl_cpu_tstash_f_bytes(const pl_cpu_tdims_t *d, int n_tok, bool recompute);
size_t pl_cpu_tstash_b_bytes(const pl_cpu_tdims_t *d, int n_tok, bool recompute);

/* y [n_tok][hidden] = layer(x), positions 0..n_tok-1 rotated by cos/sin tables [n_tok][hd/2];
 * st records what B and W need. st must be empty (new, or after W). */
pl_status_t pl_cpu_tlayer_forward(const pl_cpu_tdims_t *d, const pl_cpu_tlayer_t *w,
                                  const float *cos_tab, const float *sin_tab, const float *x,
                                  pl_cpu_tstash_t *st, float *y);
/* B: dx = dL/dx from dy (dx may alias dy), after the forward on st; keeps in st the gradients
 * W needs. */
pl_status_t pl_cpu_tlayer_backward_input(const pl_cpu_tdims_t *d, const pl_cpu_tlayer_t *w,
                                         const float *cos_tab, const float *sin_tab,
                                         pl_cpu_tstash_t *st, const float *dy, float *dx);
/* W: adds the weight gradients to g and empties st. */
void pl_cpu_tlayer_backward_weight(const pl_cpu_tdims_t *d, pl_cpu_tstash_t *st,
                                   pl_cpu_tlayer_t *g);

#endif
