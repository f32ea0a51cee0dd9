/* The coordinator loop's state-db writes on a thread of their own: the loop queues each write
 * (copied, in order) and goes on at once; the writer commits whatever waits in one durable
 * transaction, so that a slow fsync never holds a heartbeat's answer. Each write has a sequence
 * number; the loop learns, through an eventfd it polls, up to which one the disk holds. */
#ifndef PL_DAEMON_COORD_WRITER_H
#define PL_DAEMON_COORD_WRITER_H

#include "daemon/coord_store.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Writes queued and not yet committed, at most; one more makes the loop wait for room (each
 * wait counted, and warned of, rate-limited). */
#define PL_COORD_WRITER_MAX 1024
/* Bytes of queued rows and progress at most (the same wait): large results cannot pile up. */
#define PL_COORD_WRITER_MAX_BYTES (64u << 20)
/* Writes joined into one transaction at most. */
#define PL_COORD_WRITER_BATCH 256

typedef struct pl_coord_writer pl_coord_writer_t;

typedef enum {
    PL_COORD_W_PUT, /* a job row (pl_coord_store_put) */
    PL_COORD_W_ADD, /* a new job's row beside its stored spec (pl_coord_store_add) */
    PL_COORD_W_DELETE,
    PL_COORD_W_PROGRESS,
    PL_COORD_W_PROGRESS_DELETE,
    PL_COORD_W_DRAIN,
} pl_coord_wkind_t;

/* A write that failed, as the loop hears of it (pl_coord_writer_collect). */
typedef struct {
    uint64_t seq;
    pl_coord_wkind_t kind;
    int64_t job;      /* the job it was for; 0: none (a drained node's) */
    const char *node; /* DRAIN: the node's name, and the mark it was to write */
    bool drained;
    pl_status_t code;
    const char *why;
} pl_coord_wfail_t;

/* What a failed write was, for messages: "job 5's row", "node n1's drained mark". */
void pl_coord_writer_what(const pl_coord_wfail_t *f, char *buf, size_t len);

/* Start the writer on store (taken: the thread's alone from here on; *store_p is kept for its
 * path, which never changes). */
pl_status_t pl_coord_writer_start(pl_coord_store_t *store, pl_coord_writer_t **w_p);
/* Every queued write committed, the thread joined (the store stays open, the caller's to
 * close); *w_p NULL; safe on NULL. Failures not yet collected are logged. */
void pl_coord_writer_stop(pl_coord_writer_t **w_p);
/* Readable (for poll) once a batch is committed or failed. */
int pl_coord_writer_fd(const pl_coord_writer_t *w);

/* Queue a write (everything copied); its sequence number, or 0 when it could not be queued
 * (out of memory: logged, as a failed write). */
uint64_t pl_coord_writer_row(pl_coord_writer_t *w, pl_coord_wkind_t kind, const pl_coord_row_t *r,
                             uint32_t next_job, uint32_t next_epoch);
uint64_t pl_coord_writer_delete(pl_coord_writer_t *w, pl_coord_wkind_t kind, int64_t job);
uint64_t pl_coord_writer_progress(pl_coord_writer_t *w, const pl_coord_chunk_t *c, int n);
uint64_t pl_coord_writer_drain(pl_coord_writer_t *w, const char *node, bool drained);
/* The last sequence number queued (0: none yet). */
uint64_t pl_coord_writer_queued(const pl_coord_writer_t *w);
/* Up to which sequence number every write is done (committed, or failed: each failure through
 * fn first, in order). */
uint64_t pl_coord_writer_collect(pl_coord_writer_t *w,
                                 void (*fn)(void *user, const pl_coord_wfail_t *f), void *user);
/* Wait until every write queued so far is done (the held answers' bound, coord_hold.c). */
void pl_coord_writer_wait(pl_coord_writer_t *w);
/* Times the loop waited for room in the queue. */
long pl_coord_writer_waits(const pl_coord_writer_t *w);

#endif
