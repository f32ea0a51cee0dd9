/* Continuous batching at stage 0: the table of live sequences and the rule that forms each
 * microbatch from them. Pure logic (no I/O): the executor sends what it is given and hands back
 * the tokens that return. */
#ifndef PL_PIPELINE_BATCH_H
#define PL_PIPELINE_BATCH_H

#include "common/job_gen.h"
#include "common/status.h"
#include "transport/act.h"

#include <stdbool.h>
#include <stdint.h>

/* Bounds: sequences in the table (queued + live) and lanes. */
#define PL_BATCH_MAX_SEQS 65536
#define PL_BATCH_MAX_LANES 1024

typedef struct {
    int n_slots;     /* KV slots every stage has (the smallest figure): live sequences at most */
    int lanes;       /* microbatches in flight at most; at least the number of stages */
    int step_tokens; /* tokens of one microbatch at most */
    /* Prompt tokens of one sequence per message at most (0: step_tokens; larger: step_tokens).
     * A prompt's chunks are counted back from its end, so where it is cut depends on its own
     * length only, never on what else is in the batch. */
    int chunk;
    /* Uneven chunks (common/job_gen.h's rule, counted back from the end too) instead of chunk
     * when n > 0; entries above step_tokens are taken as step_tokens. */
    pl_job_chunks_t sched;
    int max_queue; /* sequences waiting for a slot at most (0: none may wait) */
} pl_batch_params_t;

/* What the tokens of a lane did to one sequence. */
typedef struct {
    uint64_t id;
    int slot;
    int32_t token;   /* the token sampled (-1 for a sequence that left without one) */
    bool left;       /* the sequence left: its slot is free again (free its KV everywhere) */
    bool canceled;   /* it left because it was canceled */
} pl_batch_event_t;

typedef struct {
    uint64_t admitted;         /* sequences given a slot */
    uint64_t admitted_mid;     /* ... while another live sequence was already decoding */
    uint64_t left;             /* sequences that left (finished or canceled) */
    uint64_t canceled;         /* of those, canceled */
    uint64_t microbatches;     /* microbatches formed */
    uint64_t mixed;            /* ... that held prompt tokens and decode tokens both */
    uint64_t tokens;           /* tokens sampled */
    int live, queued, in_flight; /* now: sequences with a slot, waiting, lanes awaiting tokens */
    int max_in_flight;         /* most lanes awaiting tokens at once */
} pl_batch_stats_t;

/* A formed microbatch: its lane, its tokens, whether it holds prompt tokens, and whether its
 * lane now awaits tokens (false: earlier prompt chunks only, the lane is free at once). */
typedef struct {
    int lane;
    int n_tokens;
    bool prompt;
    bool awaits;
} pl_batch_mb_t;

typedef struct pl_batch pl_batch_t;

/* A table for these bounds; PL_ERR_INVALID naming the field when one is out of range. */
pl_status_t pl_batch_create(const pl_batch_params_t *params, pl_batch_t **batch_p);
void pl_batch_destroy(pl_batch_t **batch_p);

/* Queue a sequence (prompt copied; len >= 1; max_new >= 1 tokens it may sample; id unique among
 * the table's sequences). It takes the lowest free slot, in arrival order, when one is free.
 * PL_ERR_BUSY when max_queue sequences already wait; PL_ERR_INVALID for a bad argument. */
pl_status_t pl_batch_add(pl_batch_t *b, uint64_t id, const int32_t *prompt, int len,
                         int max_new);

/* The next microbatch, for a lane that awaits nothing: the sequences waiting for a slot are
 * admitted first, then the live sequences not in flight are taken, decode tokens first (oldest
 * first), then prompt chunks (in admission order, stopping at the first that does not fit),
 * under step_tokens and at most ceil(live / lanes) sequences, so that they spread over the
 * lanes. Fills seqs (seq = the KV slot), tokens (laid out entry after entry) and *mb, and
 * returns the entry count; 0 when there is nothing to send or no lane free.
 * A lane whose message samples nothing (prompt chunks only, none ending its prompt) is free
 * again at once; the sequences of such chunks can go on in the next message, since a stage
 * takes its messages in order. seqs needs room for n_slots entries, tokens for step_tokens. */
int pl_batch_next(pl_batch_t *b, pl_act_seq_t *seqs, int32_t *tokens, pl_batch_mb_t *mb);

/* The sampled tokens of lane `lane` came back (the entries of a PL_ACT_TOKENS message: seq =
 * slot, token, flags PL_ACT_FINISHED). They must be exactly the lane's entries that end their
 * prompt or decode, else PL_ERR_PROTOCOL and nothing changes. A finished, canceled or
 * max_new-long sequence leaves at once: its slot is free for the next admission. Events (one per
 * entry, in order) go to ev (room for n_slots), their count to *n_ev_p. */
pl_status_t pl_batch_tokens(pl_batch_t *b, int lane, const pl_act_seq_t *in, uint32_t n_in,
                            pl_batch_event_t *ev, int *n_ev_p);

/* Cancel sequence id. Queued: it is dropped. Live and not in flight: it leaves now. In flight:
 * it leaves when its lane's tokens come back (an event with canceled set). Returns true and the
 * event in *ev when it left now (ev->slot -1 when it had no slot); false otherwise, also when id
 * is unknown. */
bool pl_batch_cancel(pl_batch_t *b, uint64_t id, pl_batch_event_t *ev);

/* The id of the sequence in `slot`; false when the slot is free (or out of range). */
bool pl_batch_slot_id(const pl_batch_t *b, int slot, uint64_t *id_p);
/* Sequences in the table (queued + live), and the counters. */
int pl_batch_count(const pl_batch_t *b);
void pl_batch_stats(const pl_batch_t *b, pl_batch_stats_t *stats);

#endif
