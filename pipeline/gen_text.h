/* The text of a generation's completions, at the last stage: sampled tokens decoded as they
 * arrive (a character split across tokens held until complete) and each sequence's stop
 * strings. */
#ifndef PL_PIPELINE_GEN_TEXT_H
#define PL_PIPELINE_GEN_TEXT_H

#include "common/job_gen.h"
#include "common/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct pl_gen_text pl_gen_text_t;

/* Load the tokenizer of model_dir (its tokenizer.json) for n_seqs sequences with gen's stop
 * strings. Special tokens (EOS...) are left out of the text. */
pl_status_t pl_gen_text_create(const char *model_dir, int n_seqs, const pl_job_gen_t *gen,
                               pl_gen_text_t **text_p);
void pl_gen_text_destroy(pl_gen_text_t **text_p);
/* Sequence seq starts again, empty, with gen's stop strings: a deployment's slot taking its
 * next request. */
pl_status_t pl_gen_text_begin(pl_gen_text_t *t, int seq, const pl_job_gen_t *gen);
/* Append sequence seq's next token; `last`: the sequence ends with it (a held incomplete
 * character becomes U+FFFD). *stopped_p: the text now contains a stop string and was cut before
 * it; the sequence is over. PL_ERR_RANGE for a token the tokenizer lacks. */
pl_status_t pl_gen_text_push(pl_gen_text_t *t, int seq, int32_t token, bool last, bool *stopped_p);
/* The text of seq so far (NUL-terminated, borrowed until the next push). */
const char *pl_gen_text_get(const pl_gen_text_t *t, int seq, size_t *len_p);
/* How many leading bytes of seq's text no later token can change: all of it once the sequence
 * ended, else all but what could still turn out to begin a stop string. Streaming sends these. */
size_t pl_gen_text_stable(const pl_gen_text_t *t, int seq);

#endif
