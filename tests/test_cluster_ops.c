/* Operating a live local cluster with pipectl: every verb in table and JSON form (YAML parsed
 * back with libyaml and compared with the JSON), the exit codes, drain keeping new stages off a
 * node (and persisting across a coordinator restart), a killed daemon turning unreachable, the
 * settings' precedence, and the progress bar under a pseudo-terminal. */
#include "job_util.h"

#include <jansson.h>
#include <yaml.h>

static tc_cluster_t s_c;

/* pipectl against the test cluster with extra arguments; stdout in *out (may be NULL). */
static int s_ctl(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int s_ctl(char **out, const char *fmt, ...)
{
    char args[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    return tc_sh(out, "%s/pipectl -c %s --timeout 5 %s 2>>%s/ctl.err", tc_bin(), s_c.ep, args,
                 s_c.dir);
}

/* `pipectl -o json ARGS` parsed; fails the test unless it exits 0 with a JSON object. */
static json_t *s_json(const char *args)
{
    char *out;
    int rc = s_ctl(&out, "-o json %s", args);
    cr_assert_eq(rc, 0, "pipectl -o json %s: exit %d", args, rc);
    json_error_t e;
    json_t *v = json_loads(out, 0, &e);
    cr_assert(json_is_object(v) || json_is_array(v), "pipectl -o json %s: not JSON (%s): %s", args,
              e.text, out);
    free(out);
    return v;
}

/* A YAML document as JSON values (libyaml's events): plain scalars that read as numbers,
 * booleans or null become those; quoted ones stay strings. */
static json_t *s_yaml_node(yaml_parser_t *p, yaml_event_t *ev)
{
    json_t *v = NULL;
    if (ev->type == YAML_SCALAR_EVENT) {
        const char *s = (const char *)ev->data.scalar.value;
        char *end;
        if (ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) {
            v = json_string(s);
        } else if (!strcmp(s, "true") || !strcmp(s, "false")) {
            v = json_boolean(!strcmp(s, "true"));
        } else if (!strcmp(s, "null")) {
            v = json_null();
        } else {
            long long i = strtoll(s, &end, 10);
            if (*s && !*end) {
                v = json_integer(i);
            } else {
                double d = strtod(s, &end);
                v = *s && !*end ? json_real(d) : json_string(s);
            }
        }
    } else if (ev->type == YAML_SEQUENCE_START_EVENT || ev->type == YAML_MAPPING_START_EVENT) {
        bool map = ev->type == YAML_MAPPING_START_EVENT;
        v = map ? json_object() : json_array();
        for (;;) {
            yaml_event_t e;
            cr_assert(yaml_parser_parse(p, &e), "YAML: %s", p->problem);
            if (e.type == YAML_SEQUENCE_END_EVENT || e.type == YAML_MAPPING_END_EVENT) {
                yaml_event_delete(&e);
                break;
            }
            if (map) {
                cr_assert_eq(e.type, YAML_SCALAR_EVENT, "YAML: a key that is not a scalar");
                char *key = strdup((const char *)e.data.scalar.value);
                yaml_event_delete(&e);
                cr_assert(yaml_parser_parse(p, &e), "YAML: %s", p->problem);
                json_object_set_new(v, key, s_yaml_node(p, &e));
                free(key);
            } else {
                json_array_append_new(v, s_yaml_node(p, &e));
            }
            yaml_event_delete(&e);
        }
    }
    cr_assert_not_null(v, "YAML: unexpected event %d", ev->type);
    return v;
}

static json_t *s_yaml_parse(const char *text)
{
    yaml_parser_t p;
    yaml_event_t ev;
    json_t *v = NULL;
    cr_assert(yaml_parser_initialize(&p));
    yaml_parser_set_input_string(&p, (const unsigned char *)text, strlen(text));
    for (;;) {
        cr_assert(yaml_parser_parse(&p, &ev), "YAML: %s at line %zu:\n%s", p.problem,
                  p.problem_mark.line + 1, text);
        if (ev.type == YAML_STREAM_END_EVENT) {
            yaml_event_delete(&ev);
            break;
        }
        if (ev.type == YAML_SCALAR_EVENT || ev.type == YAML_SEQUENCE_START_EVENT ||
            ev.type == YAML_MAPPING_START_EVENT) {
            cr_assert_null(v, "more than one YAML document");
            v = s_yaml_node(&p, &ev);
        }
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&p);
    cr_assert_not_null(v, "empty YAML");
    return v;
}

/* -o yaml of ARGS parses back to the same values as -o json of ARGS (ARGS must not change
 * between the two calls: a finished job, the catalog). */
static void s_yaml_matches_json(const char *args)
{
    char *out;
    cr_assert_eq(s_ctl(&out, "-o yaml %s", args), 0, "pipectl -o yaml %s", args);
    json_t *y = s_yaml_parse(out), *j = s_json(args);
    char *ys = json_dumps(y, JSON_SORT_KEYS | JSON_COMPACT),
         *js = json_dumps(j, JSON_SORT_KEYS | JSON_COMPACT);
    cr_assert(json_equal(y, j), "%s: YAML and JSON differ:\n%s\n%s\nYAML text:\n%s", args, ys, js,
              out);
    free(ys);
    free(js);
    free(out);
    json_decref(y);
    json_decref(j);
}

static void s_prompts(int n, int len)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/prompts.jsonl", s_c.dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    for (int i = 0; i < n; i++) {
        fputc('[', f);
        for (int k = 0; k < len; k++)
            fprintf(f, "%s%d", k ? "," : "", 1 + (i * 7 + k * 3) % 100);
        fputs("]\n", f);
    }
    fclose(f);
}

