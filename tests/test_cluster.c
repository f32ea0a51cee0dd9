/* Integration: pipecoord and pipeld as separate processes on loopback, jobs submitted with
 * pipectl, results compared with the single-process reference (pl-generate); a daemon lost
 * mid-job: the job resumes on the others (tests/test_resume*.c for every failure kind). Bad input
 * is test_cluster_errors.c's. */
#include "job_util.h"

#include <criterion/criterion.h>

static tc_cluster_t s_c;
static int s_passed; /* set at the end of a test body: logs are shown only when it is not */

static void s_teardown(void)
{
    tc_cluster_end(&s_c, s_passed);
}

static void s_start(int n, const int *threads)
{
    cr_assert_eq(tc_cluster_start(&s_c, n, threads), 0, "nodes did not register");
    tc_prompts_and_model(&s_c);
}

TestSuite(cluster, .fini = s_teardown, .timeout = 120);

Test(cluster, three_daemons_greedy_equal_single_process)
{
    int rc;
    s_start(3, NULL);
    tc_job(&s_c, "greedy", "m", "max_new_tokens: 12\n");
    char *ref = tc_reference(&s_c, "greedy"), *got = tc_submit(&s_c, "greedy", &rc);
    cr_assert_eq(rc, 0, "pipectl failed: %s", tc_err(&s_c, "greedy"));
    cr_assert_str_eq(got, ref);
    /* every stage ran on its own daemon, and the job reported throughput */
    char *st;
    tc_sh(&st, "%s/pipectl -c %s -o json status 1", tc_bin(), s_c.ep);
    cr_assert(strstr(st, "\"node0\"") && strstr(st, "\"node1\"") && strstr(st, "\"node2\""),
              "%s", st);
    cr_assert(strstr(st, "\"decode_tok_s\""), "%s", st);
    /* every stage gave back the KV slot of every sequence when it finished */
    json_t *sj = json_loads(st, 0, NULL);
    cr_assert_not_null(sj, "%s", st);
    json_int_t n_seqs = json_integer_value(json_object_get(sj, "sequences"));
    json_t *stages = json_object_get(sj, "stages");
    cr_assert_eq(json_array_size(stages), 3, "%s", st);
    cr_assert_gt(n_seqs, 0);
    for (size_t i = 0; i < 3; i++) {
        json_t *ss = json_object_get(json_array_get(stages, i), "stats");
        cr_expect_eq(json_integer_value(json_object_get(ss, "freed_seqs")), n_seqs,
                     "stage %zu freed %lld of %lld slots", i,
                     (long long)json_integer_value(json_object_get(ss, "freed_seqs")),
                     (long long)n_seqs);
    }
    json_decref(sj);
    char *err = tc_err(&s_c, "greedy");
    cr_assert(strstr(err, "decode"), "no throughput line: %s", err);
    free(ref), free(got), free(st), free(err);
    s_passed = 1;
}

Test(cluster, seeded_sampling_two_and_three_stages_equal_single_process)
{
    int rc;
    s_start(3, (int[]){1, 2, 1});
    tc_job(&s_c, "samp3", "m",
          "max_new_tokens: 10\nsampling:\n  temperature: 0.9\n  top_k: 40\n  top_p: 0.95\n"
          "  seed: 1234\n");
    tc_job(&s_c, "samp2", "m",
          "max_new_tokens: 10\nstages: 2\nmicrobatches: 4\nsampling:\n  temperature: 0.9\n"
          "  top_k: 40\n  top_p: 0.95\n  seed: 1234\n");
    char *ref = tc_reference(&s_c, "samp3");
    char *got3 = tc_submit(&s_c, "samp3", &rc);
    cr_assert_eq(rc, 0, "%s", tc_err(&s_c, "samp3"));
    cr_assert_str_eq(got3, ref);
    char *got2 = tc_submit(&s_c, "samp2", &rc);
    cr_assert_eq(rc, 0, "%s", tc_err(&s_c, "samp2"));
    cr_assert_str_eq(got2, ref);
    /* a different seed gives different tokens: the seed is really used */
    tc_job(&s_c, "samp_other", "m",
          "max_new_tokens: 10\nsampling:\n  temperature: 0.9\n  top_k: 40\n  top_p: 0.95\n"
          "  seed: 99\n");
    char *other = tc_submit(&s_c, "samp_other", &rc);
    cr_assert_eq(rc, 0);
    cr_assert_str_neq(other, ref);
    free(ref), free(got3), free(got2), free(other);
    s_passed = 1;
}

