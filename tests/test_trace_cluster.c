/* Integration: a real 3-stage job on a local cluster, traced. `pipectl trace` writes Chrome Trace
 * JSON with exactly one compute slice per (stage, microbatch, step, prefill chunk) that ran (the
 * count the job's shape and each stage's own call counters give), slices that never overlap on a
 * stage and follow each microbatch from stage to stage, flow arrows into every compute fed by a
 * message; its SVG renders to a PNG of the documented size (rsvg-convert); a job with
 * `trace: false` has none; a running job's trace holds what its stages did so far. */
#include "job_util.h"
#include "tools/pipectl/trace.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>

#define S_STAGES 3
#define S_MB 3
#define S_NEW 8
#define S_CHUNK 2

static tc_cluster_t s_c;
static int s_passed;

/* prompt lengths; stage 0's batcher spreads the sequences over S_MB lanes */
static const int s_len[] = {4, 3, 2, 5, 1, 3};
#define S_SEQS ((int)(sizeof(s_len) / sizeof(s_len[0])))

static void s_teardown(void)
{
    tc_cluster_end(&s_c, s_passed);
}

static void s_setup(void)
{
    const int threads[S_STAGES] = {1, 1, 1};
    cr_assert_eq(tc_cluster_start(&s_c, S_STAGES, threads), 0, "nodes did not register");
    cr_assert_eq(tc_make_model(s_c.dir, "m", "--layers 6 --hidden 128 --vocab 256 --seed 3"), 0);
    char path[600], text[512] = "";
    for (int s = 0; s < S_SEQS; s++) {
        strcat(text, "[");
        for (int t = 0; t < s_len[s]; t++)
            snprintf(text + strlen(text), sizeof(text) - strlen(text), "%s%d", t ? "," : "",
                     1 + (7 * s + t) % 200);
        strcat(text, "]\n");
    }
    snprintf(path, sizeof(path), "%s/prompts.jsonl", s_c.dir);
    tc_write(path, text);
}

/* Steps a lane may reach: every sequence's decode steps could fall in one lane, and each
 * prompt chunk could take a step of its own. */
#define S_STEPS (S_SEQS * (S_NEW + 3))

typedef struct {
    double ts, dur;
    int pid;
    const char *cat;
    int mb, step, part;
} s_slice_t;

static int s_by_time(const void *a, const void *b)
{
    const s_slice_t *x = a, *y = b;
    if (x->pid != y->pid)
        return x->pid - y->pid;
    return x->ts < y->ts ? -1 : x->ts > y->ts;
}

#define S_PARTS 8
/* the compute slice of (stage, mb, step, part); NULL when none */
static const s_slice_t *s_comp[S_STAGES][S_MB][S_STEPS][S_PARTS];

static int s_int(const json_t *o, const char *k)
{
    const json_t *v = json_object_get(o, k);
    cr_assert(json_is_integer(v), "field %s missing", k);
    return (int)json_integer_value(v);
}

/* Per stage, its forward calls as its own counters (STATUS) report them. */
static void s_calls(int job, int calls[S_STAGES])
{
    char *js;
    cr_assert_eq(tc_sh(&js, "%s/pipectl -c %s -o json status %d", tc_bin(), s_c.ep, job), 0);
    json_t *r = json_loads(js, 0, NULL);
    cr_assert_not_null(r, "%s", js);
    json_t *stages = json_object_get(r, "stages");
    cr_assert_eq(json_array_size(stages), S_STAGES, "%s", js);
    for (int k = 0; k < S_STAGES; k++) {
        json_t *st = json_object_get(json_array_get(stages, (size_t)k), "stats");
        calls[k] = s_int(st, "prefill_calls") + s_int(st, "decode_calls");
    }
    json_decref(r);
    free(js);
}

static void s_check_png(const char *path, int w, int h)
{
    unsigned char b[24];
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s missing", path);
    cr_assert_eq(fread(b, 1, sizeof(b), f), sizeof(b));
    fclose(f);
    cr_assert(!memcmp(b, "\x89PNG\r\n\x1a\n", 8) && !memcmp(b + 12, "IHDR", 4), "not a PNG");
    int gw = (b[16] << 24) | (b[17] << 16) | (b[18] << 8) | b[19];
    int gh = (b[20] << 24) | (b[21] << 16) | (b[22] << 8) | b[23];
    cr_assert(gw == w && gh == h, "PNG is %dx%d, want %dx%d", gw, gh, w, h);
}