/* The nodes a job ran on, from `jobs -o json`. */
static void s_job_nodes(int job, char *out, size_t n)
{
    json_t *r = s_json("jobs"), *j;
    size_t i;
    out[0] = '\0';
    json_array_foreach(json_object_get(r, "jobs"), i, j)
    {
        if (json_integer_value(json_object_get(j, "job")) != job)
            continue;
        size_t k;
        json_t *nd;
        json_array_foreach(json_object_get(j, "nodes"), k, nd)
        {
            snprintf(out + strlen(out), n - strlen(out), "%s%s", k ? "," : "",
                     json_string_value(nd));
        }
    }
    json_decref(r);
}

static const char *s_s(const json_t *o, const char *k)
{
    const char *v = json_string_value(json_object_get(o, k));
    return v ? v : "";
}

/* The node entry `name` of a NODES answer. */
static json_t *s_node(json_t *r, const char *name)
{
    size_t i;
    json_t *n;
    json_array_foreach(json_object_get(r, "nodes"), i, n)
    {
        if (!strcmp(s_s(n, "name"), name))
            return n;
    }
    return NULL;
}

Test(cluster_ops, every_verb_table_json_yaml_and_exit_codes)
{
    int threads[] = {1, 1};
    cr_assert_eq(tc_cluster_start(&s_c, 2, threads), 0, "cluster did not start");
    cr_assert_eq(tc_make_model(s_c.dir, "m", "--layers 4 --hidden 64 --vocab 128"), 0);
    s_prompts(3, 4);
    tc_job(&s_c, "job", "m", "max_new_tokens: 6\nstop_at_eos: false\n");
    char *out;
    int rc;

    /* submit --wait: the results, exit 0; the reference tokens are the same */
    char *ref = tc_reference(&s_c, "job"), *res = tc_submit(&s_c, "job", &rc);
    cr_assert_eq(rc, 0, "submit --wait: %d", rc);
    cr_assert(strstr(res, "\"tokens\""), "%s", res);
    free(ref);
    free(res);

    /* nodes: table and JSON */
    cr_assert_eq(s_ctl(&out, "nodes"), 0);
    cr_assert(strstr(out, "STATUS") && strstr(out, "node0") && strstr(out, "ready"), "%s", out);
    free(out);
    cr_assert_eq(s_ctl(&out, "nodes -o wide"), 0);
    cr_assert(strstr(out, "HB AGE") && strstr(out, "UPTIME") && strstr(out, "VERSION"), "%s", out);
    free(out);
    json_t *r = s_json("nodes"), *n = s_node(r, "node0");
    cr_assert_not_null(n);
    cr_assert_str_eq(s_s(n, "status"), "ready");
    cr_assert(json_is_false(json_object_get(n, "draining")));
    cr_assert(json_is_number(json_object_get(n, "last_seen_s")));
    cr_assert(json_is_number(json_object_get(n, "uptime_s")));
    cr_assert(*s_s(n, "version"), "no version: %s", json_dumps(n, 0));
    cr_assert(json_is_array(json_object_get(n, "transports")));
    cr_assert(json_is_array(json_object_get(n, "stages")));
    json_decref(r);

    /* health NODE: the heartbeat's system figures, the CPU device's memory from /proc */
    cr_assert_eq(s_ctl(&out, "health node0"), 0);
    cr_assert(strstr(out, "last heartbeat") && strstr(out, "cpu:0"), "%s", out);
    free(out);
    /* the devices' figures come with the heartbeats after the registration */
    json_t *sys = NULL;
    for (int i = 0; i < 50; i++) {
        r = s_json("health node0");
        sys = json_object_get(json_object_get(r, "heartbeat"), "system");
        if (json_array_size(json_object_get(sys, "devices")) > 0)
            break;
        json_decref(r);
        r = NULL;
        usleep(100 * 1000);
    }
    cr_assert_not_null(r, "no device health within 5 s");
    cr_assert(json_is_object(sys), "no heartbeat.system");
    cr_assert(json_number_value(json_object_get(sys, "uptime_s")) > 0);
    cr_assert(json_integer_value(json_object_get(sys, "mem_total_kb")) > 0);
    json_t *dh = json_array_get(json_object_get(sys, "devices"), 0);
    cr_assert_str_eq(s_s(dh, "id"), "cpu:0");
    cr_assert(json_integer_value(json_object_get(dh, "memory_total_bytes")) >=
              json_integer_value(json_object_get(dh, "memory_used_bytes")));
    json_decref(r);
    /* the embedded cluster expects node0..node2: node2 never came, and health says so */
    r = s_json("health");
    cr_assert_eq(json_array_size(json_object_get(r, "nodes")), 3);
    cr_assert_eq(json_array_size(json_object_get(r, "unreachable")), 1);
    cr_assert_str_eq(json_string_value(json_array_get(json_object_get(r, "unreachable"), 0)),
                     "node2");
    json_decref(r);
    cr_assert_eq(s_ctl(&out, "health"), 0);
    cr_assert(strstr(out, "unreachable: node2 (1 of 3 nodes)"), "%s", out);
    free(out);
    cr_assert_eq(s_ctl(&out, "describe node node1"), 0);
    cr_assert(strstr(out, "node:       node1") && strstr(out, "transports:"), "%s", out);
    /* the UCX transports its context has, whether or not a link used them */
    cr_assert(strstr(out, "ucx has:    ") && !strstr(out, "ucx has:    not reported"), "%s", out);
    free(out);

    /* jobs, describe job, logs: job 1 done, its events in order */
    cr_assert_eq(s_ctl(&out, "jobs"), 0);
    cr_assert(strstr(out, "JOB") && strstr(out, "done") && strstr(out, "18/18"), "%s", out);
    free(out);
    cr_assert_eq(s_ctl(&out, "jobs -o wide"), 0);
    cr_assert(strstr(out, "OWNER") && strstr(out, "node0"), "%s", out);
    free(out);
    /* --watch: jobs ends by itself once every job has ended; health runs until Ctrl-C */
    cr_assert_eq(s_ctl(&out, "jobs --watch"), 0);
    cr_assert(strstr(out, "JOB") && strstr(out, "done"), "%s", out);
    free(out);
    cr_assert_eq(tc_sh(&out, "timeout --preserve-status -s INT 2.5 %s/pipectl -c %s nodes --watch",
                       tc_bin(), s_c.ep),
                 0, "nodes --watch after Ctrl-C");
    cr_assert(strstr(out, "NODE") && strstr(out, "node1"), "%s", out);
    free(out);
    r = s_json("jobs");
    json_t *j = json_array_get(json_object_get(r, "jobs"), 0);
    cr_assert_eq(json_integer_value(json_object_get(j, "job")), 1);
    cr_assert_str_eq(s_s(j, "state"), "done");
    cr_assert_eq(json_integer_value(json_object_get(j, "generated")), 18);
    cr_assert_eq(json_integer_value(json_object_get(j, "sequences")), 3);
    cr_assert_eq(json_array_size(json_object_get(j, "nodes")), 2);
    json_decref(r);
    r = s_json("describe job 1");
    json_t *pg = json_object_get(r, "progress");
    cr_assert_eq(json_integer_value(json_object_get(pg, "sequences_done")), 3);
    cr_assert_eq(json_integer_value(json_object_get(pg, "generated")), 18);
    json_decref(r);
    cr_assert_eq(s_ctl(&out, "describe job 1"), 0);
    cr_assert(strstr(out, "3/3 sequences") && strstr(out, "events:") && strstr(out, "busy"), "%s",
              out);
    free(out);
    r = s_json("logs 1");
    static const char *const order[] = {"submitted", "planned",    "loading",    "ready", "ready",
                                        "running",   "stage done", "stage done", "done"};
    json_t *ev = json_object_get(r, "events");
    cr_assert_eq(json_array_size(ev), sizeof(order) / sizeof(order[0]), "%zu events",
                 json_array_size(ev));
    double prev = 0;
    for (size_t i = 0; i < json_array_size(ev); i++) {
        json_t *e = json_array_get(ev, i);
        cr_assert_str_eq(s_s(e, "what"), order[i], "event %zu", i);
        double at = json_number_value(json_object_get(e, "at"));
        cr_assert(at >= prev && at > 1.6e9, "event %zu at %f", i, at);
        prev = at;
    }
    json_decref(r);
    cr_assert_eq(s_ctl(&out, "logs 1"), 0);
    cr_assert(strstr(out, "submitted") && strstr(out, "running") && strstr(out, "Z  "), "%s", out);
    free(out);

    /* status, results, plan, cancel of a finished job, catalog */
    r = s_json("status 1");
    cr_assert_str_eq(s_s(r, "state"), "done");
    cr_assert_eq(json_array_size(json_object_get(r, "stages")), 2);
    json_decref(r);
    cr_assert_eq(s_ctl(&out, "status 1"), 0);
    cr_assert(strstr(out, "job 1: done"), "%s", out);
    free(out);
    r = s_json("results 1");
    cr_assert_eq(json_array_size(json_object_get(r, "results")), 3);
    json_decref(r);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "plan %s/job.yaml", s_c.dir);
    r = s_json(cmd);
    cr_assert(json_is_object(json_object_get(r, "plan")));
    json_decref(r);
    r = s_json("cancel 1");
    cr_assert_str_eq(s_s(r, "state"), "done");
    json_decref(r);
    cr_assert_eq(s_ctl(&out, "cancel 1"), 0);
    cr_assert(strstr(out, "job 1 done"), "%s", out);
    free(out);

    /* YAML: the same values as JSON */
    s_yaml_matches_json("catalog");
    s_yaml_matches_json("logs 1");
    s_yaml_matches_json("results 1");

    /* exit codes: 1 refused, 2 usage */
    cr_assert_eq(s_ctl(NULL, "results 99"), 1);
    cr_assert_eq(s_ctl(NULL, "health nosuchnode"), 1);
    cr_assert_eq(s_ctl(NULL, "drain nosuchnode"), 1);
    cr_assert_eq(s_ctl(NULL, "frobnicate"), 2);
    cr_assert_eq(s_ctl(NULL, "nodes extra"), 2);
    cr_assert_eq(s_ctl(NULL, "-o xml nodes"), 2);
    cr_assert_eq(s_ctl(NULL, "status notanid"), 2);
    cr_assert_eq(s_ctl(NULL, "describe job"), 2);
    cr_assert_eq(s_ctl(NULL, "jobs --wait"), 2);
    cr_assert_eq(s_ctl(&out, "logs --help"), 0);
    cr_assert(strstr(out, "Example: pipectl logs 1"), "%s", out);
    free(out);
    cr_assert_eq(s_ctl(&out, "--help"), 0);
    cr_assert(strstr(out, "Exit status: 0 ok, 1") && strstr(out, "3 the coordinator"), "%s", out);
    free(out);
    tc_cluster_stop(&s_c);
}