/* Token ids of the first result line of JSONL `out`, into ids (at most cap); returns the count,
 * and the line's "finish" in *finish (NUL-terminated, fits 16). */
static int s_first_tokens(const char *out, int *ids, int cap, char *finish)
{
    const char *nl = strchr(out, '\n');
    json_t *r = json_loadb(out, nl ? (size_t)(nl - out) : strlen(out), 0, NULL);
    cr_assert_not_null(r, "not a result line: %s", out);
    json_t *toks = json_object_get(r, "tokens");
    int n = (int)json_array_size(toks);
    for (int i = 0; i < n && i < cap; i++)
        ids[i] = (int)json_integer_value(json_array_get(toks, (size_t)i));
    snprintf(finish, 16, "%s", json_string_value(json_object_get(r, "finish")));
    json_decref(r);
    return n;
}

Test(cluster, min_new_tokens_holds_eos_back_on_every_stage)
{
    int rc, ids[16];
    char finish[16];
    s_start(2, NULL);
    /* make the second token greedy decoding gives the first prompt the model's EOS */
    tc_job(&s_c, "probe", "m", "max_new_tokens: 8\n");
    char *probe = tc_reference(&s_c, "probe");
    cr_assert_geq(s_first_tokens(probe, ids, 16, finish), 2);
    free(probe);
    tc_sh(NULL, "mkdir -p %s/e && ln -sf %s/m/model.safetensors %s/e/ && "
                "sed 's/\"eos_token_id\": *[0-9]*/\"eos_token_id\": %d/' %s/m/config.json > "
                "%s/e/config.json",
          s_c.dir, s_c.dir, s_c.dir, ids[1], s_c.dir, s_c.dir);
    tc_job(&s_c, "plain", "e", "max_new_tokens: 8\n");
    char *plain = tc_reference(&s_c, "plain");
    cr_assert_leq(s_first_tokens(plain, ids, 16, finish), 2, "EOS did not stop it: %s", plain);
    cr_assert_str_eq(finish, "eos");
    free(plain);
    /* the same job with min_new_tokens, over the wire to two stages and in one process */
    tc_job(&s_c, "minj", "e", "max_new_tokens: 8\nmin_new_tokens: 5\nstages: 2\n");
    char *ref = tc_reference(&s_c, "minj"), *got = tc_submit(&s_c, "minj", &rc);
    cr_assert_eq(rc, 0, "%s", tc_err(&s_c, "minj"));
    cr_assert_str_eq(got, ref);
    cr_assert_geq(s_first_tokens(got, ids, 16, finish), 5, "%s", got);
    for (const char *l = got; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        int n = s_first_tokens(l, ids, 16, finish);
        cr_assert(strcmp(finish, "eos") || n >= 5, "EOS after %d tokens: %s", n, got);
    }
    free(ref), free(got);
    s_passed = 1;
}

/* Poll a job's state until it is `want` (or a terminal state); returns the JSON status. */
static char *s_wait_state(int job, const char *want, double timeout_s)
{
    char *st = NULL, needle[64];
    snprintf(needle, sizeof(needle), "\"state\": \"%s\"", want);
    for (int i = 0; i < timeout_s * 20; i++) {
        free(st);
        tc_sh(&st, "%s/pipectl -c %s -o json status %d", tc_bin(), s_c.ep, job);
        if (strstr(st, needle) || strstr(st, "\"state\": \"failed\"") ||
            strstr(st, "\"state\": \"done\""))
            break;
        usleep(50 * 1000);
    }
    return st;
}

