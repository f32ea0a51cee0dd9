/* The tokens a last stage has sampled, per sequence, kept for the node's main thread to report
 * to the coordinator (PROGRESS), so that a lost stage loses no work: the executor pushes, the
 * main thread takes what it has not reported yet. Thread-safe. */
#ifndef PL_PIPELINE_GEN_LOG_H
#define PL_PIPELINE_GEN_LOG_H

#include "transport/msg.h"

#include <stdint.h>

typedef struct pl_gen_log pl_gen_log_t;

pl_status_t pl_gen_log_create(int n_seqs, pl_gen_log_t **log_p);
void pl_gen_log_destroy(pl_gen_log_t **log_p);
/* Append sequence seq's next token; finish: what ended the sequence with it (PL_FINISH_NONE
 * while it runs on). A NULL log records nothing; out of memory drops the token from the report
 * (the stage's results still have it) and later ones of the sequence too. */
void pl_gen_log_push(pl_gen_log_t *log, int seq, int32_t token, pl_finish_t finish);
/* What no report carried yet, at most max_tokens tokens in all (a sequence's finish rides with
 * its last token), into m's entries (m's job, stage and epoch are the caller's). m->n_seqs 0:
 * nothing new. Free with pl_msg_clear. */
pl_status_t pl_gen_log_take(pl_gen_log_t *log, int max_tokens, pl_msg_gen_progress_t *m);
/* The entries of m were delivered: the next take starts after them. */
void pl_gen_log_commit(pl_gen_log_t *log, const pl_msg_gen_progress_t *m);
/* Report everything again from each sequence's first token (a new coordinator connection). */
void pl_gen_log_rewind(pl_gen_log_t *log);

#endif
