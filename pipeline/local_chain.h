/* A model's stages run back to back in one thread on one device: what the in-process runners
 * (gen_local.c for jobs, serve_local.c for requests) put each microbatch through. */
#ifndef PL_PIPELINE_LOCAL_CHAIN_H
#define PL_PIPELINE_LOCAL_CHAIN_H

#include "backends/backend.h"
#include "transport/act.h"

#define PL_LOCAL_CHAIN_MAX_STAGES 64

typedef struct {
    pl_be_stage_t *stage[PL_LOCAL_CHAIN_MAX_STAGES];
    int n_stages;
    pl_act_dtype_t wire; /* activations between stages are rounded as the wire would */
    int hidden;
    float *a, *b; /* ping-pong activations */
    int *ints;
    double compute_s; /* spent in forward calls so far */
} pl_local_chain_t;

/* Load the model's stages on dev: n_stages of counts[i] layers (counts NULL: one stage of every
 * layer), each for max_seqs sequences of max_ctx positions and max_tokens tokens per call.
 * PL_ERR_RANGE for a stage count outside 1..PL_LOCAL_CHAIN_MAX_STAGES, PL_ERR_INVALID for counts
 * that do not cover the model. On error whatever was loaded is unloaded. */
pl_status_t pl_local_chain_load(pl_local_chain_t *c, pl_be_device_t *dev, pl_model_t *model,
                                const int *counts, int n_stages, int max_seqs, int max_ctx,
                                int max_tokens, pl_act_dtype_t wire);
/* One message through every stage; the last stage's output (logits) in *out_p, valid until the
 * next call. */
pl_status_t pl_local_chain_run(pl_local_chain_t *c, const pl_act_hdr_t *hdr,
                               const pl_act_seq_t *seqs, const int32_t *tokens, float **out_p);
/* The KV slot back on every stage (its sequence finished). */
void pl_local_chain_free_seq(pl_local_chain_t *c, int slot);
/* Unload the stages and free the buffers; safe on a chain zeroed or unloaded already. */
void pl_local_chain_unload(pl_local_chain_t *c);

#endif