Test(trace_cluster, a_three_stage_job_traced_end_to_end, .init = s_setup, .fini = s_teardown,
     .timeout = 300)
{
    char extra[256];
    snprintf(extra, sizeof(extra),
             "stages: %d\nmicrobatches: %d\nmax_new_tokens: %d\nstop_at_eos: false\n"
             "prefill_chunk: %d\n",
             S_STAGES, S_MB, S_NEW, S_CHUNK);
    tc_job(&s_c, "job", "m", extra);
    int rc;
    char *out = tc_submit(&s_c, "job", &rc);
    cr_assert_eq(rc, 0, "job failed: %s", tc_err(&s_c, "job"));
    free(out);

    char *err;
    rc = tc_sh(&err, "%s/pipectl -c %s trace 1 -o %s/trace.json --svg %s/timeline.svg 2>&1",
               tc_bin(), s_c.ep, s_c.dir, s_c.dir);
    cr_assert_eq(rc, 0, "pipectl trace: %s", err);
    cr_assert(strstr(err, "3 of 3 stages traced"), "%s", err);
    free(err);

    char path[600];
    json_error_t je;
    snprintf(path, sizeof(path), "%s/trace.json", s_c.dir);
    json_t *doc = json_load_file(path, 0, &je);
    cr_assert_not_null(doc, "trace.json: line %d: %s", je.line, je.text);
    json_t *ev = json_object_get(doc, "traceEvents");
    cr_assert(json_is_array(ev) && json_array_size(ev) > 0);

    /* a named process per stage: stage, node and device; every stage on its own node */
    bool named[S_STAGES] = {0}, node_seen[S_STAGES] = {0};
    size_t n = json_array_size(ev);
    s_slice_t *sl = calloc(n, sizeof(*sl));
    int n_sl = 0, n_comp = 0, n_cat[S_STAGES][3] = {{0}};
    int flows_s = 0, flows_f = 0, f_into[S_STAGES] = {0};
    json_t *flow_pid = json_object(); /* id -> pid of its "s" */
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(ev, i);
        const char *ph = json_string_value(json_object_get(e, "ph"));
        int pid = s_int(e, "pid");
        cr_assert(ph && pid >= 0 && pid < S_STAGES, "event %zu", i);
        if (!strcmp(ph, "M")) {
            const char *what = json_string_value(json_object_get(e, "name"));
            if (!strcmp(what, "process_name")) {
                const char *name =
                    json_string_value(json_object_get(json_object_get(e, "args"), "name"));
                char want[32];
                snprintf(want, sizeof(want), "stage %d ", pid);
                cr_assert(name && strstr(name, want) && strstr(name, "cpu:0"), "%s", name);
                const char *nd = strstr(name, "node");
                cr_assert_not_null(nd, "%s", name);
                int k = nd[4] - '0';
                cr_assert(k >= 0 && k < S_STAGES && !node_seen[k], "%s", name);
                node_seen[k] = named[pid] = true;
            }
            continue;
        }
        if (!strcmp(ph, "s") || !strcmp(ph, "f")) {
            char id[32];
            snprintf(id, sizeof(id), "%lld",
                     (long long)json_integer_value(json_object_get(e, "id")));
            if (ph[0] == 's') {
                flows_s++;
                json_object_set_new(flow_pid, id, json_integer(pid));
            } else {
                flows_f++;
                f_into[pid]++;
                json_t *from = json_object_get(flow_pid, id);
                cr_assert_not_null(from, "flow %s ends before it starts", id);
                cr_assert_eq((json_integer_value(from) + 1) % S_STAGES, pid,
                             "flow %s from stage %lld into stage %d", id,
                             (long long)json_integer_value(from), pid);
            }
            continue;
        }
        cr_assert_str_eq(ph, "X");
        json_t *args = json_object_get(e, "args");
        s_slice_t *x = &sl[n_sl++];
        *x = (s_slice_t){.ts = json_number_value(json_object_get(e, "ts")),
                         .dur = json_number_value(json_object_get(e, "dur")),
                         .pid = pid,
                         .cat = json_string_value(json_object_get(e, "cat")),
                         .mb = s_int(args, "mb"),
                         .step = s_int(args, "step"),
                         .part = s_int(args, "part")};
        cr_assert(x->cat && x->dur >= 0 && x->ts >= 0, "slice %zu", i);
        n_cat[pid][!strcmp(x->cat, "compute") ? 1 : !strcmp(x->cat, "recv") ? 0 : 2]++;
        if (strcmp(x->cat, "compute"))
            continue;
        cr_assert(x->mb < S_MB && x->step < S_STEPS && x->part < S_PARTS, "mb %d step %d part %d",
                  x->mb, x->step, x->part);
        cr_assert_null(s_comp[pid][x->mb][x->step][x->part],
                       "two compute slices for stage %d mb %d step %d part %d", pid, x->mb,
                       x->step, x->part);
        s_comp[pid][x->mb][x->step][x->part] = x;
        n_comp++;
    }
    for (int k = 0; k < S_STAGES; k++) {
        cr_assert(named[k], "stage %d has no process_name", k);
        cr_assert(n_cat[k][0] > 0 && n_cat[k][2] > 0, "stage %d: no receive or send slices", k);
    }

    /* exactly one slice per (stage, mb, step, chunk) that ran, the same messages on every
     * stage (each passes through all of them), as many as each stage's own call counters say;
     * at least the prompts' chunks and every sequence's decode steps, shared */
    int calls[S_STAGES], want_per_stage = n_cat[0][1], at_least = 0, decode_steps = 0;
    s_calls(1, calls);
    for (int i = 0; i < S_SEQS; i++)
        at_least = (s_len[i] + S_CHUNK - 1) / S_CHUNK > at_least
                       ? (s_len[i] + S_CHUNK - 1) / S_CHUNK : at_least;
    at_least += S_NEW - 1;
    cr_assert_geq(want_per_stage, at_least, "stage 0: %d compute slices", want_per_stage);
    for (int k = 0; k < S_STAGES; k++) {
        cr_assert_eq(n_cat[k][1], want_per_stage, "stage %d: %d compute slices, stage 0 %d", k,
                     n_cat[k][1], want_per_stage);
        cr_assert_eq(calls[k], want_per_stage, "stage %d made %d forward calls", k, calls[k]);
        for (int mb = 0; mb < S_MB; mb++)
            for (int st = 0; st < S_STEPS; st++)
                for (int p = 0; p < S_PARTS; p++)
                    cr_assert_eq(s_comp[k][mb][st][p] != NULL, s_comp[0][mb][st][p] != NULL,
                                 "stage %d mb %d step %d part %d", k, mb, st, p);
    }
    for (int mb = 0; mb < S_MB; mb++)
        for (int st = 1; st < S_STEPS; st++)
            decode_steps += s_comp[0][mb][st][0] != NULL;
    cr_assert_eq(n_comp, S_STAGES * want_per_stage);

    /* a stage's slices never overlap */
    qsort(sl, (size_t)n_sl, sizeof(*sl), s_by_time);
    for (int i = 1; i < n_sl; i++)
        if (sl[i].pid == sl[i - 1].pid)
            cr_assert(sl[i].ts >= sl[i - 1].ts + sl[i - 1].dur - 1e-3,
                      "stage %d: a %s slice at %.3f us starts inside the %s slice [%.3f, %.3f]",
                      sl[i].pid, sl[i].cat, sl[i].ts, sl[i - 1].cat, sl[i - 1].ts,
                      sl[i - 1].ts + sl[i - 1].dur);

    /* a microbatch's step starts on stage k+1 after it ended on stage k, and its next step on
     * stage 0 after the last stage sampled it */
    for (int mb = 0; mb < S_MB; mb++)
        for (int st = 0; st < S_STEPS; st++)
            for (int p = 0; p < S_PARTS; p++) {
                for (int k = 0; k + 1 < S_STAGES; k++) {
                    const s_slice_t *a = s_comp[k][mb][st][p], *b = s_comp[k + 1][mb][st][p];
                    if (!a)
                        continue;
                    cr_assert(b->ts >= a->ts + a->dur - 1e-3,
                              "mb %d step %d: stage %d starts at %.3f us, before stage %d ends "
                              "at %.3f us",
                              mb, st, k + 1, b->ts, k, a->ts + a->dur);
                }
                const s_slice_t *l = s_comp[S_STAGES - 1][mb][st][p];
                if (l && st + 1 < S_STEPS && s_comp[0][mb][st + 1][0]) {
                    const s_slice_t *b = s_comp[0][mb][st + 1][0];
                    cr_assert(b->ts >= l->ts + l->dur - 1e-3, "mb %d step %d on stage 0 starts "
                              "before the last stage sampled step %d", mb, st + 1, st);
                }
            }

    /* flows: one into every compute a message fed */
    cr_assert_eq(flows_s, flows_f);
    cr_assert_eq(f_into[1], want_per_stage);
    cr_assert_eq(f_into[2], want_per_stage);
    cr_assert_eq(f_into[0], decode_steps, "stage 0's later steps each start from tokens");

    json_t *other = json_object_get(json_object_get(doc, "otherData"), "stages");
    cr_assert_eq(json_array_size(other), S_STAGES);
    for (int k = 0; k < S_STAGES; k++)
        cr_assert_eq(s_int(json_array_get(other, (size_t)k), "dropped"), 0);
    free(sl);
    json_decref(flow_pid);
    json_decref(doc);

    /* the SVG renders, at its documented size */
    rc = tc_sh(&err, "rsvg-convert -o %s/timeline.png %s/timeline.svg 2>&1", s_c.dir, s_c.dir);
    cr_assert_eq(rc, 0, "rsvg-convert (Debian's librsvg2-bin; tools/setup.sh installs it): %s",
                 err);
    free(err);
    snprintf(path, sizeof(path), "%s/timeline.png", s_c.dir);
    s_check_png(path, PL_PIPECTL_SVG_WIDTH, PL_PIPECTL_SVG_HEIGHT(S_STAGES));

    /* trace: false records none; an unknown job is an error */
    snprintf(extra, sizeof(extra), "stages: %d\nmax_new_tokens: 2\ntrace: false\n", S_STAGES);
    tc_job(&s_c, "quiet", "m", extra);
    out = tc_submit(&s_c, "quiet", &rc);
    cr_assert_eq(rc, 0, "job failed: %s", tc_err(&s_c, "quiet"));
    free(out);
    rc = tc_sh(&err, "%s/pipectl -c %s trace 2 -o %s/quiet.json 2>&1", tc_bin(), s_c.ep, s_c.dir);
    cr_assert_eq(rc, 1, "%s", err);
    cr_assert(strstr(err, "has no trace"), "%s", err);
    free(err);
    rc = tc_sh(&err, "%s/pipectl -c %s trace 99 2>&1", tc_bin(), s_c.ep);
    cr_assert_eq(rc, 1, "%s", err);
    cr_assert(strstr(err, "no job 99"), "%s", err);
    free(err);
    s_passed = 1;
}

