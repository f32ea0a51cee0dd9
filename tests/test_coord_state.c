/* The coordinator's durable state: the SQLite store (rows and counters survive a reopen, files
 * are the owner's only), the stored-row decoder (accepts what was saved, refuses each bad field
 * by name), and the per-user state directory lookup. */
#include "common/state_dir.h"
#include "daemon/coord_int.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *s_spec = "{\"model\":\"/m\",\"gen\":{\"prompts\":[[1,2],[3]],"
                            "\"max_new_tokens\":4,\"sampling\":{\"seed\":\"7\"}}}";
static const char *s_res = "[{\"seq\":0,\"tokens\":[5,6],\"finish\":\"eos\"},"
                           "{\"seq\":1,\"tokens\":[9],\"finish\":\"length\"}]";

static void s_tmpdir(char *out, size_t len)
{
    snprintf(out, len, "/tmp/pl-state-XXXXXX");
    cr_assert_not_null(mkdtemp(out));
}

static pl_status_t s_count(void *user, const pl_coord_row_t *r)
{
    int *n = user;
    cr_assert_eq(r->id, *n == 0 ? 3 : 9, "rows come in id order");
    if (r->id == 3) {
        cr_assert_str_eq(r->state, "done");
        cr_assert_str_eq(r->results, s_res);
        cr_assert_eq(r->epoch, 12);
        cr_assert_eq(r->submitted_at, 1700000000.5);
    } else {
        cr_assert_null(r->results);
        cr_assert_null(r->plan);
    }
    (*n)++;
    return PL_OK;
}

