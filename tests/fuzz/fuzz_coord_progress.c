/* libFuzzer harness for the state database's progress rows (daemon/coord_store.c, coord_resume.c):
 * the fuzzer's bytes become the progress table of a fresh database beside two job rows and a tiny
 * model, and the coordinator's restore (pl_coord_restore) runs on it, as a restarted pipecoord
 * does. Built by tests/fuzz/CMakeLists.txt (tools/fuzz.sh coord_progress runs it). A restore must
 * succeed or fail with an error naming the database, and what it restored must hold: every
 * sequence's tokens in the vocabulary, within max_new_tokens, all of them saved, and the resume
 * list ASSIGN would carry agreeing with them.
 * Input: 4 bytes (job 1's and job 2's stored state, max_new_tokens, prompts per job), then rows
 * of 8 bytes each followed by their payload: job pick, seq (int8), at (int16 LE), finish (int8),
 * the tokens column's kind (0 blob, 1 text, 2 integer, 3 NULL, 4 real, else empty blob; bit 7:
 * seq scaled past int32), payload length, at's scale. A fresh scratch directory per input,
 * removed before returning. */
#include "common/log.h"
#include "daemon/coord_int.h"
#include "model/safetensors_write.h"

#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_VOCAB 32
#define S_HIDDEN 4

static const char *const s_states[] = {"queued", "loading", "running", "canceled"};

static const char s_config[] =
    "{\"model_type\": \"llama\", \"hidden_size\": 4, \"intermediate_size\": 6,"
    " \"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"num_key_value_heads\": 1,"
    " \"head_dim\": 2, \"vocab_size\": 32, \"max_position_embeddings\": 256,"
    " \"rms_norm_eps\": 1e-6, \"tie_word_embeddings\": true, \"eos_token_id\": 3}";

