/* The job specs' own SQLite file beside the state db (WAL, synchronous=FULL): written by the
 * client intake alone, so that a large spec's write never holds the lock the loop's writes take. */
#ifndef PL_DAEMON_COORD_SPECS_H
#define PL_DAEMON_COORD_SPECS_H

#include "common/status.h"

#include <stddef.h>
#include <stdint.h>

typedef struct pl_coord_specs pl_coord_specs_t;

/* The specs file of the state db at state_db: beside it, "coord.db" -> "coord-specs.db" (a name
 * without ".db" gets "-specs.db" added). PL_ERR_RANGE when it does not fit out. */
pl_status_t pl_coord_specs_path(const char *state_db, char *out, size_t len);
/* Open (creating when missing, 0600) the specs file at path. */
pl_status_t pl_coord_specs_open(const char *path, pl_coord_specs_t **sp_p);
void pl_coord_specs_close(pl_coord_specs_t **sp_p);
/* One change to the specs file: job id's spec stored (spec non-NULL) or deleted (spec NULL). */
typedef struct {
    int64_t id;
    const char *spec;
} pl_coord_spec_op_t;

/* n changes in one transaction, durably: one sync of the file for all of them; on a failure
 * none of them is stored. */
pl_status_t pl_coord_specs_write(pl_coord_specs_t *sp, const pl_coord_spec_op_t *ops, int n);
/* A SUBMIT's spec under its job id, durably (its own transaction), before the job row exists. */
pl_status_t pl_coord_specs_put(pl_coord_specs_t *sp, int64_t id, const char *spec);
/* A spec whose job has no row (refused, forgotten, or never taken by the loop). */
pl_status_t pl_coord_specs_drop(pl_coord_specs_t *sp, int64_t id);

#endif
