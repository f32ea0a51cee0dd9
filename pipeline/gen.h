/* Generation bookkeeping shared by the pipeline executor and the in-process reference runner:
 * the feeder (stage 0: which tokens go in next) and the sink (last stage: sampling, stop rules,
 * collected outputs). Both speak in data-plane messages (transport/act.h). */
#ifndef PL_PIPELINE_GEN_H
#define PL_PIPELINE_GEN_H

#include "backends/backend.h"
#include "common/job_spec.h"
#include "model/sample.h"
#include "model/tokenizer.h"
#include "pipeline/gen_log.h"
#include "pipeline/gen_text.h"
#include "transport/act.h"
#include "transport/msg.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#define PL_GEN_MAX_SEQS PL_JOB_MAX_SEQS

typedef struct {
    int n_seqs;
    int32_t **prompts; /* [n_seqs][prompt_len[i]] */
    int *prompt_len;
    pl_job_gen_t gen;            /* the spec's generation settings */
    pl_sample_params_t sampling; /* gen's sampling settings, as the sampler takes them */
    int n_eos;
    int eos[PL_MODEL_MAX_EOS];
    int microbatches; /* sequence s belongs to microbatch s % microbatches */
    pl_act_dtype_t wire_dtype; /* gen.wire_dtype: how hidden states travel between stages */
    /* The model directory whose tokenizer decodes the completions (spec.text or stop strings);
     * "" when results are tokens only. */
    char text_model[PATH_MAX];
    /* A resumed job (pl_gen_job_resume): per sequence, the tokens an earlier assignment
     * generated, held at the end of prompts[s] (prompt_len[s] counts them, so the feeder
     * prefills them with the prompt), and the finish of a sequence that had already ended (0: it
     * runs on). Both NULL when nothing was resumed. */
    int *gen_len;
    int *finish0;
} pl_gen_job_t;

/* The runtime's job from the typed spec and the microbatch count the plan chose (0 or less: one
 * microbatch; at most one per sequence); the EOS ids come from the model config. Token ids are
 * checked against the vocabulary, prompt lengths (+ max_new_tokens) against the model's
 * positions. Free with pl_gen_job_clear. */
/* A job's generation settings kept as job->gen once its data-plane ones are checked (prefill_chunk,
 * wire_dtype, into job->wire_dtype): the one check of them for jobs and deployments alike. */
pl_status_t pl_gen_job_set_gen(pl_gen_job_t *job, const pl_job_gen_t *gen);
pl_status_t pl_gen_job_from_spec(const pl_job_spec_t *spec, int microbatches,
                                 const pl_model_config_t *cfg, pl_gen_job_t *job);
/* What text prompts are tokenized with: the model's tokenizer (NULL: the model has none, and a
 * text line is an error), the chat_format job key (NULL or "": the model's template) and the
 * model's positions (0: unchecked); a prompt plus max_new_tokens must fit them. */
typedef struct {
    const pl_tokenizer_t *tok;
    const char *chat_format;
    int max_pos;
    int max_new_tokens;
} pl_gen_prompts_ctx_t;
/* Parse prompts JSONL text into spec's prompts, replacing any it had. Each non-empty line is a
 * JSON array of token ids, {"text": "..."} (encoded with the model's special tokens) or
 * {"messages": [{"role", "content"}...]} (rendered by the chat template with the generation
 * prompt); text lines set spec->text. Errors name origin:line. ctx NULL: ids only. */
pl_status_t pl_gen_prompts_parse(const char *text, size_t len, const char *origin,
                                 const pl_gen_prompts_ctx_t *ctx, pl_job_spec_t *spec);
/* Whether any line of prompts JSONL is a JSON object ({"text"} or {"messages"}, which need the
 * model's tokenizer), not token ids; the same line rules as pl_gen_prompts_parse. */
bool pl_gen_prompts_have_text(const char *text, size_t len);
/* The spec of a job file: its settings, the model directory made absolute (it must exist) and
 * the prompts file read. *spec is set only on success (pl_job_spec_clear frees it). */
