/* A job's generation and sampling settings as one struct, shared by the job file (config.h), the
 * typed job (job_spec.h) and the runtime's job (pipeline/gen.h), so a new setting is one field. */
#ifndef PL_COMMON_JOB_GEN_H
#define PL_COMMON_JOB_GEN_H

#include "common/status.h"

#include <stdbool.h>
#include <stdint.h>

#define PL_JOB_MAX_NEW_TOKENS 65536
#define PL_JOB_MAX_PREFILL_CHUNK 65536
#define PL_JOB_MAX_STOP 8    /* stop strings of a job */
#define PL_JOB_STOP_MAX 127  /* bytes of one stop string */
#define PL_JOB_MAX_CHUNKS 64 /* entries of a prefill schedule */

/* A prefill schedule: the prompt tokens of one sequence in each prefill message, first to last.
 * The cuts are counted back from a prompt's end, so that every prompt ends in the last one
 * (where it is sampled) and where a prompt is cut depends on its own length only: the last
 * entry ends the prompt, the one before it ends where that one starts, and so on. A shorter
 * prompt drops the first entries (the first one it keeps may be cut short); a longer one takes
 * more of the first entry's size in front (then shorter at its very start). One entry c is the
 * fixed chunk of c tokens; none: whole prompts. */
typedef struct {
    int n;                      /* 0..PL_JOB_MAX_CHUNKS */
    int len[PL_JOB_MAX_CHUNKS]; /* each 1..PL_JOB_MAX_PREFILL_CHUNK */
} pl_job_chunks_t;

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
    int prefill_chunk; /* prompt tokens of one sequence per prefill message; 0 (default): whole */
    /* The planner's uneven chunks (TeraPipe-style: larger where attention is cheap); when set
     * (n > 0) they replace prefill_chunk, which then stays the equal chunk a stage that does not
     * know this field cuts by. The coordinator's decision in ASSIGN (a client's is replaced by
     * the plan's); a local run takes the spec's. */
    pl_job_chunks_t prefill_sched;
    char wire_dtype[8]; /* activations between stages: "f32" (default, "" too), "bf16", "f16" */
    /* Observability: each stage records its receive-wait, compute and send intervals
     * (pipeline/trace.h) and sends them with DONE for `pipectl trace`. Default true. */
    bool trace;
    /* Stop strings: a sequence ends when its decoded text contains one (finish "stop"); the
     * text is cut before it. Non-empty UTF-8; they need the model's tokenizer. */
    int n_stop;
    char stop[PL_JOB_MAX_STOP][PL_JOB_STOP_MAX + 1];
} pl_job_gen_t;

/* The schedule a generation's prefill runs: prefill_sched when set, else one entry of
 * prefill_chunk when that is set, else none (whole prompts). */
pl_job_chunks_t pl_job_chunks_of(const pl_job_gen_t *g);
/* Tokens of the next cut of a prompt of len tokens of which the first fed are sent
 * (0 <= fed < len): 1 .. len - fed. */
int pl_job_chunks_next(const pl_job_chunks_t *c, int len, int fed);
/* Cuts of a prompt of len >= 1 tokens: 1 with no entries. */
int pl_job_chunks_count(const pl_job_chunks_t *c, int len);
/* Tokens in the last j >= 0 cuts of a prompt long enough for them (INT64_MAX / 2 for j > 0 with no
 * entries: whole prompts). */
int64_t pl_job_chunks_tail(const pl_job_chunks_t *c, int j);
/* Check a schedule from outside: n in [0, PL_JOB_MAX_CHUNKS], every entry in
 * [1, PL_JOB_MAX_PREFILL_CHUNK]; PL_ERR_RANGE naming `field` and the entry. */
pl_status_t pl_job_chunks_check(const pl_job_chunks_t *c, const char *field);

#endif
