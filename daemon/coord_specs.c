/* The specs file: one table of (job id, spec JSON), its own WAL and write lock, so that the
 * intake's large writes and the loop's small ones (coord_store.c) never wait for each other. */
#include "daemon/coord_specs.h"

#include "common/log.h"
#include "common/util.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct pl_coord_specs {
    sqlite3 *db;
    char path[4096];
};

pl_status_t pl_coord_specs_path(const char *state_db, char *out, size_t len)
{
    size_t n = strlen(state_db);
    if (n >= 3 && strcmp(state_db + n - 3, ".db") == 0)
        n -= 3;
    int w = snprintf(out, len, "%.*s-specs.db", (int)n, state_db);
    if (w < 0 || (size_t)w >= len)
        return pl_error(PL_ERR_RANGE, "state db %s: the path of its specs file is too long",
                        state_db);
    return PL_OK;
}

static pl_status_t s_exec(pl_coord_specs_t *sp, const char *sql)
{
    char *msg = NULL;
    if (sqlite3_exec(sp->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        pl_status_t st = pl_error(PL_ERR_IO, "specs db %s: %s", sp->path,
                                  msg ? msg : sqlite3_errmsg(sp->db));
        sqlite3_free(msg);
        return st;
    }
    return PL_OK;
}

pl_status_t pl_coord_specs_open(const char *path, pl_coord_specs_t **sp_p)
{
    pl_coord_specs_t *sp = calloc(1, sizeof(*sp));
    pl_status_t st;
    if (!sp)
        return pl_error(PL_ERR_NOMEM, "specs db: out of memory");
    snprintf(sp->path, sizeof(sp->path), "%s", path);
    mode_t old = umask(077); /* the file and its WAL files: the owner's only */
    int rc = sqlite3_open_v2(path, &sp->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    umask(old);
    if (rc != SQLITE_OK) {
        st = sp->db ? pl_error(PL_ERR_IO, "specs db %s: open: %s", path, sqlite3_errmsg(sp->db))
                    : pl_error(PL_ERR_NOMEM, "specs db: out of memory");
        goto err;
    }
    sqlite3_busy_timeout(sp->db, 2000);
    /* WAL and FULL as the state db: a spec is on disk before its job row is written */
    if ((st = s_exec(sp, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                         "CREATE TABLE IF NOT EXISTS specs(id INTEGER PRIMARY KEY,"
                         " spec TEXT NOT NULL);")))
        goto err;
    *sp_p = sp;
    return PL_OK;
err:
    sqlite3_close(sp->db);
    free(sp);
    return st;
}

void pl_coord_specs_close(pl_coord_specs_t **sp_p)
{
    if (!sp_p || !*sp_p)
        return;
    sqlite3_close((*sp_p)->db);
    free(*sp_p);
    *sp_p = NULL;
}

static pl_status_t s_step(pl_coord_specs_t *sp, sqlite3_stmt *q, const pl_coord_spec_op_t *op)
{
    const char *what = op->spec ? "write spec" : "drop spec";
    sqlite3_reset(q);
    sqlite3_clear_bindings(q);
    sqlite3_bind_int64(q, 1, op->id);
    if (op->spec)
        sqlite3_bind_text(q, 2, op->spec, -1, SQLITE_STATIC);
    if (sqlite3_step(q) != SQLITE_DONE)
        return pl_error(PL_ERR_IO, "specs db %s: %s of job %lld: %s", sp->path, what,
                        (long long)op->id, sqlite3_errmsg(sp->db));
    return PL_OK;
}

pl_status_t pl_coord_specs_write(pl_coord_specs_t *sp, const pl_coord_spec_op_t *ops, int n)
{
    sqlite3_stmt *put = NULL, *drop = NULL;
    size_t bytes = 0;
    double t0 = pl_now();
    pl_status_t st = n > 1 ? s_exec(sp, "BEGIN IMMEDIATE") : PL_OK;
    if (!st && (sqlite3_prepare_v2(sp->db, "INSERT OR REPLACE INTO specs(id, spec) VALUES(?, ?)",
                                   -1, &put, NULL) != SQLITE_OK ||
                sqlite3_prepare_v2(sp->db, "DELETE FROM specs WHERE id = ?", -1, &drop, NULL) !=
                    SQLITE_OK))
        st = pl_error(PL_ERR_IO, "specs db %s: %s", sp->path, sqlite3_errmsg(sp->db));
    for (int i = 0; !st && i < n; i++) {
        st = s_step(sp, ops[i].spec ? put : drop, &ops[i]);
        bytes += ops[i].spec ? strlen(ops[i].spec) : 0;
    }
    sqlite3_finalize(put);
    sqlite3_finalize(drop);
    if (n > 1 && !st)
        st = s_exec(sp, "COMMIT");
    if (n > 1 && st && !sqlite3_get_autocommit(sp->db))
        sqlite3_exec(sp->db, "ROLLBACK", NULL, NULL, NULL); /* the error is already st's */
    double ms = (pl_now() - t0) * 1e3;
    if (ms >= 100) /* clients wait on it (the spec writer's), nodes do not */
        pl_log_info_limited("specs db %s: %d change(s), %zu bytes of specs, took %.0f ms",
                            sp->path, n, bytes, ms);
    return st;
}

pl_status_t pl_coord_specs_put(pl_coord_specs_t *sp, int64_t id, const char *spec)
{
    return pl_coord_specs_write(sp, &(pl_coord_spec_op_t){.id = id, .spec = spec}, 1);
}

pl_status_t pl_coord_specs_drop(pl_coord_specs_t *sp, int64_t id)
{
    return pl_coord_specs_write(sp, &(pl_coord_spec_op_t){.id = id}, 1);
}
