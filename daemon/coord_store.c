/* SQLite behind the coordinator's state: schema, the counters, and job rows written in one
 * transaction each, so that a crash leaves either the old row or the new one. */
#include "daemon/coord_store.h"

#include "common/log.h"
#include "common/util.h"
#include "daemon/coord_specs.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct pl_coord_store {
    sqlite3 *db;
    char path[4096];
    bool specs; /* the specs file is attached as "sp" (pl_coord_store_specs_attach) */
    bool batch; /* inside pl_coord_store_begin: the writes join its transaction */
};

static const char s_schema[] =
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS jobs(id INTEGER PRIMARY KEY, state TEXT NOT NULL,"
    " spec TEXT NOT NULL, plan TEXT, results TEXT, error TEXT NOT NULL DEFAULT '',"
    " generated INTEGER NOT NULL DEFAULT 0, n_seqs INTEGER NOT NULL DEFAULT 0,"
    " n_layers INTEGER NOT NULL DEFAULT 0, prompt_tokens INTEGER NOT NULL DEFAULT 0,"
    " epoch INTEGER NOT NULL DEFAULT 0, submitted_at REAL NOT NULL DEFAULT 0,"
    " ended_at REAL NOT NULL DEFAULT 0, events TEXT, train TEXT);"
    /* a SUBMIT's spec is in the specs file (coord_specs.c), jobs.spec '' then; the loop's own
     * rare whole saves (a row that went missing) and databases of two versions ago keep it
     * here; the last version had a specs table here, moved out at attach */
    "CREATE TABLE IF NOT EXISTS drained(node TEXT PRIMARY KEY);"
    /* a running job's tokens, appended as the last stage reports them (coord_resume.c) */
    "CREATE TABLE IF NOT EXISTS progress(job INTEGER NOT NULL, seq INTEGER NOT NULL,"
    " at INTEGER NOT NULL, tokens BLOB NOT NULL, finish INTEGER NOT NULL DEFAULT 0,"
    " PRIMARY KEY(job, seq, at));";

static pl_status_t s_err(pl_coord_store_t *s, const char *what)
{
    return pl_error(PL_ERR_IO, "state db %s: %s: %s", s->path, what, sqlite3_errmsg(s->db));
}

/* A write that held the loop this long says so (rate-limited): heartbeats waited for the disk. */
#define S_SLOW_MS 100.0

static pl_status_t s_timed(const pl_coord_store_t *s, double t0, const char *what, pl_status_t st)
{
    double ms = (pl_now() - t0) * 1e3;
    if (ms >= S_SLOW_MS)
        pl_log_warn_limited("state db %s: writing %s took %.0f ms", s->path, what, ms);
    return st;
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

/* A write's own transaction, or nothing inside a batch (pl_coord_store_begin): the batch's
 * owner commits, or rolls back every write of it. */
static pl_status_t s_begin(pl_coord_store_t *s)
{
    return s->batch ? PL_OK : s_exec(s, "BEGIN IMMEDIATE");
}

static pl_status_t s_commit(pl_coord_store_t *s)
{
    return s->batch ? PL_OK : s_exec(s, "COMMIT");
}

static void s_rollback(pl_coord_store_t *s)
{
    if (!s->batch)
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

pl_status_t pl_coord_store_begin(pl_coord_store_t *s)
{
    pl_status_t st = s_exec(s, "BEGIN IMMEDIATE");
    s->batch = !st;
    return st;
}

pl_status_t pl_coord_store_commit(pl_coord_store_t *s)
{
    s->batch = false;
    pl_status_t st = s_exec(s, "COMMIT");
    if (st)
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    return st;
}

void pl_coord_store_rollback(pl_coord_store_t *s)
{
    s->batch = false;
    sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

/* Column `name` (TEXT) of jobs, added when an older database has none. */
static pl_status_t s_column(pl_coord_store_t *s, const char *name)
{
    char sql[96];
    sqlite3_stmt *probe = NULL;
    snprintf(sql, sizeof(sql), "SELECT %s FROM jobs LIMIT 0", name);
    int missing = sqlite3_prepare_v2(s->db, sql, -1, &probe, NULL) != SQLITE_OK;
    sqlite3_finalize(probe);
    if (!missing)
        return PL_OK;
    snprintf(sql, sizeof(sql), "ALTER TABLE jobs ADD COLUMN %s TEXT", name);
    return s_exec(s, sql);
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
    /* a database from before job events or training progress: the column added, its rows
     * without them */
    if ((st = s_column(s, "events")) || (st = s_column(s, "train")))
        goto err;
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

/* Whether table `name` exists in main (a database from the last version has "specs"). */
static bool s_has_table(pl_coord_store_t *s, const char *name)
{
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(s->db, "SELECT 1 FROM main.sqlite_master WHERE type = 'table' AND"
                           " name = ?", -1, &q, NULL))
        return false;
    sqlite3_bind_text(q, 1, name, -1, SQLITE_STATIC);
    bool found = sqlite3_step(q) == SQLITE_ROW;
    sqlite3_finalize(q);
    return found;
}

pl_status_t pl_coord_store_specs_attach(pl_coord_store_t *s, const char *specs_path)
{
    pl_coord_specs_t *sp = NULL;
    sqlite3_stmt *q = NULL;
    pl_status_t st;
    if (s->specs)
        return PL_OK;
    /* made (0600, WAL, its table) by its own opener, so that its schema has one home */
    if ((st = pl_coord_specs_open(specs_path, &sp)))
        return st;
    pl_coord_specs_close(&sp);
    if (sqlite3_prepare_v2(s->db, "ATTACH DATABASE ? AS sp", -1, &q, NULL))
        return s_err(s, "attach the specs file");
    sqlite3_bind_text(q, 1, specs_path, -1, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    sqlite3_finalize(q);
    if (rc != SQLITE_DONE)
        return pl_error(PL_ERR_IO, "state db %s: attach the specs file %s: %s", s->path,
                        specs_path, sqlite3_errmsg(s->db));
    s->specs = true;
    /* The last version's specs table moves out in two steps, each its own durable transaction:
     * copied (a copy there already is replaced by the same bytes), then dropped here. A crash
     * between them copies again at the next start: nothing lost, nothing doubled. */
    if ((st = s_exec(s, "PRAGMA sp.synchronous=FULL")) ||
        (s_has_table(s, "specs") &&
         ((st = s_exec(s, "INSERT OR REPLACE INTO sp.specs(id, spec) SELECT id, spec FROM"
                          " main.specs")) ||
          (st = s_exec(s, "DROP TABLE main.specs")))) ||
        /* a spec whose SUBMIT never got its job row (a crash, or a stop, in between) */
        (st = s_exec(s, "DELETE FROM sp.specs WHERE id NOT IN (SELECT id FROM main.jobs)"))) {
        pl_coord_store_specs_detach(s);
        return pl_error_prefix(st, "specs file %s: ", specs_path);
    }
    return PL_OK;
}

void pl_coord_store_specs_detach(pl_coord_store_t *s)
{
    if (s->specs)
        sqlite3_exec(s->db, "DETACH DATABASE sp", NULL, NULL, NULL);
    s->specs = false;
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
    /* the spec from the specs file, else the row's own; NULL when neither has it */
#define S_JOB_COLS(spec, from)                                                                   \
    "SELECT j.id, state, " spec ", plan, results, error, generated, n_seqs, n_layers,"            \
    " prompt_tokens, epoch, submitted_at, ended_at, events, train FROM jobs j " from              \
    " ORDER BY j.id"
    const char *sql = s->specs ? S_JOB_COLS("COALESCE(s.spec, NULLIF(j.spec, ''))",
                                            "LEFT JOIN sp.specs s ON s.id = j.id")
                               : S_JOB_COLS("NULLIF(j.spec, '')", "");
#undef S_JOB_COLS
    if (sqlite3_prepare_v2(s->db, sql, -1, &q, NULL))
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
                            .events = s_text(q, 13),
                            .train = s_text(q, 14)};
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

/* Counters only grow: two writers (the loop, the intake) may save them out of order. */
static pl_status_t s_put_counter(pl_coord_store_t *s, const char *key, uint32_t v)
{
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(s->db,
                           "INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE"
                           " SET value = max(value, excluded.value)",
                           -1, &q, NULL))
        return s_err(s, "write counters");
    sqlite3_bind_text(q, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_int64(q, 2, v);
    int rc = sqlite3_step(q);
    sqlite3_finalize(q);
    return rc == SQLITE_DONE ? PL_OK : s_err(s, "write counters");
}

typedef enum { S_PUT_WHOLE, S_PUT_STATE, S_PUT_ADD } s_put_t;

static pl_status_t s_put(pl_coord_store_t *s, const pl_coord_row_t *r, s_put_t how,
                         uint32_t next_job, uint32_t next_epoch)
{
    sqlite3_stmt *q = NULL;
    pl_status_t st;
    if ((st = s_begin(s)))
        return st;
    /* a whole row with its spec in it; the state columns only of a row that exists and keeps
     * its spec; or a new row whose spec the intake stored in the specs file before it */
    static const char *const sqls[] = {
        [S_PUT_WHOLE] = "INSERT OR REPLACE INTO jobs(id, state, spec, plan, results, error,"
                        " generated, n_seqs, n_layers, prompt_tokens, epoch, submitted_at,"
                        " ended_at, events, train) VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,"
                        "?11,?12,?13,?14,?15)",
        [S_PUT_STATE] = "UPDATE jobs SET state = ?2, plan = ?4, results = ?5, error = ?6,"
                        " generated = ?7, n_seqs = ?8, n_layers = ?9, prompt_tokens = ?10,"
                        " epoch = ?11, submitted_at = ?12, ended_at = ?13, events = ?14,"
                        " train = ?15 WHERE id = ?1",
        [S_PUT_ADD] = "INSERT OR REPLACE INTO jobs(id, state, spec, plan, results, error,"
                      " generated, n_seqs, n_layers, prompt_tokens, epoch, submitted_at,"
                      " ended_at, events, train) VALUES(?1,?2,'',?4,?5,?6,?7,?8,?9,?10,"
                      "?11,?12,?13,?14,?15)",
    };
    const char *sql = sqls[how];
    if (sqlite3_prepare_v2(s->db, sql, -1, &q, NULL)) {
        st = s_err(s, "write job");
        goto err;
    }
    sqlite3_bind_int64(q, 1, r->id);
    s_bind_text(q, 2, r->state);
    if (how == S_PUT_WHOLE)
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
    s_bind_text(q, 15, r->train);
    if (sqlite3_step(q) != SQLITE_DONE) {
        st = s_err(s, "write job");
        goto err;
    }
    if (how == S_PUT_STATE && sqlite3_changes(s->db) != 1) {
        st = pl_error(PL_ERR_NOT_FOUND, "state db %s: no row to update for job %lld", s->path,
                      (long long)r->id);
        goto err;
    }
    sqlite3_finalize(q);
    q = NULL;
    if ((st = s_put_counter(s, "next_job", next_job)) ||
        (st = s_put_counter(s, "next_epoch", next_epoch)) || (st = s_commit(s)))
        goto err;
    return PL_OK;
err:
    sqlite3_finalize(q);
    s_rollback(s);
    return st;
}

pl_status_t pl_coord_store_put(pl_coord_store_t *s, const pl_coord_row_t *r, uint32_t next_job,
                               uint32_t next_epoch)
{
    double t0 = pl_now();
    return s_timed(s, t0, "a job row",
                   s_put(s, r, r->spec ? S_PUT_WHOLE : S_PUT_STATE, next_job, next_epoch));
}

pl_status_t pl_coord_store_add(pl_coord_store_t *s, const pl_coord_row_t *r, uint32_t next_job,
                               uint32_t next_epoch)
{
    double t0 = pl_now();
    return s_timed(s, t0, "a new job row", s_put(s, r, S_PUT_ADD, next_job, next_epoch));
}

static pl_status_t s_delete(pl_coord_store_t *s, const char *sql, int64_t id)
{
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(s->db, sql, -1, &q, NULL))
        return s_err(s, "delete job");
    sqlite3_bind_int64(q, 1, id);
    int rc = sqlite3_step(q);
    sqlite3_finalize(q);
    return rc == SQLITE_DONE ? PL_OK : s_err(s, "delete job");
}

static pl_status_t s_delete_job(pl_coord_store_t *s, int64_t id)
{
    pl_status_t st;
    if ((st = s_begin(s)))
        return st;
    if ((st = s_delete(s, "DELETE FROM jobs WHERE id = ?", id)) ||
        (st = s_delete(s, "DELETE FROM progress WHERE job = ?", id)) ||
        (st = s_commit(s))) {
        s_rollback(s);
        return st;
    }
    return PL_OK;
}

pl_status_t pl_coord_store_delete(pl_coord_store_t *s, int64_t id)
{
    double t0 = pl_now();
    return s_timed(s, t0, "a job deletion", s_delete_job(s, id));
}

pl_status_t pl_coord_store_progress_delete(pl_coord_store_t *s, int64_t job)
{
    return s_delete(s, "DELETE FROM progress WHERE job = ?", job);
}

static pl_status_t s_progress_put(pl_coord_store_t *s, const pl_coord_chunk_t *c, int n)
{
    sqlite3_stmt *q = NULL;
    unsigned char *blob = NULL;
    pl_status_t st;
    if (n <= 0)
        return PL_OK;
    if ((st = s_begin(s)))
        return st;
    if (sqlite3_prepare_v2(s->db,
                           "INSERT OR REPLACE INTO progress(job, seq, at, tokens, finish)"
                           " VALUES(?,?,?,?,?)",
                           -1, &q, NULL)) {
        st = s_err(s, "write progress");
        goto err;
    }
    for (int i = 0; i < n; i++) {
        /* little-endian int32s, whatever the host */
        unsigned char *b = realloc(blob, (size_t)c[i].n * 4 + 1);
        if (!b) {
            st = pl_error(PL_ERR_NOMEM, "state db %s: out of memory", s->path);
            goto err;
        }
        blob = b;
        for (int t = 0; t < c[i].n; t++) {
            uint32_t v = (uint32_t)c[i].tokens[t];
            for (int k = 0; k < 4; k++)
                blob[4 * t + k] = (unsigned char)(v >> (8 * k));
        }
        sqlite3_reset(q);
        sqlite3_bind_int64(q, 1, c[i].job);
        sqlite3_bind_int(q, 2, c[i].seq);
        sqlite3_bind_int(q, 3, c[i].at);
        sqlite3_bind_blob(q, 4, blob, c[i].n * 4, SQLITE_STATIC);
        sqlite3_bind_int(q, 5, c[i].finish);
        if (sqlite3_step(q) != SQLITE_DONE) {
            st = s_err(s, "write progress");
            goto err;
        }
    }
    sqlite3_finalize(q);
    q = NULL;
    free(blob);
    blob = NULL;
    if ((st = s_commit(s)))
        goto err;
    return PL_OK;
err:
    free(blob);
    sqlite3_finalize(q);
    s_rollback(s);
    return st;
}

pl_status_t pl_coord_store_progress_put(pl_coord_store_t *s, const pl_coord_chunk_t *c, int n)
{
    double t0 = pl_now();
    return s_timed(s, t0, "progress", s_progress_put(s, c, n));
}

pl_status_t pl_coord_store_progress_each(pl_coord_store_t *s,
                                         pl_status_t (*fn)(void *user, const pl_coord_chunk_t *c),
                                         void *user)
{
    sqlite3_stmt *q;
    int32_t *tok = NULL;
    pl_status_t st = PL_OK;
    if (sqlite3_prepare_v2(s->db,
                           "SELECT job, seq, at, tokens, finish FROM progress"
                           " ORDER BY job, seq, at",
                           -1, &q, NULL))
        return s_err(s, "read progress");
    int rc;
    while (!st && (rc = sqlite3_step(q)) == SQLITE_ROW) {
        const unsigned char *b = sqlite3_column_blob(q, 3);
        int bytes = sqlite3_column_bytes(q, 3);
        int64_t seq = sqlite3_column_int64(q, 1), at = sqlite3_column_int64(q, 2);
        pl_coord_chunk_t c = {.job = sqlite3_column_int64(q, 0),
                              .seq = seq < 0 || seq > INT32_MAX ? -1 : (int)seq,
                              .at = at < 0 || at > INT32_MAX ? -1 : (int)at,
                              .n = -1,
                              .finish = sqlite3_column_int(q, 4)};
        if (sqlite3_column_type(q, 3) == SQLITE_BLOB && bytes > 0 && bytes % 4 == 0) {
            int32_t *t = realloc(tok, (size_t)bytes);
            if (!t) {
                st = pl_error(PL_ERR_NOMEM, "state db %s: out of memory", s->path);
                break;
            }
            tok = t;
            for (int i = 0; i < bytes / 4; i++)
                tok[i] = (int32_t)((uint32_t)b[4 * i] | (uint32_t)b[4 * i + 1] << 8 |
                                   (uint32_t)b[4 * i + 2] << 16 | (uint32_t)b[4 * i + 3] << 24);
            c.n = bytes / 4;
            c.tokens = tok;
        }
        st = fn(user, &c);
    }
    if (!st && rc != SQLITE_DONE)
        st = s_err(s, "read progress");
    sqlite3_finalize(q);
    free(tok);
    return st;
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