pl_status_t pl_gen_spec_from_file(const pl_cfg_job_t *cfg, pl_job_spec_t *spec);
/* The same with the prompts JSONL given (cfg->prompts unused; errors name `origin`). */
pl_status_t pl_gen_spec_from_prompts(const pl_cfg_job_t *cfg, const char *prompts, size_t len,
                                     const char *origin, pl_job_spec_t *spec);
void pl_gen_job_clear(pl_gen_job_t *job);
/* Continue job where an earlier assignment stopped: r[s] (n == job->n_seqs entries, prompt
 * order, as pl_msg_results_decode gives them) holds sequence s's tokens so far and its finish
 * (PL_FINISH_NONE: it runs on). Every count (max_new_tokens, min_new_tokens, sampling steps,
 * stop strings) stays counted from the original start, so the output is the undisturbed
 * run's. Token ids are checked against vocab, counts against max_new_tokens; on error the job
 * is unchanged. */
pl_status_t pl_gen_job_resume(pl_gen_job_t *job, const pl_msg_result_t *r, int n, int vocab);
/* Tokens of sequence s generated before this assignment (0 when the job was not resumed), and
 * its prompt's length without them. */
int pl_gen_job_resumed(const pl_gen_job_t *job, int s);
int pl_gen_job_prompt_base(const pl_gen_job_t *job, int s);
/* Whether sequence s had finished before this assignment (nothing is fed or sampled for it). */
bool pl_gen_job_was_done(const pl_gen_job_t *job, int s);
/* Bytes of one activation value on the links for this spec's wire dtype (4 for f32 and for an
 * unknown name, 2 for bf16 and f16): what the planner charges a link per hidden element. */
double pl_gen_spec_wire_bytes(const pl_job_spec_t *spec);
/* Largest context any sequence reaches, and largest token count of one microbatch message. */
int pl_gen_job_max_ctx(const pl_gen_job_t *job);
int pl_gen_job_max_tokens(const pl_gen_job_t *job);
/* Sequences in microbatch mb. */
int pl_gen_job_mb_size(const pl_gen_job_t *job, int mb);

/* Convert the sequence entries of a message to a backend batch (arrays of n_seq ints each, held
 * in `ints`, which needs room for 3 * n_seq). */
void pl_gen_batch(const pl_act_hdr_t *hdr, const pl_act_seq_t *seqs, int *ints,
                  pl_be_batch_t *batch);

typedef struct pl_gen_feed pl_gen_feed_t;
pl_status_t pl_gen_feed_create(const pl_gen_job_t *job, pl_gen_feed_t **feed_p);
void pl_gen_feed_destroy(pl_gen_feed_t **feed_p);
/* Prefill messages of microbatch mb: its prompts cut by the job's schedule (pl_job_chunks_of:
 * the plan's uneven chunks, else chunks of job->prefill_chunk tokens per sequence, else whole),
 * aligned on the prompts' ends, so that every sequence of the microbatch ends its prompt in the
 * last chunk (and is sampled there), while a sequence's first chunk may be short. */
int pl_gen_feed_prefill_chunks(const pl_gen_feed_t *feed, int mb);
/* Prefill chunk `chunk` (0 .. chunks - 1, in order) of microbatch mb: header, entries and the
 * prompt tokens (n_tokens). Sequences with no tokens in the chunk are left out. */
void pl_gen_feed_prefill(pl_gen_feed_t *feed, uint32_t job_id, int mb, int chunk,
                         pl_act_hdr_t *hdr, pl_act_seq_t *seqs, int32_t *tokens);
/* Given the sampled tokens of a microbatch (a PL_ACT_TOKENS message), the next decode message:
 * unfinished sequences with their new token at their next position. hdr->n_seq == 0 means the
 * microbatch is finished. PL_ERR_PROTOCOL if the message does not fit what was sent. */
pl_status_t pl_gen_feed_decode(pl_gen_feed_t *feed, const pl_act_hdr_t *in,
                               const pl_act_seq_t *in_seqs, pl_act_hdr_t *hdr, pl_act_seq_t *seqs,
                               int32_t *tokens);