Test(cluster, daemon_lost_mid_job_resumes_on_the_others)
{
    s_start(3, NULL);
    tc_job(&s_c, "long", "m", "max_new_tokens: 1500\nstop_at_eos: false\n");
    char *ref_long = tc_reference(&s_c, "long");
    tc_sh(NULL, "%s/pipectl -c %s submit %s/long.yaml >/dev/null", tc_bin(), s_c.ep, s_c.dir);
    char *st = s_wait_state(1, "running", 30);
    cr_assert(strstr(st, "\"state\": \"running\""), "job never ran: %s", st);
    free(st);
    usleep(300 * 1000);
    kill(s_c.node[1], SIGKILL);
    waitpid(s_c.node[1], NULL, 0);
    s_c.node[1] = -1;
    /* the job resumes on the two others from the tokens it had, to the undisturbed output */
    st = s_wait_state(1, "done", 120);
    cr_assert(strstr(st, "\"state\": \"done\""), "job did not finish: %s", st);
    cr_assert(strstr(st, "\"recovery\"") && strstr(st, "stage"), "no recovery shown: %s", st);
    free(st);
    char *got_long = NULL;
    cr_assert_eq(tc_sh(&got_long, "%s/pipectl -c %s results 1 2>/dev/null", tc_bin(), s_c.ep),
                 0);
    cr_assert_str_eq(got_long, ref_long, "the resumed job's output differs");
    free(got_long), free(ref_long);
    /* the other two daemons take the next job, once the coordinator has marked the lost one
     * (the job resumed sooner: its stages saw the dead peer within the data plane's peer
     * timeout, and until then the lost node still looks idle) */
    bool lost = false;
    for (int i = 0; i < 150 && !lost; i++) {
        char *nodes = NULL;
        tc_sh(&nodes, "%s/pipectl -c %s --timeout 2 -o json nodes 2>/dev/null", tc_bin(),
              s_c.ep);
        lost = nodes && strstr(nodes, "\"state\": \"lost\"");
        free(nodes);
        if (!lost)
            usleep(100 * 1000);
    }
    cr_assert(lost, "the coordinator never marked node1 lost");
    cr_assert_eq(tc_wait_idle(&s_c, 2, 15), 0, "survivors did not become idle");
    tc_job(&s_c, "after", "m", "max_new_tokens: 6\nstages: 2\n");
    tc_expect_reference(&s_c, "after");
    s_passed = 1;
}

Test(cluster, cancel_frees_the_nodes)
{
    s_start(2, NULL);
    tc_job(&s_c, "long", "m", "max_new_tokens: 3000\nstop_at_eos: false\n");
    tc_sh(NULL, "%s/pipectl -c %s submit %s/long.yaml >/dev/null", tc_bin(), s_c.ep, s_c.dir);
    char *st = s_wait_state(1, "running", 30);
    free(st);
    /* heartbeats keep flowing while the stages compute: no node looks stale */
    for (int i = 0; i < 10; i++) {
        char *nodes;
        tc_sh(&nodes, "%s/pipectl -c %s -o json nodes", tc_bin(), s_c.ep);
        cr_assert(strstr(nodes, "\"busy\""), "job not running: %s", nodes);
        for (char *p = nodes; (p = strstr(p, "\"last_seen_s\": ")); p++)
            cr_assert_lt(atof(p + 15), 1.5, "stale heartbeat during compute: %s", nodes);
        free(nodes);
        usleep(200 * 1000);
    }
    /* progress: the tokens sampled so far reach the coordinator with the heartbeats, and grow */
    long gen[2];
    for (int k = 0; k < 2; k++) {
        char *js, *p;
        if (k)
            usleep(1200 * 1000);
        tc_sh(&js, "%s/pipectl -c %s -o json status 1", tc_bin(), s_c.ep);
        p = strstr(js, "\"generated\": ");
        cr_assert_not_null(p, "no progress in: %s", js);
        gen[k] = atol(p + 13);
        free(js);
    }
    cr_assert_gt(gen[1], gen[0], "progress did not grow: %ld then %ld", gen[0], gen[1]);
    cr_assert_eq(tc_sh(NULL, "%s/pipectl -c %s cancel 1 >/dev/null", tc_bin(), s_c.ep), 0);
    st = s_wait_state(1, "canceled", 5);
    cr_assert(strstr(st, "\"state\": \"canceled\""), "%s", st);
    free(st);
    cr_assert_eq(tc_wait_idle(&s_c, 2, 10), 0);
    tc_job(&s_c, "next", "m", "max_new_tokens: 5\n");
    tc_expect_reference(&s_c, "next");
    s_passed = 1;
}