/* The value of KEY (in object OBJ, or at the top when NULL) of `pipectl -o json status id`, as
 * text (caller frees; "" when absent). */
static char *s_status_field(int id, const char *obj, const char *key)
{
    char *js;
    tc_sh(&js, "%s/pipectl -c %s -o json status %d 2>/dev/null", tc_bin(), s_c.ep, id);
    json_t *r = json_loads(js, 0, NULL), *o = r && obj ? json_object_get(r, obj) : r;
    json_t *v = json_object_get(o, key);
    char buf[64] = "";
    if (json_is_string(v))
        snprintf(buf, sizeof(buf), "%s", json_string_value(v));
    else if (json_is_integer(v))
        snprintf(buf, sizeof(buf), "%lld", (long long)json_integer_value(v));
    json_decref(r);
    free(js);
    return strdup(buf);
}

Test(trace_cluster, a_running_job_has_its_trace_so_far, .init = s_setup, .fini = s_teardown,
     .timeout = 300)
{
    char extra[256], *out, *err;
    snprintf(extra, sizeof(extra),
             "stages: %d\nmicrobatches: %d\nmax_new_tokens: 1500\nstop_at_eos: false\n", S_STAGES,
             S_MB);
    tc_job(&s_c, "long", "m", extra);
    int rc = tc_sh(&out, "%s/pipectl -c %s submit %s/long.yaml 2>&1", tc_bin(), s_c.ep, s_c.dir);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    int generated = 0;
    for (int i = 0; i < 600 && generated < 30; i++) {
        char *g = s_status_field(1, "progress", "generated");
        generated = atoi(g);
        free(g);
        usleep(50 * 1000);
    }
    cr_assert_geq(generated, 30, "the job did not get going");
    char path[600];
    snprintf(path, sizeof(path), "%s/running.json", s_c.dir);
    rc = tc_sh(&err, "%s/pipectl -c %s trace 1 -o %s 2>&1", tc_bin(), s_c.ep, path);
    cr_assert_eq(rc, 0, "pipectl trace: %s", err);
    cr_assert(strstr(err, "3 of 3 stages traced"), "%s", err);
    free(err);
    char *state = s_status_field(1, NULL, "state");
    cr_assert_str_eq(state, "running", "the job ended before its trace was taken: make it longer");
    free(state);

    json_t *doc = json_load_file(path, 0, NULL);
    cr_assert_not_null(doc);
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(doc, "otherData"), "state")),
                     "running");
    int comp[S_STAGES] = {0};
    json_t *ev = json_object_get(doc, "traceEvents");
    for (size_t i = 0; i < json_array_size(ev); i++) {
        json_t *e = json_array_get(ev, i);
        const char *cat = json_string_value(json_object_get(e, "cat"));
        if (cat && !strcmp(cat, "compute"))
            comp[s_int(e, "pid")]++;
    }
    /* every stage has computed, none the whole job yet */
    for (int k = 0; k < S_STAGES; k++)
        cr_assert(comp[k] > 0 && comp[k] < S_MB * 1500, "stage %d: %d compute slices", k, comp[k]);
    json_decref(doc);
    rc = tc_sh(NULL, "%s/pipectl -c %s cancel 1 >/dev/null 2>&1", tc_bin(), s_c.ep);
    cr_assert_eq(rc, 0);
    s_passed = 1;
}
