/* A job's generation and sampling settings as one struct, shared by the job file (config.h), the
 * typed job (job_spec.h) and the runtime's job (pipeline/gen.h), so a new setting is one field. */
#ifndef PL_COMMON_JOB_GEN_H
#define PL_COMMON_JOB_GEN_H

#include <stdbool.h>
#include <stdint.h>

#define PL_JOB_MAX_NEW_TOKENS 65536
#define PL_JOB_MAX_PREFILL_CHUNK 65536
#define PL_JOB_MAX_STOP 8      /* stop strings of a job */
#define PL_JOB_STOP_MAX 127    /* bytes of one stop string */

typedef struct {
    int max_new_tokens; /* 1..PL_JOB_MAX_NEW_TOKENS, default 16 */
    int min_new_tokens; /* 0..max_new_tokens: EOS is not sampled before this many; default 0 */
    bool stop_at_eos;   /* default true */
    /* Sampling: temperature 0 is greedy; top_k 0 and top_p 1 are off. */
    float temperature;
    int top_k;
    float top_p;
    uint64_t seed;
    /* The data plane. */
    int prefill_chunk;  /* prompt tokens of one sequence per prefill message; 0 (default): whole */
    char wire_dtype[8]; /* activations between stages: "f32" (default, "" too), "bf16", "f16" */
    /* Observability: each stage records its receive-wait, compute and send intervals
     * (pipeline/trace.h) and sends them with DONE for `pipectl trace`. Default true. */
    bool trace;
    /* Stop strings: a sequence ends when its decoded text contains one (finish "stop"); the
     * text is cut before it. Non-empty UTF-8; they need the model's tokenizer. */
    int n_stop;
    char stop[PL_JOB_MAX_STOP][PL_JOB_STOP_MAX + 1];
} pl_job_gen_t;

#endif
