/* SQLite behind the coordinator's state: schema, the counters, and job rows written in one
 * transaction each, so that a crash leaves either the old row or the new one. */
#include "daemon/coord_store.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct pl_coord_store {
    sqlite3 *db;
    char path[4096];
};

static const char s_schema[] =
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS jobs(id INTEGER PRIMARY KEY, state TEXT NOT NULL,"
    " spec TEXT NOT NULL, plan TEXT, results TEXT, error TEXT NOT NULL DEFAULT '',"
    " generated INTEGER NOT NULL DEFAULT 0, n_seqs INTEGER NOT NULL DEFAULT 0,"
    " n_layers INTEGER NOT NULL DEFAULT 0, prompt_tokens INTEGER NOT NULL DEFAULT 0,"
    " epoch INTEGER NOT NULL DEFAULT 0, submitted_at REAL NOT NULL DEFAULT 0,"
    " ended_at REAL NOT NULL DEFAULT 0, events TEXT);"
    "CREATE TABLE IF NOT EXISTS drained(node TEXT PRIMARY KEY);";

static pl_status_t s_err(pl_coord_store_t *s, const char *what)
{
    return pl_error(PL_ERR_IO, "state db %s: %s: %s", s->path, what, sqlite3_errmsg(s->db));
}

static pl_status_t s_exec(pl_coord_store_t *s, const char *sql)
{
    char *msg = NULL;
    if (sqlite3_exec(s->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        pl_status_t st =
            pl_error(PL_ERR_IO, "state db %s: %s", s->path, msg ? msg : sqlite3_errmsg(s->db));
        sqlite3_free(msg);
        return st;
    }
    return PL_OK;
}

pl_status_t pl_coord_store_open(const char *path, pl_coord_store_t **store_p)
{
    pl_coord_store_t *s = calloc(1, sizeof(*s));
    pl_status_t st;
    if (!s)
        return pl_error(PL_ERR_NOMEM, "state db: out of memory");
    snprintf(s->path, sizeof(s->path), "%s", path);
    mode_t old = umask(077); /* the database and its WAL files: the owner's only */
    int rc = sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    umask(old);
    if (rc != SQLITE_OK) {
        st = s->db ? s_err(s, "open") : pl_error(PL_ERR_NOMEM, "state db: out of memory");
        goto err;
    }
    sqlite3_busy_timeout(s->db, 2000);
    /* WAL: readers never block the writer; FULL: a state change is on disk before we go on */
    if ((st = s_exec(s, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;")) ||
        (st = s_exec(s, s_schema)))
        goto err;
    /* a database from before job events: the column added, its rows without events */
    sqlite3_stmt *probe = NULL;
    if (sqlite3_prepare_v2(s->db, "SELECT events FROM jobs LIMIT 0", -1, &probe, NULL) &&
        (st = s_exec(s, "ALTER TABLE jobs ADD COLUMN events TEXT")))
        goto err;
    sqlite3_finalize(probe);
    *store_p = s;
    return PL_OK;
err:
    sqlite3_close(s->db);
    free(s);
    return st;
}

void pl_coord_store_close(pl_coord_store_t **store_p)
{
    if (!store_p || !*store_p)
        return;
    sqlite3_close((*store_p)->db);
    free(*store_p);
    *store_p = NULL;
}

const char *pl_coord_store_path(const pl_coord_store_t *s)
{
    return s->path;
}

static pl_status_t s_counter(pl_coord_store_t *s, const char *key, uint32_t *out)
{
    sqlite3_stmt *q;
    pl_status_t st = PL_OK;
    if (sqlite3_prepare_v2(s->db, "SELECT value FROM meta WHERE key = ?", -1, &q, NULL))
        return s_err(s, "read counters");
    sqlite3_bind_text(q, 1, key, -1, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        sqlite3_int64 v = sqlite3_column_int64(q, 0);
        if (sqlite3_column_type(q, 0) != SQLITE_INTEGER || v < 1 || v > UINT32_MAX)
            st = pl_error(PL_ERR_INVALID, "state db %s: meta '%s': %lld is not in 1..%u", s->path,
                          key, (long long)v, UINT32_MAX);
        else
            *out = (uint32_t)v;
    } else if (rc == SQLITE_DONE) {
        *out = 1;
    } else {
        st = s_err(s, "read counters");
    }
    sqlite3_finalize(q);
    return st;
}

pl_status_t pl_coord_store_counters(pl_coord_store_t *s, uint32_t *next_job_p,
                                    uint32_t *next_epoch_p)
{
    uint32_t job = 0, epoch = 0;
    pl_status_t st;
    if ((st = s_counter(s, "next_job", &job)) || (st = s_counter(s, "next_epoch", &epoch)))
        return st;
    *next_job_p = job;
    *next_epoch_p = epoch;
    return PL_OK;
}

static const char *s_text(sqlite3_stmt *q, int col)
{
    return sqlite3_column_type(q, col) == SQLITE_NULL ? NULL
                                                      : (const char *)sqlite3_column_text(q, col);
}

pl_status_t pl_coord_store_each(pl_coord_store_t *s,
                                pl_status_t (*fn)(void *user, const pl_coord_row_t *row),
                                void *user)
{
    sqlite3_stmt *q;
    pl_status_t st = PL_OK;
    if (sqlite3_prepare_v2(s->db,
                           "SELECT id, state, spec, plan, results, error, generated, n_seqs,"
                           " n_layers, prompt_tokens, epoch, submitted_at, ended_at, events"
                           " FROM jobs ORDER BY id",
                           -1, &q, NULL))
        return s_err(s, "read jobs");
    int rc;
    while (!st && (rc = sqlite3_step(q)) == SQLITE_ROW) {
        pl_coord_row_t r = {.id = sqlite3_column_int64(q, 0),
                            .state = s_text(q, 1),
                            .spec = s_text(q, 2),
                            .plan = s_text(q, 3),
                            .results = s_text(q, 4),
                            .error = s_text(q, 5),
                            .generated = sqlite3_column_int64(q, 6),
                            .n_seqs = sqlite3_column_int64(q, 7),
                            .n_layers = sqlite3_column_int64(q, 8),
                            .prompt_tokens = sqlite3_column_int64(q, 9),
                            .epoch = sqlite3_column_int64(q, 10),
                            .submitted_at = sqlite3_column_double(q, 11),
                            .ended_at = sqlite3_column_double(q, 12),
                            .events = s_text(q, 13)};
        st = fn(user, &r);
    }
    if (!st && rc != SQLITE_DONE)
        st = s_err(s, "read jobs");
    sqlite3_finalize(q);
    return st;
}

static void s_bind_text(sqlite3_stmt *q, int col, const char *v)
{
    if (v)
        sqlite3_bind_text(q, col, v, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(q, col);
}

static pl_status_t s_put_counter(pl_coord_store_t *s, const char *key, uint32_t v)
{
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(s->db, "INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)", -1, &q,
                           NULL))
        return s_err(s, "write counters");
    sqlite3_bind_text(q, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_int64(q, 2, v);
    int rc = sqlite3_step(q);
    sqlite3_finalize(q);
    return rc == SQLITE_DONE ? PL_OK : s_err(s, "write counters");
}

pl_status_t pl_coord_store_put(pl_coord_store_t *s, const pl_coord_row_t *r, uint32_t next_job,
                               uint32_t next_epoch)
{
    sqlite3_stmt *q = NULL;
    pl_status_t st;
    if ((st = s_exec(s, "BEGIN IMMEDIATE")))
        return st;
    if (sqlite3_prepare_v2(s->db,
                           "INSERT OR REPLACE INTO jobs(id, state, spec, plan, results, error,"
                           " generated, n_seqs, n_layers, prompt_tokens, epoch, submitted_at,"
                           " ended_at, events) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                           -1, &q, NULL)) {
        st = s_err(s, "write job");
        goto err;
    }
    sqlite3_bind_int64(q, 1, r->id);
    s_bind_text(q, 2, r->state);
    s_bind_text(q, 3, r->spec);
    s_bind_text(q, 4, r->plan);
    s_bind_text(q, 5, r->results);
    s_bind_text(q, 6, r->error ? r->error : "");
    sqlite3_bind_int64(q, 7, r->generated);
    sqlite3_bind_int64(q, 8, r->n_seqs);
    sqlite3_bind_int64(q, 9, r->n_layers);
    sqlite3_bind_int64(q, 10, r->prompt_tokens);
    sqlite3_bind_int64(q, 11, r->epoch);
    sqlite3_bind_double(q, 12, r->submitted_at);
    sqlite3_bind_double(q, 13, r->ended_at);
    s_bind_text(q, 14, r->events);
    if (sqlite3_step(q) != SQLITE_DONE) {
        st = s_err(s, "write job");
        goto err;
    }
    sqlite3_finalize(q);
    q = NULL;
    if ((st = s_put_counter(s, "next_job", next_job)) ||
        (st = s_put_counter(s, "next_epoch", next_epoch)) || (st = s_exec(s, "COMMIT")))
        goto err;
    return PL_OK;
err:
    sqlite3_finalize(q);
    sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    return st;
}

pl_status_t pl_coord_store_delete(pl_coord_store_t *s, int64_t id)
{
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(s->db, "DELETE FROM jobs WHERE id = ?", -1, &q, NULL))
        return s_err(s, "delete job");
    sqlite3_bind_int64(q, 1, id);
    int rc = sqlite3_step(q);
    sqlite3_finalize(q);
    return rc == SQLITE_DONE ? PL_OK : s_err(s, "delete job");
}

pl_status_t pl_coord_store_drain(pl_coord_store_t *s, const char *node, bool drained)
{
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(s->db,
                           drained ? "INSERT OR REPLACE INTO drained(node) VALUES(?)"
                                   : "DELETE FROM drained WHERE node = ?",
                           -1, &q, NULL))
        return s_err(s, "write drained node");
    sqlite3_bind_text(q, 1, node, -1, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    sqlite3_finalize(q);
    return rc == SQLITE_DONE ? PL_OK : s_err(s, "write drained node");
}

pl_status_t pl_coord_store_drained(pl_coord_store_t *s,
                                   pl_status_t (*fn)(void *user, const char *node), void *user)
{
    sqlite3_stmt *q;
    pl_status_t st = PL_OK;
    if (sqlite3_prepare_v2(s->db, "SELECT node FROM drained ORDER BY node", -1, &q, NULL))
        return s_err(s, "read drained nodes");
    int rc;
    while (!st && (rc = sqlite3_step(q)) == SQLITE_ROW) {
        const char *node = s_text(q, 0);
        st = node ? fn(user, node)
                  : pl_error(PL_ERR_INVALID, "state db %s: drained: a NULL node", s->path);
    }
    if (!st && rc != SQLITE_DONE)
        st = s_err(s, "read drained nodes");
    sqlite3_finalize(q);
    return st;
}