Test(cluster_ops, drain_keeps_new_stages_off_and_persists)
{
    int threads[] = {1, 1};
    cr_assert_eq(tc_cluster_start(&s_c, 2, threads), 0, "cluster did not start");
    cr_assert_eq(tc_make_model(s_c.dir, "m", "--layers 4 --hidden 64 --vocab 128"), 0);
    s_prompts(2, 4);
    /* planner auto with no stage count: every live, undrained node may be used */
    char path[600], nodes[256];
    snprintf(path, sizeof(path), "%s/job.yaml", s_c.dir);
    tc_write(path, "model: m\nprompts: prompts.jsonl\nplanner: optimal\nmax_new_tokens: 4\n");
    int rc;
    char *res = tc_submit(&s_c, "job", &rc);
    cr_assert_eq(rc, 0);
    free(res);
    s_job_nodes(1, nodes, sizeof(nodes));
    cr_assert(strstr(nodes, "node0") && strstr(nodes, "node1"), "job 1 ran on %s", nodes);

    char *out;
    cr_assert_eq(s_ctl(&out, "drain node1"), 0);
    cr_assert(strstr(out, "drained"), "%s", out);
    free(out);
    json_t *r = s_json("nodes");
    cr_assert_str_eq(s_s(s_node(r, "node1"), "status"), "draining");
    cr_assert(json_is_true(json_object_get(s_node(r, "node1"), "draining")));
    json_decref(r);
    res = tc_submit(&s_c, "job", &rc);
    cr_assert_eq(rc, 0);
    free(res);
    s_job_nodes(2, nodes, sizeof(nodes));
    cr_assert_str_eq(nodes, "node0", "job 2 (after drain) ran on %s", nodes);

    /* a coordinator restart keeps the drain */
    kill(s_c.coord, SIGTERM);
    waitpid(s_c.coord, NULL, 0);
    tc_start_coord(&s_c, s_c.ep);
    cr_assert_eq(tc_wait_idle(&s_c, 2, 60), 0, "nodes did not register again");
    r = s_json("nodes");
    cr_assert_str_eq(s_s(s_node(r, "node1"), "status"), "draining");
    json_decref(r);
    res = tc_submit(&s_c, "job", &rc);
    cr_assert_eq(rc, 0);
    free(res);
    s_job_nodes(3, nodes, sizeof(nodes));
    cr_assert_str_eq(nodes, "node0", "job 3 (drained, restarted) ran on %s", nodes);

    cr_assert_eq(s_ctl(NULL, "undrain node1"), 0);
    r = s_json("nodes");
    cr_assert_str_eq(s_s(s_node(r, "node1"), "status"), "ready");
    json_decref(r);
    res = tc_submit(&s_c, "job", &rc);
    cr_assert_eq(rc, 0);
    free(res);
    s_job_nodes(4, nodes, sizeof(nodes));
    cr_assert(strstr(nodes, "node1"), "job 4 (after undrain) ran on %s", nodes);

    /* a killed daemon is unreachable within the heartbeat timeout (dead_after_ms 3000) */
    kill(s_c.node[1], SIGKILL);
    waitpid(s_c.node[1], NULL, 0);
    s_c.node[1] = 0;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    double took = 0;
    for (;;) {
        r = s_json("nodes");
        bool down = !strcmp(s_s(s_node(r, "node1"), "status"), "unreachable");
        json_decref(r);
        clock_gettime(CLOCK_MONOTONIC, &t);
        took = (t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) * 1e-9;
        if (down)
            break;
        cr_assert(took < 3.0 + 2.0, "node1 not unreachable after %.1f s", took);
        usleep(100 * 1000);
    }
    cr_assert_eq(s_ctl(&out, "health"), 0, "health must answer with a node down");
    cr_assert(strstr(out, "unreachable: node1"), "%s", out);
    free(out);
    cr_assert_eq(s_ctl(&out, "nodes"), 0);
    cr_assert(strstr(out, "unreachable"), "%s", out);
    free(out);
    tc_cluster_stop(&s_c);
}

