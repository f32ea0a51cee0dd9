/* The training ends of the model on the CPU: the embedding (first stage) and the final norm, LM
 * head and cross-entropy (last stage), each with separate input-gradient and weight-gradient calls.
 */
#ifndef PL_BACKENDS_CPU_CPU_TRAIN_HEAD_H
#define PL_BACKENDS_CPU_CPU_TRAIN_HEAD_H

#include "common/status.h"

#include <stddef.h>
#include <stdint.h>

/* One microbatch's head activations, from the forward until the weight gradient. */
typedef struct pl_cpu_thead pl_cpu_thead_t;

pl_status_t pl_cpu_thead_create(int n_tok, int hidden, int vocab, float eps, pl_cpu_thead_t **h_p);
void pl_cpu_thead_destroy(pl_cpu_thead_t **h_p);
/* Bytes held now. */
size_t pl_cpu_thead_bytes(const pl_cpu_thead_t *h);

/* Forward and loss: logits = rmsnorm(x; norm) @ head^T, returns (through loss_p) the summed
 * cross-entropy against targets (checked < vocab) and keeps scale * dL/dlogits for B and W. */
pl_status_t pl_cpu_thead_forward(pl_cpu_thead_t *h, const float *norm, const float *head,
                                 const float *x, const int32_t *targets, float scale,
                                 double *loss_p);
/* B: dx [n_tok][hidden] of the scaled loss. */
pl_status_t pl_cpu_thead_backward_input(pl_cpu_thead_t *h, const float *norm, const float *head,
                                        float *dx);
/* W: dnorm, dhead += their gradients; empties h. */
void pl_cpu_thead_backward_weight(pl_cpu_thead_t *h, float *dnorm, float *dhead);

/* Embedding forward of n ids into out [n][hidden] from an f32 table; ids checked < vocab. */
pl_status_t pl_cpu_tembed_forward(const float *table, int vocab, int hidden, const int32_t *ids,
                                  int n, float *out);

#endif
