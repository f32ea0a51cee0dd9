/* The state db's writer thread (daemon/coord_writer.c) against the store written directly: the
 * writes queued in order land as the same calls one by one would leave them (the last save of a
 * row wins, progress appended, a deletion deletes), every write is committed by stop, and a
 * write that fails inside a batch is reported alone (its code and job), while the writes batched
 * with it are committed all the same. */
#define SCRATCH_TEMPLATE "/tmp/pl-writer-XXXXXX"
#include "daemon/coord_writer.h"
#include "scratch_util.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *s_spec = "{\"model\":\"/m\",\"gen\":{\"prompts\":[[1,2]]}}";

typedef struct {
    int n;
    int64_t id[8];
    char state[8][16];
    int64_t generated[8];
} s_rows_t;

static pl_status_t s_row(void *user, const pl_coord_row_t *r)
{
    s_rows_t *rows = user;
    cr_assert_lt(rows->n, 8);
    rows->id[rows->n] = r->id;
    snprintf(rows->state[rows->n], sizeof(rows->state[0]), "%s", r->state);
    rows->generated[rows->n++] = r->generated;
    return PL_OK;
}

static pl_status_t s_chunk(void *user, const pl_coord_chunk_t *c)
{
    int *tokens = user;
    for (int i = 0; i < c->n; i++)
        tokens[c->at + i] = c->tokens[i];
    tokens[63] += c->n;
    return PL_OK;
}

typedef struct {
    int n;
    pl_coord_wfail_t f[4];
} s_fails_t;

static void s_fail(void *user, const pl_coord_wfail_t *f)
{
    s_fails_t *fs = user;
    cr_assert_lt(fs->n, 4);
    fs->f[fs->n] = *f;
    fs->f[fs->n++].why = NULL; /* borrowed for the call only */
}

Test(coord_writer, queued_writes_land_in_order_and_a_failure_is_reported_alone, .init = s_mkdir,
     .fini = s_rmdir)
{
    pl_coord_store_t *s;
    cr_assert_eq(pl_coord_store_open(s_path("coord.db"), &s), PL_OK, "%s", pl_error_msg());
    pl_coord_writer_t *w;
    cr_assert_eq(pl_coord_writer_start(s, &w), PL_OK, "%s", pl_error_msg());

    /* job 1 saved whole, then its state three times: the last wins */
    pl_coord_row_t r = {.id = 1, .state = "queued", .spec = s_spec, .n_seqs = 1};
    cr_assert_gt(pl_coord_writer_row(w, PL_COORD_W_PUT, &r, 2, 1), 0);
    const char *states[] = {"loading", "running", "running"};
    for (int k = 0; k < 3; k++) {
        pl_coord_row_t u = {
            .id = 1, .state = states[k], .n_seqs = 1, .generated = 10 + k, .epoch = 1};
        cr_assert_gt(pl_coord_writer_row(w, PL_COORD_W_PUT, &u, 2, 2), 0);
    }
    /* a state update of a row that is not there fails (PL_ERR_NOT_FOUND), in the same batches */
    pl_coord_row_t missing = {.id = 7, .state = "running", .n_seqs = 1};
    uint64_t bad = pl_coord_writer_row(w, PL_COORD_W_PUT, &missing, 2, 2);
    /* progress in two pieces; job 2 saved, then deleted */
    int32_t t1[] = {5, 6, 7}, t2[] = {8};
    pl_coord_chunk_t c1 = {.job = 1, .seq = 0, .at = 0, .n = 3, .tokens = t1};
    pl_coord_chunk_t c2 = {.job = 1, .seq = 0, .at = 3, .n = 1, .tokens = t2, .finish = 1};
    cr_assert_gt(pl_coord_writer_progress(w, &c1, 1), 0);
    cr_assert_gt(pl_coord_writer_progress(w, &c2, 1), 0);
    pl_coord_row_t r2 = {.id = 2, .state = "queued", .spec = s_spec, .n_seqs = 1};
    cr_assert_gt(pl_coord_writer_row(w, PL_COORD_W_PUT, &r2, 3, 2), 0);
    uint64_t last = pl_coord_writer_delete(w, PL_COORD_W_DELETE, 2);
    cr_assert_eq(last, pl_coord_writer_queued(w), "sequence numbers count the writes");
    cr_assert_eq(last, 9);

    pl_coord_writer_wait(w);
    s_fails_t fs = {0};
    cr_assert_eq(pl_coord_writer_collect(w, s_fail, &fs), last, "every write done");
    cr_assert_eq(fs.n, 1, "%d failures, one expected", fs.n);
    cr_assert_eq(fs.f[0].seq, bad);
    cr_assert_eq(fs.f[0].job, 7);
    cr_assert_eq(fs.f[0].code, PL_ERR_NOT_FOUND);
    pl_coord_writer_stop(&w);
    cr_assert_null(w);

    s_rows_t rows = {0};
    cr_assert_eq(pl_coord_store_each(s, s_row, &rows), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(rows.n, 1, "%d rows: job 2 deleted, job 7 never written", rows.n);
    cr_assert_eq(rows.id[0], 1);
    cr_assert_str_eq(rows.state[0], "running");
    cr_assert_eq(rows.generated[0], 12, "the last save wins");
    int tokens[64] = {0};
    cr_assert_eq(pl_coord_store_progress_each(s, s_chunk, tokens), PL_OK);
    cr_assert_eq(tokens[63], 4);
    cr_assert(tokens[0] == 5 && tokens[1] == 6 && tokens[2] == 7 && tokens[3] == 8);
    uint32_t nj, ne;
    cr_assert_eq(pl_coord_store_counters(s, &nj, &ne), PL_OK);
    cr_assert(nj == 3 && ne == 2, "counters %u %u", nj, ne);
    pl_coord_store_close(&s);
}