Test(cluster, a_restarted_coordinator_gets_its_daemons_back)
{
    s_start(2, NULL);
    kill(s_c.coord, SIGKILL);
    waitpid(s_c.coord, NULL, 0);
    /* the new coordinator answers the daemons' heartbeats with ERROR PL_ERR_NOT_FOUND, which
     * (by its code) makes them register again */
    tc_start_coord(&s_c, s_c.ep);
    cr_assert_eq(tc_wait_idle(&s_c, 2, 20), 0, "the daemons did not register again");
    char *log = NULL;
    tc_sh(&log, "cat %s/node0.log", s_c.dir);
    cr_assert(strstr(log, "is not registered"), "node0 was never told: %s", log);
    free(log);
    tc_job(&s_c, "again", "m", "max_new_tokens: 4\nstages: 2\n");
    tc_expect_reference(&s_c, "again");
    s_passed = 1;
}

Test(cluster, curve_encrypted_control_plane)
{
    char pub[41], node_pub[41], admin_pub[41], path[512], text[2048], bin[512], log[512];
    memset(&s_c, 0, sizeof(s_c));
    tc_mkdtemp(s_c.dir, sizeof(s_c.dir));
    snprintf(s_c.ep, sizeof(s_c.ep), "tcp://127.0.0.1:%d", tc_free_port());
    /* pipectl keygen prints the public key it wrote beside the 0600 secret */
    const char *names[] = {"coord", "node", "admin"};
    char *pubs[] = {pub, node_pub, admin_pub};
    for (int i = 0; i < 3; i++) {
        char *out;
        cr_assert_eq(tc_sh(&out, "%s/pipectl keygen %s/%s", tc_bin(), s_c.dir, names[i]), 0);
        cr_assert_eq(strlen(out), 41, "%s", out);
        memcpy(pubs[i], out, 40);
        pubs[i][40] = '\0';
        free(out);
    }
    snprintf(path, sizeof(path), "%s/cluster.yaml", s_c.dir);
    snprintf(text, sizeof(text),
             "coordinator:\n  endpoint: %s\nsecurity:\n  coordinator_public_key: \"%s\"\n"
             "  coordinator_secret_key_file: %s/coord.key\n  clients:\n"
             "    - {name: \"*\", role: node, public_key_file: %s/node.pub}\n"
             "    - {name: ops, role: admin, public_key: \"%s\"}\n",
             s_c.ep, pub, s_c.dir, s_c.dir, admin_pub);
    tc_write(path, text);
    snprintf(bin, sizeof(bin), "%s/pipecoord", tc_bin());
    snprintf(log, sizeof(log), "%s/pipecoord.log", s_c.dir);
    char db[512];
    snprintf(db, sizeof(db), "%s/coord.db", s_c.dir);
    s_c.coord = tc_spawn((char *[]){bin, "--cluster", path, "--state-db", db, NULL}, log);
    setenv("PIPELD_COORDINATOR_KEY", pub, 1); /* daemons and pipectl inherit these */
    snprintf(path, sizeof(path), "%s/node.key", s_c.dir);
    setenv("PIPELD_KEY_FILE", path, 1);
    tc_start_node(&s_c, "node0", 1, NULL);
    tc_start_node(&s_c, "node1", 1, NULL);
    snprintf(path, sizeof(path), "%s/admin.key", s_c.dir);
    setenv("PIPELD_KEY_FILE", path, 1);
    cr_assert_eq(tc_wait_idle(&s_c, 2, 30), 0, "daemons did not register over CURVE");
    tc_write_prompts(&s_c);
    cr_assert_eq(tc_make_model(s_c.dir, "m", "--layers 4 --hidden 64 --intermediate 160 "
                                             "--heads 4 --kv-heads 2 --vocab 256 --seed 5"),
                 0);
    tc_job(&s_c, "sec", "m", "max_new_tokens: 6\n");
    tc_expect_reference(&s_c, "sec");
    /* a client with the wrong server key is told why, not just "no answer" */
    char *err;
    cr_expect_neq(tc_sh(&err, "%s/pipectl -c %s -k '%s' --timeout 2 nodes 2>&1", tc_bin(),
                        s_c.ep, node_pub), 0);
    cr_expect(strstr(err, "not admitted") && strstr(err, "wrong coordinator key"), "%s", err);
    free(err);
    unsetenv("PIPELD_COORDINATOR_KEY");
    unsetenv("PIPELD_KEY_FILE");
    s_passed = 1;
}

