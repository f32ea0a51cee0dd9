/* Integration: a 3-node local cluster loses a node mid-generation (kill -9 of the middle or the
 * last stage's daemon, SIGSTOP) or its coordinator (kill -9 and restart): the job is re-planned
 * on what remains and resumed from the tokens its last stage reported, and its output is the
 * undisturbed run's (pl-generate), greedy and seeded, token ids and text. When what remains
 * cannot hold the model the job waits, says so, and resumes when the daemon comes back.
 * Detection and recovery times are printed (they are figures, not assertions, beyond the
 * configured timeout). */
#include "job_util.h"
#include "js_ref.h"

#include <criterion/criterion.h>
#include <jansson.h>

#define S_DEAD_AFTER_S 3.0 /* the embedded default cluster's dead_after_ms */

static tc_cluster_t s_c;
static int s_passed;

static const char *s_prompts = "[1, 15, 27, 99]\n"
                               "[1, 7]\n"
                               "[1, 100, 101, 102, 103, 104, 105, 106, 107]\n";

static void s_teardown(void)
{
    if (s_c.coord > 0 && !s_passed)
        tc_dump_logs(&s_c);
    for (int i = 0; i < s_c.n_nodes; i++) /* a frozen daemon cannot take SIGTERM */
        if (s_c.node[i] > 0)
            kill(s_c.node[i], SIGCONT);
    tc_cluster_stop(&s_c);
    if (s_passed && s_c.dir[0])
        tc_sh(NULL, "rm -rf %s", s_c.dir);
}

TestSuite(resume, .fini = s_teardown, .timeout = 240);

/* Coordinator and 3 daemons (node files with `node_extra`), the prompts and model m. */
static void s_start(const char *node_extra)
{
    memset(&s_c, 0, sizeof(s_c));
    tc_mkdtemp(s_c.dir, sizeof(s_c.dir));
    snprintf(s_c.ep, sizeof(s_c.ep), "tcp://127.0.0.1:%d", tc_free_port());
    tc_start_coord(&s_c, s_c.ep);
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof(name), "node%d", i);
        tc_start_node_file(&s_c, i, name, 1, node_extra);
    }
    cr_assert_eq(tc_wait_idle(&s_c, 3, 60), 0, "nodes did not register");
    char path[512];
    snprintf(path, sizeof(path), "%s/prompts.jsonl", s_c.dir);
    tc_write(path, s_prompts);
    cr_assert_eq(tc_make_model(s_c.dir, "m",
                               "--layers 6 --hidden 256 --intermediate 512 --heads 4 "
                               "--kv-heads 2 --vocab 512 --seed 7 --max-pos 2048"),
                 0);
}

static json_t *s_status(int job)
{
    char *out = NULL;
    tc_sh(&out, "%s/pipectl -c %s --timeout 3 -o json status %d 2>/dev/null", tc_bin(), s_c.ep,
          job);
    json_t *j = json_loads(out ? out : "", 0, NULL);
    free(out);
    return j ? j : json_object();
}

static const char *s_str(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : "";
}

static double s_num(const json_t *o, const char *key)
{
    return json_number_value(json_object_get(o, key));
}

static int s_submit_nowait(const char *job)
{
    char *out = NULL;
    int rc = tc_sh(&out, "%s/pipectl -c %s --timeout 5 submit %s/%s.yaml", tc_bin(), s_c.ep,
                   s_c.dir, job);
    int id = 0;
    cr_assert(rc == 0 && out && sscanf(out, "job %d submitted", &id) == 1, "submit: %s", out);
    free(out);
    return id;
}

/* Wait until job has sampled at least `tokens` (running), or its state is `state`. */
static json_t *s_wait(int job, const char *state, int tokens, double timeout_s)
{
    json_t *st = NULL;
    for (double t0 = tc_now(); tc_now() - t0 < timeout_s;) {
        json_decref(st);
        st = s_status(job);
        const char *s = s_str(st, "state");
        if (!strcmp(s, "failed") || !strcmp(s, "canceled") || (state && !strcmp(s, state)))
            break;
        if (tokens > 0 && !strcmp(s, "running") &&
            s_num(json_object_get(st, "progress"), "generated") >= tokens)
            break;
        usleep(50 * 1000);
    }
    return st;
}

