/* The specs file's writer thread, behind the client intake: a SUBMIT's spec is committed here,
 * several waiting specs in one transaction (one sync of the file), so that the intake goes on
 * serving other clients while the disk works; then each item is handed on in the order put. */
#ifndef PL_DAEMON_COORD_SPEC_WRITER_H
#define PL_DAEMON_COORD_SPEC_WRITER_H

#include "daemon/coord_specs.h"

#include <stddef.h>
#include <stdint.h>

typedef struct pl_coord_spec_writer pl_coord_spec_writer_t;

/* Called on the writer's thread once per item put, in the order they were put: st PL_OK once
 * its spec is durable (an item without a spec: when every item before it was handed on), else
 * why nothing of it was stored (pl_error_msg() says it on this thread). */
typedef void (*pl_coord_spec_done_fn)(void *arg, void *tag, pl_status_t st);

/* Start the writer on sp (borrowed; the caller closes it after the stop). At most max_specs specs
 * and max_bytes bytes of them wait (a spec alone is let in whatever its size). */
pl_status_t pl_coord_spec_writer_start(pl_coord_specs_t *sp, int max_specs, size_t max_bytes,
                                       pl_coord_spec_done_fn done, void *arg,
                                       pl_coord_spec_writer_t **w_p);
/* Stop: the batch being written is finished; items not begun are handed on with PL_ERR_IO
 * ("stopping", nothing stored) and the drops waiting are done. *w_p NULL; safe on NULL. */
void pl_coord_spec_writer_stop(pl_coord_spec_writer_t **w_p);
/* Queue spec (borrowed until done is called for tag) under job id; spec NULL: an item that only
 * keeps its place in the order (a later request of a client whose SUBMIT waits here).
 * PL_ERR_BUSY, nothing queued and the reason set, past the bounds. */
pl_status_t pl_coord_spec_writer_put(pl_coord_spec_writer_t *w, int64_t id, const char *spec,
                                     void *tag);
/* Delete job id's stored spec, in the next transaction. Any thread. */
pl_status_t pl_coord_spec_writer_drop(pl_coord_spec_writer_t *w, int64_t id);
/* Items put and not yet handed on (those being written included), and of them the specs. */
void pl_coord_spec_writer_waiting(pl_coord_spec_writer_t *w, int *items, int *specs);

#endif