Test(cluster, chunked_prefill_equals_whole_prefill)
{
    int rc;
    s_start(3, NULL);
    tc_job(&s_c, "whole", "m", "max_new_tokens: 8\n");
    /* chunks of 3 divide none of the prompts (4, 2, 9, 3, 5 tokens) */
    tc_job(&s_c, "chunk3", "m", "max_new_tokens: 8\nprefill_chunk: 3\n");
    tc_job(&s_c, "chunk2", "m",
           "max_new_tokens: 8\nprefill_chunk: 2\nstages: 2\nmicrobatches: 2\n");
    char *ref = tc_reference(&s_c, "whole");
    char *got3 = tc_submit(&s_c, "chunk3", &rc);
    cr_assert_eq(rc, 0, "%s", tc_err(&s_c, "chunk3"));
    cr_assert_str_eq(got3, ref);
    char *got2 = tc_submit(&s_c, "chunk2", &rc);
    cr_assert_eq(rc, 0, "%s", tc_err(&s_c, "chunk2"));
    cr_assert_str_eq(got2, ref);
    /* the chunks went through the pipeline as separate messages: every stage ran at least one
     * prefill call per microbatch and more forward calls than the whole-prefill job's decode
     * steps alone need; stage 0's batcher lets later chunks ride along decode steps (counted as
     * decode calls: a lane's step counts the messages it awaited tokens for) */
    char *st;
    tc_sh(&st, "%s/pipectl -c %s -o json status 1", tc_bin(), s_c.ep);
    json_t *o = json_loads(st, 0, NULL);
    cr_assert_not_null(o, "%s", st);
    json_int_t mb = json_integer_value(json_object_get(json_object_get(o, "plan"),
                                                       "microbatches"));
    json_t *stages = json_object_get(o, "stages");
    cr_assert_eq(json_array_size(stages), 3, "%s", st);
    cr_assert_gt(mb, 0, "%s", st);
    for (size_t i = 0; i < 3; i++) {
        json_t *stats = json_object_get(json_array_get(stages, i), "stats");
        json_int_t calls = json_integer_value(json_object_get(stats, "prefill_calls"));
        json_int_t all = calls + json_integer_value(json_object_get(stats, "decode_calls"));
        cr_assert_geq(calls, mb, "stage %zu: %lld prefill calls for %lld microbatches", i,
                      (long long)calls, (long long)mb);
        /* 8 tokens: 7 decode steps per lane after the prompts' step, 3 chunks of the 9 */
        cr_assert_geq(all, mb + 7 * mb, "stage %zu: %lld forward calls", i, (long long)all);
    }
    json_decref(o);
    free(ref), free(got3), free(got2), free(st);
    s_passed = 1;
}