/* Microbatches not yet finished. */
int pl_gen_feed_active(const pl_gen_feed_t *feed);

/* One sequence's next token from its logits row (the one home of the sampling rules, for the
 * job's sink and the serving sink): EOS cannot be drawn before gen->min_new_tokens, the draw
 * depends only on (seed, stream, step), stream being the sequence's own id. *finish_p is
 * PL_FINISH_EOS (an EOS id with stop_at_eos) or PL_FINISH_LENGTH (step + 1 reaches
 * max_new_tokens) when the sequence ends with this token, else PL_FINISH_NONE. scratch holds
 * 3 * vocab floats. */
int pl_gen_sample_next(const float *row, int vocab, const pl_job_gen_t *gen,
                       const pl_sample_params_t *sampling, const int *eos, int n_eos,
                       uint64_t stream, int step, float *scratch, pl_finish_t *finish_p);

typedef struct pl_gen_sink pl_gen_sink_t;
pl_status_t pl_gen_sink_create(const pl_gen_job_t *job, int vocab, pl_gen_sink_t **sink_p);
void pl_gen_sink_destroy(pl_gen_sink_t **sink_p);
/* Sample one token per sequence of the message `hdr`/`seqs` from logits [n_seq][vocab], record
 * them, and fill the PL_ACT_TOKENS message for stage 0 with the sampled entries, in order. An
 * entry that ends inside its prompt (an earlier prefill chunk) samples nothing, so a message of
 * such entries only gives out->n_seq 0, and nothing is to be sent. Every other entry must end
 * where its sequence stands (its prompt, plus the tokens sampled so far), each sequence once;
 * else PL_ERR_PROTOCOL and nothing recorded. */
pl_status_t pl_gen_sink_sample(pl_gen_sink_t *sink, const pl_act_hdr_t *hdr,
                               const pl_act_seq_t *seqs, const float *logits, pl_act_hdr_t *out,
                               pl_act_seq_t *out_seqs);
/* The rule both sinks (this one and serve_sink.h) sample by: entry e of a sequence of prompt_len
 * tokens, of which `sampled` were sampled in this assignment, ends inside its prompt (an earlier
 * prefill chunk), so it samples nothing and needs no logits. */
static inline bool pl_gen_in_prompt(int sampled, const pl_act_seq_t *e, int prompt_len)
{
    return sampled == 0 && (uint64_t)e->pos0 + e->n_tok < (uint64_t)prompt_len;
}
/* Whether pl_gen_sink_sample would read logits for this message: false when every entry ends
 * inside its prompt (an earlier prefill chunk), so the forward call may skip the LM head. */
bool pl_gen_sink_wants_logits(const pl_gen_sink_t *sink, const pl_act_hdr_t *hdr,
                              const pl_act_seq_t *seqs);
/* True when every sequence has finished. */
bool pl_gen_sink_done(const pl_gen_sink_t *sink);
/* Results in prompt order, as DONE carries them (*r_p: free with pl_msg_results_free). */
pl_status_t pl_gen_sink_collect(const pl_gen_sink_t *sink, pl_msg_result_t **r_p, int *n_p);
/* The same as JSON: [{"seq": i, "tokens": [...], "text" (a text job), "finish":
 * "eos"|"length"|"stop"}]. New ref; NULL when out of memory. */
json_t *pl_gen_sink_results(const pl_gen_sink_t *sink);
/* Tokens generated so far, and how many of them came from prefill (first tokens). */
uint64_t pl_gen_sink_generated(const pl_gen_sink_t *sink);
/* The text decoder of a text job (borrowed; NULL for a tokens-only job). */
const pl_gen_text_t *pl_gen_sink_text(const pl_gen_sink_t *sink);
/* Record every token in log from now on (borrowed, may be NULL), after the ones the sink holds
 * already (a resumed job's), so the log has each sequence from its first token. */
void pl_gen_sink_set_log(pl_gen_sink_t *sink, pl_gen_log_t *log);
/* Time (pl_now) at which the last sequence got its first token of this assignment; 0 before. */
double pl_gen_sink_prefill_done_at(const pl_gen_sink_t *sink);

#endif
