/* The /metrics pages of a live local cluster: counters that move while a real job runs, every
 * name the Grafana dashboard queries declared, and /readyz turning 503 when the coordinator is
 * killed; each page checked by prom_util.h's parser (and promtool where installed). */
#include "job_util.h"
#include "prom_util.h"

static tc_cluster_t s_c;
static int s_passed;
static int s_port[3]; /* coordinator, node0, node1 */

static void s_teardown(void)
{
    tc_cluster_end(&s_c, s_passed);
}

/* GET a page with curl: the status code, and the body into *body_p. */
static int s_get(int port, const char *path, char **body_p)
{
    char *out;
    tc_sh(&out, "curl -s -m 5 -o %s/page.txt -w '%%{http_code}' http://127.0.0.1:%d%s", s_c.dir,
          port, path);
    int code = atoi(out);
    free(out);
    if (body_p)
        tc_sh(body_p, "cat %s/page.txt", s_c.dir);
    return code;
}

static void s_page(int port, p_page_t *page)
{
    char *text, err[256];
    cr_assert_eq(s_get(port, "/metrics", &text), 200);
    cr_assert(p_parse(text, page, err, sizeof(err)), "port %d: %s\n%s", port, err, text);
    int pt = p_promtool(text);
    cr_assert(pt == 0 || pt == -1, "promtool refused port %d's page (%d):\n%s", port, pt, text);
    free(text);
}

static void s_start(void)
{
    memset(&s_c, 0, sizeof(s_c));
    tc_mkdtemp(s_c.dir, sizeof(s_c.dir));
    snprintf(s_c.ep, sizeof(s_c.ep), "tcp://127.0.0.1:%d", tc_free_port());
    char bin[512], log[512], http[3][32], db[512];
    for (int i = 0; i < 3; i++) {
        s_port[i] = tc_free_port();
        snprintf(http[i], sizeof(http[i]), "127.0.0.1:%d", s_port[i]);
    }
    snprintf(bin, sizeof(bin), "%s/pipecoord", tc_bin());
    snprintf(log, sizeof(log), "%s/pipecoord.log", s_c.dir);
    snprintf(db, sizeof(db), "%s/coord.db", s_c.dir); /* its own state: no earlier jobs */
    s_c.coord = tc_spawn((char *[]){bin, "--endpoint", s_c.ep, "--http", http[0], "--state-db", db,
                                    "--log-level", "debug", NULL},
                         log);
    snprintf(bin, sizeof(bin), "%s/pipeld", tc_bin());
    for (int i = 0; i < 2; i++) {
        char name[16];
        snprintf(name, sizeof(name), "node%d", i);
        snprintf(log, sizeof(log), "%s/%s.log", s_c.dir, name);
        s_c.node[s_c.n_nodes++] =
            tc_spawn((char *[]){bin, "--name", name, "--coordinator", s_c.ep, "--threads", "1",
                                "--http", http[1 + i], NULL},
                     log);
    }
    cr_assert_eq(tc_wait_idle(&s_c, 2, 60), 0, "nodes did not register");
    char path[512];
    snprintf(path, sizeof(path), "%s/prompts.jsonl", s_c.dir);
    tc_write(path, "[1, 15, 27, 99]\n[1, 7]\n[1, 100, 101, 102, 103]\n[3, 200, 5]\n");
    cr_assert_eq(tc_make_model(s_c.dir, "m",
                               "--layers 4 --hidden 64 --intermediate 160 "
                               "--heads 4 --kv-heads 2 --vocab 256 --seed 3 "
                               "--max-pos 512"),
                 0);
}

/* Every metric the Grafana dashboard queries is one the processes declare. */
static void s_dashboard_names_exist(const p_page_t *coord, const p_page_t *node)
{
    char *text;
    tc_sh(&text, "cat %s/etc/grafana/pipeld.json", PL_SOURCE_DIR);
    json_t *d = json_loads(text, 0, NULL);
    cr_assert_not_null(d, "etc/grafana/pipeld.json is not JSON");
    json_decref(d);
    int seen = 0;
    for (char *p = text; (p = strstr(p, "pipe"));) {
        if (strncmp(p, "pipecoord_", 10) && strncmp(p, "pipeld_", 7)) {
            p++;
            continue;
        }
        char name[128];
        size_t n = strspn(p, "abcdefghijklmnopqrstuvwxyz_");
        snprintf(name, sizeof(name), "%.*s", (int)n, p);
        p += n;
        static const char *suf[] = {"_bucket", "_sum", "_count"};
        for (int k = 0; k < 3; k++)
            if (p_ends(name, suf[k]))
                name[strlen(name) - strlen(suf[k])] = '\0';
        cr_assert(p_family(coord, name) >= 0 || p_family(node, name) >= 0,
                  "the dashboard queries %s, which no process exports", name);
        seen++;
    }
    cr_assert_gt(seen, 10);
    free(text);
}

TestSuite(metrics_cluster, .fini = s_teardown, .timeout = 120);