Test(cluster, bf16_wire_halves_the_bytes_and_matches_its_reference)
{
    int rc;
    s_start(2, NULL);
    char path[512], text[1024];
    const char *dts[] = {"f32", "bf16"};
    json_int_t bytes[2];
    for (int d = 0; d < 2; d++) {
        snprintf(path, sizeof(path), "%s/w%s.yaml", s_c.dir, dts[d]);
        snprintf(text, sizeof(text), "model: m\nprompts: prompts.jsonl\nplanner: even\n"
                                     "stages: 2\nmax_new_tokens: 6\nwire_dtype: %s\n", dts[d]);
        tc_write(path, text);
        char name[16];
        snprintf(name, sizeof(name), "w%s", dts[d]);
        /* the reference: the same split in one process, rounding between stages alike */
        char *ref;
        cr_assert_eq(tc_sh(&ref, "%s/pl-generate --split 3,3 %s 2>/dev/null", tc_bin(), path),
                     0);
        char *got = tc_submit(&s_c, name, &rc);
        cr_assert_eq(rc, 0, "%s", tc_err(&s_c, name));
        cr_assert_str_eq(got, ref, "wire dtype %s", dts[d]);
        char *st;
        tc_sh(&st, "%s/pipectl -c %s -o json status %d", tc_bin(), s_c.ep, d + 1);
        json_t *o = json_loads(st, 0, NULL);
        cr_assert_not_null(o, "%s", st);
        json_t *s0 = json_object_get(json_array_get(json_object_get(o, "stages"), 0), "stats");
        cr_assert_str_eq(json_string_value(json_object_get(s0, "wire_dtype")), dts[d]);
        bytes[d] = json_integer_value(json_object_get(s0, "bytes_sent"));
        cr_assert_gt(bytes[d], 0, "%s", st);
        json_decref(o);
        free(ref), free(got), free(st);
    }
    double ratio = (double)bytes[1] / (double)bytes[0];
    cr_assert(ratio > 0.45 && ratio < 0.55, "bf16 sent %lld bytes, f32 %lld", (long long)bytes[1],
              (long long)bytes[0]);
    s_passed = 1;
}

/* A job that leaves prefill_chunk open gets the planner's chunk: it is in the plan, reaches both
 * stages in ASSIGN (each runs one prefill call per chunk of the one long prompt), and the tokens
 * are those of whole prefill in one process. */