/* A one-layer Llama the restore validates each job against (its vocabulary bounds the tokens). */
static void s_model(const char *dir)
{
    static const char *const sfx[] = {"input_layernorm", "self_attn.q_proj", "self_attn.k_proj",
                                      "self_attn.v_proj", "self_attn.o_proj",
                                      "post_attention_layernorm", "mlp.gate_proj",
                                      "mlp.up_proj", "mlp.down_proj"};
    static const int64_t dims[][3] = {{1, 4, 0}, {2, 4, 4}, {2, 2, 4}, {2, 2, 4}, {2, 4, 4},
                                      {1, 4, 0}, {2, 6, 4}, {2, 6, 4}, {2, 4, 6}};
    static float zeros[S_VOCAB * S_HIDDEN];
    char names[11][64], path[256];
    pl_st_out_t t[11];
    int n = 0;
    t[n++] = (pl_st_out_t){"model.embed_tokens.weight", 2, {S_VOCAB, S_HIDDEN}, zeros};
    for (int i = 0; i < 9; i++, n++) {
        snprintf(names[n], sizeof(names[n]), "model.layers.0.%s.weight", sfx[i]);
        t[n] = (pl_st_out_t){names[n], (int)dims[i][0], {dims[i][1], dims[i][2]}, zeros};
    }
    t[n++] = (pl_st_out_t){"model.norm.weight", 1, {S_HIDDEN}, zeros};
    snprintf(path, sizeof(path), "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f || fputs(s_config, f) < 0 || fclose(f) != 0)
        abort();
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    if (pl_st_write(path, t, (size_t)n) != PL_OK)
        abort();
}

/* Job `id`'s stored row: n prompts, max_new_tokens max_new, in state `state`. */
static void s_job_row(pl_coord_store_t *s, const char *model, int64_t id, const char *state,
                      int n, int max_new)
{
    char spec[1024];
    size_t len = (size_t)snprintf(spec, sizeof(spec), "{\"model\":\"%s\",\"gen\":{\"prompts\":[",
                                  model);
    for (int p = 0; p < n; p++)
        len += (size_t)snprintf(spec + len, sizeof(spec) - len, "%s[%d,%d]", p ? "," : "",
                                1 + p, 2 + p);
    snprintf(spec + len, sizeof(spec) - len, "],\"max_new_tokens\":%d}}", max_new);
    pl_coord_row_t r = {.id = id,
                        .state = state,
                        .spec = spec,
                        .error = "",
                        .n_seqs = n,
                        .n_layers = 1,
                        .epoch = id,
                        .submitted_at = 1.0};
    if (pl_coord_store_put(s, &r, 3, 3) != PL_OK)
        abort();
}

/* The fuzzer's rows into the progress table, as whatever column types they ask for. */
static void s_progress_rows(const char *db, const uint8_t *d, size_t size)
{
    static const int64_t jobs[] = {1, 2, 3, 0, -1, (int64_t)1 << 40};
    sqlite3 *h;
    sqlite3_stmt *q;
    if (sqlite3_open(db, &h) != SQLITE_OK ||
        sqlite3_prepare_v2(h,
                           "INSERT OR REPLACE INTO progress(job, seq, at, tokens, finish)"
                           " VALUES(?,?,?,?,?)",
                           -1, &q, NULL) != SQLITE_OK)
        abort();
    for (size_t i = 0; i + 8 <= size;) {
        const uint8_t *r = d + i;
        size_t len = r[6] <= size - i - 8 ? r[6] : size - i - 8;
        const uint8_t *pay = r + 8;
        int64_t seq = (int8_t)r[1], at = (int16_t)(r[2] | r[3] << 8);
        if (r[5] & 0x80)
            seq *= (int64_t)1 << 31;
        at *= r[7] ? (int64_t)r[7] << 16 : 1;
        sqlite3_reset(q);
        sqlite3_bind_int64(q, 1, jobs[r[0] % 6]);
        sqlite3_bind_int64(q, 2, seq);
        sqlite3_bind_int64(q, 3, at);
        switch (r[5] & 0x7f) {
        case 0: sqlite3_bind_blob(q, 4, pay, (int)len, SQLITE_STATIC); break;
        case 1: sqlite3_bind_text(q, 4, (const char *)pay, (int)len, SQLITE_STATIC); break;
        case 2: {
            int64_t v = 0;
            memcpy(&v, pay, len < 8 ? len : 8);
            sqlite3_bind_int64(q, 4, v);
            break;
        }
        case 3: sqlite3_bind_null(q, 4); break; /* NOT NULL: refused, the row is left out */
        case 4: {
            double v = 0;
            memcpy(&v, pay, len < 8 ? len : 8);
            sqlite3_bind_double(q, 4, v);
            break;
        }
        default: sqlite3_bind_zeroblob(q, 4, 0);
        }
        sqlite3_bind_int(q, 5, (int8_t)r[4]);
        sqlite3_step(q); /* a constraint may refuse it: so may a real database's */
        i += 8 + len;
    }
    sqlite3_finalize(q);
    sqlite3_close(h);
}

/* What a restored job holds must be what a running job could hold. */
static void s_check_job(const pl_coord_job_t *j)
{
    if (!j->seqs)
        return;
    if (j->vocab != S_VOCAB)
        abort();
    int max = j->spec.gen.max_new_tokens;
    for (int s = 0; s < j->n_seqs; s++) {
        const pl_coord_seq_t *q = &j->seqs[s];
        if (q->n < 0 || q->n > q->cap || q->n > max || q->saved != q->n || q->finish < 0 ||
            q->finish > PL_FINISH_STOP || (q->n == max && !q->finish) || (q->n && !q->tok))
            abort();
        for (int t = 0; t < q->n; t++)
            if (q->tok[t] < 0 || q->tok[t] >= S_VOCAB)
                abort();
    }
    pl_msg_result_t *r;
    int n;
    if (pl_coord_resume_list(j, &r, &n) != PL_OK || n > j->n_seqs)
        abort();
    for (int k = 0; k < n; k++)
        if (r[k].seq < 0 || r[k].seq >= j->n_seqs || r[k].n_tokens != j->seqs[r[k].seq].n ||
            (r[k].n_tokens > 0 && /* a sequence with none yet has no arrays to compare */
             memcmp(r[k].tokens, j->seqs[r[k].seq].tok, (size_t)r[k].n_tokens * 4) != 0))
            abort();
    pl_msg_results_free(r, n);
}

static int s_one(const char *dir, const uint8_t *data, size_t size)
{
    char model[128], db[128];
    snprintf(model, sizeof(model), "%s/m", dir);
    snprintf(db, sizeof(db), "%s/coord.db", dir);
    if (mkdir(model, 0700) != 0)
        abort();
    s_model(model);
    int max_new = 1 + data[2] % 16, n = 1 + data[3] % 4;
    pl_coord_store_t *store;
    if (pl_coord_store_open(db, &store) != PL_OK)
        abort();
    s_job_row(store, model, 1, s_states[data[0] % 4], n, max_new);
    s_job_row(store, model, 2, s_states[data[1] % 4], n, max_new);
    pl_coord_store_close(&store);
    s_progress_rows(db, data + 4, size - 4);

    static pl_cfg_cluster_t cfg; /* what restore reads of it: nothing beyond the zeros */
    pl_coord_t c = {.cfg = &cfg, .next_job = 1, .next_epoch = 1};
    if (pl_coord_store_open(db, &c.store) != PL_OK)
        abort();
    pl_status_t st = pl_coord_restore(&c);
    if (st == PL_OK) {
        if (c.next_job < 3 || c.next_epoch < 3 || c.n_jobs != 2)
            abort();
        for (int i = 0; i < c.n_jobs; i++)
            s_check_job(c.jobs[i]);
    } else if (!strstr(pl_error_msg(), db)) {
        abort(); /* every error names the database */
    }
    for (int i = 0; i < c.n_jobs; i++)
        pl_coord_job_free(c.jobs[i]);
    free(c.jobs);
    pl_coord_store_close(&c.store);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const files[] = {"coord.db",           "coord.db-wal",
                                        "coord.db-shm",       "coord.db-journal",
                                        "coord-specs.db",     "coord-specs.db-wal",
                                        "coord-specs.db-shm", "m/config.json",
                                        "m/model.safetensors", "m/model.safetensors.tmp"};
    char dir[64], path[160];
    if (size < 4)
        return 0;
    pl_log_set_level(PL_LOG_ERROR); /* a refused piece is a warning: not one a run */
    /* memory where there is some: the store syncs every transaction, which a disk makes slow */
    snprintf(dir, sizeof(dir), "%s/pl_fuzz_cprog_XXXXXX",
             access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    if (!mkdtemp(dir))
        abort();
    int rc = s_one(dir, data, size);
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
        unlink(path);
    }
    snprintf(path, sizeof(path), "%s/m", dir);
    rmdir(path);
    rmdir(dir);
    return rc;
}