Test(coord_state, rows_and_counters_survive_a_reopen)
{
    char dir[64], path[128];
    s_tmpdir(dir, sizeof(dir));
    snprintf(path, sizeof(path), "%s/coord.db", dir);
    pl_coord_store_t *s;
    uint32_t nj, ne;
    cr_assert_eq(pl_coord_store_open(path, &s), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(pl_coord_store_counters(s, &nj, &ne), PL_OK);
    cr_assert_eq(nj, 1, "a new database starts at job 1");
    cr_assert_eq(ne, 1);
    pl_coord_row_t r = {.id = 9, .state = "queued", .spec = s_spec, .n_seqs = 2};
    cr_assert_eq(pl_coord_store_put(s, &r, 10, 13), PL_OK, "%s", pl_error_msg());
    r = (pl_coord_row_t){.id = 3,
                         .state = "done",
                         .spec = s_spec,
                         .results = s_res,
                         .n_seqs = 2,
                         .epoch = 12,
                         .submitted_at = 1700000000.5};
    cr_assert_eq(pl_coord_store_put(s, &r, 10, 13), PL_OK);
    r.id = 4;
    cr_assert_eq(pl_coord_store_put(s, &r, 10, 13), PL_OK);
    cr_assert_eq(pl_coord_store_delete(s, 4), PL_OK);
    pl_coord_store_close(&s);
    cr_assert_null(s);
    pl_coord_store_close(&s); /* twice is harmless */

    struct stat sb;
    cr_assert_eq(stat(path, &sb), 0);
    cr_assert_eq(sb.st_mode & 077, 0, "the database is readable by others: %o", sb.st_mode);
    cr_assert_eq(pl_coord_store_open(path, &s), PL_OK);
    cr_assert_eq(pl_coord_store_counters(s, &nj, &ne), PL_OK);
    cr_assert_eq(nj, 10);
    cr_assert_eq(ne, 13);
    int n = 0;
    cr_assert_eq(pl_coord_store_each(s, s_count, &n), PL_OK);
    cr_assert_eq(n, 2);
    pl_coord_store_close(&s);
    cr_assert_neq(pl_coord_store_open("/nonexistent-dir/x/coord.db", &s), PL_OK);
    cr_assert(strstr(pl_error_msg(), "/nonexistent-dir/x/coord.db"), "%s", pl_error_msg());
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

static pl_status_t s_keep(void *user, const pl_coord_row_t *r)
{
    char **out = user;
    cr_assert_eq(r->id, 5);
    out[0] = strdup(r->state);
    out[1] = strdup(r->spec);
    out[2] = r->results ? strdup(r->results) : NULL;
    return PL_OK;
}

Test(coord_state, a_save_without_a_spec_updates_the_row_and_keeps_its_spec)
{
    char dir[64], path[128];
    s_tmpdir(dir, sizeof(dir));
    snprintf(path, sizeof(path), "%s/coord.db", dir);
    pl_coord_store_t *s;
    cr_assert_eq(pl_coord_store_open(path, &s), PL_OK, "%s", pl_error_msg());
    pl_coord_row_t r = {.id = 5, .state = "queued", .spec = s_spec, .n_seqs = 2};
    cr_assert_eq(pl_coord_store_put(s, &r, 6, 2), PL_OK, "%s", pl_error_msg());
    r = (pl_coord_row_t){.id = 5, .state = "done", .results = s_res, .n_seqs = 2, .epoch = 1};
    cr_assert_eq(pl_coord_store_put(s, &r, 6, 2), PL_OK, "%s", pl_error_msg());
    r.id = 6; /* no row to update: refused, and nothing is written */
    cr_assert_eq(pl_coord_store_put(s, &r, 7, 2), PL_ERR_NOT_FOUND);
    cr_assert(strstr(pl_error_msg(), "job 6"), "%s", pl_error_msg());
    pl_coord_store_close(&s);

    cr_assert_eq(pl_coord_store_open(path, &s), PL_OK);
    uint32_t nj, ne;
    cr_assert_eq(pl_coord_store_counters(s, &nj, &ne), PL_OK);
    cr_assert_eq(nj, 6, "the refused save's counters were rolled back");
    char *got[3] = {NULL};
    cr_assert_eq(pl_coord_store_each(s, s_keep, got), PL_OK);
    cr_assert_str_eq(got[0], "done");
    cr_assert_str_eq(got[1], s_spec, "the spec of the first save is kept");
    cr_assert_str_eq(got[2], s_res);
    for (int i = 0; i < 3; i++)
        free(got[i]);
    pl_coord_store_close(&s);
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

static void s_job_clear(pl_coord_job_t *j)
{
    json_decref(j->plan);
    pl_msg_results_free(j->results, j->n_results);
    pl_job_spec_clear(&j->spec);
    free(j);
}

Test(coord_state, a_saved_row_decodes_to_the_job)
{
    pl_coord_row_t r = {.id = 3,
                        .state = "done",
                        .spec = s_spec,
                        .results = s_res,
                        .plan = "{\"stages\": []}",
                        .error = "",
                        .n_seqs = 2,
                        .n_layers = 4,
                        .prompt_tokens = 3,
                        .generated = 3,
                        .epoch = 4000000000LL};
    pl_coord_job_t *j = NULL;
    cr_assert_eq(pl_coord_job_from_row(&r, &j), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(j->id, 3);
    cr_assert_eq(j->state, PL_JOB_DONE);
    cr_assert_eq(j->epoch, 4000000000u);
    cr_assert_str_eq(j->spec.model, "/m");
    cr_assert_eq(j->spec.gen.seed, 7);
    cr_assert_eq(j->n_results, 2);
    cr_assert_eq(j->results[0].tokens[1], 6);
    cr_assert_eq(j->results[1].finish, PL_FINISH_LENGTH);
    cr_assert(json_is_object(j->plan));
    s_job_clear(j);
}

static void s_refused(pl_coord_row_t r, const char *needle)
{
    pl_coord_job_t *j = (pl_coord_job_t *)0x1;
    cr_assert_neq(pl_coord_job_from_row(&r, &j), PL_OK, "accepted a row with bad %s", needle);
    cr_assert_eq(j, (pl_coord_job_t *)0x1, "output written on error");
    cr_assert(strstr(pl_error_msg(), needle), "'%s' not in '%s'", needle, pl_error_msg());
}

Test(coord_state, bad_rows_are_refused_naming_the_field)
{
    pl_coord_row_t ok = {.id = 3, .state = "done", .spec = s_spec, .results = s_res, .n_seqs = 2};
    pl_coord_row_t r = ok;
    r.id = 0, s_refused(r, "id");
    r = ok, r.id = 1LL << 32, s_refused(r, "id");
    r = ok, r.state = "sleeping", s_refused(r, "state");
    r = ok, r.state = NULL, s_refused(r, "state");
    /* r.spec NULL (the spec went missing) restores the job without it: test_coord_specs */
    r = ok, r.spec = "{not json", s_refused(r, "spec");
    r = ok, r.spec = "{\"model\": \"/m\"}", s_refused(r, "spec");
    r = ok, r.results = NULL, s_refused(r, "results");
    r = ok, r.results = "[]", s_refused(r, "results");
    r = ok, r.n_seqs = 3, s_refused(r, "results");
    r = ok, r.results = "[{\"seq\":0,\"tokens\":[-1],\"finish\":\"eos\"}]", r.n_seqs = 1,
    s_refused(r, "token");
    r = ok, r.plan = "[", s_refused(r, "plan");
    r = ok, r.epoch = -1, s_refused(r, "epoch");
    r = ok, r.n_seqs = -2, s_refused(r, "n_seqs");
}

Test(coord_state, the_state_dir_is_the_owners_only)
{
    char dir[64], want[128], got[4096];
    s_tmpdir(dir, sizeof(dir));
    setenv("XDG_STATE_HOME", dir, 1);
    snprintf(want, sizeof(want), "%s/pipeld", dir);
    cr_assert_eq(pl_state_dir(got, sizeof(got)), PL_OK, "%s", pl_error_msg());
    cr_assert_str_eq(got, want);
    struct stat sb;
    cr_assert_eq(stat(want, &sb), 0);
    cr_assert_eq(sb.st_mode & 0777, 0700, "created with mode %o", sb.st_mode & 0777);
    cr_assert_eq(pl_state_path("coord.db", got, sizeof(got)), PL_OK);
    cr_assert(strstr(got, "/pipeld/coord.db"), "%s", got);
    chmod(want, 0755); /* others may enter: refused, never silently used */
    cr_assert_neq(pl_state_dir(got, sizeof(got)), PL_OK);
    cr_assert(strstr(pl_error_msg(), "other users"), "%s", pl_error_msg());
    setenv("XDG_STATE_HOME", "relative/path", 1); /* ignored, as the XDG spec says: HOME */
    setenv("HOME", dir, 1);
    cr_assert_eq(pl_state_dir(got, sizeof(got)), PL_OK, "%s", pl_error_msg());
    snprintf(want, sizeof(want), "%s/.local/state/pipeld", dir);
    cr_assert_str_eq(got, want);
    unsetenv("XDG_STATE_HOME");
    unsetenv("HOME");
    cr_assert_neq(pl_state_dir(got, sizeof(got)), PL_OK);
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

/* An ASSIGN too large for the control plane (a resume of many long sequences) is refused whole
 * with a message that says so, rather than sent and lost; one that fits passes, and the
 * bound is the one ctl.c enforces on the wire. */
Test(coord_state, an_assignment_over_the_message_bound_is_refused_with_the_reason)
{
    enum { S_SEQS = 2000, S_TOKENS = 700 }; /* ~7 bytes a token in JSON: about 9.3 MiB */
    json_t *spec_json = json_loads(s_spec, 0, NULL);
    pl_msg_t m;
    pl_msg_init(&m, PL_MSG_ASSIGN);
    m.assign = (pl_msg_assign_t){.job = 5, .stage = 0, .n_stages = 2, .epoch = 3, .first = 0,
                                 .last = 1, .max_ctx = 1024, .max_tokens = 64,
                                 .microbatches = 2};
    cr_assert_eq(pl_job_spec_decode(spec_json, &m.assign.spec), PL_OK, "%s", pl_error_msg());
    json_decref(spec_json);
    pl_msg_result_t *r = calloc(S_SEQS, sizeof(*r));
    for (int s = 0; s < S_SEQS; s++) {
        r[s].seq = s;
        r[s].tokens = malloc(S_TOKENS * sizeof(int32_t));
        for (int k = 0; k < S_TOKENS; k++)
            r[s].tokens[k] = 100000 + k;
    }
    m.assign.resume = r;
    m.assign.n_resume = S_SEQS;
    /* a few tokens each: fits */
    for (int s = 0; s < S_SEQS; s++)
        r[s].n_tokens = 3;
    cr_assert_eq(pl_coord_assign_fits(&m), PL_OK, "%s", pl_error_msg());
    for (int s = 0; s < S_SEQS; s++)
        r[s].n_tokens = S_TOKENS;
    cr_assert_eq(pl_coord_assign_fits(&m), PL_ERR_RANGE);
    const char *e = pl_error_msg();
    cr_assert(strstr(e, "job 5") && strstr(e, "cannot resume") && strstr(e, "8 MiB") &&
                  strstr(e, "1400000 token(s)"),
              "%s", e);
    /* what the check measured is what the wire refuses */
    json_t *body;
    cr_assert_eq(pl_msg_encode(&m, &body), PL_OK);
    cr_assert_gt(json_dumpb(body, NULL, 0, JSON_COMPACT), PL_CTL_MAX_BODY);
    json_decref(body);
    pl_msg_results_free(r, S_SEQS);
    m.assign.resume = NULL;
    m.assign.n_resume = 0;
    pl_job_spec_clear(&m.assign.spec);
}
