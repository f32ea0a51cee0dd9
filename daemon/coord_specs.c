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

static pl_status_t s_step(pl_coord_specs_t *sp, const char *sql, int64_t id, const char *spec,
                          const char *what)
{
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(sp->db, sql, -1, &q, NULL) != SQLITE_OK)
        return pl_error(PL_ERR_IO, "specs db %s: %s: %s", sp->path, what, sqlite3_errmsg(sp->db));
    sqlite3_bind_int64(q, 1, id);
    if (spec)
        sqlite3_bind_text(q, 2, spec, -1, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    sqlite3_finalize(q);
    if (rc != SQLITE_DONE)
        return pl_error(PL_ERR_IO, "specs db %s: %s of job %lld: %s", sp->path, what,
                        (long long)id, sqlite3_errmsg(sp->db));
    return PL_OK;
}

pl_status_t pl_coord_specs_put(pl_coord_specs_t *sp, int64_t id, const char *spec)
{
    double t0 = pl_now();
    pl_status_t st = s_step(sp, "INSERT OR REPLACE INTO specs(id, spec) VALUES(?, ?)", id, spec,
                            "write spec");
    double ms = (pl_now() - t0) * 1e3;
    if (ms >= 100) /* clients wait on it (the intake's), nodes do not */
        pl_log_info_limited("specs db %s: job %lld's spec (%zu bytes) took %.0f ms", sp->path,
                            (long long)id, strlen(spec), ms);
    return st;
}

pl_status_t pl_coord_specs_drop(pl_coord_specs_t *sp, int64_t id)
{
    return s_step(sp, "DELETE FROM specs WHERE id = ?", id, NULL, "drop spec");
}