/* The slot of the daemon that runs stage `stage` of job. */
static int s_stage_node(int job, int stage)
{
    json_t *st = s_status(job);
    json_t *ps = json_object_get(json_object_get(st, "plan"), "stages");
    const char *node = s_str(json_array_get(ps, (size_t)stage), "node");
    int i = -1;
    if (!strncmp(node, "node", 4))
        i = atoi(node + 4);
    json_decref(st);
    cr_assert(i >= 0 && i < s_c.n_nodes, "job %d: no stage %d in the plan", job, stage);
    return i;
}

/* The job's results (`pipectl -o json results`) as canonical JSON: token ids, text, finish. */
static char *s_results(int job)
{
    char *out = NULL;
    int rc = tc_sh(&out, "%s/pipectl -c %s --timeout 5 -o json results %d 2>/dev/null", tc_bin(),
                   s_c.ep, job);
    cr_assert_eq(rc, 0, "results %d: %s", job, out);
    json_t *j = json_loads(out, 0, NULL), *r = json_object_get(j, "results");
    cr_assert(json_is_array(r), "results %d: %s", job, out);
    char *d = json_dumps(r, JSON_SORT_KEYS | JSON_COMPACT);
    json_decref(j);
    free(out);
    return d;
}

/* pl-generate's JSONL, one result per line, in the same canonical form. */
static char *s_canonical(const char *jsonl)
{
    json_t *arr = tc_jsonl_array(jsonl);
    char *d = json_dumps(arr, JSON_SORT_KEYS | JSON_COMPACT);
    json_decref(arr);
    return d;
}

/* After a fault at t_fault: the job ends done with the reference output, it resumed from
 * tokens it had (not from the start); detection and recovery times printed. */
static void s_expect_resumed(int job, const char *ref, double t_fault, const char *what,
                             double detect_limit_s)
{
    json_t *st = s_wait(job, "done", 0, 180);
    cr_assert_str_eq(s_str(st, "state"), "done", "%s: job %s: %s", what, s_str(st, "state"),
                     s_str(st, "note"));
    json_t *rec = json_object_get(st, "recovery");
    cr_assert(json_is_object(rec), "%s: no recovery in the status", what);
    double detected = s_num(rec, "detected_at"), first = s_num(rec, "first_token_at");
    int64_t from = (int64_t)s_num(rec, "from_tokens");
    cr_assert_gt(from, 0, "%s: resumed from no tokens: the work done was thrown away", what);
    cr_assert_gt(first, 0, "%s: no first new token recorded", what);
    fprintf(stderr,
            "[resume] %-34s detection %.2f s, recovery (to the first new token) %.2f s, "
            "resumed from %lld tokens (%s)\n",
            what, detected - t_fault, first - detected, (long long)from, s_str(rec, "why"));
    cr_expect_leq(detected - t_fault, detect_limit_s, "%s: detected after %.1f s", what,
                  detected - t_fault);
    char *got = s_results(job), *want = s_canonical(ref);
    cr_assert_str_eq(got, want, "%s: the resumed job's output differs from the reference", what);
    free(got);
    free(want);
    json_decref(st);
}

static void s_kill_case(int stage, double temperature, int sig, const char *what)
{
    char extra[160];
    s_start(NULL);
    snprintf(extra, sizeof(extra),
             "max_new_tokens: 1600\nstop_at_eos: false\nsampling:\n  temperature: %.2f\n"
             "  seed: 99\n",
             temperature);
    tc_job(&s_c, "long", "m", extra);
    char *ref = tc_reference(&s_c, "long");
    int job = s_submit_nowait("long");
    json_t *st = s_wait(job, NULL, 60, 60);
    cr_assert_str_eq(s_str(st, "state"), "running", "job did not get going: %s", s_str(st, "note"));
    json_decref(st);
    int victim = s_stage_node(job, stage);
    double t0 = tc_now();
    kill(s_c.node[victim], sig);
    if (sig == SIGKILL) {
        waitpid(s_c.node[victim], NULL, 0);
        s_c.node[victim] = -1;
    }
    s_expect_resumed(job, ref, t0, what, S_DEAD_AFTER_S + 2.0);
    if (sig == SIGSTOP) { /* woken, the frozen daemon registers again and is usable */
        kill(s_c.node[victim], SIGCONT);
        cr_assert_eq(tc_wait_idle(&s_c, 3, 30), 0, "the thawed daemon did not come back");
    }
    free(ref);
    s_passed = 1;
}

