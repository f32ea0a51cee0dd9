/* Next-token choice from logits: greedy, or temperature / top-k / top-p with a seed. The random
 * draw depends only on (seed, sequence id, step) so any partition of the model gives the same
 * tokens. */
#ifndef PL_MODEL_SAMPLE_H
#define PL_MODEL_SAMPLE_H

#include <stdint.h>

typedef struct {
    float temperature; /* <= 0: greedy (argmax, lowest id wins ties) */
    int top_k;         /* 0: off */
    float top_p;       /* >= 1: off */
    uint64_t seed;
} pl_sample_params_t;

/* Choose a token id in [0, vocab). `scratch` holds at least 2 * vocab floats. */
int pl_sample(const float *logits, int vocab, const pl_sample_params_t *params, uint64_t seq_id,
              uint64_t step, float *scratch);

#endif
