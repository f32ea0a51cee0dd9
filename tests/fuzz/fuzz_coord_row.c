/* libFuzzer harness for the coordinator's stored job rows (the state database is outside input):
 * pl_coord_job_from_row must refuse or accept every row without crashing, and an accepted job's
 * spec and results must encode again. Built by tests/fuzz/CMakeLists.txt (tools/fuzz.sh runs it); by hand:
 *   clang -g -O1 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -I. \
 *       tests/fuzz/fuzz_coord_row.c daemon/coord_row.c daemon/coord_event.c \
 *       daemon/coord_train_row.c transport/ctl.c \
 *       transport/act_dtype.c \
 *       transport/msg*.c \
 *       common/status.c common/json.c common/job_spec.c common/util.c common/log.c \
 *       -ljansson -lzmq -lm -o /tmp/fuzz_coord_row
 *   /tmp/fuzz_coord_row -max_total_time=60 -max_len=8192 /tmp/fuzz_coord_row_corpus
 * Input: 8 bytes of numbers (state pick, n_seqs, ids...), then five NUL-separated texts: the
 * spec JSON, the results JSON, the plan JSON, the events JSON, a training job's progress JSON
 * (a missing one is NULL). An accepted progress must encode again to the same row. */
#include "daemon/coord_int.h"
#include "daemon/coord_train.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *s_states[] = {"queued", "loading",  "running", "done",
                                 "failed", "canceled", "bogus",   NULL};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 8)
        return 0;
    char *text = malloc(size - 8 + 1);
    if (!text)
        return 0;
    memcpy(text, data + 8, size - 8);
    text[size - 8] = '\0';
    const char *parts[5] = {NULL, NULL, NULL, NULL, NULL};
    char *p = text, *end = text + (size - 8);
    for (int i = 0; i < 5 && p <= end; i++) {
        parts[i] = p;
        p += strlen(p) + 1;
    }
    pl_coord_row_t r = {.id = (int64_t)(int8_t)data[0] * 100000000LL + data[1],
                        .state = s_states[data[2] % 8],
                        .spec = parts[0],
                        .results = parts[1] && parts[1][0] ? parts[1] : NULL,
                        .plan = parts[2] && parts[2][0] ? parts[2] : NULL,
                        .events = parts[3] && parts[3][0] ? parts[3] : NULL,
                        .train = parts[4] && parts[4][0] ? parts[4] : NULL,
                        .error = "x",
                        .n_seqs = (int8_t)data[3],
                        .n_layers = (int8_t)data[4] * 64,
                        .generated = (int8_t)data[5],
                        .prompt_tokens = data[6],
                        .epoch = (int64_t)(int8_t)data[7] * (1LL << 28), /* no shift of a negative */
                        .submitted_at = 1.0,
                        .ended_at = 0};
    pl_coord_job_t *j = NULL;
    if (pl_coord_job_from_row(&r, &j) == PL_OK) {
        json_t *spec, *res = NULL;
        if (pl_job_spec_encode(&j->spec, &spec) != PL_OK)
            abort();
        json_decref(spec);
        if (j->n_results && pl_msg_results_encode(j->results, j->n_results, &res) != PL_OK)
            abort();
        json_decref(res);
        if (j->n_results != r.n_seqs && r.results)
            abort();
        if (j->n_events < 0 || j->n_events > PL_COORD_MAX_EVENTS)
            abort();
        for (int i = 0; i < j->n_events; i++)
            if (!memchr(j->events[i].what, '\0', sizeof(j->events[i].what)) ||
                !memchr(j->events[i].detail, '\0', sizeof(j->events[i].detail)))
                abort();
        json_t *ev = pl_coord_events_json(j);
        if (!ev || json_array_size(ev) != (size_t)j->n_events)
            abort();
        json_decref(ev);
        if (j->train) { /* in range, and the same row again */
            const pl_coord_train_t *t = j->train;
            if (!j->spec.train || t->first_step < 0 || t->step < t->first_step ||
                t->step > j->spec.train->cfg.steps || t->ckpt_step > t->step)
                abort();
            json_t *row = pl_coord_train_row(j);
            char *a = row ? json_dumps(row, JSON_COMPACT) : NULL;
            pl_coord_job_t k = {.spec = j->spec};
            if (!a || pl_coord_train_from_row(row, &k) != PL_OK)
                abort();
            json_decref(row);
            row = pl_coord_train_row(&k);
            char *b = row ? json_dumps(row, JSON_COMPACT) : NULL;
            if (!b || strcmp(a, b))
                abort();
            free(a);
            free(b);
            json_decref(row);
            pl_coord_train_free(&k);
            pl_coord_train_free(j);
        }
        json_decref(j->plan);
        pl_msg_results_free(j->results, j->n_results);
        pl_job_spec_clear(&j->spec);
        free(j);
    }
    free(text);
    return 0;
}
