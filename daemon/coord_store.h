/* The coordinator's durable state in SQLite (WAL, synchronous=FULL): one row per job (state,
 * plan, results; a SUBMIT's spec apart, in the specs file: coord_specs.h) and the counters that
 * never repeat (job, epoch). The loop's connection; the client intake writes the specs file. */
#ifndef PL_DAEMON_COORD_STORE_H
#define PL_DAEMON_COORD_STORE_H

#include "common/status.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct pl_coord_store pl_coord_store_t;

/* One job as stored; the strings are JSON (spec, plan, results) or plain text (state, error).
 * Borrowed in both directions: save reads them, load's callback must copy what it keeps. */
typedef struct {
    int64_t id;
    const char *state;
    const char *spec;    /* pl_job_spec_encode's JSON; read back NULL when it is missing */
    const char *plan;    /* NULL: none */
    const char *results; /* NULL: none; pl_msg_results_encode's array */
    const char *error;
    int64_t generated, n_seqs, n_layers, prompt_tokens, epoch;
    double submitted_at, ended_at; /* Unix seconds; ended_at 0: not ended */
    const char *events;            /* NULL: none; coord_event.c's JSON array */
    const char *train;             /* NULL: none; a training job's progress (coord_train_row.c) */
} pl_coord_row_t;

/* Open (creating when missing) the database at path. */
pl_status_t pl_coord_store_open(const char *path, pl_coord_store_t **store_p);
void pl_coord_store_close(pl_coord_store_t **store_p);

/* The counters: next job id and next epoch, at least 1. */
pl_status_t pl_coord_store_counters(pl_coord_store_t *s, uint32_t *next_job_p,
                                    uint32_t *next_epoch_p);
/* At start, before any other connection writes specs: the specs file (made when missing)
 * attached to this connection; the specs a database of the last version kept inside it moved
 * there (crash-safe: copied, then dropped here); specs without a job row dropped. Until detach,
 * pl_coord_store_each reads each row's spec from there. Errors name the file. */
pl_status_t pl_coord_store_specs_attach(pl_coord_store_t *s, const char *specs_path);
/* Detached again, so that this connection's transactions never lock the specs file. */
void pl_coord_store_specs_detach(pl_coord_store_t *s);
/* Every job row in id order through fn (a non-zero return stops the walk and is returned); a
 * row's spec from the specs file when attached, else its own; NULL when neither has it. */
pl_status_t pl_coord_store_each(pl_coord_store_t *s,
                                pl_status_t (*fn)(void *user, const pl_coord_row_t *row),
                                void *user);
/* Write one job row and the counters in one durable transaction. Row->spec NULL: the row exists
 * and keeps its spec, the other columns are updated (PL_ERR_NOT_FOUND when there is no row). */
pl_status_t pl_coord_store_put(pl_coord_store_t *s, const pl_coord_row_t *row, uint32_t next_job,
                               uint32_t next_epoch);
/* A new job's row whose spec the intake stored in the specs file before it (row->spec is not
 * read), with the counters, in one durable transaction. */
pl_status_t pl_coord_store_add(pl_coord_store_t *s, const pl_coord_row_t *row, uint32_t next_job,
                               uint32_t next_epoch);
/* Delete a job's row and its progress in one transaction (its spec in the specs file is the
 * intake's to drop: pl_coord_intake_drop_spec; one left behind is dropped at the next start). */
pl_status_t pl_coord_store_delete(pl_coord_store_t *s, int64_t id);

/* A piece of one sequence's progress: tokens [at, at + n) of its output, finish the pl_finish_t
 * it ended with (0: running). Borrowed both ways, as rows are. */
typedef struct {
    int64_t job;
    int seq, at, n;
    const int32_t *tokens;
    int finish;
} pl_coord_chunk_t;

/* Append pieces (any jobs) in one durable transaction. */
pl_status_t pl_coord_store_progress_put(pl_coord_store_t *s, const pl_coord_chunk_t *c, int n);
/* Every stored piece in (job, seq, at) order through fn; a piece whose stored form is broken
 * (a blob that is no whole number of tokens) is passed with n = -1 so fn can say so. */
pl_status_t pl_coord_store_progress_each(pl_coord_store_t *s,
                                         pl_status_t (*fn)(void *user, const pl_coord_chunk_t *c),
                                         void *user);
/* Forget a job's progress (it ended: its results hold everything). */
pl_status_t pl_coord_store_progress_delete(pl_coord_store_t *s, int64_t job);
/* Mark a node drained (no new stages) or not, durably; every drained node's name through fn. */
pl_status_t pl_coord_store_drain(pl_coord_store_t *s, const char *node, bool drained);
pl_status_t pl_coord_store_drained(pl_coord_store_t *s,
                                   pl_status_t (*fn)(void *user, const char *node), void *user);
/* A batch: the writes up to commit join one durable transaction (one fsync for all of them;
 * the writer thread's, coord_writer.c). A write that fails inside leaves the batch to be rolled
 * back whole (pl_coord_store_rollback); commit rolls back itself when it fails. */
pl_status_t pl_coord_store_begin(pl_coord_store_t *s);
pl_status_t pl_coord_store_commit(pl_coord_store_t *s);
void pl_coord_store_rollback(pl_coord_store_t *s);
/* The path it was opened with, for messages. */
const char *pl_coord_store_path(const pl_coord_store_t *s);

#endif