Test(cluster_ops, settings_precedence_and_unreachable)
{
    int threads[] = {1};
    cr_assert_eq(tc_cluster_start(&s_c, 1, threads), 0, "cluster did not start");
    char *out;
    int port = tc_free_port();
    /* an unreachable coordinator: 3 */
    int rc = tc_sh(NULL, "%s/pipectl -c tcp://127.0.0.1:%d --timeout 1 nodes 2>/dev/null", tc_bin(),
                   port);
    cr_assert_eq(rc, 3, "unreachable: %d", rc);

    /* the user file: coordinator and output from it */
    char cfg[600], text[512];
    tc_sh(NULL, "mkdir -p %s/xdg/pipeld", s_c.dir);
    snprintf(cfg, sizeof(cfg), "%s/xdg/pipeld/pipectl.yaml", s_c.dir);
    snprintf(text, sizeof(text), "coordinator: %s\noutput: json\ntimeout_s: 5\n", s_c.ep);
    tc_write(cfg, text);
    const char *env = "env -u PIPECTL_COORDINATOR -u PIPELD_COORDINATOR -u PIPECTL_OUTPUT";
    rc = tc_sh(&out, "%s XDG_CONFIG_HOME=%s/xdg %s/pipectl nodes", env, s_c.dir, tc_bin());
    cr_assert_eq(rc, 0);
    cr_assert(out[0] == '{' && strstr(out, "\"nodes\""), "file's output json: %s", out);
    free(out);
    /* the environment over the file */
    rc = tc_sh(&out, "%s XDG_CONFIG_HOME=%s/xdg PIPECTL_OUTPUT=table %s/pipectl nodes", env,
               s_c.dir, tc_bin());
    cr_assert_eq(rc, 0);
    cr_assert(!strncmp(out, "NODE", 4), "env's table: %s", out);
    free(out);
    rc = tc_sh(NULL,
               "%s XDG_CONFIG_HOME=%s/xdg PIPECTL_COORDINATOR=tcp://127.0.0.1:%d "
               "PIPECTL_TIMEOUT=1 %s/pipectl nodes 2>/dev/null",
               env, s_c.dir, port, tc_bin());
    cr_assert_eq(rc, 3, "env's coordinator over the file's: %d", rc);
    /* the flags over the environment */
    rc = tc_sh(&out,
               "%s XDG_CONFIG_HOME=%s/xdg PIPECTL_COORDINATOR=tcp://127.0.0.1:%d "
               "PIPECTL_OUTPUT=table %s/pipectl -c %s -o yaml nodes",
               env, s_c.dir, port, tc_bin(), s_c.ep);
    cr_assert_eq(rc, 0);
    cr_assert(!strncmp(out, "nodes:", 6), "flag's yaml: %s", out);
    free(out);
    /* HOME/.config when XDG_CONFIG_HOME is not set */
    tc_sh(
        NULL,
        "mkdir -p %s/home/.config/pipeld && cp %s/xdg/pipeld/pipectl.yaml %s/home/.config/pipeld/",
        s_c.dir, s_c.dir, s_c.dir);
    rc = tc_sh(&out, "%s -u XDG_CONFIG_HOME HOME=%s/home %s/pipectl nodes", env, s_c.dir, tc_bin());
    cr_assert_eq(rc, 0);
    cr_assert(out[0] == '{', "~/.config's output json: %s", out);
    free(out);
    /* an unknown key: a usage error naming file:line:column */
    snprintf(cfg, sizeof(cfg), "%s/xdg/pipeld/pipectl.yaml", s_c.dir);
    tc_write(cfg, "output: json\ncoordinater: tcp://x:1\n");
    rc = tc_sh(&out, "%s XDG_CONFIG_HOME=%s/xdg %s/pipectl nodes 2>&1", env, s_c.dir, tc_bin());
    cr_assert_eq(rc, 2, "bad file: %d", rc);
    cr_assert(strstr(out, "pipectl.yaml:2:1") && strstr(out, "coordinater"), "%s", out);
    free(out);
    tc_write(cfg, "output: xml\n");
    rc = tc_sh(&out, "%s XDG_CONFIG_HOME=%s/xdg %s/pipectl nodes 2>&1", env, s_c.dir, tc_bin());
    cr_assert_eq(rc, 2, "bad output word: %d", rc);
    cr_assert(strstr(out, "pipectl.yaml:1:"), "%s", out);
    free(out);
    tc_cluster_stop(&s_c);
}

