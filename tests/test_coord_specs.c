/* The job specs' own file beside the state db (daemon/coord_specs.c, coord_store.c's attach): a
 * spec stored ahead gets its job row, orphans are pruned at start, a database of the last version
 * (specs inside it) has them moved out without loss or duplicates even after a crash half-way,
 * and a job whose spec went missing is restored failed with the reason, not a crash. */
#include "common/util.h"
#include "daemon/coord_int.h"
#include "daemon/coord_spec_writer.h"
#include "daemon/coord_specs.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *s_spec = "{\"model\":\"/m\",\"gen\":{\"prompts\":[[1,2],[3]],"
                            "\"max_new_tokens\":4,\"sampling\":{\"seed\":\"7\"}}}";
static const char *s_res = "[{\"seq\":0,\"tokens\":[5,6],\"finish\":\"eos\"},"
                           "{\"seq\":1,\"tokens\":[9],\"finish\":\"length\"}]";

typedef struct {
    char dir[64], db[128], specs[160];
} s_files_t;

static void s_files(s_files_t *f)
{
    snprintf(f->dir, sizeof(f->dir), "/tmp/pl-specs-XXXXXX");
    cr_assert_not_null(mkdtemp(f->dir));
    snprintf(f->db, sizeof(f->db), "%s/coord.db", f->dir);
    cr_assert_eq(pl_coord_specs_path(f->db, f->specs, sizeof(f->specs)), PL_OK);
}

static void s_files_rm(const s_files_t *f)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
    cr_assert_eq(system(cmd), 0);
}

/* One SQL statement's first column as an integer, on a connection of the test's own. */
static long s_sql_int(const char *path, const char *sql)
{
    sqlite3 *db;
    sqlite3_stmt *q;
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &q, NULL), SQLITE_OK, "%s: %s", sql,
                 sqlite3_errmsg(db));
    long v = sqlite3_step(q) == SQLITE_ROW ? (long)sqlite3_column_int64(q, 0) : -1;
    sqlite3_finalize(q);
    sqlite3_close(db);
    return v;
}

static void s_sql(const char *path, const char *sql)
{
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK, "%s: %s", sql,
                 sqlite3_errmsg(db));
    sqlite3_close(db);
}

/* Rows' (id, spec) as "id=spec;" appended to a buffer of 8 KiB. */
static pl_status_t s_list(void *user, const pl_coord_row_t *r)
{
    char *out = user;
    size_t len = strlen(out);
    snprintf(out + len, 8192 - len, "%lld=%s;", (long long)r->id, r->spec ? r->spec : "NULL");
    return PL_OK;
}