Test(cluster, planner_chosen_chunk_reaches_the_stages)
{
    enum { P = 200 };
    int rc;
    s_start(2, NULL);
    char path[512], line[4096];
    int o = snprintf(line, sizeof(line), "[1");
    for (int i = 1; i < P; i++)
        o += snprintf(line + o, sizeof(line) - (size_t)o, ", %d", (i * 37 + 11) % 250 + 2);
    snprintf(line + o, sizeof(line) - (size_t)o, "]\n");
    snprintf(path, sizeof(path), "%s/long.jsonl", s_c.dir);
    tc_write(path, line);
    snprintf(path, sizeof(path), "%s/long.yaml", s_c.dir);
    tc_write(path, "model: m\nprompts: long.jsonl\nplanner: even\nstages: 2\nmax_new_tokens: 6\n");
    char *ref = tc_reference(&s_c, "long");
    char *got = tc_submit(&s_c, "long", &rc);
    cr_assert_eq(rc, 0, "%s", tc_err(&s_c, "long"));
    cr_assert_str_eq(got, ref);
    char *st;
    tc_sh(&st, "%s/pipectl -c %s -o json status 1", tc_bin(), s_c.ep);
    json_t *js = json_loads(st, 0, NULL);
    cr_assert_not_null(js, "%s", st);
    json_int_t chunk =
        json_integer_value(json_object_get(json_object_get(js, "plan"), "prefill_chunk"));
    /* the rule: at least 2 x 2 chunks of the 200 tokens, at least 32 tokens each */
    cr_assert(chunk >= 32 && chunk <= P / 4, "chunk %lld: %s", (long long)chunk, st);
    json_t *stages = json_object_get(js, "stages");
    cr_assert_eq(json_array_size(stages), 2, "%s", st);
    for (size_t i = 0; i < 2; i++) {
        json_t *stats = json_object_get(json_array_get(stages, i), "stats");
        json_int_t calls = json_integer_value(json_object_get(stats, "prefill_calls"));
        cr_assert_eq(calls, (P + chunk - 1) / chunk, "stage %zu: %lld prefill calls, chunk %lld", i,
                     (long long)calls, (long long)chunk);
    }
    /* the text view shows each stage's data plane: its link's UCX transports, the wire dtype,
     * the slots, credits, most in flight and the memory bound its stats carry */
    char *text;
    cr_assert_eq(tc_sh(&text, "%s/pipectl -c %s status 1", tc_bin(), s_c.ep), 0);
    cr_assert(strstr(text, "link (UCX)") && strstr(text, "mem bound"), "%s", text);
    for (size_t i = 0; i < 2; i++) {
        json_t *stats = json_object_get(json_array_get(stages, i), "stats");
        json_t *dp = json_object_get(stats, "data_plane");
        cr_assert(json_is_object(dp), "%s", st);
        char row[160];
        snprintf(row, sizeof(row), "%-5zu %-16.16s %-5s ", i,
                 json_string_value(json_object_get(stats, "link")),
                 json_string_value(json_object_get(stats, "wire_dtype")));
        cr_assert(strstr(text, row), "no row '%s' in:\n%s", row, text);
        snprintf(row, sizeof(row), " %-7lld %-9lld ",
                 (long long)json_integer_value(json_object_get(dp, "send_credits")),
                 (long long)json_integer_value(json_object_get(dp, "max_in_flight")));
        cr_assert(strstr(text, row), "no credits '%s' in:\n%s", row, text);
    }
    /* where each stage's time went: the forward calls' CPU time within their wall time, stage
     * 0's microbatches in flight within the plan's, sampling on the last stage only */
    json_t *plan = json_object_get(js, "plan");
    json_int_t mbs = json_integer_value(json_object_get(plan, "microbatches"));
    for (size_t i = 0; i < 2; i++) {
        json_t *stats = json_object_get(json_array_get(stages, i), "stats");
        json_t *ov = json_object_get(stats, "overlap");
        cr_assert(json_is_object(ov), "%s", st);
        double compute = json_number_value(json_object_get(stats, "compute_s"));
        double cpu = json_number_value(json_object_get(ov, "compute_cpu_s"));
        cr_assert(cpu > 0 && cpu <= compute + 0.01, "stage %zu: CPU %g s of %g s", i, cpu, compute);
        json_int_t most = json_integer_value(json_object_get(ov, "max_mb_in_flight"));
        double avg = json_number_value(json_object_get(ov, "avg_mb_in_flight"));
        double sample = json_number_value(json_object_get(ov, "sample_s"));
        if (i == 0)
            cr_assert(most >= 1 && most <= mbs && avg > 0 && avg <= (double)most && sample == 0,
                      "stage 0: %lld in flight (mean %g) of %lld microbatches, sampling %g s",
                      (long long)most, avg, (long long)mbs, sample);
        else
            cr_assert(most == 0 && sample > 0, "last stage: %lld in flight, sampling %g s",
                      (long long)most, sample);
    }
    free(text);
    json_decref(js);
    free(ref), free(got), free(st);
    s_passed = 1;
}