Test(resume, kill9_middle_stage_greedy)
{
    s_kill_case(1, 0, SIGKILL, "kill -9, middle stage, greedy");
}

Test(resume, kill9_last_stage_seeded)
{
    s_kill_case(2, 0.8, SIGKILL, "kill -9, last stage, seeded");
}

Test(resume, sigstop_middle_stage_seeded)
{
    s_kill_case(1, 0.8, SIGSTOP, "SIGSTOP, middle stage, seeded");
}

Test(resume, sigstop_last_stage_greedy)
{
    s_kill_case(2, 0, SIGSTOP, "SIGSTOP, last stage, greedy");
}

/* The coordinator killed (-9) mid-job and started again on its state db: the job continues
 * from its stored tokens, on the same daemons (which register again by themselves). */
Test(resume, coordinator_restart_mid_job_seeded)
{
    s_start(NULL);
    tc_job(&s_c, "long", "m",
           "max_new_tokens: 1000\nstop_at_eos: false\nsampling:\n  temperature: 0.7\n  seed: 3\n");
    char *ref = tc_reference(&s_c, "long");
    int job = s_submit_nowait("long");
    json_t *st = s_wait(job, NULL, 60, 60);
    cr_assert_str_eq(s_str(st, "state"), "running", "%s", s_str(st, "note"));
    json_decref(st);
    double t0 = tc_now();
    kill(s_c.coord, SIGKILL);
    waitpid(s_c.coord, NULL, 0);
    /* the state db is outside input: broken progress pieces (past a gap, a blob that is no
     * whole token, a sequence that does not exist) are ignored and named, and the job still
     * resumes to the right output from what is sound (offsets past max_new_tokens: no real
     * piece starts there) */
    cr_assert_eq(tc_sh(NULL,
                       "sqlite3 %s/coord.db \"INSERT INTO progress VALUES(%d, 0, 250, "
                       "x'01000000', 0); INSERT INTO progress VALUES(%d, 2, 260, x'010203', 0); "
                       "INSERT INTO progress VALUES(%d, 7, 0, x'01000000', 0);\"",
                       s_c.dir, job, job, job),
                 0, "cannot edit the state db");
    tc_start_coord(&s_c, s_c.ep);
    s_expect_resumed(job, ref, t0, "coordinator kill -9 + restart", 10.0);
    char *log = NULL;
    tc_sh(&log, "grep -c 'progress of sequence .* ignored' %s/pipecoord.log", s_c.dir);
    cr_expect_geq(atoi(log ? log : "0"), 3, "broken stored progress was not named");
    free(log);
    free(ref);
    s_passed = 1;
}

/* Each daemon may use 8 MiB: the model (14.5 MiB of weights and its KV cache) needs all three.
 * One killed, the job waits and says why; the daemon started again, it resumes to the same
 * output (its "recovery" time then includes the wait). */