Test(metrics_cluster, counters_move_while_a_job_runs)
{
    static p_page_t before[3], after[3];
    s_start();
    usleep(600 * 1000); /* the coordinator sweeps its state into the metrics 4 times a second */
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(s_get(s_port[i], "/livez", NULL), 200);
        cr_assert_eq(s_get(s_port[i], "/readyz", NULL), 200, "port %d not ready", s_port[i]);
        cr_assert_eq(s_get(s_port[i], "/nope", NULL), 404);
        s_page(s_port[i], &before[i]);
    }
    cr_assert_eq(p_value(&before[0], "pipecoord_nodes", "state=\"idle\""), 2);
    cr_assert_eq(p_value(&before[0], "pipecoord_jobs", "state=\"done\""), 0);
    cr_assert_eq(p_value(&before[1], "pipeld_microbatches_total", NULL), 0);

    /* 4 sequences of 12 new tokens over 2 stages, in 2 microbatches */
    tc_job(&s_c, "j", "m", "max_new_tokens: 12\nstages: 2\nmicrobatches: 2\n");
    int rc;
    char *got = tc_submit(&s_c, "j", &rc);
    cr_assert_eq(rc, 0, "pipectl failed: %s", tc_err(&s_c, "j"));
    free(got);
    usleep(1500 * 1000); /* a heartbeat and a sweep later */
    for (int i = 0; i < 3; i++)
        s_page(s_port[i], &after[i]);

    const p_page_t *co = &after[0];
    cr_assert_eq(p_value(co, "pipecoord_jobs", "state=\"done\""), 1);
    cr_assert_eq(p_value(co, "pipecoord_queue_depth", NULL), 0);
    cr_assert_eq(p_value(co, "pipecoord_job_duration_seconds_count", "state=\"done\""), 1);
    cr_assert_gt(p_value(co, "pipecoord_job_duration_seconds_sum", "state=\"done\""), 0);
    /* every sequence gets its 12 tokens (no stop at EOS unless sampled: at most 48) */
    double tok = p_value(co, "pipecoord_tokens_generated_total", NULL);
    cr_assert(tok >= 4 && tok <= 48, "coordinator counted %g tokens", tok);
    /* the daemons: both computed, the last stage's node sampled what the coordinator counted,
     * both sent activations or tokens to the other stage, and they hold no KV slots now */
    double node_tok = 0, mb0 = 0, mb1 = 0;
    for (int i = 1; i < 3; i++) {
        const p_page_t *p = &after[i];
        double mb = p_value(p, "pipeld_microbatches_total", NULL);
        cr_assert_gt(mb, 0, "node%d computed nothing", i - 1);
        cr_assert_eq(p_value(p, "pipeld_stage_compute_seconds_count", NULL), mb,
                     "one compute observation per microbatch step");
        cr_assert_gt(p_sum(p, "pipeld_link_bytes_total"), 0, "node%d sent nothing", i - 1);
        cr_assert_eq(p_value(p, "pipeld_kv_slots_used", NULL), 0, "node%d keeps KV slots", i - 1);
        cr_assert_eq(p_value(p, "pipeld_heartbeat_misses_total", NULL), 0);
        node_tok += p_value(p, "pipeld_tokens_generated_total", NULL);
        if (i == 1)
            mb0 = mb;
        else
            mb1 = mb;
    }
    cr_assert_eq(node_tok, tok, "daemons counted %g tokens, the coordinator %g", node_tok, tok);
    cr_assert_eq(mb0, mb1, "both stages run every microbatch step");
    s_dashboard_names_exist(&after[0], &after[1]);
    s_passed = 1;
}

Test(metrics_cluster, readyz_turns_503_when_the_coordinator_is_killed)
{
    s_start();
    cr_assert_eq(s_get(s_port[1], "/readyz", NULL), 200);
    kill(s_c.coord, SIGKILL);
    waitpid(s_c.coord, NULL, 0);
    s_c.coord = 0;
    /* dead_after is 3 s by default: not ready within that and a little more */
    int code = 200;
    for (int k = 0; k < 80 && code == 200; k++) {
        usleep(100 * 1000);
        code = s_get(s_port[1], "/readyz", NULL);
    }
    cr_assert_eq(code, 503);
    char *body = NULL;
    for (int k = 0; k < 30 && (code = s_get(s_port[2], "/readyz", &body)) == 200; k++) {
        free(body);
        usleep(100 * 1000);
    }
    cr_assert_eq(code, 503, "node1 still ready");
    cr_assert(strstr(body, "coordinator has not answered"), "%s", body);
    free(body);
    cr_assert_eq(s_get(s_port[1], "/livez", NULL), 200, "alive all the same");
    static p_page_t page;
    s_page(s_port[1], &page);
    cr_assert_gt(p_value(&page, "pipeld_heartbeat_misses_total", NULL), 0);
    /* a coordinator back at the same endpoint: the daemons register again and are ready */
    char bin[512], log[512], db[512];
    snprintf(bin, sizeof(bin), "%s/pipecoord", tc_bin());
    snprintf(log, sizeof(log), "%s/pipecoord2.log", s_c.dir);
    snprintf(db, sizeof(db), "%s/coord.db", s_c.dir);
    s_c.coord = tc_spawn((char *[]){bin, "--endpoint", s_c.ep, "--state-db", db, NULL}, log);
    for (int k = 0; k < 100 && (code = s_get(s_port[1], "/readyz", NULL)) != 200; k++)
        usleep(100 * 1000);
    cr_assert_eq(code, 200, "node0 not ready again after the coordinator came back");
    s_passed = 1;
}