static void s_each(const s_files_t *f, char *out)
{
    pl_coord_store_t *s;
    out[0] = '\0';
    cr_assert_eq(pl_coord_store_open(f->db, &s), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(pl_coord_store_specs_attach(s, f->specs), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(pl_coord_store_each(s, s_list, out), PL_OK, "%s", pl_error_msg());
    pl_coord_store_specs_detach(s);
    pl_coord_store_close(&s);
}

Test(coord_specs, the_specs_file_sits_beside_the_state_db)
{
    char out[64];
    cr_assert_eq(pl_coord_specs_path("/s/coord.db", out, sizeof(out)), PL_OK);
    cr_assert_str_eq(out, "/s/coord-specs.db");
    cr_assert_eq(pl_coord_specs_path("state", out, sizeof(out)), PL_OK);
    cr_assert_str_eq(out, "state-specs.db");
    cr_assert_eq(pl_coord_specs_path("/a/very/long/path/to/the/state/database.db", out, 16),
                 PL_ERR_RANGE);
    cr_assert(strstr(pl_error_msg(), "database.db"), "%s", pl_error_msg());
}

/* The intake's order: the spec in its own file, then the loop's job row; a spec refused by the
 * loop is dropped; one whose SUBMIT never got its row (a crash in between) is pruned at start. */
Test(coord_specs, a_spec_stored_ahead_gets_its_row_and_orphans_are_pruned)
{
    s_files_t f;
    s_files(&f);
    pl_coord_store_t *loop;
    pl_coord_specs_t *sp;
    cr_assert_eq(pl_coord_store_open(f.db, &loop), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(pl_coord_specs_open(f.specs, &sp), PL_OK, "%s", pl_error_msg());
    struct stat stb;
    cr_assert_eq(stat(f.specs, &stb), 0);
    cr_assert_eq(stb.st_mode & 077, 0, "the specs file is the owner's only");
    cr_assert_eq(pl_coord_specs_put(sp, 4, s_spec), PL_OK, "%s", pl_error_msg());
    pl_coord_row_t r = {.id = 4, .state = "queued", .n_seqs = 2};
    cr_assert_eq(pl_coord_store_add(loop, &r, 5, 2), PL_OK, "%s", pl_error_msg());
    r = (pl_coord_row_t){.id = 4, .state = "done", .n_seqs = 2, .results = s_res};
    cr_assert_eq(pl_coord_store_put(loop, &r, 5, 2), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(pl_coord_specs_put(sp, 6, s_spec), PL_OK); /* refused by the loop: dropped */
    cr_assert_eq(pl_coord_specs_drop(sp, 6), PL_OK);
    cr_assert_eq(pl_coord_specs_put(sp, 7, "{\"orphan\":1}"), PL_OK); /* never got a row */
    /* the loop writes its rows while the intake holds the specs file's write lock */
    sqlite3 *hold;
    cr_assert_eq(sqlite3_open(f.specs, &hold), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(hold, "BEGIN IMMEDIATE; INSERT INTO specs VALUES(99, 'x')", NULL,
                              NULL, NULL),
                 SQLITE_OK);
    r = (pl_coord_row_t){.id = 8, .state = "queued", .n_seqs = 1};
    cr_assert_eq(pl_coord_store_add(loop, &r, 9, 2), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(pl_coord_store_delete(loop, 8), PL_OK, "%s", pl_error_msg());
    sqlite3_exec(hold, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close(hold);
    pl_coord_specs_close(&sp);
    pl_coord_specs_close(&sp); /* twice is harmless */
    pl_coord_store_close(&loop);

    char got[8192];
    s_each(&f, got);
    cr_assert_str_eq(got, "4={\"model\":\"/m\",\"gen\":{\"prompts\":[[1,2],[3]],"
                          "\"max_new_tokens\":4,\"sampling\":{\"seed\":\"7\"}}};");
    cr_assert_eq(s_sql_int(f.specs, "SELECT count(*) FROM specs"), 1, "the orphan was pruned");
    cr_assert_eq(s_sql_int(f.db, "SELECT count(*) FROM sqlite_master WHERE name = 'specs'"), 0,
                 "the state db holds no specs table");
    s_files_rm(&f);
}

/* A coord.db as the last version wrote it: the specs table inside it (and a row of two versions
 * ago with its spec inline). Moved out at the first attach; a crash after the copy and before
 * the drop (the copy there, the table still here) moves it again with nothing doubled. */
Test(coord_specs, a_database_of_the_last_version_has_its_specs_moved_out)
{
    s_files_t f;
    s_files(&f);
    pl_coord_store_t *s;
    cr_assert_eq(pl_coord_store_open(f.db, &s), PL_OK, "%s", pl_error_msg());
    pl_coord_row_t r = {.id = 2, .state = "done", .n_seqs = 2, .results = s_res,
                        .spec = "{\"inline\":2}"};
    cr_assert_eq(pl_coord_store_put(s, &r, 6, 2), PL_OK, "%s", pl_error_msg());
    pl_coord_store_close(&s);
    s_sql(f.db, "CREATE TABLE specs(id INTEGER PRIMARY KEY, spec TEXT NOT NULL);"
                "INSERT INTO jobs(id, state, spec, n_seqs) VALUES(3, 'canceled', '', 1),"
                " (5, 'failed', '', 1);"
                "INSERT INTO specs VALUES(3, '{\"old\":3}'), (5, '{\"old\":5}'),"
                " (4, '{\"orphan\":4}');");
    const char *want = "2={\"inline\":2};3={\"old\":3};5={\"old\":5};";
    char copy[640];
    snprintf(copy, sizeof(copy), "cp %s %s/old.db", f.db, f.dir);
    cr_assert_eq(system(copy), 0);

    char got[8192];
    s_each(&f, got);
    cr_assert_str_eq(got, want);
    cr_assert_eq(s_sql_int(f.db, "SELECT count(*) FROM sqlite_master WHERE name = 'specs'"), 0,
                 "the old table was dropped once copied");
    cr_assert_eq(s_sql_int(f.specs, "SELECT count(*) FROM specs"), 2);
    s_each(&f, got); /* again: nothing changes */
    cr_assert_str_eq(got, want);

    /* the crash half-way: the specs file has the copies, the database its table again */
    snprintf(copy, sizeof(copy), "rm -f %s-wal %s-shm && cp %s/old.db %s", f.db, f.db, f.dir,
             f.db);
    cr_assert_eq(system(copy), 0);
    s_sql(f.specs, "UPDATE specs SET spec = 'half-written' WHERE id = 5");
    s_each(&f, got);
    cr_assert_str_eq(got, want, "the database's copy wins");
    cr_assert_eq(s_sql_int(f.specs, "SELECT count(*) FROM specs"), 2, "nothing doubled");
    s_files_rm(&f);
}

/* A job row whose spec is in neither file: restored failed with the reason (an unfinished one),
 * or kept as it ended with its results; the restore goes on, the other jobs come back. */
Test(coord_specs, a_job_whose_spec_is_missing_is_failed_with_the_reason)
{
    s_files_t f;
    s_files(&f);
    pl_coord_store_t *s;
    cr_assert_eq(pl_coord_store_open(f.db, &s), PL_OK, "%s", pl_error_msg());
    pl_coord_row_t r = {.id = 3, .state = "queued", .n_seqs = 2};
    cr_assert_eq(pl_coord_store_add(s, &r, 5, 2), PL_OK, "%s", pl_error_msg());
    r = (pl_coord_row_t){.id = 4, .state = "done", .n_seqs = 2, .results = s_res};
    cr_assert_eq(pl_coord_store_add(s, &r, 5, 2), PL_OK, "%s", pl_error_msg());
    pl_coord_store_close(&s);

    static pl_cfg_cluster_t cfg;
    pl_coord_t c = {.cfg = &cfg, .next_job = 1, .next_epoch = 1};
    cr_assert_eq(pl_coord_store_open(f.db, &c.store), PL_OK);
    cr_assert_eq(pl_coord_restore(&c), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(c.n_jobs, 2);
    cr_assert_eq(c.next_job, 5);
    pl_coord_job_t *q = pl_coord_find_job(&c, 3), *d = pl_coord_find_job(&c, 4);
    cr_assert(q && d);
    cr_assert_eq(q->state, PL_JOB_FAILED);
    cr_assert(strstr(q->error, "spec is missing from the specs file"), "%s", q->error);
    cr_assert_eq(d->state, PL_JOB_DONE);
    cr_assert_eq(d->n_results, 2, "its results are still served");
    for (int i = 0; i < c.n_jobs; i++)
        pl_coord_job_free(c.jobs[i]);
    free(c.jobs);
    pl_coord_store_close(&c.store);
    cr_assert_eq(s_sql_int(f.db, "SELECT count(*) FROM jobs WHERE id = 3 AND state = 'failed'"),
                 1, "the failure is saved");
    s_files_rm(&f);
}

/* What the spec writer handed on, in its order: each item's tag and outcome. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int n, tags[16];
    pl_status_t st[16];
    char why[16][256];
} s_done_t;

static void s_done(void *arg, void *tag, pl_status_t st)
{
    s_done_t *d = arg;
    pthread_mutex_lock(&d->lock);
    d->tags[d->n] = (int)(intptr_t)tag;
    d->st[d->n] = st;
    snprintf(d->why[d->n], sizeof(d->why[0]), "%s", st ? pl_error_msg() : "");
    d->n++;
    pthread_cond_broadcast(&d->cond);
    pthread_mutex_unlock(&d->lock);
}

static void s_done_wait(s_done_t *d, int n)
{
    pthread_mutex_lock(&d->lock);
    while (d->n < n)
        pthread_cond_wait(&d->cond, &d->lock);
    pthread_mutex_unlock(&d->lock);
}

static long s_spec_count(const s_files_t *f, int64_t id)
{
    char sql[96];
    snprintf(sql, sizeof(sql), "SELECT count(*) FROM specs WHERE id = %lld", (long long)id);
    return s_sql_int(f->specs, sql);
}

/* The spec writer hands items on in the order put, a spec only once durable; past its bounds a
 * put is refused "busy" with nothing queued; a spec that cannot be committed (another connection
 * holds the file's write lock past the busy timeout) fails alone, stores nothing, and those after
 * it are stored. */
Test(coord_specs, the_spec_writer_keeps_order_bounds_and_fails_only_what_cannot_be_stored,
     .timeout = 60)
{
    s_files_t f;
    s_files(&f);
    pl_coord_specs_t *sp;
    cr_assert_eq(pl_coord_specs_open(f.specs, &sp), PL_OK, "%s", pl_error_msg());
    sqlite3 *other;
    cr_assert_eq(sqlite3_open(f.specs, &other), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(other, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK,
                 "%s", sqlite3_errmsg(other));
    static s_done_t d = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
    pl_coord_spec_writer_t *w;
    cr_assert_eq(pl_coord_spec_writer_start(sp, 3, 1 << 20, s_done, &d, &w), PL_OK);
    cr_assert_eq(pl_coord_spec_writer_put(w, 1, s_spec, (void *)1), PL_OK);
    usleep(500 * 1000); /* the writer waits on the lock for it alone; the rest gather behind */
    cr_assert_eq(pl_coord_spec_writer_put(w, 0, NULL, (void *)2), PL_OK, "a place in the order");
    cr_assert_eq(pl_coord_spec_writer_put(w, 3, s_spec, (void *)3), PL_OK);
    cr_assert_eq(pl_coord_spec_writer_put(w, 4, s_spec, (void *)4), PL_OK);
    int items, specs;
    pl_coord_spec_writer_waiting(w, &items, &specs);
    cr_assert(items == 4 && specs == 3, "%d items, %d specs", items, specs);
    cr_assert_eq(pl_coord_spec_writer_put(w, 5, s_spec, (void *)5), PL_ERR_BUSY);
    cr_assert(strstr(pl_error_msg(), "busy") && strstr(pl_error_msg(), "3 job specs"), "%s",
              pl_error_msg());
    s_done_wait(&d, 1); /* the first commit gave up on the lock */
    cr_assert_eq(sqlite3_exec(other, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    s_done_wait(&d, 4);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(d.tags[i], i + 1, "handed on out of order: %d at %d", d.tags[i], i);
    cr_assert_neq(d.st[0], PL_OK, "a spec not committed was handed on as stored");
    cr_assert(strstr(d.why[0], "locked") || strstr(d.why[0], "busy"), "%s", d.why[0]);
    cr_assert_eq(s_spec_count(&f, 1), 0, "the failed spec left a row");
    for (int i = 1; i < 4; i++)
        cr_assert_eq(d.st[i], PL_OK, "item %d: %s", i + 1, d.why[i]);
    cr_assert(s_spec_count(&f, 3) == 1 && s_spec_count(&f, 4) == 1);
    for (double end = pl_now() + 10; (items || specs) && pl_now() < end; usleep(1000))
        pl_coord_spec_writer_waiting(w, &items, &specs);
    cr_assert(!items && !specs, "%d items, %d specs still counted", items, specs);
    /* a spec larger than the byte bound alone is let in; a drop is done in the next batch */
    char *big = malloc((2 << 20) + 3);
    memset(big, ' ', 2 << 20);
    memcpy(big + (2 << 20), "{}", 3);
    cr_assert_eq(pl_coord_spec_writer_put(w, 6, big, (void *)6), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(pl_coord_spec_writer_drop(w, 3), PL_OK);
    s_done_wait(&d, 5);
    cr_assert_eq(d.st[4], PL_OK, "%s", d.why[4]);
    pl_coord_spec_writer_stop(&w);
    cr_assert_null(w);
    free(big);
    cr_assert_eq(s_spec_count(&f, 6), 1);
    cr_assert_eq(s_spec_count(&f, 3), 0, "dropped before the stop");
    sqlite3_close(other);
    pl_coord_specs_close(&sp);
    s_files_rm(&f);
}