Test(resume, too_little_capacity_waits_then_resumes)
{
    /* slowed, so that on a quiet machine the job still runs for several heartbeats */
    s_start("memory_limit_mb: 8\nslowdown: 20\n");
    tc_job(&s_c, "long", "m", "max_new_tokens: 200\nstop_at_eos: false\n");
    char *ref = tc_reference(&s_c, "long");
    int job = s_submit_nowait("long");
    json_t *st = s_wait(job, NULL, 60, 60);
    cr_assert_str_eq(s_str(st, "state"), "running", "%s", s_str(st, "note"));
    json_decref(st);
    int victim = s_stage_node(job, 1);
    double t0 = tc_now();
    kill(s_c.node[victim], SIGKILL);
    waitpid(s_c.node[victim], NULL, 0);
    st = s_wait(job, "__never", 0, 0.1);
    for (double t = tc_now(); tc_now() - t < 15 && !strstr(s_str(st, "note"), "capacity");) {
        json_decref(st);
        usleep(100 * 1000);
        st = s_status(job);
    }
    cr_assert_str_eq(s_str(st, "state"), "queued", "%s", s_str(st, "note"));
    cr_assert(strstr(s_str(st, "note"), "waiting for capacity: need") &&
                  strstr(s_str(st, "note"), "of weights, have"),
              "the job does not say why it waits: %s", s_str(st, "note"));
    fprintf(stderr, "[resume] waiting: %s\n", s_str(st, "note"));
    json_decref(st);
    char name[16];
    snprintf(name, sizeof(name), "node%d", victim);
    tc_start_node_file(&s_c, victim, name, 1, "memory_limit_mb: 8\n");
    s_expect_resumed(job, ref, t0, "kill -9, too little capacity", S_DEAD_AFTER_S + 2.0);
    free(ref);
    s_passed = 1;
}

/* A one-prompt text job: the last stage's daemon killed mid-job; the result text is whole and
 * the reference's, and every streamed text seen is a prefix of it (nothing lost or doubled). */
Test(resume, text_job_streams_and_results_whole_after_kill9)
{
    js_ref_require(JS_LENML "/tokenizer-llama3/models");
    s_start(NULL);
    cr_assert_eq(tc_make_model(s_c.dir, "t",
                               "--layers 3 --hidden 64 --intermediate 128 --heads 4 "
                               "--kv-heads 2 --seed 11 --max-pos 1024 --tokenizer " JS_LENML
                               "/tokenizer-llama3/models"),
                 0);
    char path[512];
    snprintf(path, sizeof(path), "%s/text.jsonl", s_c.dir);
    tc_write(path, "{\"text\": \"Once upon a time\"}\n");
    snprintf(path, sizeof(path), "%s/text.yaml", s_c.dir);
    tc_write(path, "model: t\nprompts: text.jsonl\nplanner: optimal\nmax_new_tokens: 400\n"
                   "stop_at_eos: false\nsampling:\n  temperature: 0.9\n  seed: 8\n");
    char *ref = tc_reference(&s_c, "text");
    int job = s_submit_nowait("text");
    json_t *st = s_wait(job, NULL, 60, 60);
    cr_assert_str_eq(s_str(st, "state"), "running", "%s", s_str(st, "note"));
    json_decref(st);
    int victim = s_stage_node(job, 2);
    double t0 = tc_now();
    kill(s_c.node[victim], SIGKILL);
    waitpid(s_c.node[victim], NULL, 0);
    s_c.node[victim] = -1;
    /* the streamed text while it recovers and runs on */
    char *seen[512];
    int n_seen = 0;
    for (;;) {
        st = s_status(job);
        const char *state = s_str(st, "state");
        if (strcmp(state, "running") && strcmp(state, "queued") && strcmp(state, "loading")) {
            json_decref(st);
            break;
        }
        const char *text = s_str(json_object_get(st, "progress"), "text");
        if (n_seen < 512 && *text)
            seen[n_seen++] = strdup(text);
        json_decref(st);
        usleep(100 * 1000);
    }
    s_expect_resumed(job, ref, t0, "kill -9, last stage, text job", S_DEAD_AFTER_S + 2.0);
    json_t *line = json_loads(ref, JSON_DISABLE_EOF_CHECK, NULL);
    const char *want = s_str(line, "text");
    cr_assert(strlen(want) > 20, "reference text too short: %s", ref);
    size_t longest = 0;
    for (int i = 0; i < n_seen; i++) {
        cr_expect(!strncmp(seen[i], want, strlen(seen[i])),
                  "streamed text is not a prefix of the result:\n%s\nvs\n%s", seen[i], want);
        longest = PL_MAX(longest, strlen(seen[i]));
        free(seen[i]);
    }
    cr_expect_gt(n_seen, 0, "no streamed text seen");
    fprintf(stderr, "[resume] text job: %d streamed texts seen, longest %zu of %zu bytes\n", n_seen,
            longest, strlen(want));
    json_decref(line);
    free(ref);
    s_passed = 1;
}
