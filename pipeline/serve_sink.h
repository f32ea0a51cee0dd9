/* The last stage of a deployment: sampling per KV slot, each slot holding one request at a time
 * with its own settings, so that a request's tokens depend on nothing but itself. */
#ifndef PL_PIPELINE_SERVE_SINK_H
#define PL_PIPELINE_SERVE_SINK_H

#include "common/job_gen.h"
#include "common/status.h"
#include "model/model.h"
#include "transport/act.h"
#include "transport/msg.h"

#include <stdint.h>

/* What the sink needs of a sequence when it takes a slot. */
typedef struct {
    uint64_t stream; /* the sampler's sequence id: 0 for a request (as the same prompt alone in
                      * a one-prompt job), the prompt's index for a job's sequence */
    int prompt_len;  /* >= 1 */
    pl_job_gen_t gen; /* max_new_tokens, min_new_tokens, stop_at_eos, sampling */
    /* A resumed sequence: the last `resumed` tokens of its prompt were sampled before (the
     * tokens, borrowed for pl_serve_sink_begin, in `earlier`); sampling goes on at step
     * `resumed`, and gen counts from the original start (max_new_tokens includes them), so its
     * tokens, text and stops are the undisturbed run's. 0 / NULL: a new sequence. */
    int resumed;
    const int32_t *earlier;
} pl_serve_seq_t;

/* What one sampled entry did. */
typedef struct {
    int slot;
    int32_t token;
    pl_finish_t finish; /* PL_FINISH_NONE while it goes on; PL_FINISH_STOP: a stop string */
} pl_serve_out_t;

typedef struct pl_serve_sink pl_serve_sink_t;

/* n_slots slots over a vocabulary, with the model's EOS ids; text_model (NULL or "": tokens
 * only) is the model directory whose tokenizer decodes each slot's completion and checks its
 * request's stop strings (gen_text.h). */
pl_status_t pl_serve_sink_create(int n_slots, int vocab, const int *eos, int n_eos,
                                 const char *text_model, pl_serve_sink_t **sink_p);
void pl_serve_sink_destroy(pl_serve_sink_t **sink_p);
/* Whether seq's settings are in range (PL_ERR_INVALID naming the one that is not). */
pl_status_t pl_serve_seq_check(const pl_serve_seq_t *seq);
/* Whether the sink decodes text (it was given a model with a tokenizer): stop strings need it. */
bool pl_serve_sink_has_text(const pl_serve_sink_t *k);
/* A sequence takes `slot`; PL_ERR_PROTOCOL when it is out of range or taken, PL_ERR_INVALID for
 * settings out of range. */
pl_status_t pl_serve_sink_begin(pl_serve_sink_t *k, int slot, const pl_serve_seq_t *seq);
/* The completion of the slot's sequence as text so far (borrowed until the next sample) and, in
 * *stable_p, how many leading bytes no later token changes (what may be streamed); NULL for a
 * tokens-only sink or a free slot. */
const char *pl_serve_sink_text(const pl_serve_sink_t *k, int slot, size_t *len_p,
                               size_t *stable_p);
/* The slot is free again (its sequence finished or was canceled); a free slot is ignored. */
void pl_serve_sink_end(pl_serve_sink_t *k, int slot);
/* As pl_gen_sink_sample, per slot: entries (seq = slot) that end inside their prompt sample
 * nothing; the others must end where their sequence stands and are sampled into the
 * PL_ACT_TOKENS message out/out_seqs and outs[] (one per sampled entry, in order). A sequence
 * that finishes keeps its slot until pl_serve_sink_end. PL_ERR_PROTOCOL (nothing recorded) for
 * an entry that does not fit. */
pl_status_t pl_serve_sink_sample(pl_serve_sink_t *k, const pl_act_hdr_t *hdr,
                                 const pl_act_seq_t *seqs, const float *logits,
                                 pl_act_hdr_t *out, pl_act_seq_t *out_seqs, pl_serve_out_t *outs);
/* Whether pl_serve_sink_sample would read logits for this message: false when every entry ends
 * inside its prompt (pl_gen_in_prompt), so the forward call may skip the LM head. */
bool pl_serve_sink_wants_logits(const pl_serve_sink_t *k, const pl_act_hdr_t *hdr,
                                const pl_act_seq_t *seqs);

#endif