/* The counts of each bar redraw ("[####....]  40% 1/4 seqs, 120/512 tokens") in order. */
static int s_bar_counts(const char *text, long *counts, int max)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, "\r\033[K[")) && n < max; p++) {
        const char *t = strstr(p, " seqs, ");
        if (t)
            counts[n++] = strtol(t + 7, NULL, 10);
    }
    return n;
}

Test(cluster_ops, progress_bar_under_a_terminal)
{
    int threads[] = {1, 1};
    cr_assert_eq(tc_cluster_start(&s_c, 2, threads), 0, "cluster did not start");
    cr_assert_eq(tc_make_model(s_c.dir, "m",
                               "--layers 8 --hidden 256 --intermediate 512 --heads 4 "
                               "--kv-heads 2 --vocab 1024 --max-pos 1024"),
                 0);
    s_prompts(4, 8);
    tc_job(&s_c, "job", "m", "max_new_tokens: 600\nstop_at_eos: false\n");
    char *out;
    /* script gives pipectl a pseudo-terminal; its output is what the terminal showed */
    int rc = tc_sh(&out,
                   "script -qfec '%s/pipectl -c %s --timeout 5 submit %s/job.yaml --wait "
                   ">/dev/null' /dev/null",
                   tc_bin(), s_c.ep, s_c.dir);
    cr_assert_eq(rc, 0, "submit --wait under script: %d\n%s", rc, out);
    long counts[512];
    int n = s_bar_counts(out, counts, 512);
    cr_assert_geq(n, 3, "%d bar redraws:\n%s", n, out);
    int increases = 0;
    for (int i = 1; i < n; i++) {
        cr_assert_geq(counts[i], counts[i - 1], "the count went back: %ld then %ld", counts[i - 1],
                      counts[i]);
        increases += counts[i] > counts[i - 1];
    }
    cr_assert_geq(increases, 2, "the bar did not move:\n%s", out);
    cr_assert(strstr(out, "tok/s") && strstr(out, "busy s0"), "%s", out);
    free(out);
    /* not a terminal: plain lines, no bar */
    cr_assert_eq(
        tc_sh(&out, "%s/pipectl -c %s --timeout 5 status 1 --watch 2>&1", tc_bin(), s_c.ep), 0);
    cr_assert(!strstr(out, "\033[K") && strstr(out, "job 1 done"), "%s", out);
    free(out);
    /* a job that ends without results (canceled while followed): exit 1. Placed on a node that
     * is not there, it waits queued for the cancel (a job that runs could finish first) */
    tc_job(&s_c, "stuck", "m",
           "max_new_tokens: 4\nstop_at_eos: false\nplacement:\n  nodes: [elsewhere]\n");
    cr_assert_eq(tc_sh(&out,
                       "%s/pipectl -c %s --timeout 5 submit %s/stuck.yaml --wait >/dev/null "
                       "2>%s/w.err & p=$!; sleep 1; %s/pipectl -c %s cancel 2 >/dev/null; "
                       "wait $p; echo $?",
                       tc_bin(), s_c.ep, s_c.dir, s_c.dir, tc_bin(), s_c.ep),
                 0);
    cr_assert_eq(atoi(out), 1, "submit --wait of a canceled job: exit %s", out);
    free(out);
    cr_assert_eq(s_ctl(&out, "-o json status 2"), 0);
    cr_assert(strstr(out, "\"canceled\""), "%s", out);
    free(out);
    tc_cluster_stop(&s_c);
}
